"""EKS managed node groups: the `eks` PoolProvider.

A pool is a managed node group of one EKS cluster (all of them, or the ones the config names). Its
nodes are the Nodes labelled `eks.amazonaws.com/nodegroup=<node group>` (EKS puts the label on every
node of a managed node group); each Node's `spec.providerID` (`aws:///<zone>/<instance id>`) names the
EC2 instance behind it. desired/min/max are the node group's `scalingConfig`.

- Removing drained nodes: lowering `desiredSize` would let the Auto Scaling group choose which
  instances to terminate (its termination policy), not the nodes scalebot drained. So, as
  cluster-autoscaler does, each drained node's instance is terminated with
  `autoscaling:TerminateInstanceInAutoScalingGroup` and `ShouldDecrementDesiredCapacity=true`:
  exactly those instances go and the group's desired capacity drops by one each. If that would go
  below the node group's `minSize` (the Auto Scaling group refuses it), `minSize` is lowered first
  with `eks:UpdateNodegroupConfig`, and the terminations wait until the group's MinSize shows it.
  Afterwards the node group's `scalingConfig` is set to the new desired size (EKS may show a stale
  desiredSize for a while after the group changed under it).
- `set_size(N)`: `eks:UpdateNodegroupConfig` with desired N; while a restore record exists (the
  pool is asleep) its recorded `minSize`/`maxSize` come back with it, so a wake restores
  min/max/desired exactly. To 0: minSize 0 and desiredSize 0; maxSize stays (EKS requires >= 1).
- Every update is followed with `eks:DescribeUpdate` until it is Successful (Failed or Cancelled
  raise with EKS's errors; one not finished within 10 minutes is a CloudOperationTimeout, and the
  runner tries the idempotent step again). Where the endpoint does not serve DescribeUpdate, the
  provider polls `eks:DescribeNodegroup` until the node group is ACTIVE with the requested
  scalingConfig.
- The restore record (the sizes wake comes back to) lives in the ConfigMap
  `scalebot-eks-<node group>` in scalebot's namespace of the workload cluster, written only if
  absent (the base contract), so it survives a lost database without needing tag rights on the
  node group.

Pure parts (instance ids from providerIDs, which instances a removal terminates, the scaling config
for a size) are module functions over small dataclasses; AWS sits behind `NodegroupApi`
(engine.pools.eks_aws implements it with boto3). What the three cloud providers share comes from
engine.pools.cloud: the provider's shell (CloudPoolProvider: reads, records, waits), the Nodes and
records (KubeRecords), the saved bounds (bounds_for) and the refusal of foreign victims.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine.domain.node_removal import NodeRemoval
from engine.pools.base import Pool, PoolSizeError, RestoreRecord
from engine.pools.cloud import (
    Bounds,
    CloudNode,
    CloudOperationError,
    CloudPoolNotFound,
    CloudPoolProvider,
    KubeRecords,
    Machine,
    bounds_for,
    check_victims,
)
from engine.pools.cloud import record_name as cloud_record_name
from engine.pools.common import DEFAULT_REQUEST_TIMEOUT_SECONDS

log = logging.getLogger(__name__)

PROVIDER_NAME = "eks"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
NODEGROUP_NAME_LABEL = "scalebot.io/eks-nodegroup"
CLUSTER_ANNOTATION = "scalebot.io/eks-cluster"
SETTLING_STATUSES = frozenset({"CREATING", "UPDATING"})
"""Node group statuses while EKS is still applying a change."""
GONE_STATES = ("Terminating", "Terminated")
"""Lifecycle states (and their `:Wait`/`:Proceed` forms) of instances already on their way out."""
DEFAULT_UPDATE_TIMEOUT_SECONDS = 600.0
UPDATE_POLL_SECONDS = 2.0


# --------------------------------------------------------------------------------------------------
# What crosses the AWS port


@dataclass(frozen=True, slots=True)
class Scaling:
    """A node group's scalingConfig."""

    min_size: int
    max_size: int
    desired: int

    def __str__(self) -> str:
        return f"min {self.min_size}, max {self.max_size}, desired {self.desired}"


@dataclass(frozen=True, slots=True)
class Nodegroup:
    name: str
    status: str
    """ACTIVE, UPDATING, DEGRADED, ... (EKS's node group status)."""
    scaling: Scaling
    autoscaling_groups: tuple[str, ...]
    health_issues: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupInstance:
    instance_id: str
    zone: str
    lifecycle_state: str
    """InService, Pending, Terminating, Terminating:Wait, ... (the Auto Scaling group's view)."""

    @property
    def leaving(self) -> bool:
        return self.lifecycle_state.startswith(GONE_STATES)


@dataclass(frozen=True, slots=True)
class AutoScalingGroup:
    name: str
    min_size: int
    max_size: int
    desired: int
    instances: tuple[GroupInstance, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateStatus:
    update_id: str
    status: str
    """InProgress, Successful, Failed or Cancelled."""
    errors: tuple[str, ...] = ()


class NodegroupNotFound(CloudPoolNotFound):
    """The EKS cluster has no node group of that name."""


class NodegroupApi(Protocol):
    """The AWS calls this provider makes, for one EKS cluster."""

    cluster: str

    def list_nodegroups(self) -> list[str]: ...

    def describe_nodegroup(self, name: str) -> Nodegroup:
        """Raises NodegroupNotFound."""
        ...

    def update_scaling(self, name: str, scaling: Scaling) -> str:
        """eks:UpdateNodegroupConfig with the whole scalingConfig; returns the update's id."""
        ...

    def describe_update(self, name: str, update_id: str) -> UpdateStatus | None:
        """eks:DescribeUpdate; None when the endpoint does not serve DescribeUpdate."""
        ...

    def describe_groups(self, names: Sequence[str]) -> list[AutoScalingGroup]: ...

    def terminate_instance(self, instance_id: str) -> None:
        """TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity=true."""
        ...


class NodegroupUpdateError(CloudOperationError):
    """EKS reported an update Failed or Cancelled (one not finished in time: CloudOperationTimeout)."""


# --------------------------------------------------------------------------------------------------
# Pure parts


def instance_id(provider_id: str) -> str:
    """The EC2 instance id in `aws:///<zone>/<instance id>`; "" for any other providerID."""
    if not provider_id.startswith("aws://"):
        return ""
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if re.fullmatch(r"i-[0-9a-f]+", last) else ""


INSTANCE = Machine(
    "an EC2 instance in spec.providerID (aws:///<zone>/<instance id>)",
    lambda provider_id: bool(instance_id(provider_id)),
)


@dataclass(frozen=True, slots=True)
class Removal:
    """What removing drained nodes from a node group does, decided before any call."""

    terminate: tuple[str, ...]
    """Instance ids to terminate (with decrement), sorted."""
    already_gone: tuple[str, ...]
    """Named nodes whose instance is no longer in the group or already leaving it."""
    lower_min_first: Scaling | None
    """The scalingConfig to apply before terminating, when the group's minimum is in the way."""
    after: Scaling
    """The node group's scalingConfig once the instances are terminated."""


def plan_removal(
    nodegroup: Nodegroup,
    groups: Sequence[AutoScalingGroup],
    nodes: Sequence[CloudNode],
    chosen: Sequence[str],
) -> Removal:
    """Which instances go for the drained `chosen` nodes, and the scaling config around it.

    Raises NodeRemovalError for a chosen node of another node group, or without an EC2 instance in
    its providerID: terminating it would shrink the wrong group, or nothing at all.
    """
    by_name = check_victims(nodes, chosen, pool=nodegroup.name, kind="node group", machine=INSTANCE)
    live = {i.instance_id for g in groups for i in g.instances if not i.leaving}
    terminate, gone = [], []
    for name in sorted(set(chosen)):
        node = by_name.get(name)
        instance = instance_id(node.provider_id) if node is not None else ""
        if instance in live:
            terminate.append(instance)
        else:
            gone.append(name)
    desired_now = sum(g.desired for g in groups) if groups else nodegroup.scaling.desired
    target = max(0, desired_now - len(terminate))
    current = nodegroup.scaling
    lower_first = None
    if terminate and target < current.min_size:
        lower_first = Scaling(min_size=target, max_size=current.max_size, desired=desired_now)
    after = Scaling(min_size=min(current.min_size, target), max_size=current.max_size, desired=target)
    return Removal(tuple(sorted(terminate)), tuple(gone), lower_first, after)


def scaling_for(size: int, current: Scaling, record: RestoreRecord | None) -> Scaling:
    """The scalingConfig that asks for `size` nodes.

    0: min 0, desired 0, max kept (EKS requires maxSize >= 1). Above 0 with a restore record (the
    pool is asleep): the recorded min and max, each only as far as `size` allows, so the recorded
    size gets back exactly what was recorded. Otherwise min lowered / max raised only if `size`
    is outside them.
    """
    bounds = bounds_for(size, Bounds(True, current.min_size, current.max_size), record)
    return Scaling(min_size=bounds.min_size, max_size=max(bounds.max_size, 1), desired=size)


def record_name(nodegroup: str) -> str:
    """`scalebot-eks-<node group>`; a node group name that is no valid object name gets a hashed one."""
    return cloud_record_name(PROVIDER_NAME, nodegroup)


def progress_text(nodegroup: Nodegroup, groups: Sequence[AutoScalingGroup]) -> str:
    """One line on the node group and its instances, e.g. "node group UPDATING; 2 of 3 InService"."""
    parts = [f"node group {nodegroup.status}"]
    if groups:
        instances = [i for g in groups for i in g.instances]
        serving = sum(1 for i in instances if i.lifecycle_state == "InService")
        desired = sum(g.desired for g in groups)
        line = f"{serving} of {desired} instance{'s' if desired != 1 else ''} InService"
        leaving = sum(1 for i in instances if i.leaving)
        launching = sum(1 for i in instances if i.lifecycle_state.startswith("Pending"))
        if launching:
            line += f", {launching} launching"
        if leaving:
            line += f", {leaving} terminating"
        parts.append(line)
    parts.extend(nodegroup.health_issues)
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------
# The Kubernetes side: Nodes, and the restore records' ConfigMaps


def cluster_side(
    api_client: Any,
    *,
    namespace: str,
    eks_cluster: str,
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
) -> KubeRecords:
    """The cluster side the cloud providers share: Nodes by the node group label, records in
    ConfigMaps `scalebot-eks-<node group>` of `namespace`, under the names eks records have always had."""
    return KubeRecords(
        api_client,
        provider=PROVIDER_NAME,
        pool_label=NODEGROUP_LABEL,
        namespace=namespace,
        cloud_cluster=eks_cluster,
        pool_name_label=NODEGROUP_NAME_LABEL,
        cluster_annotation=CLUSTER_ANNOTATION,
        request_timeout_seconds=request_timeout_seconds,
    )


# --------------------------------------------------------------------------------------------------
# The provider


class EksPoolProvider(CloudPoolProvider[Nodegroup, NodegroupApi]):
    """PoolProvider over the managed node groups of one EKS cluster (see the module docstring)."""

    name = PROVIDER_NAME
    cloud = "EKS"
    kind = "node group"

    operation_timeout_seconds = DEFAULT_UPDATE_TIMEOUT_SECONDS
    poll_seconds = UPDATE_POLL_SECONDS
    _describe_update = True
    """False once the endpoint answered that it does not serve DescribeUpdate."""

    # -- sizing ------------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Nothing to mark; refuses nodes of another node group before the drain starts."""
        plan_removal(self._cloud_pool(pool), (), self._kube.named_nodes(nodes), nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Terminate exactly the drained nodes' instances, each decrementing the desired capacity."""
        nodegroup = self._cloud_pool(pool)
        groups = self._cloud.describe_groups(nodegroup.autoscaling_groups)
        removal = plan_removal(nodegroup, groups, self._kube.named_nodes(nodes), nodes)
        if removal.already_gone:
            log.info("EKS node group %s: already gone: %s", pool, ", ".join(removal.already_gone))
        if removal.lower_min_first is not None:
            self._apply(pool, removal.lower_min_first, "minSize lowered so its instances can be terminated")
            self._wait_for_group_minimum(pool, nodegroup.autoscaling_groups, removal.lower_min_first.min_size)
        for instance in removal.terminate:
            self._cloud.terminate_instance(instance)
            log.info(
                "EKS node group %s: terminated instance %s, desired capacity decremented", pool, instance
            )
        if self._cloud.describe_nodegroup(pool).scaling != removal.after:
            self._apply(pool, removal.after, "scalingConfig set after the terminations")

    def set_size(self, pool: str, size: int) -> None:
        nodegroup = self._cloud_pool(pool)
        try:
            want = scaling_for(size, nodegroup.scaling, self._kube.read_record(pool))
        except PoolSizeError as exc:
            raise PoolSizeError(f"node group {pool}: {exc}") from None
        if nodegroup.scaling != want:
            self._apply(pool, want, f"asked for {size} node{'s' if size != 1 else ''}")

    # -- plumbing ----------------------------------------------------------------------------------

    def _apply(self, pool: str, scaling: Scaling, why: str) -> None:
        update_id = self._cloud.update_scaling(pool, scaling)
        log.info("EKS node group %s: UpdateNodegroupConfig %s (%s), update %s", pool, scaling, why, update_id)
        self._follow(pool, update_id, scaling)

    def _follow(self, pool: str, update_id: str, want: Scaling) -> None:
        """Until the update is Successful (DescribeUpdate), or, where the endpoint lacks
        DescribeUpdate, until DescribeNodegroup shows the node group settled with `want`."""

        def done() -> bool:
            if self._describe_update:
                status = self._cloud.describe_update(pool, update_id)
                if status is not None:
                    if status.status in ("Failed", "Cancelled"):
                        detail = "; ".join(status.errors) or "no error given"
                        raise NodegroupUpdateError(
                            f"node group {pool}: update {update_id} ({want}) {status.status}: {detail}"
                        )
                    return status.status == "Successful"
                self._describe_update = False
                log.warning(
                    "The EKS endpoint does not serve DescribeUpdate: following updates through "
                    "DescribeNodegroup (status and scalingConfig)"
                )
            nodegroup = self._cloud.describe_nodegroup(pool)
            return nodegroup.status not in SETTLING_STATUSES and nodegroup.scaling == want

        self._wait(done, f"node group {pool}: update {update_id} ({want})")

    def _wait_for_group_minimum(self, pool: str, names: Sequence[str], minimum: int) -> None:
        """Until every Auto Scaling group of the node group has MinSize <= `minimum`: it refuses a
        termination with decrement below its MinSize, and EKS applies a node group's minSize to it."""

        def allowed() -> bool:
            return all(g.min_size <= minimum for g in self._cloud.describe_groups(names))

        self._wait(allowed, f"node group {pool}: the Auto Scaling group's MinSize down to {minimum}")

    # -- what CloudPoolProvider asks of a cloud ----------------------------------------------------

    def _cloud_names(self) -> list[str]:
        return self._cloud.list_nodegroups()

    def _fetch(self, name: str) -> Nodegroup:
        return self._cloud.describe_nodegroup(name)

    def _to_pool(
        self, cloud_pool: Nodegroup, nodes: Sequence[CloudNode], record: RestoreRecord | None
    ) -> Pool:
        nodegroup = cloud_pool
        mine = [n for n in nodes if n.pool == nodegroup.name]
        groups = self._cloud.describe_groups(nodegroup.autoscaling_groups)
        return Pool(
            name=nodegroup.name,
            provider=self.name,
            desired=nodegroup.scaling.desired,
            min_size=nodegroup.scaling.min_size,
            max_size=nodegroup.scaling.max_size,
            nodes=tuple(sorted(n.name for n in mine)),
            ready_nodes=tuple(sorted(n.name for n in mine if n.ready)),
            restore=record,
            removal=NodeRemoval.MACHINE,
            removal_reason=f"EKS cluster {self._cloud.cluster}: the drained nodes' instances are terminated",
            progress=progress_text(nodegroup, groups),
            settling=nodegroup.status in SETTLING_STATUSES,
        )

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
  raise with EKS's errors). Where the endpoint does not serve DescribeUpdate, the provider polls
  `eks:DescribeNodegroup` until the node group is ACTIVE with the requested scalingConfig.
- The restore record (the sizes wake comes back to) lives in the ConfigMap
  `scalebot-eks-<node group>` in scalebot's namespace of the workload cluster, written only if
  absent (the base contract), so it survives a lost database without needing tag rights on the
  node group.

Pure parts (instance ids from providerIDs, which instances a removal terminates, the scaling config
for a size) are module functions over small dataclasses; AWS sits behind `NodegroupApi`
(engine.pools.eks_aws implements it with boto3). Its Nodes and records go through
engine.pools.cloud.KubeRecords, which the gke and aks providers share.

One module over 500 lines on purpose: it is one provider, whose pure rules and AWS calls above
follow one node group through one removal or resize.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine.domain.clock import Clock, SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import RawObject
from engine.domain.node_removal import NodeRemoval
from engine.pools.base import Pool, PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.cloud import CloudNode, KubeRecords
from engine.pools.cloud import record_name as cloud_record_name
from engine.pools.common import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    NodeRemovalError,
    encode_restore,
)

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


class NodegroupNotFound(ScalebotError, LookupError):
    """The EKS cluster has no node group of that name."""

    category = Category.CONFIGURATION


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


class NodegroupUpdateError(PoolSizeError):
    """EKS reported an update Failed or Cancelled, or it did not finish in time."""


# --------------------------------------------------------------------------------------------------
# Pure parts


@dataclass(frozen=True, slots=True)
class EksNode:
    name: str
    nodegroup: str
    instance_id: str
    """Empty when the providerID names no EC2 instance."""
    ready: bool

    @classmethod
    def from_raw(cls, raw: RawObject) -> EksNode:
        meta = raw.get("metadata") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (raw.get("status") or {}).get("conditions") or ()
        )
        return cls(
            name=str(meta.get("name") or ""),
            nodegroup=str((meta.get("labels") or {}).get(NODEGROUP_LABEL) or ""),
            instance_id=instance_id(str((raw.get("spec") or {}).get("providerID") or "")),
            ready=ready,
        )


def instance_id(provider_id: str) -> str:
    """The EC2 instance id in `aws:///<zone>/<instance id>`; "" for any other providerID."""
    if not provider_id.startswith("aws://"):
        return ""
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if re.fullmatch(r"i-[0-9a-f]+", last) else ""


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
    nodes: Sequence[EksNode],
    chosen: Sequence[str],
) -> Removal:
    """Which instances go for the drained `chosen` nodes, and the scaling config around it.

    Raises NodeRemovalError for a chosen node of another node group, or without an EC2 instance in
    its providerID: terminating it would shrink the wrong group, or nothing at all.
    """
    by_name = {n.name: n for n in nodes}
    foreign = sorted(
        f"{n} ({by_name[n].nodegroup or 'no node group label'})"
        for n in chosen
        if n in by_name and by_name[n].nodegroup != nodegroup.name
    )
    if foreign:
        raise NodeRemovalError(f"nodes not in node group {nodegroup.name}: {', '.join(foreign)}")
    no_instance = sorted(n for n in chosen if n in by_name and not by_name[n].instance_id)
    if no_instance:
        raise NodeRemovalError(
            f"nodes without an EC2 instance in spec.providerID (aws:///<zone>/<instance id>): "
            f"{', '.join(no_instance)}"
        )
    live = {i.instance_id for g in groups for i in g.instances if not i.leaving}
    terminate, gone = [], []
    for name in sorted(set(chosen)):
        node = by_name.get(name)
        if node is not None and node.instance_id in live:
            terminate.append(node.instance_id)
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
    if size < 0:
        raise PoolSizeError(f"size must be 0 or more, not {size}")
    if size == 0:
        return Scaling(min_size=0, max_size=max(current.max_size, 1), desired=0)
    min_size, max_size = current.min_size, current.max_size
    if record is not None:
        min_size = record.min_size
        max_size = record.max_size if record.max_size is not None else current.max_size
    return Scaling(min_size=min(min_size, size), max_size=max(max_size, size), desired=size)


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
# The Kubernetes side: Nodes, and the restore record's ConfigMap


class ClusterSide(Protocol):
    """What the provider reads and writes in the EKS cluster's API server."""

    def nodes(self, nodegroup: str | None) -> list[EksNode]:
        """Nodes of one node group (None: of every managed node group)."""
        ...

    def named_nodes(self, names: Sequence[str]) -> list[EksNode]:
        """The named Nodes whatever their labels say; gone ones are skipped."""
        ...

    def read_record(self, pool: str) -> RestoreRecord | None: ...

    def records(self) -> dict[str, RestoreRecord]: ...

    def write_record(self, pool: str, record: RestoreRecord) -> bool:
        """Write unless a record exists; True if written."""
        ...

    def clear_record(self, pool: str) -> None: ...


class KubeClusterSide:
    """ClusterSide over engine.pools.cloud.KubeRecords (what the cloud providers share): Nodes by
    the node group label, records in ConfigMaps `scalebot-eks-<node group>` of `namespace`."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        eks_cluster: str,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._records = KubeRecords(
            api_client,
            provider=PROVIDER_NAME,
            pool_label=NODEGROUP_LABEL,
            namespace=namespace,
            cloud_cluster=eks_cluster,
            pool_name_label=NODEGROUP_NAME_LABEL,
            cluster_annotation=CLUSTER_ANNOTATION,
            request_timeout_seconds=request_timeout_seconds,
        )
        self.namespace = namespace
        self.eks_cluster = eks_cluster

    def nodes(self, nodegroup: str | None) -> list[EksNode]:
        return [_eks_node(n) for n in self._records.nodes(nodegroup)]

    def named_nodes(self, names: Sequence[str]) -> list[EksNode]:
        return [_eks_node(n) for n in self._records.named_nodes(names)]

    def read_record(self, pool: str) -> RestoreRecord | None:
        return self._records.read_record(pool)

    def records(self) -> dict[str, RestoreRecord]:
        return self._records.records()

    def write_record(self, pool: str, record: RestoreRecord) -> bool:
        return self._records.write_record(pool, record)

    def clear_record(self, pool: str) -> None:
        self._records.clear_record(pool)


def _eks_node(node: CloudNode) -> EksNode:
    return EksNode(node.name, node.pool, instance_id(node.provider_id), node.ready)


# --------------------------------------------------------------------------------------------------
# The provider


class EksPoolProvider:
    """PoolProvider over the managed node groups of one EKS cluster (see the module docstring)."""

    name = PROVIDER_NAME

    def __init__(
        self,
        aws: NodegroupApi,
        kube: ClusterSide,
        *,
        nodegroups: Sequence[str] = (),
        clock: Clock | None = None,
        update_timeout_seconds: float = DEFAULT_UPDATE_TIMEOUT_SECONDS,
    ) -> None:
        """`aws`: the EKS cluster's node groups; `kube`: its Nodes and scalebot's records.
        `nodegroups`: the pools (empty: every managed node group of the cluster)."""
        self._aws = aws
        self._kube = kube
        self._clock: Clock = clock or SystemClock()
        self._update_timeout = update_timeout_seconds
        self._describe_update = True
        self.nodegroups = tuple(nodegroups)

    # -- reads -------------------------------------------------------------------------------------

    def pool_names(self) -> list[str]:
        return sorted(self.nodegroups) if self.nodegroups else sorted(self._aws.list_nodegroups())

    def list_pools(self) -> list[Pool]:
        nodes = self._kube.nodes(None)
        records = self._kube.records()
        return [self._pool(self._nodegroup(n), nodes, records.get(n)) for n in self.pool_names()]

    def get_pool(self, name: str) -> Pool:
        nodegroup = self._nodegroup(name)
        return self._pool(nodegroup, self._kube.nodes(name), self._kube.read_record(name))

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        self._nodegroup(pool)
        written = self._kube.write_record(pool, record)
        if written:
            log.info("Recorded restore state of EKS node group %s: %s", pool, encode_restore(record))
        return written

    def clear_restore(self, pool: str) -> None:
        self._kube.clear_record(pool)

    # -- sizing ------------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Nothing to mark; refuses nodes of another node group before the drain starts."""
        plan_removal(self._nodegroup(pool), (), self._kube.named_nodes(nodes), nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Terminate exactly the drained nodes' instances, each decrementing the desired capacity."""
        nodegroup = self._nodegroup(pool)
        groups = self._aws.describe_groups(nodegroup.autoscaling_groups)
        removal = plan_removal(nodegroup, groups, self._kube.named_nodes(nodes), nodes)
        if removal.already_gone:
            log.info("EKS node group %s: already gone: %s", pool, ", ".join(removal.already_gone))
        if removal.lower_min_first is not None:
            self._apply(pool, removal.lower_min_first, "minSize lowered so its instances can be terminated")
            self._wait_for_group_minimum(pool, nodegroup.autoscaling_groups, removal.lower_min_first.min_size)
        for instance in removal.terminate:
            self._aws.terminate_instance(instance)
            log.info(
                "EKS node group %s: terminated instance %s, desired capacity decremented", pool, instance
            )
        if self._aws.describe_nodegroup(pool).scaling != removal.after:
            self._apply(pool, removal.after, "scalingConfig set after the terminations")

    def set_size(self, pool: str, size: int) -> None:
        nodegroup = self._nodegroup(pool)
        try:
            want = scaling_for(size, nodegroup.scaling, self._kube.read_record(pool))
        except PoolSizeError as exc:
            raise PoolSizeError(f"node group {pool}: {exc}") from None
        if nodegroup.scaling != want:
            self._apply(pool, want, f"asked for {size} node{'s' if size != 1 else ''}")

    # -- plumbing ----------------------------------------------------------------------------------

    def _apply(self, pool: str, scaling: Scaling, why: str) -> None:
        update_id = self._aws.update_scaling(pool, scaling)
        log.info("EKS node group %s: UpdateNodegroupConfig %s (%s), update %s", pool, scaling, why, update_id)
        self._follow(pool, update_id, scaling)

    def _follow(self, pool: str, update_id: str, want: Scaling) -> None:
        """Until the update is Successful (DescribeUpdate), or, where the endpoint lacks
        DescribeUpdate, until DescribeNodegroup shows the node group settled with `want`."""
        deadline = self._clock.monotonic() + self._update_timeout
        while True:
            if self._describe_update:
                status = self._aws.describe_update(pool, update_id)
                if status is None:
                    self._describe_update = False
                    log.warning(
                        "The EKS endpoint does not serve DescribeUpdate: following updates through "
                        "DescribeNodegroup (status and scalingConfig)"
                    )
                elif status.status == "Successful":
                    return
                elif status.status in ("Failed", "Cancelled"):
                    detail = "; ".join(status.errors) or "no error given"
                    raise NodegroupUpdateError(
                        f"node group {pool}: update {update_id} ({want}) {status.status}: {detail}"
                    )
            if not self._describe_update:
                nodegroup = self._aws.describe_nodegroup(pool)
                if nodegroup.status not in SETTLING_STATUSES and nodegroup.scaling == want:
                    return
            if self._clock.monotonic() >= deadline:
                raise NodegroupUpdateError(
                    f"node group {pool}: update {update_id} ({want}) not finished after "
                    f"{self._update_timeout:.0f} s"
                )
            self._clock.sleep(UPDATE_POLL_SECONDS)

    def _wait_for_group_minimum(self, pool: str, names: Sequence[str], minimum: int) -> None:
        """Until every Auto Scaling group of the node group has MinSize <= `minimum`: it refuses a
        termination with decrement below its MinSize, and EKS applies a node group's minSize to it."""
        deadline = self._clock.monotonic() + self._update_timeout
        while True:
            high = [
                f"{g.name} ({g.min_size})" for g in self._aws.describe_groups(names) if g.min_size > minimum
            ]
            if not high:
                return
            if self._clock.monotonic() >= deadline:
                raise NodegroupUpdateError(
                    f"node group {pool}: the Auto Scaling group's MinSize is still above {minimum} after "
                    f"{self._update_timeout:.0f} s: {', '.join(high)}"
                )
            self._clock.sleep(UPDATE_POLL_SECONDS)

    def _nodegroup(self, name: str) -> Nodegroup:
        if self.nodegroups and name not in self.nodegroups:
            raise PoolNotFound(name, self.nodegroups)
        try:
            return self._aws.describe_nodegroup(name)
        except NodegroupNotFound:
            raise PoolNotFound(name, self.pool_names()) from None

    def _pool(self, nodegroup: Nodegroup, nodes: Sequence[EksNode], record: RestoreRecord | None) -> Pool:
        mine = [n for n in nodes if n.nodegroup == nodegroup.name]
        groups = self._aws.describe_groups(nodegroup.autoscaling_groups)
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
            removal_reason=f"EKS cluster {self._aws.cluster}: the drained nodes' instances are terminated",
            progress=progress_text(nodegroup, groups),
            settling=nodegroup.status in SETTLING_STATUSES,
        )

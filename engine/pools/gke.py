"""GKE node pools: the `gke` PoolProvider.

A pool is a node pool of one GKE cluster (all of them, or the ones the config names). Its nodes are
the Nodes labelled `cloud.google.com/gke-nodepool=<node pool>` (GKE labels every node so); each
Node's `spec.providerID` (`gce://<project>/<zone>/<instance>`) names the Compute Engine instance
behind it, a member of one of the node pool's managed instance groups (`instanceGroupUrls`, one per
zone). The pool's size is the sum of its groups' target sizes; min/max are its autoscaling bounds
(per zone, or the pool's total when `totalMinNodeCount`/`totalMaxNodeCount` are used).

- Removing drained nodes: GKE's setSize, asked for fewer nodes, lets the managed instance group pick
  which instances go (gcloud: "at random"), not the nodes scalebot drained. So, as cluster-autoscaler
  does, the drained nodes' instances are deleted with the group's `deleteInstances`, which lowers
  its target size by as many; its zone operation is followed until DONE, then the group's managed
  instances until none of them is listed. If the autoscaler's minimum is in the way, it is lowered
  first (setAutoscaling), else the autoscaler would add nodes back.
- `set_size(N)`: setAutoscaling (only when the bounds must change) then setSize with N nodes per
  zone divided over the pool's zones (GKE's nodeCount is per zone: N must be a multiple of them).
  While a restore record exists (the pool is asleep) the recorded autoscaling comes back exactly.
  To 0: an enabled autoscaler's minimum goes to 0 and its maximum stays.
- GKE answers setSize and setAutoscaling with an Operation scalebot polls (operations.get) until
  DONE, failing with its error; a change GKE refuses because another operation holds the cluster
  (FAILED_PRECONDITION) is tried again until that one ends, within the operation timeout.
- The restore record lives in the ConfigMap `scalebot-gke-<node pool>` in scalebot's namespace.

Pure parts are module functions over small dataclasses; Google Cloud sits behind `NodePoolApi`
(engine.pools.gke_google implements it with google-cloud-container and google-cloud-compute).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from engine.domain.node_removal import NodeRemoval
from engine.pools.base import Pool, PoolSizeError, RestoreRecord
from engine.pools.cloud import (
    CloudNode,
    CloudOperationError,
    CloudPoolNotFound,
    CloudPoolProvider,
    Machine,
    check_victims,
)

log = logging.getLogger(__name__)

PROVIDER_NAME = "gke"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
SETTLING_STATUSES = frozenset({"PROVISIONING", "RECONCILING", "STOPPING"})
"""Node pool statuses while GKE is still applying a change."""
LEAVING_ACTIONS = frozenset({"DELETING", "ABANDONING"})
"""A managed instance's currentAction once it is on its way out of its group."""
EXTRA_KEY = "gkeAutoscaling"


# --------------------------------------------------------------------------------------------------
# What crosses the Google Cloud port


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """A node pool's autoscaling: min/max per zone, or for the whole pool when `total`."""

    enabled: bool
    min_nodes: int = 0
    max_nodes: int = 0
    total: bool = False
    location_policy: str = ""
    """BALANCED, ANY or "" (unspecified): kept as it was."""

    def bounds(self, zones: int) -> tuple[int, int | None]:
        """(min, max) in nodes of the whole pool; (0, None) when the autoscaler is off."""
        if not self.enabled:
            return 0, None
        factor = 1 if self.total else max(zones, 1)
        return self.min_nodes * factor, self.max_nodes * factor

    def to_extra(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "minNodes": self.min_nodes,
            "maxNodes": self.max_nodes,
            "total": self.total,
            "locationPolicy": self.location_policy,
        }

    @classmethod
    def from_extra(cls, raw: Mapping[str, Any]) -> Autoscaling:
        return cls(
            enabled=bool(raw.get("enabled")),
            min_nodes=int(raw.get("minNodes") or 0),
            max_nodes=int(raw.get("maxNodes") or 0),
            total=bool(raw.get("total")),
            location_policy=str(raw.get("locationPolicy") or ""),
        )

    def __str__(self) -> str:
        if not self.enabled:
            return "autoscaling off"
        scope = "total" if self.total else "per zone"
        return f"autoscaling {scope} min {self.min_nodes}, max {self.max_nodes}"


@dataclass(frozen=True, slots=True)
class GkeNodePool:
    name: str
    status: str
    """PROVISIONING, RUNNING, RUNNING_WITH_ERROR, RECONCILING, STOPPING, ERROR."""
    autoscaling: Autoscaling
    instance_groups: tuple[str, ...]
    """URLs of the node pool's managed instance groups (one per zone)."""
    status_message: str = ""


@dataclass(frozen=True, slots=True)
class ManagedInstance:
    name: str
    url: str
    action: str
    """The group's currentAction for it: NONE, CREATING, DELETING, RECREATING, ..."""
    status: str = ""
    """The instance's status: RUNNING, PROVISIONING, STOPPING, ... ("" while being created)."""

    @property
    def leaving(self) -> bool:
        return self.action in LEAVING_ACTIONS


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    url: str
    zone: str
    target_size: int
    instances: tuple[ManagedInstance, ...] = ()


@dataclass(frozen=True, slots=True)
class OperationState:
    name: str
    done: bool
    error: str = ""
    """Empty for an operation that succeeded (or is not done); else "CODE: message"."""


class NodePoolNotFound(CloudPoolNotFound):
    """The GKE cluster has no node pool of that name."""


class NodePoolApi(Protocol):
    """The Google Cloud calls this provider makes, for one GKE cluster."""

    cluster: str
    """projects/<project>/locations/<location>/clusters/<cluster>"""

    def list_node_pools(self) -> list[str]: ...

    def get_node_pool(self, name: str) -> GkeNodePool:
        """Raises NodePoolNotFound."""
        ...

    def set_size(self, name: str, per_zone: int) -> str:
        """setSize (nodeCount per zone); returns the GKE operation's name. Raises CloudBusy."""
        ...

    def set_autoscaling(self, name: str, autoscaling: Autoscaling) -> str:
        """setAutoscaling; returns the GKE operation's name. Raises CloudBusy."""
        ...

    def operation(self, name: str) -> OperationState:
        """operations.get of a GKE operation."""
        ...

    def instance_group(self, url: str) -> InstanceGroup:
        """The managed instance group and its managed instances."""
        ...

    def delete_instances(self, group_url: str, instance_urls: Sequence[str]) -> str:
        """instanceGroupManagers.deleteInstances; returns the zone operation's name."""
        ...

    def zone_operation(self, group_url: str, name: str) -> OperationState:
        """zoneOperations.get in the group's zone."""
        ...


# --------------------------------------------------------------------------------------------------
# Pure parts


def parse_provider_id(provider_id: str) -> tuple[str, str, str] | None:
    """(project, zone, instance) of `gce://<project>/<zone>/<instance>`; None for any other."""
    if not provider_id.startswith("gce://"):
        return None
    parts = provider_id[len("gce://") :].split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], parts[1], parts[2]


def zone_of(group_url: str) -> str:
    """The zone in `.../zones/<zone>/instanceGroupManagers/<name>`."""
    parts = group_url.rstrip("/").split("/")
    return parts[parts.index("zones") + 1] if "zones" in parts[:-1] else ""


def instance_url(zone: str, instance: str) -> str:
    """The partial URL deleteInstances takes: `zones/<zone>/instances/<instance>`."""
    return f"zones/{zone}/instances/{instance}"


INSTANCE = Machine(
    "a Compute Engine instance in spec.providerID (gce://<project>/<zone>/<instance>)",
    lambda provider_id: parse_provider_id(provider_id) is not None,
)


@dataclass(frozen=True, slots=True)
class Removal:
    """What removing drained nodes from a node pool does, decided before any call."""

    delete: Mapping[str, tuple[str, ...]]
    """Managed instance group URL -> instance URLs to delete from it."""
    already_gone: tuple[str, ...]
    """Named nodes whose instance is no longer in a group of the pool, or already leaving it."""
    lower_min_first: Autoscaling | None
    """The autoscaling to set before deleting, when its minimum is in the way."""

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.delete.values())


def plan_removal(
    pool: GkeNodePool, groups: Sequence[InstanceGroup], nodes: Sequence[CloudNode], chosen: Sequence[str]
) -> Removal:
    """Which instances of which groups go for the drained `chosen` nodes.

    Raises NodeRemovalError for a chosen node of another node pool, or without a Compute Engine
    instance in its providerID: deleting from the group would remove the wrong one, or none.
    """
    by_name = check_victims(nodes, chosen, pool=pool.name, kind="node pool", machine=INSTANCE)
    members = {(g.zone, i.name): g for g in groups for i in g.instances if not i.leaving}
    delete: dict[str, list[str]] = {}
    gone: list[str] = []
    for name in sorted(set(chosen)):
        node = by_name.get(name)
        ref = parse_provider_id(node.provider_id) if node is not None else None
        group = members.get((ref[1], ref[2])) if ref is not None else None
        if group is None or ref is None:
            gone.append(name)
            continue
        delete.setdefault(group.url, []).append(instance_url(ref[1], ref[2]))
    lower = None
    scaling = pool.autoscaling
    if delete and scaling.enabled:
        after = {g.url: g.target_size - len(delete.get(g.url, ())) for g in groups}
        # Total bounds hold the pool's sum; per-zone bounds each group.
        lowest = max(0, sum(after.values()) if scaling.total else min(after.values(), default=0))
        if lowest < scaling.min_nodes:
            lower = replace(scaling, min_nodes=lowest)
    return Removal({url: tuple(v) for url, v in sorted(delete.items())}, tuple(gone), lower)


def per_zone_size(pool: str, size: int, zones: int) -> int:
    """GKE's nodeCount (per zone) for `size` nodes over `zones` zones."""
    if size < 0:
        raise PoolSizeError(f"node pool {pool}: size must be 0 or more, not {size}")
    zones = max(zones, 1)
    if size % zones:
        raise PoolSizeError(
            f"node pool {pool} spans {zones} zones and GKE sizes it per zone: ask for a multiple of "
            f"{zones} (e.g. {size - size % zones} or {size - size % zones + zones})"
        )
    return size // zones


def autoscaling_for(size: int, zones: int, current: Autoscaling, record: RestoreRecord | None) -> Autoscaling:
    """The autoscaling that lets the pool have `size` nodes and keep them (see the module docstring)."""
    if record is not None and size > 0 and EXTRA_KEY in record.extra:
        recorded = Autoscaling.from_extra(record.extra[EXTRA_KEY])
        want = recorded
    else:
        want = current
    if not want.enabled:
        return want
    unit = size if want.total else size // max(zones, 1)
    return replace(want, min_nodes=min(want.min_nodes, unit), max_nodes=max(want.max_nodes, unit))


def progress_text(pool: GkeNodePool, groups: Sequence[InstanceGroup]) -> str:
    """One line on the node pool and its instances, e.g. "node pool RUNNING; 2 of 3 instances RUNNING"."""
    parts = [f"node pool {pool.status}"]
    if groups:
        instances = [i for g in groups for i in g.instances]
        target = sum(g.target_size for g in groups)
        running = sum(1 for i in instances if i.status == "RUNNING" and i.action == "NONE")
        line = f"{running} of {target} instance{'s' if target != 1 else ''} RUNNING"
        creating = sum(1 for i in instances if i.action == "CREATING")
        leaving = sum(1 for i in instances if i.leaving)
        if creating:
            line += f", {creating} creating"
        if leaving:
            line += f", {leaving} deleting"
        parts.append(line)
    if pool.status_message:
        parts.append(pool.status_message)
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------
# The provider


class GkePoolProvider(CloudPoolProvider[GkeNodePool, NodePoolApi]):
    """PoolProvider over the node pools of one GKE cluster (see the module docstring)."""

    name = PROVIDER_NAME
    cloud = "GKE"
    kind = "node pool"

    # -- sizing ------------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Nothing to mark; refuses nodes of another node pool before the drain starts."""
        plan_removal(self._cloud_pool(pool), (), self._kube.named_nodes(nodes), nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Delete exactly the drained nodes' instances from their managed instance groups."""
        node_pool = self._cloud_pool(pool)
        groups = [self._cloud.instance_group(url) for url in node_pool.instance_groups]
        removal = plan_removal(node_pool, groups, self._kube.named_nodes(nodes), nodes)
        if removal.already_gone:
            log.info("GKE node pool %s: already gone: %s", pool, ", ".join(removal.already_gone))
        if removal.lower_min_first is not None:
            self._set_autoscaling(pool, removal.lower_min_first, "minimum lowered so its instances can go")
        for group_url, instances in removal.delete.items():
            operation = self._cloud.delete_instances(group_url, instances)
            log.info("GKE node pool %s: deleteInstances %s from %s", pool, ", ".join(instances), group_url)
            self._follow(
                pool,
                "deleteInstances",
                f"Compute Engine operation {operation}",
                partial(self._cloud.zone_operation, group_url, operation),
            )
            self._wait_gone(pool, group_url, {i.rsplit("/", 1)[-1] for i in instances})

    def _wait_gone(self, pool: str, group_url: str, names: set[str]) -> None:
        """deleteInstances' operation is DONE once the deletions are scheduled: until the group no
        longer lists those instances."""

        def gone() -> bool:
            return not names & {i.name for i in self._cloud.instance_group(group_url).instances}

        self._wait(gone, f"node pool {pool}: instances {', '.join(sorted(names))} leaving their group")

    def set_size(self, pool: str, size: int) -> None:
        node_pool = self._cloud_pool(pool)
        zones = len(node_pool.instance_groups)
        per_zone = per_zone_size(pool, size, zones)
        want = autoscaling_for(size, zones, node_pool.autoscaling, self._kube.read_record(pool))
        if want != node_pool.autoscaling:
            self._set_autoscaling(pool, want, f"asked for {size} node{'s' if size != 1 else ''}")
        groups = [self._cloud.instance_group(url) for url in node_pool.instance_groups]
        if all(g.target_size == per_zone for g in groups):
            return
        operation = self._retry(lambda: self._cloud.set_size(pool, per_zone), f"node pool {pool}: setSize")
        log.info(
            "GKE node pool %s: setSize %d per zone (%d nodes), operation %s",
            pool,
            per_zone,
            size,
            operation,
        )
        self._follow_gke(pool, operation, f"setSize {per_zone} per zone")

    # -- plumbing ----------------------------------------------------------------------------------

    def _set_autoscaling(self, pool: str, autoscaling: Autoscaling, why: str) -> None:
        operation = self._retry(
            lambda: self._cloud.set_autoscaling(pool, autoscaling), f"node pool {pool}: setAutoscaling"
        )
        log.info("GKE node pool %s: setAutoscaling %s (%s), operation %s", pool, autoscaling, why, operation)
        self._follow_gke(pool, operation, f"setAutoscaling ({autoscaling})")

    def _follow_gke(self, pool: str, operation: str, what: str) -> None:
        self._follow(pool, what, f"GKE operation {operation}", lambda: self._cloud.operation(operation))

    def _follow(self, pool: str, what: str, operation: str, state: Callable[[], OperationState]) -> None:
        """Until the operation (GKE's or a Compute Engine zone's) is DONE; its error raises."""

        def done() -> bool:
            now = state()
            if now.done and now.error:
                raise CloudOperationError(f"node pool {pool}: {what}: {operation} failed: {now.error}")
            return now.done

        self._wait(done, f"node pool {pool}: {what} ({operation})")

    # -- what CloudPoolProvider asks of a cloud ----------------------------------------------------

    def _cloud_names(self) -> list[str]:
        return self._cloud.list_node_pools()

    def _fetch(self, name: str) -> GkeNodePool:
        return self._cloud.get_node_pool(name)

    def _extra(self, cloud_pool: GkeNodePool) -> Mapping[str, Any]:
        """The node pool's whole autoscaling (per zone or total, location policy), so that a wake
        sets it back exactly."""
        return {EXTRA_KEY: cloud_pool.autoscaling.to_extra()}

    def _to_pool(
        self, cloud_pool: GkeNodePool, nodes: Sequence[CloudNode], record: RestoreRecord | None
    ) -> Pool:
        node_pool = cloud_pool
        mine = [n for n in nodes if n.pool == node_pool.name]
        groups = [self._cloud.instance_group(url) for url in node_pool.instance_groups]
        min_size, max_size = node_pool.autoscaling.bounds(len(groups))
        return Pool(
            name=node_pool.name,
            provider=self.name,
            desired=sum(g.target_size for g in groups),
            min_size=min_size,
            max_size=max_size,
            nodes=tuple(sorted(n.name for n in mine)),
            ready_nodes=tuple(sorted(n.name for n in mine if n.ready)),
            restore=record,
            removal=NodeRemoval.MACHINE,
            removal_reason=(
                f"GKE cluster {self._cloud.cluster.rsplit('/', 1)[-1]}: the drained nodes' instances are "
                "deleted from their managed instance groups"
            ),
            progress=progress_text(node_pool, groups),
            settling=node_pool.status in SETTLING_STATUSES
            or any(i.action != "NONE" for g in groups for i in g.instances),
        )

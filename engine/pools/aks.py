"""AKS agent pools: the `aks` PoolProvider.

A pool is an agent pool of one AKS managed cluster (all of them, or the ones the config names). Its
nodes are the Nodes labelled `kubernetes.azure.com/agentpool=<agent pool>` (AKS labels every node
so); a node's name is its machine's name in the agent pool. desired is the agent pool's `count`;
min/max are its cluster autoscaler bounds (`minCount`/`maxCount` when `enableAutoScaling`). A System
pool (`mode: System`) keeps at least one node: AKS refuses a count below 1.

- Removing drained nodes: lowering `count` would let AKS pick which machines go, not the nodes
  scalebot drained. So, as cluster-autoscaler does for AKS's VMs pools, the drained nodes' machines
  are deleted by name with the agent pool's `deleteMachines` (AKS lowers `count` by as many). When
  the autoscaler is in the way it is changed first: its minimum lowered, or, for a removal down to
  0, the autoscaler turned off (AKS documents that a pool is forced to 0 only so).
- `set_size(N)`: a PUT of the agent pool with `count` N; while a restore record exists (the pool
  is asleep) its recorded autoscaler (enabled, minCount, maxCount) comes back with it.
- Every change is an Azure long-running operation, followed until it ends (Failed raises with
  Azure's code); a change AKS refuses because another operation runs on the pool or cluster
  (409 OperationNotAllowed, "Another operation ... is in progress") is tried again until it ends.
- The restore record lives in the ConfigMap `scalebot-aks-<agent pool>` in scalebot's namespace.
- The whole cluster (StopsCluster): a System pool keeps a node, so a zero of every pool ends, once
  drained, with the managed cluster's stop (`managedClusters.stop`), and its wake begins with the
  start; both are long-running operations, and one refused while another runs is tried again.
  The agent pools keep their count and autoscaler through the stop, so the start brings them back.
  While the cluster is stopped its API server is gone: the pools are read from Azure alone (no
  node, the kept count as what a wake restores).

Pure parts are module functions over small dataclasses; Azure sits behind `AgentPoolApi`
(engine.pools.aks_azure implements it with azure-mgmt-containerservice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from engine.domain.node_removal import NodeRemoval
from engine.pools.base import Pool, PoolSizeError, RestoreRecord
from engine.pools.cloud import CloudNode, CloudPoolNotFound, CloudPoolProvider, check_victims

log = logging.getLogger(__name__)

PROVIDER_NAME = "aks"
AGENT_POOL_LABEL = "kubernetes.azure.com/agentpool"
SETTLING_STATES = frozenset({"Creating", "Scaling", "Updating", "Upgrading", "Starting", "Stopping"})
"""provisioningState values while AKS is still applying a change."""
EXTRA_KEY = "aksAutoscaler"


# --------------------------------------------------------------------------------------------------
# What crosses the Azure port


@dataclass(frozen=True, slots=True)
class Autoscaler:
    enabled: bool
    min_count: int = 0
    max_count: int = 0

    def __str__(self) -> str:
        return f"autoscaler min {self.min_count}, max {self.max_count}" if self.enabled else "autoscaler off"


@dataclass(frozen=True, slots=True)
class AgentPool:
    name: str
    mode: str
    """System or User."""
    count: int
    autoscaler: Autoscaler
    state: str = "Succeeded"
    """provisioningState: Succeeded, Scaling, Updating, Failed, ..."""
    power: str = "Running"
    """powerState.code: Running or Stopped."""

    @property
    def system(self) -> bool:
        return self.mode == "System"

    @property
    def floor(self) -> int:
        """The fewest nodes AKS allows in it."""
        return 1 if self.system else 0


@dataclass(frozen=True, slots=True)
class ClusterPower:
    """The managed cluster's powerState.code (Running, Stopped) and provisioningState."""

    code: str = "Running"
    state: str = "Succeeded"

    @property
    def running(self) -> bool:
        """Running and not on its way up or down: its API server answers."""
        return self.code == "Running" and self.state not in ("Starting", "Stopping")

    def __str__(self) -> str:
        return self.code if self.state in ("Succeeded", "") else f"{self.code} ({self.state})"


class AgentPoolNotFound(CloudPoolNotFound):
    """The AKS cluster has no agent pool of that name."""


class AgentPoolApi(Protocol):
    """The Azure calls this provider makes, for one AKS managed cluster."""

    cluster: str

    def list_agent_pools(self) -> list[str]: ...

    def get_agent_pool(self, name: str) -> AgentPool:
        """Raises AgentPoolNotFound."""
        ...

    def scale(self, name: str, count: int, autoscaler: Autoscaler, *, timeout: float) -> None:
        """PUT the agent pool with this count and autoscaler; returns once the operation succeeded.
        Raises CloudBusy while another operation holds it, CloudOperationError when it failed."""
        ...

    def delete_machines(self, name: str, machines: Sequence[str], *, timeout: float) -> None:
        """deleteMachines; returns once the operation succeeded. Raises as `scale`."""
        ...

    def cluster_power(self) -> ClusterPower:
        """The managed cluster's powerState and provisioningState (managedClusters.get)."""
        ...

    def stop_cluster(self, *, timeout: float) -> None:
        """managedClusters.stop; returns once the operation succeeded. Raises as `scale`."""
        ...

    def start_cluster(self, *, timeout: float) -> None:
        """managedClusters.start; returns once the operation succeeded. Raises as `scale`."""
        ...


# --------------------------------------------------------------------------------------------------
# Pure parts


@dataclass(frozen=True, slots=True)
class Removal:
    delete: tuple[str, ...]
    """Machine (node) names to delete, sorted."""
    already_gone: tuple[str, ...]
    autoscaler_first: Autoscaler | None
    """The autoscaler to set before deleting, when it is in the way."""


def plan_removal(pool: AgentPool, nodes: Sequence[CloudNode], chosen: Sequence[str]) -> Removal:
    """Which machines go for the drained `chosen` nodes. Raises NodeRemovalError for a node of
    another agent pool, and PoolSizeError for a System pool left without a node."""
    by_name = check_victims(nodes, chosen, pool=pool.name, kind="agent pool")
    delete = tuple(sorted(n for n in set(chosen) if n in by_name))
    gone = tuple(sorted(n for n in set(chosen) if n not in by_name))
    after = pool.count - len(delete)
    if delete and after < pool.floor:
        raise PoolSizeError(
            f"agent pool {pool.name} is a System pool: AKS keeps at least 1 node in it (asked to "
            f"remove {len(delete)} of {pool.count})"
        )
    first = None
    scaler = pool.autoscaler
    if delete and scaler.enabled and after < scaler.min_count:
        # To 0 the autoscaler must be off (else it may keep or add nodes); above, its minimum lowered.
        first = Autoscaler(False) if after == 0 else replace(scaler, min_count=after)
    return Removal(delete, gone, first)


def autoscaler_for(size: int, pool: AgentPool, record: RestoreRecord | None) -> Autoscaler:
    """The autoscaler that lets the agent pool have `size` nodes: off for 0; the recorded one at a
    wake (min/max stretched only as far as `size` needs); else the current one, stretched."""
    if size < pool.floor:
        raise PoolSizeError(f"agent pool {pool.name} is a System pool: AKS keeps at least 1 node in it")
    want = pool.autoscaler
    if record is not None and size > 0 and EXTRA_KEY in record.extra:
        raw = record.extra[EXTRA_KEY]
        want = Autoscaler(bool(raw.get("enabled")), int(raw.get("min") or 0), int(raw.get("max") or 0))
    if size == 0 or not want.enabled:
        return Autoscaler(False)
    return Autoscaler(True, min(want.min_count, size), max(want.max_count, size))


def progress_text(pool: AgentPool, nodes: Sequence[CloudNode]) -> str:
    ready = sum(1 for n in nodes if n.ready)
    text = f"agent pool {pool.state}; {ready} of {pool.count} node{'s' if pool.count != 1 else ''} Ready"
    return text if pool.power == "Running" else f"{text}; power {pool.power}"


# --------------------------------------------------------------------------------------------------
# The provider


class AksPoolProvider(CloudPoolProvider[AgentPool, AgentPoolApi]):
    """PoolProvider over the agent pools of one AKS cluster (see the module docstring)."""

    name = PROVIDER_NAME
    cloud = "AKS"
    kind = "agent pool"

    # -- reads: a stopped cluster's from Azure alone -----------------------------------------------

    def list_pools(self) -> list[Pool]:
        power = self._cloud.cluster_power()
        if not power.running:
            return [self._stopped_pool(self._cloud_pool(n), power) for n in self.pool_names()]
        return super().list_pools()

    def get_pool(self, name: str) -> Pool:
        power = self._cloud.cluster_power()
        if not power.running:
            return self._stopped_pool(self._cloud_pool(name), power)
        return super().get_pool(name)

    # -- the whole cluster: stop and start (StopsCluster) ------------------------------------------

    def cluster_stopped(self) -> str:
        power = self._cloud.cluster_power()
        return "" if power.running else f"AKS cluster {self._cloud.cluster} is {power}"

    def prepare_stop(self, pools: Sequence[str]) -> None:
        """A stop takes every agent pool of the cluster, configured or not: refused (before the
        drain) while one outside `pools` still has nodes."""
        left = sorted(
            f"{pool.name} ({pool.count})"
            for pool in (self._cloud.get_agent_pool(n) for n in self._cloud.list_agent_pools())
            if pool.name not in pools and pool.count > 0
        )
        if left:
            raise PoolSizeError(
                f"AKS cluster {self._cloud.cluster}: every pool going to zero means stopping the cluster, "
                f"which would also take agent pool(s) {', '.join(left)}; add them to the zero or take "
                "them to 0 first"
            )

    def stop_cluster(self) -> None:
        """managedClusters.stop, once the cluster is drained: the agent pools keep their counts and
        autoscalers, so a start brings the same pools back."""
        self._power("stop", lambda power: power.code == "Stopped" and power.state not in SETTLING_STATES)

    def start_cluster(self) -> None:
        self._power("start", lambda power: power.running)

    def _power(self, verb: str, reached: Callable[[ClusterPower], bool]) -> None:
        """Stop or start, unless the cluster is there already. Refused while another operation
        runs (an upgrade, or this very stop or start before a restart): repeated, and each attempt
        first looks whether that operation got the cluster there already."""

        def attempt() -> bool:
            if reached(self._cloud.cluster_power()):
                return False
            call = self._cloud.stop_cluster if verb == "stop" else self._cloud.start_cluster
            call(timeout=self._timeout)
            return True

        if self._retry(attempt, self._what(verb)):
            log.info("AKS cluster %s: %s done", self._cloud.cluster, verb)

    def _what(self, verb: str) -> str:
        return f"AKS cluster {self._cloud.cluster}: {verb}"

    # -- sizing ------------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Nothing to mark; refuses nodes of another agent pool, or a System pool's last node,
        before the drain starts."""
        plan_removal(self._cloud_pool(pool), self._kube.named_nodes(nodes), nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Delete exactly the drained nodes' machines (deleteMachines)."""
        agent_pool = self._cloud_pool(pool)
        removal = plan_removal(agent_pool, self._kube.named_nodes(nodes), nodes)
        if removal.already_gone:
            log.info("AKS agent pool %s: already gone: %s", pool, ", ".join(removal.already_gone))
        if removal.autoscaler_first is not None:
            self._scale(pool, agent_pool.count, removal.autoscaler_first, "so its machines can be deleted")
        if removal.delete:
            self._retry(
                lambda: self._cloud.delete_machines(pool, removal.delete, timeout=self._timeout),
                f"agent pool {pool}: deleteMachines",
            )
            log.info("AKS agent pool %s: deleteMachines %s", pool, ", ".join(removal.delete))

    def set_size(self, pool: str, size: int) -> None:
        agent_pool = self._cloud_pool(pool)
        if size < 0:
            raise PoolSizeError(f"agent pool {pool}: size must be 0 or more, not {size}")
        want = autoscaler_for(size, agent_pool, self._kube.read_record(pool))
        if agent_pool.count != size or agent_pool.autoscaler != want:
            self._scale(pool, size, want, f"asked for {size} node{'s' if size != 1 else ''}")

    def _scale(self, pool: str, count: int, autoscaler: Autoscaler, why: str) -> None:
        self._retry(
            lambda: self._cloud.scale(pool, count, autoscaler, timeout=self._timeout),
            f"agent pool {pool}: count {count}, {autoscaler}",
        )
        log.info("AKS agent pool %s: count %d, %s (%s)", pool, count, autoscaler, why)

    # -- what CloudPoolProvider asks of a cloud ----------------------------------------------------

    def _cloud_names(self) -> list[str]:
        return self._cloud.list_agent_pools()

    def _fetch(self, name: str) -> AgentPool:
        return self._cloud.get_agent_pool(name)

    def _extra(self, cloud_pool: AgentPool) -> Mapping[str, Any]:
        """The agent pool's autoscaler (enabled or not), so a wake sets it back."""
        scaler = cloud_pool.autoscaler
        return {EXTRA_KEY: {"enabled": scaler.enabled, "min": scaler.min_count, "max": scaler.max_count}}

    def _to_pool(
        self, cloud_pool: AgentPool, nodes: Sequence[CloudNode], record: RestoreRecord | None
    ) -> Pool:
        agent_pool = cloud_pool
        mine = [n for n in nodes if n.pool == agent_pool.name]
        min_size, max_size = _bounds(agent_pool)
        return Pool(
            name=agent_pool.name,
            provider=self.name,
            desired=agent_pool.count,
            min_size=min_size,
            max_size=max_size,
            nodes=tuple(sorted(n.name for n in mine)),
            ready_nodes=tuple(sorted(n.name for n in mine if n.ready)),
            restore=record,
            removal=NodeRemoval.MACHINE,
            removal_reason=f"AKS cluster {self._cloud.cluster}: the drained nodes' machines are deleted",
            progress=progress_text(agent_pool, mine),
            settling=agent_pool.state in SETTLING_STATES,
        )

    def _stopped_pool(self, agent_pool: AgentPool, power: ClusterPower) -> Pool:
        """A pool of a stopped cluster, from Azure alone (its API server is not reached): no node
        runs, and what a start brings back is the count AKS kept through the stop."""
        min_size, max_size = _bounds(agent_pool)
        kept = RestoreRecord(
            desired=agent_pool.count,
            min_size=min_size,
            max_size=max_size,
            recorded_at=self._clock.now(),
            operation_id="",
        )
        return Pool(
            name=agent_pool.name,
            provider=self.name,
            desired=0,
            min_size=min_size,
            max_size=max_size,
            restore=kept,
            removal=NodeRemoval.MACHINE,
            removal_reason=f"AKS cluster {self._cloud.cluster} is stopped: a wake starts it",
            progress=f"cluster {power}; agent pool count {agent_pool.count} kept for the start",
            settling=power.state in SETTLING_STATES,
        )


def _bounds(agent_pool: AgentPool) -> tuple[int, int | None]:
    """(min, max) of the pool: the autoscaler's when enabled, never below a System pool's 1."""
    scaler = agent_pool.autoscaler
    return max(scaler.min_count if scaler.enabled else 0, agent_pool.floor), (
        scaler.max_count if scaler.enabled else None
    )

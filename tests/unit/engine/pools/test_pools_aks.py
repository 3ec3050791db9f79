"""The aks provider's pure rules: which machines a removal deletes, the autoscaler a sleep and a wake
ask for, a System pool's floor; and the whole cluster's stop and start over an in-memory Azure (a
stopped cluster's pools come from Azure alone). (End to end against the ARM stand-in:
tests/e2e/test_pools_aks.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from engine.domain.clock import FakeClock
from engine.pools.aks import (
    EXTRA_KEY,
    AgentPool,
    AksPoolProvider,
    Autoscaler,
    ClusterPower,
    autoscaler_for,
    plan_removal,
)
from engine.pools.base import PoolSizeError, RestoreRecord, StopsCluster
from engine.pools.cloud import CloudBusy, CloudNode, CloudOperationTimeout
from engine.pools.common import NodeRemovalError

SCALED = Autoscaler(True, 2, 5)


def _nodes(pool: str, *names: str) -> list[CloudNode]:
    return [CloudNode(n, pool, f"azure:///x/virtualMachines/{i}", True) for i, n in enumerate(names)]


def test_removal_deletes_exactly_the_chosen_machines() -> None:
    pool = AgentPool("web", "User", 3, Autoscaler(False))
    removal = plan_removal(pool, _nodes("web", "m1", "m2"), ["m2", "m1", "gone"])
    assert (removal.delete, removal.already_gone, removal.autoscaler_first) == (("m1", "m2"), ("gone",), None)


def test_the_autoscaler_in_the_way_is_lowered_or_turned_off_first() -> None:
    pool = AgentPool("web", "User", 3, SCALED)
    assert plan_removal(pool, _nodes("web", "m1", "m2"), ["m1", "m2"]).autoscaler_first == Autoscaler(
        True, 1, 5
    )
    everything = plan_removal(pool, _nodes("web", "m1", "m2", "m3"), ["m1", "m2", "m3"])
    assert everything.autoscaler_first == Autoscaler(False), "AKS forces 0 only with the autoscaler off"


def test_a_system_pool_keeps_one_node_and_foreign_nodes_are_refused() -> None:
    system = AgentPool("system", "System", 2, Autoscaler(False))
    assert plan_removal(system, _nodes("system", "s1"), ["s1"]).delete == ("s1",)
    with pytest.raises(PoolSizeError, match="System pool: AKS keeps at least 1 node in it"):
        plan_removal(system, _nodes("system", "s1", "s2"), ["s1", "s2"])
    with pytest.raises(PoolSizeError, match="System pool"):
        autoscaler_for(0, system, None)
    with pytest.raises(NodeRemovalError, match=r"not in agent pool web: b1 \(batch\)"):
        plan_removal(AgentPool("web", "User", 1, Autoscaler(False)), _nodes("batch", "b1"), ["b1"])


def test_sleep_turns_the_autoscaler_off_and_wake_restores_it() -> None:
    pool = AgentPool("web", "User", 3, SCALED)
    assert autoscaler_for(0, pool, None) == Autoscaler(False)
    asleep = AgentPool("web", "User", 0, Autoscaler(False))
    record = RestoreRecord(
        3, 2, 5, datetime(2026, 1, 1, tzinfo=UTC), "op-1", {EXTRA_KEY: {"enabled": True, "min": 2, "max": 5}}
    )
    assert autoscaler_for(3, asleep, record) == SCALED
    assert autoscaler_for(8, pool, None) == Autoscaler(True, 2, 8)


# --------------------------------------------------------------------------------------------------
# The whole cluster: stop and start


@dataclass
class MemoryAzure:
    """An AKS cluster in memory: its agent pools and power; `busy` refusals before a stop/start."""

    pools: dict[str, AgentPool]
    power: ClusterPower = field(default_factory=ClusterPower)
    busy: int = 0
    calls: list[str] = field(default_factory=list)
    cluster: str = "aks-dev"

    def list_agent_pools(self) -> list[str]:
        return list(self.pools)

    def get_agent_pool(self, name: str) -> AgentPool:
        return self.pools[name]

    def scale(self, name: str, count: int, autoscaler: Autoscaler, *, timeout: float) -> None:
        raise AssertionError("no agent pool change in these tests")

    def delete_machines(self, name: str, machines: Sequence[str], *, timeout: float) -> None:
        raise AssertionError("no machine deleted in these tests")

    def cluster_power(self) -> ClusterPower:
        return self.power

    def stop_cluster(self, *, timeout: float) -> None:
        self._power("stop", "Stopped")

    def start_cluster(self, *, timeout: float) -> None:
        self._power("start", "Running")

    def _power(self, verb: str, code: str) -> None:
        self.calls.append(verb)
        if self.busy:
            self.busy -= 1
            raise CloudBusy(f"managedClusters.{verb}: OperationNotAllowed: Another operation is in progress")
        self.power = ClusterPower(code)


class UnreachableKube:
    """The cluster's API server, which a stopped cluster's provider must not ask."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the API server was asked ({name}) while the cluster was stopped")


def _stopped_provider(busy: int = 0) -> tuple[AksPoolProvider, MemoryAzure]:
    azure = MemoryAzure(
        {
            "system": AgentPool("system", "System", 1, Autoscaler(False)),
            "web": AgentPool("web", "User", 3, SCALED),
        },
        power=ClusterPower("Stopped"),
        busy=busy,
    )
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    provider = AksPoolProvider(
        azure, UnreachableKube(), clock=clock, operation_timeout_seconds=30, poll_seconds=5
    )
    return provider, azure


def test_a_stopped_clusters_pools_come_from_azure_alone_with_the_counts_a_start_brings_back() -> None:
    provider, _ = _stopped_provider()
    assert isinstance(provider, StopsCluster)
    assert provider.cluster_stopped() == "AKS cluster aks-dev is Stopped"
    pools = {p.name: p for p in provider.list_pools()}
    assert {n: (p.desired, p.nodes, p.min_size, p.max_size) for n, p in pools.items()} == {
        "system": (0, (), 1, None),
        "web": (0, (), 2, 5),
    }
    assert {n: p.restore.desired for n, p in pools.items() if p.restore} == {"system": 1, "web": 3}
    assert provider.get_pool("web").progress == "cluster Stopped; agent pool count 3 kept for the start"


def test_a_start_or_stop_refused_while_another_operation_runs_is_repeated_until_it_ends() -> None:
    provider, azure = _stopped_provider(busy=2)
    provider.start_cluster()
    assert azure.calls == ["start", "start", "start"] and provider.cluster_stopped() == ""
    provider.start_cluster()
    assert len(azure.calls) == 3, "a running cluster is not started again"
    azure.busy = 1
    provider.stop_cluster()
    provider.stop_cluster()
    assert azure.calls[3:] == ["stop", "stop"], "refused once, repeated, then not asked again"
    assert provider.cluster_stopped() == "AKS cluster aks-dev is Stopped"


def test_a_start_still_refused_after_the_operation_timeout_says_so() -> None:
    provider, _ = _stopped_provider(busy=100)
    with pytest.raises(
        CloudOperationTimeout, match=r"AKS cluster aks-dev: start: another operation still holds it"
    ):
        provider.start_cluster()


def test_a_stop_that_would_take_a_pool_outside_the_zero_is_refused() -> None:
    provider, azure = _stopped_provider()
    azure.pools["batch"] = AgentPool("batch", "User", 2, Autoscaler(False))
    azure.pools["idle"] = AgentPool("idle", "User", 0, Autoscaler(False))
    with pytest.raises(PoolSizeError, match=r"which would also take agent pool\(s\) batch \(2\); add them"):
        provider.prepare_stop(["system", "web"])
    provider.prepare_stop(["system", "web", "batch"])  # an empty pool outside the zero loses nothing


def test_a_stop_refused_by_its_own_earlier_attempt_ends_once_that_one_stopped_the_cluster() -> None:
    """A restart during the stop: the repeated stop is refused while the first one runs; once the
    cluster is Stopped it is not asked again (AKS would refuse a stop of a stopped cluster)."""
    provider, azure = _stopped_provider()
    azure.power = ClusterPower("Running", "Stopping")

    def stop(*, timeout: float) -> None:
        azure.calls.append("stop")
        azure.power = ClusterPower("Stopped")  # the earlier stop ends meanwhile
        raise CloudBusy("managedClusters.stop: OperationNotAllowed: Another operation is in progress")

    azure.stop_cluster = stop  # type: ignore[method-assign]
    provider.stop_cluster()
    assert azure.calls == ["stop"]

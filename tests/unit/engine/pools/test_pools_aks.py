"""The aks provider's pure rules: which machines a removal deletes, the autoscaler a sleep and a wake
ask for, a System pool's floor. (End to end against the ARM stand-in: tests/e2e/test_pools_aks.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.pools.aks import EXTRA_KEY, AgentPool, Autoscaler, autoscaler_for, plan_removal
from engine.pools.base import PoolSizeError, RestoreRecord
from engine.pools.cloud import CloudNode
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

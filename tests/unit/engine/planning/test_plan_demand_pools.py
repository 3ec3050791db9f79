"""Planning for pools that size themselves from demand (Karpenter NodePools): pure.

Such a pool goes to 0 and comes back, never to a number: `scale POOL N` is refused for N > 0
with the reason and what to use instead, while `scale POOL 0`, `zero` and `wake` are planned as
for any pool (two phases when every pool goes to 0).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.domain.model import NodeInfo
from engine.domain.operation import OpKind, Target
from engine.planning.preflight import ClusterSnapshot, PlanError, plan_operation
from engine.pools.base import Pool

NOW = datetime(2026, 3, 27, 19, 0, tzinfo=UTC)
NODES = ("kwok-a", "kwok-b")


def snapshot(*, restore: int | None = None) -> ClusterSnapshot:
    pool = Pool(
        name="general",
        provider="karpenter",
        desired=len(NODES),
        nodes=NODES,
        ready_nodes=NODES,
        sizes_from_demand=True,
    )
    return ClusterSnapshot(
        cluster="dev",
        pools=(pool,),
        nodes=tuple(NodeInfo(name=n, ready="True") for n in NODES),
        pods=(),
        pdbs=(),
        restore_sizes={} if restore is None else {"general": restore},
    )


@pytest.mark.parametrize("size", [1, 2, 5])
def test_scale_to_a_number_is_refused_with_the_reason(size: int) -> None:
    with pytest.raises(PlanError) as caught:
        plan_operation(
            OpKind.SCALE, Target(cluster="dev", pools=("general",), size=size), snapshot(), now=NOW
        )
    assert str(caught.value) == (
        f"pool general (karpenter) sizes itself from demand: its nodes come from pending pods, so it cannot "
        f"be scaled to {size}. `scale general 0` or `zero` stops it provisioning and removes its nodes; "
        "`wake` lets it provision again"
    )


def test_scale_to_zero_and_zero_remove_every_node_in_two_phases() -> None:
    for kind, target in (
        (OpKind.SCALE, Target(cluster="dev", pools=("general",), size=0)),
        (OpKind.ZERO, Target(cluster="dev")),
    ):
        plan = plan_operation(kind, target, snapshot(), now=NOW)
        (change,) = plan.pools
        assert (change.pool, change.before, change.after, change.nodes_to_remove) == ("general", 2, 0, NODES)
        assert plan.force_phase


def test_wake_plans_the_recorded_size() -> None:
    plan = plan_operation(OpKind.WAKE, Target(cluster="dev"), snapshot(restore=2), now=NOW)
    (change,) = plan.pools
    assert (change.before, change.after) == (2, 2)

"""Planning chooses victims with the pool's own deletion order and its machines' state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine.domain.model import NodeInfo
from engine.domain.operation import OpKind, Target
from engine.planning.preflight import ClusterSnapshot, plan_operation
from engine.pools.base import Pool
from engine.pools.victims import VictimHints

NOW = datetime(2026, 3, 27, 19, 0, tzinfo=UTC)
NODES = tuple(NodeInfo(name=f"n{i}", ready="True", created_at=NOW - timedelta(days=10 - i)) for i in range(4))


def _plan(pool: Pool) -> tuple[str, ...]:
    snap = ClusterSnapshot(cluster="c", pools=(pool,), nodes=NODES, pods=(), pdbs=())
    plan = plan_operation(OpKind.SCALE, Target(cluster="c", pools=("md",), size=2), snap, now=NOW)
    return plan.pools[0].nodes_to_remove


def test_the_deployments_deletion_order_and_marked_machines_decide() -> None:
    names = tuple(n.name for n in NODES)
    oldest = Pool("md", "capi", 4, nodes=names, deletion_order="Oldest")
    newest = Pool("md", "capi", 4, nodes=names, deletion_order="Newest")
    assert _plan(oldest) == ("n0", "n1")
    assert _plan(newest) == ("n2", "n3")
    marked = Pool(
        "md",
        "capi",
        4,
        nodes=names,
        deletion_order="Newest",
        victim_hints=VictimHints(marked=frozenset({"n0"}), unhealthy=frozenset({"n1"})),
    )
    assert _plan(marked) == ("n0", "n1"), "the delete-machine mark first, then the unhealthy Machine"

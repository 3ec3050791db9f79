"""The drain by hand (`scalebot drain`) under the operations service's rules, on the in-memory cluster.

Covers: a forced drain removes what a plain drain refuses only within the force scope that was shown
(a bare Pod bound after the preview is refused, naming its owner, and stays; the one shown goes); a
person in Slack cannot force a drain by hand where the policy asks approval for force (they ask for
a drain operation instead), refused and audited, while `cli:` (the kubeconfig at a terminal) may;
a drain of a node an operation holds is refused.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.domain.clock import FakeClock
from engine.domain.operation import OperationRequest, OpKind, Target
from engine.domain.settings import DrainSettings
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, UserError, new_operations
from engine.operations.service_nodes import DrainFlags
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store

CLI, OPERATOR = "cli:ops", "U0OPER"
SETTINGS = DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=30))


def _ops(**policy_kw: object) -> tuple[Operations, FakeCluster]:
    clock = FakeClock(datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
    cluster = FakeCluster(now=clock.now)
    cluster.add_node("web-0", labels={"scalebot.io/pool": "web"})
    cluster.add_node("web-1", labels={"scalebot.io/pool": "web"})
    cluster.add_pod("shop", "shown", node="web-0", grace=1)  # bare: only --force removes it
    rules = policy.ClusterPolicy(cluster="dev", users={OPERATOR: policy.Role.OPERATOR}, **policy_kw)  # type: ignore[arg-type]
    handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
    return new_operations(Store(":memory:"), {"dev": handle}, {"dev": rules}, clock), cluster


def _pods(cluster: FakeCluster) -> set[str]:
    return {p.key for p in cluster.list_pods(node_names=["web-0"])}


def test_a_forced_drain_by_hand_forces_only_what_its_preview_showed() -> None:
    ops, cluster = _ops()
    [node] = ops.select_nodes("dev", ["web-0"], None, by=CLI)
    shown = ops.drain_preview("dev", [node], DrainFlags(force=True), by=CLI)
    assert shown.force_scope is not None and shown.force_scope.units == ("Pod/shop/shown",)
    assert "Pod/shop/shown" in shown.to_text()
    cluster.add_pod("shop", "late", node="web-0", grace=1)  # bound after the preview

    outcome = ops.drain_nodes(
        "dev", ["web-0"], DrainFlags(force=True), SETTINGS, by=CLI, approved=shown.force_scope
    )

    assert outcome.failed_nodes.keys() == {"web-0"}
    assert "Pod/shop/late was not in the approved force scope" in outcome.failed_nodes["web-0"]
    assert _pods(cluster) == {"shop/shown", "shop/late"}, "all or nothing: the node's drain ended"
    rows = [(r.actor, r.action, r.detail) for r in ops.store.audit_rows()]
    assert rows == [
        (CLI, "drain", "web-0; forced (force) within the scope: Pod/shop/shown"),
        (CLI, "drain_finished", "drained: none; refused: web-0: " + outcome.failed_nodes["web-0"]),
    ]


def test_a_person_in_slack_may_not_force_a_drain_by_hand_where_force_needs_approval() -> None:
    ops, cluster = _ops()  # the default policy asks approval for force

    with pytest.raises(UserError, match=r"drain on dev needs approval \(its policy lists force"):
        ops.drain_nodes("dev", ["web-0"], DrainFlags(force=True), SETTINGS, by=OPERATOR)

    assert not any(n.unschedulable for n in cluster.list_nodes()), "nothing cordoned"
    [refused] = [r for r in ops.store.audit_rows() if r.action == "refused_drain"]
    assert refused.actor == OPERATOR
    done = ops.drain_nodes("dev", ["web-0"], DrainFlags(force=True), SETTINGS, by=CLI)
    assert done.completed and _pods(cluster) == set()


def test_a_drain_by_hand_of_a_node_an_operation_holds_is_refused() -> None:
    ops, cluster = _ops(approval_required_for=frozenset({"drain"}))
    asked = ops.request(
        OperationRequest(OpKind.DRAIN, Target("dev", nodes=("web-0",)), requested_by=OPERATOR)
    )
    assert asked.operation is not None

    with pytest.raises(UserError, match=f"web-0 is busy: operation {asked.operation.id}"):
        ops.drain_nodes("dev", ["web-0"], DrainFlags(), SETTINGS, by=CLI)

    assert not any(n.unschedulable for n in cluster.list_nodes())

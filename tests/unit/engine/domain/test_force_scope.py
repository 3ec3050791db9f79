"""Forced runs and their approved force scope, on the real Operations, runner and a SQLite file.

A run that may evict or delete what a plain drain refuses (`--force`, phase 2 of a full
zero-scale) is tagged `force`: counted by `approval_required_for`, part of the plan hash, and
spelled out (which Pods, why a plain drain refuses each). What it may force is bounded by the
approval: owners (controller kind, namespace, name) and PodDisruptionBudgets, bare Pods by name.
A Pod that appears after the approval outside that scope is not forced: the run stops and says
what appeared; a replacement Pod of an approved owner is forced like the one it replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.kube.fake import FakeCluster
from engine.operations.service import Operations
from tests.unit.engine.operations import test_operations
from tests.unit.engine.operations.test_operations import APPROVER, OPERATOR, make_ops

cluster = test_operations.cluster
"""The fixture of the operations tests: pools web (3 nodes, a ReplicaSet's Pod on each) and batch."""

DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}


@pytest.fixture
def make(cluster: FakeCluster, tmp_path: Path) -> Iterator[Callable[..., Operations]]:
    """The real Operations over one SQLite file (a second one is a restart)."""
    made: list[Operations] = []

    def build(**policy_kw: object) -> Operations:
        made.append(make_ops(cluster, tmp_path / "scalebot.db", **policy_kw))
        return made[-1]

    yield build
    for ops in made:
        ops.runner.stop()
        ops.store.close()


def pinned(cluster: FakeCluster, name: str, node: str) -> None:
    """A Pod of ReplicaSet shop/pin whose owner opted out of disruption."""
    cluster.add_pod(
        "shop",
        name,
        node=node,
        controller_kind="ReplicaSet",
        controller_name="pin",
        annotations=DO_NOT_DISRUPT,
    )


def drain(*nodes: str, force: bool = True, by: str = OPERATOR) -> OperationRequest:
    return OperationRequest(
        kind=OpKind.DRAIN, target=Target(cluster="dev", nodes=nodes, force=force), requested_by=by
    )


def zero(*pools: str, force: bool = False, by: str = OPERATOR) -> OperationRequest:
    return OperationRequest(
        kind=OpKind.ZERO, target=Target(cluster="dev", pools=pools, force=force), requested_by=by
    )


def finished(ops: Operations, op_id: str) -> Operation:
    assert ops.runner.wait_idle(timeout=30), "operation did not finish"
    op = ops.get(op_id)
    assert op is not None
    return op


def add_when(ops: Operations, text: str, add: Callable[[], object]) -> None:
    """Run `add` once, on the runner's thread, when it reports `text`: after the approval."""
    done: list[bool] = []

    def listener(event: ProgressEvent) -> None:
        if not done and event.text.startswith(text):
            done.append(True)
            add()

    ops.subscribe(listener)


def test_a_forced_drain_by_an_operator_waits_for_approval_and_lists_each_pod_it_forces(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pod("shop", "bare", node="web-0")
    cluster.add_pod(
        "shop",
        "pinned",
        node="web-0",
        controller_kind="ReplicaSet",
        controller_name="pin",
        annotations=DO_NOT_DISRUPT,
    )
    ops = make()  # the default policy: approval_required_for [force, scale_down, zero]

    out = ops.request(drain("web-0"))

    op = out.operation
    assert out.ok and op is not None
    assert op.state is OpState.AWAITING_APPROVAL and op.approvals_required == 1, out.reply
    text = op.plan.to_text()
    assert "shop/bare (Pod/shop/bare): bare Pod (no controller)" in text, text
    assert (
        "shop/pinned (ReplicaSet/shop/pin): annotated karpenter.sh/do-not-disrupt=true: its owner opted out"
        in text
    ), text
    assert "shop/web-0" not in text.split("Forced run")[1], "a Pod a plain drain evicts is not forced"
    assert ops.runner.wait_idle(timeout=5)
    assert cluster.get_pod("shop", "bare") is not None and cluster.get_pod("shop", "pinned") is not None
    assert cluster.request_counts.get(("create", "pods/eviction"), 0) == 0
    stored = ops.get(op.id)  # read back from SQLite: the scope is saved with the approval
    assert stored is not None and stored.plan.force_scope == op.plan.force_scope
    assert stored.plan.force_scope is not None
    assert stored.plan.force_scope.units == ("Pod/shop/bare", "ReplicaSet/shop/pin")


def test_zero_of_one_pool_with_force_under_a_force_only_policy_waits_for_approval(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pod(
        "shop",
        "pinned",
        node="web-1",
        controller_kind="ReplicaSet",
        controller_name="pin",
        annotations=DO_NOT_DISRUPT,
    )
    ops = make(approval_required_for=frozenset({"force"}))

    plain = ops.request(zero("batch"))
    forced = ops.request(zero("web", force=True))

    assert plain.operation is not None and plain.operation.state is OpState.RUNNING, "nothing forced"
    assert forced.operation is not None and forced.operation.state is OpState.AWAITING_APPROVAL, forced.reply
    assert "shop/pinned (ReplicaSet/shop/pin): annotated" in forced.operation.plan.to_text()


def test_the_plan_hash_covers_force_and_its_scope_but_not_replacement_pod_names(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    ops = make()
    unforced = ops.plan(drain("web-0", force=False))
    forced = ops.plan(drain("web-0"))
    assert forced.plan_hash != unforced.plan_hash, "an approval of the plain drain must not cover --force"

    cluster.add_pod("shop", "bare", node="web-0")
    wider = ops.plan(drain("web-0"))
    assert wider.plan_hash != forced.plan_hash, "a new bare Pod widens the scope: a new approval"

    pinned(cluster, "pinned-a", "web-0")
    before = ops.plan(drain("web-0"))
    cluster.delete_pod(cluster.get_pod("shop", "pinned-a"), grace_seconds=0)  # type: ignore[arg-type]
    pinned(cluster, "pinned-b", "web-0")
    after = ops.plan(drain("web-0"))
    assert after.plan_hash == before.plan_hash, "the same owner's replacement Pod keeps the approval"


def test_an_approval_of_a_changed_force_scope_starts_nothing_and_asks_again(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    ops = make()
    op = ops.request(drain("web-0")).operation
    assert op is not None and op.state is OpState.AWAITING_APPROVAL
    cluster.add_pod("shop", "bare", node="web-0")  # appears between the card and the click

    out = ops.approve(op.approval_id, by=APPROVER)

    assert not out.ok and out.operation is not None and out.operation.state is OpState.SUPERSEDED
    again = [o for o in ops.list_operations() if o.id != op.id]
    assert [o.state for o in again] == [OpState.AWAITING_APPROVAL]
    assert again[0].plan.force_scope is not None and "Pod/shop/bare" in again[0].plan.force_scope.units


def test_a_pod_appearing_after_approval_is_not_forced_by_a_forced_drain(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pod("shop", "bare", node="web-0")
    ops = make()
    op = ops.request(drain("web-0")).operation
    assert op is not None
    add_when(ops, "Cordoned", lambda: cluster.add_pod("shop", "intruder", node="web-0"))

    assert ops.approve(op.approval_id, by=APPROVER).ok

    done = finished(ops, op.id)
    assert done.state is OpState.FAILED
    assert (
        "shop/intruder" in done.error
        and "Pod/shop/intruder was not in the approved force scope" in done.error
    )
    assert cluster.get_pod("shop", "intruder") is not None and cluster.get_pod("shop", "bare") is not None


def zero_everything(ops: Operations) -> Operation:
    op = ops.request(zero()).operation
    assert op is not None and op.plan.force_phase and op.state is OpState.AWAITING_APPROVAL
    return op


def test_a_pod_appearing_after_approval_is_not_force_deleted_in_phase_two_and_the_run_says_so(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    ops = make()
    events: list[ProgressEvent] = []
    ops.subscribe(events.append)
    op = zero_everything(ops)
    assert op.plan.force_scope is not None
    assert op.plan.force_scope.units == ("ReplicaSet/batch/job", "ReplicaSet/shop/web")
    assert op.plan.force_scope.pdbs == ("shop/web-pdb",)

    def stateful_pod_under_a_strict_budget() -> None:
        db = {"controller_kind": "StatefulSet", "controller_name": "db", "labels": {"app": "db"}}
        cluster.add_pod("data", "db-0", node="web-1", **db)  # type: ignore[arg-type]
        cluster.add_pdb("data", "db", match_labels={"app": "db"}, disruptions_allowed=0)

    add_when(ops, "Cordoned", stateful_pod_under_a_strict_budget)
    assert ops.approve(op.approval_id, by=APPROVER).ok

    done = finished(ops, op.id)
    assert done.state is OpState.FAILED, done.error
    assert cluster.get_pod("data", "db-0") is not None, "outside the approval: not force-deleted"
    assert cluster.get_pod("shop", "web-0") is not None, "the nodes stay, so nothing is force-deleted"
    assert done.progress.drain.force_deleted == ()
    actions = [r.action for r in ops.store.audit_rows(op_id=op.id)]
    assert "force_delete_pod" not in actions and "force_deleted_pod" not in actions
    assert {n.name for n in cluster.list_nodes()} == {"web-0", "web-1", "web-2", "batch-0", "batch-1"}
    final = [e.text for e in events if e.final and e.operation.id == op.id]
    assert len(final) == 1
    assert "data/db-0 (owner StatefulSet/data/db" in final[0]
    assert "StatefulSet/data/db was not in the approved force scope" in final[0]
    assert "request the operation again" in final[0], "the thread offers the new approval"


def test_a_replacement_pod_of_an_approved_owner_is_force_deleted_in_phase_two(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    ops = make()
    op = zero_everything(ops)
    replacement = lambda: cluster.add_pod(  # noqa: E731
        "shop",
        "web-x7k2",
        node="web-1",
        controller_kind="ReplicaSet",
        controller_name="web",
        labels={"app": "web"},
    )
    add_when(ops, "Cordoned", replacement)
    assert ops.approve(op.approval_id, by=APPROVER).ok

    done = finished(ops, op.id)
    assert done.state is OpState.SUCCEEDED, done.error
    forced = ["shop/web-0", "shop/web-1", "shop/web-2", "shop/web-x7k2"]
    assert sorted(done.progress.drain.force_deleted) == forced
    audited = [r.detail for r in ops.store.audit_rows(op_id=op.id) if r.action == "force_deleted_pod"]
    assert sorted(d.split(" ", 1)[0] for d in audited) == forced


def test_the_scope_survives_a_restart_in_phase_one(
    cluster: FakeCluster, make: Callable[..., Operations]
) -> None:
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    first = make()
    first.runner.start = lambda op_id: None  # type: ignore[method-assign]  # a crash right after the click
    op = zero_everything(first)
    assert first.approve(op.approval_id, by=APPROVER).ok
    cluster.add_pod("data", "late", node="web-0")  # a bare Pod nobody approved

    second = make()
    assert second.resume() == [op.id]

    done = finished(second, op.id)
    assert done.state is OpState.FAILED and "Pod/data/late was not in the approved force scope" in done.error
    assert cluster.get_pod("data", "late") is not None

"""Operations end to end on the in-memory cluster, virtual time and a real SQLite file.

Covers: the two-phase zero-scale (phase 1 honours PDBs for the window, phase 2 force-deletes
exactly what is left, nodes removed) and wake back to the recorded sizes; a partial zero-scale
that never forces; approvals (self-approval, quorum, double click, expiry, rejection); per-pool
locks; cancel; resume after a stop in the middle of phase 1; the append-only audit table.
Kubernetes' own behaviour is proven in tests/e2e.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store

OPERATOR, APPROVER, APPROVER2 = "U0OPER", "U0APPR", "U0APPR2"


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    for pool, count in (("web", 3), ("batch", 2)):
        for i in range(count):
            c.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    for i in range(3):
        c.add_pod(
            "shop",
            f"web-{i}",
            node=f"web-{i}",
            controller_kind="ReplicaSet",
            controller_name="web",
            labels={"app": "web"},
            grace=10,
        )
    c.add_pod("batch", "job-0", node="batch-0", controller_kind="ReplicaSet", controller_name="job", grace=10)
    return c


def make_ops(cluster: FakeCluster, db: Path, **policy_kw: object) -> Operations:
    assert cluster.clock is not None
    pol = policy.ClusterPolicy(
        cluster="dev",
        users={
            OPERATOR: policy.Role.OPERATOR,
            APPROVER: policy.Role.APPROVER,
            APPROVER2: policy.Role.APPROVER,
        },
        **policy_kw,  # type: ignore[arg-type]
    )
    handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
    return new_operations(
        Store(db),
        {"dev": handle},
        {"dev": pol},
        cluster.clock,
        settings=RunnerSettings(workers=2, parallel_evictions=4),
    )


@pytest.fixture
def ops(cluster: FakeCluster, tmp_path: Path) -> Iterator[Operations]:
    o = make_ops(cluster, tmp_path / "scalebot.db")
    yield o
    o.runner.stop()


def zero(pools: tuple[str, ...] = (), by: str = "cli:alice") -> OperationRequest:
    return OperationRequest(kind=OpKind.ZERO, target=Target(cluster="dev", pools=pools), requested_by=by)


def finish(ops: Operations, op_id: str) -> None:
    assert ops.runner.wait_idle(timeout=20), "operation did not finish"
    op = ops.get(op_id)
    assert op is not None


def test_zero_scale_of_every_pool_forces_what_phase_one_could_not_evict(
    cluster: FakeCluster, ops: Operations
) -> None:
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    cluster.add_pod(
        "shop",
        "pinned",
        node="web-0",
        controller_kind="ReplicaSet",
        controller_name="pinned",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
    )
    events: list[ProgressEvent] = []
    ops.subscribe(events.append)
    started = cluster.clock.now()  # type: ignore[union-attr]
    out = ops.request(zero())
    assert out.ok and out.operation is not None and out.operation.plan.force_phase
    finish(ops, out.operation.id)
    op = ops.get(out.operation.id)
    assert op is not None and op.state is OpState.SUCCEEDED, (op.state, op.error)
    assert cluster.list_nodes() == []
    forced = op.progress.drain.force_deleted
    assert set(forced) == {"shop/web-0", "shop/web-1", "shop/web-2", "shop/pinned"}
    assert cluster.clock.now() - started >= timedelta(minutes=5), "phase 1 lasts the whole window"  # type: ignore[union-attr]
    texts = [e.text for e in events]
    assert any(t.startswith("Phase 2: force-deleted 4 Pods") for t in texts)
    assert any(
        "cannot evict pod as it would violate the pod's disruption budget." in e.condition for e in events
    )
    audit = [r for r in ops.store.audit_rows(op_id=op.id) if r.action == "force_delete_pod"]
    assert len(audit) == 4 and any("web-pdb" in r.detail for r in audit)

    wake = ops.request(
        OperationRequest(kind=OpKind.WAKE, target=Target(cluster="dev"), requested_by="cli:alice")
    )
    assert wake.ok, wake.reply
    finish(ops, wake.operation.id)  # type: ignore[union-attr]
    woken = ops.get(wake.operation.id)  # type: ignore[union-attr]
    assert woken is not None and woken.state is OpState.SUCCEEDED
    assert sorted(n.name for n in cluster.list_nodes()) == ["batch-0", "batch-1", "web-0", "web-1", "web-2"]
    assert "5/5 nodes Ready" in [e for e in events if e.final][-1].text
    assert ops.store.restore_records("dev") == []


def test_zero_scale_of_one_pool_never_force_deletes(cluster: FakeCluster, tmp_path: Path) -> None:
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    ops.runner.settings = RunnerSettings(drain_timeout=timedelta(minutes=10), workers=1)
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    out = ops.request(zero(("web",)))
    assert out.operation is not None and not out.operation.plan.force_phase
    finish(ops, out.operation.id)
    op = ops.get(out.operation.id)
    assert op is not None and op.state is OpState.FAILED
    assert "did not complete within 10m" in op.error
    assert op.progress.drain.force_deleted == ()
    assert all(cluster.get_pod("shop", f"web-{i}") is not None for i in range(3))
    assert cluster.request_counts[("delete", "pods")] == 0
    ops.runner.stop()


def test_second_operation_on_a_busy_pool_is_refused_naming_the_first(ops: Operations) -> None:
    first = ops.request(zero(("web",), by=OPERATOR))
    assert first.operation is not None and first.operation.state is OpState.AWAITING_APPROVAL
    second = ops.request(zero(("web",), by="cli:bob"))
    assert not second.ok
    assert first.operation.id in second.reply and "busy" in second.reply
    other = ops.request(
        OperationRequest(
            kind=OpKind.SCALE, target=Target(cluster="dev", pools=("batch",), size=1), requested_by="cli:bob"
        )
    )
    assert other.ok, "a different pool is free"


def test_approval_rules(ops: Operations) -> None:
    out = ops.request(zero(("web",), by=OPERATOR))
    op = out.operation
    assert op is not None and op.approval_id and op.approvals_required == 1
    self_vote = ops.approve(op.approval_id, by=OPERATOR)
    assert not self_vote.ok and "your own request" in self_vote.reply
    stranger = ops.approve(op.approval_id, by="U0STRANGER")
    assert not stranger.ok and "approver role" in stranger.reply
    ok = ops.approve(op.approval_id, by=APPROVER)
    assert ok.ok and ok.changed and ok.operation is not None and ok.operation.state is OpState.RUNNING
    again = ops.approve(op.approval_id, by=APPROVER)
    assert again.ok and not again.changed and "already" in again.reply
    refusals = [r.action for r in ops.store.audit_rows(op_id=op.id)]
    assert refusals.count("refused_approve") == 2


def test_quorum_on_a_protected_cluster(cluster: FakeCluster, tmp_path: Path) -> None:
    ops = make_ops(cluster, tmp_path / "p.db", protected=True, protected_approvals=2)
    op = ops.request(zero(("web",), by=OPERATOR)).operation
    assert op is not None and op.approvals_required == 2
    first = ops.approve(op.approval_id, by=APPROVER)
    assert first.ok and "1 of 2 approvals" in first.reply
    assert ops.get(op.id).state is OpState.AWAITING_APPROVAL  # type: ignore[union-attr]
    second = ops.approve(op.approval_id, by=APPROVER2)
    assert second.operation is not None and second.operation.state is OpState.RUNNING
    ops.runner.stop()


def test_expired_request_cannot_be_approved(cluster: FakeCluster, ops: Operations) -> None:
    op = ops.request(zero(("web",), by=OPERATOR)).operation
    assert op is not None
    cluster.clock.advance(31 * 60)  # type: ignore[union-attr]
    out = ops.approve(op.approval_id, by=APPROVER)
    assert not out.ok and "expired" in out.reply
    assert ops.get(op.id).state is OpState.EXPIRED  # type: ignore[union-attr]
    assert ops.request(zero(("web",), by=OPERATOR)).ok, "the expired request released its locks"


def test_reject_and_cancel(ops: Operations) -> None:
    op = ops.request(zero(("web",), by=OPERATOR)).operation
    assert op is not None
    out = ops.reject(op.approval_id, by=APPROVER, reason="not tonight")
    assert out.ok and ops.get(op.id).state is OpState.REJECTED  # type: ignore[union-attr]
    done = ops.cancel(op.id, by=OPERATOR)
    assert not done.ok and "already finished" in done.reply


def test_unknown_pool_and_bad_sizes_change_nothing(ops: Operations) -> None:
    out = ops.request(zero(("nope",)))
    assert not out.ok and "pools: batch, web" in out.reply
    neg = ops.request(
        OperationRequest(
            kind=OpKind.SCALE, target=Target(cluster="dev", pools=("web",), size=-1), requested_by="cli:a"
        )
    )
    assert not neg.ok and "negative" in neg.reply
    wake = ops.request(OperationRequest(kind=OpKind.WAKE, target=Target(cluster="dev"), requested_by="cli:a"))
    assert not wake.ok and "not asleep" in wake.reply
    assert ops.list_operations() == []


def test_stop_in_phase_one_then_resume_reaches_phase_two_on_the_original_deadline(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    db = tmp_path / "resume.db"
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    first = make_ops(cluster, db)
    # No workers: the request is saved as running but nothing executes, like a crash right after it.
    first.runner.start = lambda op_id: None  # type: ignore[method-assign]
    op = first.request(zero()).operation
    assert op is not None
    second = make_ops(cluster, db)
    assert second.resume() == [op.id]
    finish(second, op.id)
    final = second.get(op.id)
    assert final is not None and final.state is OpState.SUCCEEDED
    steps = [r.event for r in second.store.journal_rows(op.id)]
    assert "resumed" in steps
    second.runner.stop()


def test_audit_table_is_append_only(ops: Operations, tmp_path: Path) -> None:
    ops.request(zero(("web",), by=OPERATOR))
    conn = sqlite3.connect(tmp_path / "scalebot.db")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM audit")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE audit SET detail = 'x'")
    conn.close()


def test_scheduled_sleep_needs_approval_unless_the_schedule_was_pre_approved(ops: Operations) -> None:
    per_run = OperationRequest(
        kind=OpKind.ZERO, target=Target(cluster="dev", pools=("web",)), requested_by="schedule:nightly"
    )
    waiting = ops.request(per_run).operation
    assert waiting is not None and waiting.state is OpState.AWAITING_APPROVAL
    ops.reject(waiting.approval_id, by=APPROVER)
    approved = OperationRequest(
        kind=OpKind.ZERO,
        target=Target(cluster="dev", pools=("web",)),
        requested_by="schedule:nightly",
        pre_approvers=("U0GONE",),  # no role today: a pre-approval counts only while its author may approve
    )
    stale = ops.request(approved).operation
    assert stale is not None and stale.state is OpState.AWAITING_APPROVAL
    ops.reject(stale.approval_id, by=APPROVER)
    running = ops.request(replace(approved, pre_approvers=(APPROVER,))).operation
    assert running is not None and running.state is OpState.RUNNING


def test_the_snapshot_lists_nodes_budgets_and_daemonsets_while_the_pods_are_being_listed(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    pods_started = threading.Event()
    others_seen_during_pods: list[str] = []
    inner_list_pods = cluster.list_pods

    def slow_list_pods(**kw: Any) -> Any:
        pods_started.set()
        # The pod listing lasts until the other three have been asked for (or gives up after 5 s).
        for _ in range(3):
            if not asked.acquire(timeout=5):
                break
            others_seen_during_pods.append("one")
        return inner_list_pods(**kw)

    asked = threading.Semaphore(0)

    def asking(inner: Any) -> Any:
        def call(**kw: Any) -> Any:
            asked.release()
            return inner(**kw)

        return call

    cluster.list_pods = slow_list_pods  # type: ignore[method-assign]
    cluster.list_nodes = asking(cluster.list_nodes)  # type: ignore[method-assign]
    cluster.list_pdbs = asking(cluster.list_pdbs)  # type: ignore[method-assign]
    cluster.list_daemonset_keys = asking(cluster.list_daemonset_keys)  # type: ignore[method-assign]
    ops = make_ops(cluster, tmp_path / "scalebot.db")
    try:
        snap = ops.snapshot(ops.handles["dev"])
    finally:
        ops.runner.stop()
    assert pods_started.is_set() and snap.nodes
    assert len(others_seen_during_pods) == 3, "nodes, budgets and DaemonSets were listed alongside the pods"


class _DeniedPools(SimulatedPoolProvider):
    """A provider that refuses the removal before the drain (a System pool's last node, a
    permission the role lacks)."""

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        raise _Denied(
            "deleteInstances denied: scalebot's service account needs compute.instanceGroupManagers.update"
        )


class _Denied(ScalebotError, RuntimeError):
    category = Category.CONFIGURATION


def test_a_configuration_refusal_fails_the_operation_with_its_message_and_gives_the_nodes_back(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    ops.runner.clusters["dev"] = replace(ops.runner.clusters["dev"], pools=_DeniedPools(cluster))
    out = ops.request(zero(("batch",)))
    assert out.operation is not None
    finish(ops, out.operation.id)
    op = ops.get(out.operation.id)
    assert op is not None and op.state is OpState.FAILED
    assert (
        op.error
        == "deleteInstances denied: scalebot's service account needs compute.instanceGroupManagers.update"
    )
    assert not any(n.unschedulable for n in cluster.list_nodes() if n.name.startswith("batch-")), "given back"
    ops.runner.stop()


def test_a_plan_lists_and_plans_with_the_garbage_collector_paused(
    cluster: FakeCluster, ops: Operations
) -> None:
    """The listing's pods live on into the plan: a collection between the pages and the plan would
    scan them again and again (docs/benchmarks.md, "Planning on a quiet machine")."""
    import gc

    for i in range(3000):
        cluster.add_pod(
            "shop", f"bulk-{i}", node=f"web-{i % 3}", controller_kind="ReplicaSet", controller_name="bulk"
        )
    collections: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(record)
    try:
        plan = ops.plan(zero())
    finally:
        gc.callbacks.remove(record)
    assert len(plan.nodes) == 5
    # At most the one that the first allocation after the plan sets off, when it is back on.
    assert len(collections) <= 1, collections
    assert gc.isenabled()

"""Approvals that cannot be bypassed, on the real Operations and Schedules, a real SQLite file and
virtual time: schedules cannot launder an approval, concurrent approvals and state changes are
compare-and-set, refusals are audited, reads need a role, the audit log is hash-chained, and no
database transaction is held while the cluster is listed.

Races are made deterministic with barriers and hooks at the points the service passes through (the
first write transaction of each click, the listing of the operations to expire), never with sleeps.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main as cli
from bot.cli.operations import EXIT_AUDIT_BROKEN
from engine.domain.clock import FakeClock
from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, Outcome, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import UserError, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.core.due import occurrence_on
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store

CLUSTER = "dev-eu"
OPERATOR, APPROVER, APPROVER2, APPROVER3, VIEWER = "U0OPER", "U0APPR", "U0APPR2", "U0APPR3", "U0VIEW"
MON = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
"""Monday 17:00 CET: the "Mon-Fri 20:00" Berlin sleep is at 19:00Z."""


class World:
    def __init__(self, db: Path, cluster: FakeCluster, clock: FakeClock, **pol: Any) -> None:
        self.policy = policy.ClusterPolicy(
            cluster=CLUSTER,
            users={
                OPERATOR: policy.Role.OPERATOR,
                APPROVER: policy.Role.APPROVER,
                APPROVER2: policy.Role.APPROVER,
                APPROVER3: policy.Role.APPROVER,
                VIEWER: policy.Role.VIEWER,
            },
            **pol,
        )
        self.cluster = cluster
        self.pools = SimulatedPoolProvider(cluster)
        handle = ClusterHandle(name=CLUSTER, api=cluster, pools=self.pools)
        self.ops = new_operations(
            Store(db),
            {CLUSTER: handle},
            {CLUSTER: self.policy},
            clock,
            settings=RunnerSettings(workers=2, parallel_evictions=4),
        )
        # Nothing executes: these tests are about who may start what, not about draining.
        self.ops.runner.start = lambda op_id: None  # type: ignore[method-assign]
        self.schedules = Schedules(self.ops.store, self.ops, clock)
        self.store = self.ops.store

    def set_role(self, user: str, role: policy.Role | None) -> None:
        users = dict(self.policy.users)
        if role is None:
            users.pop(user, None)
        else:
            users[user] = role
        self.policy = policy.ClusterPolicy(**{**_fields(self.policy), "users": users})
        self.ops.policies[CLUSTER] = self.policy

    def locks_of(self, op_id: str) -> list[str]:
        rows = self.store.db.table("locks").rows_where("op_id = ?", [op_id])
        return sorted(r["key"] for r in rows)

    def actions(self) -> list[str]:
        return [r.action for r in self.store.audit_rows()]


def _fields(p: policy.ClusterPolicy) -> dict[str, Any]:
    return {name: getattr(p, name) for name in p.__dataclass_fields__}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(MON)


@pytest.fixture
def cluster(clock: FakeClock) -> FakeCluster:
    c = FakeCluster(now=clock.now)
    for pool, count in (("web", 3), ("batch", 2)):
        for i in range(count):
            c.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    return c


@pytest.fixture
def make(tmp_path: Path, cluster: FakeCluster, clock: FakeClock) -> Iterator[Callable[..., World]]:
    worlds: list[World] = []

    def build(**pol: Any) -> World:
        w = World(tmp_path / f"scalebot-{len(worlds)}.db", cluster, clock, **pol)
        worlds.append(w)
        return w

    yield build
    for w in worlds:
        w.ops.runner.stop()
        w.store.close()


def zero(by: str, pools: tuple[str, ...] = ("web",)) -> OperationRequest:
    return OperationRequest(kind=OpKind.ZERO, target=Target(cluster=CLUSTER, pools=pools), requested_by=by)


def add_schedule(w: World, *, by: str, mode: str, name: str = "nights") -> None:
    out = w.schedules.add(
        name=name,
        cluster=CLUSTER,
        target=ScheduleTarget.zero_pools("web"),
        sleep="Mon-Fri 20:00",
        wake="Mon-Fri 07:00",
        tz="Europe/Berlin",
        lead_times="60m",
        channel="C0DEV",
        approval_mode=mode,
        by=by,
    )
    assert out.ok, out.reply


def run_now(
    w: World, clock: FakeClock, *, by: str, name: str = "nights", day: str = "2026-03-02"
) -> Operation | None:
    """Click "Run now" on the sleep of `day` once it is announced (the clock moved to 30 minutes
    before it, the 60-minute announcement made); returns the operation it created (if any)."""
    sched = w.schedules.show(name)
    assert sched is not None
    occ = occurrence_on(sched.spec, date.fromisoformat(day), "sleep")
    assert occ is not None
    if clock.now() < occ.at - timedelta(minutes=30):
        clock.advance((occ.at - timedelta(minutes=30) - clock.now()).total_seconds())
    w.schedules.announce(occ, timedelta(minutes=60), clock.now())
    out = w.schedules.run_now(occ.key, by=by)
    return out.operation


def running(op: Operation | None) -> bool:
    return op is not None and op.state is OpState.RUNNING


# --- 1. schedules do not launder approvals -------------------------------------------------------------


def test_an_operator_gets_no_zero_scale_through_any_schedule_path(
    make: Callable[..., World], clock: FakeClock
) -> None:
    """On a cluster needing 2 approvals: a schedule pre-approved by one approver, "Run now" by an operator,
    a pre-approval by the clicker, by someone who lost the role, of another definition: all ask."""
    w = make(approvals_required=2)
    # An operator cannot even ask for pre-approval, nor approve.
    refused = w.schedules.add(
        name="mine",
        cluster=CLUSTER,
        target=ScheduleTarget.zero_pools("batch"),
        sleep="Mon-Fri 20:00",
        wake="Mon-Fri 07:00",
        tz="Europe/Berlin",
        channel="C0DEV",
        approval_mode="pre_approved",
        by=OPERATOR,
    )
    assert not refused.ok and "approver role" in refused.reply
    # One approver creates a "pre-approved" schedule: their own approval does not count.
    add_schedule(w, by=APPROVER, mode="pre_approved")
    first = run_now(w, clock, by=OPERATOR)
    assert first is not None and first.state is OpState.AWAITING_APPROVAL, first
    assert first.approvals_required == 2
    assert set(first.initiated_by) == {"schedule:nights", APPROVER, OPERATOR}
    # The operator cannot approve it, the creator cannot either.
    assert not w.ops.approve(first.approval_id, by=OPERATOR).ok
    own = w.ops.approve(first.approval_id, by=APPROVER)
    assert not own.ok and "initiated" in own.reply
    assert w.ops.cancel(first.id, by=OPERATOR).ok

    # One more pre-approver: 1 of 2 (the creator's does not count).
    assert w.schedules.pre_approve("nights", by=APPROVER2).ok
    assert not w.schedules.pre_approve("nights", by=OPERATOR).ok, "an operator cannot pre-approve"
    assert not w.schedules.pre_approve("nights", by=APPROVER).ok, "nor the creator"
    second = w.schedules.fire("nights:2026-03-03:sleep", clock.now())
    assert second.operation is not None and second.operation.state is OpState.AWAITING_APPROVAL
    w.ops.cancel(second.operation.id, by=APPROVER2)

    # A second pre-approver completes the quorum ...
    assert w.schedules.pre_approve("nights", by=APPROVER3).ok
    # ... but "Run now" clicked by one of them is made on their behalf: their pre-approval is void for it.
    by_approver = run_now(w, clock, by=APPROVER3, day="2026-03-04")
    assert by_approver is not None and by_approver.state is OpState.AWAITING_APPROVAL
    w.ops.cancel(by_approver.id, by=APPROVER3)

    # A pre-approver who lost the approver role no longer counts, at the very next run.
    w.set_role(APPROVER3, policy.Role.OPERATOR)
    demoted = run_now(w, clock, by=OPERATOR, day="2026-03-05")
    assert demoted is not None and demoted.state is OpState.AWAITING_APPROVAL
    w.ops.cancel(demoted.id, by=OPERATOR)
    w.set_role(APPROVER3, policy.Role.APPROVER)

    # A changed definition is not the one approved: its pre-approvals are void.
    w.store.db.table("schedules").update("nights", {"sleep": "Mon-Fri 21:00"})
    assert w.schedules.show("nights").approvers == ()  # type: ignore[union-attr]
    edited = run_now(w, clock, by=OPERATOR, day="2026-03-06")
    assert edited is not None and edited.state is OpState.AWAITING_APPROVAL
    w.ops.cancel(edited.id, by=OPERATOR)
    w.store.db.table("schedules").update("nights", {"sleep": "Mon-Fri 20:00"})

    # Only now, with two standing pre-approvers other than the creator and the clicker, it runs at once.
    covered = run_now(w, clock, by=OPERATOR, day="2026-03-09")
    assert running(covered), covered
    audit = [r for r in w.store.audit_rows() if r.action == "pre_approval"]
    assert audit[-1].detail == f"standing pre-approvers: {APPROVER2}, {APPROVER3}; covers this run"


def test_a_per_run_schedule_of_an_approver_cannot_be_approved_by_its_creator(
    make: Callable[..., World], clock: FakeClock
) -> None:
    w = make()
    add_schedule(w, by=APPROVER, mode="per_run")
    op = w.schedules.fire("nights:2026-03-02:sleep", clock.now()).operation
    assert op is not None and op.state is OpState.AWAITING_APPROVAL
    own = w.ops.approve(op.approval_id, by=APPROVER)
    assert not own.ok and op.state is OpState.AWAITING_APPROVAL
    assert running(w.ops.approve(op.approval_id, by=APPROVER2).operation)


def test_a_protected_cluster_asks_at_every_run_whatever_the_pre_approvals(
    make: Callable[..., World], clock: FakeClock
) -> None:
    w = make(protected=True, protected_approvals=2)
    add_schedule(w, by=APPROVER, mode="pre_approved")
    assert w.schedules.pre_approve("nights", by=APPROVER2).ok
    assert w.schedules.pre_approve("nights", by=APPROVER3).ok
    op = w.schedules.fire("nights:2026-03-02:sleep", clock.now()).operation
    assert op is not None and op.state is OpState.AWAITING_APPROVAL and op.approvals_required == 2


def test_pre_approvers_by_user_group_count_while_the_group_lookup_says_so(
    make: Callable[..., World], clock: FakeClock
) -> None:
    """The group lookup (Slack) runs before the fire's transaction; when it fails it grants nothing."""
    w = make(groups={"S0SRE": policy.Role.APPROVER})
    add_schedule(w, by=APPROVER, mode="pre_approved")
    members: dict[str, tuple[str, ...]] = {"U0GROUPIE": ("S0SRE",)}
    in_transaction: list[bool] = []

    def groups_of(user: str) -> tuple[str, ...]:
        in_transaction.append(w.store._conn.in_transaction)
        return members.get(user, ())

    w.ops.groups_of = groups_of
    assert w.schedules.pre_approve("nights", by="U0GROUPIE", groups=("S0SRE",)).ok
    covered = w.schedules.fire("nights:2026-03-02:sleep", clock.now()).operation
    assert running(covered), covered
    assert in_transaction and not any(in_transaction), "Slack was asked inside a write transaction"
    members.clear()  # the lookup now fails (or the person left the group): the pre-approval is void
    w.ops.cancel(covered.id, by="cli:alice")  # type: ignore[union-attr]
    again = w.schedules.fire("nights:2026-03-03:sleep", clock.now()).operation
    assert again is not None and again.state is OpState.AWAITING_APPROVAL


def test_firing_a_schedule_holds_no_database_transaction_while_listing_the_cluster(
    make: Callable[..., World], clock: FakeClock, cluster: FakeCluster
) -> None:
    w = make()
    add_schedule(w, by=APPROVER, mode="per_run")
    seen: list[bool] = []
    list_pools, list_nodes = w.pools.list_pools, cluster.list_nodes

    def pools_spy() -> Any:
        seen.append(w.store._conn.in_transaction)
        return list_pools()

    def nodes_spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(w.store._conn.in_transaction)
        return list_nodes(*args, **kwargs)

    w.pools.list_pools = pools_spy  # type: ignore[method-assign]
    cluster.list_nodes = nodes_spy  # type: ignore[method-assign]
    out = w.schedules.fire("nights:2026-03-02:sleep", clock.now())
    assert out.operation is not None, out.reply
    assert len(seen) >= 2, "the fire listed the pools and the nodes"
    assert not any(seen), f"a write transaction was open during {seen.count(True)} of {len(seen)} listings"


# --- 2. concurrent approvals decide the plan check, quorum and start in one compare-and-set ------------


def _first_transactions_meet(store: Store, threads: set[int], barrier: threading.Barrier) -> None:
    """Hold each approving thread at its first write transaction until both clicks got there: both
    have read and validated the request before either writes (the worst interleaving)."""
    original = store.transaction
    arrived: set[int] = set()

    def gated() -> Any:
        me = threading.get_ident()
        if me in threads and me not in arrived:
            arrived.add(me)
            barrier.wait(timeout=10)
        return original()

    store.transaction = gated  # type: ignore[method-assign]


def test_two_approvers_clicking_together_on_a_changed_plan_get_a_new_card_not_a_run(
    make: Callable[..., World], cluster: FakeCluster
) -> None:
    w = make(approvals_required=2)
    op = w.ops.request(zero(OPERATOR)).operation
    assert op is not None and op.state is OpState.AWAITING_APPROVAL
    cluster.add_node("web-3", labels={"scalebot.io/pool": "web"})  # the plan shown is now stale
    results: dict[str, Outcome] = {}
    barrier = threading.Barrier(2)
    idents: set[int] = set()
    ready = threading.Barrier(3)

    def click(user: str) -> None:
        idents.add(threading.get_ident())
        ready.wait(timeout=10)
        results[user] = w.ops.approve(op.approval_id, by=user)

    threads = [threading.Thread(target=click, args=(u,)) for u in (APPROVER, APPROVER2)]
    for t in threads:
        t.start()
    ready.wait(timeout=10)  # both threads are known before the gate is armed
    _first_transactions_meet(w.store, idents, barrier)
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads)
    final = w.ops.get(op.id)
    assert final is not None and final.state is OpState.SUPERSEDED, final.state
    assert w.locks_of(op.id) == []
    newer = [o for o in w.ops.list_operations(active_only=True) if o.id != op.id]
    assert len(newer) == 1 and newer[0].state is OpState.AWAITING_APPROVAL
    assert newer[0].plan.pools[0].before == 4, "the new card shows the cluster as it is"
    assert not any(r.operation is not None and r.operation.state is OpState.RUNNING for r in results.values())


def test_the_plan_hash_covers_the_workloads_a_sleep_scales() -> None:
    from engine.domain.operation import OperationPlan

    before = OperationPlan(OpKind.ZERO, CLUSTER, workloads=1, workload_keys=("Deployment/shop/web",))
    after = OperationPlan(OpKind.ZERO, CLUSTER, workloads=1, workload_keys=("Deployment/shop/api",))
    assert before.plan_hash != after.plan_hash
    assert OperationPlan.from_json(before.to_json()) == before


# --- 3. every state change is compare-and-set ----------------------------------------------------------


def test_an_approval_racing_the_expiry_sweep_is_not_overwritten_and_keeps_its_locks(
    make: Callable[..., World], clock: FakeClock
) -> None:
    w = make()
    op = w.ops.request(zero(OPERATOR)).operation
    assert op is not None
    held = w.locks_of(op.id)
    assert held, "an awaiting request holds its pools and nodes"
    clock.advance(31 * 60)  # the sweep runs past the deadline ...
    original = w.store.list_operations

    def listed_then_approved(**kwargs: Any) -> list[Operation]:
        found = original(**kwargs)
        if kwargs.get("states") == [OpState.AWAITING_APPROVAL]:
            # ... and between its listing and its write, an approval that arrived in time (another
            # process, whose click was read a minute before the deadline) starts the operation.
            w.store.list_operations = original  # type: ignore[method-assign]
            sweep_clock, w.ops.clock = w.ops.clock, FakeClock(MON + timedelta(minutes=29))
            try:
                assert running(w.ops.approve(op.approval_id, by=APPROVER).operation)
            finally:
                w.ops.clock = sweep_clock
        return found

    w.store.list_operations = listed_then_approved  # type: ignore[method-assign]
    assert w.ops.expire_stale() == []
    final = w.ops.get(op.id)
    assert final is not None and final.state is OpState.RUNNING
    assert w.locks_of(op.id) == held, "a running operation keeps its locks"


def test_a_cancel_racing_the_end_of_the_operation_does_not_overwrite_it(make: Callable[..., World]) -> None:
    w = make()
    op = w.ops.request(zero("cli:alice")).operation
    assert op is not None and op.state is OpState.RUNNING

    def finished_meanwhile(op_id: str) -> bool:
        # Another process's runner finishes the operation between the cancel's read and its write.
        current = w.ops.get(op_id)
        assert current is not None
        from dataclasses import replace

        w.store.save_progress(replace(current, state=OpState.SUCCEEDED))
        return False

    w.ops.runner.is_running = finished_meanwhile  # type: ignore[method-assign]
    out = w.ops.cancel(op.id, by="cli:alice")
    assert not out.changed
    final = w.ops.get(op.id)
    assert final is not None and final.state is OpState.SUCCEEDED
    assert w.locks_of(op.id) == [], "finished: its locks went in the same write"


def test_runner_progress_does_not_overwrite_an_operation_ended_elsewhere(make: Callable[..., World]) -> None:
    w = make()
    op = w.ops.request(zero("cli:alice")).operation
    assert op is not None and op.state is OpState.RUNNING
    assert w.ops.cancel(op.id, by="cli:alice").ok  # no runner here: cancelled in the database
    from dataclasses import replace

    assert w.store.save_progress(replace(op, step="drain")) is False
    final = w.ops.get(op.id)
    assert final is not None and final.state is OpState.CANCELLED and final.step != "drain"


# --- 4. every action authorised and audited, refusals too ----------------------------------------------


def test_cordon_needs_a_role_respects_locks_and_protected_clusters_and_refusals_are_audited(
    make: Callable[..., World], cluster: FakeCluster
) -> None:
    w = make()
    viewer = w.ops.cordon(CLUSTER, ["batch-0"], by=VIEWER, unschedulable=True).outcome
    assert not viewer.ok and "operator role" in viewer.reply
    op = w.ops.request(zero(OPERATOR)).operation  # awaiting approval: holds pool web
    assert op is not None
    busy = w.ops.cordon(CLUSTER, ["web-1"], by=OPERATOR, unschedulable=True).outcome
    assert not busy.ok and op.id in busy.reply
    assert not cluster.get_node("web-1").unschedulable  # type: ignore[union-attr]
    assert w.ops.cordon(CLUSTER, ["batch-0"], by=OPERATOR, unschedulable=True).outcome.ok
    protected = make(protected=True)
    refused = protected.ops.cordon(CLUSTER, ["batch-1"], by=OPERATOR, unschedulable=True).outcome
    assert not refused.ok and "protected" in refused.reply
    assert w.actions().count("refused_cordon") == 2 and "cordon" in w.actions()
    assert protected.actions() == ["refused_cordon"]
    listed = protected.ops.cordon(CLUSTER, ["batch-1"], by=OPERATOR, unschedulable=False).outcome
    assert not listed.ok


def test_reads_need_a_role_and_plan_is_rate_limited_per_user(make: Callable[..., World]) -> None:
    w = make()
    assert w.ops.may_view(CLUSTER, by=VIEWER) == ""
    refusal = w.ops.may_view(CLUSTER, by="U0STRANGER")
    assert "viewer role" in refusal and w.actions() == ["refused_status"]
    assert w.ops.visible_clusters("U0STRANGER") == [] and w.ops.visible_clusters(VIEWER) == [CLUSTER]
    with pytest.raises(UserError, match="viewer role"):
        w.ops.preview(zero("U0STRANGER"))
    for _ in range(w.ops.plan_burst):
        w.ops.preview(zero(VIEWER))
    with pytest.raises(UserError, match="too many plans"):
        w.ops.preview(zero(VIEWER))
    w.ops.preview(zero(OPERATOR))  # per user: another person is not held back
    assert w.actions()[-1] == "refused_plan" and w.store.audit_rows()[-1].actor == VIEWER


def test_a_refused_request_is_audited_with_its_reason(make: Callable[..., World]) -> None:
    w = make()
    assert not w.ops.request(zero(VIEWER)).ok
    assert not w.ops.request(zero(OPERATOR, pools=("nope",))).ok
    rows = [r for r in w.store.audit_rows() if r.action == "refused_request"]
    assert [r.actor for r in rows] == [VIEWER, OPERATOR] and "nope" in rows[1].detail


# --- 8. the audit log is tamper-evident ----------------------------------------------------------------


def test_the_audit_hash_chain_detects_edits_and_deletions(
    make: Callable[..., World], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = make()
    for by in (OPERATOR, VIEWER, OPERATOR):
        w.ops.request(zero(by))
    db = tmp_path / "scalebot-0.db"
    checked, problems = w.store.verify_audit()
    assert checked == 3 and problems == []
    assert cli.main(["operations", "verify-audit", "--db", str(db)]) == 0
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER audit_no_update")  # someone with write access to the file
    conn.execute("UPDATE audit SET actor = 'U0SOMEONE' WHERE id = 2")
    conn.commit()
    assert [p.row_id for p in w.store.verify_audit()[1]] == [2]
    assert cli.main(["operations", "verify-audit", "--db", str(db)]) == EXIT_AUDIT_BROKEN
    assert "audit row 2: its content does not match its hash" in capsys.readouterr().err
    # verify-audit opened the file read-only: the dropped trigger stays dropped.
    conn.execute("DROP TRIGGER audit_no_delete")
    conn.execute("UPDATE audit SET actor = ? WHERE id = 2", (VIEWER,))
    conn.execute("DELETE FROM audit WHERE id = 2")
    conn.commit()
    conn.close()
    assert [(p.row_id, p.reason) for p in w.store.verify_audit()[1]] == [
        (3, "links to a previous row that is not the one before it")
    ]


def test_existing_audit_rows_are_chained_by_the_migration(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE audit (id INTEGER PRIMARY KEY, at TEXT, actor TEXT, action TEXT, op_id TEXT, "
        "cluster TEXT, detail TEXT)"
    )
    conn.execute("CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT RAISE(ABORT, 'x'); END")
    for i in range(3):
        conn.execute(
            "INSERT INTO audit (at, actor, action, op_id, cluster, detail) "
            "VALUES (?, 'U0A', 'request', '', '', '')",
            (f"2026-03-02T16:0{i}:00+00:00",),
        )
    conn.commit()
    conn.close()
    store = Store(db)
    store.audit(at=MON + timedelta(hours=1), actor="U0B", action="approve")
    assert store.verify_audit() == (4, [])
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store._conn.execute("UPDATE audit SET detail = 'x'")
    store.close()

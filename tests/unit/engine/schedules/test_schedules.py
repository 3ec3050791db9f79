"""The schedule service (engine.schedules.service) on the in-memory cluster, a real SQLite file and
virtual time.

Covers: adding schedules and every bad-input refusal (nothing saved); who may create, pre-approve and
decide; announcements at each lead time with the plan's numbers; postpone / skip / run now of one
occurrence (the next one unaffected); firing through Operations as `schedule:<name>`, idempotent by key;
missed runs at start-up (within the grace, beyond it, a missed wake); a manual wake turning the
scheduled wake into a no-op; temporary wakes with held sleeps and re-sleep at expiry; a restart in the
middle of a scheduled shutdown; per-run approval; pause / resume / delete / skip a date; the wake report;
the append-only overrides table. The timer itself (APScheduler) is tested in tests/unit/bot.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.announcement import NextEvent
from engine.domain.clock import FakeClock
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationProgress,
    OperationRequest,
    OperationSummary,
    OpKind,
    OpState,
    ProgressEvent,
    Target,
    WakeProgress,
    WorkloadCount,
    WorkloadsProgress,
)
from engine.domain.settings import RunnerSettings
from engine.kube import errors
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.operations.steps.report import summary_of as runner_summary
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.calendars import Calendars, load_calendar
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.core.requests import sleep_request, wake_request
from engine.schedules.core.text import wake_report
from engine.schedules.service import Schedules
from engine.store.database import Store
from engine.store.schedules import schedule_fingerprint

CLUSTER = "dev-eu"
OPERATOR, APPROVER, APPROVER2, VIEWER = "U0OPER", "U0APPR", "U0APPR2", "U0VIEW"
BERLIN = "Europe/Berlin"
MON = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
"""Monday 2026-03-02 17:00 CET; "Mon-Fri 20:00" Berlin is 19:00Z, "Mon-Fri 07:00" 06:00Z."""
MIN = timedelta(minutes=1)


def utc(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


class World:
    """One scalebot process: Store, Operations and Schedules on a shared DB file and clock."""

    def __init__(
        self,
        db: Path,
        clock: FakeClock,
        pools: SimulatedPoolProvider,
        *,
        run: bool = True,
        calendars: Calendars | None = None,
        **pol: Any,
    ) -> None:
        rules = policy.ClusterPolicy(
            cluster=CLUSTER,
            users={
                OPERATOR: policy.Role.OPERATOR,
                APPROVER: policy.Role.APPROVER,
                APPROVER2: policy.Role.APPROVER,
                VIEWER: policy.Role.VIEWER,
            },
            **pol,
        )
        # The cluster and its pools outlive a scalebot restart: every World shares one provider.
        handle = ClusterHandle(name=CLUSTER, api=pools.cluster, pools=pools)
        self.ops = new_operations(
            Store(db),
            {CLUSTER: handle},
            {CLUSTER: rules},
            clock,
            settings=RunnerSettings(workers=2, parallel_evictions=4),
        )
        if not run:  # like a crash right after the request: saved as running, nothing executes
            self.ops.runner.start = lambda op_id: None  # type: ignore[method-assign]
        self.schedules = Schedules(self.ops.store, self.ops, clock, calendars=calendars)
        self.finals: list[ProgressEvent] = []
        self.backs: list[str] = []
        self.ops.subscribe(self._on_progress)

    def _on_progress(self, event: ProgressEvent) -> None:
        back = self.schedules.operation_finished(event)
        if event.final:
            self.finals.append(event)
        if back is not None:
            self.backs.append(back.text)

    def settle(self) -> None:
        assert self.ops.runner.wait_idle(timeout=20), "operations did not finish"

    def stop(self) -> None:
        self.ops.runner.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(MON)


@pytest.fixture
def cluster(clock: FakeClock) -> FakeCluster:
    c = FakeCluster(now=clock.now)
    for pool, count in (("web", 3), ("batch", 2)):
        for i in range(count):
            c.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    c.add_pod(
        "shop",
        "web-a",
        node="web-0",
        controller_kind="ReplicaSet",
        controller_name="web",
        labels={"app": "web"},
        grace=5,
    )
    return c


@pytest.fixture
def pools(cluster: FakeCluster) -> SimulatedPoolProvider:
    return SimulatedPoolProvider(cluster)


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock, pools: SimulatedPoolProvider) -> Iterator[World]:
    w = World(tmp_path / "scalebot.db", clock, pools)
    yield w
    w.stop()


def add(s: Schedules, **changes: Any) -> Any:
    args: dict[str, Any] = {
        "name": "nights",
        "cluster": CLUSTER,
        "target": ScheduleTarget.whole_cluster(),
        "sleep": "Mon-Fri 20:00",
        "wake": "Mon-Fri 07:00",
        "tz": BERLIN,
        "lead_times": "60m,10m",
        "channel": "C0DEV",
        "approval_mode": "pre_approved",
        "by": APPROVER,
    }
    args |= changes
    out = s.add(**args)
    if out.ok and args["approval_mode"] == "pre_approved" and args["by"] != APPROVER2:
        # The creator's own pre-approval does not count: a second approver gives it.
        assert s.pre_approve(args["name"], by=APPROVER2).ok
    return out


def at(clock: FakeClock, instant: datetime) -> datetime:
    clock.advance((instant - clock.now()).total_seconds())
    return clock.now()


def ops_by(world: World, name: str = "nights") -> list[Operation]:
    return [op for op in world.ops.list_operations(limit=100) if op.requested_by == f"schedule:{name}"]


# --- adding and validating -----------------------------------------------------------------------


def test_a_valid_schedule_is_saved_audited_and_armed(world: World) -> None:
    out = add(world.schedules)
    assert out.ok, out.reply
    assert "Next: sleep Mon 20:00 CET (in 3 h)" in out.reply
    [saved] = world.schedules.all_schedules()
    assert saved.approvers == (APPROVER2,) and saved.approval_mode == "pre_approved" and saved.enabled
    assert str(saved.spec.sleep) == "Mon-Fri 20:00"
    assert [r.action for r in world.ops.store.audit_rows()] == ["schedule_add", "schedule_pre_approve"]
    assert world.schedules.next_wakeups(MON)[:3] == [utc(2, 18), utc(2, 18, 50), utc(2, 19)]


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"sleep": "Mon-Fri 25:00"}, 'sleep time: hour 25 in "25:00" is out of range 0-23'),
        ({"sleep": "Mon-Fry 20:00"}, 'sleep time: unknown day "Fry"'),
        ({"wake": "Mon-Fri 7"}, 'wake time: invalid time "7": use 24-hour H:MM'),
        ({"tz": "Mars/Olympus"}, 'unknown time zone "Mars/Olympus"'),
        ({"tz": "CET"}, 'time zone "CET" is not an IANA zone name'),
        ({"wake": "Mon-Fri 20:00"}, "the cluster cannot sleep and wake at once"),
        (
            {"wake": "Mon-Fri 20:30"},
            "lead time 60m is longer than the shortest gap between two events (30 min",
        ),
        ({"lead_times": "60"}, 'a bare number has no unit: write "60m"'),
        ({"exceptions": "2026-02-30"}, 'invalid date "2026-02-30"'),
        ({"name": "bad name!"}, 'invalid schedule name "bad name!"'),
        ({"cluster": "nope"}, 'unknown cluster "nope"; clusters: dev-eu'),
        (
            {"target": ScheduleTarget.zero_pools("web", "nope")},
            "unknown pool(s) nope in dev-eu; pools: batch, web",
        ),
        ({"target": ScheduleTarget("pools")}, "the pools target needs at least one pool"),
        ({"target": ScheduleTarget.scale_pool("web", -1)}, "pool web cannot be scaled to -1"),
        (
            {"target": ScheduleTarget("cluster", workloads=True)},
            "cluster dev-eu has no workloads provider configured",
        ),
        ({"target": ScheduleTarget.workloads_only()}, "cluster dev-eu has no workloads provider configured"),
        ({"target": ScheduleTarget("workloads", ("web",))}, "a workloads-only target takes no pools"),
        ({"approval_mode": "sometimes"}, 'unknown approval mode "sometimes": use pre_approved or per_run'),
        ({"channel": " "}, "missing channel"),
    ],
)
def test_bad_input_is_refused_with_a_precise_message_and_nothing_is_saved(
    world: World, changes: dict[str, Any], fragment: str
) -> None:
    out = add(world.schedules, **changes)
    assert not out.ok
    assert fragment in out.reply
    assert world.schedules.all_schedules() == []
    assert world.ops.store.list_schedules() == []


def test_overlapping_schedules_on_the_same_pools_are_refused_naming_the_other(world: World) -> None:
    assert add(world.schedules, name="web-nights", target=ScheduleTarget.zero_pools("web")).ok
    whole = add(world.schedules, name="all")
    assert not whole.ok
    assert "overlaps schedule web-nights, which already acts on pool(s) web of dev-eu" in whole.reply
    assert add(world.schedules, name="batch-nights", target=ScheduleTarget.zero_pools("batch")).ok
    again = add(world.schedules, name="web-nights", target=ScheduleTarget.zero_pools("web"))
    assert not again.ok and 'a schedule named "web-nights" exists' in again.reply
    assert [s.name for s in world.schedules.all_schedules()] == ["batch-nights", "web-nights"]


def test_a_taken_name_is_refused(world: World) -> None:
    assert add(world.schedules, target=ScheduleTarget.zero_pools("web")).ok
    out = add(world.schedules, target=ScheduleTarget.zero_pools("batch"))
    assert not out.ok and 'a schedule named "nights" exists' in out.reply


def test_creating_needs_an_operator_and_pre_approval_an_approver(world: World) -> None:
    viewer = add(world.schedules, by=VIEWER)
    assert (
        not viewer.ok
        and viewer.reply == "creating a schedule needs the operator role on dev-eu; you are viewer"
    )
    operator = add(world.schedules, by=OPERATOR)
    assert not operator.ok
    assert operator.reply == "pre-approving a schedule needs the approver role on dev-eu; you are operator"
    per_run = add(world.schedules, by=OPERATOR, approval_mode="per_run")
    assert per_run.ok, per_run.reply
    [saved] = world.schedules.all_schedules()
    assert saved.approval_mode == "per_run" and saved.approvers == ()
    actions = [r.action for r in world.ops.store.audit_rows()]
    assert actions == ["refused_schedule_add", "refused_schedule_pre_approve", "schedule_add"]


# --- announcements and decisions -----------------------------------------------------------------


def test_the_weekend_announcement_has_the_plan_numbers(world: World, clock: FakeClock) -> None:
    assert add(world.schedules, name="weekend", sleep="Fri 19:00", wake="Mon 07:00", lead_times="60m").ok
    now = at(clock, utc(6, 17))  # Friday 18:00 CET
    [result] = world.schedules.run_due(now)
    note = result.announcement
    assert note is not None and note.kind == "upcoming" and note.buttons and note.upcoming is not None
    assert (note.upcoming.event, note.upcoming.at) == ("weekend_shutdown", utc(6, 18))
    assert note.upcoming.summary == "2 pools, 5 nodes → 0" and note.upcoming.tz == "Europe/Berlin"
    assert note.upcoming.wake_at == utc(9, 6) and not note.reminder
    assert note.key == "weekend:2026-03-06:sleep" and note.channel == "C0DEV"
    assert world.schedules.run_due(now) == [], "announced once per lead"


def test_announcements_go_out_at_each_lead_time_and_a_late_timer_posts_only_the_latest(
    world: World, clock: FakeClock
) -> None:
    assert add(world.schedules).ok
    assert world.schedules.due(at(clock, utc(2, 17, 59))) == []
    [first] = world.schedules.run_due(at(clock, utc(2, 18)))
    assert first.announcement is not None and first.announcement.lead == timedelta(minutes=60)
    assert first.announcement.upcoming is not None and first.announcement.upcoming.at == utc(2, 19)
    assert not first.announcement.reminder and first.announcement.message_ts == ""
    [second] = world.schedules.run_due(at(clock, utc(2, 18, 52)))
    assert second.announcement is not None and second.announcement.lead == timedelta(minutes=10)
    assert second.announcement.upcoming == first.announcement.upcoming, "the same instant, no countdown"
    assert second.announcement.reminder, "the 60m message exists: the 10m lead edits it and reminds"
    # Tuesday: the timer wakes at 19:55 CET having missed the 60m instant: only the 10m one is posted.
    tuesday = world.schedules.due(at(clock, utc(3, 18, 55)))
    assert [(d.what, d.lead) for d in tuesday if d.occurrence.key == "nights:2026-03-03:sleep"] == [
        ("announce", timedelta(minutes=10))
    ]


def test_postpone_moves_only_that_occurrence(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    [announced] = world.schedules.run_due(at(clock, utc(2, 18)))
    key = announced.key
    world.schedules.set_announcement(key, channel="C0DEV", ts="1700.01")
    out = world.schedules.postpone(key, by=OPERATOR)
    assert out.ok and out.effective == utc(2, 20)
    assert "postponed to Mon 21:00 CET (60 min later)" in out.reply and out.decided_by == OPERATOR
    assert "<@" not in out.reply, "the bot renders who decided"
    assert out.announcement is not None and out.announcement.message_ts == "1700.01"
    assert out.announcement.decision is not None and out.announcement.decision.by == OPERATOR
    assert out.announcement.buttons and out.announcement.upcoming is not None
    assert out.announcement.upcoming.at == utc(2, 20)
    events = world.schedules.next_events(clock.now(), limit=3)
    assert [(o.key, eff) for o, eff in events] == [
        ("nights:2026-03-02:sleep", utc(2, 20)),
        ("nights:2026-03-03:wake", utc(3, 6)),
        ("nights:2026-03-03:sleep", utc(3, 19)),
    ]
    [reannounced] = world.schedules.run_due(at(clock, utc(2, 19)))
    assert reannounced.operation is None, "nothing fires at the old time"
    assert reannounced.announcement is not None and reannounced.announcement.upcoming is not None
    assert reannounced.announcement.upcoming.at == utc(2, 20)
    assert reannounced.announcement.reminder and reannounced.announcement.message_ts == "1700.01"
    fired = world.schedules.run_due(at(clock, utc(2, 20)))
    assert [r.operation is not None for r in fired] == [True]
    assert any(r.action == "schedule_postpone" for r in world.ops.store.audit_rows())


def test_postpones_add_up_and_past_the_wake_become_a_skip(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    key = "nights:2026-03-02:sleep"
    assert world.schedules.postpone(key, by=OPERATOR, delta=timedelta(hours=2)).effective == utc(2, 21)
    assert world.schedules.postpone(key, by=OPERATOR).effective == utc(2, 22)
    past = world.schedules.postpone_until(key, by=OPERATOR, until=utc(3, 7))
    assert past.ok and past.effective is None and "is skipped instead" in past.reply
    assert world.schedules.next_events(clock.now(), limit=1)[0][0].key == "nights:2026-03-03:wake"


def test_skip_affects_only_that_occurrence(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    out = world.schedules.skip("nights:2026-03-02:sleep", by=OPERATOR)
    assert out.ok and out.effective is None and "the schedule is unchanged" in out.reply
    assert out.announcement is not None and not out.announcement.buttons
    assert all(r.operation is None for r in world.schedules.run_due(at(clock, utc(2, 19))))
    assert ops_by(world) == []
    assert world.schedules.run_due(at(clock, utc(3, 6))) != []  # the wake: nothing asleep, a no-op
    tuesday = world.schedules.run_due(at(clock, utc(3, 19)))
    assert [r.operation is not None for r in tuesday if r.key == "nights:2026-03-03:sleep"] == [True]


def test_an_unauthorised_user_is_refused_and_nothing_changes(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    key = "nights:2026-03-02:sleep"
    for decide in (world.schedules.skip, world.schedules.postpone, world.schedules.run_now):
        out = decide(key, by=VIEWER)
        assert not out.ok and out.reply.endswith("needs the operator role on dev-eu; you are viewer")
    stranger = world.schedules.skip(key, by="U0STRANGER")  # no role on dev-eu: as if it did not exist
    assert not stranger.ok and stranger.reply.startswith("unknown or deleted schedule in")
    assert world.ops.store.overrides() == []
    assert world.schedules.next_events(clock.now(), limit=1)[0][1] == utc(2, 19)
    refused = [r.action for r in world.ops.store.audit_rows() if r.action.startswith("refused")]
    assert len(refused) == 4


def test_run_now_starts_the_sleep_at_once_and_the_timer_then_has_nothing_to_do(
    world: World, clock: FakeClock
) -> None:
    assert add(world.schedules).ok
    [announced] = world.schedules.run_due(at(clock, utc(2, 18)))  # the 60-minute announcement
    assert announced.announcement is not None and announced.announcement.buttons
    out = world.schedules.run_now("nights:2026-03-02:sleep", by=OPERATOR)
    assert out.ok and out.operation is not None, out.reply
    assert out.operation.requested_by == "schedule:nights" and out.operation.kind is OpKind.ZERO
    assert "was started early" in out.reply and out.decided_by == OPERATOR
    world.settle()
    assert world.schedules.run_due(at(clock, utc(2, 19))) == []
    assert len(ops_by(world)) == 1


def test_run_now_is_refused_for_a_run_nobody_was_told_of_and_nothing_starts(
    world: World, clock: FakeClock
) -> None:
    """On a pre-approved schedule, Run now starts a zero-scale with no approval: an operator clicking
    it on next week's sleep (a key they made up), or on tonight's before its announcement, would
    start one at an hour nobody was told of. Refused, audited; the announced run still starts."""
    assert add(world.schedules).ok
    for key in ("nights:2026-03-09:sleep", "nights:2026-03-02:sleep"):
        out = world.schedules.run_now(key, by=OPERATOR)
        assert not out.ok and out.operation is None
        assert "Run now starts only the announced sleep" in out.reply and "asks for approval" in out.reply
    assert ops_by(world) == [] and world.ops.store.overrides() == []
    refused = [r.action for r in world.ops.store.audit_rows() if r.action.startswith("refused")]
    assert refused == ["refused_schedule_run_now"] * 2
    world.schedules.run_due(at(clock, utc(2, 18)))  # tonight's announcement: now it may start early
    started = world.schedules.run_now("nights:2026-03-02:sleep", by=OPERATOR)
    assert started.ok and started.operation is not None, started.reply
    world.settle()


# --- firing --------------------------------------------------------------------------------------


def test_fire_goes_through_operations_as_the_schedule_and_is_idempotent(
    world: World, clock: FakeClock
) -> None:
    assert add(world.schedules).ok
    key = "nights:2026-03-02:sleep"
    world.schedules.set_announcement(key, channel="C0DEV", ts="1700.02")
    out = world.schedules.fire(key, at(clock, utc(2, 19)))
    op = out.operation
    assert out.ok and op is not None, out.reply
    assert (op.requested_by, op.kind, op.channel, op.thread_ts) == (
        "schedule:nights",
        OpKind.ZERO,
        "C0DEV",
        "1700.02",
    )
    assert op.state is OpState.RUNNING, "pre-approved: no approval card"
    again = world.schedules.fire(key, clock.now())
    assert again.ok and again.operation is None and "already running" in again.reply
    assert world.schedules.due(clock.now()) == []
    world.settle()
    assert world.ops.store.get_occurrence(key).state == "done"  # type: ignore[union-attr]
    assert len(ops_by(world)) == 1
    assert world.ops.store.get_schedule("nights").last_done_at == utc(2, 19)  # type: ignore[union-attr]


def test_the_scheduled_wake_restores_and_reports_it_is_back(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    world.schedules.run_due(at(clock, utc(2, 19)))
    world.settle()
    assert world.ops.handles[CLUSTER].api.list_nodes() == []
    [woke] = [r for r in world.schedules.run_due(at(clock, utc(3, 6))) if r.operation]
    assert woke.operation is not None and woke.operation.kind is OpKind.WAKE
    world.settle()
    assert len(world.ops.handles[CLUSTER].api.list_nodes()) == 5
    assert world.backs == ["dev-eu is back: 5/5 nodes Ready"]


def test_a_manual_wake_makes_the_scheduled_wake_a_no_op(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    world.schedules.run_due(at(clock, utc(2, 19)))
    world.settle()
    at(clock, utc(2, 22))
    manual = world.ops.request(
        OperationRequest(kind=OpKind.WAKE, target=Target(cluster=CLUSTER), requested_by="cli:alice")
    )
    assert manual.ok
    world.settle()
    [wake] = world.schedules.run_due(at(clock, utc(3, 6)))
    assert wake.ok and wake.operation is None and "already awake" in wake.reply
    assert [op.kind for op in ops_by(world)] == [OpKind.ZERO]
    assert world.ops.store.get_occurrence("nights:2026-03-03:wake").state == "done"  # type: ignore[union-attr]


def test_per_run_schedules_never_run_without_an_approval(world: World, clock: FakeClock) -> None:
    assert add(world.schedules, approval_mode="per_run", by=OPERATOR).ok
    out = world.schedules.fire("nights:2026-03-02:sleep", at(clock, utc(2, 19)))
    running = [op for op in ops_by(world) if op.state is OpState.RUNNING]
    assert running == [], out.reply


def test_per_run_on_a_protected_cluster_asks_for_approval(
    tmp_path: Path, clock: FakeClock, pools: SimulatedPoolProvider
) -> None:
    w = World(tmp_path / "p.db", clock, pools, protected=True, protected_approvals=1)
    assert add(w.schedules, approval_mode="per_run", by=OPERATOR).ok
    out = w.schedules.fire("nights:2026-03-02:sleep", at(clock, utc(2, 19)))
    assert out.operation is not None and out.operation.state is OpState.AWAITING_APPROVAL
    assert w.ops.approve(out.operation.approval_id, by=APPROVER).ok
    w.stop()


def test_a_tick_that_fails_is_retried_a_minute_later(
    world: World, clock: FakeClock, cluster: FakeCluster
) -> None:
    assert add(world.schedules, lead_times="").ok
    now = at(clock, utc(2, 19))
    cluster.fail_next("list", errors.KubeError(status=503, message="apiserver unavailable"), resource="nodes")
    with pytest.raises(errors.KubeError):
        world.schedules.run_due(now)
    assert world.ops.list_operations() == [], "nothing half-done: the fire's transaction rolled back"
    assert world.schedules.next_wakeups(now)[0] == now + timedelta(minutes=1)
    [late] = world.schedules.run_due(at(clock, now + timedelta(minutes=1)))
    assert late.operation is not None and late.decision is not None and late.decision.verdict == "run_late"


# --- missed runs and restarts --------------------------------------------------------------------


def test_a_sleep_missed_within_the_grace_runs_late_with_an_announcement(
    tmp_path: Path, clock: FakeClock, cluster: FakeCluster, pools: SimulatedPoolProvider
) -> None:
    db = tmp_path / "db"
    first = World(db, clock, pools)
    assert add(first.schedules, lead_times="").ok
    first.stop()  # scalebot is down at 20:00 CET
    later = World(db, clock, pools)
    [out] = later.schedules.startup(at(clock, utc(2, 19, 20)))
    assert out.decision is not None and out.decision.verdict == "run_late"
    assert out.operation is not None and out.operation.requested_by == "schedule:nights"
    assert out.announcement is not None and out.announcement.kind == "late"
    assert "missed by 20 min, within the 60 min grace: it runs 20 min late" in out.announcement.text
    assert later.schedules.startup(clock.now()) == []
    later.stop()


def test_a_sleep_missed_beyond_the_grace_is_announced_and_not_run(world: World, clock: FakeClock) -> None:
    assert add(world.schedules, lead_times="").ok
    restarted = Schedules(world.ops.store, world.ops, clock)
    [out] = restarted.startup(at(clock, utc(2, 20, 30)))
    assert out.decision is not None and out.decision.verdict == "announce_missed"
    assert out.operation is None and ops_by(world) == []
    assert out.announcement is not None and out.announcement.kind == "missed"
    assert "not run" in out.announcement.text and "beyond the 60 min grace" in out.announcement.text
    assert world.ops.store.get_occurrence("nights:2026-03-02:sleep").state == "missed"  # type: ignore[union-attr]
    assert restarted.startup(clock.now()) == [], "announced once, never dropped silently"


def test_a_manual_action_after_a_missed_sleep_wins(world: World, clock: FakeClock) -> None:
    assert add(world.schedules, lead_times="").ok
    at(clock, utc(2, 19, 10))  # the bot was down at 20:00; someone put the cluster to sleep by hand
    manual = world.ops.request(
        OperationRequest(kind=OpKind.ZERO, target=Target(cluster=CLUSTER), requested_by="cli:alice")
    )
    assert manual.ok
    [out] = world.schedules.startup(at(clock, utc(2, 19, 20)))
    assert out.decision is not None and out.decision.verdict == "noop"
    assert "the manual action wins" in out.reply
    assert out.operation is None and out.announcement is None
    assert ops_by(world) == []


def test_a_missed_wake_always_runs(
    tmp_path: Path, clock: FakeClock, cluster: FakeCluster, pools: SimulatedPoolProvider
) -> None:
    db = tmp_path / "db"
    first = World(db, clock, pools)
    assert add(first.schedules, lead_times="").ok
    first.schedules.run_due(at(clock, utc(2, 19)))
    first.settle()
    first.stop()  # down all night and all morning
    later = World(db, clock, pools)
    outs = later.schedules.startup(at(clock, utc(3, 15)))
    [woke] = [o for o in outs if o.operation is not None]
    assert woke.decision is not None and woke.decision.verdict == "run_late"
    assert woke.operation is not None and woke.operation.kind is OpKind.WAKE
    assert woke.announcement is not None and "a missed wake always runs" in woke.announcement.text
    later.settle()
    assert len(cluster.list_nodes()) == 5
    later.stop()


def test_a_restart_in_the_middle_of_a_scheduled_shutdown_resumes_it(
    tmp_path: Path, clock: FakeClock, cluster: FakeCluster, pools: SimulatedPoolProvider
) -> None:
    db = tmp_path / "db"
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    first = World(db, clock, pools, run=False)
    assert add(first.schedules, lead_times="").ok
    [fired] = first.schedules.run_due(at(clock, utc(2, 19)))
    assert fired.operation is not None
    second = World(db, clock, pools)
    assert second.schedules.startup(clock.now()) == [], "the occurrence is already running: no second fire"
    assert second.ops.resume() == [fired.operation.id]
    second.settle()
    done = second.ops.get(fired.operation.id)
    assert done is not None and done.state is OpState.SUCCEEDED, done
    assert cluster.list_nodes() == []
    assert done.progress.drain.force_deleted == ("shop/web-a",), "phase 1 waited on the PDB, phase 2 forced"
    assert second.ops.store.get_occurrence(fired.key).state == "done"  # type: ignore[union-attr]
    assert len(ops_by(second)) == 1
    first.stop()
    second.stop()


# --- temporary wake ------------------------------------------------------------------------------


def test_a_temporary_wake_holds_the_sleep_inside_it_and_re_sleeps_at_expiry(
    world: World, clock: FakeClock
) -> None:
    # Sleeps every evening (weekends too), wakes on weekdays: asleep all weekend.
    assert add(world.schedules, sleep="daily 20:00", wake="Mon-Fri 07:00", lead_times="30m").ok
    world.schedules.run_due(at(clock, utc(6, 19)))  # Friday's sleep
    world.settle()
    at(clock, utc(7, 18))  # Saturday 19:00 CET: someone needs the cluster for three hours
    out = world.schedules.wake_for(CLUSTER, timedelta(hours=3), by=OPERATOR, channel="C0DEV")
    assert out.ok, out.reply
    assert out.effective == utc(7, 21)
    world.settle()
    assert len(world.ops.handles[CLUSTER].api.list_nodes()) == 5
    held = world.ops.store.get_occurrence("nights:2026-03-07:sleep")
    assert held is not None and held.state == "skipped" and "held by a temporary wake" in held.note
    assert world.schedules.run_due(at(clock, utc(7, 19))) == [], "the held sleep does not run"
    [note] = world.schedules.run_due(at(clock, utc(7, 20, 30)))
    assert note.announcement is not None
    assert note.announcement.upcoming is not None
    upcoming = note.announcement.upcoming
    assert (upcoming.event, upcoming.at) == ("return_to_sleep", utc(7, 21))
    [resleep] = world.schedules.run_due(at(clock, utc(7, 21)))
    assert resleep.operation is not None and resleep.operation.requested_by == "schedule:nights"
    world.settle()
    assert world.ops.handles[CLUSTER].api.list_nodes() == []


# --- managing schedules --------------------------------------------------------------------------


def test_a_paused_schedule_does_nothing_and_events_while_paused_are_not_run_late(
    world: World, clock: FakeClock
) -> None:
    assert add(world.schedules, lead_times="").ok
    assert world.schedules.pause("nights", by=OPERATOR).ok
    assert world.schedules.next_wakeups(clock.now()) == []
    assert world.schedules.run_due(at(clock, utc(2, 19))) == []
    assert world.schedules.resume("nights", by=OPERATOR, groups=()).ok
    assert world.schedules.startup(at(clock, utc(2, 19, 30))) == [], "the 20:00 sleep happened while paused"
    assert world.schedules.next_event(CLUSTER, clock.now()) == NextEvent("wake", "nights", utc(3, 6), BERLIN)
    actions = [r.action for r in world.ops.store.audit_rows()]
    # The operator could not have pre-approved it: their resume voids the pre-approval.
    assert actions == [
        "schedule_add",
        "schedule_pre_approve",
        "schedule_pause",
        "schedule_pre_approval_voided",
        "schedule_resume",
    ]


def test_pause_resume_delete_need_an_operator_and_name_the_schedules(world: World) -> None:
    assert add(world.schedules).ok
    refused = world.schedules.delete("nights", by=VIEWER)
    assert (
        not refused.ok
        and refused.reply == "deleting a schedule needs the operator role on dev-eu; you are viewer"
    )
    unknown = world.schedules.pause("nope", by=OPERATOR)
    assert not unknown.ok and unknown.reply == 'no schedule "nope"; schedules: nights'
    assert world.schedules.delete("nights", by=OPERATOR).ok
    assert world.schedules.all_schedules() == [] and world.schedules.show("nights") is None


def test_skip_date_skips_the_sleep_and_wake_of_that_date_only(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    out = world.schedules.skip_date("nights", "2026-03-03", by=OPERATOR)
    assert out.ok, out.reply
    assert out.reply == (
        "Skipping the wake of Tue 07:00 CET and the sleep of Tue 20:00 CET (nights); "
        "the schedule is unchanged."
    )
    keys = [o.key for o, _ in world.schedules.next_events(clock.now(), limit=4)]
    assert keys == [
        "nights:2026-03-02:sleep",
        "nights:2026-03-04:wake",
        "nights:2026-03-04:sleep",
        "nights:2026-03-05:wake",
    ]
    assert [r.operation is not None for r in world.schedules.run_due(at(clock, utc(2, 19)))] == [True], (
        "skipping a later date hides nothing before it"
    )
    assert world.schedules.run_due(at(clock, utc(3, 6))) == []
    assert world.schedules.run_due(at(clock, utc(3, 19))) == []
    past = world.schedules.skip_date("nights", date(2026, 3, 1), by=OPERATOR)
    assert not past.ok and "nothing left to skip on Sun 2026-03-01" in past.reply
    bad = world.schedules.skip_date("nights", "tomorrow", by=OPERATOR)
    assert not bad.ok and 'invalid date "tomorrow": use YYYY-MM-DD' in bad.reply


def test_exception_dates_are_announced_at_the_shutdown_before_them(world: World, clock: FakeClock) -> None:
    assert add(world.schedules, exceptions="2026-03-03", lead_times="60m").ok
    [note] = world.schedules.run_due(at(clock, utc(2, 18)))
    assert note.announcement is not None
    assert note.announcement.upcoming is not None
    assert note.announcement.upcoming.wake_at == utc(4, 6)
    assert note.announcement.upcoming.no_wake_on == (date(2026, 3, 3),)


def test_unknown_keys_are_refused(world: World, clock: FakeClock) -> None:
    assert add(world.schedules).ok
    for key in ("nope:2026-03-02:sleep", "nights:2026-03-01:sleep", "nights:garbage:sleep", "x"):
        out = world.schedules.fire(key, clock.now())
        assert not out.ok and out.operation is None, key
    assert world.ops.list_operations() == []


def test_the_overrides_table_is_append_only(world: World, tmp_path: Path) -> None:
    assert add(world.schedules).ok
    assert world.schedules.skip("nights:2026-03-02:sleep", by=OPERATOR).ok
    conn = sqlite3.connect(tmp_path / "scalebot.db")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM overrides")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE overrides SET by = 'x'")
    conn.close()


# --- the wake report -----------------------------------------------------------------------------


def _woken(
    state: OpState, summary: OperationSummary | None, progress: OperationProgress | None = None
) -> Operation:
    return Operation(
        id="op-1",
        kind=OpKind.WAKE,
        target=Target(cluster=CLUSTER),
        state=state,
        requested_by="schedule:nights",
        created_at=MON,
        updated_at=MON,
        plan=OperationPlan(kind=OpKind.WAKE, cluster=CLUSTER),
        summary=summary,
        progress=progress or OperationProgress(),
    )


def test_the_wake_report_says_what_is_back_and_what_is_not() -> None:
    # The result as the runner writes it at the end of a wake, not a hand-made dictionary.
    woken = _woken(OpState.SUCCEEDED, None)
    progress = OperationProgress(
        wake=WakeProgress(ready=24, wanted=24),
        workloads=WorkloadsProgress(headline="61/61 workloads restored", available=WorkloadCount(61, 61)),
    )
    back = replace(woken, summary=runner_summary(woken, progress, MON))
    assert wake_report(back) == "dev-eu is back: 24/24 nodes Ready, 61/61 workloads available"
    nodes_only = runner_summary(woken, replace(progress, workloads=WorkloadsProgress()), MON)
    assert wake_report(replace(back, summary=nodes_only)) == "dev-eu is back: 24/24 nodes Ready"
    partly = _woken(
        OpState.FAILED,
        OperationSummary(duration_seconds=900, nodes_ready=(22, 24)),
        OperationProgress(wake=WakeProgress(not_ready=("web-1: KubeletNotReady", "web-2: not Ready"))),
    )
    assert wake_report(partly) == (
        "dev-eu is only partly back: 22/24 nodes Ready; not Ready: web-1: KubeletNotReady; web-2: not Ready"
    )
    failed = replace(_woken(OpState.FAILED, None), error="internal error (see scalebot's log)")
    assert wake_report(failed) == "dev-eu did not come back: internal error (see scalebot's log)"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"lead_times": "60"}, "lead"),
        ({"exceptions": "2026-02-30"}, "except"),
        ({"cluster": "nowhere"}, "cluster"),
        ({"channel": " "}, "channel"),
        ({"target": ScheduleTarget.zero_pools("nosuchpool")}, "target"),
        ({"approval_mode": "sometimes"}, "approval"),
    ],
)
def test_a_refused_schedule_names_the_field_it_is_about(
    world: World, changes: dict[str, Any], field: str
) -> None:
    out = add(world.schedules, **changes)
    assert not out.ok and out.field == field, out
    assert world.schedules.all_schedules() == []


def test_a_second_schedule_of_the_same_name_is_refused_at_the_name(world: World) -> None:
    assert add(world.schedules).ok
    again = add(world.schedules, target=ScheduleTarget.scale_pool("web", 1))
    assert not again.ok and again.field == "name" and "exists" in again.reply, again


# --- days off: public holidays and calendar files -----------------------------------------------------

RELEASES_ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//team//releases//EN
BEGIN:VEVENT
UID:release-1@team
DTSTAMP:20260101T000000Z
SUMMARY:Release weekend <!channel>
DTSTART;VALUE=DATE:20260327
DTEND;VALUE=DATE:20260330
END:VEVENT
BEGIN:VEVENT
UID:freeze-1@team
DTSTAMP:20260101T000000Z
SUMMARY:Freeze
DTSTART;TZID=Europe/Berlin:20261026T090000
DTEND;TZID=Europe/Berlin:20261026T170000
END:VEVENT
END:VCALENDAR
"""


@pytest.fixture
def days_world(tmp_path: Path, clock: FakeClock, pools: SimulatedPoolProvider) -> Iterator[World]:
    """A world whose configuration has the calendar `releases` (RELEASES_ICS)."""
    ics = tmp_path / "releases.ics"
    ics.write_text(RELEASES_ICS)
    calendars = Calendars({"releases": load_calendar("releases", ics, around=2026)})
    w = World(tmp_path / "days-off.db", clock, pools, calendars=calendars)
    yield w
    w.stop()


def fired_keys(world: World, clock: FakeClock, until: datetime) -> list[str]:
    """Let the timer run to `until` as the bot's timer would (arming at `next_wakeups`)."""
    keys: list[str] = []
    while (following := world.schedules.next_wakeups(clock.now())) and following[0] <= until:
        for out in world.schedules.run_due(at(clock, following[0])):
            if out.operation is not None or "nothing to do" in out.reply:
                keys.append(out.key)
        world.settle()
    return keys


def test_a_public_holiday_keeps_the_cluster_asleep_across_the_spring_change(
    days_world: World, clock: FakeClock
) -> None:
    world = days_world
    at(clock, datetime(2027, 3, 25, 12, tzinfo=UTC))  # Thu; Good Friday the 26th, CEST from the 28th
    assert add(world.schedules, holidays="DE-BY", lead_times="60m").ok
    announced = world.schedules.run_due(at(clock, datetime(2027, 3, 25, 18, tzinfo=UTC)))
    [note] = [o.announcement for o in announced if o.announcement is not None]
    assert note.upcoming is not None
    assert note.upcoming.wake_at == datetime(2027, 3, 30, 5, tzinfo=UTC)  # Tue 07:00 CEST
    assert note.upcoming.days_off == (
        "Stays asleep: Good Friday (DE-BY)",
        "Stays asleep: Easter Monday (DE-BY)",
    )
    assert fired_keys(world, clock, datetime(2027, 3, 30, 5, tzinfo=UTC)) == [
        "nights:2027-03-25:sleep",
        "nights:2027-03-30:wake",
    ]


def test_a_public_holiday_can_skip_only_the_wake_across_the_autumn_change(
    days_world: World, clock: FakeClock
) -> None:
    world = days_world
    at(clock, datetime(2027, 10, 27, 12, tzinfo=UTC))  # Wed; CET from Sun the 31st; All Saints Mon
    assert add(world.schedules, holidays="DE-BY", on_holiday="skip-wake", lead_times="").ok
    friday = datetime(2027, 10, 29, 18, tzinfo=UTC)  # Fri 20:00 CEST
    monday_sleep = datetime(2027, 11, 1, 19, tzinfo=UTC)  # Mon 20:00 CET: the sleep still runs
    event = world.schedules.next_event(CLUSTER, friday)
    assert event is not None and event.at == monday_sleep and event.action == "sleep"
    assert event.days_off == ("No wake: All Saints' Day (DE-BY)",)
    keys = fired_keys(world, clock, datetime(2027, 11, 2, 6, tzinfo=UTC))
    assert keys == [
        "nights:2027-10-27:sleep",
        "nights:2027-10-28:wake",
        "nights:2027-10-28:sleep",
        "nights:2027-10-29:wake",
        "nights:2027-10-29:sleep",
        "nights:2027-11-01:sleep",
        "nights:2027-11-02:wake",
    ]


def test_a_calendar_release_weekend_skips_the_sleep_across_the_spring_change(
    days_world: World, clock: FakeClock
) -> None:
    world = days_world
    at(clock, datetime(2026, 3, 26, 12, tzinfo=UTC))  # Thu; release weekend Fri 27 - Sun 29
    assert add(world.schedules, calendar="releases", on_holiday="skip-sleep", lead_times="").ok
    friday = datetime(2026, 3, 27, 19, tzinfo=UTC)  # Fri 20:00 CET would have slept
    [(skipped, why)] = world.schedules.days_off_until(clock.now(), datetime(2026, 3, 30, 12, tzinfo=UTC))
    assert (skipped.key, skipped.at) == ("nights:2026-03-27:sleep", friday)
    assert why == "Stays awake: Release weekend <!channel> (calendar releases)"
    assert fired_keys(world, clock, datetime(2026, 3, 30, 18, tzinfo=UTC)) == [
        "nights:2026-03-26:sleep",
        "nights:2026-03-27:wake",
        "nights:2026-03-30:wake",
        "nights:2026-03-30:sleep",  # Mon 20:00 CEST = 18:00Z: the next sleep after the weekend
    ]


def test_a_calendar_freeze_keeps_the_cluster_asleep_across_the_autumn_change(
    days_world: World, clock: FakeClock
) -> None:
    world = days_world
    at(clock, datetime(2026, 10, 23, 12, tzinfo=UTC))  # Fri; CET from Sun the 25th; freeze Mon 26
    assert add(world.schedules, calendar="releases", lead_times="60m").ok
    announced = world.schedules.run_due(at(clock, datetime(2026, 10, 23, 17, tzinfo=UTC)))
    [note] = [o.announcement for o in announced if o.announcement is not None]
    assert note.upcoming is not None
    assert note.upcoming.wake_at == datetime(2026, 10, 27, 6, tzinfo=UTC)  # Tue 07:00 CET
    assert note.upcoming.days_off == ("Stays asleep: Freeze (calendar releases)",)
    assert fired_keys(world, clock, datetime(2026, 10, 27, 6, tzinfo=UTC)) == [
        "nights:2026-10-23:sleep",
        "nights:2026-10-27:wake",
    ]


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"holidays": "XX"}, 'unknown country "XX" for holidays'),
        ({"holidays": "DE-XY"}, 'unknown region "XY" of DE for holidays: use one of BB, BE, BW, BY'),
        ({"holidays": "Bavaria!"}, 'holidays "Bavaria!": give a country code'),
        ({"calendar": "freezes"}, 'unknown calendar "freezes" (calendars: releases): add it'),
        ({"on_holiday": "party"}, 'on_holiday "party": use stay-asleep'),
    ],
)
def test_an_unknown_country_region_or_calendar_is_refused_when_saving(
    days_world: World, clock: FakeClock, changes: dict[str, str], fragment: str
) -> None:
    world = days_world
    out = add(world.schedules, **changes)
    assert not out.ok and out.field == "holidays"
    assert fragment in out.reply
    assert world.ops.store.list_schedules() == []
    assert [r.action for r in world.ops.store.audit_rows()] == ["refused_schedule_add"]


def test_days_off_are_part_of_what_a_pre_approval_consents_to(world: World) -> None:
    assert add(world.schedules).ok
    [stored] = world.ops.store.list_schedules()
    assert stored.days_off == {}
    following = replace(stored, days_off={"holidays": "DE-BY", "calendar": "", "action": "stay_asleep"})
    assert schedule_fingerprint(following) != schedule_fingerprint(stored)


def test_the_workloads_flag_is_part_of_what_a_pre_approval_consents_to(world: World) -> None:
    assert add(world.schedules).ok
    [approved] = world.schedules.all_schedules()
    assert approved.approvers == (APPROVER2,)
    [stored] = world.ops.store.list_schedules()
    assert "workloads" not in stored.target, "a schedule saved before the flag keeps its fingerprint"
    # The same schedule, changed to scale the workloads too: its pre-approval does not carry over.
    with_workloads = ScheduleTarget.from_json(stored.target)
    changed = replace(stored, target=replace(with_workloads, workloads=True).to_json())
    assert schedule_fingerprint(changed) != schedule_fingerprint(stored)
    world.ops.store.db.table("schedules").update("nights", {"target": json.dumps(changed.target)})
    [edited] = world.schedules.all_schedules()
    assert edited.target.workloads and edited.approvers == ()


def test_a_target_with_workloads_round_trips_and_a_row_saved_before_it_loads_unchanged() -> None:
    target = ScheduleTarget("pools", ("web",), workloads=True)
    assert ScheduleTarget.from_json(target.to_json()) == target
    old_row = {"kind": "cluster", "pools": [], "size": None}
    assert ScheduleTarget.from_json(old_row) == ScheduleTarget.whole_cluster()
    assert ScheduleTarget.whole_cluster().to_json() == old_row
    assert target.describe() == "pool web to 0 with workloads"
    assert replace(target, kind="cluster", pools=()).describe() == "every pool to 0 with workloads"


@pytest.mark.parametrize(
    ("target", "sleep", "wake"),
    [
        (
            ScheduleTarget("cluster", workloads=True),
            Target(cluster=CLUSTER, workloads=True),
            Target(cluster=CLUSTER, workloads=True),
        ),
        (
            ScheduleTarget("pools", ("web",), workloads=True),
            Target(cluster=CLUSTER, pools=("web",), workloads=True),
            Target(cluster=CLUSTER, pools=("web",), workloads=True),
        ),
        (
            ScheduleTarget.workloads_only(),
            Target(cluster=CLUSTER, workloads_only=True),
            Target(cluster=CLUSTER, workloads_only=True),
        ),
    ],
)
def test_a_schedules_sleep_and_wake_carry_its_workloads(
    world: World, target: ScheduleTarget, sleep: Target, wake: Target
) -> None:
    assert add(world.schedules).ok
    sched = replace(world.schedules.all_schedules()[0], target=target)
    assert sleep_request(sched).target == sleep
    asleep = {"web"} if target.kind != "workloads" else set()
    woken = wake_request(sched, asleep, workloads_asleep=True)
    assert woken is not None and woken.target == wake


def test_a_scheduled_wake_restores_the_workloads_its_sleep_scaled_once_the_pools_are_up(world: World) -> None:
    assert add(world.schedules).ok
    sched = world.schedules.all_schedules()[0]
    with_workloads = replace(sched, target=ScheduleTarget("cluster", workloads=True))
    woken = wake_request(with_workloads, set(), workloads_asleep=True)
    assert woken is not None and woken.target == Target(cluster=CLUSTER, workloads=True, workloads_only=True)
    assert wake_request(with_workloads, set(), workloads_asleep=False) is None
    assert wake_request(sched, set(), workloads_asleep=True) is None, "without the flag, a person's workloads"


def test_a_schedule_whose_calendar_left_the_configuration_is_named_with_what_to_do(
    days_world: World, clock: FakeClock
) -> None:
    assert add(days_world.schedules, calendar="releases").ok
    assert days_world.schedules.days_off_problems() == []
    restarted = Schedules(days_world.ops.store, days_world.ops, clock)  # a configuration without it
    assert restarted.days_off_problems() == [
        'schedule nights (calendar releases: stay asleep): unknown calendar "releases" (calendars: none '
        "configured): add it to the configuration under calendars: (name: path to an .ics file) and "
        "restart, or leave calendar= out; until then it runs without those days off (or delete the schedule)"
    ]

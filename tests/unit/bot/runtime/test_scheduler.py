"""The APScheduler timer (bot.runtime.apscheduler_timer) with a real BackgroundScheduler and short real
delays.

Covers: start() catches up from the table first (a missed sleep runs late and is announced), then
arms one one-shot date job per instant the service computes, with the explicit misfire grace and
coalescing; sync() re-arms after a change (a schedule added, one paused); a job fires on time in real
time, runs the sleep through Operations and re-arms for the next instant; an exception in a callback
is logged and the timer keeps going. Waits poll with a deadline; nothing sleeps blindly.

The service's clock is the wall clock shifted to a chosen instant, so a "20:00" sleep is a second
away without waiting for 20:00.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from bot.runtime.apscheduler_timer import MISFIRE_GRACE_SECONDS, APSchedulerTimer
from engine.domain.announcement import Announcement, NextEvent
from engine.domain.clock import FakeClock
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.core.model import ScheduleOutcome, ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store

CLUSTER = "dev-eu"
APPROVER = "U0APPR"
MON_17_CET = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
SLEEP = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
"""Monday 20:00 CET: the sleep of "Mon-Fri 20:00" Europe/Berlin."""


class ShiftedClock:
    """The wall clock moved to another instant: real seconds pass, at a chosen date."""

    def __init__(self, now: datetime) -> None:
        self.offset = now - datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        threading.Event().wait(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


def build(db: Path, clock: Any) -> Schedules:
    cluster = FakeCluster(now=clock.now)
    for pool, count in (("web", 2), ("batch", 1)):
        for i in range(count):
            cluster.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    ops = new_operations(
        Store(db),
        {CLUSTER: ClusterHandle(CLUSTER, cluster, SimulatedPoolProvider(cluster))},
        {CLUSTER: policy.ClusterPolicy(cluster=CLUSTER, users={APPROVER: policy.Role.APPROVER})},
        clock,
    )
    ops.runner.start = lambda op_id: None  # type: ignore[method-assign]  # the timer is under test, not the drain
    return Schedules(ops.store, ops, clock)


def add(schedules: Schedules, name: str = "nights", **changes: Any) -> None:
    args: dict[str, Any] = {
        "name": name,
        "cluster": CLUSTER,
        "target": ScheduleTarget.whole_cluster(),
        "sleep": "Mon-Fri 20:00",
        "wake": "Mon-Fri 07:00",
        "tz": "Europe/Berlin",
        "lead_times": "60m,10m",
        "channel": "C0DEV",
        "approval_mode": "pre_approved",
        "by": APPROVER,
    }
    out = schedules.add(**(args | changes))
    assert out.ok, out.reply


def eventually(check: Callable[[], bool], *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        threading.Event().wait(0.02)


class Recorder:
    def __init__(self) -> None:
        self.announced: list[Announcement] = []
        self.fired: list[ScheduleOutcome] = []

    def announce(self, note: Announcement) -> None:
        self.announced.append(note)

    def fire(self, outcome: ScheduleOutcome) -> None:
        self.fired.append(outcome)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def scheduler() -> Iterator[BackgroundScheduler]:
    s = BackgroundScheduler(timezone=UTC)
    yield s
    if s.running:
        s.shutdown(wait=True)


def runner_for(schedules: Schedules, recorder: Recorder, scheduler: BackgroundScheduler) -> APSchedulerTimer:
    return APSchedulerTimer(schedules, schedules.clock, recorder.announce, recorder.fire, scheduler=scheduler)


def test_start_arms_one_shot_jobs_from_the_table_and_sync_follows_changes(
    tmp_path: Path, recorder: Recorder, scheduler: BackgroundScheduler
) -> None:
    clock = ShiftedClock(MON_17_CET)
    schedules = build(tmp_path / "db", clock)
    add(schedules, target=ScheduleTarget.zero_pools("web"))
    runner = runner_for(schedules, recorder, scheduler)
    runner.start()
    expected = schedules.next_wakeups(clock.now())
    assert runner.armed() == expected
    assert expected[:4] == [
        datetime(2026, 3, 2, 18, 0, tzinfo=UTC),  # 60 min before Monday's sleep
        datetime(2026, 3, 2, 18, 50, tzinfo=UTC),  # 10 min before
        SLEEP,
        datetime(2026, 3, 3, 6, 0, tzinfo=UTC),  # Tuesday's wake
    ]
    jobs = scheduler.get_jobs()
    assert len(jobs) == len(expected)
    for job in jobs:
        assert type(job.trigger).__name__ == "DateTrigger"
        assert (job.misfire_grace_time, job.coalesce, job.max_instances) == (MISFIRE_GRACE_SECONDS, True, 1)
    first = min(job.next_run_time for job in jobs)
    assert abs(first - (datetime.now(UTC) + timedelta(hours=2))) < timedelta(seconds=5)
    assert recorder.announced == [] and recorder.fired == []

    add(
        schedules,
        name="batch-days",
        target=ScheduleTarget.zero_pools("batch"),
        sleep="Sat 09:00",
        wake="Mon 07:00",
    )
    schedules.pause("nights", by=APPROVER)
    runner.sync()
    assert runner.armed() == schedules.next_wakeups(clock.now())
    assert {job.id for job in scheduler.get_jobs()} == {
        f"schedules@{at.isoformat()}" for at in runner.armed()
    }
    assert datetime(2026, 3, 2, 18, 0, tzinfo=UTC) not in runner.armed(), "the paused schedule is disarmed"
    assert runner.next_event(CLUSTER) == NextEvent(
        "sleep", "batch-days", datetime(2026, 3, 7, 8, 0, tzinfo=UTC), "Europe/Berlin"
    )
    runner.stop()


def test_a_job_fires_in_real_time_runs_the_sleep_and_re_arms(
    tmp_path: Path, recorder: Recorder, scheduler: BackgroundScheduler
) -> None:
    clock = ShiftedClock(SLEEP - timedelta(seconds=2))
    schedules = build(tmp_path / "db", clock)
    add(schedules, lead_times="")
    runner = runner_for(schedules, recorder, scheduler)
    runner.start()
    assert runner.armed()[0] == SLEEP
    eventually(lambda: bool(recorder.fired))
    [fired] = recorder.fired
    assert fired.key == "nights:2026-03-02:sleep"
    assert fired.operation is not None and fired.operation.requested_by == "schedule:nights"
    eventually(lambda: runner.armed()[:1] == [datetime(2026, 3, 3, 6, 0, tzinfo=UTC)])
    assert {job.id for job in scheduler.get_jobs()} == {
        f"schedules@{at.isoformat()}" for at in runner.armed()
    }
    assert len(schedules.ops.list_operations()) == 1
    runner.stop()


def test_start_catches_up_a_missed_sleep_before_arming(
    tmp_path: Path, recorder: Recorder, scheduler: BackgroundScheduler
) -> None:
    db = tmp_path / "db"
    add(build(db, FakeClock(MON_17_CET)), lead_times="")  # created while scalebot still ran
    clock = ShiftedClock(SLEEP + timedelta(minutes=20))  # back up 20 minutes after the sleep
    runner = runner_for(build(db, clock), recorder, scheduler)
    runner.start()
    [late] = recorder.announced
    assert late.kind == "late" and "it runs 20 min late" in late.text
    [fired] = recorder.fired
    assert fired.operation is not None and fired.decision is not None and fired.decision.verdict == "run_late"
    assert SLEEP not in runner.armed()
    runner.stop()


def test_a_failing_callback_is_logged_and_the_timer_keeps_going(
    tmp_path: Path, scheduler: BackgroundScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ShiftedClock(SLEEP - timedelta(seconds=2))
    schedules = build(tmp_path / "db", clock)
    add(schedules, lead_times="")
    calls: list[ScheduleOutcome] = []

    def broken(outcome: ScheduleOutcome) -> None:
        calls.append(outcome)
        raise RuntimeError("Slack is down")

    runner = APSchedulerTimer(schedules, clock, lambda note: None, broken, scheduler=scheduler)
    with caplog.at_level(logging.ERROR, logger="bot.runtime.apscheduler_timer"):
        runner.start()
        eventually(lambda: bool(calls))
        eventually(lambda: bool(runner.armed()) and runner.armed()[0] > SLEEP)
    assert "schedule timer failed" in caplog.text and "Slack is down" in caplog.text
    assert scheduler.running
    assert schedules.ops.store.get_occurrence("nights:2026-03-02:sleep").state == "running"  # type: ignore[union-attr]
    runner.stop()

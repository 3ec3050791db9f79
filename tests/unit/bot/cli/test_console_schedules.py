"""Schedules in `scalebot console --simulated`: the real schedule commands, announcements and their
buttons, the add form as questions, and a clock that fast-forwards through a weekend.

The console runs on a FakeClock with its timer paused: `fast-forward` moves the clock to each
instant something is due and runs the bot's own timer tick there, so nothing waits on real time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from bot.cli.console import simulated_operations
from bot.runtime.apscheduler_timer import APSchedulerTimer
from engine.domain.clock import FakeClock, ScaledClock
from engine.domain.operation import OpKind, OpState
from engine.operations.service import Operations
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from tests.unit.bot.cli.test_console import ARROW, CLUSTER, console

THURSDAY = datetime(2026, 3, 5, 14, 0, tzinfo=UTC)
ADD = "schedule add weekend sleep=Fri 20:00 wake=Mon 07:00 tz=UTC lead=60m,10m"


@pytest.fixture
def ops() -> Iterator[Operations]:
    o = simulated_operations(clock=FakeClock(THURSDAY))
    yield o
    o.runner.stop()


def nodes(ops: Operations) -> int:
    return len(ops.handles[CLUSTER].api.list_nodes())


def test_an_added_schedule_is_announced_and_skip_keeps_the_cluster_up(ops: Operations) -> None:
    out = console(ops, f"{ADD}\nfast-forward 29h\nskip\nfast-forward 2h\nops list\n")

    added, announced, skipped, after, listed = out.split(f"{ARROW} ")[1:]
    assert "@alice added a schedule. Schedule saved: weekend: simulated, every pool to 0" in added
    assert "⏩ Fri 2026-03-06 19:00 UTC" in announced
    assert "🌙 Weekend shutdown of simulated starts Fri 20:00 UTC: 3 pools, 8 nodes → 0" in announced
    assert (
        "[Postpone 1h] [Postpone until…] [Skip this time] [Run now]  (type: postpone / skip / run-now)"
        in (announced)
    )
    assert "The sleep of Fri 20:00 UTC is skipped; the schedule is unchanged. (@alice)" in skipped
    assert "🕒 Fri 2026-03-06 21:00 UTC" in after
    assert "Zero-scale" not in after, "the skipped sleep did not run"
    assert "No operations yet." in listed
    assert nodes(ops) == 8
    assert ops.clock.now() == THURSDAY + timedelta(hours=31)


def test_a_weekend_sleeps_and_wakes_in_one_fast_forward_session(ops: Operations) -> None:
    out = console(ops, f"{ADD}\nfast-forward 30h\nas bob\napprove\nwait\nfast-forward 3d\n")

    before_wake, wake = out.split(f"{ARROW} fast-forward 3d\n")
    assert "Reminder (10 min before): weekend shutdown of simulated starts Fri 20:00 UTC" in before_wake
    assert "schedule weekend asks to zero cluster simulated: 3 pools, 8 nodes → 0" in before_wake
    # A schedule's night that succeeds ends on its card (no summary reply): the status line says it.
    assert "8 nodes removed; pools batch 3 → 0, system 2 → 0, web 3 → 0" in before_wake
    assert "⏩ Mon 2026-03-09 07:00 UTC" in wake
    assert "schedule weekend asks to wake cluster simulated" in wake
    assert "simulated is back: 8/8 nodes Ready" in wake
    sleep, woke = reversed(ops.list_operations())
    assert (sleep.kind, sleep.state, sleep.requested_by) == (
        OpKind.ZERO,
        OpState.SUCCEEDED,
        "schedule:weekend",
    )
    assert (woke.kind, woke.state) == (OpKind.WAKE, OpState.SUCCEEDED)
    assert nodes(ops) == 8


def test_run_now_starts_the_announced_sleep_at_once(ops: Operations) -> None:
    out = console(ops, f"{ADD}\nfast-forward 29h\nrun-now weekend\n")

    assert "asks to zero cluster simulated" in out.split(f"{ARROW} run-now weekend\n")[1]
    (op,) = ops.list_operations()
    assert op.kind is OpKind.ZERO and op.state is OpState.AWAITING_APPROVAL


def test_bare_schedule_add_asks_the_forms_fields(ops: Operations) -> None:
    # After the pools: the workloads (left running), the exception dates, the public holidays, the
    # calendar, what to do on those days (none, none, none, default).
    answers = ["nights", "", "Mon-Fri", "19:00", "", "", "", "30m", "", "", "batch", "", "", "", "", ""]

    out = console(ops, "schedule add\n" + "\n".join(answers) + "\nschedule list\n")

    assert "  Name []: nights" in out
    assert "  Cluster (simulated) [simulated]: " in out
    assert "  Announce before (optional) [60m,10m]: 30m" in out
    assert "  Workloads (no / yes / only) (optional) [no]: " in out
    assert (
        "Schedule saved: nights: simulated, pool batch to 0; sleep Mon-Fri 19:00 → wake Mon-Fri 07:00 (UTC)"
        in out
    )
    assert "🗓️ nights:" in out.split(f"{ARROW} schedule list\n")[1]


def test_a_bad_form_answer_names_the_field_and_saves_nothing(ops: Operations) -> None:
    answers = ["nights", "", "Someday", "19:00", "", "", "", "", "", "", "", "", "", "", "", ""]

    out = console(ops, "schedule add\n" + "\n".join(answers) + "\nschedule list\n")

    assert "Not saved: sleep_days:" in out
    assert "No schedules" in out.split(f"{ARROW} schedule list\n")[1]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("fast-forward 5", "a duration needs a unit — 5s or 5m?"),
        ("fast-forward", "Usage: `fast-forward DURATION`"),
        ("fast-forward next", "Nothing is scheduled"),
        ("fast-forward 90d", "up to 31d"),
        ("skip", "No announcement shows a `skip` button now"),
    ],
)
def test_console_schedule_actions_explain_bad_input(ops: Operations, line: str, said: str) -> None:
    out = console(ops, line + "\n")

    assert said in out
    assert ops.clock.now() == THURSDAY


def test_fast_forward_needs_the_simulated_cluster(ops: Operations) -> None:
    out = console(ops, "fast-forward 1h\n", simulated=False)

    assert "moves the simulated cluster's clock only" in out
    assert ops.clock.now() == THURSDAY


def test_the_bots_timer_waits_a_fast_clocks_instants_in_scaled_wall_time() -> None:
    clock = ScaledClock(600, start=THURSDAY)
    fast = simulated_operations(clock=clock)
    service = Schedules(fast.store, fast, clock)
    added = service.add(
        name="weekend",
        cluster=CLUSTER,
        target=ScheduleTarget.whole_cluster(),
        sleep="Fri 20:00",
        wake="Mon 07:00",
        tz="UTC",
        lead_times="60m",
        channel="CCONSOLE",
        approval_mode="per_run",
        by="U0ALICE",
    )
    assert added.ok, added.reply
    scheduler = BackgroundScheduler(timezone=UTC)
    timer = APSchedulerTimer(service, clock, lambda note: None, lambda outcome: None, scheduler=scheduler)
    timer.start(paused=True)
    try:
        wall_now = datetime.now(UTC)
        first = min(job.next_run_time for job in scheduler.get_jobs())
    finally:
        timer.stop()
        fast.runner.stop()
    # Fri 19:00 (the 60-minute announcement) is 29 h of this clock away: 174 s of real time.
    assert timedelta(seconds=170) < first - wall_now < timedelta(seconds=175)
    assert clock.wall_seconds(600) == 1.0


def test_schedule_next_shows_each_upcoming_event_once(ops: Operations) -> None:
    out = console(ops, f"{ADD}\nschedule next\n").split(f"{ARROW} schedule next\n")[1]

    assert out.count("😴 sleep · `weekend`") == 1, out
    assert out.count("☀️ wake · `weekend`") == 1, out


def test_a_drain_without_eviction_is_a_forced_run_that_needs_approval(ops: Operations) -> None:
    fake = ops.handles[CLUSTER].api
    before = fake.get_pod("shop", "postgres-0")
    assert before is not None and before.node_name == "web-2"
    out = console(ops, "drain web-2 --disable-eviction\nas bob\napprove\nwait\n")

    asked = out.split(f"{ARROW} as bob\n")[0]
    assert "Needs 1 approval" in asked and "Forced run (--disable-eviction)" in asked
    (op,) = ops.list_operations()
    assert op.plan.forcing == ("disable_eviction",) and op.state is OpState.SUCCEEDED
    # Deleted past its PodDisruptionBudget (allows 0); its StatefulSet makes a new postgres-0 elsewhere.
    after = fake.get_pod("shop", "postgres-0")
    assert after is None or (after.uid != before.uid and after.node_name != "web-2"), after


def test_status_names_the_next_scheduled_event(ops: Operations) -> None:
    out = console(ops, f"{ADD}\nstatus\n").split(f"{ARROW} status\n")[1]

    assert "No scheduled events." not in out
    assert "weekend" in out and "sleep" in out.lower()


def test_a_channel_name_in_the_console_asks_for_the_id_and_saves_nothing(ops: Operations) -> None:
    out = console(ops, f"{ADD} channel=#ops-alerts\nschedule list\n")

    assert "`channel=#ops-alerts`: a channel name is looked up in Slack, which is not here" in out, out
    assert "Schedule saved" not in out


def run_cli(cwd: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEBOT_DB", "KUBECONFIG")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *argv],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_the_simulated_consoles_db_keeps_its_schedules_and_without_one_it_leaves_no_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rehearsal.db"
    added = run_cli(tmp_path, "console", "--simulated", "--db", str(db), stdin=f"{ADD}\n")
    assert added.returncode == 0, added.stderr
    assert "Schedule saved: weekend" in added.stdout

    listed = run_cli(tmp_path, "schedule", "list", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    assert "weekend" in listed.stdout and "simulated" in listed.stdout
    again = run_cli(tmp_path, "console", "--simulated", "--db", str(db), stdin="schedule list\n")
    assert "Schedules (1)" in again.stdout, "a second console on the same file sees the schedule"

    in_memory = run_cli(tmp_path, "console", "--simulated", stdin=f"{ADD}\n")
    assert in_memory.returncode == 0, in_memory.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("rehearsal.db")) == []

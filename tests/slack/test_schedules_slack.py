"""Schedules in Slack over the real HTTP Bolt app: signed requests in, the local Slack Web API out.

The engine is real (Operations, Schedules, SQLite) on the in-memory cluster; time is a FakeClock. The
timer is the real `APSchedulerTimer` with an APScheduler that never starts its thread: a test moves the
clock to an instant and runs the job the runner armed, which is exactly what APScheduler would call.

Covers: `/scale schedule add` bad input (precise ephemeral errors, nothing saved) and a good one
(visible, re-armed); list / show / next in the reader's Slack time zone (users.info, cached);
pause / resume / skip DATE / delete; the announcement posted at the lead time with four buttons and
its reminder at the next lead; Postpone 1h by an operator moves that occurrence only and edits the
message in place; Skip by a viewer or a stranger is refused ephemerally and changes nothing; Run now
fires through Operations with the card and progress in the announcement's thread; Postpone until…
opens a modal (views.open with the click's trigger_id) whose submission is validated with
response_action="errors"; a bare `schedule add` opens the add modal; `/scale wake dev-eu for 3h`
is a temporary wake with a return to sleep.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from bot.runtime.apscheduler_timer import APSchedulerTimer
from bot.slack.app import serve_http, web_client
from bot.slack.blocks import operations as blocks
from bot.slack.blocks import schedules as schedule_blocks
from bot.slack.delivery.outbox import MemoryOutbox
from bot.slack.delivery.sender import Sender
from bot.slack.schedule_ui import ScheduleUi
from bot.text import schedule_copy
from engine.domain.clock import FakeClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.calendars import Calendars, load_calendar
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store
from engine.workloads import WorkloadScaler
from engine.workloads.model import HpaInfo, Kind, NamespaceInfo, WorkloadInfo
from tests.slack.conftest import (
    APPROVER,
    APPROVER_2,
    CHANNEL,
    FAST_SENDER,
    OPERATOR,
    POLICIES,
    PROD_CHANNEL,
    VIEWER,
    ControlledCluster,
    Engine,
    RunningBot,
    assemble,
    make_settings,
)
from tests.slack.harness import Call, HttpResult, SlackApiServer, all_text, buttons_of, wait_until

MON_17_CET = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
"""Monday 17:00 CET: "Mon-Fri 20:00" Europe/Berlin sleeps at 19:00Z, "Mon-Fri 07:00" wakes at 06:00Z."""
KEY = "nights:2026-03-02:sleep"
ADD = (
    "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m,10m "
    "approval=pre <#C0DEV|platform>"
)
STRANGER = "U0NOBODY"
ELSEWHERE = "C0ELSEWHERE"


def utc(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


class ZonedSlackApi(SlackApiServer):
    """The local Slack API, plus users.info with a time zone (what `schedule next` reads)."""

    def _canned(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "users.info":
            return {"ok": True, "user": {"id": body.get("user"), "tz": "America/New_York"}}
        return super()._canned(method, body)


class ManualScheduler(BackgroundScheduler):
    """APScheduler without its thread: armed jobs stay pending until the test runs one."""

    def start(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class World:
    bot: RunningBot
    clock: FakeClock
    ops: Operations
    schedules: Schedules
    runner: APSchedulerTimer
    scheduler: ManualScheduler
    cluster: ControlledCluster | None = None
    """The in-memory cluster with its test controls (None on a real control plane)."""

    def at(self, instant: datetime) -> None:
        self.clock.advance((instant - self.clock.now()).total_seconds())

    def tick(self) -> None:
        """Run the timer's armed job, as APScheduler does at its instant."""
        jobs = self.scheduler.get_jobs()
        assert jobs, "the runner armed no job"
        jobs[0].func()
        self.bot.settle()

    def announcement(self, key: str = KEY) -> Call:
        """The occurrence's channel message, once Slack returned its ts and the service recorded it."""
        call = self.bot.api.wait_for_call("chat.postMessage", lambda c: bool(buttons_of(c)))
        wait_until(lambda: self.announce_ts(key) != "", what="the announcement's ts is recorded")
        assert call.response["ts"] == self.announce_ts(key)
        return call

    def announce_ts(self, key: str = KEY) -> str:
        row = self.schedules.store.get_occurrence(key)
        return row.announce_ts if row else ""

    def updates(self, ts: str) -> list[Call]:
        return [c for c in self.bot.api.calls_to("chat.update") if c.body.get("ts") == ts]


@pytest.fixture
def slack_api() -> Iterator[SlackApiServer]:
    api = ZonedSlackApi().start()
    yield api
    api.close()


class NoWorkloads:
    """A cluster with no Deployment, StatefulSet or CronJob: schedules may scale its workloads (it
    has a workloads provider), and here only their words are tested; the real path is
    tests/e2e/test_schedules_e2e.py."""

    def list_namespaces(self) -> list[NamespaceInfo]:
        return []

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        return []

    def list_hpas(self) -> list[HpaInfo]:
        return []

    def has_keda(self) -> bool:
        return False

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        raise AssertionError("no workload to read")

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        raise AssertionError("no workload to scale")

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        return {}

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        raise AssertionError("no workload to record")


@pytest.fixture
def world(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[World]:
    yield from _world(slack_api, tmp_path, ("dev-eu",))


@pytest.fixture
def world_with_prod(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[World]:
    """dev-eu and the protected prod, on which VIEWER has no role."""
    yield from _world(slack_api, tmp_path, ("dev-eu", "prod"))


def _world(slack_api: SlackApiServer, tmp_path: Path, names: tuple[str, ...]) -> Iterator[World]:
    clock = FakeClock(MON_17_CET)
    clusters = {name: ControlledCluster(now=clock.now) for name in names}
    for cluster in clusters.values():
        for pool, count in (("web", 3), ("batch", 2)):
            for i in range(count):
                cluster.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    cluster = clusters["dev-eu"]
    later: list[Schedules] = []  # as `scalebot run` wires it: status asks the schedules made after
    ops = new_operations(
        Store(tmp_path / "scalebot.db"),
        {
            name: ClusterHandle(name, c, SimulatedPoolProvider(c), WorkloadScaler(NoWorkloads()))
            for name, c in clusters.items()
        },
        {name: POLICIES[name] for name in names},
        clock,
        settings=RunnerSettings(workers=2, parallel_evictions=4),
        next_event=lambda name: later[0].next_event(name, clock.now()) if later else None,
    )
    schedules = Schedules(ops.store, ops, clock)
    later.append(schedules)
    settings = make_settings(slack_api)
    ui = ScheduleUi(schedules, ops, clock=clock, default_cluster=settings.default_cluster)
    bot = assemble(slack_api, Engine(ops, {}), settings, subcommands=ui.subcommands(), clicks=ui.clicks())
    bot.http = serve_http(bot.app, 0, host="127.0.0.1")
    scheduler = ManualScheduler(timezone=UTC)
    runner = APSchedulerTimer(schedules, clock, ui.on_announce, ui.on_fired, scheduler=scheduler)
    ui.attach(sender=bot.sender, app=bot.app, runner=runner)
    runner.start()
    yield World(bot, clock, ops, schedules, runner, scheduler, cluster)
    runner.stop()
    bot.stop()
    ops.runner.stop()


def command(world: World, text: str, *, user: str = APPROVER) -> tuple[HttpResult, Call]:
    result, url = world.bot.command(text, user=user)
    assert result.status == 200
    return result, world.bot.wait_reply(url)


def added(world: World) -> None:
    _, reply = command(world, ADD)
    assert "Schedule saved" in all_text(reply), all_text(reply)
    # Its creator's pre-approval does not count: a second approver gives it.
    _, approved = command(world, "schedule approve nights", user=APPROVER_2)
    assert "Pre-approved schedule nights" in all_text(approved), all_text(approved)


def announced(world: World) -> Call:
    added(world)
    world.at(utc(2, 18))  # 60 minutes before Monday's 20:00 CET
    world.tick()
    return world.announcement()


def click(world: World, action: str, user: str, card: Call) -> tuple[HttpResult, str]:
    [button] = [b for b in buttons_of(card) if b["action_id"] == action]
    result, url = world.bot.click(action, button["value"], user=user, message_ts=card.response["ts"])
    assert result.status == 200
    return result, url


def submit_view(world: World, view: dict[str, Any], values: dict[str, Any], *, user: str) -> HttpResult:
    return world.bot.submit_view(view, values, user=user)


def picked(date: str, time: str) -> dict[str, Any]:
    return {
        schedule_copy.POSTPONE_DATE: {
            schedule_copy.POSTPONE_DATE: {"type": "datepicker", "selected_date": date}
        },
        schedule_copy.POSTPONE_TIME: {
            schedule_copy.POSTPONE_TIME: {"type": "timepicker", "selected_time": time}
        },
    }


# --- /scale schedule add ---------------------------------------------------------------------------


GOOD = "sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m,10m"


@pytest.mark.parametrize(
    ("text", "user", "fragment"),
    [
        (
            f"n {GOOD.replace('20:00', '25:00')}",
            APPROVER,
            'sleep time: hour 25 in "25:00" is out of range 0-23',
        ),
        (f"n {GOOD.replace('Mon-Fri 07:00', 'Mon-Fry 07:00')}", APPROVER, 'wake time: unknown day "Fry"'),
        (f"n {GOOD.replace('Europe/Berlin', 'CET')}", APPROVER, 'time zone "CET" is not an IANA zone name'),
        (f"n {GOOD.replace('Europe/Berlin', 'Mars/Olympus')}", APPROVER, 'unknown time zone "Mars/Olympus"'),
        ("n sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00", APPROVER, "Missing `tz=`"),
        ("n wake=Mon-Fri 07:00 tz=UTC", APPROVER, "Missing `sleep=`"),
        (f"n {GOOD.replace('60m,10m', '60')}", APPROVER, 'a bare number has no unit: write "60m"'),
        (
            f"n {GOOD.replace('07:00', '20:30')}",
            APPROVER,
            "lead time 60m is longer than the shortest gap between two events (30 min",
        ),
        (f"n {GOOD} pools=web,nope", APPROVER, "unknown pool(s) nope in dev-eu; pools: batch, web"),
        (f"n {GOOD} pools=web size=\uff13", APPROVER, "is not a pool size"),
        (f"n {GOOD} workloads=maybe", APPROVER, "`workloads=maybe` is not a choice: `yes` scales"),
        (f"n {GOOD} pools=web workloads=only", APPROVER, "`workloads=only` changes no node pool"),
        (f"n {GOOD} pools=web size=1 workloads=yes", APPROVER, "`workloads=yes` goes with pools scaled to 0"),
        (f"n {GOOD} except=2026-02-30", APPROVER, 'invalid date "2026-02-30"'),
        (f"n {GOOD} approval=sometimes", APPROVER, "`approval=sometimes` is not an approval mode"),
        (f"n {GOOD} approval=pre", OPERATOR, "pre-approving a schedule needs the approver role on dev-eu"),
        (f"n {GOOD}", VIEWER, "creating a schedule needs the operator role on dev-eu; you are viewer"),
        (f"n {GOOD} colour=red", APPROVER, "`schedule add` has no option `colour=`"),
        (f"n {GOOD} timezon=UTC", APPROVER, "Did you mean `tz=`?"),
        (f"n {GOOD} channel=ops", APPROVER, "`channel=ops` is not a channel"),
        (f"n {GOOD} cluster=nope", APPROVER, 'unknown cluster "nope"; clusters: dev-eu'),
        (f"n {GOOD} extra", APPROVER, "Unexpected argument: `extra`"),
        (f"-bad {GOOD}", APPROVER, 'invalid schedule name "-bad"'),
        (f"n {GOOD} sleep=daily 21:00", APPROVER, "`sleep=` is given twice"),
        (f"n {GOOD} holidays=XX", APPROVER, 'unknown country "XX" for holidays'),
        (f"n {GOOD} holidays=DE-XY", APPROVER, 'unknown region "XY" of DE for holidays: use one of BB'),
        (f"n {GOOD} calendar=freezes", APPROVER, 'unknown calendar "freezes" (calendars: none configured)'),
        (f"n {GOOD} on-holiday=party", APPROVER, 'on_holiday "party": use stay-asleep'),
    ],
)
def test_bad_schedule_add_is_refused_precisely_ephemerally_and_saves_nothing(
    world: World, text: str, user: str, fragment: str
) -> None:
    result, reply = world.bot.command(f"schedule add {text}", user=user)
    if result.json():  # refused by the command parser: the ephemeral ack itself
        answer, kind = json.dumps(result.json()), result.json()["response_type"]
    else:
        call = world.bot.wait_reply(reply)
        answer, kind = all_text(call), call.body["response_type"]
    assert fragment in answer
    assert kind == "ephemeral"
    world.bot.settle()
    assert world.schedules.all_schedules() == [] and world.schedules.store.list_schedules() == []
    assert world.bot.api.calls_to("chat.postMessage") == []
    assert world.runner.armed() == []


def test_schedule_add_is_announced_in_channel_and_arms_the_timer(world: World) -> None:
    _, reply = command(world, ADD)
    text = all_text(reply)
    assert reply.body["response_type"] == "in_channel"
    assert f"<@{APPROVER}> added a schedule" in text
    assert "sleep Mon-Fri 20:00 → wake Mon-Fri 07:00 (Europe/Berlin)" in text
    assert "pre-approval asked, none given yet (`/scale schedule approve nights`)" in text
    assert f"announced 60 min, 10 min before in <#{CHANNEL}>" in text
    assert (
        f"Next: sleep <!date^{int(utc(2, 19).timestamp())}^{{date_short_pretty}} {{time}}|Mon 20:00 CET>."
        in text
    )
    assert "(in " not in text, "a message in the channel: no relative phrase to go stale"
    [saved] = world.schedules.all_schedules()
    assert (saved.channel, saved.approval_mode, saved.target.kind) == (CHANNEL, "pre_approved", "cluster")
    assert world.runner.armed()[:3] == [utc(2, 18), utc(2, 18, 50), utc(2, 19)]
    assert [r.action for r in world.ops.store.audit_rows()] == ["schedule_add"]


def test_list_show_and_next_in_the_readers_time_zone(world: World) -> None:
    added(world)
    _, listed = command(world, "schedule list", user=VIEWER)
    assert listed.body["response_type"] == "ephemeral" and "nights: dev-eu, every pool to 0" in all_text(
        listed
    )
    _, shown = command(world, "schedule show nights", user=VIEWER)
    assert "*Mon 20:00 CET* · 😴 sleep · `nights` · in 3 h" in all_text(shown)
    _, first = command(world, "schedule next", user=VIEWER)
    _, second = command(world, "schedule next dev-eu", user=VIEWER)
    for reply in (first, second):
        text = all_text(reply)
        assert "times in America/New_York" in text
        assert "*Mon 14:00 EST* · 😴 sleep · `nights` · in 3 h · dev-eu" in text
        assert "*Tue 01:00 EST* · ☀️ wake" in text
    assert len(world.bot.api.calls_to("users.info")) == 1, "the zone is cached"
    _, unknown = command(world, "schedule show nope", user=VIEWER)
    assert 'No schedule "nope"; schedules: nights.' in all_text(unknown)
    _, typo = command(world, "schedule lsit", user=VIEWER)
    assert "Did you mean `schedule list`?" in all_text(typo)


def test_status_shows_the_next_event_as_a_time_in_each_readers_zone(world: World) -> None:
    added(world)

    _, reply = command(world, "status dev-eu", user=VIEWER)

    sleep_at = int(utc(2, 19).timestamp())
    text = all_text(reply)
    when = f"<!date^{sleep_at}^{{date_short_pretty}} {{time}}|Mon 20:00 CET>"
    assert f"Next scheduled event: sleep (nights) {when}" in text
    assert "in 3 h" not in text, "the Home tab shows this line too, and is not re-rendered as time passes"


def test_pause_resume_skip_a_date_and_delete(world: World) -> None:
    added(world)
    _, refused = command(world, "schedule pause nights", user=VIEWER)
    assert "pausing a schedule needs the operator role on dev-eu; you are viewer" in all_text(refused)
    assert world.schedules.show("nights").enabled  # type: ignore[union-attr]
    _, paused = command(world, "schedule pause nights", user=OPERATOR)
    assert paused.body["response_type"] == "in_channel" and "Schedule nights paused." in all_text(paused)
    assert world.runner.armed() == [], "a paused schedule is disarmed"
    command(world, "schedule resume nights", user=OPERATOR)
    assert world.runner.armed()[0] == utc(2, 18)
    _, skipped = command(world, "schedule skip nights 2026-03-02", user=OPERATOR)
    assert "Skipping the sleep of Mon 20:00 CET" in all_text(skipped)
    assert utc(2, 19) not in world.runner.armed()
    _, bad_date = command(world, "schedule skip nights 2026-13-01", user=OPERATOR)
    assert 'invalid date "2026-13-01"' in all_text(bad_date)
    _, deleted = command(world, "schedule delete nights", user=OPERATOR)
    assert "Schedule nights deleted." in all_text(deleted)
    assert world.schedules.all_schedules() == [] and world.runner.armed() == []


# --- announcements and their buttons ----------------------------------------------------------------


def test_announcement_is_posted_at_the_lead_time_with_four_buttons(world: World) -> None:
    added(world)
    world.at(utc(2, 17, 59))
    assert world.schedules.due(world.clock.now()) == []
    world.at(utc(2, 18))
    world.tick()
    card = world.announcement()
    assert card.body["channel"] == CHANNEL and not card.body.get("thread_ts")
    text = all_text(card)
    sleep_at, wake_at = int(utc(2, 19).timestamp()), int(utc(3, 6).timestamp())
    # Absolute times each reader sees in their own zone (the schedule's zone as the fallback).
    starts = f"starts <!date^{sleep_at}^{{date_short_pretty}} {{time}}|Mon 20:00 CET>"
    assert f"Scheduled shutdown of dev-eu {starts}: 2 pools, 5 nodes → 0" in text
    assert f"Back <!date^{wake_at}^{{date_short_pretty}} {{time}}|Tue 07:00 CET>." in text
    assert "pre-approved by" in text and "(in " not in text, "no relative phrase left to go stale"
    assert [b["action_id"] for b in buttons_of(card)] == [
        blocks.ACTION_POSTPONE_1H,
        blocks.ACTION_POSTPONE_UNTIL,
        blocks.ACTION_SKIP,
        blocks.ACTION_RUN_NOW,
    ]
    assert {schedule_blocks.key_of(b["value"]) for b in buttons_of(card)} == {KEY}

    world.at(utc(2, 18, 50))  # the 10-minute lead: the same message, edited, and a reminder in its thread
    world.tick()
    ts = card.response["ts"]
    reminder = world.bot.api.wait_for_call("chat.postMessage", lambda c: c.body.get("thread_ts") == ts)
    assert "⏰" in all_text(reminder)
    assert f"Reminder (10 min before): scheduled shutdown of dev-eu {starts}" in all_text(reminder)
    assert "(in " not in all_text(reminder)
    # The edit for the new lead renders the same instant: identical, so the sender sends nothing.
    assert world.updates(ts) == [] or f"<!date^{sleep_at}^" in all_text(world.updates(ts)[-1])
    assert len([c for c in world.bot.api.calls_to("chat.postMessage") if not c.body.get("thread_ts")]) == 1


def test_after_a_restart_the_next_lead_edits_the_stored_message_and_reminds_in_its_thread(
    world: World,
) -> None:
    card = announced(world)
    ts = card.response["ts"]
    # A restarted process: a new sender and schedule UI with no memory of the message; only SQLite
    # knows where it is.
    sender = Sender(web_client(world.bot.settings, for_sender=True), MemoryOutbox(), settings=FAST_SENDER)
    sender.start()
    try:
        ui = ScheduleUi(world.schedules, world.ops, clock=world.clock)
        ui.attach(sender=sender)
        world.at(utc(2, 18, 50))
        [outcome] = world.schedules.run_due(world.clock.now())
        assert outcome.announcement is not None
        ui.on_announce(outcome.announcement)
        assert sender.flush(5)
    finally:
        sender.stop(2)
    edit = world.bot.api.wait_for_call("chat.update", lambda c: c.body.get("ts") == ts)
    reminder = world.bot.api.wait_for_call("chat.postMessage", lambda c: c.body.get("thread_ts") == ts)
    assert "Reminder (10 min before)" in all_text(reminder) and buttons_of(edit)
    assert len([c for c in world.bot.api.calls_to("chat.postMessage") if not c.body.get("thread_ts")]) == 1


def test_postpone_1h_by_an_operator_moves_that_occurrence_only_and_edits_the_message(world: World) -> None:
    card = announced(world)
    ts = card.response["ts"]
    _, url = click(world, blocks.ACTION_POSTPONE_1H, OPERATOR, card)
    update = world.bot.api.wait_for_call("chat.update", lambda c: c.body.get("ts") == ts)
    text = all_text(update)
    assert update.body["channel"] == CHANNEL
    at = int(utc(2, 20).timestamp())
    assert f"starts <!date^{at}^{{date_short_pretty}} {{time}}|Mon 21:00 CET>" in text
    assert "(in " not in text
    assert "is postponed to Mon 21:00 CET (60 min later)" in text and f"<@{OPERATOR}>" in text
    assert len(buttons_of(update)) == 4, "still upcoming: the buttons stay"
    world.bot.settle()
    assert world.bot.replies_to(url) == [], "the edited message is the answer"
    events = [(occ.key, at) for occ, at in world.schedules.next_events(world.clock.now(), limit=3)]
    assert events == [
        (KEY, utc(2, 20)),
        ("nights:2026-03-03:wake", utc(3, 6)),
        ("nights:2026-03-03:sleep", utc(3, 19)),
    ]
    assert utc(2, 20) in world.runner.armed() and utc(2, 18, 50) not in world.runner.armed()
    [audit] = [r for r in world.ops.store.audit_rows() if r.action == "schedule_postpone"]
    assert audit.actor == OPERATOR and KEY in audit.detail


@pytest.mark.parametrize(
    ("user", "why"),
    [
        (VIEWER, "skipping needs the operator role on dev-eu; you are viewer"),
        # No role on dev-eu: the answer a made-up key gets, naming neither the cluster nor the role.
        (STRANGER, f'unknown or deleted schedule in "{KEY}"'),
    ],
)
def test_skip_by_an_unauthorised_user_is_refused_ephemerally_and_changes_nothing(
    world: World, user: str, why: str
) -> None:
    card = announced(world)
    before = world.schedules.next_events(world.clock.now(), limit=5)
    _, url = click(world, blocks.ACTION_SKIP, user, card)
    reply = world.bot.wait_reply(url)
    assert why in all_text(reply)
    assert reply.body["response_type"] == "ephemeral" and reply.body["replace_original"] is False
    world.bot.settle()
    assert world.updates(card.response["ts"]) == []
    assert world.schedules.store.overrides() == []
    assert world.schedules.next_events(world.clock.now(), limit=5) == before
    assert [r.action for r in world.ops.store.audit_rows()][-1] == "refused_schedule_skip"


def test_announcement_buttons_obey_the_clusters_channel_rules(world: World) -> None:
    card = announced(world)
    dev = world.ops.policies["dev-eu"]
    world.ops.policies["dev-eu"] = replace(dev, channels=frozenset({CHANNEL}))
    before = world.schedules.next_events(world.clock.now(), limit=5)
    refusal = f"dev-eu is operated only from <#{CHANNEL}>"
    for action in (blocks.ACTION_SKIP, blocks.ACTION_RUN_NOW, blocks.ACTION_POSTPONE_1H):
        [button] = [b for b in buttons_of(card) if b["action_id"] == action]
        _, url = world.bot.click(
            action, button["value"], user=OPERATOR, message_ts=card.response["ts"], channel=ELSEWHERE
        )
        reply = world.bot.wait_reply(url)
        assert refusal in all_text(reply) and reply.body["response_type"] == "ephemeral", action
    # Postpone until… opens no dialog there: the clicker is told why instead.
    [until] = [b for b in buttons_of(card) if b["action_id"] == blocks.ACTION_POSTPONE_UNTIL]
    world.bot.click(
        blocks.ACTION_POSTPONE_UNTIL,
        until["value"],
        user=OPERATOR,
        message_ts=card.response["ts"],
        channel=ELSEWHERE,
    )
    told = world.bot.api.wait_for_call("chat.postEphemeral", lambda c: c.body.get("channel") == ELSEWHERE)
    assert refusal in all_text(told)
    world.bot.settle()
    assert world.bot.api.calls_to("views.open") == []
    assert world.updates(card.response["ts"]) == []
    assert world.schedules.store.overrides() == [] and world.ops.list_operations() == []
    assert world.schedules.next_events(world.clock.now(), limit=5) == before
    refused = [r.action for r in world.ops.store.audit_rows() if r.action.startswith("refused_")]
    assert refused == [
        "refused_schedule_skip",
        "refused_schedule_run_now",
        "refused_schedule_postpone",
        "refused_schedule_postpone",
    ]


def test_typed_schedule_changes_obey_the_clusters_channel_rules(world: World) -> None:
    added(world)
    dev = world.ops.policies["dev-eu"]
    world.ops.policies["dev-eu"] = replace(dev, channels=frozenset({CHANNEL}))
    refusal = f"dev-eu is operated only from <#{CHANNEL}>"
    for text in (
        "schedule pause nights",
        "schedule resume nights",
        "schedule delete nights",
        "schedule approve nights",
        "schedule skip nights 2026-03-02",
    ):
        _, url = world.bot.command(text, user=APPROVER, channel=ELSEWHERE)
        assert refusal in all_text(world.bot.wait_reply(url)), text
    world.bot.settle()
    sched = world.schedules.show("nights")
    assert sched is not None and sched.enabled and sched.approvers == (APPROVER_2,)
    assert world.schedules.store.overrides() == []
    # Taking one's own pre-approval back only narrows what runs unasked: allowed from anywhere.
    _, url = world.bot.command("schedule unapprove nights", user=APPROVER_2, channel=ELSEWHERE)
    assert "Withdrew your pre-approval" in all_text(world.bot.wait_reply(url))


def test_a_resume_by_someone_who_could_not_pre_approve_voids_the_pre_approval(world: World) -> None:
    added(world)  # created by APPROVER, pre-approved by APPROVER_2
    assert world.schedules.show("nights").approvers == (APPROVER_2,)  # type: ignore[union-attr]
    command(world, "schedule pause nights", user=APPROVER)
    _, resumed = command(world, "schedule resume nights", user=OPERATOR)
    assert "Schedule nights resumed." in all_text(resumed)
    assert "Its pre-approval is void" in all_text(resumed)
    assert world.schedules.show("nights").approvers == ()  # type: ignore[union-attr]

    # An approver who may pre-approve it lifts a pause without voiding anything.
    command(world, "schedule approve nights", user=APPROVER_2)
    command(world, "schedule pause nights", user=OPERATOR)
    _, kept = command(world, "schedule resume nights", user=APPROVER_2)
    assert "void" not in all_text(kept)
    assert world.schedules.show("nights").approvers == (APPROVER_2,)  # type: ignore[union-attr]

    # One's own pre-approval can be withdrawn; there is nothing to withdraw twice.
    _, withdrawn = command(world, "schedule unapprove nights", user=APPROVER_2)
    assert "Withdrew your pre-approval of schedule nights" in all_text(withdrawn)
    assert world.schedules.show("nights").approvers == ()  # type: ignore[union-attr]
    _, again = command(world, "schedule unapprove nights", user=APPROVER_2)
    assert "you have not pre-approved schedule nights" in all_text(again)
    actions = [(r.actor, r.action) for r in world.ops.store.audit_rows()]
    assert (OPERATOR, "schedule_pre_approval_voided") in actions
    assert (APPROVER_2, "schedule_unapprove") in actions


def test_skip_by_an_operator_removes_the_buttons_and_nothing_fires(world: World) -> None:
    card = announced(world)
    click(world, blocks.ACTION_SKIP, OPERATOR, card)
    update = world.bot.api.wait_for_call("chat.update", lambda c: c.body.get("ts") == card.response["ts"])
    assert "is skipped; the schedule is unchanged" in all_text(update) and buttons_of(update) == []
    world.at(utc(2, 19))
    world.tick()
    assert world.ops.list_operations() == []


def _finished(world: World, op_id: str) -> bool:
    """The runner idling says nothing before it has the operation: wait for a final state."""
    op = world.ops.get(op_id)
    return op is not None and op.state.is_terminal


def test_run_now_fires_through_operations_with_progress_in_the_announcement_thread(world: World) -> None:
    card = announced(world)
    ts = card.response["ts"]
    click(world, blocks.ACTION_RUN_NOW, OPERATOR, card)
    update = world.bot.api.wait_for_call(
        "chat.update", lambda c: c.body.get("ts") == ts and "🔄" in all_text(c), timeout=10
    )
    assert "was started early" in all_text(update) and buttons_of(update) == []
    assert f"(<@{OPERATOR}>)" in all_text(update), "who ran it is mentioned"
    assert "&lt;@" not in all_text(update), "a mention scalebot made is never shown escaped"
    [op] = world.ops.list_operations()
    assert (op.kind, op.requested_by, op.thread_ts, op.channel) == (
        OpKind.ZERO,
        "schedule:nights",
        ts,
        CHANNEL,
    )
    assert op.id in all_text(update)
    wait_until(lambda: _finished(world, op.id), 20, "the early zero-scale to finish")
    assert world.ops.runner.wait_idle(timeout=20)
    assert world.ops.get(op.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
    world.bot.settle()
    threaded = [c for c in world.bot.api.calls_to("chat.postMessage") if c.body.get("thread_ts") == ts]
    assert len(threaded) == 1 and op.id in all_text(threaded[0]), "the operation's card, alone in the thread"
    card_ts = threaded[0].response["ts"]
    edits = [c for c in world.bot.api.calls_to("chat.update", ok_only=True) if c.body.get("ts") == card_ts]
    assert edits and "Completed" in all_text(edits[-1]), "its final summary is an edit of the card"
    occurrence = world.schedules.store.get_occurrence
    wait_until(lambda: occurrence(KEY).state == "done", what="the occurrence closed")  # type: ignore[union-attr]


def test_postpone_until_opens_a_modal_and_validates_its_submission(world: World) -> None:
    card = announced(world)
    result, _ = click(world, blocks.ACTION_POSTPONE_UNTIL, OPERATOR, card)
    assert result.body == ""
    opened = world.bot.api.wait_for_call("views.open")
    view = opened.body["view"]
    assert re.fullmatch(r"\d+\.1234567890\.fedcba\d{6}", opened.body["trigger_id"]), "the click's trigger_id"
    assert view["callback_id"] == schedule_blocks.CALLBACK_POSTPONE
    assert json.loads(view["private_metadata"])["key"] == KEY
    pickers = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert pickers[schedule_copy.POSTPONE_DATE]["initial_date"] == "2026-03-02"
    assert pickers[schedule_copy.POSTPONE_TIME]["initial_time"] == "21:00"

    early = submit_view(world, view, picked("2026-03-02", "19:30"), user=OPERATOR).json()
    assert early["response_action"] == "errors"
    assert "pick a time after Mon 20:00 CET" in early["errors"][schedule_copy.POSTPONE_TIME]
    missing = submit_view(world, view, picked("", "22:30"), user=OPERATOR).json()
    assert missing == {"response_action": "errors", "errors": {schedule_copy.POSTPONE_DATE: "Pick a date."}}
    viewer = submit_view(world, view, picked("2026-03-02", "22:30"), user=VIEWER).json()
    assert "postponing needs the operator role" in viewer["errors"][schedule_copy.POSTPONE_TIME]
    world.bot.settle()
    assert world.updates(card.response["ts"]) == [] and world.schedules.store.overrides() == []

    done = submit_view(world, view, picked("2026-03-02", "22:30"), user=OPERATOR)
    assert done.status == 200 and done.body == ""
    update = world.bot.api.wait_for_call("chat.update", lambda c: c.body.get("ts") == card.response["ts"])
    assert "is postponed to Mon 22:30 CET" in all_text(update)
    assert world.schedules.next_events(world.clock.now(), limit=1)[0][1] == utc(2, 21, 30)


def add_form(**changes: str) -> dict[str, Any]:
    """The add modal's state.values as Slack sends them, for a valid schedule unless changed."""
    fields = {
        "name": "nights",
        "cluster": "dev-eu",
        "sleep_days": "Mon-Fri",
        "sleep_time": "20:00",
        "wake_days": "Mon-Fri",
        "wake_time": "07:00",
        "tz": "Europe/Berlin",
        "lead": "60m,10m",
        "channel": CHANNEL,
        "approval": "per_run",
        "pools": "",
        "workloads": "no",
        "except": "",
        "holidays": "",
        "calendar": "",
        "on_holiday": "stay_asleep",
    } | changes
    kinds = {
        "sleep_time": "selected_time",
        "wake_time": "selected_time",
        "channel": "selected_conversation",
    }
    out: dict[str, Any] = {}
    for block, value in fields.items():
        if block in ("cluster", "approval", "workloads", "on_holiday"):
            out[block] = {block: {"selected_option": {"value": value}}}
        else:
            out[block] = {block: {kinds.get(block, "value"): value or None}}
    return out


def test_a_bare_schedule_add_opens_the_add_modal(world: World) -> None:
    result, _ = world.bot.command("schedule add", user=APPROVER)
    assert result.status == 200 and result.body == ""
    view = world.bot.api.wait_for_call("views.open").body["view"]
    assert view["callback_id"] == schedule_blocks.CALLBACK_ADD
    types = {b["block_id"]: b["element"]["type"] for b in view["blocks"]}
    assert (types["sleep_time"], types["wake_time"], types["channel"]) == (
        "timepicker",
        "timepicker",
        "conversations_select",
    )

    bad = submit_view(world, view, add_form(tz="CET", lead="60"), user=APPROVER).json()
    assert set(bad["errors"]) == {"tz", "lead"}
    gap = submit_view(world, view, add_form(wake_time="20:30"), user=APPROVER).json()
    assert "lead time 60m is longer than the shortest gap" in gap["errors"]["lead"]
    assert world.schedules.all_schedules() == []
    assert submit_view(world, view, add_form(), user=APPROVER).body == ""
    post_added = world.bot.api.wait_for_call("chat.postMessage", lambda c: "added a schedule" in all_text(c))
    assert post_added.body["channel"] == CHANNEL
    [saved] = world.schedules.all_schedules()
    assert (saved.name, saved.approval_mode, str(saved.spec.sleep)) == ("nights", "per_run", "Mon-Fri 20:00")
    assert world.runner.armed()[0] == utc(2, 18)


@pytest.mark.parametrize(
    ("changes", "block"),
    [
        ({"name": "wake.me.at.7!"}, "name"),  # the sentence quotes "wake…": still the name's error
        ({"except": "2026-13-01"}, "except"),
        ({"holidays": "Bavaria!"}, "holidays"),  # its form, checked by the form
        ({"holidays": "DE-XY"}, "holidays"),  # a region the library lacks, refused by the service
        ({"calendar": "freezes"}, "holidays"),
        ({"sleep_days": "Mon-Sun", "wake_days": "Mon-Sun", "wake_time": "20:00"}, "wake_days"),
    ],
)
def test_the_add_form_shows_a_refusal_at_the_field_the_engine_says_it_is_about(
    world: World, changes: dict[str, str], block: str
) -> None:
    world.bot.command("schedule add", user=APPROVER)
    view = world.bot.api.wait_for_call("views.open").body["view"]

    refused = submit_view(world, view, add_form(**changes), user=APPROVER).json()

    assert refused["response_action"] == "errors" and list(refused["errors"]) == [block], refused
    assert world.schedules.all_schedules() == []


def test_the_add_form_saves_public_holidays_and_what_to_do_on_them(world: World) -> None:
    world.bot.command("schedule add", user=APPROVER)
    view = world.bot.api.wait_for_call("views.open").body["view"]
    assert {"holidays", "calendar", "on_holiday"} <= {b["block_id"] for b in view["blocks"]}
    form = add_form(holidays="de-by", on_holiday="skip_wake")
    assert submit_view(world, view, form, user=APPROVER).body == ""
    world.bot.api.wait_for_call("chat.postMessage", lambda c: "added a schedule" in all_text(c))
    [saved] = world.schedules.all_schedules()
    assert saved.spec.days_off_rule.describe() == "holidays DE-BY: skip the wake"
    assert {d.name for d in saved.spec.days_off} >= {"Pentecost Monday", "Good Friday"}


def test_a_schedule_that_sleeps_the_workloads_is_said_typed_or_picked_in_the_form(world: World) -> None:
    _, reply = command(world, f"schedule add nights {GOOD} pools=web workloads=yes")
    assert "nights: dev-eu, pool web to 0 with workloads;" in all_text(reply)
    [saved] = world.schedules.all_schedules()
    assert saved.target == ScheduleTarget("pools", ("web",), workloads=True)
    _, listed = command(world, "schedule list", user=VIEWER)
    assert "nights: dev-eu, pool web to 0 with workloads" in all_text(listed)

    world.bot.command("schedule add", user=APPROVER)
    view = world.bot.api.wait_for_call("views.open").body["view"]
    picker = next(b for b in view["blocks"] if b["block_id"] == "workloads")
    assert [o["value"] for o in picker["element"]["options"]] == ["no", "yes", "only"]
    # Two schedules scaling the same workloads would fight, whichever pools each zeroes.
    assert submit_view(world, view, add_form(name="pods", workloads="only"), user=APPROVER).body == ""
    told = world.bot.api.wait_for_call("chat.postEphemeral")
    assert "not saved" in told.body["text"] and "overlaps schedule nights" in told.body["text"]
    command(world, "schedule delete nights")
    assert submit_view(world, view, add_form(name="pods", workloads="only"), user=APPROVER).body == ""
    world.bot.api.wait_for_call("chat.postMessage", lambda c: "pods: dev-eu, workloads only" in all_text(c))
    assert [s.target for s in world.schedules.all_schedules()] == [ScheduleTarget.workloads_only()]


def test_the_add_form_is_acked_at_once_while_the_cluster_api_is_slow(world: World) -> None:
    world.bot.command("schedule add", user=APPROVER)
    view = world.bot.api.wait_for_call("views.open").body["view"]
    assert world.cluster is not None
    world.cluster.delay = 3.0  # every listing of the cluster now takes 3 s

    submitted = submit_view(world, view, add_form(), user=APPROVER)

    assert submitted.status == 200 and submitted.body == "" and submitted.elapsed < 1.0
    added = world.bot.api.wait_for_call("chat.postMessage", lambda c: "added a schedule" in all_text(c), 20)
    saved = [s.name for s in world.schedules.all_schedules()]
    assert added.body["channel"] == CHANNEL and saved == ["nights"]


def test_a_refusal_found_after_the_ack_is_told_privately(world: World) -> None:
    world.bot.command("schedule add", user=APPROVER)
    view = world.bot.api.wait_for_call("views.open").body["view"]

    submitted = submit_view(world, view, add_form(pools="nosuchpool"), user=APPROVER)

    assert submitted.body == ""
    told = world.bot.api.wait_for_call("chat.postEphemeral")
    assert (
        told.body["user"] == APPROVER
        and "not saved" in told.body["text"]
        and "nosuchpool" in told.body["text"]
    )
    assert world.schedules.all_schedules() == []


def test_the_add_form_opens_before_the_slow_time_zone_lookup(world: World) -> None:
    world.bot.api.fail("users.info", times=1, status=200, retry_after=None, delay=2.5)
    sent = time.monotonic()

    world.bot.command("schedule add", user=OPERATOR)

    opened = world.bot.api.wait_for_call("views.open")
    assert opened.at - sent < 1.0, "views.open must not wait for users.info (the trigger_id lives 3 s)"
    tz = {b["block_id"]: b["element"] for b in opened.body["view"]["blocks"]}["tz"]
    assert tz["initial_value"] == "UTC"
    updated = world.bot.api.wait_for_call("views.update", timeout=10)
    assert updated.body["view_id"] == "V0TEST"
    zone = {b["block_id"]: b["element"] for b in updated.body["view"]["blocks"]}["tz"]
    assert zone["initial_value"] == "America/New_York"


def test_wake_for_three_hours_is_a_temporary_wake_with_a_return_to_sleep(world: World) -> None:
    added(world)
    zero = world.ops.request(
        OperationRequest(kind=OpKind.ZERO, target=Target(cluster="dev-eu"), requested_by="cli:test")
    )
    assert zero.ok and world.ops.runner.wait_idle(timeout=20)
    world.at(utc(3, 0))  # 01:00 CET: asleep by the schedule, so the wake's expiry puts it back to sleep
    _, refused = command(world, "wake web for 3h", user=OPERATOR)
    assert "A temporary wake wakes a whole cluster" in all_text(refused)
    now = world.clock.now()
    _, reply = command(world, "wake dev-eu for 3h", user=OPERATOR)
    text = all_text(reply)
    assert reply.body["response_type"] == "in_channel"
    back = int((now + timedelta(hours=3)).timestamp())
    assert f"back to sleep <!date^{back}^" in text and "(in " not in text, "no relative phrase to go stale"
    wake = next(op for op in world.ops.list_operations() if op.kind is OpKind.WAKE)
    assert f"Operation {wake.id} wakes dev-eu" in text
    assert (wake.requested_by, wake.target.wake_for_seconds) == (OPERATOR, 3 * 3600)
    resleeps = [o for o in world.schedules.store.list_occurrences(schedule="nights") if o.kind == "resleep"]
    assert [o.due_at for o in resleeps] == [now + timedelta(hours=3)]
    assert now + timedelta(hours=3) in world.runner.armed()
    assert any(r.action == "schedule_wake_for" for r in world.ops.store.audit_rows())


# --- pure: button values and limits ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [KEY, "a.b_c-d:2026-12-24:wake", "x" * 63 + ":2026-03-29:resleep-0230", "nights:2026-03-02:sleep"],
)
def test_button_values_carry_the_key_in_the_characters_the_click_listener_accepts(key: str) -> None:
    value = schedule_blocks.button_value(key)
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,200}", value)
    assert schedule_blocks.key_of(value) == key


@pytest.mark.parametrize("value", ["", "op-1a2b3c4d", "o", "o%%%", "oYWJj", "o" + "A" * 150])
def test_values_scalebot_did_not_make_name_no_occurrence(value: str) -> None:
    assert schedule_blocks.key_of(value) is None


def test_an_oversize_announcement_still_renders_within_slack_limits() -> None:
    from bot.slack.blocks import kit as blockkit
    from engine.domain.announcement import Announcement

    text = "Scheduled shutdown of dev-eu starts Mon 20:00 CET (in 60 min): " + ", ".join(
        f"pool-{i:04d}" for i in range(3000)
    )
    note = Announcement(KEY, "nights", "dev-eu", CHANNEL, text + "\n" + "x" * 5000, "upcoming", buttons=True)
    message = schedule_blocks.announcement(note, status="🔄 " + "y" * 4000)
    rendered = message.block_dicts()  # slack_sdk validation raises on a broken limit
    assert blockkit.text_length(rendered) < 12_000 and len(rendered) <= blockkit.MAX_BLOCKS
    assert rendered[-1]["type"] == "actions" and len(rendered[-1]["elements"]) == 4
    assert len(message.text) <= blockkit.FALLBACK_CHARS
    assert schedule_blocks.announcement(note, status="🔄 " + "y" * 4000) == message, "deterministic"


def test_schedule_add_takes_a_channel_by_its_name_and_keeps_its_id(world: World) -> None:
    # 250 channels: Slack lists them 200 a page, so the one asked for is on the second page.
    world.bot.api.channel_list = [{"id": f"C0X{i:04d}", "name": f"team-{i}"} for i in range(249)]
    # dev-eu's own channel (a schedule announces only where its cluster is operated from).
    world.bot.api.channel_list.append({"id": CHANNEL, "name": "platform"})

    _, reply = command(world, f"schedule add n {GOOD} channel=#platform")

    assert "Schedule saved" in all_text(reply), all_text(reply)
    [saved] = world.schedules.all_schedules()
    assert saved.channel == CHANNEL, "a schedule keeps the channel's ID, never its name"
    assert len(world.bot.api.calls_to("conversations.list")) == 2


def test_schedule_add_refuses_a_channel_name_slack_does_not_list(world: World) -> None:
    world.bot.api.channel_list = [{"id": "C0ALERTS", "name": "ops-alerts"}]

    _, reply = command(world, f"schedule add n {GOOD} channel=#nope")

    assert "I cannot find the channel #nope" in all_text(reply), all_text(reply)
    assert reply.body["response_type"] == "ephemeral"
    assert world.schedules.all_schedules() == []


# --- days off -------------------------------------------------------------------------------------

FREEZE_ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//team//freeze//EN
BEGIN:VEVENT
UID:freeze@team
DTSTAMP:20260101T000000Z
SUMMARY:Freeze <!channel> & <@U0ADMIN> *now*
DTSTART;VALUE=DATE:20260303
END:VEVENT
END:VCALENDAR
"""


def test_a_calendar_day_is_shown_with_its_reason_as_text_never_as_markup(
    world: World, tmp_path: Path
) -> None:
    ics = tmp_path / "freeze.ics"
    ics.write_text(FREEZE_ICS)
    world.schedules.calendars = Calendars({"freeze": load_calendar("freeze", ics, around=2026)})
    _, reply = command(world, f"{ADD} calendar=freeze")
    assert "calendar freeze: stay asleep" in all_text(reply), all_text(reply)
    escaped = "Freeze &lt;!channel&gt; &amp; &lt;@U0ADMIN&gt; *now* (calendar freeze)"
    _, upcoming = command(world, "schedule next", user=VIEWER)
    text = all_text(upcoming)
    assert f"~Tue 01:00 EST~ · no wake · `nights` · Stays asleep: {escaped} · dev-eu" in text
    assert f"~Tue 14:00 EST~ · no sleep · `nights` · Stays asleep: {escaped} · dev-eu" in text
    assert "*Wed 01:00 EST* · ☀️ wake · `nights`" in text  # Wed 07:00 CET: the freeze day has none
    command(world, "schedule approve nights", user=APPROVER_2)
    world.at(utc(2, 18))
    world.tick()
    card = all_text(world.announcement())
    assert f"Stays asleep: {escaped}." in card
    world.at(utc(3, 0))  # Tue 01:00 CET: the next event is Wednesday's wake
    _, status = command(world, "status dev-eu", user=VIEWER)
    state = all_text(status)
    assert f"Next scheduled event: wake (nights) <!date^{int(utc(4, 6).timestamp())}^" in state
    assert f"; before it: Stays asleep: {escaped}" in state
    for raw in ("<!channel>", "<@U0ADMIN>"):
        assert raw not in text and raw not in card and raw not in state


def test_a_person_without_a_role_on_a_cluster_learns_nothing_of_its_schedules(world_with_prod: World) -> None:
    """VIEWER has a role on dev-eu only. Every schedule reply they get about prod's schedule, or prod,
    is the one an unknown name gets, and lists only dev-eu's schedules: prod is never named."""
    world = world_with_prod
    added(world)  # nights, on dev-eu
    payments = world.schedules.add(
        name="payments",
        cluster="prod",
        target=ScheduleTarget.whole_cluster(),
        sleep="Mon-Fri 20:00",
        wake="Mon-Fri 07:00",
        tz="Europe/Berlin",
        lead_times="60m",
        channel=PROD_CHANNEL,
        approval_mode="per_run",
        by="cli:admin",
    )
    assert payments.ok, payments.reply

    def said(text: str) -> str:
        return all_text(command(world, text, user=VIEWER)[1])

    assert 'No schedule "nope"; schedules: nights.' in said("schedule show nope")
    assert 'No schedule "payments"; schedules: nights.' in said("schedule show payments")
    for verb in ("pause", "resume", "delete", "approve", "unapprove"):
        assert 'no schedule "payments"; schedules: nights' in said(f"schedule {verb} payments"), verb
    assert 'no schedule "payments"; schedules: nights' in said("schedule skip payments 2026-03-03")
    assert 'unknown cluster "prod"; clusters: dev-eu' in said("schedule list prod")
    assert 'unknown cluster "nope"; clusters: dev-eu' in said("schedule list nope")
    assert 'unknown cluster "prod"; clusters: dev-eu' in said("schedule next prod")
    assert 'unknown cluster "prod"; clusters: dev-eu' in said(f"schedule add mine {GOOD} cluster=prod")
    assert 'unknown cluster "prod"; clusters: dev-eu' in said("wake prod for 2h")
    listed = said("schedule list")
    assert "nights" in listed and "payments" not in listed
    # A button value made up for prod's schedule gets an unknown key's answer.
    for action in (blocks.ACTION_SKIP, blocks.ACTION_RUN_NOW, blocks.ACTION_POSTPONE_1H):
        value = schedule_blocks.button_value("payments:2026-03-02:sleep")
        _, url = world.bot.click(action, value, user=VIEWER, channel=PROD_CHANNEL)
        text = all_text(world.bot.wait_reply(url))
        assert 'unknown or deleted schedule in "payments:2026-03-02:sleep"' in text, (action, text)
    world.bot.settle()
    assert world.ops.store.overrides() == [] and world.schedules.show("payments").enabled  # type: ignore[union-attr]
    replies = list(world.bot.api.calls_to("response_url"))
    assert replies and all(
        "prod" not in all_text(c) or 'unknown cluster "prod"' in all_text(c) for c in replies
    )
    refused = {r.action for r in world.ops.store.audit_rows() if r.cluster == "prod"}
    assert {"refused_schedule_pause", "refused_schedule_skip", "refused_schedule_run_now"} <= refused


def test_run_now_on_a_run_nobody_was_told_of_is_refused_privately_and_nothing_starts(world: World) -> None:
    """A pre-approved schedule: "Run now" with a button value made for next week's sleep (never
    announced) would start a zero-scale now with no approval. Refused to the clicker alone."""
    added(world)
    value = schedule_blocks.button_value("nights:2026-03-09:sleep")
    _, url = world.bot.click(blocks.ACTION_RUN_NOW, value, user=OPERATOR)
    reply = world.bot.wait_reply(url)
    text = all_text(reply)
    assert reply.body["response_type"] == "ephemeral", reply.body
    assert "Run now starts only the announced sleep" in text and "asks for approval" in text, text
    world.bot.settle()
    assert world.ops.list_operations() == [] and world.ops.store.overrides() == []
    assert "refused_schedule_run_now" in [r.action for r in world.ops.store.audit_rows()]


def test_a_schedule_for_prod_is_not_added_from_dev_eus_channel(world_with_prod: World) -> None:
    """Channels separate clusters: typed in dev-eu's channel, a schedule of prod is refused even when
    it would announce in prod's channel; typed in prod's channel it is saved."""
    world = world_with_prod
    text = f"schedule add p {GOOD} cluster=prod <#{PROD_CHANNEL}|prod-ops>"
    _, url = world.bot.command(text, user=APPROVER, channel=CHANNEL)
    refused = all_text(world.bot.wait_reply(url))
    assert "prod is operated only from" in refused and PROD_CHANNEL in refused, refused
    assert world.schedules.all_schedules() == []
    _, url = world.bot.command(text, user=APPROVER, channel=PROD_CHANNEL)
    assert "Schedule saved" in all_text(world.bot.wait_reply(url))


def test_schedule_add_with_the_api_server_down_names_the_cause_and_saves_nothing(world: World) -> None:
    assert world.cluster is not None
    world.cluster.unreachable = True

    _, reply = world.bot.command(ADD, user=APPROVER)

    call = world.bot.wait_reply(reply)
    said = all_text(call)
    assert "Cannot reach the Kubernetes API server" in said and "Nothing was changed" in said, said
    assert "incident" not in said and call.body["response_type"] == "ephemeral"
    world.bot.settle()
    assert world.schedules.all_schedules() == [] and world.schedules.store.list_schedules() == []
    assert world.bot.api.calls_to("chat.postMessage") == []
    assert world.runner.armed() == []

"""A scheduled night on the real control plane, announced and reported in Slack.

The cluster is this test's own label-defined pools (kwok nodes) with a Deployment on them; scalebot
runs as its ServiceAccount through the real Operations (SystemClock, a short graceful window). The
schedule service and the Slack side run on a FakeClock set to an instant of the schedule, and the
timer is the real APSchedulerTimer whose armed job the test runs at that instant (see
tests/slack/test_schedules_slack.py): nothing waits for 20:00.

Covers: `/scale schedule add` over the real HTTP Bolt app; the announcement at the lead time; the sleep
fired through the same Operations path as a person's request (`requested_by="schedule:nights"`) zero-
scaling every pool for real, with the operation's card, phases and final summary in the announcement's
thread and the announcement edited to say it started; the wake restoring every node and the Deployment,
threaded there too, and "dev-eu is back: 3/3 nodes Ready" posted when it is done. And a scheduled wake
after a person's `zero --workloads`: the wake restores the workloads too and its report counts them.
And a schedule added with `workloads=yes`: its sleep scales the Deployment to 0 before the pools, its
wake scales it back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.runtime.apscheduler_timer import APSchedulerTimer
from bot.slack.app import serve_http
from bot.slack.schedule_ui import ScheduleUi
from engine.domain.clock import FakeClock, SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.kube.client import KubeClient
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.labels import LabelPoolProvider
from engine.schedules.service import Schedules
from engine.store.database import Store
from engine.workloads import WorkloadConfig, WorkloadScaler
from localcluster import rest
from tests.conftest import note_in_summary
from tests.e2e.support import FAST, deployment, group, wait_for_return
from tests.slack.conftest import (
    APPROVER,
    APPROVER_2,
    CHANNEL,
    OPERATOR,
    POLICIES,
    Engine,
    assemble,
    make_settings,
)
from tests.slack.harness import SlackApiServer, all_text, buttons_of
from tests.slack.test_schedules_slack import ManualScheduler, World

pytestmark = pytest.mark.e2e

MON_17_CET = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
SLEEP_KEY = "nights:2026-03-02:sleep"


def utc(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


BERLIN = ZoneInfo("Europe/Berlin")
NEXT_WEEK = (datetime.now(BERLIN) + timedelta(days=7)).date()
NEXT_MONDAY = NEXT_WEEK - timedelta(days=NEXT_WEEK.weekday())
"""A Monday ahead of the wall clock: a person's operation (stamped by the real clock the drains
run on) then comes before the schedule's events instead of after them, where it would win over
them (a manual action supersedes the schedule's next event)."""


def next_week(day: int, hour: int, minute: int = 0) -> datetime:
    """`day` days after NEXT_MONDAY, at hour:minute in Berlin."""
    local = datetime.combine(NEXT_MONDAY + timedelta(days=day), time(hour, minute), tzinfo=BERLIN)
    return local.astimezone(UTC)


RUN_LABEL = "scalebot.test/schedules-run"
"""On this test's namespace: the workloads provider of a world acts on it alone."""


def run_handle(
    kube: KubeClient, pool_key: str, admin_api: Any, namespace: str, unique_name: str
) -> ClusterHandle:
    """Cluster "dev-eu": the test's pools, and a workloads provider that sees the test's namespace alone."""
    labels = {"metadata": {"labels": {RUN_LABEL: unique_name}}}
    rest.patch(admin_api, f"/api/v1/namespaces/{namespace}", labels)
    config = WorkloadConfig(namespace_selector=f"{RUN_LABEL}={unique_name}")
    scaler = WorkloadScaler.from_kube_client(kube, config)
    provider = LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    return ClusterHandle("dev-eu", kube, provider, scaler)


@pytest.fixture
def world(
    kube: KubeClient, pool_key: str, tmp_path: Path, admin_api: Any, namespace: str, unique_name: str
) -> Iterator[World]:
    handle = run_handle(kube, pool_key, admin_api, namespace, unique_name)
    with slack_world(handle, tmp_path / "scalebot.db") as world:
        yield world


@pytest.fixture
def world_with_workloads(
    kube: KubeClient, pool_key: str, tmp_path: Path, admin_api: Any, namespace: str, unique_name: str
) -> Iterator[World]:
    handle = run_handle(kube, pool_key, admin_api, namespace, unique_name)
    with slack_world(handle, tmp_path / "scalebot.db", start=next_week(0, 17)) as world:
        yield world


@contextmanager
def slack_world(handle: ClusterHandle, db: Path, *, start: datetime = MON_17_CET) -> Iterator[World]:
    """The real Operations over `handle` (cluster "dev-eu"), with schedules in Slack over HTTP Bolt;
    everything it starts is stopped on the way out, also when the test fails."""
    ops = new_operations(
        Store(db),
        {"dev-eu": handle},
        {"dev-eu": POLICIES["dev-eu"]},
        SystemClock(),  # drains and node waits take real time on the real cluster
        settings=FAST,
    )
    clock = FakeClock(start)
    schedules = Schedules(ops.store, ops, clock)
    api = SlackApiServer().start()
    slack = make_settings(api)
    ui = ScheduleUi(schedules, ops, clock=clock, default_cluster=slack.default_cluster)
    bot = assemble(api, Engine(ops, {}), slack, subcommands=ui.subcommands(), clicks=ui.clicks())
    bot.http = serve_http(bot.app, 0, host="127.0.0.1")
    scheduler = ManualScheduler(timezone=UTC)
    runner = APSchedulerTimer(schedules, clock, ui.on_announce, ui.on_fired, scheduler=scheduler)
    ui.attach(sender=bot.sender, app=bot.app, runner=runner)
    try:
        runner.start()
        yield World(bot, clock, ops, schedules, runner, scheduler)
    finally:
        runner.stop()
        bot.stop()
        ops.runner.stop()
        api.close()


def two_pools(node_pool: Callable[..., list[str]], pool_key: str, unique_name: str) -> list[str]:
    """Pool -a of two nodes and pool -b of one, in the test's node group: their node names."""
    nodes = []
    for name, count in (("a", 2), ("b", 1)):
        full = f"{unique_name}-{name}"
        nodes += node_pool(count, name=full, labels={pool_key: full, **group(unique_name)})
    return nodes


def test_a_scheduled_night_zero_scales_the_real_cluster_and_the_morning_restores_it(
    admin_api: Any,
    world: World,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
) -> None:
    on_group = group(unique_name)
    nodes = two_pools(node_pool, pool_key, unique_name)
    deployment(admin_api, namespace, "web", 3, node_selector=on_group, grace=1)
    kube = world.ops.handles["dev-eu"].api

    result, url = world.bot.command(
        "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m,10m "
        "approval=pre <#C0DEV|platform>",
        user=APPROVER,
    )
    assert result.status == 200
    assert "Schedule saved" in all_text(world.bot.wait_reply(url))
    # The creator's own pre-approval does not count: a second approver gives it.
    result, url = world.bot.command("schedule approve nights", user=APPROVER_2)
    assert "Pre-approved schedule nights" in all_text(world.bot.wait_reply(url))

    world.at(utc(2, 18))  # Monday 19:00 CET: 60 minutes before the sleep
    world.tick()
    card = world.announcement(SLEEP_KEY)
    ts = card.response["ts"]
    assert "|Mon 20:00 CET>: 2 pools, 3 nodes → 0" in all_text(card)

    world.at(utc(2, 19))  # Monday 20:00 CET: the sleep
    world.tick()
    [sleep] = world.ops.list_operations()
    assert (sleep.kind, sleep.requested_by, sleep.thread_ts, sleep.channel) == (
        OpKind.ZERO,
        "schedule:nights",
        ts,
        CHANNEL,
    )
    assert world.ops.runner.wait_idle(180), "the scheduled zero-scale did not finish"
    slept = world.ops.get(sleep.id)
    assert slept is not None and slept.state is OpState.SUCCEEDED, slept and slept.error
    assert not [n for n in kube.list_nodes() if n.name in nodes], "every node of every pool is gone"
    world.bot.settle()
    started = world.bot.api.wait_for_call(
        "chat.update", lambda c: c.body.get("ts") == ts and "🔄" in all_text(c)
    )
    assert sleep.id in all_text(started) and buttons_of(started) == []
    threaded = [c for c in world.bot.api.calls_to("chat.postMessage") if c.body.get("thread_ts") == ts]
    assert sleep.id in all_text(threaded[0]), "the operation's card is in the thread"
    # After it, at most the drain's condition while pods were still leaving; no phase, no summary.
    later = [all_text(c) for c in threaded[1:]]
    assert all("Drain not completed yet" in text for text in later), later
    card_ts = threaded[0].response["ts"]
    edits = [c for c in world.bot.api.calls_to("chat.update", ok_only=True) if c.body.get("ts") == card_ts]
    assert edits and "Completed" in all_text(edits[-1]), "its final summary is an edit of the card"

    world.at(utc(3, 6))  # Tuesday 07:00 CET: the wake
    world.tick()
    wake = next(op for op in world.ops.list_operations() if op.kind is OpKind.WAKE)
    assert (wake.requested_by, wake.thread_ts) == ("schedule:nights", ts)
    assert world.ops.runner.wait_idle(180), "the scheduled wake did not finish"
    woken = world.ops.get(wake.id)
    assert woken is not None and woken.state is OpState.SUCCEEDED, woken and woken.error
    assert sorted(n.name for n in kube.list_nodes() if n.name in nodes) == sorted(nodes)
    back = world.bot.api.wait_for_call(
        "chat.postMessage",
        lambda c: re.search(r"dev-eu is (only partly )?back:", all_text(c)) is not None,
        timeout=30,
    )
    # The wake followed the Deployment until it was available (or its bound passed, then said why).
    report = woken.progress.workloads
    if report.not_back:
        note_in_summary(f"a scheduled wake reported a workload not back: {all_text(back)}")
        assert "dev-eu is only partly back: 3/3 nodes Ready, 0/1 workloads available" in all_text(back)
        assert f"not back: Deployment/{namespace}/web: " in all_text(back)
    else:
        assert "dev-eu is back: 3/3 nodes Ready, 1/1 workloads available" in all_text(back)
    assert back.body.get("thread_ts") == ts
    web = wait_for_return(admin_api, namespace, "web", node_prefix=unique_name)
    assert web["status"]["availableReplicas"] == 3
    states = {r.key: r.state for r in world.schedules.store.list_occurrences(schedule="nights")}
    assert states[SLEEP_KEY] == "done" and states["nights:2026-03-03:wake"] == "done"


def test_a_scheduled_wake_after_a_zero_with_workloads_reports_the_workloads_it_restored(
    admin_api: Any,
    world_with_workloads: World,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
) -> None:
    world = world_with_workloads
    on_group = group(unique_name)
    nodes = two_pools(node_pool, pool_key, unique_name)
    deployment(admin_api, namespace, "web", 2, node_selector=on_group, grace=1)
    _, url = world.bot.command(
        "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m "
        "approval=pre <#C0DEV|platform>",
        user=APPROVER,
    )
    assert "Schedule saved" in all_text(world.bot.wait_reply(url))
    _, url = world.bot.command("schedule approve nights", user=APPROVER_2)
    assert "Pre-approved schedule nights" in all_text(world.bot.wait_reply(url))

    world.at(next_week(0, 19))  # Monday 19:00: the sleep is announced
    world.tick()
    # Monday 19:30, before the schedule's sleep: a person puts the cluster and its workloads to sleep.
    world.at(next_week(0, 19, 30))
    asked = world.ops.request(
        OperationRequest(
            kind=OpKind.ZERO,
            target=Target(cluster="dev-eu", workloads=True),
            requested_by=OPERATOR,
            channel=CHANNEL,
        )
    )
    assert asked.ok and asked.operation is not None, asked.reply
    assert asked.operation.plan.workloads == 1, "web is the one workload the sleep scales down"
    approved = world.ops.approve(asked.operation.approval_id, by=APPROVER, channel=CHANNEL)
    assert approved.ok, approved.reply
    assert world.ops.runner.wait_idle(180), "the zero-scale did not finish"
    slept = world.ops.get(asked.operation.id)
    assert slept is not None and slept.state is OpState.SUCCEEDED, slept and slept.error
    assert (
        rest.get(admin_api, f"/apis/apps/v1/namespaces/{namespace}/deployments/web")["spec"]["replicas"] == 0
    )

    world.at(next_week(0, 20))  # Monday 20:00: the schedule's sleep finds the cluster asleep already
    world.tick()
    assert [op.kind for op in world.ops.list_operations()] == [OpKind.ZERO]
    world.at(next_week(1, 7))  # Tuesday 07:00: the schedule's wake
    world.tick()
    wake = next(op for op in world.ops.list_operations() if op.kind is OpKind.WAKE)
    assert wake.requested_by == "schedule:nights" and wake.plan.workloads == 1
    assert world.ops.runner.wait_idle(180), "the scheduled wake did not finish"
    woken = world.ops.get(wake.id)
    assert woken is not None and woken.state is OpState.SUCCEEDED, woken and woken.error
    kube = world.ops.handles["dev-eu"].api
    assert sorted(n.name for n in kube.list_nodes() if n.name in nodes) == sorted(nodes)
    assert woken.summary is not None and woken.summary.workloads is not None
    assert woken.summary.workloads.total == 1
    back = world.bot.api.wait_for_call("chat.postMessage", lambda c: "back:" in all_text(c), timeout=30)
    available = woken.summary.workloads.available
    assert f"3/3 nodes Ready, {available}/1 workloads available" in all_text(back), all_text(back)
    web = wait_for_return(admin_api, namespace, "web", node_prefix=unique_name)
    assert web["status"]["availableReplicas"] == 2


def test_a_scheduled_night_with_workloads_scales_the_deployment_to_zero_and_the_wake_restores_it(
    admin_api: Any,
    world: World,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
) -> None:
    on_group = group(unique_name)
    nodes = two_pools(node_pool, pool_key, unique_name)
    deployment(admin_api, namespace, "web", 2, node_selector=on_group, grace=1)
    web_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/web"
    kube = world.ops.handles["dev-eu"].api
    _, url = world.bot.command(
        "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin approval=pre "
        "workloads=yes <#C0DEV|platform>",
        user=APPROVER,
    )
    assert "every pool to 0 with workloads" in all_text(world.bot.wait_reply(url))
    _, url = world.bot.command("schedule approve nights", user=APPROVER_2)
    assert "Pre-approved schedule nights" in all_text(world.bot.wait_reply(url))

    world.at(utc(2, 19))  # Monday 20:00 CET: the sleep
    world.tick()
    [sleep] = world.ops.list_operations()
    assert (sleep.kind, sleep.requested_by, sleep.target.workloads) == (OpKind.ZERO, "schedule:nights", True)
    assert sleep.plan.workloads == 1, "web is the one workload the sleep scales down"
    assert world.ops.runner.wait_idle(180), "the scheduled sleep did not finish"
    slept = world.ops.get(sleep.id)
    assert slept is not None and slept.state is OpState.SUCCEEDED, slept and slept.error
    assert rest.get(admin_api, web_path)["spec"]["replicas"] == 0
    assert not [n for n in kube.list_nodes() if n.name in nodes], "every node of every pool is gone"

    world.at(utc(3, 6))  # Tuesday 07:00 CET: the wake
    world.tick()
    wake = next(op for op in world.ops.list_operations() if op.kind is OpKind.WAKE)
    assert wake.requested_by == "schedule:nights" and wake.plan.workloads == 1
    assert world.ops.runner.wait_idle(180), "the scheduled wake did not finish"
    woken = world.ops.get(wake.id)
    assert woken is not None and woken.state is OpState.SUCCEEDED, woken and woken.error
    assert sorted(n.name for n in kube.list_nodes() if n.name in nodes) == sorted(nodes)
    assert rest.get(admin_api, web_path)["spec"]["replicas"] == 2
    web = wait_for_return(admin_api, namespace, "web", node_prefix=unique_name)
    assert web["status"]["availableReplicas"] == 2

"""A fleet's 20:00 in one Slack workspace: several clusters' schedules fire in the same minute.

One `Operations` (SQLite, the real runner) drives FLEET simulated clusters (`engine.kube.fake`
in-memory clusters behind `tests.slack.fleet.RemoteCluster`: every request waits a seeded round trip
of 10 ms plus an exponential tail of mean 10 ms, as across a network), each with a pre-approved
"Mon-Fri 20:00" schedule announcing ten minutes ahead in its own channel, through the real schedule
service and timer callbacks, and the real bot (Bolt over HTTP, the sender) against the local Web
API enforcing Slack's limits (`enforce_limits`: Tier 3 chat.update per workspace, posts per
channel, and chat.postMessage per workspace at the sender's default budget). The runner and the
sender run with `scalebot run`'s defaults. tests/e2e/test_fleet_storm_e2e.py runs the same storm
with real control planes among the clusters.

Covers: every sleep completes; every operation's final rendering and every occurrence's closing
line reach Slack; no call is refused (no 429 at all, so none to storm on); no method exceeds its
per-minute limit in any rolling minute; a plain night posts two messages per cluster (the
announcement and the operation's card in its thread; phases and the summary are edits); slash
commands sent concurrently for the storm's whole length are answered fast (p99 of their ack
latency) and each gets its reply. A scripted 429 in the middle of the storm is honoured: no
chat.update until its Retry-After has passed. The fleet digest (`fleet_digest_channel`) is one
post for the minute, whose last edit has every cluster done, each linking to its card. Sixty-four
clusters announcing and firing in the same minute never take more chat.postMessage than the
workspace budget in any rolling minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.slack.delivery.progress import message_key
from tests.slack.fleet import (
    ACK_P99_BOUND,
    DIGEST_CHANNEL,
    PROBE_INTERVAL,
    PROBE_PER_TICK,
    PRODUCTION_SENDER,
    SLEEP_AT,
    FleetWorld,
    Latency,
    announce,
    check_storm,
    describe,
    fleet_world,
    percentile,
    posting_time,
    posts_by_channel,
    run_storm,
    simulated_cluster,
)
from tests.slack.harness import SlackApiServer, all_text, wait_until

FLEET = int(os.environ.get("SCALEBOT_FLEET_CLUSTERS", "5"))
LARGE_FLEET = 64
"""Clusters whose announcements and cards alone are more than a minute of the workspace's posts
(2 x 64 > 120): the harness fires 19:50 and 20:00 seconds apart."""
POSTS_PER_NIGHT = 2
"""A plain night's posts per cluster: the announcement, and the operation's card in its thread."""
"""Simulated clusters firing together: 5 in CI; docs/benchmarks.md has larger runs (tests.bench.fleet)."""
API_LATENCY = Latency(floor=0.010, tail=0.010)


@pytest.fixture
def fleet(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[FleetWorld]:
    handles = {f"dev-{n}": simulated_cluster(f"dev-{n}", API_LATENCY, seed=n) for n in range(FLEET)}
    with fleet_world(slack_api, handles, tmp_path / "scalebot.db", digest=True) as world:
        yield world


def test_a_fleets_schedules_firing_in_one_minute_stay_within_slacks_limits(fleet: FleetWorld) -> None:
    storm = run_storm(fleet, scripted_429=True, probe_interval=PROBE_INTERVAL, probe_per_tick=PROBE_PER_TICK)
    check_storm(fleet, storm)

    api = fleet.bot.api
    refused = [c for c in api.calls if c.status == 429]
    assert len(refused) == 1, "only the scripted 429"
    next_edit = next(c for c in api.calls_to("chat.update") if c.at > refused[0].at)
    assert next_edit.at - refused[0].at >= 2.0 - 0.05, "Retry-After was not honoured"
    print("\n" + describe(fleet, storm, f"{FLEET} simulated clusters (API round trip 10 ms + exp(10 ms))"))
    assert percentile([a.elapsed for a in storm.acks], 99) < ACK_P99_BOUND
    assert set(posts_by_channel(fleet).values()) == {POSTS_PER_NIGHT}, posts_by_channel(fleet)
    # The fleet digest: one message for the minute, its last edit every cluster done, each linked.
    digest = [c for c in api.calls if c.status == 200 and c.body.get("channel") == DIGEST_CHANNEL]
    assert [c.method for c in digest].count("chat.postMessage") == 1
    final = all_text(digest[-1])
    assert f"{FLEET} done" in final and "running" not in final, final
    for op in fleet.operations():
        where = fleet.bot.outbox.lookup(message_key(op.id))
        assert where is not None
        assert f"archives/{where[0]}/p{where[1].replace('.', '')}|{op.target.cluster}>" in final


@pytest.fixture
def large_fleet(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[FleetWorld]:
    names = [f"dev-{n}" for n in range(LARGE_FLEET)]
    handles = {name: simulated_cluster(name, API_LATENCY, seed=n) for n, name in enumerate(names)}
    with fleet_world(slack_api, handles, tmp_path / "scalebot.db") as world:
        yield world


def test_sixty_four_clusters_firing_in_one_minute_stay_within_the_workspaces_post_budget(
    large_fleet: FleetWorld,
) -> None:
    """Every announcement and every card of 64 clusters, with the local Web API refusing any
    chat.postMessage beyond the sender's default workspace budget in a rolling minute. The test
    ends once every card is in and the posts have settled: the sleeps that go on (four at a time)
    and their edits (40 a minute) are the 5-cluster storm's concern and would make this one
    minutes long; the phases that ran by then must not have posted anything."""
    world, api = large_fleet, large_fleet.bot.api
    announce(world)
    world.fire_at(SLEEP_AT)
    posts = 2 * LARGE_FLEET
    wait_until(
        lambda: len(api.calls_to("chat.postMessage", ok_only=True)) >= posts,
        posting_time(posts),
        "every operation's card",
    )

    def some_finished() -> bool:
        return sum(op.state.is_terminal for op in world.operations()) >= 4

    wait_until(some_finished, 60, "the first sleeps to finish")  # their phases ran: nothing more to post
    assert world.bot.progress.flush(30)

    assert [v for v in api.violations if v.startswith("chat.postMessage")] == []
    assert [c for c in api.calls if c.status == 429] == []
    limit = int(PRODUCTION_SENDER.posts_per_minute)
    assert api.tier_peaks()["chat.postMessage"] <= limit
    assert set(posts_by_channel(world).values()) == {POSTS_PER_NIGHT}, posts_by_channel(world)

"""A fleet's 20:00 in one Slack workspace: several clusters' schedules fire in the same minute.

One `Operations` (SQLite, the real runner) drives FLEET simulated clusters (`engine.kube.fake`
in-memory clusters behind `tests.slack.fleet.RemoteCluster`: every request waits a seeded round trip
of 10 ms plus an exponential tail of mean 10 ms, as across a network), each with a pre-approved
"Mon-Fri 20:00" schedule announcing ten minutes ahead in its own channel, through the real schedule
service and timer callbacks, and the real bot (Bolt over HTTP, the sender at Slack's pace) against
the local Web API enforcing Slack's limits (`enforce_limits`: Tier 3 chat.update per workspace,
posts per channel). tests/e2e/test_fleet_storm_e2e.py runs the same storm with real control planes
among the clusters.

Covers: every sleep completes; every operation's final rendering and every occurrence's closing
line reach Slack; no call is refused (no 429 at all, so none to storm on); no method exceeds its
per-minute limit in any rolling minute; slash commands sent concurrently for the storm's whole
length are answered fast (p99 of their ack latency) and each gets its reply. A scripted 429 in the
middle of the storm is honoured: no chat.update until its Retry-After has passed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slack.fleet import (
    ACK_P99_BOUND,
    PROBE_INTERVAL,
    PROBE_PER_TICK,
    FleetWorld,
    Latency,
    check_storm,
    describe,
    fleet_world,
    percentile,
    run_storm,
    simulated_cluster,
)
from tests.slack.harness import SlackApiServer

FLEET = int(os.environ.get("SCALEBOT_FLEET_CLUSTERS", "5"))
"""Simulated clusters firing together: 5 in CI; docs/benchmarks.md has larger runs (tests.bench.fleet)."""
API_LATENCY = Latency(floor=0.010, tail=0.010)


@pytest.fixture
def fleet(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[FleetWorld]:
    handles = {f"dev-{n}": simulated_cluster(f"dev-{n}", API_LATENCY, seed=n) for n in range(FLEET)}
    with fleet_world(slack_api, handles, tmp_path / "scalebot.db") as world:
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

"""The fleet storm with real control planes among the clusters, in one `scalebot run`-style process.

The wiring of tests/slack/test_fleet_storm.py (tests/slack/fleet.py: one `Operations` on SQLite, the
real runner, the schedule service and timer callbacks, Bolt over HTTP and the sender against the
local Web API enforcing Slack's limits, the runner and the sender with `scalebot run`'s defaults),
over a fleet of REAL clusters plus SIMULATED ones:

- two real local control planes (the session's and a second one started here), each with two label
  pools of kwok nodes (2 + 1) carrying a 3-replica Deployment (`tests.slack.fleet.real_cluster`);
  scalebot reaches each as its own ServiceAccount (the plane's scalebot kubeconfig), so the
  scheduled sleep really evicts the pods, cordons and deletes every node of both pools;
- three simulated clusters behind a seeded API round trip (10 ms + exp(10 ms)).

Every cluster has a pre-approved "Mon-Fri 20:00" schedule in its own channel; all fire on the same
tick. Covers: every sleep succeeds (the real pools are empty afterwards), every final rendering
and closing line reaches Slack, no Tier method (nor chat.postMessage across the workspace) above
its limit in any minute, no 429, each cluster's night posting its announcement and its card and
at most one reply (a drain held up is told in the thread), and slash
commands sent concurrently for the storm's whole length are each answered, their acks with
p99 < 300 ms.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.operations.runner import ClusterHandle
from localcluster.controlplane import ControlPlane
from tests.slack.fleet import (
    ACK_P99_BOUND,
    PROBE_INTERVAL,
    PROBE_PER_TICK,
    Latency,
    check_storm,
    describe,
    fleet_world,
    percentile,
    posts_by_channel,
    real_cluster,
    run_storm,
    simulated_cluster,
)
from tests.slack.harness import SlackApiServer

pytestmark = pytest.mark.e2e

SIMULATED = 3


@pytest.fixture(scope="module")
def second_plane(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A second API server (about 6 s to start): the fleet's second real cluster."""
    plane = ControlPlane(control_plane.cache_dir, echo=lambda _: None)
    with plane:
        yield plane


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    api = SlackApiServer().start()
    yield api
    api.close()


def test_a_fleet_with_two_real_control_planes_sleeps_within_slacks_limits_and_acks_fast(
    control_plane: ControlPlane, second_plane: ControlPlane, slack: SlackApiServer, tmp_path: Path
) -> None:
    with (
        real_cluster(control_plane, "real-1") as first,
        real_cluster(second_plane, "real-2") as second,
    ):
        handles: dict[str, ClusterHandle] = {"real-1": first.handle, "real-2": second.handle}
        for n in range(SIMULATED):
            handles[f"dev-{n}"] = simulated_cluster(f"dev-{n}", Latency(floor=0.010, tail=0.010), seed=n)
        with fleet_world(slack, handles, tmp_path / "scalebot.db") as world:
            storm = run_storm(
                world, timeout=180, probe_interval=PROBE_INTERVAL, probe_per_tick=PROBE_PER_TICK
            )
            check_storm(world, storm)
            print("\n" + describe(world, storm, f"2 real control planes + {SIMULATED} simulated clusters"))
            for op in world.operations():  # the real sleeps drained the Deployment's pods, then removed
                if op.target.cluster.startswith("real-"):
                    assert op.summary is not None, op.id
                    evicted = op.summary.pods_evicted + op.summary.pods_force_deleted
                    assert (evicted, op.summary.nodes_removed) == (3, 3), (op.target.cluster, op.summary)
        assert first.nodes and first.nodes_left() == [], "the first plane's pools are empty"
        assert second.nodes and second.nodes_left() == [], "the second plane's pools are empty"

    assert len(slack.calls_to("chat.update", ok_only=True)) >= 2 * len(handles)
    posts = posts_by_channel(world)
    assert all(2 <= n <= 3 for n in posts.values()), posts
    assert [c for c in slack.calls if c.status == 429] == []
    assert percentile([a.elapsed for a in storm.acks], 99) < ACK_P99_BOUND

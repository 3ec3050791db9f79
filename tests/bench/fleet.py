"""The fleet storm at growing N: one process, N clusters' sleeps firing on one tick, one Slack workspace.

Not a test (pytest does not collect this file): it prints figures. Run from the repository root:

    .venv/bin/python -m tests.bench.fleet --clusters 10,20,40,80 [--real 2] [--floor-ms 10 --tail-ms 10]

Before and after each N (`--solo`, on by default), each kind of cluster of the fleet runs its sleep
alone, in the same harness and the same sitting: one real cluster (when `--real` is not 0) and one
simulated. The slowest of those single sleeps is the N's baseline, and the N's line carries its
sleeps done over that baseline and the goal `1.2 x baseline + 30 s`, so that a machine's load
weighs on both sides of the ratio alike.

Each N runs in a child process of its own (so its memory is its own): the storm of
tests/slack/fleet.py (`run_storm`: the real `Operations` on a SQLite file, the runner and the sender
with `scalebot run`'s defaults (`RunnerSettings()`, `SenderSettings()`: no test pacing, no extra
workers), the schedule service and timer callbacks, Bolt over HTTP, the local Web API enforcing
Slack's limits (chat.postMessage included, at the sender's workspace budget), `/scale status` sent
three at a time every half second for the storm's whole length) over `--real` real local control
planes (each two label pools of 2 + 1 kwok nodes carrying a 3-replica Deployment, reached as
scalebot's ServiceAccount) and N - real simulated clusters behind a seeded API round trip. The local
Web API and the command senders are threads of the same process (the figures' RSS and CPU include
them).

Per N: sleeps done and Slack done after the tick, finals' spread, ack p50/p99/max, SQLite write
transactions (p50/p99/max of each write, and of its wait for the store's lock), Slack calls per
method (per minute, peak in any rolling minute, limit), chat.postMessage per cluster, 429s, RSS
before and after building the fleet and at its peak, the most threads alive, and the load average
(the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from engine.operations.runner import ClusterHandle
from tests.slack.fleet import (
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
from tests.slack.harness import TIER_LIMITS, SlackApiServer


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds() -> float:
    """This process's CPU time so far (user + system): the fleet's client, the local Web API and
    the command senders (the real control planes are processes of their own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _ThreadPeak:
    def __init__(self) -> None:
        self.peak = threading.active_count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="thread-peak", daemon=True)

    def __enter__(self) -> _ThreadPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, threading.active_count())


def one(clusters: int, real: int, latency: Latency) -> dict[str, Any]:
    """One storm of `clusters` clusters (`real` of them real control planes); its figures."""
    from localcluster.binaries import ensure_binaries
    from localcluster.controlplane import ControlPlane

    handles: dict[str, ClusterHandle] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="scalebot-fleet-") as tmp:
        cache = ensure_binaries() if real else None
        for r in range(real):
            plane = stack.enter_context(ControlPlane(cache, echo=lambda _: None))
            handles[f"real-{r + 1}"] = stack.enter_context(real_cluster(plane, f"real-{r + 1}")).handle
        api = SlackApiServer().start()
        stack.callback(api.close)
        rss_before = _rss_mib()
        for n in range(clusters - real):
            handles[f"dev-{n}"] = simulated_cluster(f"dev-{n}", latency, seed=n)
        with _ThreadPeak() as threads, fleet_world(api, handles, Path(tmp) / "scalebot.db") as world:
            rss_built = _rss_mib()
            storm = run_storm(world, timeout=600)
            check_storm(world, storm)
            print(describe(world, storm, f"{clusters} clusters ({real} real)"), file=sys.stderr, flush=True)
            acks = [a.elapsed for a in storm.acks]
            took = [w.took for w in storm.writes]
            waited = [w.waited for w in storm.writes]
            peaks = api.tier_peaks()
            per_method = Counter(c.method for c in api.calls if c.status == 200 and c.at >= storm.started)
            return {
                "clusters": clusters,
                "real": real,
                "latency_ms": [latency.floor * 1000, latency.tail * 1000],
                "sleeps_done_s": round(storm.engine_done, 1),
                "slack_done_s": round(storm.completed, 1),
                "finals_s": [round(min(storm.finals_after), 1), round(max(storm.finals_after), 1)],
                "acks": len(acks),
                "ack_ms": [round(percentile(acks, p) * 1000) for p in (50, 99, 100)],
                "writes": len(took),
                "write_ms": [round(percentile(took, p) * 1000, 1) for p in (50, 99, 100)],
                "write_wait_ms": [round(percentile(waited, p) * 1000, 1) for p in (50, 99, 100)],
                "slack": {
                    m: [count, peaks.get(m, 0), TIER_LIMITS.get(m)] for m, count in sorted(per_method.items())
                },
                "posts_per_cluster": sorted(set(posts_by_channel(world).values())),
                "refused": sum(1 for c in api.calls if c.status == 429),
                "rss_mib": [
                    round(rss_before),
                    round(rss_built),
                    round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                ],
                "threads_peak": threads.peak,
                "cpu_s": round(_cpu_seconds(), 1),
                "loadavg": [round(x, 1) for x in os.getloadavg()],
            }


def _child(n: int, real: int, latency: Latency) -> dict[str, Any]:
    """One storm in a child process of its own; its figures (or its exit code)."""
    argv = [sys.executable, "-m", "tests.bench.fleet", "--one", str(n), "--real", str(real)]
    argv += ["--floor-ms", str(latency.floor * 1000), "--tail-ms", str(latency.tail * 1000)]
    load = os.getloadavg()[0]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"clusters": n, "real": real, "failed": done.returncode, "loadavg_before": round(load, 1)}
    result: dict[str, Any] = json.loads(lines[-1])
    result["loadavg_before"] = round(load, 1)
    return result


def _solos(real: int, latency: Latency) -> list[dict[str, Any]]:
    """Each kind of cluster of the fleet sleeping alone: one real (if the fleet has any), one simulated."""
    kinds = [(1, 1)] if real else []
    return [_child(n, r, latency) for n, r in [*kinds, (1, 0)]]


def with_baseline(fleet: dict[str, Any], solos: list[dict[str, Any]]) -> dict[str, Any]:
    """`fleet` with the slowest single sleep of `solos` (run in the same sitting) and its goal."""
    singles = [s["sleeps_done_s"] for s in solos if "sleeps_done_s" in s]
    if not singles or "sleeps_done_s" not in fleet:
        return fleet
    baseline = max(singles)
    goal = 1.2 * baseline + 30.0
    return {
        **fleet,
        "solo_sleeps_done_s": singles,
        "baseline_s": baseline,
        "ratio_to_baseline": round(fleet["sleeps_done_s"] / baseline, 2),
        "goal_s": round(goal, 1),
        "within_goal": fleet["sleeps_done_s"] <= goal,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="10,20,40", help="comma-separated N, one child process each")
    parser.add_argument("--real", type=int, default=2, help="real local control planes among the N")
    parser.add_argument("--floor-ms", type=float, default=10.0, help="simulated API round trip floor")
    parser.add_argument("--tail-ms", type=float, default=10.0, help="mean of its exponential tail")
    parser.add_argument(
        "--solo",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run each kind of cluster's sleep alone before and after each N (the baseline)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    latency = Latency(floor=args.floor_ms / 1000, tail=args.tail_ms / 1000)
    if args.one is not None:
        print(json.dumps(one(args.one, args.real, latency)), flush=True)
        return
    for n in (int(x) for x in args.clusters.split(",")):
        before = _solos(args.real, latency) if args.solo else []
        for solo in before:
            print(json.dumps({"solo": True, **solo}), flush=True)
        fleet = _child(n, args.real, latency)
        after = _solos(args.real, latency) if args.solo else []
        for solo in after:
            print(json.dumps({"solo": True, **solo}), flush=True)
        print(json.dumps(with_baseline(fleet, before + after)), flush=True)


if __name__ == "__main__":
    main()

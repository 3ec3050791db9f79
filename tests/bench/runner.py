"""`python -m tests.bench`: run the benchmark scenarios, print the figures, optionally write the docs.

    python -m tests.bench [--size small|full|smoke] [--scenario NAME ...] [--write docs/benchmarks.md]
                          [--profile] [--sample] [--raw NAME ...] [--raw-sample N]
                          [--kubectl-budget SECONDS] [--kubectl-nodes N] [--json FILE] [--from-json FILE]

Scenarios (default: all): zero-scale, api-cost, raw-limit, planning, memory, slack. They share runs:
scalebot's zero-scale run (fresh cluster; planning is measured on it first) feeds zero-scale,
api-cost, memory and slack; kubectl's drain (fresh cluster) is zero-scale's baseline; the bare
eviction loops (a fresh cluster each; see RAW_VARIANTS) are raw-limit's. No measured run is
profiled, so every contender in a comparison runs alike: `--sample` adds one more zero-scale on a
fresh cluster with py-spy sampling it from outside (`tests.bench.sampling`: some 40 s of CPU on two
cores at 100 nodes, which would tilt every ratio against the run it watched), and `--profile` a
cProfile'd one, as cProfile slows the process it measures; neither is compared with anything.
`--from-json` re-renders a saved result set without running anything.
`--scenario night` (never in the default set) runs the realistic night instead: `night` and
`night_downscaler` (tests/bench/night.py), each on a fresh cluster; `--write` then fills only the
night section of the file for that size.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from localcluster.binaries import REPO_ROOT, ensure_binaries
from tests.bench import night, report, scenarios
from tests.bench.cluster import REDUCED_LOAD_LEASE_SECONDS, SIZES, Size, machine_description

REDUCED_SUFFIX = "_reduced"
NIGHT = "night"
NIGHT_RUNS = ("night", "night_downscaler")
"""The realistic night's runs (`tests.bench.night`): scalebot's, and the anchor's workload half."""
DEFAULT_KUBECTL_BUDGET: dict[str, float | None] = {"smoke": 60.0, "small": None, "full": 2400.0}
"""Seconds after which kubectl is stopped and its total extrapolated (None: let it finish). At the
full size kubectl needs hours (5 QPS, node after node), so it is stopped after 40 minutes."""
DEFAULT_KUBECTL_NODES: dict[str, int | None] = {"smoke": 1, "small": None, "full": None}
"""Nodes after which kubectl is stopped and its total extrapolated (the smoke run's budget)."""
RAW_VARIANTS: dict[str, tuple[float, int, str]] = {
    "raw": (DEFAULT_QPS, DEFAULT_BURST, "spread"),
    "raw_unlimited": (0.0, 1, "spread"),
    "raw_name": (0.0, 1, "name"),
}
"""The bare eviction loops, by run name: (client QPS, burst, order). "spread" is the drain's own
order (round-robin over controllers); "raw" has scalebot's client settings, "raw_unlimited" none
(what the API server itself accepts), "raw_name" evicts in namespace/name order, where concurrent
evictions contend for one PDB."""
DEFAULT_RAW: dict[str, tuple[str, ...]] = {
    "smoke": ("raw",),
    "small": ("raw", "raw_unlimited", "raw_name"),
    "full": ("raw", "raw_unlimited"),
}
SWEEP: dict[str, int] = {"sweep_8": 8, "sweep_16": 16, "sweep_32": 32, "sweep_64": 64}
"""The server's limit: the bare eviction loop with no client-side limit, in the drain's (spread)
order, at these worker counts; the best point is what scalebot's throughput is compared with."""
DEFAULT_SWEEP: dict[str, tuple[str, ...]] = {
    "smoke": ("sweep_8", "sweep_64"),
    "small": tuple(SWEEP),
    "full": tuple(SWEEP),
}
DEFAULT_KUBECTL_PARALLEL: dict[str, tuple[str, ...]] = {
    "smoke": ("kubectl_pools", "kubectl_nodes16"),
    "small": tuple(scenarios.KUBECTL_PARALLEL),
    "full": tuple(scenarios.KUBECTL_PARALLEL),
}
DEFAULT_RAW_SAMPLE: dict[str, int | None] = {"smoke": None, "small": None, "full": 5000}
"""At the full size the bare loops evict the first N pods only, and scalebot's rate over its own
first N evictions is reported beside its whole-run rate."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=(*report.SCENARIOS, NIGHT),
        help=f"repeatable; default: all but {NIGHT} (the realistic night: two clusters of its own)",
    )
    parser.add_argument("--write", type=Path, help="rewrite this markdown file (docs/benchmarks.md)")
    parser.add_argument("--json", type=Path, help="also write the raw result set here")
    parser.add_argument("--profile", action="store_true", help="add a cProfile'd zero-scale run")
    parser.add_argument(
        "--kubectl-budget",
        type=float,
        help="stop kubectl after this many seconds and extrapolate "
        "(default: smoke 60, small none, full 2400)",
    )
    parser.add_argument(
        "--kubectl-nodes",
        type=int,
        help="stop kubectl after this many drained nodes and extrapolate (default: smoke 1, else none)",
    )
    parser.add_argument(
        "--raw",
        action="append",
        choices=sorted(RAW_VARIANTS),
        help="bare eviction loops to run (repeatable; default: small all three, full raw + raw_unlimited)",
    )
    parser.add_argument(
        "--raw-sample", type=int, help="bare loops evict only the first N pods (default: full 5000)"
    )
    parser.add_argument(
        "--kubectl-parallel",
        action="append",
        choices=sorted(scenarios.KUBECTL_PARALLEL),
        help="parallel kubectl baselines to run (repeatable; default: smoke pools + nodes16, else all)",
    )
    parser.add_argument(
        "--sweep",
        action="append",
        choices=sorted(SWEEP),
        help="points of the concurrency sweep to run (repeatable; default: smoke 8 and 64, else all)",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="add a zero-scale run sampled by py-spy, apart from the measured ones (run 'sampled')",
    )
    parser.add_argument("--plan-rounds", type=int, default=3)
    parser.add_argument(
        "--plan-baseline-tree",
        type=Path,
        help="with --only planning: also measure the planning of this source tree (another commit, "
        "e.g. from `git archive`) on the same cluster, right after",
    )
    parser.add_argument(
        "--bind-directly",
        action="store_true",
        help="with --only planning: populate with the Deployments' pods bound to their nodes by the "
        "harness (no scheduling; planning reads the pods wherever they are): about twice as fast",
    )
    parser.add_argument(
        "--pin-cores",
        action="store_true",
        help="with --only planning: after the population, pin the control plane to one core and the "
        "measuring client to the others (a real cluster's API server has machines of its own)",
    )
    parser.add_argument(
        "--scalebot-qps",
        action="append",
        type=float,
        default=[],
        help="also run scalebot's zero-scale with this api_qps (burst twice it), as run "
        "scalebot_qps<N>; repeatable (the api_qps trade-off)",
    )
    parser.add_argument(
        "--reduced-load",
        action="store_true",
        help=f"every cluster with kwok's node leases at {REDUCED_LOAD_LEASE_SECONDS} s instead of 40 s "
        "(less synthetic load on the machine); run names get the suffix _reduced",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="do only these runs (scalebot, kubectl, raw, raw_unlimited, raw_name, profile, planning: "
        "planning alone on a cluster of its own); repeatable",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        help="a result set saved with --json: keep its runs, replacing those run now (with --only)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="run nothing: print (and --write) a result set saved earlier with --json",
    )
    return parser.parse_args(argv)


def versions(cache_dir: Path) -> dict[str, str]:
    def first_line(*argv: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except OSError as exc:
            return f"unavailable ({exc})"
        return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) else "?"

    bin_dir = cache_dir / "bin"
    commit = first_line("git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD")
    return {
        "scalebot": f"commit {commit} plus the working tree at the time of the run",
        "kube-apiserver": first_line(str(bin_dir / "kube-apiserver"), "--version"),
        "kubectl": first_line(str(bin_dir / "kubectl"), "version", "--client"),
        "etcd": first_line(str(bin_dir / "etcd"), "--version"),
        "kwok": first_line(str(bin_dir / "kwok"), "--version"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kubernetes (Python client)": importlib.metadata.version("kubernetes"),
        "orjson": importlib.metadata.version("orjson"),
        "msgspec": importlib.metadata.version("msgspec"),
    }


def commit() -> str:
    """The commit the measured code came from, marked when the working tree differed."""
    git = ["git", "-C", str(REPO_ROOT)]
    head = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        check=False,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head}{' (modified)' if dirty else ''}"


def reproduce_commands() -> list[str]:
    return [
        "scripts/build-control-plane.sh        # once; cached under .cache/control-plane/",
        "# 100 nodes: every scenario and baseline, and scalebot at two more client limits (about 40 min)",
        ".venv/bin/python -m tests.bench --size small --scalebot-qps 50 --scalebot-qps 100 --raw raw \\",
        "    --kubectl-budget 420 --json small.json",
        "# the same clients with the control plane's synthetic load reduced, merged beside them (15 min)",
        ".venv/bin/python -m tests.bench --size small --reduced-load --only scalebot \\",
        "    --only kubectl_nodes16 --only kubectl_nodes_qps --only sweep_32 --only sweep_64 \\",
        "    --merge small.json --json small-all.json --write docs/benchmarks.md",
        "# 1,000 nodes: scalebot and the strongest kubectl baseline of the 100-node run (about 1 h)",
        ".venv/bin/python -m tests.bench --size full --only scalebot --only kubectl_nodes_qps \\",
        "    --kubectl-budget 240 --json full.json",
        "# the concurrency sweep, a fresh cluster per point (about 45 min)",
        ".venv/bin/python -m tests.bench --size full --only sweep_8 --only sweep_16 --only sweep_32 \\",
        "    --only sweep_64 --merge full.json --json full-sweep.json",
        "# scalebot with the control plane's synthetic load reduced (about 45 min)",
        ".venv/bin/python -m tests.bench --size full --reduced-load --only scalebot \\",
        "    --merge full-sweep.json --json full-all.json",
        "# the other kubectl baselines and the sweep's 16-worker point (about 1 h 20 min)",
        ".venv/bin/python -m tests.bench --size full --only kubectl --only kubectl_pools_qps \\",
        "    --only kubectl_pools --only kubectl_nodes16 --only sweep_16 --kubectl-budget 240 \\",
        "    --merge full-all.json --json full-all2.json --write docs/benchmarks.md",
        "# the realistic night, scalebot and the anchor's workload half (small: about 18 min)",
        ".venv/bin/python -m tests.bench --size small --scenario night --json small-night.json \\",
        "    && .venv/bin/python -m tests.bench --from-json small-night.json --write docs/benchmarks.md",
        "# Slack acks under a burst",
        ".venv/bin/python -m tests.bench.ack_latency [--slow-cluster] [--shared-cores]",
        "# the fleet storm at growing N: 2 real control planes + simulated clusters (about 20 min)",
        ".venv/bin/python -m tests.bench.fleet --clusters 10,20,40,80,160 --real 2",
        "# planning: the client share at 30,000 pods, no cluster (decodes, page sizes, the plan)",
        ".venv/bin/python -m tests.bench.planning_client --rounds 5",
        "# planning on a real 1,000-node cluster: page sizes, plan zero over the raw listing, before/after",
        ".venv/bin/python -m tests.bench --size full --only planning --plan-rounds 5 --bind-directly \\",
        "    --plan-baseline-tree ../before --json plan30k.json",
        "# the same, the control plane on one core and the client on the other (as separate machines)",
        ".venv/bin/python -m tests.bench --size full --only planning --plan-rounds 5 --bind-directly \\",
        "    --pin-cores --json plan30k-pinned.json",
        "# the eviction limit: fixed 64 in flight against the adaptive limit, 3 alternating pairs (25 min)",
        ".venv/bin/python -m tests.bench.eviction_limit --size small --pairs 3 --json limit.json",
        "# the night at 1,000 nodes (two populations; about 1 h on a quiet machine)",
        ".venv/bin/python -m tests.bench --size full --scenario night --json full-night.json \\",
        "    && .venv/bin/python -m tests.bench --from-json full-night.json --write docs/benchmarks.md",
        ".venv/bin/pytest tests/e2e/test_bench_smoke.py   # what CI runs: 20 nodes / 400 pods",
    ]


def run_all(
    size: Size,
    wanted: Sequence[str],
    *,
    echo: Callable[[str], None],
    kubectl_budget: float | None,
    kubectl_nodes: int | None = None,
    profile: bool = False,
    sample: bool = False,
    raw: Sequence[str] | None = None,
    raw_sample: int | None = None,
    plan_rounds: int = 3,
    plan_baseline_tree: Path | None = None,
    bind_directly: bool = False,
    pin_cores: bool = False,
    checkpoint: Path | None = None,
    only: Sequence[str] = (),
    kubectl_parallel: Sequence[str] | None = None,
    sweep: Sequence[str] | None = None,
    scalebot_qps: Sequence[float] = (),
) -> tuple[dict[str, Any], list[str]]:
    """Every run the wanted scenarios need, each on a fresh cluster; (runs, errors).

    With `checkpoint`, the runs finished so far are saved there after each run (hours at the
    full size: a crash late on keeps the earlier runs' figures). `only` names the runs to do
    (default: every run the scenarios need). On a size with reduced synthetic load every run's name
    ends in `REDUCED_SUFFIX`, so such runs merge beside the others (`--merge`).
    """
    runs: dict[str, Any] = {}
    errors: list[str] = []

    def attempt(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if only and name not in only:
            return
        name += REDUCED_SUFFIX if size.reduced_load else ""
        started, code = time.monotonic(), commit()  # before the run: the tree may change meanwhile
        try:
            runs[name] = {**fn(), "commit": code}
        except Exception as exc:  # one failed run must not lose the others' figures
            errors.append(f"{name}: {exc}")
            echo(f"run {name} FAILED after {time.monotonic() - started:.0f} s:\n{traceback.format_exc()}")
            return
        echo(f"run {name} done in {time.monotonic() - started:.0f} s")
        if checkpoint is not None:
            checkpoint.write_bytes(orjson.dumps({"runs": runs, "errors": errors}, option=orjson.OPT_INDENT_2))

    drain_scenarios = [w for w in wanted if w != NIGHT]  # the night alone needs no zero-scale run
    if drain_scenarios:
        attempt(
            "scalebot",
            lambda: scenarios.run_scalebot(
                size,
                echo=echo,
                planning="planning" in wanted,
                slack="slack" in wanted,
                plan_rounds=plan_rounds,
                eviction_sample=raw_sample,
                artifacts=checkpoint.parent if checkpoint is not None else None,
            ),
        )
        for qps in scalebot_qps:
            attempt(
                f"scalebot_qps{qps:g}",
                lambda q=qps: scenarios.run_scalebot(
                    size,
                    echo=echo,
                    planning=False,
                    slack=False,
                    eviction_sample=raw_sample,
                    api_limit=(q, int(2 * q)),
                ),
            )
    if "zero-scale" in wanted:
        attempt(
            "kubectl",
            lambda: scenarios.run_kubectl(
                size, echo=echo, budget=kubectl_budget, stop_after_nodes=kubectl_nodes
            ),
        )
    if "raw-limit" in wanted:
        for name in DEFAULT_RAW[size.name] if raw is None else raw:
            qps, burst, order = RAW_VARIANTS[name]
            attempt(
                name,
                lambda q=qps, b=burst, o=order: scenarios.run_raw(
                    size, echo=echo, qps=q, burst=b, order=o, limit=raw_sample
                ),
            )
    if "baselines" in wanted:
        for name in DEFAULT_KUBECTL_PARALLEL[size.name] if kubectl_parallel is None else kubectl_parallel:
            attempt(
                name,
                lambda n=name: scenarios.run_kubectl_parallel(
                    size, echo=echo, name=n, budget=kubectl_budget, stop_after_nodes=kubectl_nodes
                ),
            )
        for name in DEFAULT_SWEEP[size.name] if sweep is None else sweep:
            attempt(
                name,
                lambda w=SWEEP[name]: scenarios.run_raw(
                    size, echo=echo, qps=0.0, burst=1, order="spread", limit=raw_sample, workers=w
                ),
            )
    if NIGHT in wanted:
        attempt("night", lambda: night.run_night(size, echo=echo))
        attempt("night_downscaler", lambda: night.run_night_downscaler(size, echo=echo))
    if "planning" in only:  # explicit only: planning is otherwise measured in the scalebot run
        attempt(
            "planning",
            lambda: scenarios.run_planning(
                size,
                echo=echo,
                plan_rounds=plan_rounds,
                baseline_tree=plan_baseline_tree,
                bind_directly=bind_directly,
                pin_cores=pin_cores,
            ),
        )
    if sample:
        # A run of its own: the sampler's CPU on this machine's two cores slows the run it watches.
        attempt(
            "sampled",
            lambda: scenarios.run_scalebot(
                size,
                echo=echo,
                planning=False,
                slack=False,
                sample=True,
                artifacts=checkpoint.parent if checkpoint is not None else None,
            ),
        )
    if profile:
        attempt(
            "profile",
            lambda: scenarios.run_scalebot(size, echo=echo, planning=False, slack=False, profile=True),
        )
    return runs, errors


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    size = SIZES[args.size]
    if args.reduced_load:
        size = dataclasses.replace(size, node_lease_seconds=REDUCED_LOAD_LEASE_SECONDS)
    wanted = list(args.scenario or report.SCENARIOS)
    if any(name in NIGHT_RUNS for name in args.only) and NIGHT not in wanted:
        wanted.append(NIGHT)
    budget = args.kubectl_budget if args.kubectl_budget is not None else DEFAULT_KUBECTL_BUDGET[size.name]
    budget = budget if budget and budget > 0 else None

    def echo(message: str) -> None:
        print(message, flush=True)

    if args.from_json is not None:
        return render(orjson.loads(args.from_json.read_bytes()), args.write, echo)
    cache_dir = ensure_binaries()
    machine = machine_description()
    echo(f"benchmark size {size.name}: {size.describe()}; scenarios: {', '.join(wanted)}")
    echo(f"machine: {machine['cpu']}; {machine['memory']}; load {machine['load']}")
    started, date = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs, errors = run_all(
        size,
        wanted,
        echo=echo,
        kubectl_budget=budget,
        kubectl_nodes=args.kubectl_nodes
        if args.kubectl_nodes is not None
        else DEFAULT_KUBECTL_NODES[size.name],
        profile=args.profile,
        sample=args.sample,
        raw=args.raw,
        raw_sample=args.raw_sample if args.raw_sample is not None else DEFAULT_RAW_SAMPLE[size.name],
        plan_rounds=args.plan_rounds,
        plan_baseline_tree=args.plan_baseline_tree,
        bind_directly=args.bind_directly,
        pin_cores=args.pin_cores,
        checkpoint=args.json.with_suffix(".partial.json") if args.json is not None else None,
        only=args.only,
        kubectl_parallel=args.kubectl_parallel,
        sweep=args.sweep,
        scalebot_qps=args.scalebot_qps,
    )
    earlier: dict[str, Any] | None = None
    if args.merge is not None:
        base = orjson.loads(args.merge.read_bytes())
        code = str(base.get("versions", {}).get("scalebot", "")).removeprefix("commit ")
        earlier_runs = (base.get("runs") or {}).items()
        kept = {name: {"commit": code, **run} for name, run in earlier_runs if name not in runs}
        runs = {**kept, **runs}
        errors = [*(base.get("errors") or ()), *errors]
        earlier = {k: base.get(k) for k in ("date", "command", "wall_seconds")} | {"runs": sorted(kept)}
    results: dict[str, Any] = {
        "size": size.name,
        "describe": size.describe(),
        "pods": size.pods,
        "date": date,
        "command": "python -m tests.bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "versions": versions(cache_dir),
        "scenarios": wanted,
        "runs": runs,
        "errors": errors,
        "wall_seconds": time.monotonic() - started,
        "load_after": list(os.getloadavg()),
        "pid": os.getpid(),
        "earlier": earlier,
    }
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return render(results, args.write, echo)


def render(results: dict[str, Any], write: Path | None, echo: Callable[[str], None]) -> int:
    """Print a result set's figures and, with `write`, merge it into the markdown file."""
    runs = results.get("runs") or {}
    if runs and set(runs) <= set(NIGHT_RUNS):  # the night alone: its own section of the file
        lines = night.markdown(runs, size=SIZES[results["size"]])
        for line in lines:
            echo(line)
        echo(f"command: {results.get('command')}")
        start_load = (results.get("machine") or {}).get("load")
        echo(f"load average at the start: {start_load}; at the end: {results.get('load_after')}")
        if write is not None:
            end_load = " / ".join(f"{v:.2f}" for v in results.get("load_after") or ())
            ran = (
                f"Run on {results.get('date')} (`{results.get('command')}`); machine load average "
                f"{start_load}, {end_load} at the end."
            )
            night.write_section(write, results["size"], [ran, "", *lines])
            echo(f"wrote the night section of {write}")
        for error in results.get("errors") or ():
            echo(f"error: {error}")
        return 1 if results.get("errors") else 0
    other = None
    if write is not None:
        sets, _ = report.load_embedded(write)
        other = sets.get("small" if results["size"] == "full" else "full")
    report.print_rows(report.rows(results, other), echo)
    echo(f"command: {results.get('command')}")
    start_load = (results.get("machine") or {}).get("load")
    echo(f"load average at the start: {start_load}; at the end: {results.get('load_after')}")
    for line in report.issue3_summary(results) if results["size"] == "small" else []:
        echo(line)
    if write is not None:
        report.write_markdown(write, results, reproduce=reproduce_commands())
        echo(f"wrote {write}")
    for error in results.get("errors") or ():
        echo(f"error: {error}")
    return 1 if results.get("errors") else 0

"""A fixed number of evictions in flight against the adaptive (AIMD) limit, on the real control plane.

Not a test (pytest does not collect this file): it prints figures. Run from the repository root:

    .venv/bin/python -m tests.bench.eviction_limit --size small --pairs 3 [--fixed 64] [--json out.json]

Each pair is two of scalebot's zero-scales (phase 1 only, the product's client limits), each on a
fresh cluster of the benchmark shape (`tests.bench.scenarios.run_scalebot`): one with the adaptive
limit (`RunnerSettings.adaptive_evictions`: AIMD from 16 in flight up to `max_parallel_evictions`,
64), and one with `--fixed` evictions always in flight (429s backed off by the drain's retry).
The fixed 64 is the product's default since this comparison (docs/benchmarks.md, "The eviction
limit"); the adaptive limit was the default before it. The order flips from pair to pair (A B,
B A, A B, ...) so that a machine whose load drifts during the sitting weighs on both alike; the
load average is printed beside every run. The figure compared is the time from the request to
"Drain completed", and the ratio of each pair (fixed over adaptive); the faster limit is the one
whose pairs' median ratio says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from tests.bench import report, scenarios
from tests.bench.cluster import SIZES

ADAPTIVE = "adaptive"


def _variant_name(fixed: int | None) -> str:
    return ADAPTIVE if fixed is None else f"fixed_{fixed}"


def run_figures(run: Mapping[str, Any]) -> dict[str, Any]:
    """What one zero-scale of the comparison reports."""
    zero = run["zero"]
    timeline = report.zero_timeline(zero)
    log = zero["requests"]
    return {
        "drained_seconds": timeline["drained"],
        "evictions_per_second": report.eviction_rate(log),
        "evicted": report.evicted_pods(zero),
        "eviction_posts": log["evictions"]["posted"],
        "throttled_429": report.answers_with(log, 429),
        "latency_p50": log["evictions"].get("latency_p50"),
        "latency_p99": log["evictions"].get("latency_p99"),
        "client_cpu_seconds": zero.get("cpu_seconds"),
        "control_plane_cpu_seconds": sum((run.get("component_cpu_seconds") or {}).values()),
        "load_during": run.get("loadavg_during"),
        "state": zero.get("state"),
    }


def pair_ratios(pairs: list[dict[str, dict[str, Any]]], fixed_name: str) -> list[float]:
    """Fixed over adaptive drain time, one per pair whose two runs both drained."""
    out = []
    for pair in pairs:
        a, f = pair.get(ADAPTIVE), pair.get(fixed_name)
        if a and f and a["drained_seconds"] and f["drained_seconds"]:
            out.append(f["drained_seconds"] / a["drained_seconds"])
    return out


def _line(name: str, fig: Mapping[str, Any]) -> str:
    load = fig.get("load_during") or [None, None]
    p50, p99 = ((fig[k] or 0) * 1000 for k in ("latency_p50", "latency_p99"))
    cells = [
        name,
        report.seconds(fig["drained_seconds"]),
        f"{report.num(fig['evictions_per_second'], 1)}/s",
        f"{fig['evicted']:,} of {fig['eviction_posts']:,} posts",
        str(fig["throttled_429"]),
        f"{report.num(p50, 0)} / {report.num(p99, 0)} ms",
        f"{report.num(fig['client_cpu_seconds'], 1)} s",
        f"{report.num(fig['control_plane_cpu_seconds'], 1)} s",
        f"{report.num(load[0], 1)} → {report.num(load[1], 1)}",
    ]
    return "| " + " | ".join(cells) + " |"


def table(pairs: list[dict[str, dict[str, Any]]], fixed_name: str) -> list[str]:
    lines = [
        "| pair / limit | request → drained | evictions/s | evicted | 429s | latency p50 / p99 "
        "| client CPU | control plane CPU | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, pair in enumerate(pairs, 1):
        for name, fig in pair.items():
            lines.append(_line(f"{i}: {name}", fig))
    ratios = pair_ratios(pairs, fixed_name)
    if ratios:
        lines.append("")
        lines.append(
            f"{fixed_name} over {ADAPTIVE}, request → drained, per pair: "
            + ", ".join(f"{r:.2f}x" for r in ratios)
            + f"; median {statistics.median(ratios):.2f}x"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.eviction_limit")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--fixed", type=int, default=64, help="the fixed limit compared (default 64)")
    parser.add_argument("--json", type=Path, help="also write the runs' figures here")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    fixed_name = _variant_name(args.fixed)

    def echo(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    pairs: list[dict[str, dict[str, Any]]] = []
    raw: list[dict[str, Any]] = []
    for i in range(args.pairs):
        order: list[int | None] = [None, args.fixed] if i % 2 == 0 else [args.fixed, None]
        pair: dict[str, dict[str, Any]] = {}
        for fixed in order:
            name = _variant_name(fixed)
            echo(f"pair {i + 1}/{args.pairs}: {name} (load {os.getloadavg()[0]:.1f}) ...")
            run = scenarios.run_scalebot(
                size,
                echo=echo,
                planning=False,
                slack=False,
                fixed_evictions=fixed,
                adaptive_evictions=fixed is None,
            )
            raw.append({"pair": i + 1, "variant": name, "run": run})
            pair[name] = run_figures(run)
            echo(_line(name, pair[name]))
        pairs.append(pair)
        if args.json is not None:  # after every pair: an interrupted sitting keeps what it measured
            args.json.write_bytes(orjson.dumps({"size": size.name, "pairs": pairs, "runs": raw}))
    print(f"{size.describe()}; {args.pairs} alternating pairs")
    print("\n".join(table(pairs, fixed_name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

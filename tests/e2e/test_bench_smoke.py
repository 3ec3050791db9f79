"""The benchmark suite at a size CI can afford: every run of `python -m tests.bench`, 20 nodes / 400 pods.

Same code as the real benchmark (tests/bench): a fresh control plane per run, scalebot's
zero-scale in a child process as the `scalebot` ServiceAccount with the Slack progress path
attached, planning, kubectl drain (stopped after one node and extrapolated), the parallel kubectl
baselines (per pool, per node 16 at once; each stopped after one node), the bare eviction loop with
scalebot's client settings and two points of the concurrency sweep (8 and 64 workers, no limit).
It prints the figures and asserts only that the machinery measured something sane: finite
ratios, one eviction per pod, no per-pod polling. Speed targets are never asserted;
docs/benchmarks.md has the real runs.
"""

from __future__ import annotations

import math

import pytest

from tests.bench import report, runner
from tests.bench.cluster import SIZES

pytestmark = pytest.mark.e2e


def test_benchmark_machinery_at_20_nodes() -> None:
    size = SIZES["smoke"]
    runs, errors = runner.run_all(
        size,
        report.SCENARIOS,
        echo=print,
        kubectl_budget=60.0,
        kubectl_nodes=1,
        raw=("raw",),
        plan_rounds=1,
        sample=True,
    )
    assert not errors, errors
    results = {
        "size": size.name,
        "describe": size.describe(),
        "pods": size.pods,
        "scenarios": list(report.SCENARIOS),
        "runs": runs,
    }
    report.print_rows(report.rows(results), print)

    zero = runs["scalebot"]["zero"]
    assert zero["state"] == "succeeded", zero["error"]
    # Phase 1 only: the window outlasts the run, so nothing was force-deleted.
    assert zero["force_deleted"] == 0
    assert not [e for e in zero["events"] if str(e["text"]).startswith("Phase 1 ended")]
    assert runs["scalebot"]["left_on_nodes"] == {"nodes": 0, "pods": 0}

    # One eviction per pod: every evictable pod was evicted once; retries would show as extra POSTs.
    evictions = zero["requests"]["evictions"]
    assert evictions["accepted"] == size.evictable_pods
    assert evictions["posted"] <= 1.05 * size.evictable_pods
    assert runs["scalebot"]["server_evictions"].get("201") == size.evictable_pods
    # No per-pod polling: scalebot never GETs a single pod.
    counts = report.counts(zero["requests"]["counts"])
    assert counts.get(("get", "pods"), 0) == 0
    # The client's count is the API server's count for the identity (APF's service-accounts flow).
    assert runs["scalebot"]["identity_requests"] == pytest.approx(sum(counts.values()), abs=2)

    drained = report.zero_timeline(zero)["drained"]
    kubectl_seconds, _ = report.kubectl_seconds(runs["kubectl"])
    plan = runs["scalebot"]["plan"]
    ratios = {
        "kubectl / scalebot": (kubectl_seconds or math.nan) / (drained or math.nan),
        "scalebot / bare loop": (report.eviction_rate(zero["requests"]) or math.nan)
        / (report.eviction_rate(runs["raw"]["requests"]) or math.nan),
        "models / plan": plan["models_median"] / plan["plan_median"],
    }
    assert all(math.isfinite(v) and v > 0 for v in ratios.values()), ratios

    # py-spy sampled a run of its own from outside (every thread's time is accounted for), never
    # the measured one, which the unprofiled baselines are compared with.
    assert "sampled_profile" not in runs["scalebot"]
    sampled = runs["sampled"]["sampled_profile"]
    assert sampled.get("samples", 0) > 0, sampled
    assert any(name.startswith("waiting for the API server") for name, *_ in sampled["by_category"])

    slack = runs["scalebot"]["slack"]
    assert slack["final_shown"] and slack["post_message"] >= 1

    # The baselines a skeptic accepts and the server's limit, cheaply: each parallel kubectl stopped
    # after its first drained node (extrapolated), two points of the concurrency sweep.
    for name in runner.DEFAULT_KUBECTL_PARALLEL["smoke"]:
        run = runs[name]
        assert run["nodes_drained"] >= 1, (name, run)
        seconds, _ = report.kubectl_seconds(run)
        assert seconds is not None and math.isfinite(seconds) and seconds > 0, (name, run)
        assert run["commands"] >= 2 and run["parallel"] >= 2, run
    assert runs["kubectl_pools"]["commands"] == size.pools
    for name in runner.DEFAULT_SWEEP["smoke"]:
        sweep = runs[name]
        assert sweep["workers"] == runner.SWEEP[name] and sweep["qps"] == 0
        assert (report.eviction_rate(sweep["requests"]) or 0) > 0, sweep
    baseline = {r.figure: r.value for r in report.rows(results) if r.scenario == "baselines"}
    assert any(f.startswith("speed-up against the best baseline") for f in baseline), baseline
    assert any(f.startswith("scalebot's evictions/s as a share of the sweep") for f in baseline), baseline
    reads = report.reads_per_node(zero)
    assert reads is not None and 0 < reads < 10, reads

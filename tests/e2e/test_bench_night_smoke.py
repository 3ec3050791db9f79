"""The realistic night at a size CI can afford (`python -m tests.bench --size smoke --scenario night`).

The same code as the real benchmark: a fresh control plane per run, scalebot's sleep with
workloads then its wake in a child process as the `scalebot` ServiceAccount, and the anchor's
workload half (kube-downscaler's cycle, its own ServiceAccount) on a second fresh cluster. It asserts
what could go wrong in the machinery: the nodes really reached zero, the wake brought every node
back Ready and every workload Available at its original replicas with the CronJobs unsuspended
(for both contenders), and the model's timelines come out finite. Speeds are never asserted.
"""

from __future__ import annotations

import math

import pytest

from tests.bench import night, runner
from tests.bench.cluster import SIZES

pytestmark = pytest.mark.e2e


def test_the_night_at_20_nodes() -> None:
    size = SIZES["smoke"]
    runs, errors = runner.run_all(size, [runner.NIGHT], echo=print, kubectl_budget=None)
    assert not errors, errors
    for line in night.markdown(runs, size=size):
        print(line)

    sb = runs["night"]
    assert sb["sleep"]["state"] == "succeeded", sb["sleep"]["error"]
    assert sb["sleep"]["workloads_planned"] >= sb["workloads"] > 0 and sb["cronjobs"] >= 2
    # The observer saw the pools at zero nodes and every workload at zero with no pod left.
    assert sb["zero_nodes_seconds"] is not None and sb["zero_nodes_seconds"] > 0
    assert sb["removed_seconds"] is not None and sb["removed_seconds"] <= sb["zero_nodes_seconds"] + 1
    assert sb["workloads_asleep_seconds"] is not None
    assert sb["wake"]["state"] == "succeeded", sb["wake"]["error"]
    assert sb["available_seconds"] is not None and sb["available_seconds"] > 0
    final = sb["final"]
    assert final["all_back"], final
    assert final["ready_nodes"] == final["expected_nodes"] == size.nodes
    assert final["available"] == final["workloads"] == sb["workloads"] > 0
    assert final["unsuspended"] == final["cronjobs"] == sb["cronjobs"]
    assert sb["identity_requests"] > 0 and sb["child_maxrss_kib"] > 0

    anchor = runs["night_downscaler"]
    changed = {kind: n for c in anchor["sleep"]["cycles"] for kind, n in c["changed"].items()}
    assert changed.get("cronjobs") == anchor["cronjobs"]
    # Both contenders put the same objects to sleep (the benchmark's, and the control plane's
    # readiness probe Deployment, which neither excludes).
    scaled = {r: n for _, r, n in (c for c in sb["sleep"]["counts"] if c[0] == "patch")}
    assert changed.get("deployments", 0) + changed.get("statefulsets", 0) >= anchor["workloads"]
    assert changed.get("deployments", 0) == scaled.get("deployments/scale")
    assert changed.get("cronjobs") == scaled.get("cronjobs")
    assert anchor["final"]["all_back"], anchor["final"]
    assert anchor["final"]["unsuspended"] == anchor["cronjobs"]
    assert anchor["sleep"]["identity_requests"] > 0
    timelines = night.anchor_timelines(anchor, nodes=size.nodes, pools=size.pools)
    assert all(math.isfinite(t.total) and t.total > 0 for t in timelines)
    for timelines in (
        night.anchor_timelines(anchor, nodes=size.nodes, pools=size.pools, tuned=True),
        night.karpenter_timelines(anchor, nodes=size.nodes, pools=size.pools),
    ):
        assert all(math.isfinite(t.total) and t.total > 0 for t in timelines)
    # The downscaler release's cycle lists the Namespaces once, never one GET per namespace.
    for half in (anchor["sleep"], anchor["wake"]):
        for cycle in half["cycles"]:
            assert cycle["requests"].get("GET namespaces") == 1, cycle["requests"]

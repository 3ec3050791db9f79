"""A sleep lists its pods once, against the real API server, as scalebot's ServiceAccount.

Covers: a zero-scale (a sleep: it records what its wake returns to) of label pools reads the pods
of the cluster in one listing, the plan's. The cordon step keeps which workloads its nodes
displace from the drain's pod feed, which starts from the plan's listing and follows it with a
watch from that listing's resourceVersion; the drain's passes read the same feed. The step used
to list the emptied nodes' pods again (a second full listing at 30,000 pods). Counts are
scalebot's own client's (`KubeClient.request_counts`), which every request of its identity
passes through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState
from engine.kube.client import KubeClient
from tests.e2e.support import CLUSTER, FAST, deployment, group, operations, pools, request, run

pytestmark = pytest.mark.e2e

PHASE1_ONLY = replace(FAST, graceful_window=timedelta(seconds=120))
"""A graceful window the drain never reaches: phase 2 (which reads the pods left on purpose, as
it starts) stays out of a count that is about the sleep's own listings, however loaded the
machine."""


def test_a_sleep_lists_the_pods_once(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=3, b=2)
    nodes = sorted(n for names in made.values() for n in names)
    deployment(admin_api, namespace, "web", 2 * len(nodes), node_selector=group(unique_name))
    before = kube.request_counts[("list", "pods")]

    db = tmp_path / "db.sqlite"
    with operations(kube, pool_key, db, PHASE1_ONLY) as ops:
        op = run(ops, request(OpKind.ZERO))
        displaced = ops.store.displaced(CLUSTER, [f"{unique_name}-a", f"{unique_name}-b"])
    assert op.state is OpState.SUCCEEDED, op.error
    assert sorted(op.plan.nodes) == nodes

    listings = kube.request_counts[("list", "pods")] - before
    watches = kube.request_counts[("watch", "pods")]
    print(f"\nzero-scale of {len(nodes)} nodes: {listings} pod listing(s), {watches} pod watch request(s)")
    assert listings == 1, f"the plan's listing and no other; counts: {dict(kube.request_counts)}"
    # What the cordon kept, from the feed: the Deployment displaced from both pools.
    assert displaced == frozenset({f"Deployment/{namespace}/web"}), displaced

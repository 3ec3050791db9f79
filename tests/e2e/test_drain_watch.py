"""The watch-fed drain against the real API server, as scalebot's ServiceAccount (shipped RBAC).

Covers: the pods of the nodes being drained are listed once and then followed by one pod watch
(the ClusterRole's `watch` on pods), however many passes the drain takes, so pod reads per node
are O(1), and no node is read by itself (the cordon patches from one node listing); a pod held
by a finalizer keeps the drain waiting (passes go on: node listings, no pod listing), and the
drain ends once the watch reports that last pod gone. The fallback to listing
when the watch breaks is proven through the TCP fault proxy in
tests/reliability/test_drain_watch_faults.py; the feed's resume/410 logic in
tests/unit/engine/drain/test_podfeed.py. A zero-scale's drain starts its pod watch from the plan's own
listing (its resourceVersion): the pods are listed once for plan and drain together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.operation import OpKind, OpState
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.kube.api import PodListing
from engine.kube.client import KubeClient
from localcluster import objects, rest, waits
from tests.e2e.support import deployment, group, operations, pools, request, run

pytestmark = pytest.mark.e2e

NODES = 8
PASSES_WHILE_HELD = 4
SETTINGS = DrainSettings(
    interval=timedelta(seconds=1), settle=timedelta(seconds=1), timeout=timedelta(seconds=120)
)


def reads(kube: KubeClient) -> dict[tuple[str, str], int]:
    return {k: v for k, v in kube.request_counts.items() if k[0] in ("get", "list", "watch")}


def test_pods_are_listed_once_and_watched_however_many_passes_the_drain_takes(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    on_group = group(unique_name)
    nodes = node_pool(NODES, labels=on_group)
    deployment(admin_api, namespace, "web", 2 * NODES, node_selector=on_group)
    # Held by a finalizer after its eviction: the drain's tail, for as long as the test says.
    objects.create_pod_with_finalizer(
        admin_api, namespace, "held", node=nodes[0], grace=1, owner_references=()
    )
    waits.wait_for_pods_running(admin_api, namespace, count=2 * NODES + 1)

    released_at: list[float] = []
    failure: list[BaseException] = []

    def release_after_some_passes() -> None:
        try:
            held = rest.pod_path(namespace, "held")
            waits.wait_until(
                lambda: rest.get(admin_api, held)["metadata"].get("deletionTimestamp"), 60, "held evicted"
            )
            # Each pass lists the nodes once: let the drain run several passes on the held pod.
            first = kube.request_counts[("list", "nodes")]
            waits.wait_until(
                lambda: kube.request_counts[("list", "nodes")] >= first + PASSES_WHILE_HELD, 60, "passes"
            )
            released_at.append(time.monotonic())
            objects.remove_finalizers(admin_api, namespace, "held")
        except BaseException as exc:  # reported by the test, never lost in the thread
            failure.append(exc)

    helper = threading.Thread(target=release_after_some_passes, name="release-held", daemon=True)
    helper.start()
    try:
        outcome = drainer.drain_nodes(
            kube, nodes, options=filters.DrainOptions.machine(), clock=SystemClock(), settings=SETTINGS
        )
        ended_at = time.monotonic()
    finally:
        helper.join(timeout=90)
    assert not failure, failure
    assert outcome.completed, outcome.report.condition_message()
    assert not [p for n in nodes for p in rest.pods_on_node(admin_api, n)], "the nodes are empty"

    counts = reads(kube)
    passes = counts[("list", "nodes")] - 1  # one listing is the cordon's; each pass lists once
    pod_reads = counts[("list", "pods")] + counts.get(("watch", "pods"), 0)
    all_reads = sum(counts.values())
    print(f"\n{NODES} nodes, {passes} passes, reads: {sorted(counts.items())}")
    print(f"pod reads per node {pod_reads / NODES:.2f}, all reads per node {all_reads / NODES:.2f}")
    assert passes >= PASSES_WHILE_HELD + 1
    # Once listed (one page), then followed: no pod listing per pass.
    assert counts[("list", "pods")] == 1, counts
    assert 1 <= counts.get(("watch", "pods"), 0) <= 2, counts
    # The cordon read the nodes in one listing (the passes' listings are the others), not a GET a
    # node; one is left only if someone (kwok's status writes) wrote a node before our patch.
    assert counts.get(("get", "nodes"), 0) <= 1, counts
    assert pod_reads / NODES <= 0.5
    # The tail ends with the held pod: the watch's cue, then the settle time.
    assert released_at and ended_at - released_at[0] < SETTINGS.settle.total_seconds() + 5


def test_a_zero_scale_drain_watches_from_the_plans_listing_without_listing_again(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    deployment(admin_api, namespace, "web", 4, node_selector=group(unique_name))
    calls: list[tuple[str, Any, str]] = []
    real_list, real_watch = kube.list_pods_at, kube.watch_pods

    def list_pods_at(*, node_names: Any) -> PodListing:
        listing = real_list(node_names=node_names)
        calls.append(
            ("list", None if node_names is None else tuple(sorted(node_names)), listing.resource_version)
        )
        return listing

    def watch_pods(*, node_names: Any, resource_version: str) -> Any:
        calls.append(("watch", tuple(sorted(node_names)), resource_version))
        return real_watch(node_names=node_names, resource_version=resource_version)

    monkeypatch.setattr(kube, "list_pods_at", list_pods_at)
    monkeypatch.setattr(kube, "watch_pods", watch_pods)
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))
    assert op.state is OpState.SUCCEEDED, op.error
    assert not [n for n in kube.list_nodes() if n.name in made["a"]], "the pool's nodes are gone"
    # The plan listed every pod; the drain's pod feed started from that listing, not one of its own:
    # its watch resumes from the plan's resourceVersion. (The cordon step's listing of the emptied
    # nodes, which records the workloads the sleep displaces, is made after the cordon on purpose.)
    watches = [c for c in calls if c[0] == "watch"]
    assert calls[0][:2] == ("list", None), calls
    assert watches and watches[0][1] == tuple(sorted(made["a"])) and watches[0][2] == calls[0][2], calls

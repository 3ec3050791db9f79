"""kubectl's `drain --pod-selector` and `--disable-eviction`, through the real drain loop on the
in-memory cluster: only selected pods go; with eviction disabled a PDB that allows nothing does
not hold a pod, since it is deleted, not evicted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from engine.domain.clock import FakeClock
from engine.domain.model import parse_label_selector
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.kube.fake import FakeCluster

START = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def cluster_with_a_guarded_pod() -> tuple[FakeCluster, FakeClock]:
    clock = FakeClock(START)
    cluster = FakeCluster(now=clock.now)
    cluster.add_node("w-1")
    cluster.add_node("w-2")
    for name, app in (("db-0", "db"), ("web-0", "web"), ("web-1", "web")):
        cluster.add_pod(
            "shop",
            name,
            node="w-1",
            controller_kind="ReplicaSet",
            controller_name=app,
            labels={"app": app},
            grace=0,
        )
    cluster.add_pdb("shop", "db", match_labels={"app": "db"}, disruptions_allowed=0)
    return cluster, clock


def drain(cluster: FakeCluster, clock: FakeClock, options: filters.DrainOptions) -> drainer.DrainOutcome:
    settings = DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=10), parallel=4)
    return drainer.drain_nodes(cluster, ["w-1"], options=options, clock=clock, settings=settings)


def kubectl(**flags: bool) -> filters.DrainOptions:
    return filters.DrainOptions.kubectl(ignore_daemonsets=True, delete_emptydir_data=True, **flags)


def test_pod_selector_drains_only_the_selected_pods() -> None:
    cluster, clock = cluster_with_a_guarded_pod()

    outcome = drain(cluster, clock, replace(kubectl(), pod_selector=parse_label_selector("app=web")))

    assert outcome.completed, "the PDB-guarded pod is not selected, so it does not hold the drain"
    assert [p.name for p in cluster.all_pods()] == ["db-0"]
    assert cluster.get_node("w-1").unschedulable


def test_disable_eviction_deletes_what_a_pdb_would_refuse() -> None:
    cluster, clock = cluster_with_a_guarded_pod()
    refused = drain(cluster, clock, kubectl())
    assert not refused.completed and cluster.get_pod("shop", "db-0") is not None

    outcome = drain(cluster, clock, replace(kubectl(), disable_eviction=True))

    assert outcome.completed
    assert cluster.all_pods() == []
    assert cluster.request_counts[("delete", "pods")] >= 1


def test_the_plan_says_a_disabled_eviction_bypasses_pdbs() -> None:
    cluster, clock = cluster_with_a_guarded_pod()
    ctx = filters.DrainContext(
        options=replace(kubectl(), disable_eviction=True), now=clock.now(), daemonset_keys=frozenset()
    )

    verdicts = {p.name: v for p, v in filters.classify_pods(cluster.all_pods(), ctx)}

    assert verdicts["db-0"].action is filters.Action.DELETE
    assert filters.EVICTION_DISABLED_REASON in verdicts["db-0"].reason

"""A zero of every pool on a provider whose cluster stops whole (StopsCluster, as an AKS cluster):
the two phases run first, then the cluster is stopped instead of each pool's removal; while it is
stopped the plans read the provider alone and only a whole wake is taken, whose first step starts
the cluster. On the real Operations, runner and SQLite over the in-memory cluster. (End to end with
the AKS provider against its ARM stand-in: tests/e2e/test_pools_aks.py.)"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.base import Pool, StopsCluster
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store


class StoppingPools:
    """Simulated pools whose cluster stops whole: a stop takes every node away and keeps the pools'
    sizes, a start brings them back; while stopped the pools are read from what was kept."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.inner = SimulatedPoolProvider(cluster)
        self.name = self.inner.name
        self.kept: dict[str, int] = {}
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def stopped(self) -> bool:
        return bool(self.kept)

    def list_pools(self) -> list[Pool]:
        if self.stopped:
            return [self._stopped(name) for name in sorted(self.kept)]
        return self.inner.list_pools()

    def get_pool(self, name: str) -> Pool:
        return self._stopped(name) if self.stopped else self.inner.get_pool(name)

    def _stopped(self, name: str) -> Pool:
        return Pool(name=name, provider=self.name, desired=0, progress="cluster Stopped")

    def cluster_stopped(self) -> str:
        return "the test cluster is Stopped" if self.stopped else ""

    def prepare_stop(self, pools: Sequence[str]) -> None:
        self.calls.append(f"prepare_stop {','.join(sorted(pools))}")

    def stop_cluster(self) -> None:
        self.calls.append("stop")
        sizes = {p.name: p.desired for p in self.inner.list_pools()}
        for pool in sizes:
            self.inner.set_size(pool, 0)
        self.kept = sizes

    def start_cluster(self) -> None:
        self.calls.append("start")
        kept, self.kept = self.kept, {}
        for pool, size in kept.items():
            self.inner.set_size(pool, size)


class GuardedApi:
    """The cluster's API server, noting every call made while its cluster is stopped."""

    def __init__(self, cluster: FakeCluster, pools: StoppingPools) -> None:
        self._cluster = cluster
        self._pools = pools
        self.while_stopped: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if self._pools.stopped:
            self.while_stopped.append(name)
        return getattr(self._cluster, name)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Operations, FakeCluster, StoppingPools, GuardedApi]]:
    cluster = FakeCluster()
    for pool, count in (("system", 1), ("web", 2)):
        for i in range(count):
            cluster.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    for i in range(2):
        cluster.add_pod(
            "shop",
            f"web-{i}",
            node=f"web-{i}",
            controller_kind="ReplicaSet",
            controller_name="web",
            labels={"app": "web"},
        )
    pools = StoppingPools(cluster)
    api = GuardedApi(cluster, pools)
    assert cluster.clock is not None
    handle = ClusterHandle(name="dev", api=api, pools=pools)  # type: ignore[arg-type]
    ops = new_operations(
        Store(tmp_path / "scalebot.db"),
        {"dev": handle},
        {"dev": policy.ClusterPolicy(cluster="dev")},
        cluster.clock,
        settings=RunnerSettings(workers=2, parallel_evictions=4),
    )
    try:
        yield ops, cluster, pools, api
    finally:
        ops.runner.stop()


def _run(ops: Operations, kind: OpKind, *pools: str) -> Any:
    out = ops.request(
        OperationRequest(kind=kind, target=Target(cluster="dev", pools=pools), requested_by="cli:a")
    )
    assert out.ok and out.operation is not None, out.reply
    assert ops.runner.wait_idle(timeout=20), "operation did not finish"
    return ops.get(out.operation.id)


def test_a_zero_of_every_pool_forces_then_stops_and_the_wake_starts_first(
    world: tuple[Operations, FakeCluster, StoppingPools, GuardedApi],
) -> None:
    ops, cluster, pools, api = world
    assert isinstance(pools, StopsCluster)
    events: list[ProgressEvent] = []
    ops.subscribe(events.append)

    zero = _run(ops, OpKind.ZERO)
    assert zero.state is OpState.SUCCEEDED, zero.error
    assert pools.calls == ["prepare_stop system,web", "stop"]
    texts = [e.text for e in events]
    forced = next(i for i, t in enumerate(texts) if t.startswith("Phase 2: force-deleted 2 Pods"))
    stopped = next(i for i, t in enumerate(texts) if t.startswith("Stopped the cluster: its 3 drained nodes"))
    assert forced < stopped, texts
    assert cluster.list_nodes() == [] and pools.kept == {"system": 1, "web": 2}

    # While stopped: only a whole wake is taken; the plan and the status read the provider alone.
    for kind, names in ((OpKind.WAKE, ("web",)), (OpKind.SCALE, ("web",)), (OpKind.ZERO, ())):
        target = Target(cluster="dev", pools=names, size=3 if kind is OpKind.SCALE else None)
        refused = ops.request(OperationRequest(kind=kind, target=target, requested_by="cli:a"))
        assert not refused.ok
        assert refused.reply.startswith("the test cluster is Stopped: its API server cannot be reached")
    assert {p.name: p.desired for p in ops.status("dev").pools} == {"system": 0, "web": 0}

    woken = _run(ops, OpKind.WAKE)
    assert woken.state is OpState.SUCCEEDED, woken.error
    assert pools.calls[2:] == ["start"]
    assert sorted(n.name for n in cluster.list_nodes()) == ["system-0", "web-0", "web-1"]
    assert any(
        t.startswith("Started the cluster (the test cluster is Stopped)") for t in (e.text for e in events)
    )
    assert api.while_stopped == [], "the API server was asked while the cluster was stopped"


def test_a_zero_of_some_pools_removes_their_nodes_and_never_stops(
    world: tuple[Operations, FakeCluster, StoppingPools, GuardedApi],
) -> None:
    ops, cluster, pools, _ = world
    zero = _run(ops, OpKind.ZERO, "system")
    assert zero.state is OpState.SUCCEEDED, zero.error
    assert not zero.plan.force_phase, "not every pool: no phase 2, no stop"
    assert pools.calls == [] and [n.name for n in cluster.list_nodes()] == ["web-0", "web-1"]

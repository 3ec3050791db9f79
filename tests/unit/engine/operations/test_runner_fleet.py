"""A fleet on one runner: waiting operations hold no thread, and clusters' evictions do not queue
behind each other.

Real `Operations`, the real runner and a real SQLite file over in-memory clusters, on a clock
that does not move: an operation's wait between steps lasts until something wakes it (or the
runner stops), so the operations stay where they are while the test looks at them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.domain.model import PodInfo
from engine.domain.operation import OperationRequest, OpKind, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
POOL_LABEL = "scalebot.io/pool"


class StoppedClock:
    """Time that does not pass: a wait lasts until its event is set (a wake-up, a stop)."""

    def now(self) -> datetime:
        return T0

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        """Nothing sleeps on this clock: time does not pass."""

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait()


class GatedCluster(FakeCluster):
    """Its evictions are held until `release` is set; `arrived` counts those held."""

    def __init__(self, clock: StoppedClock) -> None:
        super().__init__(now=clock.now)
        self.release = threading.Event()
        self.held = 0
        self.peak = 0
        """The most evictions ever held at once."""
        self.answered = 0
        self._held_lock = threading.Lock()

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        with self._held_lock:
            self.held += 1
            self.peak = max(self.peak, self.held)
        try:
            assert self.release.wait(30), "the test never released the gated evictions"
        finally:
            with self._held_lock:
                self.held -= 1
        super().evict_pod(pod, grace_seconds=grace_seconds)
        with self._held_lock:
            self.answered += 1


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll state that has no Condition to wait on, with a deadline."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        assert time.monotonic() < deadline, f"not true within {timeout}s: {what}"
        pause.wait(0.02)


def populate(cluster: FakeCluster, pods: int, *, pdb: bool) -> None:
    cluster.add_node("web-0", labels={POOL_LABEL: "web"})
    for i in range(pods):
        cluster.add_pod(
            "shop",
            f"web-{i}",
            node="web-0",
            controller_kind="ReplicaSet",
            controller_name="web",
            labels={"app": "web"},
        )
    if pdb:
        cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=0)


def zero(cluster: str) -> OperationRequest:
    return OperationRequest(kind=OpKind.ZERO, target=Target(cluster=cluster), requested_by="cli:alice")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Callable[[dict[str, FakeCluster], RunnerSettings], Operations]]:
    built: list[Operations] = []

    def build(clusters: dict[str, FakeCluster], settings: RunnerSettings) -> Operations:
        handles = {name: ClusterHandle(name, c, SimulatedPoolProvider(c)) for name, c in clusters.items()}
        ops = new_operations(
            Store(tmp_path / f"fleet-{len(built)}.db"), handles, {}, StoppedClock(), settings=settings
        )
        built.append(ops)
        return ops

    yield build
    for ops in built:
        ops.runner.stop()


@pytest.mark.parametrize("n", [10, 100])
def test_operations_waiting_in_their_phase_one_window_hold_no_thread(
    fleet: Callable[[dict[str, FakeCluster], RunnerSettings], Operations], n: int
) -> None:
    # Every cluster's pod is held by a PodDisruptionBudget: each zero-scale evicts, is refused
    # (429), and waits in its phase-1 window for the retry, on a clock that never gets there.
    clock = StoppedClock()
    clusters = {f"c{i:03d}": FakeCluster(now=clock.now) for i in range(n)}
    for cluster in clusters.values():
        populate(cluster, 1, pdb=True)
    settings = RunnerSettings(workers=4, max_evictions_in_flight=8, parallel_evictions=2)
    ops = fleet(clusters, settings)
    before = threading.active_count()
    ids = []
    for name in clusters:
        out = ops.request(zero(name))
        assert out.ok and out.operation is not None, out.reply
        ids.append(out.operation.id)

    def all_waiting_in_phase_one() -> bool:
        load = ops.runner.load()
        return load.waiting == n and all(
            (op := ops.get(i)) is not None and op.step == "drain" and op.progress.drain.last_message
            for i in ids
        )

    wait_until(all_waiting_in_phase_one, f"{n} zero-scales waiting in phase 1")
    grown = threading.active_count() - before
    # The step workers, the eviction pool, the timer and the claims' heartbeat: all bounded by
    # the settings, none per operation.
    bound = settings.workers + settings.max_evictions_in_flight + 2
    assert grown <= bound, f"{grown} threads for {n} waiting operations (bound {bound})"
    assert ops.runner.load().queued == 0 and ops.runner.load().stepping == 0


def test_a_second_clusters_drain_evicts_while_the_first_clusters_pass_is_in_flight(
    fleet: Callable[[dict[str, FakeCluster], RunnerSettings], Operations],
) -> None:
    clock = StoppedClock()
    first, second = GatedCluster(clock), FakeCluster(now=clock.now)
    populate(first, 100, pdb=False)
    populate(second, 5, pdb=False)
    # Each cluster may keep 4 evictions in flight, the process 8 in all.
    settings = RunnerSettings(
        workers=4, parallel_evictions=4, max_parallel_evictions=4, max_evictions_in_flight=8
    )
    ops = fleet({"first": first, "second": second}, settings)
    try:
        assert ops.request(zero("first")).ok
        wait_until(lambda: first.held == 4, "the first cluster's pass has 4 evictions in flight")
        out = ops.request(zero("second"))
        assert out.ok and out.operation is not None, out.reply

        def second_evicted() -> bool:
            return all(p.is_terminating for p in second.list_pods(node_names=["web-0"]))

        wait_until(second_evicted, "every pod of the second cluster evicted")
        assert first.held == 4, "the first cluster's evictions are still in flight, within its own limit"
        assert len(first.list_pods(node_names=["web-0"])) == 100, "none of them was answered"
    finally:
        first.release.set()


def test_a_drain_keeps_a_fixed_number_of_evictions_in_flight_capped_per_cluster(
    fleet: Callable[[dict[str, FakeCluster], RunnerSettings], Operations],
) -> None:
    """The default limit is fixed (measured faster than the adaptive one on the control plane:
    docs/benchmarks.md, "The eviction limit"); `runner.max_evictions_per_cluster` caps it."""
    assert (RunnerSettings().adaptive_evictions, RunnerSettings().parallel_evictions) == (False, 64)
    clock = StoppedClock()
    cluster = GatedCluster(clock)
    populate(cluster, 40, pdb=False)
    settings = RunnerSettings(workers=4, max_parallel_evictions=6, max_evictions_in_flight=32)
    ops = fleet({"only": cluster}, settings)
    try:
        assert ops.request(zero("only")).ok
        wait_until(lambda: cluster.held == 6, "the pass has its 6 evictions in flight")
    finally:
        cluster.release.set()
    wait_until(lambda: cluster.answered == 40, "every pod evicted")
    assert cluster.peak == 6, "never more than the cap in flight, over the whole pass"


def test_operations_over_the_per_cluster_limit_wait_their_turn_claimed(
    fleet: Callable[[dict[str, FakeCluster], RunnerSettings], Operations],
) -> None:
    clock = StoppedClock()
    cluster = FakeCluster(now=clock.now)
    populate(cluster, 1, pdb=True)
    cluster.add_node("batch-0", labels={POOL_LABEL: "batch"})
    cluster.add_pod("batch", "job-0", node="batch-0", controller_kind="ReplicaSet", controller_name="job")
    cluster.add_pdb("batch", "job", match_labels={}, disruptions_allowed=0)
    ops = fleet({"dev": cluster}, RunnerSettings(workers=2, max_operations_per_cluster=1))

    def zero_pool(pool: str) -> str:
        target = Target(cluster="dev", pools=(pool,))
        out = ops.request(OperationRequest(kind=OpKind.ZERO, target=target, requested_by="cli:a"))
        assert out.ok and out.operation is not None, out.reply
        return out.operation.id

    web = zero_pool("web")
    wait_until(lambda: ops.runner.load().waiting == 1, "the first operation waiting in its drain")
    batch = zero_pool("batch")
    assert ops.runner.load().queued == 1 and ops.runner.is_running(batch)
    queued = ops.get(batch)
    assert queued is not None and queued.step == "", "not started while the cluster's place is taken"
    claim = ops.store.runner_claim(batch)
    assert claim is not None and claim.nonce == ops.runner.identity.nonce, "claimed while it waits"

    assert ops.cancel(web, by="cli:a").ok
    wait_until(lambda: not ops.runner.is_running(web), "the first operation cancelled")
    wait_until(
        lambda: (op := ops.get(batch)) is not None and op.step == "drain", "the second started in its turn"
    )
    first = ops.get(web)
    assert first is not None and first.state.value == "cancelled"


def test_a_stop_ends_waiting_operations_at_once_and_the_next_runner_resumes_each_one(
    fleet: Callable[[dict[str, FakeCluster], RunnerSettings], Operations], tmp_path: Path
) -> None:
    clock = StoppedClock()
    clusters = {f"c{i:02d}": FakeCluster(now=clock.now) for i in range(20)}
    for cluster in clusters.values():
        populate(cluster, 1, pdb=True)
    settings = RunnerSettings(workers=2, max_operations=15)
    first = fleet(clusters, settings)
    ids = []
    for name in clusters:
        out = first.request(zero(name))
        assert out.ok and out.operation is not None, out.reply
        ids.append(out.operation.id)
    wait_until(lambda: first.runner.load().waiting == 15, "15 waiting in phase 1, 5 queued")
    assert first.runner.load().queued == 5

    first.runner.stop()
    assert first.runner.wait_idle(10), "no waiting or queued operation outlives the stop"
    claims = [first.store.runner_claim(i) for i in ids]
    assert all(c is None or not c.nonce for c in claims), "every claim given up"

    # The next start: the same database, a new runner; every operation continues from its step.
    handles = {name: ClusterHandle(name, c, SimulatedPoolProvider(c)) for name, c in clusters.items()}
    second = new_operations(Store(tmp_path / "fleet-0.db"), handles, {}, clock, settings=settings)
    try:
        assert sorted(second.runner.resume_all()) == sorted(ids)
        wait_until(lambda: second.runner.load().waiting == 15, "15 waiting again after the restart")
        assert second.runner.load().queued == 5
        resumed = [r for i in ids for r in second.store.journal_rows(i) if r.event == "resumed"]
        assert len(resumed) == 15, "each admitted operation journaled once as resumed"
    finally:
        second.runner.stop()

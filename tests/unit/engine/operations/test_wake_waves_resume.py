"""A wake in waves through the real Operations, runner and SQLite, on the in-memory cluster.

Covers: the pools wake wave by wave (one resize per wave, in the configured order, each after the
wave before it is Ready); a runner stopped while a wave waits persists that wave, and the runner
that resumes the operation carries on in the same wave (nothing resized twice, the waves as decided
at the start, although the configuration changed in between), then wakes the next.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.domain.wake_waves import WakeWaves, WaveSpec
from engine.kube.fake import FakeCluster
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.base import POOL_LABEL, Pool
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store

SETTINGS = RunnerSettings(workers=1, ready_timeout=timedelta(minutes=10))


class HeldPools(SimulatedPoolProvider):
    """Simulated pools whose `slow` pool comes back not Ready; the first look at it afterwards
    waits until the test lets it go (so the test can stop the runner right there)."""

    def __init__(self, cluster: FakeCluster, slow: str) -> None:
        super().__init__(cluster)
        self.slow = slow
        self.resized: list[str] = []
        self.looking = threading.Event()
        self.go_on = threading.Event()
        self._armed = False

    def set_size(self, pool: str, size: int) -> None:
        super().set_size(pool, size)
        self.resized.append(pool)
        if pool == self.slow:
            for node in self.cluster.list_nodes():
                if node.labels.get(POOL_LABEL) == pool:
                    self.cluster.set_node_ready(node.name, "False")
            self._armed = True

    def get_pool(self, name: str) -> Pool:
        if name == self.slow and self._armed:
            self._armed = False
            self.looking.set()
            assert self.go_on.wait(10), "the test did not let the look go on"
        return super().get_pool(name)


def _request(kind: OpKind) -> OperationRequest:
    return OperationRequest(kind=kind, target=Target(cluster="dev"), requested_by="cli:alice")


def test_a_wake_stopped_mid_wave_resumes_in_that_wave(tmp_path: Path) -> None:
    cluster = FakeCluster()
    for pool, count in (("system", 2), ("data", 1), ("apps", 1)):
        for i in range(count):
            cluster.add_node(f"{pool}-{i}", labels={POOL_LABEL: pool})
    pools = HeldPools(cluster, slow="data")
    waves = WakeWaves((WaveSpec(("system",)), WaveSpec(("data",)), WaveSpec(("apps",))))
    handle = ClusterHandle("dev", cluster, pools, wake_waves=waves)
    db = tmp_path / "db.sqlite"
    ops = new_operations(Store(db), {"dev": handle}, {}, cluster.clock, settings=SETTINGS)
    try:
        out = ops.request(_request(OpKind.ZERO))
        assert out.ok, out.reply
        assert ops.runner.wait_idle(20)
        out = ops.request(_request(OpKind.WAKE))
        assert out.ok and out.operation is not None, out.reply
        assert pools.looking.wait(20), "wave 2 never looked at its nodes"
        ops.runner.stop(timeout=0)  # the look under way ends, is persisted, and the runner stops
        pools.go_on.set()
        assert ops.runner.wait_idle(20)
    finally:
        ops.runner.stop()
    stopped = ops.get(out.operation.id)
    assert stopped is not None and stopped.state is OpState.RUNNING
    assert stopped.step == "wait_ready" and stopped.progress.wake.wave == 1
    assert [w.outcome for w in stopped.progress.wake.waves] == ["ready", "", ""]
    assert stopped.progress.wake.waves[1].started_at is not None
    assert stopped.progress.wake.waves[2].started_at is None
    assert pools.resized == ["system", "data"], "wave 3 waits for wave 2"

    cluster.set_node_ready("data-0", "True")
    # A changed configuration applies to the next wake, not to this one.
    changed = replace(handle, wake_waves=WakeWaves((WaveSpec(("apps", "data", "system")),)))
    resumed = new_operations(Store(db), {"dev": changed}, {}, cluster.clock, settings=SETTINGS)
    try:
        assert resumed.runner.resume_all() == [out.operation.id]
        assert resumed.runner.wait_idle(20)
    finally:
        resumed.runner.stop()
    woken = resumed.get(out.operation.id)
    assert woken is not None and woken.state is OpState.SUCCEEDED, woken and woken.error
    assert pools.resized == ["system", "data", "apps"], "nothing resized twice, in the waves of the start"
    assert [w.pools for w in woken.progress.wake.waves] == [("system",), ("data",), ("apps",)]
    assert [w.outcome for w in woken.progress.wake.waves] == ["ready", "ready", "ready"]
    assert woken.summary is not None and woken.summary.nodes_ready == (4, 4)
    journal = [(r.step, r.event) for r in resumed.store.journal_rows(out.operation.id)]
    assert ("wait_ready", "resumed") in journal
    assert [s for s, e in journal if s == "resize"] == ["resize", "resize", "resize"]

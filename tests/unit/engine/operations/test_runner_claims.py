"""One runner per operation, fencing, and a database that fails while an operation runs.

Real `Operations` and a real SQLite file shared by two `Operations` (as two processes share it),
each with its own runner identity; the in-memory cluster and virtual time. The processes
themselves (`scalebot zero` and `scalebot resume` on the real control plane) are in
tests/reliability/test_runner_claims.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.runtime.health import runner_healthy
from engine.domain.clock import FakeClock
from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations.runner import CLAIM_TTL_SECONDS, ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.base import StoreError
from engine.store.claims import ClaimHeld, RunnerId
from engine.store.database import Store

A = RunnerId(owner="scalebot-a", host="host-a", pid=101, nonce="a")
B = RunnerId(owner="scalebot-b", host="host-b", pid=202, nonce="b")


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    for pool, count in (("web", 2), ("batch", 1)):
        for i in range(count):
            c.add_node(f"{pool}-{i}", labels={"scalebot.io/pool": pool})
    c.add_pod("shop", "web-0", node="web-0", controller_kind="ReplicaSet", controller_name="web", grace=10)
    return c


def _ops(cluster: FakeCluster, db: Path, me: RunnerId, clock: FakeClock | None = None) -> Operations:
    assert cluster.clock is not None
    handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
    ops = new_operations(
        Store(db), {"dev": handle}, {}, clock or cluster.clock, settings=RunnerSettings(workers=2)
    )
    ops.runner.identity = me
    return ops


@pytest.fixture
def running(cluster: FakeCluster, tmp_path: Path) -> Iterator[tuple[Operations, str, threading.Event]]:
    """Runner A holds a zero-scale of pool web, paused right after its first persisted step."""
    a = _ops(cluster, tmp_path / "scalebot.db", A)
    paused, release = threading.Event(), threading.Event()

    def hold(event: ProgressEvent) -> None:
        if event.operation.step == "cordon" and not paused.is_set():
            paused.set()
            release.wait(30)

    a.subscribe(hold)
    outcome = a.request(
        OperationRequest(kind=OpKind.ZERO, target=Target(cluster="dev", pools=("web",)), requested_by="cli:x")
    )
    assert outcome.ok and outcome.operation is not None, outcome.reply
    assert paused.wait(10), "runner A reached its first step boundary"
    try:
        yield a, outcome.operation.id, release
    finally:
        release.set()
        a.runner.stop()


def _runners(store: Store, op_id: str) -> list[str]:
    return [row.runner for row in store.journal_rows(op_id)]


def test_a_second_runner_is_refused_while_the_first_holds_the_operation(
    cluster: FakeCluster, tmp_path: Path, running: tuple[Operations, str, threading.Event]
) -> None:
    a, op_id, release = running
    b = _ops(cluster, tmp_path / "scalebot.db", B)
    try:
        with pytest.raises(ClaimHeld, match=r"being run by scalebot-a \(pid 101 on host-a"):
            b.resume()
        assert not b.runner.is_running(op_id)
        release.set()
        assert a.runner.wait_idle(10)
    finally:
        b.runner.stop()
    op = a.get(op_id)
    assert op is not None and op.state is OpState.SUCCEEDED
    runners = _runners(a.store, op_id)
    assert runners and set(runners) == {"scalebot-a"}, "every journal row is runner A's"


def test_a_runner_whose_claim_was_taken_over_stops_and_writes_nothing(
    cluster: FakeCluster, tmp_path: Path, running: tuple[Operations, str, threading.Event]
) -> None:
    a, op_id, release = running
    assert cluster.clock is not None
    # A lost the Lease (it stops renewing its claims); once the claim lapses, B takes over.
    a.runner.may_act = lambda: False
    cluster.clock.advance(CLAIM_TTL_SECONDS + 1)
    b = _ops(cluster, tmp_path / "scalebot.db", B)
    try:
        assert b.resume() == [op_id]
        assert b.runner.wait_idle(10)
        rows_before = a.store.journal_rows(op_id)
        release.set()  # A wakes up at its step boundary
        assert a.runner.wait_idle(10)
    finally:
        b.runner.stop()
    assert "claimed by another runner" in a.runner.handed_over[op_id]
    assert a.store.journal_rows(op_id) == rows_before, "A wrote nothing after losing the claim"
    runners = _runners(a.store, op_id)
    resumed = runners.index("scalebot-b")
    assert set(runners[:resumed]) == {"scalebot-a"} and set(runners[resumed:]) == {"scalebot-b"}
    op = a.get(op_id)
    assert op is not None and op.state is OpState.SUCCEEDED


def test_a_database_that_fails_mid_operation_stops_it_in_a_known_state(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _ops(cluster, tmp_path / "scalebot.db", A)
    writes = {"n": 0}
    real = ops.store.save_progress

    def full_after_one(op: object) -> bool:
        writes["n"] += 1
        if writes["n"] > 1:
            raise StoreError("cannot write the database: database or disk is full")
        return real(op)  # type: ignore[arg-type]

    monkeypatch.setattr(ops.store, "save_progress", full_after_one)
    check = runner_healthy(lambda: dict(ops.runner.faults))
    check()  # healthy before
    try:
        outcome = ops.request(
            OperationRequest(
                kind=OpKind.ZERO, target=Target(cluster="dev", pools=("web",)), requested_by="cli:x"
            )
        )
        assert outcome.operation is not None
        op_id = outcome.operation.id
        assert ops.runner.wait_idle(10), "the runner stopped instead of dying with the error"
    finally:
        ops.runner.stop()
    op = ops.get(op_id)
    assert op is not None and (op.state, op.step) == (OpState.RUNNING, "cordon"), "its last saved step"
    rows = ops.store.journal_rows(op_id)
    assert [r.step for r in rows if r.event == "running"] == ["cordon"], "no journal row without its step"
    assert "stopped at cordon" in ops.runner.faults[op_id] and "disk is full" in ops.runner.faults[op_id]
    with pytest.raises(RuntimeError, match=f"operation {op_id} stopped at cordon"):
        check()
    # The locks are still held, so nothing else starts on that pool until the operation resumes.
    again = ops.request(
        OperationRequest(kind=OpKind.ZERO, target=Target(cluster="dev", pools=("web",)), requested_by="cli:y")
    )
    assert not again.ok and op_id in again.reply


def test_a_cancel_from_another_process_is_refused_while_a_runner_holds_the_operation(
    cluster: FakeCluster, tmp_path: Path, running: tuple[Operations, str, threading.Event]
) -> None:
    a, op_id, release = running
    b = _ops(cluster, tmp_path / "scalebot.db", B)
    try:
        outcome = b.cancel(op_id, by="cli:x")
        assert not outcome.ok and "is being run by scalebot-a (pid 101 on host-a)" in outcome.reply
        op = b.get(op_id)
        assert op is not None and op.state is OpState.RUNNING, "nothing written over the running one"
        release.set()
        assert a.runner.wait_idle(10)
    finally:
        b.runner.stop()
    op = a.get(op_id)
    assert op is not None and op.state is OpState.SUCCEEDED
    assert [r.action for r in a.store.audit_rows(op_id=op_id)].count("refused_cancel") == 1

"""The process-wide eviction pool: each lane within its own limit, the pool within its cap, the
lanes served in turn (real threads; calls held on events, no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from engine.drain.concurrency import FairExecutor


class Held:
    """Calls that wait for `release`, counting how many are inside at once per lane."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.order: list[str] = []
        self.arrived = threading.Condition(self._lock)

    def call(self, lane: str) -> Callable[[], str]:
        def run() -> str:
            with self._lock:
                self.inside[lane] = self.inside.get(lane, 0) + 1
                self.peak[lane] = max(self.peak.get(lane, 0), self.inside[lane])
                self.order.append(lane)
                self.arrived.notify_all()
            try:
                assert self.release.wait(10)
            finally:
                with self._lock:
                    self.inside[lane] -= 1
            return lane

        return run

    def wait_inside(self, lane: str, count: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: self.inside.get(lane, 0) >= count, timeout=10)


@pytest.fixture
def pool() -> Iterator[FairExecutor]:
    executor = FairExecutor(6, name="test-evict")
    yield executor
    executor.shutdown(wait=True)


def test_a_lane_full_of_held_calls_leaves_the_other_lanes_their_workers(pool: FairExecutor) -> None:
    held = Held()
    first = pool.lane("first", lambda: 4)
    second = pool.lane("second", lambda: 4)
    try:
        slow = [first.submit(held.call("first")) for _ in range(100)]
        held.wait_inside("first", 4)
        quick = [second.submit(held.call("second")) for _ in range(10)]
        held.wait_inside("second", 2)  # the two workers the cap leaves, at once
        assert held.inside["first"] == 4, "the first lane stays within its own limit"
        assert held.inside["second"] == 2, "the pool stays within its cap"
    finally:
        held.release.set()
    assert [f.result(timeout=10) for f in quick] == ["second"] * 10
    assert [f.result(timeout=10) for f in slow] == ["first"] * 100
    assert held.peak["first"] == 4 and held.peak["second"] <= 4
    assert pool.peak_in_flight == 6 and pool.threads <= 6


def test_lanes_with_calls_waiting_are_served_in_turn() -> None:
    pool = FairExecutor(1, name="test-evict")
    gate = threading.Event()
    try:
        blocker = pool.lane("blocker", lambda: 1).submit(gate.wait, 10)
        order: list[str] = []
        a, b = pool.lane("a", lambda: 4), pool.lane("b", lambda: 4)
        futures = [a.submit(order.append, "a") for _ in range(3)]
        futures += [b.submit(order.append, "b") for _ in range(3)]
        gate.set()
        assert blocker.result(timeout=10)
        for f in futures:
            f.result(timeout=10)
        assert order == ["a", "b", "a", "b", "a", "b"], "one call per lane per turn"
    finally:
        pool.shutdown(wait=True)


def test_a_limit_that_grows_admits_more_at_the_next_answer(pool: FairExecutor) -> None:
    held = Held()
    limit = [1]
    lane = pool.lane("grows", lambda: limit[0])
    try:
        first = lane.submit(held.call("grows"))
        rest = [lane.submit(held.call("grows")) for _ in range(5)]
        held.wait_inside("grows", 1)
        limit[0] = 3
        held.release.set()
        assert first.result(timeout=10) == "grows"
        assert [f.result(timeout=10) for f in rest] == ["grows"] * 5
    finally:
        held.release.set()
    assert held.peak["grows"] <= 3


def test_a_call_submitted_after_shutdown_still_runs() -> None:
    pool = FairExecutor(2, name="test-evict")
    pool.shutdown(wait=True)
    assert pool.lane("late", lambda: 2).submit(lambda: 42).result(timeout=10) == 42
    pool.shutdown(wait=True)

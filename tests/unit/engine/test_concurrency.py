"""Adaptive eviction concurrency: AIMD on answers, and the gate that applies it (fake clock)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine.concurrency import AdaptiveGate, AimdController, AimdSettings
from engine.kube import errors

SETTINGS = AimdSettings(initial=4, minimum=2, maximum=10, window=4)


def feed(controller: AimdController, answers: int, latency: float, *, throttled: bool = False) -> None:
    for _ in range(answers):
        controller.record(latency, throttled=throttled)


def test_flat_latency_grows_the_limit_by_one_per_window_up_to_the_maximum() -> None:
    c = AimdController(SETTINGS)
    feed(c, 4, 0.1)
    assert c.limit == 5
    feed(c, 5, 0.1)  # a window is at least the limit in flight
    assert c.limit == 6
    feed(c, 200, 0.1)
    assert c.limit == 10, "never above the maximum"


def test_a_throttle_halves_the_limit_once_for_the_requests_already_in_flight() -> None:
    c = AimdController(SETTINGS)
    feed(c, 4 + 5 + 6 + 7, 0.1)
    assert c.limit == 8
    c.record(0.1, throttled=True)
    assert c.limit == 4
    # The 8 answers to requests sent under the old limit, throttled too, do not cut it again.
    feed(c, 8, 0.1, throttled=True)
    assert c.limit == 4
    c.record(0.1, throttled=True)
    assert c.limit == 2
    feed(c, 4 + 4, 0.1, throttled=True)
    c.record(0.1, throttled=True)
    assert c.limit == 2, "never below the minimum"
    assert [why for why, _ in c.history].count("throttled") == 2


def test_rising_latency_shrinks_the_limit_before_any_throttle_but_not_below_the_start() -> None:
    c = AimdController(AimdSettings(initial=4, minimum=2, maximum=20, window=4))
    feed(c, 4 + 5 + 6 + 7 + 8 + 9, 0.1)
    assert c.limit == 10 and c.best_median == pytest.approx(0.1)
    feed(c, 10, 0.25)  # 2.5x the best median: requests queue at the server
    assert c.limit == 5
    assert c.history[-1] == ("latency rose", 5)
    feed(c, 10, 0.1)  # the answers already in flight under the old limit: skipped
    feed(c, 5, 0.3)
    assert c.limit == 4, "a latency rise alone stops at the starting limit"
    feed(c, 5, 0.1)  # skipped again
    c.record(0.1, throttled=True)
    assert c.limit == 2, "the server's 429 goes below it"


def test_the_ceiling_follows_the_clients_burst() -> None:
    bounded = AimdSettings(initial=8, minimum=2, maximum=64).bounded(5)
    assert (bounded.initial, bounded.minimum, bounded.maximum) == (5, 2, 5)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        AimdSettings(initial=1, minimum=2)
    with pytest.raises(ValueError):
        AimdSettings(backoff=1.0)


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_the_gate_holds_workers_to_the_limit_and_times_answers_on_its_clock() -> None:
    clock = FakeMonotonic()
    gate = AdaptiveGate(AimdController(AimdSettings(initial=3, minimum=1, maximum=3, window=3)), clock)
    release = threading.Event()
    inside = threading.Semaphore(0)

    def call() -> str:
        inside.release()
        assert release.wait(10)
        clock.advance(0.5)
        return "ok"

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(gate.run, call, lambda _: False) for _ in range(8)]
        for _ in range(3):
            assert inside.acquire(timeout=10)
        assert not inside.acquire(timeout=0.2), "a fourth call got past a limit of 3"
        release.set()
        assert [f.result(timeout=10) for f in futures] == ["ok"] * 8
    assert gate.peak_in_flight == 3


def test_the_gate_shrinks_on_throttled_answers() -> None:
    clock = FakeMonotonic()
    gate = AdaptiveGate(AimdController(AimdSettings(initial=8, minimum=2, maximum=8, window=4)), clock)
    gate.run(lambda: 429, lambda status: status == 429)
    assert gate.controller.limit == 4


def test_only_the_server_saying_it_is_busy_counts_as_overload() -> None:
    apf = errors.error_from_status(
        429, {"code": 429, "message": "Too many requests, please try again later."}
    )
    budget = errors.error_from_status(
        429,
        {
            "code": 429,
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 2 healthy pods"}]},
        },
    )
    two_budgets = errors.error_from_status(500, {"code": 500, "message": errors.MULTIPLE_PDBS_MESSAGE})
    assert apf.is_server_overload
    assert errors.error_from_status(503, {"code": 503}).is_server_overload
    assert not budget.is_server_overload
    assert not two_budgets.is_server_overload
    assert not errors.error_from_status(404, {"code": 404}).is_server_overload


def test_time_spent_in_the_clients_own_limiter_is_not_read_as_the_server_slowing_down() -> None:
    clock = FakeMonotonic()
    queued = [0.0]
    settings = AimdSettings(initial=4, minimum=2, maximum=8, window=4)
    gate = AdaptiveGate(AimdController(settings), clock, queued=lambda: queued[0])

    def answered_after(server: float, limiter: float) -> None:
        def call() -> bool:
            queued[0] = limiter
            clock.advance(limiter + server)
            return False

        gate.run(call, lambda throttled: throttled)

    for _ in range(4):
        answered_after(0.1, 0.0)  # the burst: no wait in the limiter
    assert gate.controller.limit == 5
    for _ in range(5):
        answered_after(0.1, 0.5)  # the bucket is empty: 0.5 s in the limiter, the server as fast
    assert gate.controller.limit == 6, gate.controller.history
    assert gate.controller.best_median == pytest.approx(0.1)

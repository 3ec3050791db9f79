"""Adaptive eviction concurrency: AIMD on answers, and the gate that applies it (fake clock)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine.domain.settings import AimdSettings
from engine.drain.concurrency import AdaptiveGate, AimdController
from engine.kube import errors

SETTINGS = AimdSettings(initial=4, minimum=2, maximum=10, window=4, slow_start=False)


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
    c = AimdController(AimdSettings(initial=4, minimum=2, maximum=20, window=4, slow_start=False))
    feed(c, 4 + 5 + 6 + 7 + 8 + 9, 0.1)
    assert c.limit == 10 and c.baseline == pytest.approx(0.1)
    feed(c, 10, 0.35)  # 3.5x the best median: requests queue at the server
    assert c.limit == 5
    assert c.history[-1] == ("latency rose", 5)
    feed(c, 10, 0.1)  # the answers already in flight under the old limit: skipped
    feed(c, 5, 0.35)
    assert c.limit == 4, "a latency rise alone stops at the starting limit"
    feed(c, 5, 0.1)  # skipped again
    c.record(0.1, throttled=True)
    assert c.limit == 2, "the server's 429 goes below it"


def test_slow_start_doubles_per_flat_window_until_the_first_decrease_then_adds_one() -> None:
    c = AimdController(AimdSettings(initial=4, minimum=2, maximum=64, window=4))
    feed(c, 4, 0.1)
    assert c.limit == 8
    feed(c, 8, 0.1)  # a window is at least the limit in flight
    assert c.limit == 16
    feed(c, 16, 0.4)  # 4x the best median: queueing, so back to additive increase from half
    assert c.limit == 8 and c.history[-1] == ("latency rose", 8)
    feed(c, 16, 0.1)  # the answers sent under 16: skipped
    feed(c, 8, 0.1)
    assert c.limit == 9 and c.history[-1] == ("latency flat", 9)
    assert [why for why, _ in c.history] == ["slow start", "slow start", "latency rose", "latency flat"]


def test_slow_start_stops_at_the_maximum_and_a_throttle_ends_it() -> None:
    c = AimdController(AimdSettings(initial=16, minimum=2, maximum=40, window=4))
    feed(c, 16 + 32, 0.1)
    assert c.limit == 40, "doubling never passes the maximum"
    d = AimdController(AimdSettings(initial=16, minimum=2, maximum=64, window=4))
    d.record(0.1, throttled=True)
    assert d.limit == 8
    feed(d, 16, 0.1)  # skipped: in flight under 16
    feed(d, 8, 0.1)
    assert d.limit == 9, "after a throttle the limit grows by one, never doubles again"


def test_latency_that_rises_and_stays_flat_becomes_the_baseline_and_the_limit_grows_again() -> None:
    """The server gets busier for reasons of its own (the kubelets deleting the evicted pods): the
    first window at the new latency cuts the limit, but cutting does not bring the latency down,
    and once the idle windows are out of the horizon it grows again, not held at its floor."""
    c = AimdController(
        AimdSettings(initial=4, minimum=2, maximum=20, window=4, slow_start=False, baseline_windows=3)
    )
    feed(c, 4, 0.1)
    assert c.limit == 5
    feed(c, 5, 0.4)
    assert c.limit == 4 and c.history[-1] == ("latency rose", 4)
    feed(c, 100, 0.4)
    assert c.limit >= 8, c.history
    assert c.baseline == pytest.approx(0.4)
    assert c.history[-1] == ("latency flat", c.limit)


def test_latency_that_rises_with_the_limit_still_cuts_it_once_the_baseline_has_moved() -> None:
    """Our own queue: after the baseline followed a busier server, a further rise as the limit
    grows is judged against the new baseline and cuts it again."""
    c = AimdController(
        AimdSettings(initial=4, minimum=2, maximum=20, window=4, slow_start=False, baseline_windows=3)
    )
    feed(c, 4, 0.1)
    feed(c, 5 + 100, 0.4)
    grown = c.limit
    assert grown > 4
    feed(c, grown, 1.6)  # 4x the new baseline
    assert c.limit == max(4, grown // 2) and c.history[-1][0] == "latency rose"


def test_the_default_horizon_remembers_the_unloaded_latency_through_slow_start() -> None:
    """Slow start reaches 64 from 16 in two windows: the baseline from before the climb must
    still be there when the queue it built shows."""
    c = AimdController(AimdSettings(initial=16, minimum=2, maximum=64))
    feed(c, 16, 0.1)
    feed(c, 32, 0.15)
    assert c.limit == 64
    feed(c, 64, 0.35)
    assert c.limit == 32 and c.history[-1] == ("latency rose", 32)


def test_the_ceiling_follows_the_clients_burst() -> None:
    bounded = AimdSettings(initial=8, minimum=2, maximum=64).bounded(5)
    assert (bounded.initial, bounded.minimum, bounded.maximum) == (5, 2, 5)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        AimdSettings(initial=1, minimum=2)
    with pytest.raises(ValueError):
        AimdSettings(backoff=1.0)
    with pytest.raises(ValueError):
        AimdSettings(baseline_windows=0)


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


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait (bounded) for another thread to reach a state the gate reports."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        threading.Event().wait(0.001)


def test_the_gate_lets_callers_in_in_the_order_they_arrived() -> None:
    """A caller that has just left must not take the free place back ahead of those waiting:
    a pool worker does exactly that with its next task, and the first calls parked in the gate
    would then be answered last."""
    gate = AdaptiveGate(
        AimdController(AimdSettings(initial=1, minimum=1, maximum=1, window=100)), time.monotonic
    )
    entered: list[str] = []
    release_first = threading.Event()

    def call(name: str, wait: threading.Event | None = None) -> bool:
        entered.append(name)
        if wait is not None:
            assert wait.wait(10)
        return False

    def first_worker() -> None:
        gate.run(lambda: call("first", release_first), lambda _: False)
        gate.run(lambda: call("first, again"), lambda _: False)  # straight back, as a pool worker

    threads = [threading.Thread(target=first_worker)]
    threads[0].start()
    _until(lambda: entered == ["first"])
    for i in range(4):
        threads.append(
            threading.Thread(target=gate.run, args=(lambda i=i: call(f"waiter {i}"), lambda _: False))
        )
        threads[-1].start()
        _until(lambda i=i: gate.waiting == i + 1)  # arrived in this order
    release_first.set()
    for thread in threads:
        thread.join(10)
    assert entered == ["first", "waiter 0", "waiter 1", "waiter 2", "waiter 3", "first, again"]
    assert gate.waiting == 0


def test_each_parked_caller_is_woken_once_the_place_is_handed_to_the_next_in_line_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A condition notified to all wakes every parked worker on each admission and answer, each
    to find it is not its turn (quadratic in the callers parked): each must sleep once, and be
    woken when its place is ready."""
    sleeps: collections.Counter[str] = collections.Counter()
    count_lock = threading.Lock()
    real_wait = threading.Condition.wait

    def counting_wait(self: threading.Condition, timeout: float | None = None) -> bool:
        name = threading.current_thread().name
        if name.startswith("parked-"):
            with count_lock:
                sleeps[name] += 1
        return real_wait(self, timeout)

    monkeypatch.setattr(threading.Condition, "wait", counting_wait)
    gate = AdaptiveGate(
        AimdController(AimdSettings(initial=1, minimum=1, maximum=1, window=1000)), time.monotonic
    )
    release = threading.Event()
    entered: list[str] = []
    holder = threading.Thread(target=gate.run, args=(lambda: release.wait(10), lambda _: False))
    holder.start()
    _until(lambda: gate.peak_in_flight == 1)
    parked = [
        threading.Thread(
            target=gate.run,
            args=(lambda i=i: entered.append(f"parked-{i}"), lambda _: False),
            name=f"parked-{i}",
        )
        for i in range(20)
    ]
    try:
        for i, thread in enumerate(parked):
            thread.start()
            _until(lambda i=i: gate.waiting == i + 1)
        _until(lambda: len(sleeps) == 20)  # every one of them asleep
        release.set()
    finally:
        release.set()
        holder.join(10)
        for thread in parked:
            thread.join(10)
    assert entered == [f"parked-{i}" for i in range(20)]
    assert sum(sleeps.values()) == 20, f"woken {sum(sleeps.values())} times for 20 admissions"
    assert gate.peak_in_flight == 1


def test_a_shrinking_limit_admits_no_one_until_answers_bring_it_below_a_growing_one_admits_all_that_fit() -> (
    None
):
    gate = AdaptiveGate(
        AimdController(AimdSettings(initial=4, minimum=1, maximum=8, window=1000, slow_start=False)),
        time.monotonic,
    )
    lock = threading.Lock()
    inside: set[str] = set()
    release = {
        name: threading.Event()
        for name in [f"first-{i}" for i in range(4)] + [f"parked-{i}" for i in range(4)]
    }

    def call(name: str) -> bool:
        with lock:
            inside.add(name)
        assert release[name].wait(10)
        with lock:
            inside.discard(name)
        return False

    def inside_now() -> set[str]:
        with lock:
            return set(inside)

    threads = {
        name: threading.Thread(target=gate.run, args=(lambda name=name: call(name), lambda _: False))
        for name in release
    }
    try:
        for i in range(4):
            threads[f"first-{i}"].start()
        _until(lambda: len(inside_now()) == 4)
        for i in range(4):
            threads[f"parked-{i}"].start()
            _until(lambda i=i: gate.waiting == i + 1)
        gate.controller.limit = 2
        for i in range(2):
            release[f"first-{i}"].set()
            threads[f"first-{i}"].join(10)
            assert inside_now() == {f"first-{j}" for j in range(i + 1, 4)}, "admitted above the new limit"
            assert gate.waiting == 4
        release["first-2"].set()
        threads["first-2"].join(10)
        _until(lambda: "parked-0" in inside_now())
        assert inside_now() == {"first-3", "parked-0"} and gate.waiting == 3
        gate.controller.limit = 5
        release["first-3"].set()
        threads["first-3"].join(10)
        _until(lambda: len(inside_now()) == 4)
        assert inside_now() == {f"parked-{i}" for i in range(4)} and gate.waiting == 0
    finally:
        for event in release.values():
            event.set()
        for thread in threads.values():
            if thread.ident is not None:
                thread.join(10)
    assert gate.peak_in_flight == 4


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
    settings = AimdSettings(initial=4, minimum=2, maximum=8, window=4, slow_start=False)
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
    assert gate.controller.baseline == pytest.approx(0.1)

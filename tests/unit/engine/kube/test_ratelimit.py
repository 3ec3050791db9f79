"""TokenBucket on virtual time: burst, refill, reservation order, thread safety. Nothing sleeps."""

from __future__ import annotations

import threading

import pytest

from engine.kube.ratelimit import TokenBucket


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def bucket(t: VirtualTime, *, rate: float = 10.0, burst: int = 3) -> TokenBucket:
    return TokenBucket(rate=rate, burst=burst, clock=t.clock, sleep=t.sleep)


def test_a_full_bucket_serves_the_burst_without_waiting() -> None:
    t = VirtualTime()
    b = bucket(t)
    assert [b.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert t.slept == []


def test_callers_beyond_the_burst_wait_in_arrival_order() -> None:
    t = VirtualTime()
    b = bucket(t, rate=10.0, burst=2)
    delays = [b.reserve() for _ in range(5)]
    assert delays == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])


def test_acquire_sleeps_through_the_injected_sleep() -> None:
    t = VirtualTime()
    b = bucket(t, rate=4.0, burst=1)
    b.acquire()
    assert b.acquire() == pytest.approx(0.25)
    assert t.slept == pytest.approx([0.25])


def test_tokens_refill_at_the_rate_and_never_beyond_the_burst() -> None:
    t = VirtualTime()
    b = bucket(t, rate=10.0, burst=3)
    for _ in range(3):
        b.acquire()
    assert b.available == pytest.approx(0.0)
    t.now += 0.15
    assert b.available == pytest.approx(1.5)
    t.now += 100.0
    assert b.available == pytest.approx(3.0)


def test_try_acquire_takes_nothing_when_empty() -> None:
    t = VirtualTime()
    b = bucket(t, rate=1.0, burst=1)
    assert b.try_acquire()
    assert not b.try_acquire()
    assert b.available == pytest.approx(0.0)
    t.now += 1.0
    assert b.try_acquire()


def test_a_clock_stepping_backwards_does_not_drain_the_bucket() -> None:
    t = VirtualTime()
    t.now = 50.0
    b = bucket(t, rate=10.0, burst=2)
    b.acquire()
    t.now = 10.0
    assert b.available == pytest.approx(1.0)


def test_invalid_settings_are_rejected() -> None:
    t = VirtualTime()
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(rate=0, burst=1, clock=t.clock)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(rate=1, burst=0, clock=t.clock)
    with pytest.raises(ValueError, match="cannot take"):
        bucket(t, burst=2).reserve(3)


def test_concurrent_reservations_each_get_a_distinct_slot() -> None:
    t = VirtualTime()
    b = bucket(t, rate=100.0, burst=5)
    threads_count = 40
    start = threading.Barrier(threads_count)
    delays: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        start.wait()
        delay = b.reserve()
        with lock:
            delays.append(delay)

    threads = [threading.Thread(target=worker) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    expected = [0.0] * 5 + [k / 100.0 for k in range(1, threads_count - 5 + 1)]
    assert sorted(delays) == pytest.approx(expected)

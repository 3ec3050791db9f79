"""How many evictions to keep in flight: additive increase, multiplicative decrease (AIMD).

A fixed worker count is either too few (the API server could take more) or too many (429s from
API Priority and Fairness, 5xx, latency climbing as requests queue server-side). Until its first
decrease the controller doubles the limit each time a window of answers comes back with the
latency flat (TCP's slow start: growing by one from 16 to 64 would take some 1,900 answers, most of
a 100-node drain); after it, it grows the limit by one per such window, and halves
it on a 429 or a 5xx (down to `minimum`), or when a window's median latency rises well above the
baseline (the queueing signal TCP Vegas and gRPC's adaptive limiters use; down to
`initial` only, so a noisy machine never leaves fewer in flight than a fixed pool would). After
a decrease it waits one window before judging again, so the answers to requests sent under the
old limit do not cut it twice. It never exceeds `maximum`, which the caller bounds by the
client's own rate limit (burst): more requests in flight than the token bucket can release at
once only wait in the bucket.

The baseline is the lowest window median over the last `baseline_windows` judged windows (BBR's
min-RTT filter over a recent horizon; Netflix's Gradient2 limiter lets its long-term latency drift
the same way), not the lowest ever seen: the lowest ever is the idle server at the start, and once
the server is busier for reasons of its own (the kubelets deleting the evicted pods, other
clients) every window would read as queueing and hold the limit at its floor for the rest of the
drain, although cutting it did not bring the latency down. With a recent horizon, latency that
rises and stays flat becomes the new baseline after `baseline_windows` windows and the limit grows
again; latency that rises with the limit (our own queue) still cuts it, window after window.

`AimdController` is pure: the caller reports each answer (`record`) with the time it took, and
`limit` is the decision. `AdaptiveGate` applies it to a pool of workers and times the answers on
an injected monotonic clock.

`FairExecutor` is the process-wide pool a fleet's evictions (and cordons, uncordons, force
deletions) share: `max_workers` calls in flight at most over every cluster, and one `Lane` per
cluster that admits its calls up to its own limit (a fixed one, or its `AdaptiveGate`'s AIMD
limit). A worker takes the next call round-robin over the lanes that may send one more, so a
cluster whose evictions are slow (a PodDisruptionBudget, a struggling API server) holds at most
its own limit of workers and never stands in front of another cluster's calls: no worker ever
parks in a gate.
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from engine.domain.settings import AimdSettings

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(slots=True)
class AimdController:
    """Not thread-safe on its own: `engine.drain.passes`'s gate calls it under its lock."""

    settings: AimdSettings = field(default_factory=AimdSettings)
    limit: int = 0
    baseline: float | None = None
    """The lowest median of the recent judged windows: the latency of the server unloaded by us."""
    history: list[tuple[str, int]] = field(default_factory=list)
    """(why, new limit) for every change, for reports and tests."""
    _latencies: list[float] = field(default_factory=list)
    _recent_medians: deque[float] = field(default_factory=deque)
    _skip: int = 0
    _slow_start: bool = True

    def __post_init__(self) -> None:
        if self.limit == 0:
            self.limit = self.settings.initial
        self._slow_start = self.settings.slow_start

    def record(self, latency_seconds: float, *, throttled: bool) -> int:
        """One answer: its latency and whether it was a 429 or 5xx. Returns the new limit."""
        if self._skip > 0:
            # Sent before the last decrease: it says nothing about the new limit.
            self._skip -= 1
            return self.limit
        if throttled:
            self._decrease("throttled")
            return self.limit
        self._latencies.append(latency_seconds)
        if len(self._latencies) < max(self.settings.window, self.limit):
            return self.limit
        median = statistics.median(self._latencies)
        self._latencies.clear()
        self._recent_medians.append(median)
        while len(self._recent_medians) > self.settings.baseline_windows:
            self._recent_medians.popleft()
        self.baseline = min(self._recent_medians)
        if median > self.baseline * self.settings.latency_rise:
            self._decrease("latency rose")
        elif self.limit < self.settings.maximum:
            if self._slow_start:
                self.limit = min(self.settings.maximum, self.limit * 2)
                self.history.append(("slow start", self.limit))
            else:
                self.limit += 1
                self.history.append(("latency flat", self.limit))
        return self.limit

    def _decrease(self, why: str) -> None:
        # A latency rise alone never takes the limit below where it started: on a shared machine
        # the latency is noisy, and the starting point is what a fixed pool gave before. Only the
        # server saying it is overloaded (429/5xx) takes it further down, to the minimum.
        floor = self.settings.minimum if why == "throttled" else self.settings.initial
        new = max(floor, min(self.limit, int(self.limit * self.settings.backoff)))
        self._slow_start = False
        self._latencies.clear()
        # The requests still in flight were sent under the old limit: skip their answers.
        self._skip = self.limit
        if new != self.limit:
            self.limit = new
            self.history.append((why, new))


class AdaptiveGate:
    """At most `controller.limit` callers inside at once; each one's answer time feeds the controller.

    The worker pool behind it is sized for the maximum; the gate holds the extra workers back, and
    lets them in in the order they arrived. Without that order a worker that has just left would
    take the free place straight back with its next task (it holds the lock first), and the calls
    parked in the gate when the limit was lower would wait until the whole pass is sent: their
    answers come last, and a pass's progress (answers in order) would show nothing until the end.

    Each parked caller waits on its own event, in a FIFO queue, and whoever frees a place (an
    answer) or raises the limit hands the place over: it counts the next waiter in and wakes that
    one only. One condition notified to all would wake every parked worker on each admission and
    answer, each to find it is not its turn (some 1.8 ms of CPU per eviction at a limit of 16,
    against 0.2 ms for a hand-off). A limit that shrinks admits no one until enough answers are
    in; one that grows admits as many waiters as now fit.

    `monotonic` is the clock the answer times come from (a fake one in tests). `queued()` is how
    long the call just made on this thread waited for the client's own rate limiter: it is taken
    out of the answer time, or the limiter's queue (which grows with the limit) would read as the
    server slowing down and cut the limit until the client could no longer use its own rate.
    """

    def __init__(
        self,
        controller: AimdController,
        monotonic: Callable[[], float],
        queued: Callable[[], float] | None = None,
        *,
        admits: bool = True,
    ) -> None:
        """`admits=False`: the executor in front of the gate already admits by its `limit` (a
        `FairExecutor` lane); `run` then only times the answer and feeds the controller."""
        self.controller = controller
        self._monotonic = monotonic
        self._queued = queued
        self._admits = admits
        self._lock = threading.Lock()
        self._in_flight = 0
        self._parked: deque[threading.Event] = deque()
        """Callers waiting for a place, in the order they arrived; each is woken by its own event."""
        self.peak_in_flight = 0

    @property
    def waiting(self) -> int:
        """Callers arrived and not yet let in."""
        with self._lock:
            return len(self._parked)

    @property
    def limit(self) -> int:
        """How many calls may be in flight now (the controller's decision)."""
        with self._lock:
            return self.controller.limit

    def run(self, call: Callable[[], T], throttled: Callable[[T], bool]) -> T:
        with self._lock:
            turn: threading.Event | None = None
            if self._admits and (self._parked or self._in_flight >= self.controller.limit):
                turn = threading.Event()
                self._parked.append(turn)
            else:
                self._enter()
        if turn is not None:
            # Counted in by whoever set the event (`_hand_over`): the place is already ours.
            turn.wait()
        started = self._monotonic()
        answer: T | None = None
        try:
            answer = call()
            return answer
        finally:
            latency = self._monotonic() - started - (self._queued() if self._queued is not None else 0.0)
            with self._lock:
                self._in_flight -= 1
                self.controller.record(latency, throttled=answer is not None and throttled(answer))
                self._hand_over()

    def _enter(self) -> None:
        self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)

    def _hand_over(self) -> None:
        """Under the lock: let in, in arrival order, as many parked callers as the limit now allows."""
        while self._parked and self._in_flight < self.controller.limit:
            self._enter()
            self._parked.popleft().set()


class FairExecutor:
    """At most `max_workers` calls in flight over every lane; each lane within its own limit.

    Threads are started as calls arrive, up to `max_workers`, and stay for the next ones (as a
    `ThreadPoolExecutor`'s do). A free worker serves the lanes in turn (round-robin over those with
    a call waiting and room under their limit), one call per turn: a lane with thousands of
    evictions queued gets no more workers than one with ten, while both have calls waiting. A
    lane's limit is read at each admission, so an AIMD limit that grows lets more in at the next
    answer and one that shrinks admits nothing until enough answers are in.
    """

    def __init__(self, max_workers: int, *, name: str = "io") -> None:
        if max_workers < 1:
            raise ValueError("a FairExecutor needs at least one worker")
        self.max_workers = max_workers
        self._name = name
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._lanes: dict[Hashable, Lane] = {}
        self._turns: deque[Lane] = deque()
        """Lanes with calls waiting, in the order they are served next."""
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._waking = 0
        """Idle workers notified and not yet awake: each new call wakes a worker of its own."""
        self._shutdown = False
        self._ids = itertools.count(1)
        self.peak_in_flight = 0
        self._in_flight = 0

    def lane(self, key: Hashable, limit: Callable[[], int]) -> Lane:
        """The lane `key` (one per cluster and kind of call), created with `limit` the first time."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = Lane(self, str(key), limit)
                self._lanes[key] = lane
            return lane

    @property
    def threads(self) -> int:
        with self._lock:
            return len(self._threads)

    def shutdown(self, *, wait: bool = False) -> None:
        """The workers end once no call is left; with `wait`, this waits for them.

        Calls already queued still run (a pass under way when the process stops gets its answers,
        as with a `ThreadPoolExecutor`), and a call submitted later still runs too: a step that is
        finishing must not fail for want of a worker."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
            self._work.notify_all()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    # -- under the lock ------------------------------------------------------------------------

    def _enqueue(self, lane: Lane, future: Future[Any], call: Callable[[], Any]) -> None:
        with self._lock:
            lane._queue.append((future, call))
            if not lane._queued_for_turn:
                lane._queued_for_turn = True
                self._turns.append(lane)
            if lane.in_flight + len(lane._queue) > max(1, lane._limit()):
                return  # the lane is full: one of its own answers starts this call
            if self._idle > self._waking:
                self._waking += 1
                self._work.notify()
            elif len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{next(self._ids)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _next(self) -> tuple[Lane, Future[Any], Callable[[], Any]] | None:
        """The next call a worker may start: the first lane in turn with room under its limit."""
        for _ in range(len(self._turns)):
            lane = self._turns.popleft()
            if not lane._queue:
                lane._queued_for_turn = False
                continue
            if lane.in_flight >= max(1, lane._limit()):
                self._turns.append(lane)  # full: it keeps its place in the rotation
                continue
            future, call = lane._queue.popleft()
            if lane._queue:
                self._turns.append(lane)
            else:
                lane._queued_for_turn = False
            return lane, future, call
        return None

    def _startable(self, enough: int) -> int:
        """Calls that could start now (counted up to `enough`)."""
        count = 0
        for lane in self._turns:
            count += max(0, min(len(lane._queue), max(1, lane._limit()) - lane.in_flight))
            if count >= enough:
                break
        return count

    def _serve(self) -> None:
        while True:
            with self._lock:
                picked = self._next()
                while picked is None:
                    if self._shutdown:
                        self._threads.remove(threading.current_thread())
                        return
                    self._idle += 1
                    self._work.wait()
                    self._idle -= 1
                    self._waking = max(0, self._waking - 1)
                    picked = self._next()
                lane, future, call = picked
                lane.in_flight += 1
                self._in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(call())
                    except BaseException as exc:  # handed to whoever waits on the future
                        future.set_exception(exc)
            finally:
                with self._lock:
                    lane.in_flight -= 1
                    self._in_flight -= 1
                    # An answer frees a place (and may have raised an AIMD limit); this worker
                    # takes the next call itself, and wakes idle workers only for the calls
                    # beyond that one which may start now (a limit that grew admits several):
                    # waking every idle worker on each answer would cost more CPU than the calls.
                    spare = self._idle - self._waking
                    if spare > 0:
                        startable = self._startable(spare + 1) - 1
                        if startable > 0:
                            self._waking += min(spare, startable)
                            self._work.notify(min(spare, startable))


class Lane(Executor):
    """One cluster's (and one kind of call's) admission into a `FairExecutor`: an `Executor`."""

    def __init__(self, pool: FairExecutor, name: str, limit: Callable[[], int]) -> None:
        self.name = name
        self._pool = pool
        self._limit = limit
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._queued_for_turn = False
        self.in_flight = 0
        """Calls of this lane running now (read under the pool's lock)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        self._pool._enqueue(self, future, lambda: fn(*args, **kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """A lane is the pool's: it stops with `FairExecutor.shutdown`, never on its own."""

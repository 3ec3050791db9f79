"""The runner's timers: one thread brings each waiting operation back when its wait is over.

An operation between two steps holds no thread; its wait is an entry here, and `fire(op_id,
number)` (the runner's) submits its next step when the entry is due. The runner drops an entry
whose operation woke early (`cancel`), so a virtual clock never jumps to it for nobody.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

from engine.domain.clock import Clock

__all__ = ["StepTimers"]


class StepTimers:
    """One thread that brings waiting operations back at their time, on the runner's clock.

    The wait goes through `Clock.wait`, so a virtual clock advances to the next deadline at once
    (as each worker's own wait did before) and a scaled one shrinks it; with nothing due the thread
    waits, in real time, for the next timer to be set.
    """

    def __init__(self, clock: Clock, fire: Callable[[str, int], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._heap: list[tuple[float, int, str]] = []
        self._numbers = itertools.count(1)
        self._cancelled: set[int] = set()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def set(self, seconds: float, op_id: str) -> int:
        """A timer `seconds` from now; its number (0: none, the timers are stopped)."""
        with self._lock:
            if self._stopped:
                return 0
            number = next(self._numbers)
            heapq.heappush(self._heap, (self._clock.monotonic() + seconds, number, op_id))
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="op-timers", daemon=True)
                self._thread.start()
            self._changed.set()
        return number

    def cancel(self, number: int) -> None:
        """The timer is no longer wanted (its operation woke early): a virtual clock must not
        jump to its deadline for nobody."""
        with self._lock:
            if number:
                self._cancelled.add(number)
                self._changed.set()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._heap.clear()
            self._changed.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                self._changed.clear()
                now = self._clock.monotonic()
                due: list[tuple[str, int]] = []
                while self._heap and (self._heap[0][0] <= now or self._heap[0][1] in self._cancelled):
                    _, number, op_id = heapq.heappop(self._heap)
                    if number in self._cancelled:
                        self._cancelled.discard(number)
                    else:
                        due.append((op_id, number))
                until = self._heap[0][0] - now if self._heap else None
            for op_id, number in due:
                self._fire(op_id, number)
            if due:
                continue
            if until is None:
                self._changed.wait()  # real time: a virtual clock's wait would not block
            else:
                self._clock.wait(self._changed, until)

"""The clock port: wall time, monotonic time, sleeping and waiting.

Adapters and the runner take a `Clock` instead of calling `datetime.now()` or `time.sleep()`, so
tests drive time with `FakeClock` and never sleep. Pure modules take `now=` instead of a clock.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Current wall time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait until `event` is set or `timeout` passes; True when the event is set."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


class FakeClock:
    """Virtual time: `sleep` and `wait` return at once after moving time forward.

    `wait(event, None)` cannot block forever in virtual time, so it returns `event.is_set()`
    without advancing.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start time")
        self._start = start.astimezone(UTC)
        self._elapsed = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        with self._lock:
            return self._elapsed

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._elapsed += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        if timeout is not None:
            self.advance(max(0.0, timeout))
        return event.is_set()


class ScaledClock:
    """Wall time that runs `speed` times faster than the real one, and can jump ahead (`advance`).

    For the simulated console (`scalebot console --simulated --clock-speed 600`): a weekend passes
    in minutes, and the runner's and the cluster's waits shrink by the same factor, so nothing
    changes order. Never for a real cluster.
    """

    def __init__(self, speed: float = 1.0, *, start: datetime | None = None) -> None:
        if speed <= 0:
            raise ValueError("a clock's speed must be positive")
        self.speed = speed
        self._start = (start or datetime.now(UTC)).astimezone(UTC)
        self._origin = time.monotonic()
        self._offset = 0.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return (time.monotonic() - self._origin) * self.speed + self._offset

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self.monotonic())

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._offset += seconds

    def sleep(self, seconds: float) -> None:
        time.sleep(self.wall_seconds(seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else self.wall_seconds(timeout))

    def wall_seconds(self, seconds: float) -> float:
        """How long `seconds` of this clock take on the real one."""
        return max(0.0, seconds) / self.speed


def wall_seconds(clock: Clock, seconds: float) -> float:
    """How long `seconds` of `clock` take in real time (the same, except on a ScaledClock)."""
    return clock.wall_seconds(seconds) if isinstance(clock, ScaledClock) else seconds

"""A thread-safe token bucket: the client-side request rate limit.

Same model as client-go's default limiter: `burst` requests may go at once, then tokens refill
at `rate` per second. A caller that finds the bucket empty *reserves* a future token and sleeps
until then, so concurrent callers are served in arrival order and nobody spins. The clock and
the sleep function are injected, so tests run on virtual time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_QPS = 200.0
DEFAULT_BURST = 300
"""scalebot's client-side limit to one API server (settings `api_qps`/`api_burst`). client-go
defaults to 5 QPS / burst 10, kube-controller-manager to 20/30, Karpenter to 200/300. At 50 the
client, not the server, paced a drain (docs/benchmarks.md, 100 nodes: 50.3 evictions/s at 50,
68-70/s at 100 and 200, the bare loop up to 146/s); at 200 the server paces it, and API Priority and
Fairness (scalebot's ServiceAccount falls in `workload-low`) keeps it from starving other clients:
its 429s halve the evictions in flight (`engine.drain.concurrency`)."""


class TokenBucket:
    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.rate = float(rate)
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)  # starts full, like client-go
        self._last = clock()

    def _refill_locked(self) -> float:
        now = self._clock()
        # max(): an injected clock that steps backwards must not drain the bucket.
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        return now

    def reserve(self, tokens: int = 1) -> float:
        """Take `tokens` now and return how many seconds the caller must wait before using them.

        The balance may go negative: that debt is what orders later callers behind this one.
        """
        if tokens > self.burst:
            raise ValueError(f"cannot take {tokens} tokens from a bucket of {self.burst}")
        with self._lock:
            self._refill_locked()
            self._tokens -= tokens
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def try_acquire(self, tokens: int = 1) -> bool:
        """Take `tokens` only if they are available right now."""
        with self._lock:
            self._refill_locked()
            if self._tokens < tokens:
                return False
            self._tokens -= tokens
            return True

    def acquire(self, tokens: int = 1) -> float:
        """Block until `tokens` are available; returns the seconds spent waiting."""
        delay = self.reserve(tokens)
        if delay > 0:
            self._sleep(delay)
        return delay

    @property
    def available(self) -> float:
        """Tokens available now (negative while callers are queued)."""
        with self._lock:
            self._refill_locked()
            return self._tokens

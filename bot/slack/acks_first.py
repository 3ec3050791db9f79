"""Acks first: work a listener hands off waits while other Slack requests still wait for their ack.

Every ack and every hand-off runs in this one process and shares its interpreter lock. In a burst
of commands (a channel's worth of people at once, a schedule's buttons clicked together) each
request hands its planning to the work executor the moment it is acked, and that planning then
takes the lock from the acks still being answered: those are what Slack's 3 s deadline measures,
and a late ack is an error shown to the person, where a late card is only a card a moment later.
So a job handed off starts once no request is between its arrival and its ack, or after
`MAX_DEFER_SECONDS` at the latest: steady traffic delays the work by that much, never starves it.

The window is counted around `App.dispatch`, which both Bolt's WSGI adapter and its Socket Mode
handler call and which, in Bolt's default mode, returns once the listener has acked (Bolt's global
middleware cannot count it: each runs and returns before the listener does). What runs right behind
an ack on Bolt's own listener threads (opening a modal, whose trigger expires in 3 s) is not
deferred. `tests/bench/ack_latency.py` measures the effect.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from slack_bolt import App, BoltRequest, BoltResponse

MAX_DEFER_SECONDS = 1.0
"""The longest a handed-off job waits for the acks in flight (the follow-up card comes that much later)."""

P = ParamSpec("P")
T = TypeVar("T")


class AckWindow:
    """How many Slack requests are between their arrival and their ack, and a wait for none."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open = 0

    @contextmanager
    def answering(self) -> Iterator[None]:
        """One request open for the duration of the block."""
        with self._changed:
            self._open += 1
        try:
            yield
        finally:
            with self._changed:
                self._open -= 1
                if self._open == 0:
                    self._changed.notify_all()

    @property
    def open(self) -> int:
        with self._changed:
            return self._open

    def wait_quiet(self, timeout: float) -> bool:
        """Block until no request is open (True) or `timeout` seconds have passed (False)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._open:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True


class AckCountingApp(App):
    """Bolt's App, counting each request in `ack_window` from its dispatch to its answer (the ack)."""

    def __init__(self, *, ack_window: AckWindow, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ack_window = ack_window

    def dispatch(self, req: BoltRequest) -> BoltResponse:
        with self.ack_window.answering():
            return super().dispatch(req)


class AcksFirstExecutor(Executor):
    """An executor whose jobs start only once `window` is quiet (or `max_defer` has passed).

    Jobs keep their order and go to `inner`, so whoever waits on `inner` (a clean shutdown, a test
    settling the bot) also waits for them; a waiting job holds one of inner's threads, not the CPU."""

    def __init__(self, inner: Executor, window: AckWindow, *, max_defer: float = MAX_DEFER_SECONDS) -> None:
        self._inner, self._window, self._max_defer = inner, window, max_defer

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def after_acks() -> T:
            self._window.wait_quiet(self._max_defer)
            return fn(*args, **kwargs)

        return self._inner.submit(after_acks)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._inner.shutdown(wait=wait, cancel_futures=cancel_futures)

"""Who hears of an operation's progress: the bot's renderer, the metrics, the scheduler, the CLI.

One registry shared by the runner (step events) and the operations service (state changes), so
both reach the same listeners. A listener that raises is logged and skipped: it never stops an
operation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from engine.domain.operation import ProgressEvent

log = logging.getLogger(__name__)

Listener = Callable[[ProgressEvent], None]


class ProgressListeners:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def emit(self, event: ProgressEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not stop an operation
                log.exception("progress listener failed", extra={"operation": event.operation.id})

"""Watch streams: the events of one pod watch read as raw JSON lines from the open answer
(`PodWatch`), with memory bounded by one event, and how long one watch request stays open.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from engine.domain.model import PodInfo
from engine.kube import errors, projection
from engine.kube.api import PodEvent, PodEventType
from engine.kube.config import one_line
from engine.kube.transport import TRANSPORT_ERRORS

WATCH_SECONDS = 240
"""How long the server keeps one watch request open (client-go's reflectors ask for 5-10 min);
the drain's pod feed resumes from the last resourceVersion when it ends."""

WATCH_READ_TIMEOUT_SECONDS = WATCH_SECONDS + 30.0
"""A watch that stays silent past its own end has lost its connection."""

WATCH_CHUNK_BYTES = 64 * 1024

MAX_WATCH_EVENT_BYTES = 8 * 1024 * 1024
"""One event is one object: a line longer than this is not a pod, and memory stays bounded."""


class PodWatch:
    """The events of one pod watch, read as raw JSON lines from the open answer, one at a time.

    Memory stays bounded by one event (plus one read chunk): a line longer than
    MAX_WATCH_EVENT_BYTES ends the watch as a transport error. Pods the selector lets through but
    that are bound elsewhere (see `_bound_to`) come out as bookmarks: they only move the
    resourceVersion on.
    """

    def __init__(self, response: Any, keep: Callable[[PodInfo], bool] | None) -> None:
        self._response = response
        self._keep = keep
        self._closed = threading.Event()
        self._decoder = projection.WatchDecoder()

    def close(self) -> None:
        """Ends the iteration, also from another thread (it shuts the socket a read blocks on)."""
        self._closed.set()
        # RuntimeError / ValueError: the answer had ended and given its connection back to the
        # pool (the iteration's `finally`), or was closed: no socket is left to shut. That is a
        # watch the server ended just before the caller closed it (seen once in a two-hour soak,
        # where it failed the operation whose step had just been saved).
        with contextlib.suppress(*TRANSPORT_ERRORS, RuntimeError, ValueError):
            self._response.shutdown()
        self._response.release_conn()

    def __iter__(self) -> Iterator[PodEvent]:
        pending = bytearray()
        try:
            for chunk in self._response.stream(WATCH_CHUNK_BYTES, decode_content=True):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    if line.strip():
                        yield self._event(line)
                if len(pending) > MAX_WATCH_EVENT_BYTES:
                    raise errors.TransportError(message="watch pods: an event longer than the limit")
        except TRANSPORT_ERRORS as exc:
            if self._closed.is_set():
                return
            raise errors.TransportError(message=f"watch pods: {one_line(exc)}") from exc
        finally:
            self._response.release_conn()
        if pending.strip() and not self._closed.is_set():
            raise errors.TransportError(message="watch pods: the stream ended inside an event")

    def _event(self, line: bytes) -> PodEvent:
        try:
            kind, pod, raw = self._decoder.decode(line)
        except projection.ProjectionError as exc:
            raise errors.TransportError(message=f"watch pods: unreadable event: {exc}") from exc
        if pod is None:
            # 410 Gone: the resourceVersion was compacted away; the caller lists afresh.
            raise errors.error_from_status(int(raw.get("code") or 500), raw)
        version = str(raw.get("resourceVersion") or "")
        event_type = _POD_EVENT_TYPES.get(kind)
        if event_type is None or (self._keep is not None and not self._keep(pod)):
            return PodEvent(type="BOOKMARK", pod=None, resource_version=version)
        return PodEvent(type=event_type, pod=pod, resource_version=version)


_POD_EVENT_TYPES: dict[str, PodEventType] = {"ADDED": "ADDED", "MODIFIED": "MODIFIED", "DELETED": "DELETED"}

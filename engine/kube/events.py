"""Kubernetes Events on the objects scalebot changes, so `kubectl describe` shows what happened.

`EventRecorder.record(ref, reason=…, message=…)` returns at once: events are queued and written by
one background thread, because an event is best effort and must never slow down or fail the step
that caused it (a down API server would otherwise add a timeout to every cordon). Failures are
logged and dropped; `record` never raises.

What the events look like follows the components people already read events from:
- core/v1 Events (what `kubectl describe` and `kubectl get events` list), `source.component`
  and `reportingComponent` = "scalebot", `reportingInstance` = the pod name;
- events on a cluster-scoped object (a Node) go to the "default" namespace, as the node lifecycle
  controller and the kubelet put theirs; the involvedObject UID of a Node is its name when the
  real UID is not known, the kubelet's convention, which `kubectl describe node` also searches;
- repeats of the same event (same object, reason, type and message) are aggregated as client-go's
  correlator does: the first is created, later ones PATCH `count` and `lastTimestamp`; an event
  that expired meanwhile (404) is created again.

`NullRecorder` (discards) and `MemoryRecorder` (keeps them in a list) serve tests and the
simulated mode. The RBAC for this is the ClusterRole rule on events (create, patch).
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from engine.domain.clock import Clock, SystemClock
from engine.domain.model import format_time
from engine.kube import errors
from engine.kube.transport import Transport

log = logging.getLogger(__name__)

CORDONED = "Cordoned"
DRAINING = "Draining"
DRAINED = "Drained"
DRAIN_FAILED = "DrainFailed"
SCALED_POOL = "ScaledPool"
FORCE_DELETED = "ForceDeleted"

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_CHARS = 1024
"""client-go's events library truncates notes to 1 kB; an event is a headline, not a report."""
QUEUE_SIZE = 1000
"""Events waiting to be written; beyond this they are dropped (client-go's broadcaster buffers 1000)."""
CACHE_SIZE = 4096
"""Recent events remembered for aggregation (client-go's correlator keeps an LRU of 4096)."""
REQUEST_TIMEOUT_SECONDS = 5.0
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involvedObject of an event."""

    kind: str
    name: str
    namespace: str = ""
    """Empty for cluster-scoped objects (Nodes)."""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str, uid: str = "") -> ObjectRef:
        # Without the real UID, the node name: the kubelet's convention, which kubectl searches too.
        return cls(kind="Node", name=name, uid=uid or name)

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str = "") -> ObjectRef:
        return cls(kind="Pod", name=name, namespace=namespace, uid=uid)


class Recorder(Protocol):
    def record(self, ref: ObjectRef, *, reason: str, message: str, type: EventType = "Normal") -> None:
        """Queue one event; never raises, never blocks on the API server."""
        ...

    def flush(self, timeout: float) -> bool:
        """Wait until every queued event was written (or dropped); False on timeout."""
        ...

    def close(self, timeout: float = 5.0) -> None: ...


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    ref: ObjectRef
    reason: str
    message: str
    type: EventType
    at: datetime


class NullRecorder:
    """Discards every event (simulated mode, unit tests that do not look at events)."""

    def record(self, ref: ObjectRef, *, reason: str, message: str, type: EventType = "Normal") -> None:
        return None

    def flush(self, timeout: float) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> None:
        return None


class MemoryRecorder(NullRecorder):
    """Keeps every event in `events`, for tests that assert what would have been recorded."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self.events: list[RecordedEvent] = []

    def record(self, ref: ObjectRef, *, reason: str, message: str, type: EventType = "Normal") -> None:
        with self._lock:
            self.events.append(RecordedEvent(ref, reason, message, type, self._clock.now()))


@dataclass(slots=True)
class _Seen:
    namespace: str
    name: str
    count: int


_Key = tuple[str, str, str, str, str, str, str]


class EventRecorder:
    """Writes core/v1 Events through one background thread, aggregating repeats."""

    def __init__(
        self,
        api_client: Any,
        *,
        component: str = "scalebot",
        namespace_for_cluster_objects: str = "default",
        instance: str = "",
        clock: Clock | None = None,
        queue_size: int = QUEUE_SIZE,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`api_client` is a `kubernetes.client.ApiClient`; `instance` is the pod name (`$POD_NAME`)."""
        self._api = api_client
        self.component = component
        self.cluster_namespace = namespace_for_cluster_objects
        self.instance = instance
        self._clock: Clock = clock or SystemClock()
        self._timeout = request_timeout_seconds
        self._queue: collections.deque[RecordedEvent] = collections.deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._seen: collections.OrderedDict[_Key, _Seen] = collections.OrderedDict()
        self._suffix = itertools.count()
        self.dropped = 0
        """Events dropped because the queue was full or the recorder closed."""
        self._thread = threading.Thread(target=self._run, name="scalebot-events", daemon=True)
        self._thread.start()

    # -- Recorder ----------------------------------------------------------------------------------

    def record(self, ref: ObjectRef, *, reason: str, message: str, type: EventType = "Normal") -> None:
        event = RecordedEvent(ref, reason, message[:MAX_MESSAGE_CHARS], type, self._clock.now())
        with self._cond:
            if self._closed or len(self._queue) >= self._queue_size:
                self.dropped += 1
                log.warning("event dropped (queue full or closed): %s %s/%s", reason, ref.kind, ref.name)
                return
            self._queue.append(event)
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout=timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to `timeout`), then stop the thread; later events are dropped."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=max(0.1, timeout))

    # -- the writer thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return  # closed and drained
                event = self._queue.popleft()
                self._busy = True
            try:
                self._write(event)
            except errors.KubeError as exc:
                log.warning(
                    "event %s on %s/%s not recorded: %s", event.reason, event.ref.kind, event.ref.name, exc
                )
            except Exception:  # best effort: a bug here must not kill the thread and block flush()
                log.exception("event %s on %s/%s not recorded", event.reason, event.ref.kind, event.ref.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, event: RecordedEvent) -> None:
        ref = event.ref
        namespace = ref.namespace or self.cluster_namespace
        key: _Key = (namespace, ref.kind, ref.name, ref.uid, event.reason, event.type, event.message)
        seen = self._seen.get(key)
        if seen is not None:
            patch = {"count": seen.count + 1, "lastTimestamp": format_time(event.at)}
            try:
                self._send(
                    "PATCH", "patch", self._path(seen.namespace, seen.name), patch, STRATEGIC_MERGE_PATCH
                )
            except errors.NotFound:
                pass  # expired (events live about an hour) or deleted: start a new series below
            else:
                seen.count += 1
                self._seen.move_to_end(key)
                return
        name = f"{ref.name}.{self._unique_suffix(event.at)}"
        self._send("POST", "create", self._path(namespace, None), self._body(event, namespace, name))
        self._seen[key] = _Seen(namespace, name, 1)
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)

    def _body(self, event: RecordedEvent, namespace: str, name: str) -> dict[str, Any]:
        ref = event.ref
        involved: dict[str, Any] = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.uid:
            involved["uid"] = ref.uid
        timestamp = format_time(event.at)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": self.component},
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
            "reportingComponent": self.component,
        }
        if self.instance:
            body["source"]["host"] = self.instance
            body["reportingInstance"] = self.instance
        return body

    def _unique_suffix(self, at: datetime) -> str:
        """client-go names events `<object>.<hex nanoseconds>`; a counter keeps equal instants apart."""
        nanos = int(at.timestamp() * 1_000_000) * 1000 + next(self._suffix) % 1000
        return f"{nanos:x}"

    def _path(self, namespace: str, name: str | None) -> str:
        base = f"/api/v1/namespaces/{namespace}/events"
        return f"{base}/{name}" if name else base

    def _send(
        self, method: str, verb: str, path: str, body: Any, content_type: str = "application/json"
    ) -> None:
        # The main budget, not the priority one: events are best effort and wait their turn
        # behind the drain they describe.
        Transport.of(self._api).request_json(
            method,
            path,
            verb=verb,
            resource="events",
            body=body,
            timeout=self._timeout,
            content_type=content_type,
        )

"""Leader election over a coordination.k8s.io/v1 Lease: at most one scalebot acts at a time.

The instance that holds the Lease runs the engine and the scheduler; any other instance is a
standby that polls the Lease and takes over when the holder stops renewing it (a crash, a lost
node, a network partition) or hands it over on a graceful shutdown (`release()`), then resumes the
running operations from the database.

The algorithm is client-go's `leaderelection` over a `Lease` lock:
- `try_acquire_or_renew()` creates the Lease if it is missing; renews it when we hold it; takes it
  over only when it is free (empty holder, after a release) or expired (`renewTime +
  leaseDurationSeconds` has passed); every write carries the resourceVersion it was based on, so
  two candidates racing for one Lease cannot both win (the loser gets 409 Conflict and a False).
- While leading, `run()` renews every `retry_period`; if no renewal succeeds for `renew_deadline`
  it stops leading (`on_stopped_leading`) *before* anyone else may take over, since
  `renew_deadline < lease_duration`. The margin between the two also absorbs clock skew between
  pods smaller than it (standbys compare the holder's renewTime with their own wall clock).
- `run()` never releases the Lease on its own: after a stop, the caller first stops the work it
  started, then calls `release()`, so a standby can never start while this instance still acts.

An adapter over the cluster's one `engine.kube.transport.Transport` (its rate limit, counts and error
translation), on that transport's priority budget so that a saturated drain never delays a
renewal. It sends plain dicts by path (never the generated models: a model turns a MicroTime with
zero microseconds into a string the API server rejects). Needs `get`, `create` and `update` on
Leases in scalebot's namespace (the Role in manifests/base/rbac.yaml), nothing cluster-wide.

`probe_api_server()` lives here too: the one cheap request the readiness probe makes.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engine.domain.clock import Clock, SystemClock
from engine.domain.model import RawObject, parse_time
from engine.kube import errors
from engine.kube.transport import Transport

log = logging.getLogger(__name__)

LEASE_API = "/apis/coordination.k8s.io/v1"
RESOURCE = "leases"
JITTER_FACTOR = 1.2
"""Standbys poll every retry_period * [1, 1.2) (client-go's JitterFactor) so they do not stampede."""
RELEASED_LEASE_DURATION_SECONDS = 1
"""client-go writes 1 s on release; an empty holder already marks the Lease free."""
PROBE_TIMEOUT_SECONDS = 2.0


def _micro_time(value: datetime) -> str:
    """A metav1.MicroTime: RFC 3339 with exactly six fractional digits, as the server requires."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """`$POD_NAME` (set from the downward API in manifests/) or `<hostname>_<uuid>` as client-go does."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader-election fields of a Lease, plus the resourceVersion they were read at."""

    holder: str
    lease_duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int
    resource_version: str

    @classmethod
    def from_raw(cls, raw: RawObject) -> LeaseRecord:
        spec = raw.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_time(spec.get("acquireTime")),
            renew_time=parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((raw.get("metadata") or {}).get("resourceVersion") or ""),
        )

    def is_held_at(self, now: datetime) -> bool:
        """True while someone holds the Lease: a holder is named and renewTime + duration is ahead."""
        if not self.holder or self.renew_time is None:
            return False
        return now < self.renew_time + timedelta(seconds=self.lease_duration_seconds)


class LeaseElector:
    """One candidate for the Lease `namespace/name`. Thread-safe; `run()` goes on its own thread."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        name: str = "scalebot",
        identity: str,
        lease_duration: timedelta = timedelta(seconds=15),
        renew_deadline: timedelta = timedelta(seconds=10),
        retry_period: timedelta = timedelta(seconds=2),
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """`api_client` is a `kubernetes.client.ApiClient`; the defaults are client-go's (15 s/10 s/2 s)."""
        if not identity:
            raise ValueError("a leader-election identity is required (set POD_NAME)")
        if not lease_duration > renew_deadline > retry_period * JITTER_FACTOR:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > 1.2 * retry_period "
                f"(got {lease_duration}, {renew_deadline}, {retry_period})"
            )
        self._api = api_client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._observed: LeaseRecord | None = None
        self._renewed_at: float | None = None
        """Monotonic instant *before* the request of our last successful write: conservative."""

    # -- state -----------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True while our last successful acquire/renew is younger than `renew_deadline`.

        Computed from the clock, not from a flag, so it turns False on time even if the thread
        running `run()` is stuck: work can check it before each step as a fence.
        """
        with self._lock:
            if self._renewed_at is None:
                return False
            return self._clock.monotonic() - self._renewed_at < self.renew_deadline.total_seconds()

    @property
    def observed(self) -> LeaseRecord | None:
        """The Lease as last read or written by this elector (None before the first attempt)."""
        with self._lock:
            return self._observed

    # -- one attempt -------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """Create, renew or take over the Lease; True when we hold it afterwards.

        Returns False when someone else validly holds it or won a race (409). Raises
        `engine.kube.errors.KubeError` for anything else (no answer, 403, 5xx), which callers treat
        as "not renewed".
        """
        started = self._clock.monotonic()
        now = self._clock.now()
        timeout = self._request_timeout(started)
        with self._lock:
            cached = self._observed if self._renewed_at is not None else None
        if cached is not None and cached.holder == self.identity:
            # Fast path while leading (client-go does the same): update from the record we wrote
            # last, one request per renewal; a 409 means it changed under us, so read it again.
            try:
                return self._write(self._renewal(cached, now), cached.resource_version, started, timeout)
            except errors.Conflict:
                pass
        try:
            current = LeaseRecord.from_raw(self._send("GET", "get", self._path(), timeout=timeout))
        except errors.NotFound:
            return self._create(now, started, timeout)
        with self._lock:
            self._observed = current
        if current.holder != self.identity and current.is_held_at(now):
            self._lost()
            return False
        spec = (
            self._renewal(current, now) if current.holder == self.identity else self._takeover(current, now)
        )
        try:
            return self._write(spec, current.resource_version, started, timeout)
        except errors.Conflict:
            self._lost()
            return False

    def release(self) -> bool:
        """Give the Lease up at once (empty holder), so a standby takes over without waiting.

        Call after stopping the work started in `on_started_leading` and after `run()` returned.
        Best effort: True when released; False (logged) if we did not hold it or the write failed.
        """
        with self._lock:
            record = self._observed
            self._renewed_at = None
        if record is None or record.holder != self.identity:
            return False
        now = self._clock.now()
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": RELEASED_LEASE_DURATION_SECONDS,
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": record.transitions,
        }
        try:
            raw = self._send(
                "PUT",
                "update",
                self._path(),
                body=self._body(spec, record.resource_version),
                timeout=self.renew_deadline.total_seconds(),
            )
        except errors.KubeError as exc:
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        with self._lock:
            self._observed = LeaseRecord.from_raw(raw)
        log.info("Released Lease %s/%s", self.namespace, self.name, extra={"identity": self.identity})
        return True

    # -- the loop ----------------------------------------------------------------------------------

    def run(
        self,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        stop_event: threading.Event,
    ) -> None:
        """Stand by, lead, and stand by again after a loss, until `stop_event` is set.

        The callbacks run on this thread and must return promptly (start or stop work on other
        threads): renewals wait for them. `on_stopped_leading` runs after a loss and when
        `stop_event` ends a term. The Lease is not released here: see `release()`.
        """
        while not stop_event.is_set():
            if not self._acquire(stop_event):
                return
            log.info(
                "Became leader of Lease %s/%s", self.namespace, self.name, extra={"identity": self.identity}
            )
            try:
                on_started_leading()
                self._renew_until_lost(stop_event)
            finally:
                on_stopped_leading()

    def start(
        self,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        stop_event: threading.Event,
    ) -> threading.Thread:
        """`run()` on a daemon thread, returned so that shutdown can join it."""
        thread = threading.Thread(
            target=self.run,
            args=(on_started_leading, on_stopped_leading, stop_event),
            name=f"leader-election-{self.name}",
            daemon=True,
        )
        thread.start()
        return thread

    def _acquire(self, stop_event: threading.Event) -> bool:
        while True:
            if self._attempt():
                return True
            delay = self.retry_period.total_seconds() * self._rng.uniform(1.0, JITTER_FACTOR)
            if self._clock.wait(stop_event, delay):
                return False

    def _renew_until_lost(self, stop_event: threading.Event) -> None:
        while not self._clock.wait(stop_event, self.retry_period.total_seconds()):
            if self._attempt():
                continue
            held_by_other = (record := self.observed) is not None and record.holder != self.identity
            if held_by_other or not self.is_leader:
                log.warning(
                    "Lost Lease %s/%s (holder now %r)",
                    self.namespace,
                    self.name,
                    record.holder if record else "",
                    extra={"identity": self.identity},
                )
                self._lost()
                return

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except errors.KubeError as exc:
            # No answer, 5xx, 403: not renewed this time; the deadline decides when that is a loss.
            log.warning("leader election: Lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    # -- plumbing ----------------------------------------------------------------------------------

    def _create(self, now: datetime, started: float, timeout: float) -> bool:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": 0,
        }
        body = self._body(spec, None)
        try:
            raw = self._send("POST", "create", self._collection_path(), body=body, timeout=timeout)
        except errors.Conflict:
            return False  # another candidate created it first; the next attempt reads it
        self._written(raw, started)
        return True

    def _write(self, spec: Mapping[str, Any], resource_version: str, started: float, timeout: float) -> bool:
        raw = self._send(
            "PUT", "update", self._path(), body=self._body(spec, resource_version), timeout=timeout
        )
        self._written(raw, started)
        return True

    def _renewal(self, record: LeaseRecord, now: datetime) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "acquireTime": _micro_time(record.acquire_time or now),
            "renewTime": _micro_time(now),
            "leaseTransitions": record.transitions,
        }

    def _takeover(self, record: LeaseRecord, now: datetime) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_seconds(),
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": record.transitions + 1,
        }

    def _written(self, raw: RawObject, started: float) -> None:
        with self._lock:
            self._observed = LeaseRecord.from_raw(raw)
            self._renewed_at = started

    def _lost(self) -> None:
        with self._lock:
            self._renewed_at = None

    def _duration_seconds(self) -> int:
        return max(1, round(self.lease_duration.total_seconds()))

    def _request_timeout(self, started: float) -> float:
        """While leading, never wait past the renew deadline; standing by, up to the deadline."""
        deadline = self.renew_deadline.total_seconds()
        with self._lock:
            if self._renewed_at is not None:
                deadline -= started - self._renewed_at
        return max(0.5, deadline)

    def _collection_path(self) -> str:
        return f"{LEASE_API}/namespaces/{self.namespace}/leases"

    def _path(self) -> str:
        return f"{self._collection_path()}/{self.name}"

    def _body(self, spec: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            metadata["resourceVersion"] = resource_version  # optimistic concurrency: 409 if stale
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": dict(spec),
        }

    def _send(self, method: str, verb: str, path: str, *, body: Any = None, timeout: float) -> RawObject:
        # priority: a renewal that queued behind a drain's requests past renew_deadline would
        # lose the Lease; see engine.kube.transport.Transport.
        return Transport.of(self._api).request_json(
            method, path, verb=verb, resource=RESOURCE, body=body, timeout=timeout, priority=True
        )


def probe_api_server(api_client: Any, *, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> None:
    """GET /readyz with a short timeout; raises KubeError unless the API server answers ready.

    /readyz is readable by every identity (system:public-info-viewer), costs the server nothing,
    and says "not ready" while its own storage is unreachable, unlike a TCP connect. It goes on
    the transport's priority budget: a busy drain must not make the pod look unready.
    """
    Transport.of(api_client).probe(timeout=timeout_seconds)

"""scalebot's Prometheus metrics, defined in one place, and the functions that feed them.

The engine stays metrics-free: `observe_event` derives every operation metric from the runner's
`ProgressEvent`s (subscribe it next to the Slack progress listener); the Slack metrics come from
`InstrumentedSlackApi` (wraps the sender's Web API client) and `sender_hooks()` (the sender's
`SenderMetrics` port); the scheduler sets `set_next_scheduled_event`; leader election sets
`set_leader`. `/metrics` (bot.health) exposes `Metrics.registry`, a registry of our own: the
process-wide default registry would also collect whatever other libraries register there.

Series:
    scalebot_operations_total{kind,state}                   operations seen entering each state
    scalebot_evictions_total{result}                        evicted, pdb_blocked, rate_limited,
                                                            multi_pdb, gone, error
    scalebot_drain_duration_seconds                         first cordon to "Drain completed"
    scalebot_operation_duration_seconds{kind}               request to the end (succeeded/failed/cancelled)
    scalebot_force_deleted_pods_total                       pods deleted with grace 0 in phase 2
    scalebot_slack_api_calls_total{method,outcome}          ok, error, rate_limited
    scalebot_slack_api_errors_total{method,error}           Slack error code or exception class
    scalebot_slack_api_retries_total{method,reason}         calls the sender will repeat (rate_limited)
    scalebot_slack_updates_coalesced_total                  renderings that needed no API call
    scalebot_next_scheduled_event_timestamp_seconds{schedule,action}
    scalebot_leader                                         1 while this instance holds the Lease

Label values come from small sets (kinds, states, results, Slack method names and error codes,
schedule names); never user IDs, pod names or anything secret. Free-form values are passed through
`bot.logs.redact` and shortened, so even a token pasted into a schedule name never shows.

Counting from events: a `ProgressEvent` carries the whole operation, whose `progress.drain` holds the
drain's running totals (`DrainState`: evictions, failures per pod with their attempt count) and the
force-deleted pods. Metrics count the *growth* of those totals between two events of an operation,
so an event that is skipped or coalesced loses nothing. The first event seen of an operation sets
the baseline: a fresh operation is first seen before any eviction, and an operation resumed after
a restart is not counted twice for what the previous process already counted. Result "gone" (the
pod disappeared before its eviction) is not in the progress, so it stays at zero until the engine
records it.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from slack_sdk.errors import SlackApiError

from bot.logs import redact
from bot.sender import SenderMetrics, SlackApi
from engine.kube import errors as kube_errors
from engine.operation import DrainProgress, OpKind, OpState, ProgressEvent
from engine.report import COMPLETED

EvictionResult = Literal["evicted", "pdb_blocked", "rate_limited", "multi_pdb", "gone", "error"]
EVICTION_RESULTS: tuple[EvictionResult, ...] = (
    "evicted",
    "pdb_blocked",
    "rate_limited",
    "multi_pdb",
    "gone",
    "error",
)
SlackOutcome = Literal["ok", "error", "rate_limited"]
DURATION_BUCKETS_SECONDS = (
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
)
"""From a one-pod drain (seconds) to a cluster that waits out its PDBs (hours)."""
MAX_LABEL_CHARS = 64
MAX_TRACKED_OPERATIONS = 10_000
"""Operations whose totals are remembered; far above what one scalebot runs at once."""
_DURATION_STATES = frozenset({OpState.SUCCEEDED, OpState.FAILED, OpState.CANCELLED})


def label(value: str) -> str:
    """A label value that is bounded in length and never shows anything shaped like a token."""
    return redact(value)[:MAX_LABEL_CHARS] or "unknown"


def eviction_result(failure_key: str) -> EvictionResult:
    """Classify a drain failure key (the API server's message, as engine.drain groups them)."""
    if failure_key.startswith(kube_errors.MULTIPLE_PDBS_MESSAGE):
        return "multi_pdb"
    lowered = failure_key.lower()
    if "disruption budget" in lowered:
        return "pdb_blocked"
    if "too many requests" in lowered or "rate limit" in lowered:
        return "rate_limited"  # API Priority and Fairness, not a budget
    return "error"


@dataclass(slots=True)
class _Totals:
    """What one operation's events showed last."""

    states: set[OpState] = field(default_factory=set)
    evicted: int = 0
    attempts: dict[str, int] = field(default_factory=dict)
    """Failed eviction attempts per pod UID."""
    force_deleted: int = 0
    drain_observed: bool = False


class Metrics:
    """Every metric in its own registry; thread-safe (the runner emits from its worker threads)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.operations = Counter(
            "scalebot_operations", "Operations seen entering each state.", ["kind", "state"], registry=r
        )
        self.evictions = Counter("scalebot_evictions", "Eviction attempts by result.", ["result"], registry=r)
        self.drain_duration = Histogram(
            "scalebot_drain_duration_seconds",
            "Time from the first cordon to a completed drain.",
            buckets=DURATION_BUCKETS_SECONDS,
            registry=r,
        )
        self.operation_duration = Histogram(
            "scalebot_operation_duration_seconds",
            "Time from the request to the end of an operation that ran.",
            ["kind"],
            buckets=DURATION_BUCKETS_SECONDS,
            registry=r,
        )
        self.force_deleted = Counter(
            "scalebot_force_deleted_pods", "Pods deleted with grace 0 in phase 2 of a zero-scale.", registry=r
        )
        self.slack_calls = Counter(
            "scalebot_slack_api_calls", "Slack Web API calls by outcome.", ["method", "outcome"], registry=r
        )
        self.slack_errors = Counter(
            "scalebot_slack_api_errors",
            "Failed Slack Web API calls by error.",
            ["method", "error"],
            registry=r,
        )
        self.slack_retries = Counter(
            "scalebot_slack_api_retries",
            "Slack Web API calls to be repeated.",
            ["method", "reason"],
            registry=r,
        )
        self.slack_coalesced = Counter(
            "scalebot_slack_updates_coalesced", "Renderings that needed no Slack API call.", registry=r
        )
        self.next_scheduled_event = Gauge(
            "scalebot_next_scheduled_event_timestamp_seconds",
            "Unix time of each schedule's next event.",
            ["schedule", "action"],
            registry=r,
        )
        self.leader = Gauge("scalebot_leader", "1 while this instance holds the leader Lease.", registry=r)
        # Series that exist from the start, so dashboards and alerts see 0 rather than nothing.
        for result in EVICTION_RESULTS:
            self.evictions.labels(result)
        for kind in OpKind:
            self.operation_duration.labels(kind.value)
        self._lock = threading.Lock()
        self._totals: collections.OrderedDict[str, _Totals] = collections.OrderedDict()
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()

    # -- operations ----------------------------------------------------------------------------------

    def observe_event(self, event: ProgressEvent) -> None:
        """Update the operation metrics from one runner/service event. Never raises on odd data."""
        op = event.operation
        with self._lock:
            if op.id in self._finished:
                return  # a late duplicate of an operation already counted to its end
            totals = self._totals.get(op.id)
            if totals is None:
                totals = self._baseline(op.progress.drain)
                self._totals[op.id] = totals
                while len(self._totals) > MAX_TRACKED_OPERATIONS:
                    self._totals.popitem(last=False)
            if op.state not in totals.states:
                totals.states.add(op.state)
                self.operations.labels(op.kind.value, op.state.value).inc()
            self._count_drain(op.progress.drain, totals)
            if event.kind == "phase" and event.text == COMPLETED and not totals.drain_observed:
                totals.drain_observed = True
                started = op.progress.drain.state.started_at if op.progress.drain.state else None
                if started is not None:
                    self.drain_duration.observe(max(0.0, (op.updated_at - started).total_seconds()))
            if event.final:
                if op.state in _DURATION_STATES:
                    seconds = (op.updated_at - op.created_at).total_seconds()
                    self.operation_duration.labels(op.kind.value).observe(max(0.0, seconds))
                self._totals.pop(op.id, None)
                self._finished[op.id] = None
                while len(self._finished) > MAX_TRACKED_OPERATIONS:
                    self._finished.popitem(last=False)

    def _baseline(self, drain: DrainProgress) -> _Totals:
        state = drain.state
        return _Totals(
            evicted=state.evicted_total if state else 0,
            attempts={uid: f.attempts for uid, f in state.failures.items()} if state else {},
            force_deleted=len(drain.force_deleted),
        )

    def _count_drain(self, drain: DrainProgress, totals: _Totals) -> None:
        state = drain.state
        evicted = state.evicted_total if state else 0
        if evicted > totals.evicted:
            self.evictions.labels("evicted").inc(evicted - totals.evicted)
        totals.evicted = max(totals.evicted, evicted)
        for uid, failure in (state.failures if state else {}).items():
            grown = failure.attempts - totals.attempts.get(uid, 0)
            if grown > 0:
                self.evictions.labels(eviction_result(failure.key)).inc(grown)
                totals.attempts[uid] = failure.attempts
        forced = len(drain.force_deleted)
        if forced > totals.force_deleted:
            self.force_deleted.inc(forced - totals.force_deleted)
            totals.force_deleted = forced

    # -- Slack ------------------------------------------------------------------------------------

    def observe_slack_call(self, method: str, outcome: SlackOutcome) -> None:
        self.slack_calls.labels(label(method), outcome).inc()

    def observe_slack_error(self, method: str, error: str) -> None:
        self.slack_errors.labels(label(method), label(error)).inc()

    def observe_slack_retry(self, method: str, reason: str) -> None:
        self.slack_retries.labels(label(method), label(reason)).inc()

    def sender_hooks(self) -> SenderMetrics:
        """The sender's metrics port bound to these counters.

        Calls themselves are counted by `InstrumentedSlackApi` around the sender's client, which
        sees how each one ended; the sender reports errors, 429 waits and coalesced renderings.
        """
        return SenderMetrics(
            rate_limited=lambda method, _seconds: self.observe_slack_retry(method, "rate_limited"),
            error=self.observe_slack_error,
            coalesced=lambda _key: self.slack_coalesced.inc(),
        )

    # -- scheduler and leader election -------------------------------------------------------------

    def set_next_scheduled_event(self, schedule: str, action: str, at: datetime | None) -> None:
        """The next event of a schedule; None removes the series (schedule disabled or deleted)."""
        labels = (label(schedule), label(action))
        if at is None:
            with contextlib.suppress(KeyError):  # never set: nothing to remove
                self.next_scheduled_event.remove(*labels)
            return
        self.next_scheduled_event.labels(*labels).set(at.timestamp())

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)


class InstrumentedSlackApi:
    """The sender's Web API client, counting every call by method and how it ended."""

    def __init__(self, client: SlackApi, metrics: Metrics) -> None:
        self._client = client
        self._metrics = metrics

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.api_call(api_method, json=json)
        except SlackApiError as exc:
            status = getattr(exc.response, "status_code", 0)
            error = exc.response.get("error", "") if exc.response is not None else ""
            limited = status == 429 or error == "ratelimited"
            self._metrics.observe_slack_call(api_method, "rate_limited" if limited else "error")
            raise
        except Exception:
            self._metrics.observe_slack_call(api_method, "error")
            raise
        self._metrics.observe_slack_call(api_method, "ok")
        return response


DEFAULT = Metrics()
"""The process's metrics; tests build their own `Metrics()` instead."""


def observe_event(event: ProgressEvent) -> None:
    """`DEFAULT.observe_event`: subscribe this to the operations service (`ops.subscribe`)."""
    DEFAULT.observe_event(event)

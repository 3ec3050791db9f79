"""scalebot's Prometheus metrics, defined in one place, and the functions that feed them.

The engine stays metrics-free: `observe_event` derives every operation metric from the runner's
`ProgressEvent`s (subscribe it next to the Slack progress listener); the Slack metrics come from
`InstrumentedSlackApi` (wraps the sender's Web API client) and `sender_hooks()` (the sender's
`SenderMetrics` port); the scheduler sets `set_next_scheduled_event`; leader election sets
`set_leader`. `/metrics` (bot.runtime.health) exposes `Metrics.registry`, a registry of our own: the
process-wide default registry would also collect whatever other libraries register there.

Series (the README's metrics reference lists them with their meaning; a test keeps the two equal):
    scalebot_operations_total{cluster,kind,state}           operations seen entering each state
    scalebot_operations_active{cluster,kind,state}          operations awaiting approval or running now
    scalebot_operation_oldest_update_timestamp_seconds{cluster,state}
                                                            least recent update among those operations
    scalebot_evictions_total{cluster,result}                evicted, pdb_blocked, rate_limited,
                                                            multi_pdb, gone, error
    scalebot_drain_duration_seconds{cluster}                first cordon to "Drain completed"
    scalebot_operation_duration_seconds{cluster,kind}       request to the end (succeeded/failed/cancelled)
    scalebot_force_deleted_pods_total{cluster}              pods deleted with grace 0 in phase 2
    scalebot_wakes_short_total{cluster}                     wakes that ended short of Ready nodes
    scalebot_pool_nodes{cluster,pool,state}                 ready, not_ready, cordoned, asleep
    scalebot_slack_api_calls_total{method,outcome}          ok, error, rate_limited
    scalebot_slack_api_errors_total{method,error}           Slack error code or exception class
    scalebot_slack_api_retries_total{method,reason}         calls the sender will repeat (rate_limited)
    scalebot_slack_updates_coalesced_total                  renderings that needed no API call
    scalebot_next_scheduled_event_timestamp_seconds{cluster,schedule,action}
    scalebot_leader                                         1 while this instance holds the Lease
    scalebot_leader_lost_total                              times this instance lost the Lease

No `_created` series (prometheus_client's creation timestamps): nothing here uses them, and they
double the series of every counter and histogram. The `cluster` label is the cluster's name in the
config; `pool` the pool's name as its provider reports it.

The gauges of the present (`scalebot_operations_active`, `scalebot_pool_nodes`, the next scheduled event)
are read when Prometheus scrapes (`StateCollector`): the operations from the database at each scrape,
the pools and their nodes from the Kubernetes API at most once per `POOL_REFRESH_SECONDS`.

Label values come from small sets (kinds, states, results, Slack method names and error codes,
schedule names); never user IDs, pod names or anything secret. Free-form values are passed through
`bot.config.logs.redact` and shortened, so even a token pasted into a schedule name never shows.

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
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from slack_sdk.errors import SlackApiError

from bot.config.logs import redact
from bot.slack.delivery.sender import SenderMetrics, SlackApi
from engine.domain.announcement import NextEvent
from engine.domain.model import NodeInfo
from engine.domain.operation import DrainProgress, Operation, OpKind, OpState, ProgressEvent
from engine.drain.report import COMPLETED
from engine.kube import errors as kube_errors
from engine.operations.service import Operations
from engine.pools.base import Pool, StopsCluster

disable_created_metrics()  # type: ignore[no-untyped-call]

log = logging.getLogger(__name__)

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
ACTIVE_STATES = (OpState.AWAITING_APPROVAL, OpState.RUNNING)
POOL_NODE_STATES = ("ready", "not_ready", "cordoned", "asleep")
POOL_REFRESH_SECONDS = 30.0
"""Pools and nodes are listed at most this often, however often Prometheus scrapes."""
MAX_ACTIVE_OPERATIONS = 1000


def label(value: str) -> str:
    """A label value that is bounded in length and never shows anything shaped like a token."""
    return redact(value)[:MAX_LABEL_CHARS] or "unknown"


def eviction_result(failure_key: str) -> EvictionResult:
    """Classify a drain failure key (the API server's message, as engine.drain.passes groups them)."""
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
            "scalebot_operations",
            "Operations seen entering each state.",
            ["cluster", "kind", "state"],
            registry=r,
        )
        self.evictions = Counter(
            "scalebot_evictions", "Eviction attempts by result.", ["cluster", "result"], registry=r
        )
        self.drain_duration = Histogram(
            "scalebot_drain_duration_seconds",
            "Time from the first cordon to a completed drain.",
            ["cluster"],
            buckets=DURATION_BUCKETS_SECONDS,
            registry=r,
        )
        self.operation_duration = Histogram(
            "scalebot_operation_duration_seconds",
            "Time from the request to the end of an operation that ran.",
            ["cluster", "kind"],
            buckets=DURATION_BUCKETS_SECONDS,
            registry=r,
        )
        self.force_deleted = Counter(
            "scalebot_force_deleted_pods",
            "Pods deleted with grace 0 in phase 2 of a zero-scale.",
            ["cluster"],
            registry=r,
        )
        self.wakes_short = Counter(
            "scalebot_wakes_short",
            "Wakes that ended with fewer Ready nodes than they wanted.",
            ["cluster"],
            registry=r,
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
        self.leader = Gauge("scalebot_leader", "1 while this instance holds the leader Lease.", registry=r)
        self.leader_lost = Counter(
            "scalebot_leader_lost", "Times this instance lost the leader Lease it held.", registry=r
        )
        self._leading = False
        self._state: StateCollector | None = None
        self._lock = threading.Lock()
        self._totals: collections.OrderedDict[str, _Totals] = collections.OrderedDict()
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()

    def prime(self, clusters: Iterable[str]) -> None:
        """Series that exist from the start, so dashboards and alerts see 0 rather than nothing."""
        for cluster in map(label, clusters):
            for result in EVICTION_RESULTS:
                self.evictions.labels(cluster, result)
            for kind in OpKind:
                self.operation_duration.labels(cluster, kind.value)
                self.operations.labels(cluster, kind.value, OpState.FAILED.value)
            self.drain_duration.labels(cluster)
            self.force_deleted.labels(cluster)
            self.wakes_short.labels(cluster)

    def watch(self, source: StateSource) -> None:
        """Expose the present state (operations, pools, next events) of `source`'s clusters."""
        self.prime(source.clusters())
        if self._state is not None:  # a service built again in the same process (tests)
            self.registry.unregister(self._state)
        self._state = StateCollector(source)
        self.registry.register(self._state)

    # -- operations ----------------------------------------------------------------------------------

    def observe_event(self, event: ProgressEvent) -> None:
        """Update the operation metrics from one runner/service event. Never raises on odd data."""
        op = event.operation
        cluster = label(op.target.cluster)
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
                self.operations.labels(cluster, op.kind.value, op.state.value).inc()
            self._count_drain(cluster, op.progress.drain, totals)
            if event.kind == "phase" and event.text == COMPLETED and not totals.drain_observed:
                totals.drain_observed = True
                started = op.progress.drain.state.started_at if op.progress.drain.state else None
                if started is not None:
                    self.drain_duration.labels(cluster).observe(
                        max(0.0, (op.updated_at - started).total_seconds())
                    )
            if event.final:
                if op.state in _DURATION_STATES:
                    seconds = (op.updated_at - op.created_at).total_seconds()
                    self.operation_duration.labels(cluster, op.kind.value).observe(max(0.0, seconds))
                if op.kind is OpKind.WAKE and _short(op):
                    self.wakes_short.labels(cluster).inc()
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

    def _count_drain(self, cluster: str, drain: DrainProgress, totals: _Totals) -> None:
        state = drain.state
        evicted = state.evicted_total if state else 0
        if evicted > totals.evicted:
            self.evictions.labels(cluster, "evicted").inc(evicted - totals.evicted)
        totals.evicted = max(totals.evicted, evicted)
        for uid, failure in (state.failures if state else {}).items():
            grown = failure.attempts - totals.attempts.get(uid, 0)
            if grown > 0:
                self.evictions.labels(cluster, eviction_result(failure.key)).inc(grown)
                totals.attempts[uid] = failure.attempts
        forced = len(drain.force_deleted)
        if forced > totals.force_deleted:
            self.force_deleted.labels(cluster).inc(forced - totals.force_deleted)
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

    # -- leader election ----------------------------------------------------------------------------

    def set_leader(self, leading: bool) -> None:
        with self._lock:
            if self._leading and not leading:
                self.leader_lost.inc()
            self._leading = leading
        self.leader.set(1 if leading else 0)


def _short(op: Operation) -> bool:
    """A wake that ended (in any state) with fewer Ready nodes than it waited for."""
    wake = op.progress.wake
    return wake.wanted is not None and wake.ready is not None and wake.ready < wake.wanted


# -- the present state, read at scrape time ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolNodes:
    """How many of a pool's nodes are in each state (each node counted once)."""

    ready: int = 0
    not_ready: int = 0
    cordoned: int = 0
    asleep: int = 0

    def by_state(self) -> dict[str, int]:
        return {
            "ready": self.ready,
            "not_ready": self.not_ready,
            "cordoned": self.cordoned,
            "asleep": self.asleep,
        }


def pool_nodes(pool: Pool, nodes: Mapping[str, NodeInfo]) -> PoolNodes:
    """Count a pool's nodes: cordoned (by anyone, or being drained) before Ready/not Ready; asleep
    is what a wake would bring back (the size recorded when the pool went to sleep, less the nodes it
    has now). A node of the pool that the listing does not show yet counts as not Ready."""
    ready = not_ready = cordoned = 0
    for name in pool.nodes:
        node = nodes.get(name)
        if node is not None and node.is_cordoned:
            cordoned += 1
        elif node is not None and node.ready == "True":
            ready += 1
        else:
            not_ready += 1
    asleep = max(0, pool.restore.desired - len(pool.nodes)) if pool.restore is not None else 0
    return PoolNodes(ready=ready, not_ready=not_ready, cordoned=cordoned, asleep=asleep)


class StateSource(Protocol):
    """What the scrape-time gauges read (bot.runtime.run adapts the operations service and schedules)."""

    def clusters(self) -> Sequence[str]: ...

    def pools(self, cluster: str) -> Mapping[str, PoolNodes]: ...

    def active_operations(self) -> Sequence[Operation]: ...

    def next_event(self, cluster: str) -> NextEvent | None: ...


class OperationsState:
    """`StateSource` over the operations service: its store, its clusters' pools and nodes."""

    def __init__(self, ops: Operations, next_event: Callable[[str], NextEvent | None]) -> None:
        self._ops = ops
        self._next_event = next_event

    def clusters(self) -> Sequence[str]:
        return self._ops.clusters()

    def pools(self, cluster: str) -> Mapping[str, PoolNodes]:
        handle = self._ops.handles[cluster]
        stopped = isinstance(handle.pools, StopsCluster) and handle.pools.cluster_stopped()
        # A stopped cluster (AKS) has no node and an API server not to be reached.
        nodes = {} if stopped else {node.name: node for node in handle.api.list_nodes()}
        return {pool.name: pool_nodes(pool, nodes) for pool in handle.pools.list_pools()}

    def active_operations(self) -> Sequence[Operation]:
        return self._ops.list_operations(active_only=True, limit=MAX_ACTIVE_OPERATIONS)

    def next_event(self, cluster: str) -> NextEvent | None:
        return self._next_event(cluster)


class StateCollector(Collector):
    """The gauges of the present, computed when Prometheus scrapes.

    A cluster whose pools cannot be read keeps the counts of its last good read (and logs why);
    one that was never read has no `scalebot_pool_nodes` series, rather than zeros that would
    look like an empty pool.
    """

    def __init__(
        self,
        source: StateSource,
        *,
        refresh_seconds: float = POOL_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._refresh = refresh_seconds
        self._monotonic = monotonic
        self._pools: dict[str, Mapping[str, PoolNodes]] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        operations, oldest, pools, next_event = self._families()
        try:
            active = self._source.active_operations()
        except Exception as exc:  # a scrape must not fail because the database is busy
            log.warning("metrics: cannot read the operations: %s", exc)
            active = ()
        counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        least: dict[tuple[str, str], float] = {}
        for op in active:
            cluster, state = label(op.target.cluster), op.state.value
            counts[(cluster, op.kind.value, state)] += 1
            at = op.updated_at.timestamp()
            least[(cluster, state)] = min(at, least.get((cluster, state), at))
        for cluster in map(label, self._source.clusters()):
            for kind in OpKind:
                for state in ACTIVE_STATES:
                    counts.setdefault((cluster, kind.value, state.value), 0)
        for labels, count in sorted(counts.items()):
            operations.add_metric(list(labels), count)
        for (cluster, state), at in sorted(least.items()):
            oldest.add_metric([cluster, state], at)
        for cluster, by_pool in sorted(self._read_pools().items()):
            for pool, counted in sorted(by_pool.items()):
                for state, count in counted.by_state().items():
                    pools.add_metric([label(cluster), label(pool), state], count)
        for cluster in self._source.clusters():
            event = self._next(cluster)
            if event is not None:
                next_event.add_metric(
                    [label(cluster), label(event.schedule), label(event.action)], event.at.timestamp()
                )
        return [operations, oldest, pools, next_event]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "scalebot_operations_active",
                "Operations awaiting approval or running now.",
                labels=["cluster", "kind", "state"],
            ),
            GaugeMetricFamily(
                "scalebot_operation_oldest_update_timestamp_seconds",
                "Unix time of the least recent update among the operations in this state.",
                labels=["cluster", "state"],
            ),
            GaugeMetricFamily(
                "scalebot_pool_nodes",
                "Nodes of each pool by state (ready, not_ready, cordoned, asleep).",
                labels=["cluster", "pool", "state"],
            ),
            GaugeMetricFamily(
                "scalebot_next_scheduled_event_timestamp_seconds",
                "Unix time of each cluster's next scheduled sleep or wake.",
                labels=["cluster", "schedule", "action"],
            ),
        )

    def _next(self, cluster: str) -> NextEvent | None:
        try:
            return self._source.next_event(cluster)
        except Exception as exc:
            log.warning("metrics: cannot read the next scheduled event of %s: %s", cluster, exc)
            return None

    def _read_pools(self) -> dict[str, Mapping[str, PoolNodes]]:
        with self._lock:
            now = self._monotonic()
            if self._read_at is not None and now - self._read_at < self._refresh:
                return dict(self._pools)
            self._read_at = now
            for cluster in self._source.clusters():
                try:
                    self._pools[cluster] = self._source.pools(cluster)
                except Exception as exc:  # an unreachable cluster must not fail the scrape
                    log.warning("metrics: cannot read the pools of %s: %s", cluster, exc)
            return dict(self._pools)


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

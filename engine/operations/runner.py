"""Runs operations step by step on bounded workers; every step is persisted and safe to repeat.

Each step reads the operation, acts through the ports and returns a `StepResult` that the runner
persists before anything else happens. Which step comes next is the flow's (`engine.operations.flows`, one
table per kind of operation): a step only says how it ended.

    zero / scale down:  [workloads_sleep →] record → cordon → drain → [force] → remove → verify
    scale up / wake:    (resize → wait_ready)* → [workloads_wake →] finish   (one round per wave)
    drain:              cordon → drain
    consolidate:        (fit → cordon → drain → remove_node)* → consolidated

- `record` writes the sizes to restore to SQLite AND to the pool objects before the first change
  (a zero-scale or a scheduled sleep only: a deliberate scale is the size wake keeps).
- `drain` runs ONE drain pass per invocation and asks to be called again after a wait; its
  `DrainState` and the phase-1 start live in the operation's `progress`, so the 5-minute window and drain
  timeouts survive restarts (a restart at 4:00 into phase 1 reaches phase 2 one minute later).
- `force` (only when every pool of the cluster goes to 0): DELETE with grace 0 whatever is
  left, recording each pod and why, only within the approved force scope (`engine.domain.force_scope`):
  a Pod outside it stops the operation, nothing force-deleted, for a new approval.
- `fit` (consolidate) re-checks, against a fresh listing, that the next node's pods still fit on
  the nodes that stay (engine.planning.consolidation.recheck); a node whose pods no longer fit is skipped
  and reported, never cordoned. Nodes go one at a time, each drained and removed before the next.
- `resize` / `wait_ready` (a wake in waves, `engine.domain.wake_waves`): the waves are decided at
  the first resize and kept in the operation's progress; each round resizes one wave's pools and
  waits for its share of Ready nodes (or its timeout, reported) before the next.
- `workloads_wake` restores the workloads one wake order at a time (`engine.workloads.order`),
  following each until it is available before the next; `workloads_sleep` goes the other way.
- On start-up `resume_all()` continues every running operation from its current step.

One runner per operation (across processes sharing the database): a runner first claims the
operation in SQLite (`Store.claim_operation`), which bumps the operation's fencing token, and
heartbeats its claims every `CLAIM_TTL_SECONDS / 3`. A second runner (`scalebot resume` beside
`scalebot run`, a standby) is refused while the holder is alive: heard from within the TTL and,
on the same host, its pid still running. Every progress write (state, journal, locks) is a
`Store.fenced` transaction, so a runner whose claim was taken over writes nothing more and stops;
every Kubernetes write of a step goes through the ports of `engine.operations.fence`, which check the claim
first, so such a runner also stops before its next cordon, eviction, deletion or resize.
With leader election, `may_act` is the Lease's `is_leader`: a runner that lost the Lease stops
heartbeating (its claims lapse) and stops at its next step boundary; the bound is the Lease's
renew deadline plus the step under way.

A database that cannot be written (disk full) stops the operation's runner without a further
write: the operation stays RUNNING at its last persisted step (progress and its journal row are
one transaction, so nothing is half-written), `faults` names it for /healthz, and it resumes from
that step at the next start once the disk has space.

The runner never calls Slack: it emits `ProgressEvent`s; the bot renders and sends them.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from engine.domain import force_scope
from engine.domain.clock import Clock
from engine.domain.durations import format_duration
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import PdbIndex
from engine.domain.operation import (
    ConsolidationProgress,
    Operation,
    OperationPlan,
    OperationProgress,
    OperationSummary,
    OpKind,
    OpState,
    PoolChange,
    PoolSizes,
    ProgressEvent,
    ProgressKind,
    Released,
    WorkloadCount,
    emptied_not_removed,
    format_seconds,
)
from engine.domain.wake_waves import WakeWaves, WaveProgress
from engine.drain import filters, force_rules
from engine.drain import passes as drain
from engine.drain import progress as drain_progress
from engine.drain.concurrency import AdaptiveGate, AimdController, AimdSettings
from engine.drain.pacing import PassFacts, PassPacing, next_pass
from engine.drain.pod_feed import PodFeed
from engine.drain.report import Style as ReportStyle
from engine.kube import events as kube_events
from engine.kube.api import MAX_EVICTIONS_IN_FLIGHT, KubeApi, RateLimitedApi, SchedulingApi
from engine.operations import log_context
from engine.operations.fence import FencedKubeApi, FencedPools, FencedWorkloadApi
from engine.operations.flows import NEXT, Outcome, first_step, step_after
from engine.planning import consolidation, placement, wake_waves
from engine.pools.base import Pool, PoolProvider, PoolSizeError, RestoreRecord, TakesBackRemoval
from engine.store.database import ClaimHeld, Fenced, RunnerClaim, RunnerId, Store, StoredRestore, StoreError
from engine.workloads import Decision, WorkloadPlan, WorkloadRecord, WorkloadScaler, returning
from engine.workloads import Outcome as WorkloadOutcome
from engine.workloads import order as wake_order

log = logging.getLogger(__name__)

STEP_RETRY_SECONDS = 5.0
STEP_RETRY_CAP_SECONDS = 15.0
RETRIED = frozenset({Category.CLUSTER, Category.TRANSIENT})
"""The categories of failure a step is tried again on (steps are idempotent): the runner's one
mapping. A refusal of the API server may pass once the cluster changes, a transient failure once
it recovers; any other category leaves the step (usage, configuration, the store's own faults)."""
CLAIM_TTL_SECONDS = 15.0
"""A runner not heard from for this long has lost its operations; it heartbeats every third of it."""
CLAIM_POLL_SECONDS = 1.0
"""How often a standby that took over checks whether the previous runner's claim has lapsed."""


def runner_identity() -> RunnerId:
    """This process as a runner: `$POD_NAME` (or the host name), the host, the pid, a fresh nonce."""
    host = socket.gethostname()
    return RunnerId(
        owner=os.environ.get("POD_NAME") or host, host=host, pid=os.getpid(), nonce=uuid.uuid4().hex
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    graceful_window: timedelta = timedelta(minutes=5)
    """Phase 1 of a zero-scale: evictions that honour PDBs, before phase 2 force-deletes."""
    drain_timeout: timedelta | None = timedelta(hours=1)
    """A drain that is not a full shutdown gives up (and fails) after this long."""
    verify_timeout: timedelta = timedelta(minutes=10)
    """How long after the removal the pools may take to report their target size."""
    ready_timeout: timedelta = timedelta(minutes=15)
    """How long wake waits for nodes to become Ready before reporting what is not."""
    workloads_return_timeout: timedelta = timedelta(minutes=5)
    """How long a wake, its nodes Ready, follows the Deployments and StatefulSets not yet available
    before it reports which are still not back and why (kube-scheduler retries an unschedulable pod
    within 5 minutes at the latest)."""
    pass_interval: timedelta = timedelta(seconds=20)
    settle: timedelta = timedelta(seconds=5)
    parallel_evictions: int = 16
    """Evictions in flight at once; with `adaptive_evictions`, where the adaptive limit starts.
    Also how many nodes are cordoned, uncordoned or force-deleted from at once."""
    adaptive_evictions: bool = True
    """Grow the evictions in flight while their latency stays flat (doubling until the first
    decrease, then one at a time), halve them on a 429/5xx from
    the server or a latency rise (AIMD, engine.drain.concurrency), between 2 and `max_parallel_evictions`
    and never above the client's burst."""
    max_parallel_evictions: int = MAX_EVICTIONS_IN_FLIGHT
    """The adaptive limit's ceiling; the real client's connection pool is sized for it."""
    workers: int = 4
    """Operations run at once (each on its own pools, guaranteed by the locks)."""

    @property
    def pacing(self) -> PassPacing:
        return PassPacing(interval=self.pass_interval, settle=self.settle)


@dataclass(frozen=True, slots=True)
class ClusterHandle:
    name: str
    api: KubeApi
    pools: PoolProvider
    workloads: WorkloadScaler | None = None
    """Puts Deployments, StatefulSets, CronJobs and KEDA ScaledObjects to sleep; None if not configured."""
    events: kube_events.Recorder = field(default_factory=kube_events.NullRecorder)
    """Kubernetes Events on the objects scalebot changes in this cluster (so `kubectl describe` there
    shows what happened); written through this cluster's own API server."""
    drain_report: ReportStyle = "current"
    """Layout of the drain reports: Cluster API's per-Pod condition message (v1.9+), or "legacy"."""
    wake_waves: WakeWaves = field(default_factory=WakeWaves)
    """The order pools wake in (`engine.domain.wake_waves`); empty: every pool at once."""


@dataclass(slots=True)
class StepResult:
    then: Outcome | None = None
    """How the step ended, for the flow's table (`engine.operations.flows`): NEXT, a named outcome, or None to
    run the same step again (after `wait`)."""
    progress: OperationProgress | None = None
    """The operation's progress from now on (built from the one the step read); None: unchanged."""
    wait: float = 0.0
    state: OpState | None = None
    events: list[tuple[ProgressKind, str, str]] = field(default_factory=list)
    """(kind, text, condition message) to emit once the result is persisted."""
    summary: OperationSummary | None = None
    error: str = ""


Step = Callable[["Runner", Operation, ClusterHandle], StepResult]


class Runner:
    def __init__(
        self,
        store: Store,
        clusters: Mapping[str, ClusterHandle],
        clock: Clock,
        emit: Callable[[ProgressEvent], None],
        settings: RunnerSettings = RunnerSettings(),
        *,
        may_act: Callable[[], bool] | None = None,
        identity: RunnerId | None = None,
    ) -> None:
        self.store = store
        self.may_act: Callable[[], bool] = may_act or (lambda: True)
        """False once this instance may no longer act (it lost the Lease): stop at the next step."""
        self.identity = identity or runner_identity()
        self.faults: dict[str, str] = {}
        """Operations whose runner stopped because the database could not be written, and why."""
        self.handed_over: dict[str, str] = {}
        """Operations another runner claimed while this one ran them (it stopped, writing nothing)."""
        self.clusters = clusters
        self.clock = clock
        self.emit = emit
        self.settings = settings
        self.scale_down: dict[str, consolidation.ScaleDownRules] = {}
        """Each cluster's cluster-autoscaler rules (its consolidation settings), for the re-check
        before a consolidated node is cordoned; set by `Operations`. A cluster not named: defaults."""
        self._pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="op")
        self._evictions = ThreadPoolExecutor(
            max_workers=settings.parallel_evictions, thread_name_prefix="evict"
        )
        self._adaptive_pool = (
            ThreadPoolExecutor(
                max_workers=max(settings.parallel_evictions, settings.max_parallel_evictions),
                thread_name_prefix="evict-adaptive",
            )
            if settings.adaptive_evictions
            else None
        )
        self._gates: dict[str, AdaptiveGate] = {}
        """Per cluster: the adaptive eviction limit, learned across passes and operations."""
        self._active: dict[str, threading.Event] = {}
        self._wakes: dict[str, threading.Event] = {}
        """Per operation: set to end its wait between steps early (a cancel, or its pod feed)."""
        self._feeds: dict[str, PodFeed] = {}
        """Per draining operation: the pods of its nodes, kept current by a watch."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._tokens: dict[str, int] = {}
        self._lost: set[str] = set()
        self._heartbeat: threading.Thread | None = None
        self._beat = threading.Event()

    # -- control ---------------------------------------------------------------------------------

    def start(self, op_id: str, *, wait_for_claim: bool = False, resumed: bool = False) -> None:
        """Run the operation on a worker, once this runner holds its claim.

        Without `wait_for_claim` the claim is taken here and ClaimHeld raised if another live
        runner holds it; with it (a standby taking over) the worker waits for that claim to lapse.
        """
        with self._lock:
            if op_id in self._active or self._stopping.is_set():
                return
            self._active[op_id] = threading.Event()
            self._wakes[op_id] = threading.Event()
        if not wait_for_claim and op_id not in self._tokens:
            try:
                self._claim(op_id)
            except ClaimHeld:
                self._forget(op_id)
                raise
            except StoreError as exc:
                self._fault(op_id, exc)
                self._forget(op_id)
                return
        self._pool.submit(self._run, op_id, resumed)

    def resume_all(self, *, wait_for_claims: bool = False) -> list[str]:
        """Continue every running operation; ClaimHeld (nothing started) if another runner has one.

        `wait_for_claims`: a new leader waits for the claims of the instance it replaces to lapse.
        """
        ops = self.store.list_operations(states=[OpState.RUNNING], limit=1000)
        if not wait_for_claims:
            self._claim_all([op.id for op in ops])
        for op in ops:
            self.start(op.id, wait_for_claim=wait_for_claims, resumed=True)
        return [op.id for op in ops]

    def _claim_all(self, op_ids: list[str]) -> None:
        """All or nothing: claims every operation, or releases those taken and raises ClaimHeld."""
        taken: list[str] = []
        try:
            for op_id in op_ids:
                self._claim(op_id)
                taken.append(op_id)
        except BaseException:
            for op_id in taken:
                with self._lock:
                    token = self._tokens.pop(op_id)
                self.store.release_claim(op_id, token)
            raise

    def cancel(self, op_id: str) -> None:
        with self._lock:
            event = self._active.get(op_id)
            wake = self._wakes.get(op_id)
        if event is not None:
            event.set()
        if wake is not None:
            wake.set()

    def stop(self, *, timeout: float | None = None) -> None:
        """SIGTERM: finish the current step, persist, and stop (running ops resume on restart)."""
        self._stopping.set()
        with self._lock:
            for event in self._active.values():
                event.set()
            for wake in self._wakes.values():
                wake.set()
        self._pool.shutdown(wait=timeout is None or timeout > 0)
        self._evictions.shutdown(wait=False)
        if self._adaptive_pool is not None:
            self._adaptive_pool.shutdown(wait=False)

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: not self._active, timeout=timeout)

    def is_running(self, op_id: str) -> bool:
        with self._lock:
            return op_id in self._active

    # -- the loop --------------------------------------------------------------------------------

    def _run(self, op_id: str, resumed: bool) -> None:
        with log_context.bind(operation=op_id):
            self._run_bound(op_id, resumed)

    def _run_bound(self, op_id: str, resumed: bool) -> None:
        token: int | None = None
        try:
            token = self._tokens.get(op_id) or self._wait_for_claim(op_id)
            if token is None:
                return  # stopped or cancelled while another runner still held it
            self._journal_start(op_id, token, resumed=resumed)
            self._loop(op_id, token)
        except Fenced as exc:
            token = None  # no longer ours: nothing to release
            why = f"{exc}: this runner stopped without writing anything more"
            log.error("%s", why, extra={"operation": op_id})
            with self._lock:
                self.handed_over[op_id] = why
        except StoreError as exc:
            self._fault(op_id, exc)
        except Exception:  # the runner's one catch-all: log, fail visibly, never lose the row
            log.exception("operation failed unexpectedly", extra={"operation": op_id})
            op = self._safe_get(op_id)
            if op is not None and op.state is OpState.RUNNING and token is not None:
                failed = StepResult(
                    state=OpState.FAILED,
                    error="internal error (see scalebot's log)",
                    events=[("final", "Failed: internal error (see scalebot's log)", "")],
                )
                try:
                    failed = self._give_back_nodes(op, failed)
                except Exception:  # the failure must still be recorded; the message says nothing was undone
                    log.exception("could not uncordon after a failure", extra={"operation": op_id})
                try:
                    self._persist(op, failed)
                except Fenced:
                    token = None
                except StoreError as exc:
                    self._fault(op_id, exc)
        finally:
            if token is not None:
                try:
                    self.store.release_claim(op_id, token)
                except StoreError as exc:  # it lapses on its own after CLAIM_TTL_SECONDS
                    log.warning("could not release the claim: %s", exc, extra={"operation": op_id})
            self._forget(op_id)

    def _journal_start(self, op_id: str, token: int, *, resumed: bool) -> None:
        first = self.store.get_operation(op_id)
        if first is not None and first.state is OpState.RUNNING and (resumed or not first.step):
            event, detail = ("resumed", "resumed after a restart") if resumed else ("started", "")
            with self.store.fenced(op_id, token):
                self.store.journal(
                    op_id,
                    at=self.clock.now(),
                    step=first.step or first_step(first),
                    event=event,
                    detail=detail,
                    runner=self.identity.owner,
                )

    def _loop(self, op_id: str, token: int) -> None:
        while True:
            # The claim first: a runner that lost it must not even read the operation as its own.
            claim = self.store.runner_claim(op_id)
            if op_id in self._lost or claim is None or claim.token != token:
                raise Fenced(f"operation {op_id} was claimed by another runner")
            op = self.store.get_operation(op_id)
            if op is None or op.state is not OpState.RUNNING:
                return
            log_context.add(cluster=op.target.cluster)
            cancel = self._active[op_id]
            wake = self._wakes[op_id]
            # Cleared before cancel is read: `cancel()` sets cancel first, then the wake.
            wake.clear()
            if not self.may_act():
                log.error(
                    "no longer the active instance: operation stopped before step %s; "
                    "the instance that leads now resumes it",
                    op.step or first_step(op),
                    extra={"operation": op_id},
                )
                return
            if cancel.is_set():
                if self._stopping.is_set():
                    return  # shutting down: the operation resumes from this step on restart
                self._cancel(op)
                return
            result = self._step(op)
            if result.state is OpState.FAILED:
                result = self._give_back_nodes(op, result)
            op = self._persist(op, result)
            if op.step != "drain" or op.state is not OpState.RUNNING:
                self._close_feed(op_id)
            if op.state is not OpState.RUNNING:
                return
            if result.wait > 0 and not cancel.is_set():
                self.clock.wait(wake, result.wait)

    # -- claims ----------------------------------------------------------------------------------

    def held_elsewhere(self, op_id: str) -> RunnerClaim | None:
        """The live claim of another runner (another process) on the operation, if any."""
        claim = self.store.runner_claim(op_id)
        if claim is None or not claim.nonce or claim.nonce == self.identity.nonce:
            return None
        fresh = (self.clock.now() - claim.heartbeat_at).total_seconds() < CLAIM_TTL_SECONDS
        return claim if fresh and not self._gone(claim) else None

    def _gone(self, claim: RunnerClaim) -> bool:
        # Same host: a pid that no longer runs (or is ours, reused after a restart) is dead.
        me = self.identity
        return claim.host == me.host and (claim.pid == me.pid or not _pid_alive(claim.pid))

    def _claim(self, op_id: str) -> int:
        token = self.store.claim_operation(
            op_id, self.identity, now=self.clock.now(), ttl_seconds=CLAIM_TTL_SECONDS, gone=self._gone
        )
        with self._lock:
            self._tokens[op_id] = token
            self._lost.discard(op_id)
            if self._heartbeat is None:
                self._beat.clear()
                self._heartbeat = threading.Thread(target=self._heartbeats, name="op-claims", daemon=True)
                self._heartbeat.start()
        return token

    def _wait_for_claim(self, op_id: str) -> int | None:
        cancel = self._active[op_id]
        warned = False
        while not cancel.is_set():
            try:
                return self._claim(op_id)
            except ClaimHeld as exc:
                if not warned:
                    log.warning("%s; waiting for it", exc, extra={"operation": op_id})
                    warned = True
            self.clock.wait(cancel, CLAIM_POLL_SECONDS)
        return None

    def _heartbeats(self) -> None:
        """Renew this runner's claims while it may act; note those another runner took over."""
        while True:
            with self._lock:
                tokens = dict(self._tokens)
                if not tokens:
                    self._heartbeat = None
                    return
                self._beat.clear()
            if self.may_act():
                try:
                    lost = self.store.renew_claims(tokens, now=self.clock.now())
                except StoreError as exc:  # the operation's own next write reports it
                    log.warning("could not renew operation claims: %s", exc)
                    lost = set()
                with self._lock:
                    for op_id in lost:
                        self._lost.add(op_id)
                        if op_id in self._active:
                            self._active[op_id].set()
            # Real time, not the runner's clock: a virtual clock must not race ahead here.
            self._beat.wait(CLAIM_TTL_SECONDS / 3)

    def _fenced_handle(self, op_id: str, h: ClusterHandle) -> ClusterHandle:
        """The cluster as this operation's steps see it: every Kubernetes write checks the claim
        first (engine.operations.fence), so a runner that lost it stops before its next write."""
        token = self._tokens.get(op_id)

        def check() -> None:
            if not self.may_act():
                raise Fenced(f"operation {op_id}: this instance may no longer act, so it writes nothing")
            claim = self.store.runner_claim(op_id)
            if op_id in self._lost or claim is None or claim.token != token:
                raise Fenced(f"operation {op_id} was claimed by another runner")

        return replace(
            h,
            api=FencedKubeApi(h.api, check),
            pools=FencedPools(h.pools, check),
            workloads=h.workloads.through(lambda api: FencedWorkloadApi(api, check)) if h.workloads else None,
        )

    def pod_feed(self, op_id: str, api: KubeApi, nodes: Collection[str]) -> PodFeed:
        """The operation's pod feed for these nodes (a new one when the nodes changed)."""
        with self._lock:
            feed = self._feeds.get(op_id)
            if feed is not None and feed.nodes == frozenset(nodes):
                return feed
            wake = self._wakes.get(op_id) or threading.Event()
            self._feeds[op_id] = PodFeed(api, nodes, on_change=wake.set, name=f"pod-watch-{op_id}")
        if feed is not None:
            feed.close()
        return self._feeds[op_id]

    def eviction_gate(self, h: ClusterHandle) -> AdaptiveGate | None:
        """The cluster's adaptive eviction limit (None when the settings turn it off)."""
        if not self.settings.adaptive_evictions:
            return None
        with self._lock:
            gate = self._gates.get(h.name)
            if gate is None:
                initial = max(2, self.settings.parallel_evictions)
                settings = AimdSettings(
                    initial=min(initial, self.settings.max_parallel_evictions),
                    maximum=max(initial, self.settings.max_parallel_evictions),
                )
                limited = h.api if isinstance(h.api, RateLimitedApi) else None
                burst = limited.burst if limited is not None else None
                if burst is not None:
                    settings = settings.bounded(burst)
                queued = limited.last_wait_seconds if limited is not None else None
                gate = AdaptiveGate(AimdController(settings), self.clock.monotonic, queued)
                self._gates[h.name] = gate
            return gate

    def _close_feed(self, op_id: str) -> None:
        with self._lock:
            feed = self._feeds.pop(op_id, None)
        if feed is not None:
            feed.close()

    def _forget(self, op_id: str) -> None:
        self._close_feed(op_id)
        with self._idle:
            self._wakes.pop(op_id, None)
            self._active.pop(op_id, None)
            self._tokens.pop(op_id, None)
            self._lost.discard(op_id)
            if not self._tokens:
                self._beat.set()  # the heartbeat thread ends now rather than at its next beat
            self._idle.notify_all()

    def _fault(self, op_id: str, exc: StoreError) -> None:
        step = (op.step if (op := self._safe_get(op_id)) is not None else "") or "its first step"
        why = f"operation {op_id} stopped at {step}: {exc}; it resumes from there at the next start"
        log.error("%s", why, extra={"operation": op_id})
        with self._lock:
            self.faults[op_id] = why

    def _safe_get(self, op_id: str) -> Operation | None:
        try:
            return self.store.get_operation(op_id)
        except StoreError:
            return None

    def _step(self, op: Operation) -> StepResult:
        handle = self._fenced_handle(op.id, self.clusters[op.target.cluster])
        step = op.step or first_step(op)
        fn = _STEPS[step]
        failures = op.progress.step_failures
        try:
            result = fn(self, replace(op, step=step), handle)
        except ScalebotError as exc:
            if exc.category not in RETRIED:
                raise
            # Exponential backoff with jitter (5 s, 10 s, then 15 s), so a recovering API server
            # is not hit in step.
            failures += 1
            wait = min(STEP_RETRY_CAP_SECONDS, STEP_RETRY_SECONDS * 2 ** (failures - 1)) * random.uniform(
                0.8, 1.2
            )
            log.warning(
                "step %s failed (attempt %d), will retry in %.0fs: %s",
                step,
                failures,
                wait,
                exc,
                extra={"operation": op.id},
            )
            return StepResult(
                wait=wait,
                progress=replace(op.progress, last_error=str(exc), step_failures=failures),
            )
        if failures:
            result.progress = replace(result.progress or op.progress, step_failures=0)
        return result

    def _persist(self, op: Operation, result: StepResult) -> Operation:
        """Save the step's result, its journal row and (when it ended) the released locks in one
        transaction fenced by this runner's claim; then emit its events."""
        now = self.clock.now()
        step = step_after(op, op.step or first_step(op), result.then)
        new = replace(
            op,
            step=step,
            progress=result.progress or op.progress,
            state=result.state or op.state,
            updated_at=now,
            summary=result.summary or op.summary,
            error=result.error or op.error,
        )
        with self.store.fenced(op.id, self._tokens[op.id]):
            if not self.store.save_progress(new):  # also releases the locks of a final state
                # Compare-and-set lost: a cancel ended the operation first. Its state stands;
                # returning it (not running) ends this loop without emitting anything.
                return self.store.get_operation(op.id) or op
            if step != op.step or result.state:
                self.store.journal(
                    op.id,
                    at=now,
                    step=step,
                    event=(result.state or OpState.RUNNING).value,
                    detail=result.events[-1][1] if result.events else "",
                    runner=self.identity.owner,
                )
        for kind, text, condition in result.events:
            self.emit(
                ProgressEvent(operation=new, kind=kind, text=text, condition=condition, final=kind == "final")
            )
        return new

    def _give_back_nodes(self, op: Operation, result: StepResult) -> StepResult:
        """A drain that failed or was cancelled uncordons (and untaints) the nodes it cordoned, and says so.

        cluster-autoscaler and Karpenter do the same when a scale-down fails: a node left cordoned
        and tainted by nobody's decision is capacity lost until someone notices. Nodes that were
        cordoned before the operation stay cordoned (only our taint goes), and the message names
        them. After the drain (remove, verify) the nodes are being removed: nothing to give back.
        """
        progress = result.progress or op.progress
        state = progress.drain.state
        if op.step not in ("cordon", "drain"):
            return result
        handle = self._fenced_handle(op.id, self.clusters[op.target.cluster])
        unmarked = take_back_marks(handle, op)
        if state is None:
            if not unmarked:
                return result
            uncordoned: Sequence[str] = ()
            kept: list[str] = []
        else:
            uncordoned = drain.uncordon_nodes(
                handle.api, drained_nodes(op), keep_cordoned=state.already_cordoned, executor=self._evictions
            )
            kept = sorted(state.already_cordoned & set(drained_nodes(op)))
        note = release_note(uncordoned, kept, unmarked)
        events = list(result.events)
        if events and events[-1][0] == "final":
            kind, text, condition = events[-1]
            events[-1] = (kind, f"{text}\n{note}", condition)
        else:
            events.append(("final", f"Failed: {result.error}\n{note}", ""))
        released = Released(uncordoned=tuple(uncordoned), kept_cordoned=tuple(kept))
        progress = replace(progress, drain=replace(progress.drain, released=released))
        return replace(result, events=events, progress=progress)

    def _cancel(self, op: Operation) -> None:
        cancelled = self._give_back_nodes(
            op, StepResult(state=OpState.CANCELLED, events=[("final", "Cancelled", "")])
        )
        self._persist(op, cancelled)


def take_back_marks(h: ClusterHandle, op: Operation) -> tuple[str, ...]:
    """The machines whose deletion marks (written by `prepare_removal` at cordon) were taken back.

    cluster-autoscaler clears its marks when a scale-down fails: a mark left behind would make the
    next scale-down, whoever asks for it, remove that machine first. A provider that cannot take
    its marks back now (API error) is logged; the failure or cancel itself still goes on.
    """
    if not isinstance(h.pools, TakesBackRemoval):
        return ()
    nodes = set(drained_nodes(op))
    unmarked: list[str] = []
    for change in op.plan.pools:
        chosen = [n for n in change.nodes_to_remove if n in nodes]
        if not chosen:
            continue
        try:
            unmarked.extend(h.pools.cancel_removal(change.pool, chosen))
        except Exception:  # the operation must still end; the marks are named in the log
            log.exception("could not take back the deletion marks of pool %s", change.pool)
    return tuple(unmarked)


def release_note(uncordoned: Sequence[str], kept: Sequence[str], unmarked: Sequence[str] = ()) -> str:
    """What a failed or cancelled operation left of its cordons, and how to undo what stays."""
    parts = []
    if unmarked:
        parts.append(f"Took back the deletion marks this operation put on: {', '.join(unmarked)}.")
    if uncordoned:
        parts.append(f"Uncordoned the nodes this operation cordoned: {', '.join(uncordoned)}.")
    if kept:
        names = " ".join(kept)
        parts.append(
            f"Still cordoned, as they were before this operation: {', '.join(kept)} "
            f"(`scalebot uncordon {names}` or `kubectl uncordon {names}` undoes it)."
        )
    return " ".join(parts) or "No node was left cordoned."


def drained_nodes(op: Operation) -> tuple[str, ...]:
    """The nodes the operation cordons and drains: the plan's, and those that joined a pool
    going to zero while it ran (a zero-scale drains them too rather than leave them running).
    A consolidation drains one node at a time: the one its last fit check chose."""
    if op.kind is OpKind.CONSOLIDATE:
        current = op.progress.consolidation.current
        return (current,) if current else ()
    joined = op.progress.removal.joined
    return tuple(sorted({*op.plan.nodes, *(n for names in joined.values() for n in names)}))


# -- steps -----------------------------------------------------------------------------------------


def records_restore(op: Operation) -> bool:
    """Only a zero-scale or a scheduled sleep records what wake comes back to.

    A deliberate scale is the size the user chose: recording it (or keeping the day-time size
    over it) would make a later zero-and-wake restore a size nobody asked for.
    """
    return op.kind is OpKind.ZERO or op.requested_by.startswith("schedule:")


def ends_sleep(op: Operation) -> bool:
    """A deliberate scale (up or down) ends the pool's sleep: wake then keeps the size chosen.

    After `zero`, `scale web 2` is a person waking web by hand at the size they chose; a later
    `wake` restoring the night's record would undo that choice (the rule of `records_restore`,
    seen from the other side). A later zero-scale records afresh.
    """
    return op.kind is OpKind.SCALE and not records_restore(op)


def _clear_restore(runner: Runner, op: Operation, h: ClusterHandle) -> None:
    for change in op.plan.pools:
        h.pools.clear_restore(change.pool)
        runner.store.clear_restore(h.name, change.pool)


def step_record(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    for change in op.plan.pools:
        if change.after >= change.before or not records_restore(op):
            continue
        _record_restore(runner, op, h, h.pools.get_pool(change.pool))
    text = (
        f"Recorded sizes to restore: {op.plan.summary()}"
        if records_restore(op)
        else f"Scaling as chosen (wake restores what a zero-scale records): {op.plan.summary()}"
    )
    return StepResult(then=NEXT, events=[("phase", text, "")])


def _record_restore(runner: Runner, op: Operation, h: ClusterHandle, pool: Pool) -> None:
    now = runner.clock.now()
    record = RestoreRecord(
        desired=pool.desired,
        min_size=pool.min_size,
        max_size=pool.max_size,
        recorded_at=now,
        operation_id=op.id,
    )
    h.pools.record_restore(pool.name, record)
    runner.store.record_restore(
        StoredRestore(h.name, pool.name, pool.desired, pool.min_size, pool.max_size, now, op.id, {})
    )


def step_cordon(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    now = runner.clock.now()
    nodes = drained_nodes(op)
    for change in op.plan.pools:
        chosen = [n for n in change.nodes_to_remove if n in nodes]
        if chosen:
            h.pools.prepare_removal(change.pool, chosen)
    saved = op.progress.drain.state
    already = drain.cordon_nodes(h.api, nodes, now=now, executor=runner._evictions)
    _record_displaced(runner, op, h, nodes)
    for node in nodes:
        ref = kube_events.ObjectRef.node(node)
        h.events.record(ref, reason=kube_events.CORDONED, message=f"Cordoned by scalebot (operation {op.id})")
        h.events.record(ref, reason=kube_events.DRAINING, message=f"Draining Node (operation {op.id})")
    if saved:
        # A repeat (after a crash, or for nodes that joined a pool going to zero): keep the drain's
        # history; a node cordoned by someone else before we reached it stays theirs.
        state = replace(saved, already_cordoned=saved.already_cordoned | already)
    else:
        state = drain.DrainState(started_at=now, already_cordoned=already)
    n = len(nodes)
    return StepResult(
        then=NEXT,
        progress=replace(op.progress, drain=replace(op.progress.drain, state=state, phase1_started_at=now)),
        events=[("phase", f"Cordoned {n} node{'s' if n != 1 else ''}; draining", "")],
    )


def _record_displaced(runner: Runner, op: Operation, h: ClusterHandle, nodes: Sequence[str]) -> None:
    """Before a sleep drains its nodes (cordoned: no new pod lands), keep which workloads have pods
    on them: its wake follows exactly those, with the workloads it scales back, and no other."""
    if not records_restore(op):
        return
    pool_of = {n: c.pool for c in op.plan.pools if c.after < c.before for n in c.nodes_to_remove}
    pool_of.update({n: pool for pool, names in op.progress.removal.joined.items() for n in names})
    emptied = [n for n in nodes if n in pool_of]
    if not emptied:
        return
    now = runner.clock.now()
    for pool, keys in returning.displaced_by(pool_of, h.api.list_pods(node_names=emptied)).items():
        runner.store.record_displaced(h.name, pool, keys, op_id=op.id, at=now)


def _drain_state(op: Operation) -> drain.DrainState:
    """The drain's state, which the cordon step writes before any step that reads it."""
    state = op.progress.drain.state
    if state is None:
        raise RuntimeError(f"operation {op.id} reached {op.step} without a drain state")
    return state


def _options(op: Operation) -> filters.DrainOptions:
    if op.kind is OpKind.DRAIN:
        return replace(
            filters.DrainOptions.kubectl(
                force=op.target.force, ignore_daemonsets=True, delete_emptydir_data=True
            ),
            disable_eviction=op.target.disable_eviction,
        )
    return filters.DrainOptions.machine(
        opt_outs_wait=op.plan.force_phase, evict_opt_outs=op.target.force and not op.plan.force_phase
    )


def _scoped_filters(op: Operation) -> tuple[filters.PodFilter, ...] | None:
    """A forced run removes only what its approval covers: the scope guard runs first and refuses
    a Pod the plain drain refuses that the scope does not cover. (A plan saved without a scope
    covers nothing: the run then removes nothing a plain drain refuses.)"""
    if not (op.target.force or op.plan.force_phase or op.plan.forcing):
        return None
    scope = op.plan.force_scope or force_scope.ForceScope()
    plain = force_rules.plain_drain(opt_outs_wait=op.plan.force_phase)
    return (force_rules.scope_guard(scope, plain), *filters.default_filters())


def step_drain(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    now = runner.clock.now()
    state = _drain_state(op)

    def progress(answered: int, due: int) -> None:
        # The status line only (a "report" without a condition): no thread reply, and the Slack
        # sender coalesces these into its per-message update interval.
        text = f"Evicting Pods: {answered:,} of {due:,} answered"
        runner.emit(ProgressEvent(operation=op, kind="report", text=text, condition=""))

    # Cluster API's nodeDrainTimeout: past a pool's timeout its nodes stop draining and their
    # Machines are removed with what is left on them; the thread says so once per pool.
    stopped, reported, timeout_events = _drain_timeouts(op, state.started_at, now)
    nodes = drained_nodes(op)
    feed = runner.pod_feed(op.id, h.api, nodes)
    result = drain.run_pass(
        h.api,
        nodes=[n for n in nodes if n not in stopped],
        state=state,
        options=_options(op),
        pod_filters=_scoped_filters(op),
        now=now,
        executor=runner._adaptive_pool or runner._evictions,
        gate=runner.eviction_gate(h),
        on_progress=progress,
        one_at_a_time=op.plan.one_at_a_time,
        pods_of=feed.pods,
        clock=runner.clock.now,
    )
    # The feed wakes the runner once the pods left terminating are gone (the tail of a drain).
    feed.await_gone(result.awaiting)
    message = result.report.condition_message(h.drain_report)
    drained = drain_progress.after_pass(
        replace(op.progress.drain, timeouts_reported=tuple(reported)),
        nodes=nodes,
        state=result.state,
        report=result.report,
        busy_nodes=result.busy_nodes,
        now=now,
    )
    events: list[tuple[ProgressKind, str, str]] = list(timeout_events)
    if message != op.progress.drain.last_message:
        drained = replace(drained, last_message=message)
        events.append(("report", result.report.summary_line(), message))
    data = replace(op.progress, drain=drained)
    # An empty node settles like a drained one (from the drain's start when nothing was evicted).
    # (From the latest cordon, too: nodes that joined a pool going to zero settle like the others.)
    started = op.progress.drain.phase1_started_at or state.started_at
    # Phase 2 is withdrawn when "every pool goes to zero" no longer holds as it would start.
    forcing = op.plan.force_phase and not op.progress.drain.force_withdrawn
    timeout = runner.settings.drain_timeout
    deadline: datetime | None = None
    if forcing:
        deadline = started + runner.settings.graceful_window
    elif timeout is not None:
        deadline = state.started_at + timeout
    decision = next_pass(
        runner.settings.pacing,
        PassFacts(
            now=now,
            completed=result.report.completed,
            settled_from=max(state.started_at, started, result.state.last_eviction_at or state.started_at),
            next_retry_at=result.wake_at(watched=feed.live),
            deadline=deadline,
        ),
    )
    refused = result.state.failed_nodes
    if refused and not forcing:
        # No retry changes a refusal like this one: fail now with the reason (kubectl exits 1)
        # rather than wait out the timeout. A full zero-scale leaves such nodes to phase 2.
        error = "; ".join(f"node {node}: {reason}" for node, reason in sorted(refused.items()))
        _record_nodes(h, op, kube_events.DRAIN_FAILED, f"{error} (operation {op.id})", warning=True)
        return StepResult(
            progress=data,
            state=OpState.FAILED,
            error=error,
            events=[*events, ("final", f"Failed: {error}", message)],
        )
    if decision.done and not refused:
        events.append(("phase", result.report.summary_line(), ""))
        _record_nodes(h, op, kube_events.DRAINED, f"Drain completed (operation {op.id})")
        if op.kind is OpKind.DRAIN:  # draining was the whole operation
            return StepResult(
                progress=data,
                state=OpState.SUCCEEDED,
                events=[*events, _final(op, data, now)],
                summary=_summary(op, data, now),
            )
        return StepResult(then="drained", progress=data, events=events)
    if forcing and decision.deadline_reached:
        withdrawn = _why_not_force(op, h, now)
        if withdrawn:
            # Another pool woke or grew during phase 1: forcing now would kill pods the cluster
            # still runs elsewhere for. Fall back to the standard drain (its timeout applies).
            data = replace(data, drain=replace(data.drain, force_withdrawn=withdrawn))
            text = f"Phase 2 withdrawn: {withdrawn}; draining without force"
            return StepResult(progress=data, wait=0.5, events=[*events, ("phase", text, "")])
        events.append(
            (
                "phase",
                f"Phase 1 ended after {format_duration(now - started)}: "
                "remaining Pods will be deleted with grace 0",
                "",
            )
        )
        return StepResult(then=NEXT, progress=data, events=events)  # phase 2
    if not forcing and timeout is not None and decision.deadline_reached:
        error = f"drain did not complete within {format_duration(timeout)}"
        _record_nodes(h, op, kube_events.DRAIN_FAILED, f"{error} (operation {op.id})", warning=True)
        return StepResult(
            progress=data,
            state=OpState.FAILED,
            error=error,
            events=[*events, ("final", f"Failed: {error}\n{message}", message)],
        )
    # From the clock after the pass: a pass that evicted for minutes has used up part of the wait.
    return StepResult(progress=data, wait=decision.wait_seconds(runner.clock.now()), events=events)


def _drain_timeouts(
    op: Operation, started: datetime, now: datetime
) -> tuple[set[str], list[str], list[tuple[ProgressKind, str, str]]]:
    """Nodes whose pool's nodeDrainTimeout expired, the pools reported so far, and new events."""
    expired: list[PoolChange] = [
        c
        for c in op.plan.pools
        if c.drain_timeout_seconds and now >= started + timedelta(seconds=c.drain_timeout_seconds)
    ]
    reported = list(op.progress.drain.timeouts_reported)
    events: list[tuple[ProgressKind, str, str]] = []
    for change in expired:
        if change.pool not in reported:
            reported.append(change.pool)
            seconds = format_seconds(change.drain_timeout_seconds or 0)
            text = (
                f"pool {change.pool}: nodeDrainTimeout {seconds} expired; continuing as Cluster API "
                "does: its nodes are removed with the Pods still on them"
            )
            events.append(("phase", text, ""))
    return {n for change in expired for n in change.nodes_to_remove}, reported, events


def _why_not_force(op: Operation, h: ClusterHandle, now: datetime) -> str:
    """Re-check, as phase 2 would start, that every pool still goes to zero; "" when it does."""
    planned = {c.pool for c in op.plan.pools}
    awake = sorted(
        f"{p.name} ({p.desired})" for p in h.pools.list_pools() if p.name not in planned and p.desired > 0
    )
    if awake:
        return f"pool(s) not going to zero since the plan: {', '.join(awake)}"
    return _pool_less_refuge(op, h, now)


CONTROL_PLANE_KEYS = frozenset({"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"})


def _pool_less_refuge(op: Operation, h: ClusterHandle, now: datetime) -> str:
    """Nodes in no pool where a pod phase 2 would delete could still run; "" when there are none.

    Phase 2 forces because the whole cluster goes away and no pod can go anywhere. A node that
    belongs to no pool stays; if a remaining pod could run there, the standard drain can move it.
    Counted: Ready, schedulable nodes that are not control-plane nodes (workloads are not moved
    there, whatever they tolerate), where the scheduler model (engine.planning.placement) places the pod.
    Nodes no remaining pod fits on (another team's, by their selectors) do not stop phase 2.
    """
    if not isinstance(h.api, SchedulingApi):
        return ""  # the in-memory cluster has no scheduling fields: nothing to model
    in_pools = {n for p in h.pools.list_pools() for n in (*p.nodes, *p.emptied)}
    leaving = set(drained_nodes(op)) | in_pools
    refuges = [raw for raw in h.api.list_nodes_json() if _is_refuge(raw, leaving)]
    if not refuges:
        return ""
    ctx = filters.DrainContext(
        options=filters.DrainOptions.machine(evict_opt_outs=True),
        now=now,
        daemonset_keys=h.api.list_daemonset_keys(),
    )
    remaining = {
        p.key
        for p, v in filters.classify_pods(h.api.list_pods(node_names=sorted(drained_nodes(op))), ctx)
        if v.action is not filters.Action.SKIP and not p.is_terminating
    }
    if not remaining:
        return ""
    bound = [placement.pod_from_raw(raw) for raw in h.api.list_bound_pods_json()]
    fits = placement.place(
        [placement.node_from_raw(raw) for raw in refuges],
        [p for p in bound if p.key not in remaining],
        [p for p in bound if p.key in remaining],
    ).assignments
    if not fits:
        return ""
    where = ", ".join(f"{pod} → {node}" for pod, node in sorted(fits.items())[:5])
    more = f" and {len(fits) - 5} more" if len(fits) > 5 else ""
    return f"nodes in no pool could still run {len(fits)} of the remaining Pods ({where}{more})"


def _is_refuge(raw: Mapping[str, Any], leaving: set[str]) -> bool:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    if meta.get("name") in leaving or spec.get("unschedulable") or meta.get("deletionTimestamp"):
        return False
    if CONTROL_PLANE_KEYS & set(meta.get("labels") or {}):
        return False
    if any(t.get("key") in CONTROL_PLANE_KEYS for t in spec.get("taints") or ()):
        return False
    ready = [c for c in status.get("conditions") or () if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True"


def step_force(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Phase 2: delete what is left with grace 0 (PDBs cannot block a DELETE); record each pod.

    The audit row of a pod is written before its DELETE is sent (write-ahead): a crash between the
    DELETE and its answer loses neither the record nor the pod in the final report. Only pods
    scalebot deleted count as force-deleted: those whose DELETE the server accepted (a second audit
    row), and, after a restart, those gone unconfirmed that nothing else was deleting (no
    deletionTimestamp when the intent was written). A pod that was already terminating may have
    finished by itself: it is named, not counted.
    """
    now = runner.clock.now()
    state = _drain_state(op)
    failures = {uid: f.key for uid, f in state.failures.items()}
    ctx = filters.DrainContext(
        # Phase 2 removes everything left, opt-outs included: that is what its approval was for.
        options=filters.DrainOptions.machine(evict_opt_outs=True),
        now=now,
        daemonset_keys=h.api.list_daemonset_keys(),
    )
    remaining = [
        p
        for p, v in filters.classify_pods(h.api.list_pods(node_names=list(drained_nodes(op))), ctx)
        if v.action is not filters.Action.SKIP
    ]

    def why(pod: Any) -> str:
        return failures.get(pod.uid) or (
            "still terminating" if pod.is_terminating else "not evicted in phase 1"
        )

    remaining, outside, left = _within_scope(op, h, remaining)
    if outside:
        return _outside_scope(op, [(p, reason, why(p)) for p, reason in outside])
    rows = runner.store.audit_rows(op_id=op.id)
    intents = [r.detail for r in rows if r.action == "force_delete_pod"]
    audited = {d.split(" ", 1)[0] for d in intents}
    # Intents of pods already terminating (something else was deleting them), by key.
    self_going = {d.split(" ", 1)[0] for d in intents if " terminating=true " in d}
    confirmed = {r.detail.split(" ", 1)[0] for r in rows if r.action == FORCE_DELETED_ACTION}
    for pod in remaining:
        if pod.key not in audited:  # else written by an attempt that crashed before its DELETE
            runner.store.audit(
                at=runner.clock.now(),
                actor="scalebot",
                action="force_delete_pod",
                op_id=op.id,
                cluster=h.name,
                detail=f"{pod.key} uid={pod.uid} grace=0 terminating={str(pod.is_terminating).lower()} "
                f"reason={why(pod)}",
            )

    def record(pod: Any) -> None:
        # The server accepted this DELETE: only such pods count as force-deleted.
        runner.store.audit(
            at=runner.clock.now(),
            actor="scalebot",
            action=FORCE_DELETED_ACTION,
            op_id=op.id,
            cluster=h.name,
            detail=f"{pod.key} uid={pod.uid}",
        )
        h.events.record(
            kube_events.ObjectRef.pod(pod.namespace, pod.name, pod.uid),
            reason=kube_events.FORCE_DELETED,
            message=f"Deleted with grace 0 in phase 2 of operation {op.id}: {why(pod)}",
            type="Warning",
        )

    forced = drain.force_delete_pods(h.api, remaining, executor=runner._evictions, on_deleted=record)
    # Force-deleted: the pods whose DELETE the server accepted, in this attempt or an earlier one,
    # and those an interrupted attempt meant to delete, gone unconfirmed, that nothing else was
    # deleting. One that was already terminating may have finished by itself: named, not counted.
    previous = list(op.progress.drain.force_deleted)
    gone = audited - confirmed - {p.key for p in remaining}
    keys = sorted({*previous, *confirmed, *(p.key for p in forced), *(gone - self_going)})
    unconfirmed = sorted(gone - set(keys))
    text = f"Phase 2: force-deleted {len(keys)} Pod{'s' if len(keys) != 1 else ''} with grace 0"
    if keys:
        text += ": " + ", ".join(keys[:10]) + (f", ... ({len(keys) - 10} more)" if len(keys) > 10 else "")
    if left:
        text += f"; left to terminate by themselves (outside the approved scope): {', '.join(left[:10])}"
    # The figures: the pods phase 1 had not evicted are gone now (counted once: the force-deleted
    # pods that were terminating were already counted as evicted); what is left terminates alone.
    drained = op.progress.drain
    forced_progress = replace(
        drained,
        force_deleted=tuple(keys),
        pods_forced=drained.pods_forced + drained.pods_remaining,
        pods_remaining=0,
        pods_terminating=len(left),
        busy_nodes=drained.busy_nodes if left else (),
        blocking=(),
    )
    if unconfirmed:
        forced_progress = replace(forced_progress, force_unconfirmed=tuple(unconfirmed))
        text += (
            "; not counted (already terminating, gone before a restart could confirm scalebot's "
            f"DELETE): {', '.join(unconfirmed[:10])}"
        )
    return StepResult(
        then=NEXT, progress=replace(op.progress, drain=forced_progress), events=[("phase", text, "")]
    )


def _within_scope(
    op: Operation, h: ClusterHandle, remaining: Sequence[Any]
) -> tuple[list[Any], list[tuple[Any, str]], list[str]]:
    """Split what phase 2 would delete by the approved force scope: (pods it covers, pods outside
    it with why, outside pods already terminating, which are left to end by themselves).

    A finished Pod holds no work and is always deleted. (A plan saved without a scope covers
    nothing: every running Pod is then outside it.)"""
    scope = op.plan.force_scope or force_scope.ForceScope()
    index = PdbIndex(h.api.list_pdbs())
    covered: list[Any] = []
    outside: list[tuple[Any, str]] = []
    left: list[str] = []
    for pod in remaining:
        reason = "" if pod.is_finished else scope.outside(pod, [b.key for b in index.for_pod(pod)])
        if not reason:
            covered.append(pod)
        elif pod.is_terminating:
            left.append(pod.key)
        else:
            outside.append((pod, reason))
    return covered, outside, left


def _outside_scope(op: Operation, outside: Sequence[tuple[Any, str, str]]) -> StepResult:
    """Phase 2 met Pods its approval does not cover: it force-deletes none of them (nor the
    covered ones: the nodes could not be removed anyway) and fails, saying what appeared and
    what each choice means. A new request re-plans with them on its card, for a new approval."""
    lines = [
        f"{pod.key} (owner {force_scope.unit_of(pod)}; blocks: {blocks}; {reason})"
        for pod, reason, blocks in outside[:20]
    ]
    more = f"; ... ({len(outside) - 20} more)" if len(outside) > 20 else ""
    n = len(outside)
    error = (
        f"phase 2 stopped: {n} Pod{'s' if n != 1 else ''} appeared after the approval, outside the "
        f"approved force scope: {'; '.join(lines)}{more}. Nothing was force-deleted and no node was "
        "removed; the nodes stay cordoned. To force-delete them too, request the operation again: "
        "its card lists them for a new approval. To give the nodes back, uncordon them or wake."
    )
    return StepResult(state=OpState.FAILED, error=error, events=[("final", f"Failed: {error}", "")])


FORCE_DELETED_ACTION = "force_deleted_pod"
"""Audit action written once the server accepted a phase-2 DELETE (after the write-ahead
"force_delete_pod" intent): what the force-deleted count is made of."""

MAX_JOIN_ROUNDS = 3
"""A pool going to zero that gains nodes again after this many rounds of draining the newcomers
has someone (an autoscaler) growing it: the operation fails rather than chase it for ever."""


def step_remove(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Remove the drained nodes and set each pool to its target; report pools that changed meanwhile.

    - A planned node that is already gone counts as removed (nothing to retry).
    - A pool going to zero that gained nodes during the operation: they are drained too (back to
      `cordon` with the newcomers), at most MAX_JOIN_ROUNDS times.
    - A pool whose size changed otherwise (an autoscaler, a person): the removal still sets the
      target size (Cluster API then deletes, and drains, the extra Machines itself); a provider
      that cannot shrink by a size (a label pool) makes the operation fail with the reason.
    """
    joined: dict[str, list[str]] = {k: list(v) for k, v in op.progress.removal.joined.items()}
    shrinking = [c for c in op.plan.pools if c.nodes_to_remove or c.after < c.before]
    again = _drain_newcomers(op, h, shrinking, joined)
    if again is not None:
        return again
    detaching = _wait_for_volume_detach(runner, op, h, shrinking)
    if detaching is not None:
        return detaching
    removed = emptied = 0
    notes: list[str] = []
    refused: dict[str, str] = {}
    events: list[tuple[ProgressKind, str, str]] = []
    for change in shrinking:
        nodes = sorted({*change.nodes_to_remove, *joined.get(change.pool, ())})
        if nodes:
            # The provider keeps the nodes of a pool it can only empty (see PoolChange.removal);
            # the plan said so, and the thread says it again.
            h.pools.remove_nodes(change.pool, nodes)
            if change.empties_only:
                emptied += len(nodes)
                events.append(("phase", emptied_not_removed(change).replace(" will be ", " were "), ""))
            else:
                removed += len(nodes)  # a node already gone counts as removed: nothing to retry
        pool = h.pools.get_pool(change.pool)
        if pool.desired == change.after:
            continue
        if nodes:
            notes.append(
                f"pool {change.pool} changed during the operation: planned {change.before} → "
                f"{change.after}, at {pool.desired} after removing the drained nodes"
            )
        if pool.desired < change.after:
            refused[change.pool] = "nodes left the pool during the operation; a scale-down adds none back"
            continue
        try:
            h.pools.set_size(change.pool, change.after)
        except PoolSizeError as exc:
            refused[change.pool] = str(exc)
    text = f"Removed {removed} node{'s' if removed != 1 else ''}"
    if emptied:
        text += f"; emptied {emptied} node{'s' if emptied != 1 else ''} without removing them"
    if notes:
        text += "; " + "; ".join(notes) + "; target size set"
    removal = replace(
        op.progress.removal, nodes_removed=removed, nodes_emptied=emptied, removed_at=runner.clock.now()
    )
    if notes:
        removal = replace(removal, pool_changes=_changes(op, notes))
    if refused:
        removal = replace(removal, target_refused=refused)
    return StepResult(
        then=NEXT,
        progress=replace(op.progress, removal=removal),
        events=[*events, ("phase", text, "")],
    )


def _drain_newcomers(
    op: Operation, h: ClusterHandle, shrinking: Sequence[PoolChange], joined: dict[str, list[str]]
) -> StepResult | None:
    """Nodes that joined a pool going to zero: back to `cordon` with them, or fail after
    MAX_JOIN_ROUNDS; None when no pool going to zero gained a node."""
    newcomers: dict[str, list[str]] = {}
    for change in shrinking:
        if change.after == 0 and change.nodes_to_remove:
            pool = h.pools.get_pool(change.pool)
            planned = {*change.nodes_to_remove, *joined.get(change.pool, ())}
            new = sorted(set(pool.nodes) - planned)
            if new:
                newcomers[change.pool] = new
    if not newcomers:
        return None
    rounds = op.progress.removal.join_rounds + 1
    what = "; ".join(f"{p}: {', '.join(n)}" for p, n in sorted(newcomers.items()))
    if rounds > MAX_JOIN_ROUNDS:
        error = f"pools kept gaining nodes while going to zero ({what}); is an autoscaler growing them?"
        return StepResult(state=OpState.FAILED, error=error, events=[("final", f"Failed: {error}", "")])
    for pool_name, names in newcomers.items():
        joined[pool_name] = sorted({*joined.get(pool_name, ()), *names})
    text = f"Nodes joined pools going to zero during the operation ({what}): draining them too"
    removal = replace(
        op.progress.removal,
        joined={pool: tuple(names) for pool, names in joined.items()},
        join_rounds=rounds,
        pool_changes=_changes(op, [text]),
    )
    return StepResult(
        then="nodes_joined", progress=replace(op.progress, removal=removal), events=[("phase", text, "")]
    )


def _changes(op: Operation, notes: Sequence[str]) -> tuple[str, ...]:
    return (*op.progress.removal.pool_changes, *notes)


def step_verify(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Every pool at its target, within `verify_timeout` of the removal; else fail with the reason."""
    now = runner.clock.now()
    wrong = []
    refused = op.progress.removal.target_refused
    waiting: list[str] = []
    pools = [h.pools.get_pool(change.pool) for change in op.plan.pools]
    followed, progress = _provider_progress(op, pools)
    for change, pool in zip(op.plan.pools, pools, strict=True):
        if pool.desired != change.after:
            why = f": {refused[change.pool]}" if change.pool in refused else ""
            wrong.append(f"pool {change.pool} is at {pool.desired}, expected {change.after}{why}")
        waiting.extend(_left_to_controller(change, pool))
        if pool.settling:
            wrong.append(f"pool {change.pool}: {pool.progress or 'its provider is still at work'}")
    events: list[tuple[ProgressKind, str, str]] = list(progress)
    if waiting:
        # Machines with pre-drain hooks: Cluster API runs the hooks, drains and deletes them.
        wrong.extend(waiting)
        text = "Waiting for Cluster API: " + "; ".join(waiting)
        if text != op.progress.removal.hooks_reported:
            events.append(("phase", text, ""))
    if not wrong:
        if ends_sleep(op):
            _clear_restore(runner, op, h)
        return StepResult(
            state=OpState.SUCCEEDED,
            events=[*progress, _final(op, op.progress, now)],
            summary=_summary(op, op.progress, now),
        )
    started = op.progress.removal.removed_at or now
    timeout = runner.settings.verify_timeout
    if any(c.pool in refused for c in op.plan.pools) or now >= started + timeout:
        # No wait changes a size the provider refused to set; others had their verify_timeout.
        error = "; ".join(wrong)
        if not refused:
            error += f" (after {format_duration(timeout)})"
        return StepResult(
            state=OpState.FAILED,
            progress=replace(op.progress, removal=replace(op.progress.removal, verify=tuple(wrong))),
            error=error,
            events=[("final", f"Failed: {error}", "")],
            summary=_summary(op, op.progress, now),
        )
    removal = replace(op.progress.removal, verify=tuple(wrong), removed_at=started)
    if waiting:
        removal = replace(removal, hooks_reported="Waiting for Cluster API: " + "; ".join(waiting))
    data = replace(op.progress, removal=removal, provider_progress=followed)
    return StepResult(wait=5.0, progress=data, events=events)


def _wait_for_volume_detach(
    runner: Runner, op: Operation, h: ClusterHandle, shrinking: Sequence[PoolChange]
) -> StepResult | None:
    """Cluster API waits for a drained node's volumes to detach (status.volumesAttached empty)
    before it deletes the machine, up to nodeVolumeDetachTimeout; so does the removal. None: go on."""
    wanted = {n: c for c in shrinking for n in c.detach_wait}
    if not wanted:
        return None
    now = runner.clock.now()
    started = op.progress.removal.detach_started_at or now
    attached = {
        n.name: n.volumes_attached for n in h.api.list_nodes() if n.name in wanted and n.volumes_attached
    }
    waiting, expired = [], []
    for node, count in sorted(attached.items()):
        timeout = wanted[node].detach_timeout_seconds
        if timeout and now >= started + timedelta(seconds=timeout):
            expired.append(f"{node} ({count} attached)")
        else:
            waiting.append(f"{node} ({count} attached)")
    events: list[tuple[ProgressKind, str, str]] = []
    if expired and op.progress.removal.detach_expired != tuple(expired):
        text = "nodeVolumeDetachTimeout expired; removing as Cluster API does with volumes still attached: "
        events.append(("phase", text + ", ".join(expired), ""))
    if not waiting:
        return None if not events else _remove_after(events, op, expired)
    text = "Waiting for volumes to detach before removal, as Cluster API does: " + ", ".join(waiting)
    if op.progress.removal.detach_reported != text:
        events.append(("phase", text, ""))
    removal = replace(
        op.progress.removal, detach_started_at=started, detach_reported=text, detach_expired=tuple(expired)
    )
    return StepResult(wait=2.0, progress=replace(op.progress, removal=removal), events=events)


def _remove_after(
    events: list[tuple[ProgressKind, str, str]], op: Operation, expired: list[str]
) -> StepResult | None:
    """Report an expired detach timeout once, then come back to the removal."""
    if op.progress.removal.detach_expired == tuple(expired):
        return None
    removal = replace(op.progress.removal, detach_expired=tuple(expired))
    return StepResult(wait=0.1, progress=replace(op.progress, removal=removal), events=events)


def _left_to_controller(change: PoolChange, pool: Pool) -> list[str]:
    """What the hooked Machines of `change` still wait for, one phrase per node still there."""
    hooks = dict(pool.pre_drain_hooks)
    phrases = []
    for node in change.hooked_nodes:
        if node not in pool.nodes:
            continue
        if hooks.get(node):
            phrases.append(f"node {node}: Machine waits for pre-drain hook(s) {', '.join(hooks[node])}")
        else:
            phrases.append(f"node {node}: Machine is being drained and deleted by Cluster API")
    return phrases


def _waves(runner: Runner, op: Operation, h: ClusterHandle) -> tuple[WaveProgress, ...]:
    """The waves of this operation: as persisted, else decided now (a wake follows the cluster's
    `wake_waves`; a scale-up, and a row written before waves, is one wave of every pool)."""
    wake = op.progress.wake
    if wake.waves:
        return wake.waves
    pools = [c.pool for c in op.plan.pools]
    config = h.wake_waves if op.kind is OpKind.WAKE and not wake.resized_at else WakeWaves()
    waves = wake_waves.plan_waves(pools, config, default_timeout=runner.settings.ready_timeout)
    if wake.resized_at is not None:  # resized before waves were persisted: every pool at once
        waves = (replace(waves[0], started_at=wake.resized_at),)
    return waves


def step_resize(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Resize the pools of the current wave (every pool, when the wake is one wave)."""
    waves = _waves(runner, op, h)
    index = op.progress.wake.wave
    wave = waves[index]
    changes = [c for c in op.plan.pools if c.pool in wave.pools]
    for change in changes:
        size = change.after
        if size == 0 and (op.kind is OpKind.WAKE or records_restore(op)):
            pool = h.pools.get_pool(change.pool)
            if pool.sizes_from_demand and op.kind is OpKind.WAKE:
                # A demand-sized pool asleep with no nodes: any size above 0 means "provision
                # again" (PoolProvider.set_size); 0 would keep it capped.
                size = 1
            elif pool.sizes_from_demand:
                # Going to sleep with no nodes still caps it: record first, so wake finds it asleep.
                _record_restore(runner, op, h, pool)
        h.pools.set_size(change.pool, size)
    now = runner.clock.now()
    started = (*waves[:index], replace(wave, started_at=wave.started_at or now), *waves[index + 1 :])
    if len(waves) == 1:
        text = f"Requested {op.plan.summary()}; waiting for nodes to be Ready"
    else:
        requested = replace(op.plan, pools=tuple(changes)).summary()
        text = wake_waves.started_text(started, index, requested)
    wake = replace(op.progress.wake, resized_at=op.progress.wake.resized_at or now, waves=started)
    return StepResult(then=NEXT, progress=replace(op.progress, wake=wake), events=[("phase", text, "")])


def _readiness(
    op: Operation, h: ClusterHandle, changes: Sequence[PoolChange], pools: Sequence[Pool]
) -> tuple[dict[str, wake_waves.PoolReadiness], int | None]:
    """Each woken pool's nodes Ready and asked for, what is not Ready, and (demand-sized pools) the
    nodes provisioned from demand (None when no pool sizes itself so)."""
    nodes = {n.name: n for n in h.api.list_nodes()}
    readiness: dict[str, wake_waves.PoolReadiness] = {}
    provisioned: int | None = None
    for change, pool in zip(changes, pools, strict=True):
        not_ready = [
            f"{name}: {nodes[name].ready_reason or 'not Ready'}"
            for name in pool.nodes
            if name not in pool.ready_nodes and name in nodes
        ]
        if pool.sizes_from_demand:
            provisioned = (provisioned or 0) + len(pool.nodes)
            launching = pool.desired - len(pool.nodes)
            if launching > 0:
                not_ready.append(f"{change.pool}: {launching} node(s) launching")
            # A sleeping pool is not waiting for anything.
            pending = pool.pending_pods if op.kind is OpKind.WAKE else 0
            readiness[change.pool] = wake_waves.PoolReadiness(
                len(pool.ready_nodes), pool.desired, tuple(not_ready), pending
            )
            continue
        missing = change.after - len(pool.nodes)
        if missing > 0:
            not_ready.append(f"{change.pool}: {missing} node(s) not registered yet")
        readiness[change.pool] = wake_waves.PoolReadiness(
            min(len(pool.ready_nodes), change.after), change.after, tuple(not_ready)
        )
    return readiness, provisioned


def _wave_workloads_not_back(
    runner: Runner, h: ClusterHandle, wave: WaveProgress
) -> tuple[tuple[str, str], ...]:
    """(key, why) of the workloads the sleep displaced from the wave's pools that are not available
    yet; () for a wave that does not wait for its workloads."""
    if not wave.workloads_available or h.workloads is None:
        return ()
    keys = runner.store.displaced(h.name, set(wave.pools))
    return tuple(h.workloads.availability(keys=keys).not_ready) if keys else ()


def step_wait_ready(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Wait for the current wave's nodes to be Ready (a share of them, as configured), then go on
    with the next wave; after the last, with the workloads. A wave out of time says what it waited
    for and the wake goes on.

    A demand-sized pool (Karpenter) has no node count to wait for: its capacity is back once no pod
    is left pending and every node it provisioned is Ready; those nodes count as wanted.
    """
    now = runner.clock.now()
    waves = _waves(runner, op, h)
    index = min(op.progress.wake.wave, len(waves) - 1)
    awake = {p for wave in waves[: index + 1] for p in wave.pools}
    changes = [c for c in op.plan.pools if c.pool in awake]
    pools = [h.pools.get_pool(change.pool) for change in changes]
    followed, progress = _provider_progress(op, pools)
    readiness, provisioned = _readiness(op, h, changes, pools)
    ready = sum(r.ready for r in readiness.values())
    wanted = sum(r.wanted for r in readiness.values())
    pending = max((r.pending_pods for r in readiness.values()), default=0)
    not_ready_all = sorted(
        [n for r in readiness.values() for n in r.not_ready]
        + ([f"{pending} pod(s) pending"] if pending else [])
    )
    line = f"{ready}/{wanted} nodes Ready"
    if provisioned is not None:
        line += f", {provisioned} provisioned from demand"
        line += f", {pending} pod(s) pending" if pending else ""
    missing = _wave_workloads_not_back(runner, h, waves[index])
    seen = wake_waves.look(waves[index], readiness, now=now, workloads_not_back=missing)
    after: Outcome = NEXT if op.plan.workloads else "no_workloads"
    woke = replace(op.progress.wake, ready=ready, wanted=wanted, wave=index)
    kept = sorted(n for pool in pools for n in pool.kept_cordoned)
    if kept:  # back in the pool, but someone else had cordoned them before scalebot emptied them
        woke = replace(woke, kept_cordoned=tuple(kept))
    if provisioned is not None:
        woke = replace(woke, provisioned=provisioned)
    if not seen.outcome:
        previous = waves[index]
        waves = (*waves[:index], wake_waves.seen_at(previous, seen), *waves[index + 1 :])
        events: list[tuple[ProgressKind, str, str]] = list(progress)
        if len(waves) == 1:
            if (op.progress.wake.ready, op.progress.wake.wanted) != (ready, wanted):
                events.append(("report", line, ""))
        elif (previous.ready, previous.wanted) != (seen.ready, seen.wanted) or not op.progress.wake.waves:
            events.append(("report", wake_waves.status_text(waves, index, seen, missing), ""))
        data = replace(op.progress, wake=replace(woke, waves=waves), provider_progress=followed)
        return StepResult(progress=data, wait=2.0, events=events)
    waves = (*waves[:index], wake_waves.ended(waves[index], seen, now=now), *waves[index + 1 :])
    woke = replace(woke, waves=waves)
    later = wake_waves.next_wave(waves, index)
    if len(waves) > 1:
        ended: tuple[ProgressKind, str, str] = ("phase", wake_waves.ended_text(waves, index, now=now), "")
        if later is not None:
            data = replace(op.progress, wake=replace(woke, wave=later), provider_progress=followed)
            return StepResult(then="next_wave", progress=data, events=[*progress, ended])
        progress = [*progress, ended]
    data = replace(op.progress, wake=woke, provider_progress=followed)
    if ready >= wanted and not pending:
        return StepResult(then=after, progress=data, events=[*progress, ("phase", line, "")])
    started = waves[index].started_at or now
    if seen.outcome == "timed_out" or now >= started + runner.settings.ready_timeout:
        detail = "; ".join(not_ready_all[:10])
        return StepResult(
            then=after,
            progress=replace(data, wake=replace(woke, not_ready=tuple(not_ready_all))),
            events=[*progress, ("phase", f"{line} after {format_duration(now - started)}: {detail}", "")],
        )
    # The last wave reached its share with nodes of the wake still not Ready: name them and go on.
    detail = "; ".join(not_ready_all[:10])
    return StepResult(
        then=after,
        progress=replace(data, wake=replace(woke, not_ready=tuple(not_ready_all))),
        events=[*progress, ("phase", f"{line}: {detail}" if detail else line, "")],
    )


def _provider_progress(
    op: Operation, pools: Sequence[Pool]
) -> tuple[dict[str, str], list[tuple[ProgressKind, str, str]]]:
    """Each pool's provider progress, and a thread line for each one that changed since the last look."""
    before = op.progress.provider_progress
    now = {p.name: p.progress for p in pools if p.progress}
    events: list[tuple[ProgressKind, str, str]] = [
        ("phase", f"pool {name}: {text}", "")
        for name, text in sorted(now.items())
        if before.get(name) != text
    ]
    return now, events


def step_workloads_sleep(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Scale workloads to zero first: fewer pods to evict, and autoscalers empty nodes themselves."""
    if h.workloads is None:
        return StepResult(
            state=OpState.FAILED, error=f"cluster {h.name} has no workloads provider configured"
        )

    def record(rec: WorkloadRecord) -> None:
        runner.store.record_workload(h.name, rec.key, rec.to_dict(), op_id=op.id, at=runner.clock.now())

    plan, unapproved = _approved_only(h.workloads.plan_sleep(), op.plan)
    # The reverse of the wake order: what the others depend on is scaled down last.
    report = h.workloads.sleep(wake_order.in_sleep_order(plan), record=record)
    shrinking = any(c.after < c.before for c in op.plan.pools)
    text = f"Workloads: {report.headline}\n{report.render(max_items=10)}".strip()
    if unapproved:
        text += f"\nNot in the approved plan, left as they are: {', '.join(unapproved)}"
    return StepResult(
        then=NEXT if shrinking else "nothing_to_shrink",
        progress=replace(op.progress, workloads=replace(op.progress.workloads, headline=report.headline)),
        events=[("phase", text, "")],
    )


def _approved_only(plan: WorkloadPlan, approved: OperationPlan) -> tuple[WorkloadPlan, list[str]]:
    """The sleep acts on what was approved: a workload that would now be scaled down but was not in
    the approved plan (created or changed since) is left as it is. Plans saved before they listed
    their workloads (a count without keys) are applied as they are."""
    if approved.workloads and not approved.workload_keys:
        return plan, []
    keys = set(approved.workload_keys)
    extra = [d.key for d in plan.decisions if d.category == "change" and d.key not in keys]
    kept = tuple(
        d
        if d.category != "change" or d.key in keys
        else Decision("skipped", WorkloadOutcome(d.key, _NOT_APPROVED))
        for d in plan.decisions
    )
    return replace(plan, decisions=kept), extra


_NOT_APPROVED = "not in the approved plan (appeared after the approval); left as it is"


def step_workloads_wake(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """After the nodes are Ready: restore the originals (SQLite first, else the objects' annotations).

    Workloads with a wake order (`engine.workloads.order`) are restored one order at a time, lowest
    first, each followed until it is available (at most `workloads_return_timeout`) before the next.
    """
    if h.workloads is None:
        return StepResult(
            state=OpState.FAILED, error=f"cluster {h.name} has no workloads provider configured"
        )
    before = op.progress.workloads
    if before.waking:
        return _follow_order(runner, op, h)
    records = [WorkloadRecord.from_dict(r) for r in runner.store.workload_records(h.name)]
    plan = h.workloads.plan_wake(records or None)
    groups = wake_order.plan_groups(plan)
    # Once, with the first restore: the annotations that are no wake order (text from the cluster).
    ignored = "".join(f"\n{n.key}: {n.reason}" for n in wake_order.invalid_orders(plan)[:10])
    if not before.orders_done and not wake_order.is_ordered(groups):
        report = h.workloads.apply_wake(plan)
        restored = tuple(o.key for o in report.changed)
        return _workloads_woken(runner, op, h, report.headline, restored=restored, notes=ignored)
    group = wake_order.next_group(groups, before.orders_done)
    if group is None:
        return _workloads_woken(runner, op, h, before.headline, restored=before.restored)
    report = h.workloads.apply_wake(plan, only=group.keys)
    restored = (*before.restored, *(o.key for o in report.changed))
    to_restore = before.to_restore + report.total
    headline = f"{len(restored)}/{to_restore} workloads restored"
    later = wake_order.next_group(groups, (*before.orders_done, group.label))
    text = f"Workloads of wake order {group.label}: {report.headline}"
    notes = "" if before.orders_done else ignored
    progress = replace(before, headline=headline, restored=restored, to_restore=to_restore)
    if later is None:  # the last order: the workloads_return step follows everything that is not back
        progress = replace(progress, orders_done=(*before.orders_done, group.label))
        return StepResult(
            progress=replace(op.progress, workloads=progress), events=[("phase", text + notes, "")]
        )
    progress = replace(progress, waking=group.keys, waking_order=group.label, waking_since=runner.clock.now())
    text += f"; waiting until they are available before wake order {later.label}"
    return StepResult(
        progress=replace(op.progress, workloads=progress), wait=0.5, events=[("phase", text + notes, "")]
    )


def _follow_order(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """The wake order restored last: available, or out of time (named, and the wake goes on)?"""
    assert h.workloads is not None
    now = runner.clock.now()
    before = op.progress.workloads
    since = before.waking_since or now
    waking = frozenset(before.waking)
    missing = list(h.workloads.availability(keys=waking).not_ready)
    label = before.waking_order
    done = replace(
        before, orders_done=(*before.orders_done, label), waking=(), waking_order="", waking_since=None
    )
    if not missing:
        text = f"Workloads of wake order {label} available after {format_duration(now - since)}"
        return StepResult(progress=replace(op.progress, workloads=done), events=[("phase", text, "")])
    if now >= since + runner.settings.workloads_return_timeout:
        why = returning.why_not_back(missing, h.api.list_pods())
        text = (
            f"Workloads of wake order {label} not all available after {format_duration(now - since)}; "
            f"going on with the next order; not back: {returning.named(why)}"
        )
        return StepResult(progress=replace(op.progress, workloads=done), events=[("phase", text, "")])
    return StepResult(wait=RETURN_POLL_SECONDS)


def _workloads_woken(
    runner: Runner,
    op: Operation,
    h: ClusterHandle,
    headline: str,
    *,
    restored: tuple[str, ...],
    notes: str = "",
) -> StepResult:
    assert h.workloads is not None
    runner.store.clear_workload_records(h.name)
    available = h.workloads.availability(keys=_followed(runner, op, h, restored))
    workloads = replace(
        op.progress.workloads,
        headline=headline,
        available=WorkloadCount(available.available, available.total),
        restored=restored,
    )
    return StepResult(
        then=NEXT,
        progress=replace(op.progress, workloads=workloads),
        events=[("phase", f"Workloads: {headline}; {available.headline}{notes}", "")],
    )


def _followed(runner: Runner, op: Operation, h: ClusterHandle, restored: Sequence[str]) -> frozenset[str]:
    """The workloads a wake waits for: those it scaled back, and those whose pods were on the nodes
    the sleeps of its pools emptied. A workload scalebot never touched is not its to report."""
    return frozenset(restored) | runner.store.displaced(h.name, {c.pool for c in op.plan.pools})


RETURN_POLL_SECONDS = 5.0
"""How often a wake looks again at the workloads not yet back."""


def step_workloads_return(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """With the nodes Ready: name the workloads not yet available, follow them for a bounded time
    (`workloads_return_timeout`), then name those still not back and why (their pending pods)."""
    if op.kind is not OpKind.WAKE or h.workloads is None:
        return StepResult(then=NEXT)
    now = runner.clock.now()
    before = op.progress.workloads
    availability = h.workloads.availability(keys=_followed(runner, op, h, before.restored))
    since = before.followed_since or now
    followed = replace(
        before,
        available=WorkloadCount(availability.available, availability.total),
        followed_since=since,
    )
    if not availability.not_ready:
        back: list[tuple[ProgressKind, str, str]] = []
        if before.followed_since is not None:
            back.append(("phase", f"{availability.headline} after {format_duration(now - since)}", ""))
        return StepResult(then=NEXT, progress=replace(op.progress, workloads=followed), events=back)
    limit = runner.settings.workloads_return_timeout
    if now >= since + limit:
        why = returning.why_not_back(availability.not_ready, h.api.list_pods())
        text = (
            f"{availability.headline} {format_duration(now - since)} after the nodes were Ready; not back: "
        )
        return StepResult(
            then=NEXT,
            progress=replace(op.progress, workloads=replace(followed, not_back=why)),
            events=[("phase", text + returning.named(why), "")],
        )
    events: list[tuple[ProgressKind, str, str]] = []
    if before.followed_since is None:
        keys = [key for key, _ in availability.not_ready]
        events.append(
            (
                "report",
                f"Nodes Ready; {availability.headline}, following the others for up to "
                f"{format_duration(limit)}: {returning.named(keys)}",
                "",
            )
        )
    return StepResult(
        progress=replace(op.progress, workloads=followed), wait=RETURN_POLL_SECONDS, events=events
    )


def step_finish(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    now = runner.clock.now()
    wake = op.progress.wake
    late = wake_waves.timed_out(wake.waves)
    # Configured waves: each wave's share decides (a 50% wave is done with half its nodes).
    # One wave of every pool, as before waves: all of the nodes.
    configured = len(wake.waves) > 1 or any(w.ready_share < 1 for w in wake.waves)
    ok = not late if configured else (wake.ready or 0) >= (wake.wanted or 0)
    if op.kind is OpKind.WAKE or (ok and ends_sleep(op)):
        _clear_restore(runner, op, h)
    state = OpState.SUCCEEDED if ok else OpState.FAILED
    error = ""
    if not ok:
        error = "; ".join(late) if len(wake.waves) > 1 else f"only {wake.ready}/{wake.wanted} nodes Ready"
    return StepResult(
        state=state,
        error=error,
        events=[_final(op, op.progress, now)],
        summary=_summary(op, op.progress, now),
    )


def _record_nodes(
    h: ClusterHandle, op: Operation, reason: str, message: str, *, warning: bool = False
) -> None:
    for node in drained_nodes(op):
        h.events.record(
            kube_events.ObjectRef.node(node),
            reason=reason,
            message=message,
            type="Warning" if warning else "Normal",
        )


def _summary(op: Operation, data: OperationProgress, now: datetime) -> OperationSummary:
    wake = data.wake
    return OperationSummary(
        duration_seconds=round((now - op.created_at).total_seconds()),
        pods_evicted=data.drain.evicted,
        pods_force_deleted=len(data.drain.force_deleted),
        nodes_removed=data.removal.nodes_removed,
        nodes_emptied=data.removal.nodes_emptied,
        pools={c.pool: PoolSizes(c.before, c.after) for c in op.plan.pools},
        workloads=data.workloads.available,
        nodes_ready=(wake.ready or 0, wake.wanted) if wake.wanted is not None else None,
        nodes_provisioned=wake.provisioned,
    )


def _final(op: Operation, data: OperationProgress, now: datetime) -> tuple[ProgressKind, str, str]:
    s = _summary(op, data, now)
    wake = data.wake
    parts = [f"Completed in {format_duration(timedelta(seconds=s.duration_seconds))}"]
    if wake.wanted is not None:
        parts.append(f"{wake.ready}/{wake.wanted} nodes Ready")
        if wake.not_ready:
            parts.append("not Ready: " + "; ".join(wake.not_ready[:5]))
    if len(wake.waves) > 1:
        parts.append(wake_waves.summary_text(wake.waves))
    if data.workloads.available is not None:
        parts.append(
            f"{data.workloads.available.available}/{data.workloads.available.total} workloads available"
        )
    elif data.workloads.headline:
        parts.append(data.workloads.headline)
    if data.workloads.not_back:
        parts.append("not back: " + returning.named(data.workloads.not_back))
    if wake.provisioned is not None:
        n = wake.provisioned
        parts.append(f"{n} node{'s' if n != 1 else ''} provisioned")
    if op.kind is not OpKind.WAKE and op.plan.pools:
        parts.append(f"{s.pods_evicted} Pods evicted")
        parts.append(f"{s.pods_force_deleted} force-deleted")
        parts.append(f"{s.nodes_removed} nodes removed")
        if s.nodes_emptied:
            parts.append(f"{s.nodes_emptied} nodes emptied, not removed")
    if op.plan.pools:
        parts.append("pools " + ", ".join(f"{c.pool} {c.before} → {c.after}" for c in op.plan.pools))
    parts.extend(data.removal.pool_changes)
    if wake.kept_cordoned:
        names = list(wake.kept_cordoned)
        parts.append(
            f"still cordoned, as they were before scalebot emptied them: {', '.join(names)} "
            f"(`scalebot uncordon {' '.join(names)}` undoes it)"
        )
    return ("final", "; ".join(parts), "")


# -- consolidation -----------------------------------------------------------------------------------


def _pool_of(op: Operation, node: str) -> str:
    return next(c.pool for c in op.plan.pools if node in c.nodes_to_remove)


def step_fit(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    """Pick the next node and re-check, on a fresh listing, that its pods still fit elsewhere."""
    done = op.progress.consolidation
    removed, skipped = done.removed, done.skipped
    todo = [n for n in op.plan.nodes if n not in removed and n not in skipped]
    if not todo:
        return StepResult(
            then="all_nodes_done", progress=replace(op.progress, consolidation=replace(done, current=""))
        )
    node = todo[0]
    reason = ""
    pool = h.pools.get_pool(_pool_of(op, node))
    if pool.desired - 1 < pool.min_size:
        reason = f"pool {pool.name} is at its minimum size ({pool.min_size})"
    moves: tuple[tuple[str, str], ...] = ()
    if not reason:
        if not isinstance(h.api, SchedulingApi):
            return StepResult(state=OpState.FAILED, error=f"cluster {h.name} is not a Kubernetes API server")
        snap = consolidation.SchedulingSnapshot(
            nodes=tuple(consolidation.node_view(raw, pool=None) for raw in h.api.list_nodes_json()),
            pods=tuple(consolidation.pod_view(raw) for raw in h.api.list_bound_pods_json()),
        )
        moves, reason = consolidation.recheck(
            node,
            snap,
            h.api.list_pdbs(),
            # Nodes this operation removes later would take pods only to have them evicted again.
            not_destinations=frozenset(todo[1:]) | frozenset(removed),
            daemonset_keys=h.api.list_daemonset_keys(),
            now=runner.clock.now(),
            rules=runner.scale_down.get(h.name, consolidation.ScaleDownRules()),
        )
    if reason:
        text = f"Skipped {node}: {reason} (not cordoned, not drained)"
        return StepResult(
            then="node_skipped",
            progress=replace(op.progress, consolidation=replace(done, skipped={**skipped, node: reason})),
            events=[("phase", text, "")],
        )
    where = sorted({dest for _, dest in moves})
    text = (
        f"{node}: its {len(moves)} Pod{'s' if len(moves) != 1 else ''} still fit on "
        f"{', '.join(where) or 'the nodes that stay'}; cordoning and draining it"
    )
    # The next node's drain starts afresh: its own state, and its first report is posted.
    fresh = replace(op.progress.drain, state=None, last_message="")
    return StepResult(
        then=NEXT,
        progress=replace(op.progress, consolidation=replace(done, current=node), drain=fresh),
        events=[("phase", text, "")],
    )


def step_remove_node(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    done = op.progress.consolidation
    node = done.current
    if not node:
        raise RuntimeError(f"operation {op.id} reached remove_node without a node to remove")
    pool = _pool_of(op, node)
    h.pools.remove_nodes(pool, (node,))
    consolidated = ConsolidationProgress(
        current="",
        removed=(*done.removed, node),
        skipped=done.skipped,
        evicted_before=done.evicted_before + op.progress.drain.evicted,
    )
    return StepResult(
        then="node_removed",
        progress=replace(
            op.progress,
            consolidation=consolidated,
            drain=replace(op.progress.drain, state=None, evicted=0),
            removal=replace(op.progress.removal, nodes_removed=len(consolidated.removed)),
        ),
        events=[("phase", f"Removed {node} (pool {pool})", "")],
    )


def step_consolidated(runner: Runner, op: Operation, h: ClusterHandle) -> StepResult:
    now = runner.clock.now()
    removed, skipped = list(op.progress.consolidation.removed), dict(op.progress.consolidation.skipped)
    evicted = op.progress.consolidation.evicted_before
    parts = [
        f"Completed in {format_duration(now - op.created_at)}",
        f"{len(removed)} of {len(op.plan.nodes)} nodes removed"
        + (f": {', '.join(removed)}" if removed else ""),
        f"{evicted} Pods evicted",
    ]
    if skipped:
        parts.append("skipped: " + "; ".join(f"{n} ({why})" for n, why in skipped.items()))
    summary = OperationSummary(
        duration_seconds=round((now - op.created_at).total_seconds()),
        pods_evicted=evicted,
        pods_force_deleted=0,
        nodes_removed=len(removed),
        removed=tuple(removed),
        skipped=skipped,
        pools={
            c.pool: PoolSizes(c.before, c.before - sum(1 for n in removed if n in c.nodes_to_remove))
            for c in op.plan.pools
        },
    )
    return StepResult(state=OpState.SUCCEEDED, events=[("final", "; ".join(parts), "")], summary=summary)


_STEPS: dict[str, Step] = {
    "fit": step_fit,
    "remove_node": step_remove_node,
    "consolidated": step_consolidated,
    "record": step_record,
    "cordon": step_cordon,
    "drain": step_drain,
    "force": step_force,
    "remove": step_remove,
    "verify": step_verify,
    "resize": step_resize,
    "wait_ready": step_wait_ready,
    "workloads_sleep": step_workloads_sleep,
    "workloads_wake": step_workloads_wake,
    "workloads_return": step_workloads_return,
    "finish": step_finish,
}

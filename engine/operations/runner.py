"""Runs operations step by step on a bounded step pool; every step is persisted and safe to repeat.

Each step (`engine.operations.steps`, one module per kind of step) reads the operation, acts
through the ports and returns a `StepResult` that the runner persists before anything else
happens. Which step comes next is the flow's (`engine.operations.flows`, one table per kind of
operation): a step only says how it ended. A step reaches the runner only through
`engine.operations.steps.context.StepContext`, which the Runner implements: the sleep's records
and the audit (narrow ports of the store, `engine.store.ports`), the clock, the settings, `emit`,
the eviction executors, the pod feed and the eviction gate; the runner itself uses the store's
operation journal and claims (`RunnerStore`). This module
keeps the rest: admission, the step pool, the claims, persistence and dispatch.
It stays one module (over 600 lines) on purpose: those share one `Runner`'s state (the operations it holds and
what each is doing, the claims it heartbeats, the step it persists and dispatches next).

Waiting holds nothing. An operation is admitted while fewer than `max_operations` are in
progress (`max_operations_per_cluster` on its cluster), else it waits, claimed, in the order it
came. Each of its turns runs one step on the step pool (`workers` threads) and persists it; a
step that asks to wait (`StepResult.wait`) sets a timer (`engine.operations.timers`), and the
operation's next turn is submitted when the timer fires, when its pod feed sees the pods it
waits for gone, or when it is cancelled. Evictions, cordons and force-deletions go through one
process-wide `engine.drain.concurrency.FairExecutor` with a lane per cluster.

On start-up `resume_all()` continues every running operation from its current step.

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
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from engine.domain.clock import Clock
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import PodInfo
from engine.domain.operation import Operation, OpState, ProgressEvent
from engine.domain.settings import ADAPTIVE_EVICTIONS_START, AimdSettings, RunnerSettings, ScaleDownRules
from engine.drain.concurrency import AdaptiveGate, AimdController, FairExecutor
from engine.drain.pod_feed import PodFeed
from engine.kube.api import KubeApi, PodListing, RateLimitedApi
from engine.operations import log_context
from engine.operations.fence import FencedKubeApi, FencedPools, FencedWorkloadApi
from engine.operations.flows import FEED_STEPS, first_step, step_after
from engine.operations.steps import STEPS
from engine.operations.steps.context import ClusterHandle, StepResult
from engine.operations.steps.cordon_drain import give_back_nodes
from engine.operations.timers import StepTimers
from engine.store.base import StoreError
from engine.store.claims import ClaimHeld, Fenced, RunnerClaim, RunnerId
from engine.store.ports import AuditTrail, OperationJournal, RunnerClaims, SleepRecords

__all__ = [
    "CLAIM_POLL_SECONDS",
    "CLAIM_TTL_SECONDS",
    "RETRIED",
    "SHOWN",
    "STEP_RETRY_CAP_SECONDS",
    "STEP_RETRY_SECONDS",
    "ClusterHandle",
    "Runner",
    "RunnerLoad",
    "RunnerStore",
    "StepResult",
    "runner_identity",
]
"""ClusterHandle and StepResult are defined in `engine.operations.steps.context`, beside the steps
that read them, and exported here too: the runner's callers build it from them (and from
`engine.domain.settings.RunnerSettings`, with the engine's other settings)."""

log = logging.getLogger(__name__)

OFFERED_PODS_MAX_AGE = 60.0
"""How old a plan's pod listing may be for a drain's pod feed to start from it (`Runner.offer_pods`):
the watch replays every change since, so an older one is still right, but the first pass would act
on pods that old (and a resourceVersion older than the API server keeps answers 410: a relist)."""
STEP_RETRY_SECONDS = 5.0
STEP_RETRY_CAP_SECONDS = 15.0
RETRIED = frozenset({Category.CLUSTER, Category.TRANSIENT})
"""The categories of failure a step is tried again on (steps are idempotent): the runner's one
mapping. A refusal of the API server may pass once the cluster changes, a transient failure once
it recovers; any other category leaves the step (usage, configuration, the store's own faults)."""
SHOWN = frozenset({Category.USAGE, Category.CONFIGURATION})
"""The categories of failure that end a step's operation with their own message (what the user
can act on); any other one not RETRIED is an internal error, its details in the log."""
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
class RunnerLoad:
    """The operations a runner holds, by what they do now."""

    queued: int = 0
    """Claimed, waiting for a place under `max_operations` / `max_operations_per_cluster`."""
    stepping: int = 0
    """Running a step, or about to (a step worker holds each)."""
    waiting: int = 0
    """Between two steps: a timer or a wake-up brings the next one; nothing is held."""


@dataclass(slots=True)
class _Run:
    """One operation this runner holds, from `start` until its run here ends."""

    cluster: str
    cancel: threading.Event
    """Set to end the run at its next turn: a cancel, a stop, a claim lost."""
    resumed: bool
    wait_for_claim: bool
    phase: str = "queued"
    """queued (not admitted yet), ready (a turn submitted), stepping (a turn running), waiting
    (a timer or a wake-up brings its next turn)."""
    woken: bool = False
    """Woken while its step ran: the next turn comes at once, not after the step's wait."""
    timer: int = 0
    """The number of the timer its wait set: a timer that fires with another number is stale."""
    journaled: bool = False
    warned: bool = False


class RunnerStore(OperationJournal, RunnerClaims, SleepRecords, AuditTrail, Protocol):
    """What a runner is given of the store: the operation's journal and the claims for itself, and
    the sleep's records and the audit for its steps (`StepContext`). `Store` implements it."""


class Runner:
    def __init__(
        self,
        store: RunnerStore,
        clusters: Mapping[str, ClusterHandle],
        clock: Clock,
        emit: Callable[[ProgressEvent], None],
        settings: RunnerSettings = RunnerSettings(),
        *,
        may_act: Callable[[], bool] | None = None,
        identity: RunnerId | None = None,
    ) -> None:
        self._journal: OperationJournal = store
        self._claims: RunnerClaims = store
        self.sleep_records: SleepRecords = store
        """What a sleep keeps for its wake, for the steps (`StepContext`)."""
        self.audit_trail: AuditTrail = store
        """The audit, for the steps that write rows of their own (phase 2)."""
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
        self.scale_down: dict[str, ScaleDownRules] = {}
        """Each cluster's cluster-autoscaler rules (its consolidation settings), for the re-check
        before a consolidated node is cordoned; set by `Operations`. A cluster not named: defaults."""
        self._pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="op")
        """Runs steps: a turn holds a worker for one step, never for the wait after it."""
        self._timers = StepTimers(clock, self._timer_fired)
        self._io = FairExecutor(settings.max_evictions_in_flight, name="evict")
        """Every cluster's cordons, evictions and force-deletions: one lane per cluster and kind."""
        self._gates: dict[str, AdaptiveGate] = {}
        """Per cluster: the adaptive eviction limit, learned across passes and operations."""
        self._runs: dict[str, _Run] = {}
        self._queue: deque[str] = deque()
        """Operations held but not admitted yet (`max_operations`, `max_operations_per_cluster`)."""
        self._feeds: dict[str, PodFeed] = {}
        """Per draining operation: the pods of its nodes, kept current by a watch."""
        self._offered: dict[str, tuple[frozenset[str], PodListing, float]] = {}
        """Per cluster: the pods of the nodes its last plan drains, with the listing's
        resourceVersion and when it was taken (`offer_pods`)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._tokens: dict[str, int] = {}
        self._lost: set[str] = set()
        self._heartbeat: threading.Thread | None = None
        self._beat = threading.Event()

    # -- control ---------------------------------------------------------------------------------

    def start(self, op_id: str, *, wait_for_claim: bool = False, resumed: bool = False) -> None:
        """Run the operation here once this runner holds its claim and admits it.

        Without `wait_for_claim` the claim is taken here and ClaimHeld raised if another live
        runner holds it; with it (a standby taking over) its turns wait for that claim to lapse.
        More operations than `max_operations` (or `max_operations_per_cluster`) wait, claimed, in
        the order they came, until one in progress ends.
        """
        with self._lock:
            if op_id in self._runs or self._stopping.is_set():
                return
            self._runs[op_id] = _Run(
                cluster="", cancel=threading.Event(), resumed=resumed, wait_for_claim=wait_for_claim
            )
        try:
            if not wait_for_claim and op_id not in self._tokens:
                self._claim(op_id)
            op = self._journal.get_operation(op_id)
        except ClaimHeld:
            self._forget(op_id)
            raise
        except StoreError as exc:
            self._fault(op_id, exc)
            self._release(op_id)
            self._forget(op_id)
            return
        with self._lock:
            run = self._runs.get(op_id)
            if run is None:
                return
            run.cluster = op.target.cluster if op is not None else ""
            self._queue.append(op_id)
            self._admit()

    def resume_all(self, *, wait_for_claims: bool = False) -> list[str]:
        """Continue every running operation; ClaimHeld (nothing started) if another runner has one.

        `wait_for_claims`: a new leader waits for the claims of the instance it replaces to lapse.
        """
        ops = self._journal.list_operations(states=[OpState.RUNNING], limit=1000)
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
                self._claims.release_claim(op_id, token)
            raise

    def cancel(self, op_id: str) -> None:
        with self._lock:
            run = self._runs.get(op_id)
            if run is None:
                return
            run.cancel.set()
            if run.phase == "queued":
                # Not admitted yet: its cancel (one short turn) does not wait for a place.
                self._queue.remove(op_id)
                run.phase = "ready"
                self._submit(op_id)
            else:
                self._wake_locked(op_id)

    def stop(self, *, timeout: float | None = None) -> None:
        """SIGTERM: finish the current step, persist, and stop (running ops resume on restart)."""
        self._stopping.set()
        with self._lock:
            queued = list(self._queue)
            self._queue.clear()
            for op_id, run in self._runs.items():
                run.cancel.set()
                if op_id not in queued:
                    self._wake_locked(op_id)  # a waiting operation's next turn ends its run
        for op_id in queued:  # never admitted: nothing to finish but the claim
            self._release(op_id)
            self._forget(op_id)
        self._pool.shutdown(wait=timeout is None or timeout > 0)
        self._timers.stop()
        self._io.shutdown(wait=False)

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: not self._runs, timeout=timeout)

    def is_running(self, op_id: str) -> bool:
        with self._lock:
            return op_id in self._runs

    def load(self) -> RunnerLoad:
        """How many operations this runner holds, by what they are doing now."""
        with self._lock:
            phases = [run.phase for run in self._runs.values()]
        return RunnerLoad(
            queued=phases.count("queued"),
            stepping=phases.count("stepping") + phases.count("ready"),
            waiting=phases.count("waiting"),
        )

    # -- admission and turns ---------------------------------------------------------------------

    def _admit(self) -> None:
        """Under the lock: start, in the order they came, the queued operations the limits allow."""
        if self._stopping.is_set():
            return
        admitted = [run for run in self._runs.values() if run.phase != "queued"]
        per_cluster = Counter(run.cluster for run in admitted)
        total = len(admitted)
        for op_id in list(self._queue):
            if total >= self.settings.max_operations:
                return
            run = self._runs[op_id]
            if per_cluster[run.cluster] >= self.settings.max_operations_per_cluster:
                continue  # another cluster's operation may still fit
            self._queue.remove(op_id)
            total += 1
            per_cluster[run.cluster] += 1
            run.phase = "ready"
            self._pool.submit(self._turn, op_id)

    def _wake_locked(self, op_id: str) -> None:
        """Under the lock: the operation's next turn comes now (a cancel, its pod feed's cue)."""
        run = self._runs.get(op_id)
        if run is None:
            return
        if run.phase == "waiting":
            run.phase = "ready"
            self._timers.cancel(run.timer)
            run.timer = 0
            if not self._submit(op_id):
                run.phase = "waiting"
        elif run.phase == "stepping":
            run.woken = True

    def _wake(self, op_id: str) -> None:
        with self._lock:
            self._wake_locked(op_id)

    def _timer_fired(self, op_id: str, number: int) -> None:
        with self._lock:
            run = self._runs.get(op_id)
            if run is not None and run.phase == "waiting" and run.timer == number:
                run.phase = "ready"
                run.timer = 0
                self._submit(op_id)

    def _submit(self, op_id: str) -> bool:
        try:
            self._pool.submit(self._turn, op_id)
        except RuntimeError:  # the pool is shut down: the operation resumes at the next start
            return False
        return True

    def _then(self, op_id: str, wait: float) -> bool:
        """After a turn: the next one now, or when its wait is over (a timer: no thread waits).
        False when there is no next turn here (the runner is stopping)."""
        with self._lock:
            run = self._runs[op_id]
            if wait <= 0 or run.woken or run.cancel.is_set():
                run.phase = "ready"
                return self._submit(op_id)
            run.phase = "waiting"
            run.timer = self._timers.set(wait, op_id)
            return run.timer != 0

    def _turn(self, op_id: str) -> None:
        with log_context.bind(operation=op_id):
            self._turn_bound(op_id)

    def _turn_bound(self, op_id: str) -> None:
        with self._lock:
            run = self._runs.get(op_id)
            if run is None:
                return
            run.phase = "stepping"
            # Cleared before cancel is read: `cancel()` sets cancel first, then wakes.
            run.woken = False
        token: int | None = self._tokens.get(op_id)
        again: float | None = None
        try:
            if token is None:
                token = self._try_claim(op_id, run)
                if token is None:
                    again = None if run.cancel.is_set() else CLAIM_POLL_SECONDS
                    return  # stopped or cancelled while another runner still held it
            if not run.journaled:
                self._journal_start(op_id, token, resumed=run.resumed)
                run.journaled = True
            again = self._one_step(op_id, token, run.cancel)
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
            if again is None or not self._then(op_id, again):
                if token is not None:
                    self._release(op_id, token)
                self._forget(op_id)

    def _try_claim(self, op_id: str, run: _Run) -> int | None:
        """A standby's turn: the claim once the previous runner's has lapsed, else None."""
        if run.cancel.is_set():
            return None
        try:
            return self._claim(op_id)
        except ClaimHeld as exc:
            if not run.warned:
                log.warning("%s; waiting for it", exc, extra={"operation": op_id})
                run.warned = True
        return None

    def _release(self, op_id: str, token: int | None = None) -> None:
        token = token if token is not None else self._tokens.get(op_id)
        if token is None:
            return
        try:
            self._claims.release_claim(op_id, token)
        except StoreError as exc:  # it lapses on its own after CLAIM_TTL_SECONDS
            log.warning("could not release the claim: %s", exc, extra={"operation": op_id})

    def _journal_start(self, op_id: str, token: int, *, resumed: bool) -> None:
        first = self._journal.get_operation(op_id)
        if first is not None and first.state is OpState.RUNNING and (resumed or not first.step):
            event, detail = ("resumed", "resumed after a restart") if resumed else ("started", "")
            with self._claims.fenced(op_id, token):
                self._journal.journal(
                    op_id,
                    at=self.clock.now(),
                    step=first.step or first_step(first),
                    event=event,
                    detail=detail,
                    runner=self.identity.owner,
                )

    def _one_step(self, op_id: str, token: int, cancel: threading.Event) -> float | None:
        """One step of the operation, persisted; how long until the next (None: its run here ends)."""
        # The claim first: a runner that lost it must not even read the operation as its own.
        claim = self._claims.runner_claim(op_id)
        if op_id in self._lost or claim is None or claim.token != token:
            raise Fenced(f"operation {op_id} was claimed by another runner")
        op = self._journal.get_operation(op_id)
        if op is None or op.state is not OpState.RUNNING:
            return None
        log_context.add(cluster=op.target.cluster)
        if not self.may_act():
            log.error(
                "no longer the active instance: operation stopped before step %s; "
                "the instance that leads now resumes it",
                op.step or first_step(op),
                extra={"operation": op_id},
            )
            return None
        if cancel.is_set():
            if self._stopping.is_set():
                return None  # shutting down: the operation resumes from this step on restart
            self._cancel(op)
            return None
        result = self._step(op)
        if result.state is OpState.FAILED:
            result = self._give_back_nodes(op, result)
        op = self._persist(op, result)
        if op.step not in FEED_STEPS or op.state is not OpState.RUNNING:
            self._close_feed(op_id)
        if op.state is not OpState.RUNNING:
            return None
        return 0.0 if cancel.is_set() else max(0.0, result.wait)

    # -- claims ----------------------------------------------------------------------------------

    def held_elsewhere(self, op_id: str) -> RunnerClaim | None:
        """The live claim of another runner (another process) on the operation, if any."""
        claim = self._claims.runner_claim(op_id)
        if claim is None or not claim.nonce or claim.nonce == self.identity.nonce:
            return None
        fresh = (self.clock.now() - claim.heartbeat_at).total_seconds() < CLAIM_TTL_SECONDS
        return claim if fresh and not self._gone(claim) else None

    def _gone(self, claim: RunnerClaim) -> bool:
        # Same host: a pid that no longer runs (or is ours, reused after a restart) is dead.
        me = self.identity
        return claim.host == me.host and (claim.pid == me.pid or not _pid_alive(claim.pid))

    def _claim(self, op_id: str) -> int:
        token = self._claims.claim_operation(
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
                    lost = self._claims.renew_claims(tokens, now=self.clock.now())
                except StoreError as exc:  # the operation's own next write reports it
                    log.warning("could not renew operation claims: %s", exc)
                    lost = set()
                with self._lock:
                    for op_id in lost:
                        self._lost.add(op_id)
                        run = self._runs.get(op_id)
                        if run is not None:
                            run.cancel.set()
                            self._wake_locked(op_id)  # a waiting operation stops now, not at its time
            # Real time, not the runner's clock: a virtual clock must not race ahead here.
            self._beat.wait(CLAIM_TTL_SECONDS / 3)

    def _fenced_handle(self, op_id: str, h: ClusterHandle) -> ClusterHandle:
        """The cluster as this operation's steps see it: every Kubernetes write checks the claim
        first (engine.operations.fence), so a runner that lost it stops before its next write."""
        token = self._tokens.get(op_id)

        def check() -> None:
            if not self.may_act():
                raise Fenced(f"operation {op_id}: this instance may no longer act, so it writes nothing")
            claim = self._claims.runner_claim(op_id)
            if op_id in self._lost or claim is None or claim.token != token:
                raise Fenced(f"operation {op_id} was claimed by another runner")

        return replace(
            h,
            api=FencedKubeApi(h.api, check),
            pools=FencedPools(h.pools, check),
            workloads=h.workloads.through(lambda api: FencedWorkloadApi(api, check)) if h.workloads else None,
        )

    def evictions(self, cluster: str) -> Executor:
        """The cluster's lane for cordons, uncordons and force-deletions: `parallel_evictions` in
        flight at most, within the process-wide `max_evictions_in_flight` shared by every cluster."""
        return self._io.lane(("writes", cluster), lambda: self.settings.parallel_evictions)

    def eviction_executor(self, h: ClusterHandle) -> Executor:
        """The cluster's lane for evictions: `parallel_evictions` in flight (at most
        `max_parallel_evictions`), or as many as its adaptive limit (its eviction gate) allows;
        never more than the process-wide cap, and never waiting behind another cluster's evictions."""
        gate = self.eviction_gate(h)
        if gate is None:
            fixed = min(self.settings.parallel_evictions, self.settings.max_parallel_evictions)
            return self._io.lane(("evictions", h.name), lambda: fixed)
        return self._io.lane(("evictions", h.name), lambda: gate.limit)

    def offer_pods(
        self, cluster: str, nodes: Collection[str], pods: Collection[PodInfo], resource_version: str
    ) -> None:
        """A plan's pod listing, for the pod feed of a drain that starts soon after (`pod_feed`):
        it starts from these pods and watches from `resource_version` instead of listing again.
        Only the pods of the nodes the plan drains are kept."""
        if not resource_version or not nodes:
            return
        wanted = frozenset(nodes)
        listing = PodListing(
            pods=[p for p in pods if p.node_name in wanted], resource_version=resource_version
        )
        with self._lock:
            self._offered[cluster] = (wanted, listing, self.clock.monotonic())

    def pod_feed(self, op_id: str, api: KubeApi, nodes: Collection[str], *, cluster: str = "") -> PodFeed:
        """The operation's pod feed for these nodes (a new one when the nodes changed); a new one
        starts from the cluster's offered listing when that covers the nodes and is recent."""
        with self._lock:
            feed = self._feeds.get(op_id)
            if feed is not None and feed.nodes == frozenset(nodes):
                return feed
            offered = self._offered.pop(cluster, None)
            seed = None
            if offered is not None:
                covered, listing, taken_at = offered
                if frozenset(nodes) <= covered and self.clock.monotonic() - taken_at <= OFFERED_PODS_MAX_AGE:
                    seed = listing
            self._feeds[op_id] = PodFeed(
                api, nodes, on_change=lambda: self._wake(op_id), name=f"pod-watch-{op_id}", seed=seed
            )
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
                initial = max(2, min(self.settings.parallel_evictions, ADAPTIVE_EVICTIONS_START))
                settings = AimdSettings(
                    initial=min(initial, self.settings.max_parallel_evictions),
                    maximum=max(initial, self.settings.max_parallel_evictions),
                )
                limited = h.api if isinstance(h.api, RateLimitedApi) else None
                burst = limited.burst if limited is not None else None
                if burst is not None:
                    settings = settings.bounded(burst)
                queued = limited.last_wait_seconds if limited is not None else None
                # The cluster's lane admits by the gate's limit (`eviction_executor`): the gate
                # only times the answers, so no worker ever parks in it.
                gate = AdaptiveGate(AimdController(settings), self.clock.monotonic, queued, admits=False)
                self._gates[h.name] = gate
            return gate

    def _close_feed(self, op_id: str) -> None:
        with self._lock:
            feed = self._feeds.pop(op_id, None)
        if feed is not None:
            feed.close()

    def _forget(self, op_id: str) -> None:
        """The operation's run here is over: its place goes to the next one queued."""
        self._close_feed(op_id)
        with self._idle:
            self._runs.pop(op_id, None)
            if op_id in self._queue:
                self._queue.remove(op_id)
            self._tokens.pop(op_id, None)
            self._lost.discard(op_id)
            if not self._tokens:
                self._beat.set()  # the heartbeat thread ends now rather than at its next beat
            self._admit()
            self._idle.notify_all()

    def _fault(self, op_id: str, exc: StoreError) -> None:
        step = (op.step if (op := self._safe_get(op_id)) is not None else "") or "its first step"
        why = f"operation {op_id} stopped at {step}: {exc}; it resumes from there at the next start"
        log.error("%s", why, extra={"operation": op_id})
        with self._lock:
            self.faults[op_id] = why

    def _safe_get(self, op_id: str) -> Operation | None:
        try:
            return self._journal.get_operation(op_id)
        except StoreError:
            return None

    def _step(self, op: Operation) -> StepResult:
        handle = self._fenced_handle(op.id, self.clusters[op.target.cluster])
        step = op.step or first_step(op)
        fn = STEPS[step]
        failures = op.progress.step_failures
        try:
            result = fn(self, replace(op, step=step), handle)
        except ScalebotError as exc:
            if exc.category in SHOWN and not isinstance(exc, StoreError):
                # A refusal the user can act on (a cloud's permission denied or quota): the
                # operation fails with it, in one line, and the nodes are given back. The store's
                # own faults stop the runner as before (_fault).
                error = " ".join(str(exc).split())
                log.warning("step %s failed: %s", step, error, extra={"operation": op.id})
                return StepResult(
                    state=OpState.FAILED, error=error, events=[("final", f"Failed: {error}", "")]
                )
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
        with self._claims.fenced(op.id, self._tokens[op.id]):
            if not self._journal.save_progress(new):  # also releases the locks of a final state
                # Compare-and-set lost: a cancel ended the operation first. Its state stands;
                # returning it (not running) ends this loop without emitting anything.
                return self._journal.get_operation(op.id) or op
            if step != op.step or result.state:
                self._journal.journal(
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
        handle = self._fenced_handle(op.id, self.clusters[op.target.cluster])
        return give_back_nodes(self, op, handle, result)

    def _cancel(self, op: Operation) -> None:
        cancelled = self._give_back_nodes(
            op, StepResult(state=OpState.CANCELLED, events=[("final", "Cancelled", "")])
        )
        self._persist(op, cancelled)

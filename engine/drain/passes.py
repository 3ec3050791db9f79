"""One drain pass over a set of nodes, and the cordon/uncordon steps around it.

A pass lists the pods of every node being drained in ONE call, classifies them with the pure
filter pipeline, evicts what is due (bounded concurrency), classifies the answers and returns a
`DrainReport` plus the new `DrainState`. A pass never sleeps: the caller (`engine.drain.driver` or the
operation runner) decides when the next one runs, which is what makes a drain resumable after a
crash — repeating a pass with the same state has the same outcome (an eviction answered 404 or a
UID conflict counts as done; a pod already terminating is never evicted twice).

Semantics follow `kubectl drain` (all-or-nothing per node when a filter refuses a pod) and Cluster
API's machine drain (report grouped by the server's reason, drain order, unreachable nodes).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from engine.domain.drain_state import DrainState as DrainState  # noqa: PLC0414 (re-exported for the drain's callers)
from engine.domain.drain_state import PodFailure
from engine.domain.model import DRAINING_TAINT_KEY, PodInfo
from engine.drain import filters
from engine.drain.concurrency import AdaptiveGate
from engine.drain.report import DrainReport
from engine.kube import errors
from engine.kube.api import KubeApi

log = logging.getLogger(__name__)

PDB_RETRY_SECONDS = 5.0
"""kubectl retries a PDB-refused eviction every 5 s; we add ±20 % jitter so that many pods
refused together do not come back in lock-step."""
SERVER_ERROR_BACKOFF_CAP_SECONDS = 20.0
PROGRESS_EVERY = 500
"""Answers between two progress calls of a long pass (~10-20 s at the rates seen at scale)."""


@dataclass(frozen=True, slots=True)
class PassResult:
    report: DrainReport
    state: DrainState
    retry_at: datetime | None
    """The earliest instant a refused pod may be retried."""
    expected_gone_at: datetime | None = None
    """The earliest instant a terminating pod should be gone (the end of its grace period). A
    driver fed by a pod watch needs no such guess: the watch says when the pods are gone."""
    awaiting: frozenset[str] = frozenset()
    """UIDs of the pods this drain waits to see gone: terminating, or evicted or deleted now."""
    busy_nodes: frozenset[str] = frozenset()
    """Nodes with a pod that still holds the drain back (the others are drained)."""

    @property
    def next_retry_at(self) -> datetime | None:
        """The earliest instant a refused pod may be retried, or a terminating pod should be gone."""
        times = [t for t in (self.retry_at, self.expected_gone_at) if t is not None]
        return min(times, default=None)

    def wake_at(self, *, watched: bool) -> datetime | None:
        """When the next pass is due for this pass's own reasons: with a live pod watch, retries
        only (the watch reports the pods gone); without one, the expected ends too."""
        return self.retry_at if watched else self.next_retry_at

    @property
    def draining_nodes(self) -> tuple[str, ...]:
        """The nodes this pass drained: those whose drain has not ended with a refusal."""
        return tuple(n for n in self.report.nodes if n not in self.state.failed_nodes)


def cordon_nodes(
    api: KubeApi, nodes: Iterable[str], *, now: datetime, executor: Executor | None = None
) -> frozenset[str]:
    """Cordon every node and add scalebot's draining taint; return those already cordoned.

    All nodes are cordoned before any is drained (as kubectl and cluster-autoscaler do), so a pod
    evicted from one node is never rescheduled onto another node of the same operation. The nodes
    are read in one listing, not one GET each (`KubeApi.cordon_many`): a node costs at most its
    one write. With an `executor` the writes go out concurrently (a thousand nodes one after the
    other would hold the drain back); the client's rate limiter still bounds the request rate.
    """
    names = list(dict.fromkeys(nodes))
    for name in names:
        log.info("Cordoning Node", extra={"node": name})
    # Taint and cordon land in one write: a node that carries our taint was cordoned by us, so a
    # repeat of this step after a crash never mistakes our own cordon for a human's.
    before = api.cordon_many(
        names,
        taint_key=DRAINING_TAINT_KEY,
        taint_value=str(int(now.timestamp())),
        taint_effect="NoSchedule",
        executor=executor,
    )
    for name in names:
        if name not in before:
            # The Node is gone (removed by an earlier operation, a person, the provider): nothing
            # to drain there (Cluster API skips the drain of a missing Node). Retrying would loop.
            log.info("Node not found; skipping its drain", extra={"node": name})
    return frozenset(name for name, result in before.items() if result.cordoned_by_someone_else)


def uncordon_nodes(
    api: KubeApi,
    nodes: Iterable[str],
    *,
    keep_cordoned: frozenset[str],
    executor: Executor | None = None,
) -> tuple[str, ...]:
    """Undo only what we did: nodes a human had cordoned before the drain stay cordoned.

    Returns the nodes uncordoned (a Node that is gone is skipped: there is nothing to undo).
    """

    def uncordon(name: str) -> str | None:
        try:
            api.set_taint(name, DRAINING_TAINT_KEY, value="", effect="NoSchedule", present=False)
            if name in keep_cordoned:
                return None
            api.set_unschedulable(name, False)
        except errors.NotFound:
            return None
        return name

    names = list(nodes)
    # list(): consume the iterator so every node is done (and any error raised) before returning.
    done = list(executor.map(uncordon, names) if executor is not None else map(uncordon, names))
    return tuple(sorted(n for n in done if n is not None))


def uncordon_node(api: KubeApi, name: str) -> bool:
    """Undo a cordon and scalebot's draining taint; True if either was there.

    `kubectl uncordon` resets only `spec.unschedulable`, so a node drained by scalebot would stay
    unusable under its NoSchedule taint: every uncordon of ours (CLI, Slack) removes both.
    """
    had_taint = api.set_taint(name, DRAINING_TAINT_KEY, value="", effect="NoSchedule", present=False)
    was_cordoned = api.set_unschedulable(name, False)
    return had_taint or was_cordoned


def run_pass(
    api: KubeApi,
    *,
    nodes: Sequence[str],
    state: DrainState,
    options: filters.DrainOptions,
    now: datetime,
    executor: Executor,
    pod_filters: Sequence[filters.PodFilter] | None = None,
    rng: random.Random | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
    one_at_a_time: bool = False,
    pods_of: Callable[[Collection[str]], list[PodInfo]] | None = None,
    clock: Callable[[], datetime] | None = None,
    gate: AdaptiveGate | None = None,
) -> PassResult:
    """List, classify, evict what is due, and report. Never sleeps; safe to repeat.

    `pods_of(nodes)` gives the pods bound to the nodes (an `engine.drain.pod_feed.PodFeed` that a watch
    keeps current); without it the pass lists them. `clock` times each answer: a retry, the
    expected end of an evicted pod and the settle time count from the pod's own eviction, not
    from the start of a pass that may evict for minutes; without it every answer counts as `now`.
    `gate` adapts how many evictions are in flight (`engine.drain.concurrency`: AIMD on the answers'
    latency and the server's 429/5xx); without it the executor's size is the concurrency.

    A pass that evicts thousands of pods runs for minutes; `on_progress(answered, due)` is called
    from the caller's thread every `progress_every` answers, so the people watching see it move.

    `one_at_a_time`: only one node with pods to move is drained at a time (the first by name that
    is neither refused nor done); the pods of the others wait their turn (`DrainReport.queued`).
    Empty nodes, and nodes with only finished or DaemonSet pods, are done together. This is
    cluster-autoscaler's caution (--max-drain-parallelism 1; empty nodes in bulk): each node's
    pods have found their new places before the next node's pods move.
    """
    rng = rng or random.Random()
    # A node whose drain ended with a refusal is left alone, as kubectl moves on to the next node.
    wanted = set(nodes) - set(state.failed_nodes)
    live_nodes = {n.name: n for n in api.list_nodes() if n.name in wanted}
    pods = (
        pods_of(sorted(live_nodes)) if pods_of is not None else api.list_pods(node_names=sorted(live_nodes))
    )
    unreachable = frozenset(name for name, node in live_nodes.items() if node.is_unreachable)
    needs_daemonsets = any(p.controller and p.controller.is_daemonset for p in pods)
    ctx = filters.DrainContext(
        options=options,
        now=now,
        daemonset_keys=api.list_daemonset_keys() if needs_daemonsets else frozenset(),
        unreachable_nodes=unreachable,
    )
    classified = filters.classify_pods(pods, ctx, pod_filters)
    plan = _split(classified, state=state, now=now, unreachable=unreachable, one_at_a_time=one_at_a_time)
    state = replace(state, failed_nodes={**state.failed_nodes, **refused_nodes(classified)})

    evict_grace = options.grace_period_seconds
    if evict_grace is not None and evict_grace < 0:
        # kubectl's -1: send no grace period, so the pod's own applies (the server would read a
        # negative value as 1 s).
        evict_grace = None
    due = interleave_by_controller(plan.due)
    outcomes: list[_Outcome] = []
    answered_at = clock or (lambda: now)

    def act(item: tuple[PodInfo, filters.Action]) -> _Outcome:
        pod, action = item
        grace = 1 if pod.node_name in unreachable else evict_grace
        if gate is None:
            return _act(api, pod, action, grace=grace, clock=answered_at)
        return gate.run(lambda: _act(api, pod, action, grace=grace, clock=answered_at), _overloaded)

    answers = executor.map(act, due)
    for answered, outcome in enumerate(answers, start=1):
        outcomes.append(outcome)
        if on_progress is not None and answered % progress_every == 0 and answered < len(due):
            on_progress(answered, len(due))
    # A Node that vanished is done (Cluster API): the report names only the nodes still there.
    result = _fold(plan, outcomes, state=state, now=now, rng=rng, nodes=tuple(sorted(live_nodes)))
    holding = result.report.blocking_keys
    return replace(result, busy_nodes=frozenset(p.node_name for p in pods if p.key in holding))


def interleave_by_controller(
    due: Sequence[tuple[PodInfo, filters.Action]],
) -> list[tuple[PodInfo, filters.Action]]:
    """Round-robin over controllers, so evictions in flight at once rarely share a PDB.

    The API server serialises evictions under one PodDisruptionBudget (each updates its status,
    and conflicting updates are retried server-side), so sending a workload's pods back to back
    leaves most workers waiting on one budget. Order within a pass does not change what a pass
    decides; it only spreads the load. Deterministic: same input, same order.
    """
    groups: dict[str, list[tuple[PodInfo, filters.Action]]] = {}
    for item in due:
        pod = item[0]
        key = pod.controller.uid if pod.controller else f"bare:{pod.key}"
        groups.setdefault(key, []).append(item)
    lanes = list(groups.values())
    return [
        lane[i]
        for i in range(max((len(lane) for lane in lanes), default=0))
        for lane in lanes
        if i < len(lane)
    ]


@dataclass(slots=True)
class _PassPlan:
    due: list[tuple[PodInfo, filters.Action]] = field(default_factory=list)
    terminating: list[PodInfo] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    later: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    left_unreachable: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    still_failing: dict[str, PodFailure] = field(default_factory=dict)


def _split(
    classified: Sequence[tuple[PodInfo, filters.Verdict]],
    *,
    state: DrainState,
    now: datetime,
    unreachable: frozenset[str] = frozenset(),
    one_at_a_time: bool = False,
) -> _PassPlan:
    """Decide, per pod, what this pass does with it (pure)."""
    plan = _PassPlan()
    refused_nodes = filters.blocked_nodes(classified)
    moving = (filters.Action.EVICT, filters.Action.WAIT)
    busy = sorted({p.node_name for p, v in classified if v.action in moving} - set(refused_nodes))
    # One at a time: the first busy node drains; the others' pods wait their turn.
    waiting_turn = frozenset(busy[1:]) if one_at_a_time else frozenset()
    # Drain order counts pods that are already terminating, so a slow low-order pod holds back
    # every higher group (Cluster API's minOrder rule). It is computed per node, as Cluster API
    # drains one Machine at a time: a node held by a budget must not hold back the critical pods
    # of every other node.
    min_order: dict[str, int] = {}
    for pod, verdict in classified:
        if verdict.action in (filters.Action.EVICT, filters.Action.WAIT):
            node_min = min_order.get(pod.node_name, verdict.order)
            min_order[pod.node_name] = min(node_min, verdict.order)
    for pod, verdict in classified:
        action = verdict.action
        if action is filters.Action.SKIP:
            plan.skipped.append(pod.key)
            if pod.is_terminating and pod.node_name in unreachable:
                # Skipped by the unreachable-node rule: the drain ends without it, the report names it.
                plan.left_unreachable.append(pod.key)
        elif action is filters.Action.BLOCK:
            plan.failed.setdefault(f"cannot delete {verdict.reason}", []).append(pod.key)
        elif pod.node_name in waiting_turn:
            plan.queued.append(pod.key)
        elif action is filters.Action.WAIT:
            plan.waiting.append(pod.key)
        elif pod.is_terminating:
            plan.terminating.append(pod)
        elif pod.node_name in refused_nodes:
            # kubectl is all-or-nothing per node: a refused pod keeps every pod on its node.
            plan.skipped.append(pod.key)
        elif action is filters.Action.EVICT and verdict.order > min_order.get(pod.node_name, 0):
            plan.later.append(pod.key)
        else:
            failure = state.failures.get(pod.uid)
            if failure is not None and failure.retry_at > now:
                plan.failed.setdefault(failure.key, []).append(pod.key)
                plan.still_failing[pod.uid] = failure
            else:
                plan.due.append((pod, action))
    return plan


def _overloaded(outcome: _Outcome) -> bool:
    return outcome.error is not None and outcome.error.is_server_overload


@dataclass(frozen=True, slots=True)
class _Outcome:
    pod: PodInfo
    action: filters.Action
    at: datetime
    """When the answer came."""
    error: errors.KubeError | None = None
    gone: bool = False


def _act(
    api: KubeApi,
    pod: PodInfo,
    action: filters.Action,
    *,
    grace: int | None,
    clock: Callable[[], datetime],
) -> _Outcome:
    try:
        if action is filters.Action.DELETE:
            api.delete_pod(pod, grace_seconds=grace)
        else:
            api.evict_pod(pod, grace_seconds=grace)
    except (errors.NotFound, errors.Conflict):
        # 404, or the name now belongs to a new pod (UID precondition failed): this one is gone.
        return _Outcome(pod, action, clock(), gone=True)
    except errors.Forbidden as exc:
        if exc.is_namespace_terminating and pod.is_terminating:
            return _Outcome(pod, action, clock())
        return _Outcome(pod, action, clock(), error=exc)
    except errors.KubeError as exc:
        return _Outcome(pod, action, clock(), error=exc)
    at = clock()
    log.info(
        "pod/%s %s",
        pod.name,
        "deleted" if action is filters.Action.DELETE else "evicted",
        extra={"pod": pod.key, "node": pod.node_name},
    )
    return _Outcome(pod, action, at)


def refused_nodes(classified: Sequence[tuple[PodInfo, filters.Verdict]]) -> dict[str, str]:
    """Node → kubectl's error for the pods the filters refuse there ("cannot delete <reason>: pods").

    No retry changes a filter's verdict, so kubectl ends that node's drain at once (evicting none
    of its pods) and goes on with the others; so do we.
    """
    refused: dict[str, dict[str, list[str]]] = {}
    for pod, verdict in classified:
        if verdict.action is filters.Action.BLOCK:
            refused.setdefault(pod.node_name, {}).setdefault(verdict.reason, []).append(pod.key)
    return {
        node: "cannot delete "
        + "; ".join(f"{reason}: {', '.join(sorted(pods))}" for reason, pods in sorted(by_reason.items()))
        for node, by_reason in refused.items()
    }


def is_final_eviction_error(exc: errors.KubeError) -> bool:
    """An eviction answer no retry will change, which ends the drain of the pod's node (kubectl).

    A pod under two budgets (500), a 403 other than "namespace terminating", and any other 4xx
    but 404/409 (gone) and 429 (a budget or the server asks us to wait). Other 5xx and transport
    errors may be transient and are retried with backoff.
    """
    if exc.is_multiple_pdbs:
        return True
    if exc.is_namespace_terminating:
        return False
    return 400 <= exc.status < 500 and exc.status not in (404, 409, 429)


def retry_delay_seconds(exc: errors.KubeError, attempts: int, rng: random.Random) -> float:
    """How long to leave a refused pod alone, per the classification in engine-semantics §1."""
    if exc.retry_after_seconds is not None and exc.status == 429:
        return float(exc.retry_after_seconds)
    if exc.is_pdb_violation or exc.is_namespace_terminating:
        return PDB_RETRY_SECONDS * rng.uniform(0.8, 1.2)
    if exc.is_multiple_pdbs:
        return 20.0  # retried once per pass, never in a tight loop
    # API Priority and Fairness 429s, 5xx and transport errors: exponential backoff with jitter.
    backoff = min(SERVER_ERROR_BACKOFF_CAP_SECONDS, 2.0 ** max(0, attempts - 1))
    return backoff * rng.uniform(0.8, 1.2)


def _fold(
    plan: _PassPlan,
    outcomes: Sequence[_Outcome],
    *,
    state: DrainState,
    now: datetime,
    rng: random.Random,
    nodes: tuple[str, ...],
) -> PassResult:
    failures: dict[str, PodFailure] = dict(plan.still_failing)
    failed_nodes: dict[str, str] = dict(state.failed_nodes)
    terminating = [p.key for p in plan.terminating]
    awaiting = {p.uid for p in plan.terminating}
    evicted: list[str] = []
    deleted: list[str] = []
    last_eviction_at = state.last_eviction_at
    for outcome in outcomes:
        key = outcome.pod.key
        if outcome.gone:
            continue
        if outcome.error is None:
            (deleted if outcome.action is filters.Action.DELETE else evicted).append(key)
            awaiting.add(outcome.pod.uid)
            last_eviction_at = max(last_eviction_at or outcome.at, outcome.at)
            if outcome.action is filters.Action.EVICT:
                terminating.append(key)
            continue
        previous = state.failures.get(outcome.pod.uid)
        attempts = previous.attempts + 1 if previous else 1
        failure_key = outcome.error.eviction_key
        delay = retry_delay_seconds(outcome.error, attempts, rng)
        failures[outcome.pod.uid] = PodFailure(failure_key, outcome.at + timedelta(seconds=delay), attempts)
        plan.failed.setdefault(failure_key, []).append(key)
        if is_final_eviction_error(outcome.error):
            failed_nodes.setdefault(
                outcome.pod.node_name,
                f"error when evicting pods/{outcome.pod.name!r} -n {outcome.pod.namespace!r}: "
                f"{outcome.error}",
            )
            continue
        log.warning(
            "error when evicting pods/%r -n %r (will retry after %.0fs): %s",
            outcome.pod.name,
            outcome.pod.namespace,
            delay,
            outcome.error,
            extra={"pod": key, "node": outcome.pod.node_name},
        )
    report = DrainReport(
        started_at=state.started_at,
        nodes=nodes,
        terminating=tuple(terminating),
        failed={k: tuple(v) for k, v in plan.failed.items()},
        waiting=tuple(plan.waiting),
        later=tuple(plan.later),
        skipped=tuple(plan.skipped),
        left_unreachable=tuple(plan.left_unreachable),
        queued=tuple(plan.queued),
        evicted=tuple(evicted),
        deleted=tuple(deleted),
        force_deleted=(),
    )
    new_state = replace(
        state,
        failures=failures,
        last_eviction_at=last_eviction_at,
        evicted_total=state.evicted_total + len(evicted),
        deleted_total=state.deleted_total + len(deleted),
        failed_nodes=failed_nodes,
    )
    expected_gone = [p.deletion_timestamp for p in plan.terminating if p.deletion_timestamp]
    # Pods evicted in this pass have no deletionTimestamp in our listing yet: expect them gone at
    # the end of their grace period counted from their own eviction, so the next pass is not left
    # to the 20 s interval.
    expected_gone += [
        o.at + timedelta(seconds=o.pod.termination_grace_seconds)
        for o in outcomes
        if o.error is None and not o.gone and o.action is filters.Action.EVICT
    ]
    return PassResult(
        report=report,
        state=new_state,
        retry_at=min((f.retry_at for f in failures.values()), default=None),
        expected_gone_at=min(expected_gone, default=None),
        awaiting=frozenset(awaiting),
    )


def force_delete_pods(
    api: KubeApi,
    pods: Sequence[PodInfo],
    *,
    executor: Executor,
    on_deleted: Callable[[PodInfo], None] | None = None,
) -> list[PodInfo]:
    """Phase 2 of a zero-scale: DELETE with grace 0 and a UID precondition, bypassing PDBs."""

    def delete(pod: PodInfo) -> PodInfo | None:
        try:
            api.delete_pod(pod, grace_seconds=0)
        except (errors.NotFound, errors.Conflict):
            return None
        log.warning("Force-deleted Pod with grace 0", extra={"pod": pod.key, "node": pod.node_name})
        if on_deleted is not None:
            on_deleted(pod)
        return pod

    return [p for p in executor.map(delete, pods) if p is not None]

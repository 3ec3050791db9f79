"""The `cordon` and `drain` steps (phase 1), and giving nodes back when an operation stops.

- `cordon` marks the Machines for deletion, cordons and taints the nodes, and (a sleep) keeps
  which workloads its nodes displace.
- `drain` runs ONE drain pass per invocation and asks to be called again after a wait; its
  `DrainState` and the phase-1 start live in the operation's `progress`, so the 5-minute window
  and drain timeouts survive restarts (a restart at 4:00 into phase 1 reaches phase 2 one minute
  later). As phase 2 would start it re-checks that every pool still goes to zero.
- `give_back_nodes`: a drain that failed or was cancelled uncordons what it cordoned and takes
  back its deletion marks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from engine.domain import force_scope
from engine.domain.durations import format_duration
from engine.domain.model import NodeInfo
from engine.domain.operation import (
    Operation,
    OperationProgress,
    OpKind,
    OpState,
    PoolChange,
    ProgressEvent,
    ProgressKind,
    Released,
    format_seconds,
)
from engine.drain import filters, force_rules
from engine.drain import passes as drain
from engine.drain import progress as drain_progress
from engine.drain.pacing import PassFacts, next_pass
from engine.kube import events as kube_events
from engine.kube.api import SchedulingApi
from engine.operations.flows import NEXT
from engine.operations.steps.context import (
    ClusterHandle,
    StepResult,
    WithEvictions,
    WithPodFeed,
    WithSleepRecords,
    whole_cluster_stop,
)
from engine.operations.steps.report import final_event, summary_of
from engine.operations.steps.restore import records_restore
from engine.planning import placement
from engine.pools.base import TakesBackRemoval
from engine.workloads import returning

log = logging.getLogger(__name__)


class DisplacedContext(WithPodFeed, WithSleepRecords, Protocol):
    """What keeping the displaced workloads uses: the drain's pod feed, and the sleep's records."""


class CordonContext(WithEvictions, DisplacedContext, Protocol):
    """What `cordon` uses of its runner: the cluster's executor for cordons, and what keeping the
    displaced workloads uses."""


class DrainPassContext(WithEvictions, WithPodFeed, Protocol):
    """What `drain` uses of its runner: the pod feed and the cluster's eviction executors and gate."""


def drained_nodes(op: Operation) -> tuple[str, ...]:
    """The nodes the operation cordons and drains: the plan's, and those that joined a pool
    going to zero while it ran (a zero-scale drains them too rather than leave them running).
    A consolidation drains one node at a time: the one its last fit check chose."""
    if op.kind is OpKind.CONSOLIDATE:
        current = op.progress.consolidation.current
        return (current,) if current else ()
    joined = op.progress.removal.joined
    return tuple(sorted({*op.plan.nodes, *(n for names in joined.values() for n in names)}))


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


def step_cordon(ctx: CordonContext, op: Operation, h: ClusterHandle) -> StepResult:
    now = ctx.clock.now()
    nodes = drained_nodes(op)
    stopper = whole_cluster_stop(op, h)
    if stopper is not None:
        # The cluster stops once drained: nothing to mark, but a stop that would take a pool
        # outside the plan is refused now, before anything is drained.
        stopper.prepare_stop([c.pool for c in op.plan.pools])
    else:
        for change in op.plan.pools:
            chosen = [n for n in change.nodes_to_remove if n in nodes]
            if chosen:
                h.pools.prepare_removal(change.pool, chosen)
    saved = op.progress.drain.state
    already = drain.cordon_nodes(h.api, nodes, now=now, executor=ctx.evictions(h.name))
    _record_displaced(ctx, op, h, nodes)
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


def _record_displaced(ctx: DisplacedContext, op: Operation, h: ClusterHandle, nodes: Sequence[str]) -> None:
    """Before a sleep drains its nodes (cordoned: no new pod lands), keep which workloads have pods
    on them: its wake follows exactly those, with the workloads it scales back, and no other.

    The pods are the drain's own (its pod feed, opened here for `nodes`, the drain's nodes): the
    plan's listing, which the feed's watch then follows from its resourceVersion. So a sleep lists
    its pods once, for the plan, where this step used to list every emptied node's pods again (at
    30,000 pods a second full listing). A feed with no listing to start from lists once here, and
    the drain's passes read that one."""
    if not records_restore(op):
        return
    pool_of = {n: c.pool for c in op.plan.pools if c.after < c.before for n in c.nodes_to_remove}
    pool_of.update({n: pool for pool, names in op.progress.removal.joined.items() for n in names})
    emptied = [n for n in nodes if n in pool_of]
    if not emptied:
        return
    now = ctx.clock.now()
    pods = ctx.pod_feed(op.id, h.api, nodes, cluster=h.name).pods(emptied)
    for pool, keys in returning.displaced_by(pool_of, pods).items():
        ctx.sleep_records.record_displaced(h.name, pool, keys, op_id=op.id, at=now)


def drain_state(op: Operation) -> drain.DrainState:
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


def step_drain(ctx: DrainPassContext, op: Operation, h: ClusterHandle) -> StepResult:
    now = ctx.clock.now()
    state = drain_state(op)

    def progress(answered: int, due: int) -> None:
        # The status line only (a "report" without a condition): no thread reply, and the Slack
        # sender coalesces these into its per-message update interval.
        text = f"Evicting Pods: {answered:,} of {due:,} answered"
        ctx.emit(ProgressEvent(operation=op, kind="report", text=text, condition=""))

    # Cluster API's nodeDrainTimeout: past a pool's timeout its nodes stop draining and their
    # Machines are removed with what is left on them; the thread says so once per pool.
    stopped, reported, timeout_events = _drain_timeouts(op, state.started_at, now)
    nodes = drained_nodes(op)
    feed = ctx.pod_feed(op.id, h.api, nodes, cluster=h.name)
    result = drain.run_pass(
        h.api,
        nodes=[n for n in nodes if n not in stopped],
        state=state,
        options=_options(op),
        pod_filters=_scoped_filters(op),
        now=now,
        executor=ctx.eviction_executor(h),
        gate=ctx.eviction_gate(h),
        on_progress=progress,
        one_at_a_time=op.plan.one_at_a_time,
        pods_of=feed.pods,
        clock=ctx.clock.now,
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
    timeout = ctx.settings.drain_timeout
    deadline: datetime | None = None
    if forcing:
        deadline = started + ctx.settings.graceful_window
    elif timeout is not None:
        deadline = state.started_at + timeout
    decision = next_pass(
        ctx.settings.pacing,
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
        return _drain_failed(h, op, data, events, error, final=(f"Failed: {error}", message))
    if decision.done and not refused:
        events.append(("phase", result.report.summary_line(), ""))
        _record_nodes(h, op, kube_events.DRAINED, f"Drain completed (operation {op.id})")
        if op.kind is OpKind.DRAIN:  # draining was the whole operation
            return StepResult(
                progress=data,
                state=OpState.SUCCEEDED,
                events=[*events, final_event(op, data, now)],
                summary=summary_of(op, data, now),
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
        return _drain_failed(h, op, data, events, error, final=(f"Failed: {error}\n{message}", message))
    # From the clock after the pass: a pass that evicted for minutes has used up part of the wait.
    return StepResult(progress=data, wait=decision.wait_seconds(ctx.clock.now()), events=events)


def _drain_failed(
    h: ClusterHandle,
    op: Operation,
    data: OperationProgress,
    events: Sequence[tuple[ProgressKind, str, str]],
    error: str,
    *,
    final: tuple[str, str],
) -> StepResult:
    """The drain fails the operation with `error`: a DrainFailed event on each of its nodes and
    `final` (the line and its detail) as the last event."""
    _record_nodes(h, op, kube_events.DRAIN_FAILED, f"{error} (operation {op.id})", warning=True)
    return StepResult(progress=data, state=OpState.FAILED, error=error, events=[*events, ("final", *final)])


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
    refuges = [node for node in h.api.list_nodes() if _is_refuge(node, leaving)]
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
    bound = h.api.list_bound_pods()
    fits = placement.place(
        refuges,
        [p for p in bound if p.key not in remaining],
        [p for p in bound if p.key in remaining],
    ).assignments
    if not fits:
        return ""
    where = ", ".join(f"{pod} → {node}" for pod, node in sorted(fits.items())[:5])
    more = f" and {len(fits) - 5} more" if len(fits) > 5 else ""
    return f"nodes in no pool could still run {len(fits)} of the remaining Pods ({where}{more})"


def _is_refuge(node: NodeInfo, leaving: set[str]) -> bool:
    if node.name in leaving or node.unschedulable or node.deletion_timestamp is not None:
        return False
    if CONTROL_PLANE_KEYS & set(node.labels):
        return False
    if any(t.key in CONTROL_PLANE_KEYS for t in node.taints):
        return False
    return node.ready == "True"


def give_back_nodes(ctx: WithEvictions, op: Operation, h: ClusterHandle, result: StepResult) -> StepResult:
    """A drain that failed or was cancelled uncordons (and untaints) the nodes it cordoned, and says so.

    cluster-autoscaler and Karpenter do the same when a scale-down fails: a node left cordoned
    and tainted by nobody's decision is capacity lost until someone notices. Nodes that were
    cordoned before the operation stay cordoned (only our taint goes), and the message names
    them. After the drain (remove, verify) the nodes are being removed: nothing to give back.
    """
    progress = result.progress or op.progress
    state = progress.drain.state
    if op.step not in ("cordon", "workloads_leave", "drain"):
        return result
    unmarked = take_back_marks(h, op)
    if state is None:
        if not unmarked:
            return result
        uncordoned: Sequence[str] = ()
        kept: list[str] = []
    else:
        uncordoned = drain.uncordon_nodes(
            h.api, drained_nodes(op), keep_cordoned=state.already_cordoned, executor=ctx.evictions(h.name)
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

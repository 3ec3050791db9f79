"""The `workloads_sleep`, `workloads_leave`, `workloads_wake` and `workloads_return` steps.

`workloads_sleep` scales down what the approved plan lists, in reverse wake order;
`workloads_leave`, the nodes cordoned, lets the pods of what it scaled to zero leave before the drain;
`workloads_wake` restores the workloads one wake order at a time (`engine.workloads.order`),
following each until it is available before the next; `workloads_return` follows the workloads
the wake scaled back or the sleep displaced, for a bounded time, and names those not back and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.domain.durations import format_duration
from engine.domain.operation import Operation, OperationPlan, OpKind, OpState, ProgressKind, WorkloadCount
from engine.operations.flows import NEXT
from engine.operations.steps.context import ClusterHandle, StepResult, WithPodFeed, WithSleepRecords
from engine.operations.steps.cordon_drain import drained_nodes
from engine.workloads import Decision, WorkloadPlan, WorkloadRecord, returning
from engine.workloads import Outcome as WorkloadOutcome
from engine.workloads import order as wake_order


def step_workloads_sleep(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """Scale workloads to zero first: fewer pods to evict, and autoscalers empty nodes themselves."""
    if h.workloads is None:
        return StepResult(
            state=OpState.FAILED, error=f"cluster {h.name} has no workloads provider configured"
        )

    def record(rec: WorkloadRecord) -> None:
        ctx.sleep_records.record_workload(h.name, rec.key, rec.to_dict(), op_id=op.id, at=ctx.clock.now())

    plan, unapproved = _approved_only(h.workloads.plan_sleep(), op.plan)
    # The reverse of the wake order: what the others depend on is scaled down last.
    report = h.workloads.sleep(wake_order.in_sleep_order(plan), record=record)
    shrinking = any(c.after < c.before for c in op.plan.pools)
    text = f"Workloads: {report.headline}\n{report.render(max_items=10)}".strip()
    if unapproved:
        text += f"\nNot in the approved plan, left as they are: {', '.join(unapproved)}"
    # A repeat (after a crash) finds them asleep already: keep those the first run scaled down.
    scaled = {*op.progress.workloads.scaled_to_zero, *(r.key for r in report.records if _to_zero(r))}
    workloads = replace(op.progress.workloads, headline=report.headline, scaled_to_zero=tuple(sorted(scaled)))
    return StepResult(
        then=NEXT if shrinking else "nothing_to_shrink",
        progress=replace(op.progress, workloads=workloads),
        events=[("phase", text, "")],
    )


def _to_zero(record: WorkloadRecord) -> bool:
    """A Deployment or StatefulSet set to no replicas: its controller deletes its pods."""
    return record.kind in ("Deployment", "StatefulSet") and record.target == 0


def step_workloads_leave(ctx: WithPodFeed, op: Operation, h: ClusterHandle) -> StepResult:
    """Between the cordon and the drain: wait until the pods of the workloads the sleep scaled to
    zero have left the drained nodes, for at most `workloads_leave_timeout`.

    Their controllers delete them anyway; evicting them first only doubles that work (2,900
    evictions at 100 nodes) and, under a PodDisruptionBudget, is refused until the controller is
    done. The pod feed's watch wakes the step when the last one is gone. Whatever is still there
    after the bound is drained like any other pod, so no pod stays on a removed node by this wait.
    The drain's phase 1 (its graceful window) starts when the wait ends.
    """
    now = ctx.clock.now()
    before = op.progress.workloads
    nodes = drained_nodes(op)
    feed = ctx.pod_feed(op.id, h.api, nodes, cluster=h.name)
    leaving = returning.leaving_with(frozenset(before.scaled_to_zero), feed.pods(nodes))
    since = before.leaving_since or now
    counted = before.leaving if before.leaving_since is not None else len(leaving)
    limit = ctx.settings.workloads_leave_timeout
    if leaving and now < since + limit:
        feed.await_gone([p.uid for p in leaving])
        events: list[tuple[ProgressKind, str, str]] = []
        if before.leaving_since is None:
            text = (
                f"Waiting up to {format_duration(limit)} for {len(leaving)} Pods of the workloads scaled "
                "to zero to leave with them before draining"
            )
            events.append(("phase", text, ""))
        # The feed's watch wakes the step as soon as the last one is gone; without a live watch it
        # looks again at the drain's pass interval.
        wait = (since + limit - now).total_seconds()
        if not feed.live:
            wait = min(wait, ctx.settings.pass_interval.total_seconds())
        waiting = replace(before, leaving_since=since, leaving=counted)
        return StepResult(progress=replace(op.progress, workloads=waiting), wait=wait, events=events)
    left = before.left + max(0, counted - len(leaving))
    done = replace(before, leaving_since=None, leaving=0, left=left)
    drain = replace(op.progress.drain, phase1_started_at=now)
    progress = replace(op.progress, workloads=done, drain=drain)
    if not counted:
        return StepResult(then=NEXT, progress=progress)
    text = f"{counted - len(leaving)} Pods left with their workloads in {format_duration(now - since)}"
    if leaving:
        text += f"; {len(leaving)} still there are drained like the others"
    return StepResult(then=NEXT, progress=progress, events=[("phase", text, "")])


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


def step_workloads_wake(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
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
        return _follow_order(ctx, op, h)
    records = [WorkloadRecord.from_dict(r) for r in ctx.sleep_records.workload_records(h.name)]
    plan = h.workloads.plan_wake(records or None)
    groups = wake_order.plan_groups(plan)
    # Once, with the first restore: the annotations that are no wake order (text from the cluster).
    ignored = "".join(f"\n{n.key}: {n.reason}" for n in wake_order.invalid_orders(plan)[:10])
    if not before.orders_done and not wake_order.is_ordered(groups):
        report = h.workloads.apply_wake(plan)
        restored = tuple(o.key for o in report.changed)
        return _workloads_woken(ctx, op, h, report.headline, restored=restored, notes=ignored)
    group = wake_order.next_group(groups, before.orders_done)
    if group is None:
        return _workloads_woken(ctx, op, h, before.headline, restored=before.restored)
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
    progress = replace(progress, waking=group.keys, waking_order=group.label, waking_since=ctx.clock.now())
    text += f"; waiting until they are available before wake order {later.label}"
    return StepResult(
        progress=replace(op.progress, workloads=progress), wait=0.5, events=[("phase", text + notes, "")]
    )


def _follow_order(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """The wake order restored last: available, or out of time (named, and the wake goes on)?"""
    assert h.workloads is not None
    now = ctx.clock.now()
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
    if now >= since + ctx.settings.workloads_return_timeout:
        why = returning.why_not_back(missing, h.api.list_pods())
        text = (
            f"Workloads of wake order {label} not all available after {format_duration(now - since)}; "
            f"going on with the next order; not back: {returning.named(why)}"
        )
        return StepResult(progress=replace(op.progress, workloads=done), events=[("phase", text, "")])
    return StepResult(wait=RETURN_POLL_SECONDS)


def _workloads_woken(
    ctx: WithSleepRecords,
    op: Operation,
    h: ClusterHandle,
    headline: str,
    *,
    restored: tuple[str, ...],
    notes: str = "",
) -> StepResult:
    assert h.workloads is not None
    ctx.sleep_records.clear_workload_records(h.name)
    available = h.workloads.availability(keys=_followed(ctx, op, h, restored))
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


def _followed(
    ctx: WithSleepRecords, op: Operation, h: ClusterHandle, restored: Sequence[str]
) -> frozenset[str]:
    """The workloads a wake waits for: those it scaled back, and those whose pods were on the nodes
    the sleeps of its pools emptied. A workload scalebot never touched is not its to report."""
    return frozenset(restored) | ctx.sleep_records.displaced(h.name, {c.pool for c in op.plan.pools})


RETURN_POLL_SECONDS = 5.0
"""How often a wake looks again at the workloads not yet back."""


def step_workloads_return(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """With the nodes Ready: name the workloads not yet available, follow them for a bounded time
    (`workloads_return_timeout`), then name those still not back and why (their pending pods)."""
    if op.kind is not OpKind.WAKE or h.workloads is None:
        return StepResult(then=NEXT)
    now = ctx.clock.now()
    before = op.progress.workloads
    availability = h.workloads.availability(keys=_followed(ctx, op, h, before.restored))
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
    limit = ctx.settings.workloads_return_timeout
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

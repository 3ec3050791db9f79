"""The `remove` and `verify` steps: machines out of the pools, then every pool at its target.

`remove` waits for volumes to detach as Cluster API does, drains nodes that joined a pool going
to zero (back to `cordon`), removes the drained nodes and sets each pool's target size; `verify`
waits (at most `verify_timeout`) for the pools to report it, and for Cluster API's hooked Machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from engine.domain.durations import format_duration
from engine.domain.operation import Operation, OpState, PoolChange, ProgressKind, emptied_not_removed
from engine.operations.flows import NEXT
from engine.operations.steps.context import (
    Basics,
    ClusterHandle,
    StepResult,
    WithSleepRecords,
    whole_cluster_stop,
)
from engine.operations.steps.report import final_event, provider_progress, summary_of
from engine.operations.steps.restore import clear_restore, ends_sleep
from engine.pools.base import Pool, PoolSizeError, StopsCluster

MAX_JOIN_ROUNDS = 3
"""A pool going to zero that gains nodes again after this many rounds of draining the newcomers
has someone (an autoscaler) growing it: the operation fails rather than chase it for ever."""


def step_remove(ctx: Basics, op: Operation, h: ClusterHandle) -> StepResult:
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
    detaching = _wait_for_volume_detach(ctx, op, h, shrinking)
    if detaching is not None:
        return detaching
    stopper = whole_cluster_stop(op, h)
    if stopper is not None:
        return _stop_cluster(ctx, op, stopper, shrinking, joined)
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
        op.progress.removal, nodes_removed=removed, nodes_emptied=emptied, removed_at=ctx.clock.now()
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


def _stop_cluster(
    ctx: Basics,
    op: Operation,
    stopper: StopsCluster,
    shrinking: Sequence[PoolChange],
    joined: Mapping[str, Sequence[str]],
) -> StepResult:
    """Every pool to zero on a cluster that stops whole: the drained cluster is stopped (its nodes
    go with it; the pools keep their sizes for the start), instead of each pool's removal."""
    stopper.stop_cluster()
    removed = len({n for c in shrinking for n in (*c.nodes_to_remove, *joined.get(c.pool, ()))})
    text = (
        f"Stopped the cluster: its {removed} drained node{'s' if removed != 1 else ''} went with it; "
        "its pools keep their sizes, which a wake starts again"
    )
    removal = replace(op.progress.removal, nodes_removed=removed, removed_at=ctx.clock.now())
    return StepResult(then=NEXT, progress=replace(op.progress, removal=removal), events=[("phase", text, "")])


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


def step_verify(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """Every pool at its target, within `verify_timeout` of the removal; else fail with the reason."""
    now = ctx.clock.now()
    wrong = []
    refused = op.progress.removal.target_refused
    waiting: list[str] = []
    pools = [h.pools.get_pool(change.pool) for change in op.plan.pools]
    followed, progress = provider_progress(op, pools)
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
            clear_restore(ctx, op, h)
        return StepResult(
            state=OpState.SUCCEEDED,
            events=[*progress, final_event(op, op.progress, now)],
            summary=summary_of(op, op.progress, now),
        )
    started = op.progress.removal.removed_at or now
    timeout = ctx.settings.verify_timeout
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
            summary=summary_of(op, op.progress, now),
        )
    removal = replace(op.progress.removal, verify=tuple(wrong), removed_at=started)
    if waiting:
        removal = replace(removal, hooks_reported="Waiting for Cluster API: " + "; ".join(waiting))
    data = replace(op.progress, removal=removal, provider_progress=followed)
    return StepResult(wait=5.0, progress=data, events=events)


def _wait_for_volume_detach(
    ctx: Basics, op: Operation, h: ClusterHandle, shrinking: Sequence[PoolChange]
) -> StepResult | None:
    """Cluster API waits for a drained node's volumes to detach (status.volumesAttached empty)
    before it deletes the machine, up to nodeVolumeDetachTimeout; so does the removal. None: go on."""
    wanted = {n: c for c in shrinking for n in c.detach_wait}
    if not wanted:
        return None
    now = ctx.clock.now()
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

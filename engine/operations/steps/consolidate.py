"""The steps of a consolidation: `fit`, `remove_node`, `consolidated` (with cordon and drain).

Nodes go one at a time: `fit` re-checks, against a fresh listing, that the next node's pods still
fit on the nodes that stay (`engine.planning.consolidation.recheck`); a node whose pods no longer
fit is skipped and reported, never cordoned. Each is drained and removed before the next.
"""

from __future__ import annotations

from dataclasses import replace

from engine.domain.durations import format_duration
from engine.domain.operation import ConsolidationProgress, Operation, OperationSummary, OpState, PoolSizes
from engine.domain.settings import ScaleDownRules
from engine.kube.api import SchedulingApi
from engine.operations.flows import NEXT
from engine.operations.steps.context import Basics, ClusterHandle, StepResult, WithScaleDownRules
from engine.planning import consolidation


def _pool_of(op: Operation, node: str) -> str:
    return next(c.pool for c in op.plan.pools if node in c.nodes_to_remove)


def step_fit(ctx: WithScaleDownRules, op: Operation, h: ClusterHandle) -> StepResult:
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
        snap = consolidation.snapshot((), h.api.list_nodes(), h.api.list_bound_pods())
        moves, reason = consolidation.recheck(
            node,
            snap,
            h.api.list_pdbs(),
            # Nodes this operation removes later would take pods only to have them evicted again.
            not_destinations=frozenset(todo[1:]) | frozenset(removed),
            daemonset_keys=h.api.list_daemonset_keys(),
            now=ctx.clock.now(),
            rules=ctx.scale_down.get(h.name, ScaleDownRules()),
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


def step_remove_node(ctx: Basics, op: Operation, h: ClusterHandle) -> StepResult:
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


def step_consolidated(ctx: Basics, op: Operation, h: ClusterHandle) -> StepResult:
    now = ctx.clock.now()
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

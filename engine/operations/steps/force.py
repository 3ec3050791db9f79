"""The `force` step: phase 2 of a full zero-scale.

Only when every pool of the cluster goes to 0: DELETE with grace 0 whatever is left, recording
each pod and why (write-ahead audit), only within the approved force scope
(`engine.domain.force_scope`): a Pod outside it stops the operation, nothing force-deleted, for a
new approval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from engine.domain import force_scope
from engine.domain.model import PdbIndex
from engine.domain.operation import Operation, OpState
from engine.drain import filters
from engine.drain import passes as drain
from engine.kube import events as kube_events
from engine.operations.flows import NEXT
from engine.operations.steps.context import ClusterHandle, StepResult, WithAuditTrail, WithEvictions
from engine.operations.steps.cordon_drain import drain_state, drained_nodes


class ForceContext(WithEvictions, WithAuditTrail, Protocol):
    """What phase 2 uses of its runner: the cluster's executor for deletions, and the audit (each
    DELETE's intent is written before it is sent)."""


def step_force(ctx: ForceContext, op: Operation, h: ClusterHandle) -> StepResult:
    """Phase 2: delete what is left with grace 0 (PDBs cannot block a DELETE); record each pod.

    The audit row of a pod is written before its DELETE is sent (write-ahead): a crash between the
    DELETE and its answer loses neither the record nor the pod in the final report. Only pods
    scalebot deleted count as force-deleted: those whose DELETE the server accepted (a second audit
    row), and, after a restart, those gone unconfirmed that nothing else was deleting (no
    deletionTimestamp when the intent was written). A pod that was already terminating may have
    finished by itself: it is named, not counted.
    """
    now = ctx.clock.now()
    state = drain_state(op)
    failures = {uid: f.key for uid, f in state.failures.items()}
    drain_ctx = filters.DrainContext(
        # Phase 2 removes everything left, opt-outs included: that is what its approval was for.
        options=filters.DrainOptions.machine(evict_opt_outs=True),
        now=now,
        daemonset_keys=h.api.list_daemonset_keys(),
    )
    remaining = [
        p
        for p, v in filters.classify_pods(h.api.list_pods(node_names=list(drained_nodes(op))), drain_ctx)
        if v.action is not filters.Action.SKIP
    ]

    def why(pod: Any) -> str:
        return failures.get(pod.uid) or (
            "still terminating" if pod.is_terminating else "not evicted in phase 1"
        )

    remaining, outside, left = _within_scope(op, h, remaining)
    if outside:
        return _outside_scope(op, [(p, reason, why(p)) for p, reason in outside])
    rows = ctx.audit_trail.audit_rows(op_id=op.id)
    intents = [r.detail for r in rows if r.action == "force_delete_pod"]
    audited = {d.split(" ", 1)[0] for d in intents}
    # Intents of pods already terminating (something else was deleting them), by key.
    self_going = {d.split(" ", 1)[0] for d in intents if " terminating=true " in d}
    confirmed = {r.detail.split(" ", 1)[0] for r in rows if r.action == FORCE_DELETED_ACTION}
    for pod in remaining:
        if pod.key not in audited:  # else written by an attempt that crashed before its DELETE
            ctx.audit_trail.audit(
                at=ctx.clock.now(),
                actor="scalebot",
                action="force_delete_pod",
                op_id=op.id,
                cluster=h.name,
                detail=f"{pod.key} uid={pod.uid} grace=0 terminating={str(pod.is_terminating).lower()} "
                f"reason={why(pod)}",
            )

    def record(pod: Any) -> None:
        # The server accepted this DELETE: only such pods count as force-deleted.
        ctx.audit_trail.audit(
            at=ctx.clock.now(),
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

    forced = drain.force_delete_pods(h.api, remaining, executor=ctx.evictions(h.name), on_deleted=record)
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

"""What an operation says when it ends: its summary, its final line, and its providers' progress.

Pure functions of the operation and its progress, shared by the steps that end an operation
(drain, verify, finish) and those that follow a provider at work (verify, wait_ready).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from engine.domain.durations import format_duration
from engine.domain.operation import (
    Operation,
    OperationProgress,
    OperationSummary,
    OpKind,
    PoolSizes,
    ProgressKind,
)
from engine.planning import wake_waves
from engine.pools.base import Pool
from engine.workloads import returning


def summary_of(op: Operation, data: OperationProgress, now: datetime) -> OperationSummary:
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


def final_event(op: Operation, data: OperationProgress, now: datetime) -> tuple[ProgressKind, str, str]:
    s = summary_of(op, data, now)
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


def provider_progress(
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

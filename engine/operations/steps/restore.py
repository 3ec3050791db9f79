"""The `record` step, and the rule of what wake comes back to.

Owns the restore records: `record` writes the sizes to restore to SQLite AND to the pool objects
before the first change (a zero-scale or a scheduled sleep only: a deliberate scale is the size
wake keeps); `clear_restore` forgets them once a wake (or a deliberate scale) ended the sleep.
"""

from __future__ import annotations

from engine.domain.operation import Operation, OpKind
from engine.operations.flows import NEXT
from engine.operations.steps.context import ClusterHandle, StepResult, WithSleepRecords
from engine.pools.base import Pool, RestoreRecord
from engine.store.restore import StoredRestore


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


def clear_restore(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> None:
    for change in op.plan.pools:
        h.pools.clear_restore(change.pool)
        ctx.sleep_records.clear_restore(h.name, change.pool)


def step_record(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    for change in op.plan.pools:
        if change.after >= change.before or not records_restore(op):
            continue
        record_restore(ctx, op, h, h.pools.get_pool(change.pool))
    text = (
        f"Recorded sizes to restore: {op.plan.summary()}"
        if records_restore(op)
        else f"Scaling as chosen (wake restores what a zero-scale records): {op.plan.summary()}"
    )
    return StepResult(then=NEXT, events=[("phase", text, "")])


def record_restore(ctx: WithSleepRecords, op: Operation, h: ClusterHandle, pool: Pool) -> None:
    now = ctx.clock.now()
    record = RestoreRecord(
        desired=pool.desired,
        min_size=pool.min_size,
        max_size=pool.max_size,
        recorded_at=now,
        operation_id=op.id,
    )
    h.pools.record_restore(pool.name, record)
    ctx.sleep_records.record_restore(
        StoredRestore(h.name, pool.name, pool.desired, pool.min_size, pool.max_size, now, op.id, {})
    )

"""The order workloads wake and sleep in: the `scalebot.io/wake-order` annotation.

Pure. A workload annotated `scalebot.io/wake-order: "10"` wakes before one annotated "20"; a wake
restores one order at a time and waits until that order's Deployments and StatefulSets are
available (or `workloads_return_timeout` passes) before the next. Workloads without the annotation
wake last, together. A sleep goes the other way: the unannotated first, then the highest order
down to the lowest, so what others depend on goes last.

The annotation is text from the cluster: anything but a whole number (optionally signed, at most
9 digits) is not an order; such a workload wakes with the unannotated and the report says why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from engine.workloads.plan import WorkloadPlan, is_owner_key
from engine.workloads.report import Outcome

WAKE_ORDER_ANNOTATION = "scalebot.io/wake-order"
_ORDER = re.compile(r"[+-]?[0-9]{1,9}")

UNORDERED = "last"
"""The label of the group of workloads without a wake order (they wake last)."""


@dataclass(frozen=True, slots=True)
class OrderGroup:
    """Workloads that wake together: their order ("10"), or UNORDERED, and their keys."""

    label: str
    keys: tuple[str, ...]


def wake_order(annotations: Mapping[str, str]) -> int | None:
    """The workload's wake order; None without the annotation or with one that is no whole number."""
    value = annotations.get(WAKE_ORDER_ANNOTATION)
    if value is None or not _ORDER.fullmatch(value.strip()):
        return None
    return int(value.strip())


def invalid_order(annotations: Mapping[str, str]) -> str:
    """Why the annotation is ignored ("" when it is absent or valid)."""
    value = annotations.get(WAKE_ORDER_ANNOTATION)
    if value is None or wake_order(annotations) is not None:
        return ""
    return f"{WAKE_ORDER_ANNOTATION} is not a whole number ({value[:40]!r}); wakes with the unordered, last"


def wake_groups(orders: Iterable[tuple[str, int | None]]) -> tuple[OrderGroup, ...]:
    """(key, order) pairs grouped by order, lowest first; those without an order form the last group.
    Keys keep a stable order within a group."""
    by_order: dict[int, list[str]] = {}
    unordered: list[str] = []
    for key, order in orders:
        (unordered if order is None else by_order.setdefault(order, [])).append(key)
    groups = [OrderGroup(str(order), tuple(sorted(by_order[order]))) for order in sorted(by_order)]
    if unordered:
        groups.append(OrderGroup(UNORDERED, tuple(sorted(unordered))))
    return tuple(groups)


def sleep_sequence(orders: Iterable[tuple[str, int | None]]) -> tuple[str, ...]:
    """The keys in the order a sleep changes them: the reverse of the wake."""
    return tuple(key for group in reversed(wake_groups(orders)) for key in group.keys)


def next_group(groups: Sequence[OrderGroup], done: Iterable[str]) -> OrderGroup | None:
    """The first group not yet woken; None when every one is."""
    finished = set(done)
    return next((g for g in groups if g.label not in finished), None)


def is_ordered(groups: Sequence[OrderGroup]) -> bool:
    """Whether any workload carries an order: without one, a wake restores everything at once."""
    return any(g.label != UNORDERED for g in groups)


def plan_groups(plan: WorkloadPlan) -> tuple[OrderGroup, ...]:
    """The wake plan's workloads grouped by the wake order their live objects carry. GitOps owners
    (engine.workloads.gitops) are no workloads: they resume in the last group, after the workloads
    they apply (the wake plan lists them after the workloads)."""
    live = {w.key: w for w in (plan.snapshot.workloads if plan.snapshot is not None else ())}
    return wake_groups(
        (d.key, wake_order(live[d.key].annotations) if d.key in live and not is_owner_key(d.key) else None)
        for d in plan.decisions
    )


def invalid_orders(plan: WorkloadPlan) -> tuple[Outcome, ...]:
    """A note for each workload of the plan whose wake order is not a whole number."""
    live = {w.key: w for w in (plan.snapshot.workloads if plan.snapshot is not None else ())}
    notes = ((d.key, invalid_order(live[d.key].annotations)) for d in plan.decisions if d.key in live)
    return tuple(Outcome(key, why) for key, why in notes if why)


def in_sleep_order(plan: WorkloadPlan) -> WorkloadPlan:
    """The sleep plan with its decisions in the order they are applied: the reverse of the wake."""
    live = {w.key: w for w in (plan.snapshot.workloads if plan.snapshot is not None else ())}
    sequence = sleep_sequence(
        (d.key, wake_order(live[d.key].annotations) if d.key in live else None) for d in plan.decisions
    )
    position = {key: i for i, key in enumerate(sequence)}
    # GitOps owners stay first: each is paused before the workloads it applies are scaled down.
    ordered = sorted(plan.decisions, key=lambda d: (not is_owner_key(d.key), position[d.key]))
    return replace(plan, decisions=tuple(ordered))

"""What a sleep or a wake did to each workload, and how many workloads are available again.

Pure. `WorkloadReport` sorts every list by object key, so the same outcome always renders the same
text (the bot edits its Slack message only when the text changes). Its headline is the figure the
wake message quotes ("61/61 workloads restored"); `Availability` gives the other one ("61/61
workloads available"), computed from Deployment and StatefulSet status alone, no pod listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Literal, NamedTuple

from engine.workloads.model import Kind, WorkloadInfo, WorkloadRecord

DEFAULT_MAX_ITEMS = 10
Action = Literal["sleep", "wake"]
_VERBS: dict[str, str] = {"sleep": "put to sleep", "wake": "restored"}


@dataclass(frozen=True, slots=True, order=True)
class Outcome:
    key: str
    """`Kind/namespace/name` (`Namespace/name` for a namespace)."""
    reason: str


@dataclass(frozen=True)
class WorkloadReport:
    action: Action
    changed: tuple[Outcome, ...] = ()
    """Put to sleep, or restored (including objects already back at their original value)."""
    unchanged: tuple[Outcome, ...] = ()
    """Nothing to do and nothing wrong: already at 0 before sleep, already asleep, ..."""
    skipped: tuple[Outcome, ...] = ()
    """Left alone for a reason a person should read: modified while asleep, managed by an operator, gone."""
    excluded: tuple[Outcome, ...] = ()
    errors: tuple[Outcome, ...] = ()
    notes: tuple[Outcome, ...] = ()
    """HPAs of changed workloads, expired exclusions, listings that failed."""
    records: tuple[WorkloadRecord, ...] = ()
    """Sleep: what to restore at wake (persist these). Wake: the records that were restored."""

    @property
    def restored(self) -> tuple[Outcome, ...]:
        return self.changed

    @property
    def total(self) -> int:
        """Objects this action was meant to change: excluded and unchanged ones do not count."""
        return len(self.changed) + len(self.skipped) + len(self.errors)

    @property
    def complete(self) -> bool:
        return not self.skipped and not self.errors

    @property
    def headline(self) -> str:
        return f"{len(self.changed)}/{self.total} workloads {_VERBS[self.action]}"

    def render(self, *, max_items: int = DEFAULT_MAX_ITEMS) -> str:
        lines = [self.headline]
        for title, items in (
            ("Errors", self.errors),
            ("Skipped", self.skipped),
            ("Unchanged", self.unchanged),
        ):
            lines.extend(_section(title, [f"{o.key}: {o.reason}" for o in items], max_items))
        lines.extend(_section("Excluded", _grouped(self.excluded, max_items), max_items))
        lines.extend(_section("Notes", [f"{o.key}: {o.reason}" for o in self.notes], max_items))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def items(outcomes: Sequence[Outcome]) -> list[dict[str, str]]:
            return [{"object": o.key, "reason": o.reason} for o in outcomes]

        return {
            "action": self.action,
            "headline": self.headline,
            "changed": items(self.changed),
            "unchanged": items(self.unchanged),
            "skipped": items(self.skipped),
            "excluded": items(self.excluded),
            "errors": items(self.errors),
            "notes": items(self.notes),
            "records": [r.to_dict() for r in self.records],
        }


def _section(title: str, lines: Sequence[str], max_items: int) -> list[str]:
    if not lines:
        return []
    shown = [f"  * {line}" for line in lines[:max_items]]
    if len(lines) > max_items:
        shown.append(f"  * ... ({len(lines) - max_items} more)")
    return [f"{title} ({len(lines)}):", *shown]


def _grouped(outcomes: Sequence[Outcome], max_items: int) -> list[str]:
    """One line per reason (`reason: a, b, ... (3 more)`), since exclusions share few reasons."""
    ordered = sorted(outcomes, key=lambda o: (o.reason, o.key))
    lines = []
    for reason, group in groupby(ordered, key=lambda o: o.reason):
        keys = [o.key for o in group]
        more = f", ... ({len(keys) - max_items} more)" if len(keys) > max_items else ""
        lines.append(f"{reason}: {', '.join(keys[:max_items])}{more}")
    return lines


class Availability(NamedTuple):
    available: int
    total: int
    not_ready: list[tuple[str, str]]
    """(`Kind/namespace/name`, reason), sorted by key."""

    @property
    def headline(self) -> str:
        return f"{self.available}/{self.total} workloads available"

    def render(self, *, max_items: int = DEFAULT_MAX_ITEMS) -> str:
        return "\n".join(
            [self.headline, *_section("Not available", [f"{k}: {r}" for k, r in self.not_ready], max_items)]
        )


def compute_availability(workloads: Iterable[WorkloadInfo]) -> Availability:
    """Deployments and StatefulSets asked to run at least one replica, and which of them are not there yet."""
    wanted = sorted(
        (w for w in workloads if w.kind in (Kind.DEPLOYMENT, Kind.STATEFULSET) and _replicas(w) > 0),
        key=lambda w: w.key,
    )
    not_ready = [(w.key, reason) for w in wanted if (reason := not_ready_reason(w)) is not None]
    return Availability(len(wanted) - len(not_ready), len(wanted), not_ready)


def not_ready_reason(workload: WorkloadInfo) -> str | None:
    """None when every desired replica is available in a status that reflects the current spec."""
    desired = _replicas(workload)
    if workload.observed_generation < workload.generation:
        # The status still describes the previous spec (e.g. the 0 replicas of the night).
        return f"generation {workload.generation} not observed yet by the controller"
    if workload.available_replicas >= desired:
        return None
    reason = f"{workload.available_replicas}/{desired} replicas available"
    for cond in workload.conditions:
        failing = (cond.type == "ReplicaFailure" and cond.status == "True") or (
            cond.type in ("Progressing", "Available") and cond.status == "False"
        )
        if failing:
            return (
                f"{reason} ({cond.reason}: {cond.message})" if cond.message else f"{reason} ({cond.reason})"
            )
    return reason


def _replicas(workload: WorkloadInfo) -> int:
    return workload.value if type(workload.value) is int else 0

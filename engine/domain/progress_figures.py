"""An operation's progress as figures: nodes drained of total, pods evicted / remaining / total,
the current eviction rate and the time left at that rate.

Pure: computed from what the drain step keeps in `DrainProgress`, so Slack's status line, the CLI's
live display and its final table show the same numbers for the same state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from engine.domain.operation import DrainProgress, Operation

RATE_WINDOW_SECONDS = 60.0
"""The current rate is measured over the passes of about the last minute, not since the start:
a drain slows down at its tail (budgets, slow terminations) and the ETA should follow."""
MIN_RATE_SPAN_SECONDS = 10.0
"""The shortest span a rate is measured over: the first pass evicts a burst a few milliseconds after
the drain starts, which is not thousands of pods a minute."""
MAX_SAMPLES = 8
BAR_WIDTH = 8


@dataclass(frozen=True, slots=True)
class ProgressFigures:
    nodes_drained: int
    nodes_total: int
    pods_done: int
    """Pods asked to leave, each once: evicted, deleted when finished, or deleted in phase 2 without
    having been evicted (a pod phase 2 deleted while it terminated counts once, as evicted)."""
    pods_evicted: int
    """Of them, those evicted through the Eviction API: the count the operation's summary gives."""
    pods_deleted: int
    """Finished pods (Succeeded, Failed) deleted rather than evicted."""
    pods_force_deleted: int
    """Pods phase 2 force-deleted, as the summary counts them (a pod evicted first, then force-deleted
    while it terminated, is in both counts but once in `pods_done`)."""
    pods_remaining: int
    """Pods still to be evicted: refused, waited for, queued behind a lower drain order."""
    pods_terminating: int
    """Evicted pods not gone yet: they hold their node back, but need no further eviction."""
    rate_per_minute: float | None
    """Pods evicted per minute over the last minute; None until two passes are known."""
    eta_seconds: int | None
    """At the current rate; 0 once nothing is left to evict; None when no rate is known."""
    blocking: tuple[str, ...] = ()

    @property
    def pods_total(self) -> int:
        return self.pods_done + self.pods_remaining

    @property
    def fraction(self) -> float:
        """The lesser of the node and pod fractions: the bar never runs ahead of either."""
        parts = []
        if self.nodes_total:
            parts.append(self.nodes_drained / self.nodes_total)
        if self.pods_total:
            parts.append(self.pods_done / self.pods_total)
        return min(parts, default=1.0)

    def to_json(self) -> dict[str, object]:
        return {
            "nodes_drained": self.nodes_drained,
            "nodes_total": self.nodes_total,
            "pods_done": self.pods_done,
            "pods_evicted": self.pods_evicted,
            "pods_deleted": self.pods_deleted,
            "pods_force_deleted": self.pods_force_deleted,
            "pods_remaining": self.pods_remaining,
            "pods_terminating": self.pods_terminating,
            "pods_total": self.pods_total,
            "rate_per_minute": self.rate_per_minute,
            "eta_seconds": self.eta_seconds,
            "blocking": list(self.blocking),
        }


def figures(op: Operation) -> ProgressFigures | None:
    """The figures of an operation that has started draining; None before its first pass."""
    return drain_figures(op.progress.drain)


def drain_figures(drain: DrainProgress) -> ProgressFigures | None:
    """The figures of a drain (an operation's, or `scalebot drain`'s); None before its first pass."""
    if not drain.nodes_total:
        return None
    done = pods_done(drain)
    rate = rate_per_minute(drain.samples)
    eta: int | None
    if drain.pods_remaining == 0:
        eta = 0
    elif rate:
        eta = math.ceil(drain.pods_remaining / rate * 60)
    else:
        eta = None
    return ProgressFigures(
        nodes_drained=drain.nodes_total - len(drain.busy_nodes),
        nodes_total=drain.nodes_total,
        pods_done=done,
        pods_evicted=drain.state.evicted_total if drain.state is not None else drain.evicted,
        pods_deleted=drain.state.deleted_total if drain.state is not None else 0,
        pods_force_deleted=len(drain.force_deleted),
        pods_remaining=drain.pods_remaining,
        pods_terminating=drain.pods_terminating,
        rate_per_minute=rate,
        eta_seconds=eta,
        blocking=drain.blocking,
    )


def pods_done(drain: DrainProgress) -> int:
    state = drain.state
    passes = (state.evicted_total + state.deleted_total) if state is not None else drain.evicted
    return passes + drain.pods_forced


def first_samples(started_at: datetime, done: int) -> tuple[tuple[datetime, int], ...]:
    """The rate's baseline: `done` pods when the drain started. Without it the first pass's
    evictions (often most of a small drain's) fall before the first sample, and the rate of the
    passes after it is 0 however many pods left."""
    return ((started_at, done),)


def add_sample(
    samples: tuple[tuple[datetime, int], ...], at: datetime, done: int
) -> tuple[tuple[datetime, int], ...]:
    """The rate's samples after a pass at `at` with `done` pods evicted so far: those of the last
    `RATE_WINDOW_SECONDS` (and always the one before them, so a slow pass still has a rate). At
    most `MAX_SAMPLES`: the rate reads the oldest and the newest, so a pass between them goes
    first; dropping the oldest instead would shrink the window to the last few passes (a second
    apart when nothing is left to wait for), and the rate would read 0 a few seconds after a burst."""
    kept = [*samples, (at, done)]
    while len(kept) > 2 and (at - kept[1][0]).total_seconds() >= RATE_WINDOW_SECONDS:
        kept.pop(0)
    while len(kept) > MAX_SAMPLES:
        kept.pop(1)
    return tuple(kept)


def rate_per_minute(samples: tuple[tuple[datetime, int], ...]) -> float | None:
    if len(samples) < 2:
        return None
    (first_at, first), (last_at, last) = samples[0], samples[-1]
    span = (last_at - first_at).total_seconds()
    if span <= 0:
        return None
    return (last - first) / max(span, MIN_RATE_SPAN_SECONDS) * 60


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, math.floor(fraction * width)))
    return "▰" * filled + "▱" * (width - filled)


def time_left(eta_seconds: int | None) -> str:
    if eta_seconds is None:
        return "time left unknown"
    if eta_seconds == 0:
        return "nothing left to evict"
    if eta_seconds < 60:
        return "under a minute left"
    minutes = math.ceil(eta_seconds / 60)
    if minutes < 60:
        return f"about {minutes} min left"
    hours, rest = divmod(minutes, 60)
    return f"about {hours} h {rest} min left" if rest else f"about {hours} h left"


def status_line(f: ProgressFigures) -> str:
    """`▰▰▰▰▱▱▱▱ 12/20 nodes · 340/512 pods · about 3 min left`"""
    return (
        f"{bar(f.fraction)} {f.nodes_drained}/{f.nodes_total} nodes · "
        f"{f.pods_done}/{f.pods_total} pods · {time_left(f.eta_seconds)}"
    )


def rate_text(f: ProgressFigures) -> str:
    return "—" if f.rate_per_minute is None else f"{f.rate_per_minute:.0f} pods/min"

"""When the next drain pass runs, and whether the drain is over: one pure decision.

A drain pass never sleeps (`engine.drain.passes.run_pass`); whoever drives the passes — the CLI's
`engine.drain.driver` loop or the operation runner's `drain` step — asks `next_pass` what a pass's
result means for time: the drain is done (everything gone and settled), its deadline has come,
or the next pass should run at the earliest of the pass interval, the settle instant, a refused
pod's retry time, a terminating pod's expected end, and the deadline. What reaching the deadline
means is the caller's business (the CLI stops with a timeout; a zero-scale enters phase 2, any
other operation fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.domain.settings import PassPacing

MIN_WAIT_SECONDS = 0.5
"""Never spin: even when a retry is due now, leave the API server half a second."""


@dataclass(frozen=True, slots=True)
class PassFacts:
    """What one pass found, in the terms the timing decision needs."""

    now: datetime
    """When the pass started."""
    completed: bool
    """The pass found nothing left to move (`DrainReport.completed`)."""
    settled_from: datetime
    """The instant the settle time counts from: the last eviction, else the drain's start."""
    next_retry_at: datetime | None = None
    """The earliest retry of a refused pod, or the expected end of a terminating one."""
    deadline: datetime | None = None
    """The drain's timeout, or the end of a zero-scale's phase-1 window."""
    again_at_once: bool = False
    """Something this pass found calls for another pass right away (a node newly refused)."""


@dataclass(frozen=True, slots=True)
class NextPass:
    done: bool
    """Nothing left and settled: the drain is complete."""
    deadline_reached: bool
    wake_at: datetime
    """When the next pass should run (meaningless when done or past the deadline)."""

    def wait_seconds(self, now: datetime) -> float:
        """Seconds from `now` (the caller's clock after the pass) to the next pass, never below the floor."""
        return max(MIN_WAIT_SECONDS, (self.wake_at - now).total_seconds())


def next_pass(pacing: PassPacing, facts: PassFacts) -> NextPass:
    now = facts.now
    settled_at = facts.settled_from + pacing.settle
    done = facts.completed and now >= settled_at
    deadline_reached = facts.deadline is not None and now >= facts.deadline
    wake = now + pacing.interval
    if facts.completed:
        wake = min(wake, settled_at)
    if facts.again_at_once:
        wake = now
    if facts.next_retry_at is not None:
        wake = min(wake, facts.next_retry_at)
    if facts.deadline is not None:
        wake = min(wake, facts.deadline)
    return NextPass(done=done, deadline_reached=deadline_reached, wake_at=wake)

"""What changes one occurrence: overrides (postpone / skip / run now), the missed-run decision taken
at start-up and at each fire, and the rules of a manual or temporary wake.

Pure: stdlib only, no I/O, no clock: `now=` comes in as an argument. The values (`ScheduleSpec`,
`Occurrence`, `Override`, `MissedDecision`) are `engine.schedules.core.spec`'s; the instants are
`engine.schedules.core.recurrence`'.

Rules
- Overrides act on one occurrence (by key), never on the schedule; the latest decision wins. A
  postpone that reaches the next opposite event becomes a skip.
- Missed runs (`decide_missed`): only the most recent due event counts; a missed sleep runs late
  within the grace window and is announced as missed beyond it (never silently dropped); a missed
  wake always runs; a manual action after the occurrence wins.
- A cluster woken by hand is not put back to sleep before the next scheduled sleep; a temporary wake
  re-sleeps at its expiry only if the schedule has the cluster asleep then.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from engine.schedules.core.recurrence import next_occurrence, occurrences_between
from engine.schedules.core.spec import (
    OPPOSITE_ACTION,
    MissedDecision,
    Occurrence,
    Override,
    ScheduleError,
    ScheduleSpec,
    State,
    aware_utc,
    describe,
    span_text,
)

DEFAULT_GRACE = timedelta(hours=1)
"""A missed sleep this late still runs (announced as late); beyond it, it is announced as missed."""


MISSED_LOOKBACK = timedelta(days=7)
"""Start-up looks back at most this far (Gardener's trigger-deadline cap), whatever `last_done` says."""


ON_TIME = timedelta(minutes=1)
"""A run this close to its instant is on time: the timer's own jitter is not "late"."""


MAX_TEMPORARY_WAKE = timedelta(days=7)
"""A temporary wake longer than a week is a schedule change, not a one-off."""


# --- announcements and overrides ----------------------------------------------------------------------


def effective_time(occurrence: Occurrence, overrides: Sequence[Override]) -> datetime | None:
    """When this occurrence runs given the overrides (in the order they were decided; the latest for
    its key wins): the scheduled instant, a postponed one, the "run now" instant, or None if skipped."""
    decision = _latest_override(occurrence, overrides)
    if decision is None:
        return occurrence.at
    if decision.until is None:
        return None
    return decision.until.astimezone(UTC)


def postpone(
    occurrence: Occurrence,
    *,
    by: str,
    delta: timedelta,
    spec: ScheduleSpec,
    overrides: Sequence[Override] = (),
) -> Override:
    """Move this occurrence `delta` later than its current effective time (postpones add up)."""
    if delta <= timedelta(0):
        raise ScheduleError(f"postpone by {span_text(delta)}: the delay must be positive, e.g. 1 h")
    current = _current_time(occurrence, overrides, spec)
    return postpone_until(occurrence, by=by, until=current + delta, spec=spec, overrides=overrides)


def postpone_until(
    occurrence: Occurrence,
    *,
    by: str,
    until: datetime,
    spec: ScheduleSpec,
    overrides: Sequence[Override] = (),
) -> Override:
    """Move this occurrence to `until`. Reaching the next opposite event (the next wake for a sleep,
    the next sleep for a wake; the next of its own kind without a wake) turns it into a skip, and the
    returned override's note says so. The schedule itself never changes."""
    until = aware_utc(until, "until")
    current = _current_time(occurrence, overrides, spec)
    what = f"the {occurrence.action} of {describe(occurrence, spec.tz)}"
    if until <= current:
        raise ScheduleError(
            f"cannot postpone {what} to {describe(until, spec.tz)}: "
            f"pick a time after {describe(current, spec.tz)}"
        )
    limit = _next_opposite(spec, occurrence)
    if limit is not None and until >= limit.at:
        note = (
            f"Postponing {what} to {describe(until, spec.tz)} would pass the next {limit.action} "
            f"({describe(limit, spec.tz)}), so this {occurrence.action} is skipped instead; "
            "the schedule is unchanged."
        )
        return Override(occurrence.key, "skip", None, by, note)
    later = span_text(until - occurrence.at)
    note = f"{what[0].upper()}{what[1:]} is postponed to {describe(until, spec.tz)} ({later} later)."
    return Override(occurrence.key, "postpone", until, by, note)


def skip(occurrence: Occurrence, *, by: str, spec: ScheduleSpec) -> Override:
    """Skip this occurrence only; the next one runs as usual."""
    note = (
        f"The {occurrence.action} of {describe(occurrence, spec.tz)} is skipped; the schedule is unchanged."
    )
    return Override(occurrence.key, "skip", None, by, note)


def run_now(
    occurrence: Occurrence,
    *,
    by: str,
    now: datetime,
    spec: ScheduleSpec,
    announced: bool,
    overrides: Sequence[Override] = (),
) -> Override:
    """Run this occurrence at `now` instead of its scheduled instant: only the occurrence already
    announced (`announced`: SQLite says its announcement went out), within its announcement window
    (from the longest lead time before its scheduled or postponed instant, whichever is earlier).
    A pre-approved schedule runs without asking; starting any other occurrence early would be a
    zero-scale at an hour nobody was told of, with no approval, so it is refused with what to do."""
    now = aware_utc(now, "now")
    effective = effective_time(occurrence, overrides) or occurrence.at
    opens = min(occurrence.at, effective) - max(spec.lead_times, default=timedelta(0))
    if not announced or now < opens:
        local = opens.astimezone(ZoneInfo(spec.tz))
        raise ScheduleError(
            f"Run now starts only the announced {occurrence.action}, from its announcement on; the "
            f"{occurrence.action} of {occurrence.local_date:%a %d %b} ({describe(occurrence, spec.tz)}) is "
            f"not announced yet (announced from {local:%a %d %b %H:%M %Z}). To run it now, request the "
            "change itself: it then asks for approval like any request"
        )
    note = f"The {occurrence.action} of {describe(occurrence, spec.tz)} was started early."
    return Override(occurrence.key, "run_now", now, by, note)


def _latest_override(occurrence: Occurrence, overrides: Sequence[Override]) -> Override | None:
    matching = [override for override in overrides if override.key == occurrence.key]
    return matching[-1] if matching else None


def _current_time(occurrence: Occurrence, overrides: Sequence[Override], spec: ScheduleSpec) -> datetime:
    current = effective_time(occurrence, overrides)
    if current is None:
        raise ScheduleError(
            f"the {occurrence.action} of {describe(occurrence, spec.tz)} is already skipped: "
            "nothing to postpone"
        )
    return current


def _next_opposite(spec: ScheduleSpec, occurrence: Occurrence) -> Occurrence | None:
    opposite = next_occurrence(spec, OPPOSITE_ACTION[occurrence.action], after=occurrence.at)
    return opposite or next_occurrence(spec, occurrence.action, after=occurrence.at)


# --- missed runs --------------------------------------------------------------------------------------


def decide_missed(
    spec: ScheduleSpec,
    *,
    last_done: datetime | None,
    now: datetime,
    grace: timedelta = DEFAULT_GRACE,
    manual_action_at: datetime | None = None,
    done_keys: Set[str] = frozenset(),
    overrides: Sequence[Override] = (),
) -> list[MissedDecision]:
    """Decide, at start-up or at a fire, about occurrences due between `last_done` (capped at
    `now` - 7 days) and `now`, in time order.

    Only the most recent due event counts: earlier undone ones come back as "noop" (superseded), so
    nothing disappears silently. For the most recent one: already done → no decisions at all; skipped
    → noop; a manual action after it → noop (the human wins); on time (< 1 min) → run; a wake →
    run_late (a missed wake always runs); a sleep within `grace` → run_late; older → announce_missed.
    Postponed occurrences are due at their new instant.
    """
    now = aware_utc(now, "now")
    start = now - MISSED_LOOKBACK
    if last_done is not None:
        start = max(start, aware_utc(last_done, "last_done"))
    due = _due(spec, start=start, now=now, overrides=overrides)
    if not due or due[-1][0].key in done_keys:
        return []
    latest, latest_at = due[-1]
    decisions = [
        _superseded(occurrence, at, latest, spec, now=now)
        for occurrence, at in due[:-1]
        if occurrence.key not in done_keys and at is not None
    ]
    manual = None if manual_action_at is None else aware_utc(manual_action_at, "manual_action_at")
    decided = _latest_override(latest, overrides)
    skipped_by = decided.by if decided is not None and latest_at is None else ""
    decisions.append(
        _decide_latest(
            spec, latest, latest_at, now=now, grace=grace, manual_action_at=manual, skipped_by=skipped_by
        )
    )
    return decisions


def _due(
    spec: ScheduleSpec, *, start: datetime, now: datetime, overrides: Sequence[Override]
) -> list[tuple[Occurrence, datetime | None]]:
    """Occurrences scheduled in (start, now] that are due (effective time <= now, or skipped), by time."""
    pairs = [(occ, effective_time(occ, overrides)) for occ in occurrences_between(spec, start=start, end=now)]
    due = [(occ, at) for occ, at in pairs if at is None or at <= now]
    return sorted(due, key=lambda pair: (pair[1] or pair[0].at, pair[0].action))


def _superseded(
    occurrence: Occurrence, at: datetime, latest: Occurrence, spec: ScheduleSpec, *, now: datetime
) -> MissedDecision:
    reason = (
        f"the {occurrence.action} of {describe(occurrence, spec.tz)} was missed and is superseded by the "
        f"later {latest.action} of {describe(latest, spec.tz)}: only the most recent event counts"
    )
    return MissedDecision(occurrence, "noop", now - at, reason)


def _decide_latest(
    spec: ScheduleSpec,
    occurrence: Occurrence,
    at: datetime | None,
    *,
    now: datetime,
    grace: timedelta,
    manual_action_at: datetime | None,
    skipped_by: str,
) -> MissedDecision:
    what = f"the {occurrence.action} of {describe(occurrence, spec.tz)}"
    if at is None:
        return MissedDecision(occurrence, "noop", timedelta(0), f"{what} was skipped by {skipped_by}")
    late_by = max(now - at, timedelta(0))
    late = span_text(late_by)
    if manual_action_at is not None and manual_action_at > at:
        manual = describe(manual_action_at, spec.tz)
        reason = f"a manual action at {manual} came after {what}; the manual action wins"
        return MissedDecision(occurrence, "noop", late_by, reason)
    if late_by < ON_TIME:
        return MissedDecision(occurrence, "run", late_by, f"{what} is due")
    if occurrence.action == "wake":
        return MissedDecision(
            occurrence, "run_late", late_by, f"{what} was missed by {late}; a missed wake always runs"
        )
    if late_by <= grace:
        reason = f"{what} was missed by {late}, within the {span_text(grace)} grace: it runs {late} late"
        return MissedDecision(occurrence, "run_late", late_by, reason)
    reason = f"{what} was missed by {late}, beyond the {span_text(grace)} grace: not run, announced as missed"
    return MissedDecision(occurrence, "announce_missed", late_by, reason)


# --- manual and temporary wakes -----------------------------------------------------------------------


def scheduled_state(spec: ScheduleSpec, *, at: datetime) -> State:
    """The state the schedule wants at `at`: that of its latest event at or before `at` (looking back
    two weeks; nothing in that time, e.g. a long holiday, means asleep)."""
    at = aware_utc(at, "at")
    recent = occurrences_between(spec, start=at - 2 * MISSED_LOOKBACK, end=at)
    return "awake" if recent and recent[-1].action == "wake" else "asleep"


def next_sleep_after_manual_wake(
    spec: ScheduleSpec, *, woke_at: datetime, expires_at: datetime | None = None
) -> datetime | None:
    """When a cluster woken by hand goes back to sleep.

    Without an expiry: at the next scheduled sleep after the wake, never earlier (a missed sleep
    before the manual wake does not put it back down: `decide_missed` gives noop). With an expiry (a
    temporary wake): at the expiry if the schedule has the cluster asleep then; if the schedule has
    it awake then (it woke it meanwhile), the cluster simply follows the schedule to its next sleep.
    None only if the schedule has no sleep within the search horizon.
    """
    woke_at = aware_utc(woke_at, "woke_at")
    if expires_at is not None:
        expires_at = aware_utc(expires_at, "expires_at")
        if scheduled_state(spec, at=expires_at) == "asleep":
            return expires_at
    following = next_occurrence(spec, "sleep", after=expires_at or woke_at)
    return following.at if following is not None else None


def temporary_wake(now: datetime, duration: timedelta, spec: ScheduleSpec) -> datetime:
    """The re-sleep instant of "wake dev-eu for 3h" started at `now`: `now + duration` (in UTC) when the
    schedule has the cluster asleep then, else the schedule's next sleep after that. Scheduled sleeps
    before the returned instant are held back (`held_sleeps`: the bot skips them, by the requester)."""
    now = aware_utc(now, "now")
    if not timedelta(0) < duration <= MAX_TEMPORARY_WAKE:
        raise ScheduleError(
            f"temporary wake of {span_text(duration)}: give a duration above 0 and at most 7 days, e.g. 3h"
        )
    resleep = next_sleep_after_manual_wake(spec, woke_at=now, expires_at=now + duration)
    return resleep if resleep is not None else now + duration


def held_sleeps(spec: ScheduleSpec, *, woke_at: datetime, resleep_at: datetime) -> list[Occurrence]:
    """Scheduled sleeps strictly between a temporary wake and its re-sleep instant."""
    between = occurrences_between(spec, start=woke_at, end=resleep_at)
    return [o for o in between if o.action == "sleep" and o.at < aware_utc(resleep_at, "resleep_at")]

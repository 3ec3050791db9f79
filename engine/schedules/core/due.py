"""What is due when: the timer's decisions over one schedule's state at `now`.

Pure: the schedule book (`engine.schedules.book`) reads a schedule's overrides, handled keys, re-sleeps and
announcements from SQLite and hands them in; nothing here reads the clock or the store. The arithmetic
(DST, overrides, missed runs) is `engine.schedules.core.recurrence`'s and `engine.schedules.core.one_off`'s;
this module applies the schedules' rules on top: only the shortest lead already reached is
announced, a re-sleep is a sleep, and a weekend shutdown is told apart from a nightly one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta

from engine.domain.announcement import EventKind
from engine.schedules.core import one_off, recurrence
from engine.schedules.core import spec as schedule
from engine.schedules.core.model import Due, DueWhat, Resleep, Schedule
from engine.schedules.core.spec import MissedDecision, Occurrence, Override, ScheduleSpec

UPCOMING_PER_SCHEDULE = 3
"""Occurrences per schedule the timer is armed for; it is re-armed after every fire and decision."""
RETRY_AFTER = timedelta(minutes=1)
"""A due item a tick could not handle is tried again this much later (until the grace runs out)."""
WEEKEND_SPAN = timedelta(hours=36)
"""A shutdown this long that spans a Saturday or Sunday is announced as a "Weekend shutdown"."""
_MAX_FETCH = 1024

_VERDICT_TO_WHAT: dict[str, DueWhat] = {
    "run": "fire",
    "run_late": "fire",
    "announce_missed": "missed",
    "noop": "noop",
}


def upcoming(
    sched: Schedule,
    now: datetime,
    *,
    limit: int,
    overrides: Sequence[Override],
    handled: frozenset[str],
    resleeps: Sequence[Occurrence],
) -> list[tuple[Occurrence, datetime]]:
    """Unhandled, unskipped occurrences still to come, with their effective times; a postponed one
    scheduled in the past week counts too."""

    def still_to_come(occurrences: Sequence[Occurrence]) -> list[tuple[Occurrence, datetime]]:
        pairs = [(occ, one_off.effective_time(occ, overrides)) for occ in occurrences]
        return [(occ, at) for occ, at in pairs if at is not None and at > now and occ.key not in handled]

    earlier = recurrence.occurrences_between(sched.spec, start=now - one_off.MISSED_LOOKBACK, end=now)
    found = still_to_come([*earlier, *resleeps])
    fetch = limit
    while True:  # skipped and already-run occurrences drop out: look further until `limit` remain
        future = recurrence.next_occurrences(sched.spec, after=now, limit=fetch)
        coming = still_to_come(future)
        if len(coming) >= limit or len(future) < fetch or fetch >= _MAX_FETCH:
            break
        fetch *= 2
    return sorted([*found, *coming], key=lambda pair: (pair[1], pair[0].action))[:limit]


def due_fires(
    sched: Schedule,
    now: datetime,
    *,
    grace: timedelta,
    manual_action_at: datetime | None,
    handled: frozenset[str],
    overrides: Sequence[Override],
) -> list[Due]:
    decisions = one_off.decide_missed(
        sched.spec,
        last_done=max(sched.active_since, sched.last_done_at or sched.active_since),
        now=now,
        grace=grace,
        manual_action_at=manual_action_at,
        done_keys=handled,
        overrides=overrides,
    )
    return [Due(d.occurrence, _VERDICT_TO_WHAT[d.verdict], now - d.late_by, decision=d) for d in decisions]


def due_resleeps(
    sched: Schedule,
    now: datetime,
    *,
    grace: timedelta,
    resleeps: Sequence[Occurrence],
    overrides: Sequence[Override],
) -> list[Due]:
    """A temporary wake's re-sleep is a sleep: on time it runs, within the grace it runs late."""
    found: list[Due] = []
    for occ in resleeps:
        at = one_off.effective_time(occ, overrides)
        if at is not None and at > now:
            continue
        decision = resleep_decision(occ, at, now=now, grace=grace, tz=sched.spec.tz)
        found.append(Due(occ, _VERDICT_TO_WHAT[decision.verdict], at or now, decision=decision))
    return found


def due_announcements(
    sched: Schedule,
    now: datetime,
    *,
    coming: Sequence[tuple[Occurrence, datetime]],
    announced: Mapping[str, tuple[datetime | None, float | None]],
) -> list[Due]:
    """Announcements of the `coming` sleeps now due; `announced` is, by key, the effective time and
    lead (seconds) an occurrence was last announced for."""
    leads = sched.spec.lead_times
    if not leads:
        return []
    found: list[Due] = []
    for occ, at in coming:
        if occ.action != "sleep" or at - max(leads) > now:
            continue
        lead = reached_lead(leads, at, now)
        announced_for, announced_lead = announced.get(occ.key, (None, None))
        covered = (
            announced_for == at
            and announced_lead is not None
            and lead is not None
            and announced_lead <= lead.total_seconds()
        )
        if lead is not None and not covered:
            found.append(Due(occ, "announce", at - lead, lead=lead))
    return found


def reached_lead(leads: Sequence[timedelta], at: datetime, now: datetime) -> timedelta | None:
    """The shortest lead whose announcement instant has been reached, if any."""
    reached = [lead for lead in leads if at - lead <= now]
    return min(reached) if reached else None


def occurrence_on(spec: ScheduleSpec, day: date, action: str) -> Occurrence | None:
    return next((o for o in occurrences_on(spec, day) if o.action == action), None)


def occurrences_on(spec: ScheduleSpec, day: date) -> list[Occurrence]:
    """Occurrences of one local date (searched two days either side: zones reach ±14 h)."""
    midnight = datetime.combine(day, time(0), tzinfo=UTC)
    found = recurrence.occurrences_between(
        spec, start=midnight - timedelta(days=2), end=midnight + timedelta(days=3)
    )
    return [o for o in found if o.local_date == day]


def resleep_decision(
    occ: Occurrence, at: datetime | None, *, now: datetime, grace: timedelta, tz: str
) -> MissedDecision:
    what = f"the return to sleep of {schedule.describe(occ, tz)}"
    if at is None:
        return MissedDecision(occ, "noop", timedelta(0), f"{what} was skipped")
    late = now - at
    if late < one_off.ON_TIME:
        return MissedDecision(occ, "run", late, f"{what} is due")
    span = schedule.in_words(-late).removesuffix(" ago")
    if late <= grace:
        return MissedDecision(occ, "run_late", late, f"{what} was missed by {span}: it runs {span} late")
    return MissedDecision(occ, "announce_missed", late, f"{what} was missed by {span}, beyond the grace")


def event_kind(sched: Schedule, occ: Occurrence) -> EventKind:
    if occ.action == "wake":
        return "wake_up"
    if isinstance(occ, Resleep):
        return "return_to_sleep"
    if sched.target.kind == "scale":
        return "scale_down"
    following = recurrence.next_occurrence(sched.spec, "wake", after=occ.at)
    if following is None:
        return "shutdown"
    days = (following.local_date - occ.local_date).days
    weekend = any((occ.local_date + timedelta(days=i)).weekday() >= 5 for i in range(days + 1))
    return "weekend_shutdown" if weekend and following.at - occ.at >= WEEKEND_SPAN else "shutdown"


def first_of_each(events: Sequence[tuple[Occurrence, datetime]]) -> list[tuple[Occurrence, datetime]]:
    """Each schedule's next sleep and next wake, once (soonest first, as given): the weeks after
    repeat them and tell a person nothing new."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for occ, at in events:
        if (occ.schedule, str(occ.action)) not in seen:
            seen.add((occ.schedule, str(occ.action)))
            kept.append((occ, at))
    return kept

"""When a schedule's sleeps and wakes happen: its occurrences after or between instants, the
holidays and days off a span suppresses, and the instants its announcements go out at.

Pure: stdlib only (zoneinfo reads the time-zone database), no other I/O, no clock. Every instant comes
in as an argument (`after=`, `start=`/`end=`) and every instant going out is an aware UTC `datetime`.
The values (`ScheduleSpec`, `Occurrence`) and the parsing are `engine.schedules.core.spec`'s.

Rules
- Weekdays and dates are local: an occurrence belongs to the local date of its wall time and fires on
  the local weekday (a Berlin "Mon 00:30" is Sunday 23:30 UTC).
- DST, Vixie-cron-like: each action fires at most once per local date.
  * A wall time that occurs twice (autumn) fires once, at its first occurrence (fold=0): Berlin
    2026-10-25 02:30 fires at 00:30Z only. APScheduler's CronTrigger fires it twice (00:30Z and
    01:30Z); that is why APScheduler is only the timer and the idempotency key decides.
  * A wall time that does not exist (spring gap) fires once, after the jump: shifted forward by the
    size of the gap (the PEP 495 fold=0 reading, and what APScheduler does): Berlin 2026-03-29
    02:30 fires at 01:30Z = 03:30 CEST; Lord Howe 2026-10-04 02:00 fires at 15:30Z = 02:30 +11. The
    occurrence keeps its scheduled local date even where the shift crosses midnight (America/Nuuk's
    gap is 23:00-24:00: 23:30 on 2026-03-28 fires at 00:30 on the 29th, key "...:2026-03-28:...").
  * A local date that does not exist at all (Pacific/Apia skipped 2011-12-30) adds no extra firing.
  * Arithmetic is done on UTC instants; no timedelta is ever added to a zoneinfo-local datetime
    (that is wall-clock arithmetic and resets `fold`).
- Exception dates (holidays, local dates) are non-working days: no wake and no sleep on that date.
  The cluster, put to sleep the evening before, stays down until the next working day's wake; the
  sleep of that date is skipped too (the cluster is already down). `skipped_wakes` lists the holidays
  a sleep spans so the bot can announce them at that shutdown.
- Days off (public holidays, calendar days: `engine.schedules.core.days_off`) come in resolved, as dated
  values; each says what it suppresses on its local date: both events (stay asleep, as exception
  dates do), the wake only, or the sleep only (the cluster stays awake). `days_off_between` lists
  the suppressed events with their reasons so announcements and `schedule next` can say why.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from engine.schedules.core.days_off import DayOff
from engine.schedules.core.spec import (
    Action,
    Occurrence,
    ScheduleSpec,
    WeeklyTime,
    aware_utc,
    parse_zone,
    weekly_timings,
)

SEARCH_HORIZON_DAYS = 3700
"""Occurrence searches stop after about ten years of local dates (exceptions are a finite list)."""


def next_occurrences(spec: ScheduleSpec, *, after: datetime, limit: int = 10) -> list[Occurrence]:
    """The next `limit` sleeps and wakes strictly after `after`, in time order (DST rules: module doc)."""
    after = aware_utc(after, "after")
    found: list[Occurrence] = []
    stop_after: date | None = None
    for occurrence in _occurrences_from(spec, _local_date(after, spec) - timedelta(days=1)):
        if limit <= 0 or (stop_after is not None and occurrence.local_date > stop_after):
            break
        if occurrence.at > after:
            found.append(occurrence)
            if stop_after is None and len(found) >= limit:
                # one more local date, in case a gap-shifted time sorts after the next date's first event
                stop_after = occurrence.local_date + timedelta(days=1)
    return sorted(found, key=_time_order)[: max(limit, 0)]


def next_occurrence(spec: ScheduleSpec, action: Action, *, after: datetime) -> Occurrence | None:
    """The next `action` strictly after `after`; None for a wake when the schedule has none."""
    after = aware_utc(after, "after")
    if action == "wake" and spec.wake is None:
        return None
    for occurrence in _occurrences_from(spec, _local_date(after, spec) - timedelta(days=1)):
        if occurrence.action == action and occurrence.at > after:
            return occurrence
    return None


def occurrences_between(spec: ScheduleSpec, *, start: datetime, end: datetime) -> list[Occurrence]:
    """Occurrences with start < at <= end, in time order."""
    start, end = aware_utc(start, "start"), aware_utc(end, "end")
    last_day = _local_date(end, spec) + timedelta(days=1)
    found: list[Occurrence] = []
    for occurrence in _occurrences_from(spec, _local_date(start, spec) - timedelta(days=1)):
        if occurrence.local_date > last_day:
            break
        if start < occurrence.at <= end:
            found.append(occurrence)
    return sorted(found, key=_time_order)


def skipped_wakes(spec: ScheduleSpec, sleep: Occurrence) -> tuple[date, ...]:
    """Exception dates whose wake falls between this sleep and the next wake (announce them at the sleep)."""
    if spec.wake is None:
        return ()
    following = next_occurrence(spec, "wake", after=sleep.at)
    end = following.local_date if following is not None else sleep.local_date
    zone = parse_zone(spec.tz)
    return tuple(
        day
        for day in sorted(spec.exceptions)
        if sleep.local_date <= day < end
        and day.weekday() in spec.wake.days
        and _resolve(day, spec.wake, zone) > sleep.at
    )


def days_off_between(
    spec: ScheduleSpec, *, start: datetime, end: datetime
) -> list[tuple[Occurrence, DayOff]]:
    """The events with start < at <= end that a day off suppresses, with it (the reason), in time order."""
    start, end = aware_utc(start, "start"), aware_utc(end, "end")
    if not spec.days_off:
        return []
    last_day = _local_date(end, spec) + timedelta(days=1)
    found: list[tuple[Occurrence, DayOff]] = []
    for occurrence in _occurrences_from(spec, _local_date(start, spec) - timedelta(days=1), days_off=False):
        if occurrence.local_date > last_day:
            break
        day_off = spec.day_off(occurrence.local_date, occurrence.action)
        if day_off is not None and start < occurrence.at <= end:
            found.append((occurrence, day_off))
    return sorted(found, key=lambda pair: _time_order(pair[0]))


def _occurrences_from(spec: ScheduleSpec, first_day: date, *, days_off: bool = True) -> Iterator[Occurrence]:
    """Occurrences on local dates from `first_day` on, date by date; each action strictly later than
    its previous one (a local date that does not exist yields nothing new). Exception dates yield
    nothing; a day off drops the events it suppresses (unless `days_off` is False: what the weekly
    times alone would give)."""
    zone = parse_zone(spec.tz)
    timings = weekly_timings(spec)
    latest: dict[Action, datetime] = {}
    for offset in range(SEARCH_HORIZON_DAYS):
        day = first_day + timedelta(days=offset)
        if day in spec.exceptions:
            continue
        today = [
            Occurrence(spec.name, action, day, _resolve(day, weekly, zone))
            for action, weekly in timings
            if day.weekday() in weekly.days and not (days_off and spec.day_off(day, action))
        ]
        for occurrence in sorted(today, key=_time_order):
            previous = latest.get(occurrence.action)
            if previous is None or occurrence.at > previous:
                latest[occurrence.action] = occurrence.at
                yield occurrence


def _resolve(day: date, weekly: WeeklyTime, zone: ZoneInfo) -> datetime:
    """The UTC instant of `weekly`'s wall time on local date `day`, read with fold=0: the first of two
    repeated instants, or, for a time in a spring gap, the time shifted forward by the gap."""
    wall = datetime(day.year, day.month, day.day, weekly.hour, weekly.minute, tzinfo=zone, fold=0)
    return wall.astimezone(UTC)


def _time_order(occurrence: Occurrence) -> tuple[datetime, str]:
    return occurrence.at, occurrence.action


def _local_date(instant: datetime, spec: ScheduleSpec) -> date:
    return instant.astimezone(parse_zone(spec.tz)).date()


def announcement_times(
    occurrence: Occurrence, lead_times: Sequence[timedelta], *, at: datetime | None = None
) -> list[tuple[timedelta, datetime]]:
    """(lead, instant) pairs, earliest announcement first: fire - lead, computed in UTC. `at` replaces
    the scheduled instant (a postponed occurrence is announced again from its new time)."""
    fire = aware_utc(at if at is not None else occurrence.at, "at")
    return [(lead, fire - lead) for lead in sorted(set(lead_times), reverse=True)]

"""When a cluster's weekly savings post is due: pure decisions over its setting and the last week
posted (the store keeps that week, so a restart neither posts twice nor forgets a week).

A post belongs to a week (Monday 00:00 in the post's zone); it is due once the week's posting time
has passed and that week has not been posted yet. It reports the weeks that ended before it, so a
Monday-morning post shows the whole last week, not the hours of the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from engine.savings.figures import week_start
from engine.schedules.core.spec import ScheduleError, WeeklyTime, format_weekly, parse_weekly, parse_zone

WEEK = timedelta(days=7)
REPORT_WEEKS = 8
"""How many weeks before the post its report (and chart) covers."""


@dataclass(frozen=True, slots=True)
class SavingsPostSpec:
    """`clusters.<name>.savings_report`: one weekday and time in an IANA zone, and the channel."""

    at: WeeklyTime
    tz: str
    channel: str

    def __str__(self) -> str:
        return f"{format_weekly(self.at)} {self.tz} in {self.channel}"


def parse_post_time(text: str) -> WeeklyTime:
    """ "Mon 09:00": one weekday and a 24-hour time (a weekly post has one day)."""
    weekly = parse_weekly(text)
    if len(weekly.days) != 1:
        raise ScheduleError(
            f'"{format_weekly(weekly)}" names {len(weekly.days)} days: '
            'a weekly post has one, e.g. "Mon 09:00"'
        )
    return weekly


def post_time(spec: SavingsPostSpec, week: date) -> datetime:
    """The UTC instant of the post of the week starting Monday `week` (a wall time a DST change
    skips moves forward by the gap, as schedules do)."""
    [weekday] = spec.at.days
    day = week + timedelta(days=weekday)
    wall = datetime(day.year, day.month, day.day, spec.at.hour, spec.at.minute, tzinfo=parse_zone(spec.tz))
    return wall.astimezone(UTC)


def week_of(spec: SavingsPostSpec, instant: datetime) -> date:
    return week_start(instant, parse_zone(spec.tz))


def due_week(spec: SavingsPostSpec, now: datetime, last_posted: date | None) -> date | None:
    """The week whose post is due at `now`, or None (not yet this week's time, or already posted)."""
    week = week_of(spec, now)
    if last_posted is not None and last_posted >= week:
        return None
    return week if now >= post_time(spec, week) else None


def next_post_at(spec: SavingsPostSpec, now: datetime, last_posted: date | None) -> datetime:
    """When the timer should look next: this week's posting time while it is still owed (a past
    instant when the post is overdue, e.g. after a restart), else next week's."""
    week = week_of(spec, now)
    if last_posted is None or last_posted < week:
        return post_time(spec, week)
    return post_time(spec, week + WEEK)


def report_span(spec: SavingsPostSpec, week: date) -> tuple[datetime, datetime]:
    """[since, until) of the post of `week`: the REPORT_WEEKS whole weeks before it, in the post's
    zone (the message shows the local date it starts on)."""
    zone = parse_zone(spec.tz)
    until = datetime(week.year, week.month, week.day, tzinfo=zone)
    start = week - REPORT_WEEKS * WEEK
    return datetime(start.year, start.month, start.day, tzinfo=zone), until

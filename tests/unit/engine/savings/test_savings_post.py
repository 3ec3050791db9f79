"""When the weekly savings post is due (engine.savings.weekly_post): its wall time across a DST change,
once per week, an overdue post due at once, and the weeks its report covers."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from engine.savings.weekly_post import (
    SavingsPostSpec,
    due_week,
    next_post_at,
    parse_post_time,
    post_time,
    report_span,
)
from engine.schedules.core.spec import ScheduleError

SPEC = SavingsPostSpec(at=parse_post_time("Mon 09:00"), tz="Europe/Berlin", channel="C0DEV")
SUMMER_WEEK, WINTER_WEEK = date(2026, 10, 19), date(2026, 10, 26)  # CEST until Sun 25 Oct


def test_the_post_keeps_its_wall_time_across_the_dst_change() -> None:
    assert post_time(SPEC, SUMMER_WEEK) == datetime(2026, 10, 19, 7, 0, tzinfo=UTC)
    assert post_time(SPEC, WINTER_WEEK) == datetime(2026, 10, 26, 8, 0, tzinfo=UTC)


def test_a_week_is_due_once_from_its_posting_time() -> None:
    at = post_time(SPEC, WINTER_WEEK)
    assert due_week(SPEC, at - timedelta(minutes=1), None) is None
    assert due_week(SPEC, at, None) == WINTER_WEEK
    assert due_week(SPEC, at + timedelta(days=3), SUMMER_WEEK) == WINTER_WEEK  # overdue: still owed
    assert due_week(SPEC, at + timedelta(days=3), WINTER_WEEK) is None
    assert next_post_at(SPEC, at + timedelta(hours=2), None) == at, "an overdue post is armed at once"
    assert next_post_at(SPEC, at + timedelta(hours=2), WINTER_WEEK) == datetime(2026, 11, 2, 8, tzinfo=UTC)


def test_the_report_covers_the_whole_weeks_before_the_post() -> None:
    since, until = report_span(SPEC, WINTER_WEEK)
    assert until == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)  # Monday 00:00 CET
    # eight weeks, one of them an hour longer (summer time ended in the last)
    assert until.astimezone(UTC) - since.astimezone(UTC) == timedelta(weeks=8, hours=1)


@pytest.mark.parametrize(
    ("text", "message"),
    [("Mon-Fri 09:00", "a weekly post has one"), ("daily 09:00", "a weekly post has one"), ("Mon 9", "H:MM")],
)
def test_a_post_time_names_one_day_and_a_time(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse_post_time(text)

"""Schedules (engine.schedules.core.spec, .recurrence, .one_off), on injected instants only: nothing sleeps,
nothing reads the clock.

Covers: parsing (weekday/time expressions, wrapping ranges, IANA zones only, lead times, dates, windows)
and every parser error; spec validation (empty days, a wake colliding with the sleep, lead times longer
than the shortest gap); next fire times across the 2026 DST transitions of Europe/Berlin,
America/New_York, Australia/Sydney, Australia/Lord_Howe and Asia/Kolkata with exact UTC instants, and a
cross-check against APScheduler's CronTrigger where our rule deliberately differs; the Fri 20:00 → Mon
08:00 weekend window over both Berlin transitions; local weekdays; exception dates (holidays);
announcements in UTC; postpone / skip / run-now of one occurrence; missed runs (grace window, only the
most recent event, a missed wake always runs, manual action wins, done keys); manual and temporary
wakes; display text; and hypothesis properties (parsers raise only ScheduleError, next_occurrence is
strictly later and monotonic, exactly one sleep per local date with the weekday).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.schedules.calendars import Calendars
from engine.schedules.core import one_off, recurrence
from engine.schedules.core import spec as schedule
from engine.schedules.core.days_off import DayOff, DayOffAction, DaysOffRule, parse_rule
from engine.schedules.core.spec import Occurrence, Override, ScheduleError, ScheduleSpec, WeeklyTime

BERLIN = "Europe/Berlin"
DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata"]
H = timedelta(hours=1)
M = timedelta(minutes=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def assert_refused(call: Callable[[], object], *fragments: str) -> ScheduleError:
    """`call` raises ScheduleError, and its message contains every fragment (at least one)."""
    assert fragments, "a refusal test names what the message must say"
    with pytest.raises(ScheduleError) as caught:
        call()
    for fragment in fragments:
        assert fragment in str(caught.value)
    return caught.value


def make_spec(
    sleep: str = "Mon-Fri 20:00",
    wake: str | None = "Mon-Fri 08:00",
    tz: str = BERLIN,
    *,
    lead_times: str = "",
    exceptions: str = "",
    holidays: str = "",
    calendar: str = "",
    action: str = "",
) -> ScheduleSpec:
    return schedule.parse_spec(
        name="dev-eu",
        cluster="dev-eu",
        sleep=sleep,
        wake=wake,
        tz=tz,
        lead_times=lead_times,
        exceptions=exceptions,
        holidays=holidays,
        calendar=calendar,
        on_holiday=action,
    )


def fires_on(spec: ScheduleSpec, local_date: date, action: schedule.Action = "sleep") -> list[datetime]:
    """Every instant `action` fires for one local date (searching two days either side)."""
    around = datetime(local_date.year, local_date.month, local_date.day, tzinfo=UTC)
    found = recurrence.occurrences_between(
        spec, start=around - 3 * timedelta(days=1), end=around + 3 * timedelta(days=1)
    )
    return [o.at for o in found if o.local_date == local_date and o.action == action]


def occurrence(spec: ScheduleSpec, action: schedule.Action, *, after: datetime) -> Occurrence:
    found = recurrence.next_occurrence(spec, action, after=after)
    assert found is not None
    return found


# --- parsing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "days", "hour", "minute"),
    [
        ("Mon-Fri 20:00", {0, 1, 2, 3, 4}, 20, 0),
        ("Fri 19:00", {4}, 19, 0),
        ("Sat,Sun 09:30", {5, 6}, 9, 30),
        ("daily 02:30", set(range(7)), 2, 30),
        ("* 02:30", set(range(7)), 2, 30),
        ("Mon-Sun 7:00", set(range(7)), 7, 0),
        ("Fri-Mon 07:00", {4, 5, 6, 0}, 7, 0),
        ("Sun-Mon 23:59", {6, 0}, 23, 59),
        ("mon - wed, FRI 00:00", {0, 1, 2, 4}, 0, 0),
        ("Saturday,Sunday 10:15", {5, 6}, 10, 15),
        ("  Tue   6:05 ", {1}, 6, 5),
    ],
)
def test_weekday_time_expressions_parse(text: str, days: set[int], hour: int, minute: int) -> None:
    assert schedule.parse_weekly(text) == WeeklyTime(frozenset(days), hour, minute)


@pytest.mark.parametrize(
    ("days", "text"),
    [
        ({0, 1, 2, 3, 4}, "Mon-Fri"),
        ({4, 5, 6, 0}, "Fri-Mon"),
        ({5, 6}, "Sat,Sun"),
        ({0, 2, 4}, "Mon,Wed,Fri"),
        ({6, 0}, "Sun,Mon"),
        (set(range(7)), "daily"),
    ],
)
def test_day_sets_format_canonically(days: set[int], text: str) -> None:
    assert schedule.format_days(frozenset(days)) == text
    assert str(WeeklyTime(frozenset(days), 7, 5)) == f"{text} 07:05"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("", ["empty schedule time", '"Mon-Fri 20:00"']),
        ("   ", ["empty schedule time"]),
        ("20:00", ['missing days before "20:00"', '"daily 20:00"']),
        ("Mon-Fri", ['missing time after "Mon-Fri"', '"Mon-Fri 20:00"']),
        ("Mnd 20:00", ['unknown day "Mnd"', "Mon, Tue"]),
        ("Mon-Fri 25:00", ["hour 25", "0-23", '"23:30"']),
        ("Mon-Fri 24:00", ["hour 24", 'midnight is "00:00"']),
        ("Mon-Fri 20:60", ["minute 60", "00-59"]),
        ("Mon-Fri 8pm", ['invalid time "8pm"', "24-hour", '"20:00"']),
        ("Mon-Fri 2000", ['invalid time "2000"']),
        ("Mon-Fri 20:00:00", ['invalid time "20:00:00"']),
        ("Mon 20:00 CET", ['unexpected "CET"', "one time"]),
        ("Mon-Mon 20:00", ['"Mon-Mon" starts and ends on one day', '"daily"']),
        ("Mon-Wed-Fri 01:00", ['invalid day range "Mon-Wed-Fri"', '"Fri-Mon"']),
        ("Mon- 20:00", ['invalid day range "Mon-"']),
        ("Mon,,Fri 20:00", ['empty day in "Mon,,Fri"', '"Sat,Sun 09:30"']),
        ("Mon, 20:00", ['empty day in "Mon,"']),
        ("*,Mon 20:00", ['unknown day "*"']),
        ("Mon-Fri \uff12\uff10:\uff10\uff10", ["invalid time"]),  # full-width digits
    ],
)
def test_every_weekly_parse_error_names_the_bad_part(text: str, fragments: list[str]) -> None:
    assert_refused(lambda: schedule.parse_weekly(text), *fragments)


def test_long_bad_text_is_shortened_in_the_message() -> None:
    with pytest.raises(ScheduleError) as caught:
        schedule.parse_weekly("Mon " + "x" * 500)
    assert len(str(caught.value)) < 200
    assert "…" in str(caught.value)


@pytest.mark.parametrize(
    "name", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "Etc/UTC"]
)
def test_iana_zone_names_are_accepted(name: str) -> None:
    assert schedule.parse_zone(f" {name} ").key == name


def test_abbreviations_are_refused_although_zoneinfo_loads_them() -> None:
    assert ZoneInfo("CET").key == "CET"  # zoneinfo would take it: our rule, not zoneinfo's, refuses it
    with pytest.raises(ScheduleError) as caught:
        schedule.parse_zone("CET")
    assert 'time zone "CET" is not an IANA zone name' in str(caught.value)
    assert '"Europe/Berlin"' in str(caught.value)


@pytest.mark.parametrize(
    ("name", "fragments"),
    [
        ("PST", ['"PST" is not an IANA zone name', '"America/Los_Angeles"']),
        ("EST", ['"EST" is not an IANA zone name', '"America/New_York"']),
        ("EST5EDT", ['"EST5EDT" is not an IANA zone name']),
        ("Berlin", ['"Berlin" is not an IANA zone name', '"Europe/Berlin"']),
        ("GMT", ['"GMT" is not an IANA zone name']),
        ("utc", ['time zone "utc"', 'write "UTC"']),
        ("", ["missing time zone", '"Europe/Berlin"']),
        ("Europe/Berln", ['unknown time zone "Europe/Berln"', 'did you mean "Europe/Berlin"']),
        ("europe/berlin", ['unknown time zone "europe/berlin"', 'did you mean "Europe/Berlin"']),
        ("Mars/Olympus_Mons", ['unknown time zone "Mars/Olympus_Mons"', '"Europe/Berlin"']),
        ("../../etc/passwd", ['unknown time zone "../../etc/passwd"']),
        ("/usr/share/zoneinfo/Europe/Berlin", ["unknown time zone"]),
    ],
)
def test_bad_zones_are_refused_with_a_hint(name: str, fragments: list[str]) -> None:
    assert_refused(lambda: schedule.parse_zone(name), *fragments)


def test_lead_times_parse_longest_first() -> None:
    assert schedule.parse_lead_times("10m, 60m") == (60 * M, 10 * M)
    assert schedule.parse_lead_times("1h,1h30m,5min") == (90 * M, 60 * M, 5 * M)
    assert schedule.parse_lead_times("  ") == ()


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("60", ['invalid lead time "60"', 'write "60m"']),
        ("60m,60m", ['lead time "60m" is given twice']),
        ("60m,1h", ['lead time "1h" is given twice']),
        ("0m", ['lead time "0m" is zero']),
        ("1d", ['invalid lead time "1d"', '"60m,10m"']),
        ("60m,,10m", ['empty lead time in "60m,,10m"']),
        ("-10m", ['invalid lead time "-10m"']),
    ],
)
def test_every_lead_time_error_names_the_bad_part(text: str, fragments: list[str]) -> None:
    assert_refused(lambda: schedule.parse_lead_times(text), *fragments)


def test_dates_parse_strictly() -> None:
    assert schedule.parse_date("2026-12-24") == date(2026, 12, 24)
    assert schedule.parse_dates("2026-12-24, 2026-12-31 2027-01-01") == {
        date(2026, 12, 24),
        date(2026, 12, 31),
        date(2027, 1, 1),
    }
    assert schedule.parse_dates("") == frozenset()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("24.12.2026", 'invalid date "24.12.2026": use YYYY-MM-DD, e.g. "2026-12-24"'),
        ("2026-02-30", 'invalid date "2026-02-30": day is out of range for month'),
        ("2026-13-01", 'invalid date "2026-13-01": month must be in 1..12'),
        ("0000-01-01", 'invalid date "0000-01-01"'),
        ("2026-1-5", 'invalid date "2026-1-5"'),
    ],
)
def test_every_date_error_names_the_bad_date(text: str, fragment: str) -> None:
    assert_refused(lambda: schedule.parse_date(text), fragment)


def test_parse_window_gives_sleep_wake_and_zone() -> None:
    window = schedule.parse_window(sleep="Mon-Fri 20:00", wake="Mon-Fri 07:00", tz="Europe/Berlin")
    assert window == schedule.Window(
        WeeklyTime(frozenset(range(5)), 20, 0), WeeklyTime(frozenset(range(5)), 7, 0), "Europe/Berlin"
    )
    assert schedule.parse_window(sleep="Fri 19:00", wake=" ", tz="UTC").wake is None


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"sleep": "Mon-Fri 20:00", "wake": "Mon-Fri 7", "tz": BERLIN}, ['wake time: invalid time "7"']),
        ({"sleep": "Mon-Fry 20:00", "wake": None, "tz": BERLIN}, ['sleep time: unknown day "Fry"']),
        ({"sleep": "Mon-Fri 20:00", "wake": None, "tz": "CET"}, ['time zone: time zone "CET"']),
        (
            {"sleep": "Mon-Fri 20:00", "wake": "Fri 20:00", "tz": BERLIN},
            ['wake "Fri 20:00" is at the same time as sleep "Mon-Fri 20:00" on Fri', "cannot sleep and wake"],
        ),
    ],
)
def test_every_window_error_names_the_field(kwargs: dict[str, str], fragments: list[str]) -> None:
    assert_refused(lambda: schedule.parse_window(**kwargs), *fragments)


# --- validation ---------------------------------------------------------------------------------------


def test_a_valid_spec_parses_with_all_fields() -> None:
    spec = make_spec(lead_times="60m,10m", exceptions="2026-12-24")
    assert spec == ScheduleSpec(
        name="dev-eu",
        cluster="dev-eu",
        sleep=WeeklyTime(frozenset(range(5)), 20, 0),
        wake=WeeklyTime(frozenset(range(5)), 8, 0),
        tz=BERLIN,
        lead_times=(60 * M, 10 * M),
        exceptions=frozenset({date(2026, 12, 24)}),
    )
    schedule.validate_spec(spec)


def test_an_overnight_or_week_long_window_is_accepted() -> None:
    make_spec("Mon-Fri 20:00", "Mon-Fri 07:00")
    make_spec("Wed 18:00", "Wed 09:00")  # a cluster used on Wednesdays only
    make_spec("daily 20:00", "Mon-Fri 07:00")  # re-sleeps at weekends after a manual wake


def test_lead_time_longer_than_the_shortest_gap_is_refused() -> None:
    with pytest.raises(ScheduleError) as caught:
        make_spec("Mon-Fri 20:00", "Mon-Fri 19:00", lead_times="90m,10m")
    message = str(caught.value)
    assert "lead time 90m is longer than the shortest gap between two events" in message
    assert "60 min: wake Mon 19:00 → sleep Mon 20:00" in message
    assert "at most 60m" in message


def test_lead_time_equal_to_the_gap_is_accepted() -> None:
    assert make_spec("Mon-Fri 20:00", "Mon-Fri 19:00", lead_times="60m").lead_times == (H,)


def test_the_gap_wraps_around_the_fortnight() -> None:
    # Sun 23:00 sleep → Mon 01:00 wake crosses the week boundary: a 2 h gap.
    with pytest.raises(
        ScheduleError, match=r"lead time 3h is longer .* \(2 h: sleep Sun 23:00 → wake Mon 01:00\)"
    ):
        make_spec("Sun 23:00", "Mon 01:00", lead_times="3h")
    make_spec("Sun 23:00", "Mon 01:00", lead_times="2h")


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(frozenset(), 20, 0), None, BERLIN),
            "sleep time has no days: give at least one day",
        ),
        (
            ScheduleSpec(
                "dev-eu", "dev-eu", WeeklyTime(frozenset({4}), 20, 0), WeeklyTime(frozenset(), 7, 0), BERLIN
            ),
            "wake time has no days",
        ),
        (
            ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(frozenset({7}), 20, 0), None, BERLIN),
            "days are 0 (Mon)",
        ),
        (
            ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(frozenset({1}), 24, 0), None, BERLIN),
            "24:00 is not a time of day",
        ),
        (
            ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(frozenset({1}), 20, 0), None, "PST"),
            '"PST" is not an IANA',
        ),
        (
            ScheduleSpec("dev:eu", "dev-eu", WeeklyTime(frozenset({1}), 20, 0), None, BERLIN),
            'invalid schedule name "dev:eu"',
        ),
        (ScheduleSpec("dev-eu", "", WeeklyTime(frozenset({1}), 20, 0), None, BERLIN), 'invalid cluster ""'),
        (
            ScheduleSpec(
                "dev-eu",
                "dev-eu",
                WeeklyTime(frozenset({1}), 20, 0),
                WeeklyTime(frozenset({1, 2}), 20, 0),
                BERLIN,
            ),
            "at the same time as sleep",
        ),
    ],
)
def test_validate_spec_refuses_nonsense(spec: ScheduleSpec, fragment: str) -> None:
    assert_refused(lambda: schedule.validate_spec(spec), fragment)


# --- DST: exact UTC instants for 2026 -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "time", "local_date", "expected"),
    [
        # Europe/Berlin spring 02:00 → 03:00: a nonexistent 02:30 fires once, shifted by the gap
        ("Europe/Berlin", "02:30", date(2026, 3, 29), [utc(2026, 3, 29, 1, 30)]),
        ("Europe/Berlin", "02:00", date(2026, 3, 29), [utc(2026, 3, 29, 1, 0)]),
        ("Europe/Berlin", "03:00", date(2026, 3, 29), [utc(2026, 3, 29, 1, 0)]),
        # Europe/Berlin autumn 03:00 → 02:00: a repeated 02:30 fires once, at the first (CEST) instant
        ("Europe/Berlin", "02:30", date(2026, 10, 25), [utc(2026, 10, 25, 0, 30)]),
        ("Europe/Berlin", "02:00", date(2026, 10, 25), [utc(2026, 10, 25, 0, 0)]),
        ("Europe/Berlin", "02:30", date(2026, 10, 26), [utc(2026, 10, 26, 1, 30)]),
        # America/New_York
        ("America/New_York", "02:30", date(2026, 3, 8), [utc(2026, 3, 8, 7, 30)]),
        ("America/New_York", "01:30", date(2026, 11, 1), [utc(2026, 11, 1, 5, 30)]),
        ("America/New_York", "02:00", date(2026, 11, 1), [utc(2026, 11, 1, 7, 0)]),
        # Australia/Sydney: autumn 04-05 03:00 → 02:00; spring 10-04 02:00 → 03:00
        ("Australia/Sydney", "02:30", date(2026, 4, 5), [utc(2026, 4, 4, 15, 30)]),
        ("Australia/Sydney", "02:00", date(2026, 4, 5), [utc(2026, 4, 4, 15, 0)]),
        ("Australia/Sydney", "02:30", date(2026, 10, 4), [utc(2026, 10, 3, 16, 30)]),
        # Australia/Lord_Howe: 30-minute shifts
        ("Australia/Lord_Howe", "01:30", date(2026, 4, 5), [utc(2026, 4, 4, 14, 30)]),
        ("Australia/Lord_Howe", "02:00", date(2026, 10, 4), [utc(2026, 10, 3, 15, 30)]),
        ("Australia/Lord_Howe", "02:15", date(2026, 10, 4), [utc(2026, 10, 3, 15, 45)]),
        # Asia/Kolkata: no DST (+05:30), control
        ("Asia/Kolkata", "02:30", date(2026, 3, 29), [utc(2026, 3, 28, 21, 0)]),
        ("Asia/Kolkata", "02:30", date(2026, 10, 25), [utc(2026, 10, 24, 21, 0)]),
    ],
)
def test_a_daily_job_fires_exactly_once_per_local_date_across_dst(
    zone: str, time: str, local_date: date, expected: list[datetime]
) -> None:
    spec = make_spec(f"daily {time}", None, zone)
    assert fires_on(spec, local_date) == expected


@pytest.mark.parametrize(
    ("zone", "time", "local_date", "shown"),
    [
        ("Europe/Berlin", "02:30", date(2026, 3, 29), "Sun 03:30 CEST"),
        ("Europe/Berlin", "02:30", date(2026, 10, 25), "Sun 02:30 CEST"),
        ("America/New_York", "01:30", date(2026, 11, 1), "Sun 01:30 EDT"),
        ("Australia/Sydney", "02:30", date(2026, 10, 4), "Sun 03:30 AEDT"),
        ("Australia/Lord_Howe", "02:00", date(2026, 10, 4), "Sun 02:30 +11"),
        ("Asia/Kolkata", "02:30", date(2026, 3, 29), "Sun 02:30 IST"),
    ],
)
def test_the_fired_instant_in_local_words(zone: str, time: str, local_date: date, shown: str) -> None:
    spec = make_spec(f"daily {time}", None, zone)
    (at,) = fires_on(spec, local_date)
    assert schedule.describe(at, zone) == shown


def test_the_repeated_hour_yields_one_key_per_local_date() -> None:
    spec = make_spec("daily 02:30", None, BERLIN)
    found = recurrence.next_occurrences(spec, after=utc(2026, 10, 23, 12), limit=3)
    assert [o.key for o in found] == [
        "dev-eu:2026-10-24:sleep",
        "dev-eu:2026-10-25:sleep",
        "dev-eu:2026-10-26:sleep",
    ]
    assert [o.at for o in found] == [
        utc(2026, 10, 24, 0, 30),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def apscheduler_fires(zone: str, hour: int, minute: int, start: datetime, end: datetime) -> list[datetime]:
    """Fire times as APScheduler's scheduler computes them: each from the previous fire time."""
    trigger = CronTrigger(hour=hour, minute=minute, timezone=ZoneInfo(zone))
    fired: list[datetime] = []
    previous: datetime | None = None
    now = start
    while (following := trigger.get_next_fire_time(previous, now)) is not None and following <= end:
        fired.append(following.astimezone(UTC))
        previous = now = following
    return fired


def test_apscheduler_fires_twice_in_autumn_where_we_fire_once() -> None:
    start, end = utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)
    assert apscheduler_fires(BERLIN, 2, 30, start, end) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 30),
    ]
    ours = recurrence.occurrences_between(make_spec("daily 02:30", None, BERLIN), start=start, end=end)
    assert [o.at for o in ours] == [utc(2026, 10, 25, 0, 30)]


def test_apscheduler_and_we_agree_on_the_spring_gap() -> None:
    start, end = utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)
    assert apscheduler_fires(BERLIN, 2, 30, start, end) == [utc(2026, 3, 29, 1, 30)]
    ours = recurrence.occurrences_between(make_spec("daily 02:30", None, BERLIN), start=start, end=end)
    assert [o.at for o in ours] == [utc(2026, 3, 29, 1, 30)]


def test_apscheduler_fires_twice_at_lord_howe_half_hour_fall_back() -> None:
    start, end = utc(2026, 4, 4, 0), utc(2026, 4, 5, 0)
    assert apscheduler_fires("Australia/Lord_Howe", 1, 30, start, end) == [
        utc(2026, 4, 4, 14, 30),
        utc(2026, 4, 4, 15, 0),
    ]
    ours = recurrence.occurrences_between(
        make_spec("daily 01:30", None, "Australia/Lord_Howe"), start=start, end=end
    )
    assert [o.at for o in ours] == [utc(2026, 4, 4, 14, 30)]


@pytest.mark.parametrize(
    ("after", "sleep_at", "wake_at", "hours"),
    [
        (utc(2026, 3, 26), utc(2026, 3, 27, 19), utc(2026, 3, 30, 6), 59),
        (utc(2026, 10, 22), utc(2026, 10, 23, 18), utc(2026, 10, 26, 7), 61),
    ],
)
def test_the_weekend_window_spans_the_dst_change(
    after: datetime, sleep_at: datetime, wake_at: datetime, hours: int
) -> None:
    spec = make_spec("Fri 20:00", "Mon 08:00", BERLIN)
    sleep, wake = recurrence.next_occurrences(spec, after=after, limit=2)
    assert (sleep.action, sleep.at, wake.action, wake.at) == ("sleep", sleep_at, "wake", wake_at)
    assert wake.at - sleep.at == timedelta(hours=hours)
    assert wake.at.astimezone(ZoneInfo(BERLIN)).strftime("%a %H:%M") == "Mon 08:00"
    assert sleep.at.astimezone(ZoneInfo(BERLIN)).strftime("%a %H:%M") == "Fri 20:00"


def test_the_weekday_is_the_local_weekday() -> None:
    spec = make_spec("Mon 00:30", None, BERLIN)
    found = occurrence(spec, "sleep", after=utc(2026, 1, 7))
    assert found.at == utc(2026, 1, 11, 23, 30)  # a Sunday in UTC
    assert found.local_date == date(2026, 1, 12)  # Monday in Berlin
    assert found.key == "dev-eu:2026-01-12:sleep"


def test_next_occurrences_interleave_sleeps_and_wakes_in_time_order() -> None:
    spec = make_spec("Mon-Fri 20:00", "Mon-Fri 08:00", BERLIN)
    found = recurrence.next_occurrences(spec, after=utc(2026, 1, 9, 12), limit=4)  # Fri 13:00 CET
    assert [(o.action, o.at) for o in found] == [
        ("sleep", utc(2026, 1, 9, 19)),
        ("wake", utc(2026, 1, 12, 7)),
        ("sleep", utc(2026, 1, 12, 19)),
        ("wake", utc(2026, 1, 13, 7)),
    ]


def test_after_is_exclusive() -> None:
    spec = make_spec("Fri 20:00", "Mon 08:00", BERLIN)
    assert occurrence(spec, "sleep", after=utc(2026, 1, 9, 19)).at == utc(2026, 1, 16, 19)
    assert occurrence(spec, "sleep", after=utc(2026, 1, 9, 19) - timedelta(seconds=1)).at == utc(
        2026, 1, 9, 19
    )


def test_a_schedule_without_wake_has_no_next_wake() -> None:
    spec = make_spec("Fri 19:00", None, BERLIN)
    assert recurrence.next_occurrence(spec, "wake", after=utc(2026, 1, 1)) is None
    assert {o.action for o in recurrence.next_occurrences(spec, after=utc(2026, 1, 1), limit=5)} == {"sleep"}


def test_naive_instants_are_refused() -> None:
    spec = make_spec()
    with pytest.raises(ScheduleError, match="after must be timezone-aware"):
        recurrence.next_occurrences(spec, after=datetime(2026, 1, 1, 12))


# --- exception dates (holidays) -----------------------------------------------------------------------


def test_a_holiday_skips_its_wake_and_its_sleep_and_the_cluster_stays_down() -> None:
    spec = make_spec("Mon-Fri 20:00", "Mon-Fri 08:00", BERLIN, exceptions="2026-12-24,2026-12-25")
    found = recurrence.next_occurrences(spec, after=utc(2026, 12, 23, 12), limit=3)
    assert [(o.key, o.at) for o in found] == [
        ("dev-eu:2026-12-23:sleep", utc(2026, 12, 23, 19)),
        ("dev-eu:2026-12-28:wake", utc(2026, 12, 28, 7)),  # Thu 24 and Fri 25 are holidays
        ("dev-eu:2026-12-28:sleep", utc(2026, 12, 28, 19)),
    ]
    assert recurrence.skipped_wakes(spec, found[0]) == (date(2026, 12, 24), date(2026, 12, 25))
    assert recurrence.skipped_wakes(spec, found[2]) == ()


def test_a_holiday_on_monday_keeps_the_weekend_going_until_tuesday() -> None:
    spec = make_spec("Fri 20:00", "Mon-Fri 08:00", BERLIN, exceptions="2026-04-06")  # Easter Monday
    sleep = occurrence(spec, "sleep", after=utc(2026, 4, 1))
    assert sleep.local_date == date(2026, 4, 3)
    assert occurrence(spec, "wake", after=sleep.at).at == utc(2026, 4, 7, 6)  # Tue 08:00 CEST
    assert recurrence.skipped_wakes(spec, sleep) == (date(2026, 4, 6),)


# --- announcements and display ------------------------------------------------------------------------


def test_announcements_fire_at_each_lead_time_before_the_event() -> None:
    spec = make_spec("Fri 19:00", "Mon 07:00", BERLIN, lead_times="10m,60m")
    sleep = occurrence(spec, "sleep", after=utc(2026, 1, 5))
    assert recurrence.announcement_times(sleep, spec.lead_times) == [
        (60 * M, utc(2026, 1, 9, 17, 0)),
        (10 * M, utc(2026, 1, 9, 17, 50)),
    ]
    assert schedule.describe(sleep, spec.tz) == "Fri 19:00 CET"
    assert schedule.in_words(sleep.at - utc(2026, 1, 9, 17, 0)) == "in 60 min"


def test_announcement_arithmetic_is_done_in_utc_across_the_autumn_change() -> None:
    # Wake Sun 03:00 CET (02:00Z) on 2026-10-25 with a 60 min lead: the announcement is 60 real minutes
    # earlier (01:00Z, the second 02:00 local); wall-clock arithmetic would give 02:00 CEST = 00:00Z.
    spec = make_spec("Sat 20:00", "Sun 03:00", BERLIN, lead_times="60m")
    wake = occurrence(spec, "wake", after=utc(2026, 10, 24))
    assert wake.at == utc(2026, 10, 25, 2)
    assert recurrence.announcement_times(wake, spec.lead_times) == [(H, utc(2026, 10, 25, 1))]


def test_a_postponed_occurrence_is_announced_from_its_new_time() -> None:
    spec = make_spec("Fri 19:00", "Mon 07:00", BERLIN, lead_times="10m")
    sleep = occurrence(spec, "sleep", after=utc(2026, 1, 5))
    assert recurrence.announcement_times(sleep, spec.lead_times, at=utc(2026, 1, 9, 20)) == [
        (10 * M, utc(2026, 1, 9, 19, 50))
    ]


@pytest.mark.parametrize(
    ("delta", "words"),
    [
        (60 * M, "in 60 min"),
        (10 * M, "in 10 min"),
        (timedelta(seconds=10), "now"),
        (-5 * M, "5 min ago"),
        (3 * H, "in 3 h"),
        (2 * H + 30 * M, "in 2 h 30 min"),
        (59 * H, "in 2 days 11 h"),
        (timedelta(days=3), "in 3 days"),
    ],
)
def test_in_words(delta: timedelta, words: str) -> None:
    assert schedule.in_words(delta) == words


def test_describe_in_the_users_zone() -> None:
    spec = make_spec("Fri 19:00", "Mon 07:00", BERLIN)
    sleep = occurrence(spec, "sleep", after=utc(2026, 7, 1))
    assert schedule.describe(sleep, BERLIN) == "Fri 19:00 CEST"
    assert schedule.describe(sleep, "America/New_York") == "Fri 13:00 EDT"
    assert schedule.describe(sleep, ZoneInfo("Asia/Kolkata")) == "Fri 22:30 IST"


# --- overrides: postpone, skip, run now ---------------------------------------------------------------


@pytest.fixture
def weekdays() -> ScheduleSpec:
    return make_spec("Mon-Fri 20:00", "Mon-Fri 08:00", BERLIN)


def test_skip_affects_only_that_occurrence(weekdays: ScheduleSpec) -> None:
    tonight, tomorrow = (
        o for o in recurrence.next_occurrences(weekdays, after=utc(2026, 1, 13, 12), limit=3)[::2]
    )
    decision = one_off.skip(tonight, by="U_ALICE", spec=weekdays)
    assert decision == Override(
        "dev-eu:2026-01-13:sleep",
        "skip",
        None,
        "U_ALICE",
        "The sleep of Tue 20:00 CET is skipped; the schedule is unchanged.",
    )
    assert one_off.effective_time(tonight, [decision]) is None
    assert one_off.effective_time(tomorrow, [decision]) == utc(2026, 1, 14, 19)


def test_postpone_moves_only_that_occurrence(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    tomorrow = occurrence(weekdays, "sleep", after=tonight.at)
    decision = one_off.postpone(tonight, by="U_ALICE", delta=H, spec=weekdays)
    assert (decision.kind, decision.until, decision.by) == ("postpone", utc(2026, 1, 13, 20), "U_ALICE")
    assert decision.note == "The sleep of Tue 20:00 CET is postponed to Tue 21:00 CET (60 min later)."
    assert one_off.effective_time(tonight, [decision]) == utc(2026, 1, 13, 20)
    assert one_off.effective_time(tomorrow, [decision]) == tomorrow.at == utc(2026, 1, 14, 19)


def test_postpones_add_up(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    first = one_off.postpone(tonight, by="U_ALICE", delta=H, spec=weekdays)
    second = one_off.postpone(tonight, by="U_BOB", delta=H, spec=weekdays, overrides=[first])
    assert one_off.effective_time(tonight, [first, second]) == utc(2026, 1, 13, 21)


def test_postpone_past_the_next_wake_becomes_a_skip(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    decision = one_off.postpone(tonight, by="U_ALICE", delta=13 * H, spec=weekdays)
    assert decision.kind == "skip"
    assert decision.until is None
    assert decision.note == (
        "Postponing the sleep of Tue 20:00 CET to Wed 09:00 CET would pass the next wake (Wed 08:00 CET), "
        "so this sleep is skipped instead; the schedule is unchanged."
    )
    assert one_off.effective_time(tonight, [decision]) is None


def test_postpone_until_exactly_the_next_wake_is_a_skip(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    assert one_off.postpone_until(tonight, by="U", until=utc(2026, 1, 14, 7), spec=weekdays).kind == "skip"
    assert (
        one_off.postpone_until(tonight, by="U", until=utc(2026, 1, 14, 6, 59), spec=weekdays).kind
        == "postpone"
    )


def test_postponing_a_wake_past_the_next_sleep_skips_the_wake(weekdays: ScheduleSpec) -> None:
    morning = occurrence(weekdays, "wake", after=utc(2026, 1, 13, 0))
    decision = one_off.postpone(morning, by="U_ALICE", delta=12 * H, spec=weekdays)
    assert decision.kind == "skip"
    assert "would pass the next sleep (Tue 20:00 CET)" in decision.note


def test_without_a_wake_a_postpone_is_bounded_by_the_next_sleep() -> None:
    spec = make_spec("Fri 19:00", None, BERLIN)
    friday = occurrence(spec, "sleep", after=utc(2026, 1, 5))
    assert one_off.postpone(friday, by="U", delta=3 * timedelta(days=1), spec=spec).kind == "postpone"
    assert one_off.postpone(friday, by="U", delta=7 * timedelta(days=1), spec=spec).kind == "skip"


def test_the_latest_decision_for_an_occurrence_wins(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    postponed = one_off.postpone(tonight, by="U_ALICE", delta=H, spec=weekdays)
    skipped = one_off.skip(tonight, by="U_BOB", spec=weekdays)
    announced = dataclasses.replace(weekdays, lead_times=(H,))
    started = one_off.run_now(
        tonight, by="U_CAROL", now=utc(2026, 1, 13, 18, 30), spec=announced, announced=True
    )
    assert one_off.effective_time(tonight, [postponed, skipped]) is None
    assert one_off.effective_time(tonight, [skipped, postponed]) == utc(2026, 1, 13, 20)
    assert one_off.effective_time(tonight, [postponed, skipped, started]) == utc(2026, 1, 13, 18, 30)


def test_run_now_starts_only_the_announced_occurrence_within_its_announcement_window(
    weekdays: ScheduleSpec,
) -> None:
    """Run now on a pre-approved schedule starts a zero-scale without asking: only the run people were
    told of may start early. Next week's, or tonight's before its announcement, is refused."""
    spec = dataclasses.replace(weekdays, lead_times=(H, 10 * timedelta(minutes=1)))
    tonight = occurrence(spec, "sleep", after=utc(2026, 1, 13, 12))  # Tue 20:00 Berlin, 19:00Z
    next_week = occurrence(spec, "sleep", after=utc(2026, 1, 20, 12))
    within = utc(2026, 1, 13, 18, 30)
    started = one_off.run_now(tonight, by="U_CAROL", now=within, spec=spec, announced=True)
    assert started.kind == "run_now" and started.until == within
    with pytest.raises(ScheduleError, match="Run now starts only the announced sleep") as refused:
        one_off.run_now(next_week, by="U_CAROL", now=within, spec=spec, announced=False)
    assert "Tue 20 Jan" in str(refused.value) and "asks for approval" in str(refused.value)
    with pytest.raises(ScheduleError, match="not announced yet"):  # tonight's, before its announcement
        one_off.run_now(tonight, by="U_CAROL", now=utc(2026, 1, 13, 12), spec=spec, announced=False)
    with pytest.raises(ScheduleError, match="not announced yet"):  # marked announced, window not open
        one_off.run_now(next_week, by="U_CAROL", now=within, spec=spec, announced=True)
    # Postponed after its announcement: still the announced run.
    later = one_off.postpone(tonight, by="U_ALICE", delta=2 * H, spec=spec)
    assert one_off.run_now(tonight, by="U", now=within, spec=spec, announced=True, overrides=[later])


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ("negative", "the delay must be positive"),
        ("earlier", "pick a time after Tue 20:00 CET"),
        ("skipped", "is already skipped: nothing to postpone"),
        ("naive", "until must be timezone-aware"),
    ],
)
def test_bad_postpones_are_refused(weekdays: ScheduleSpec, call: str, fragment: str) -> None:
    tonight = occurrence(weekdays, "sleep", after=utc(2026, 1, 13, 12))
    with pytest.raises(ScheduleError) as caught:
        if call == "negative":
            one_off.postpone(tonight, by="U", delta=-H, spec=weekdays)
        elif call == "earlier":
            one_off.postpone_until(tonight, by="U", until=utc(2026, 1, 13, 18), spec=weekdays)
        elif call == "skipped":
            skipped = one_off.skip(tonight, by="U", spec=weekdays)
            one_off.postpone(tonight, by="U", delta=H, spec=weekdays, overrides=[skipped])
        else:
            one_off.postpone_until(tonight, by="U", until=datetime(2026, 1, 13, 22), spec=weekdays)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "until", "fragment"),
    [
        ("postpone", None, "a postpone override needs a timezone-aware until="),
        ("run_now", datetime(2026, 1, 1), "a run_now override needs a timezone-aware until="),
        ("skip", utc(2026, 1, 1), "a skip override has no time"),
        ("pause", None, 'unknown override kind "pause"'),
    ],
)
def test_malformed_overrides_are_refused(kind: str, until: datetime | None, fragment: str) -> None:
    assert_refused(lambda: Override("dev-eu:2026-01-13:sleep", kind, until, "U"), fragment)  # type: ignore[arg-type]


# --- missed runs --------------------------------------------------------------------------------------

FRI_SLEEP = utc(2026, 1, 9, 19)  # Fri 20:00 CET
FRI_WAKE = utc(2026, 1, 9, 7)  # Fri 08:00 CET
MON_WAKE = utc(2026, 1, 12, 7)  # Mon 08:00 CET


def test_a_sleep_missed_within_grace_runs_late(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 30 * M)
    assert decision.occurrence.key == "dev-eu:2026-01-09:sleep"
    assert (decision.verdict, decision.late_by) == ("run_late", 30 * M)
    assert decision.reason == (
        "the sleep of Fri 20:00 CET was missed by 30 min, within the 60 min grace: it runs 30 min late"
    )


def test_a_sleep_missed_beyond_grace_is_announced_not_dropped(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 2 * H)
    assert (decision.verdict, decision.late_by) == ("announce_missed", 2 * H)
    assert decision.reason == (
        "the sleep of Fri 20:00 CET was missed by 2 h, beyond the 60 min grace: not run, announced as missed"
    )


def test_the_grace_window_is_configurable_and_inclusive(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 2 * H, grace=2 * H)
    assert decision.verdict == "run_late"


def test_an_occurrence_on_time_just_runs(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + timedelta(seconds=5))
    assert (decision.verdict, decision.reason) == ("run", "the sleep of Fri 20:00 CET is due")


def test_only_the_most_recent_due_event_counts(weekdays: ScheduleSpec) -> None:
    # down at 20:00 and up at 08:00 both missed → only the wake is acted on; the sleep is reported
    decisions = one_off.decide_missed(weekdays, last_done=utc(2026, 1, 8, 7), now=FRI_WAKE + 30 * M)
    assert [(d.occurrence.key, d.verdict) for d in decisions] == [
        ("dev-eu:2026-01-08:sleep", "noop"),
        ("dev-eu:2026-01-09:wake", "run_late"),
    ]
    assert "superseded by the later wake of Fri 08:00 CET" in decisions[0].reason


def test_a_missed_wake_always_runs_however_late(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(weekdays, last_done=FRI_SLEEP, now=MON_WAKE + 5 * H)
    assert decision.occurrence.key == "dev-eu:2026-01-12:wake"
    assert (decision.verdict, decision.late_by) == ("run_late", 5 * H)
    assert decision.reason == "the wake of Mon 08:00 CET was missed by 5 h; a missed wake always runs"


def test_a_manual_action_after_the_occurrence_wins(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(
        weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 30 * M, manual_action_at=FRI_SLEEP + 15 * M
    )
    assert decision.verdict == "noop"
    assert decision.reason == (
        "a manual action at Fri 20:15 CET came after the sleep of Fri 20:00 CET; the manual action wins"
    )


def test_a_manual_action_before_the_occurrence_does_not_cancel_it(weekdays: ScheduleSpec) -> None:
    (decision,) = one_off.decide_missed(
        weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 30 * M, manual_action_at=FRI_SLEEP - H
    )
    assert decision.verdict == "run_late"


def test_done_keys_yield_nothing(weekdays: ScheduleSpec) -> None:
    done = frozenset({"dev-eu:2026-01-09:sleep"})
    assert one_off.decide_missed(weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 30 * M, done_keys=done) == []
    assert one_off.decide_missed(weekdays, last_done=FRI_SLEEP, now=FRI_SLEEP + 30 * M) == []


def test_nothing_due_means_no_decision(weekdays: ScheduleSpec) -> None:
    assert one_off.decide_missed(weekdays, last_done=FRI_SLEEP, now=utc(2026, 1, 11, 12)) == []


def test_the_lookback_is_capped_at_seven_days(weekdays: ScheduleSpec) -> None:
    now = utc(2026, 1, 14, 12)  # Wed 13:00 CET, down for a month
    for last_done in (None, utc(2025, 12, 1)):
        decisions = one_off.decide_missed(weekdays, last_done=last_done, now=now)
        assert all(now - timedelta(days=7) < d.occurrence.at <= now for d in decisions)
        assert len(decisions) == 10  # 5 sleeps and 5 wakes in the last 7 days
        assert [d.verdict for d in decisions] == ["noop"] * 9 + ["run_late"]
        assert decisions[-1].occurrence.key == "dev-eu:2026-01-14:wake"


def test_a_skipped_occurrence_is_not_run_late(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=FRI_WAKE)
    skipped = one_off.skip(tonight, by="U_ALICE", spec=weekdays)
    (decision,) = one_off.decide_missed(
        weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 30 * M, overrides=[skipped]
    )
    assert (decision.verdict, decision.reason) == (
        "noop",
        "the sleep of Fri 20:00 CET was skipped by U_ALICE",
    )


def test_a_postponed_occurrence_is_due_at_its_new_time(weekdays: ScheduleSpec) -> None:
    tonight = occurrence(weekdays, "sleep", after=FRI_WAKE)
    postponed = one_off.postpone(tonight, by="U_ALICE", delta=2 * H, spec=weekdays)
    done = frozenset({"dev-eu:2026-01-09:wake"})
    before = one_off.decide_missed(
        weekdays, last_done=None, now=FRI_SLEEP + H, overrides=[postponed], done_keys=done
    )
    assert before == []  # the latest due event (the Friday wake) is done; the sleep is not due yet
    (after,) = one_off.decide_missed(
        weekdays, last_done=FRI_WAKE, now=FRI_SLEEP + 2 * H + 10 * M, overrides=[postponed]
    )
    assert (after.occurrence.key, after.verdict, after.late_by) == (
        "dev-eu:2026-01-09:sleep",
        "run_late",
        10 * M,
    )


# --- manual and temporary wakes -----------------------------------------------------------------------


def test_a_temporary_wake_at_the_weekend_resleeps_after_its_duration(weekdays: ScheduleSpec) -> None:
    now = utc(2026, 1, 10, 9)  # Sat 10:00 CET, asleep since Friday
    resleep = one_off.temporary_wake(now, 3 * H, weekdays)
    assert resleep == utc(2026, 1, 10, 12)
    assert one_off.held_sleeps(weekdays, woke_at=now, resleep_at=resleep) == []


def test_a_temporary_wake_holds_back_the_scheduled_sleep_inside_it(weekdays: ScheduleSpec) -> None:
    now = utc(2026, 1, 9, 18)  # Fri 19:00 CET, one hour before the scheduled sleep
    resleep = one_off.temporary_wake(now, 3 * H, weekdays)
    assert resleep == utc(2026, 1, 9, 21)
    assert [o.key for o in one_off.held_sleeps(weekdays, woke_at=now, resleep_at=resleep)] == [
        "dev-eu:2026-01-09:sleep"
    ]


def test_a_temporary_wake_overtaken_by_the_scheduled_wake_follows_the_schedule(
    weekdays: ScheduleSpec,
) -> None:
    now = utc(2026, 1, 12, 5)  # Mon 06:00 CET, scheduled wake at 08:00
    resleep = one_off.temporary_wake(now, 3 * H, weekdays)
    assert resleep == utc(2026, 1, 12, 19)  # the regular Mon 20:00 sleep, not 09:00
    assert one_off.held_sleeps(weekdays, woke_at=now, resleep_at=resleep) == []


def test_a_temporary_wake_counts_real_hours_across_the_spring_change(weekdays: ScheduleSpec) -> None:
    now = utc(2026, 3, 28, 22)  # Sat 23:00 CET
    resleep = one_off.temporary_wake(now, 4 * H, weekdays)
    assert resleep == utc(2026, 3, 29, 2)
    assert schedule.describe(resleep, BERLIN) == "Sun 04:00 CEST"


@pytest.mark.parametrize("duration", [timedelta(0), -H, timedelta(days=8)])
def test_bad_temporary_wake_durations_are_refused(weekdays: ScheduleSpec, duration: timedelta) -> None:
    with pytest.raises(ScheduleError, match="give a duration above 0 and at most 7 days"):
        one_off.temporary_wake(utc(2026, 1, 10, 9), duration, weekdays)


def test_a_cluster_woken_by_hand_sleeps_at_the_next_scheduled_sleep(weekdays: ScheduleSpec) -> None:
    assert one_off.next_sleep_after_manual_wake(weekdays, woke_at=utc(2026, 1, 10, 9)) == utc(2026, 1, 12, 19)
    assert one_off.next_sleep_after_manual_wake(weekdays, woke_at=utc(2026, 1, 12, 18)) == utc(
        2026, 1, 12, 19
    )


def test_the_scheduled_state(weekdays: ScheduleSpec) -> None:
    assert one_off.scheduled_state(weekdays, at=utc(2026, 1, 10, 12)) == "asleep"
    assert one_off.scheduled_state(weekdays, at=utc(2026, 1, 12, 12)) == "awake"
    assert one_off.scheduled_state(weekdays, at=MON_WAKE) == "awake"


# --- properties ---------------------------------------------------------------------------------------

SCHEDULE_ALPHABET = "MonTuesWdhFrSaiyl*-, \t:0123456789/"


@given(st.one_of(st.text(), st.text(alphabet=SCHEDULE_ALPHABET)))
def test_the_weekly_parser_raises_only_schedule_errors(text: str) -> None:
    try:
        schedule.parse_weekly(text)
    except ScheduleError as exc:
        assert "e.g." in str(exc) or "write" in str(exc)


@given(
    st.one_of(st.text(), st.text(alphabet="EuropeBrlinAmcaUTC/_.-+0123456789 "), st.sampled_from(DST_ZONES))
)
def test_the_zone_parser_raises_only_schedule_errors(text: str) -> None:
    try:
        assert "/" in schedule.parse_zone(text).key or text.strip() == "UTC"
    except ScheduleError as exc:
        assert str(exc)


@given(st.one_of(st.text(), st.text(alphabet="0123456789hmin, -")))
def test_the_lead_time_parser_raises_only_schedule_errors(text: str) -> None:
    try:
        assert all(lead > timedelta(0) for lead in schedule.parse_lead_times(text))
    except ScheduleError as exc:
        assert str(exc)


@given(st.one_of(st.text(), st.text(alphabet="0123456789-, ")))
def test_the_date_parser_raises_only_schedule_errors(text: str) -> None:
    try:
        schedule.parse_dates(text)
    except ScheduleError as exc:
        assert "YYYY-MM-DD" in str(exc)


@given(sleep=st.text(alphabet=SCHEDULE_ALPHABET), wake=st.text(alphabet=SCHEDULE_ALPHABET), tz=st.text())
def test_parse_spec_raises_only_schedule_errors(sleep: str, wake: str, tz: str) -> None:
    try:
        schedule.parse_spec(name="dev-eu", cluster="dev-eu", sleep=sleep, wake=wake, tz=tz, lead_times="60m")
    except ScheduleError as exc:
        assert str(exc)


day_sets = st.frozensets(st.integers(0, 6), min_size=1)
weekly_times = st.builds(WeeklyTime, day_sets, st.integers(0, 23), st.integers(0, 59))
dst_times = st.one_of(
    st.tuples(st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 15, 30, 45])),
    st.tuples(st.integers(0, 23), st.integers(0, 59)),
)
instants_2026 = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)
)


@given(weekly_times)
def test_format_and_parse_round_trip(weekly: WeeklyTime) -> None:
    assert schedule.parse_weekly(schedule.format_weekly(weekly)) == weekly


@given(zone=st.sampled_from(DST_ZONES), days=day_sets, time=dst_times, after=instants_2026)
@settings(deadline=None)
def test_next_occurrence_is_strictly_after_and_monotonic(
    zone: str, days: frozenset[int], time: tuple[int, int], after: datetime
) -> None:
    spec = ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(days, *time), None, zone)
    first = occurrence(spec, "sleep", after=after)
    second = occurrence(spec, "sleep", after=first.at)
    assert after < first.at < second.at
    assert first.local_date < second.local_date
    assert recurrence.occurrences_between(spec, start=after, end=first.at) == [first]
    upcoming = recurrence.next_occurrences(spec, after=after, limit=3)
    assert upcoming[:2] == [first, second]
    assert all(a.at < b.at for a, b in itertools.pairwise(upcoming))


@given(
    zone=st.sampled_from(DST_ZONES),
    days=day_sets,
    time=dst_times,
    day=st.dates(min_value=date(2026, 1, 1), max_value=date(2026, 12, 31)),
)
@settings(deadline=None)
def test_exactly_one_sleep_per_local_date_with_the_weekday(
    zone: str, days: frozenset[int], time: tuple[int, int], day: date
) -> None:
    spec = ScheduleSpec("dev-eu", "dev-eu", WeeklyTime(days, *time), None, zone)
    fired = fires_on(spec, day)
    assert len(fired) == (1 if day.weekday() in days else 0)
    for at in fired:
        assert at.astimezone(ZoneInfo(zone)).date() == day


# --- days off: public holidays and calendar days as values --------------------------------------------

WHIT_MONDAY = date(2026, 5, 25)


def with_days_off(spec: ScheduleSpec, *days_off: DayOff) -> ScheduleSpec:
    return dataclasses.replace(spec, days_off=tuple(days_off))


def test_a_day_off_that_stays_asleep_drops_its_wake_and_its_sleep(weekdays: ScheduleSpec) -> None:
    spec = with_days_off(weekdays, DayOff(WHIT_MONDAY, "Whit Monday", "DE-BY", "stay_asleep"))
    found = recurrence.next_occurrences(spec, after=utc(2026, 5, 22, 12), limit=2)  # Fri 14:00 CEST
    assert [(o.key, o.at) for o in found] == [
        ("dev-eu:2026-05-22:sleep", utc(2026, 5, 22, 18)),
        ("dev-eu:2026-05-26:wake", utc(2026, 5, 26, 6)),
    ]
    skipped = recurrence.days_off_between(spec, start=found[0].at, end=found[1].at)
    assert [(o.key, d.reason()) for o, d in skipped] == [
        ("dev-eu:2026-05-25:wake", "Stays asleep: Whit Monday (DE-BY)"),
        ("dev-eu:2026-05-25:sleep", "Stays asleep: Whit Monday (DE-BY)"),
    ]


@pytest.mark.parametrize(
    ("action", "kept"),
    [
        ("skip_wake", ["dev-eu:2026-05-22:sleep", "dev-eu:2026-05-25:sleep", "dev-eu:2026-05-26:wake"]),
        ("skip_sleep", ["dev-eu:2026-05-22:sleep", "dev-eu:2026-05-25:wake", "dev-eu:2026-05-26:wake"]),
    ],
)
def test_a_day_off_can_skip_only_the_wake_or_only_the_sleep(
    weekdays: ScheduleSpec, action: DayOffAction, kept: list[str]
) -> None:
    spec = with_days_off(weekdays, DayOff(WHIT_MONDAY, "Whit Monday", "DE-BY", action))
    found = recurrence.next_occurrences(spec, after=utc(2026, 5, 22, 12), limit=3)
    assert [o.key for o in found] == kept


def test_a_public_holiday_from_the_library_keeps_it_asleep_across_the_spring_change(
    weekdays: ScheduleSpec,
) -> None:
    # Good Friday 2027-03-26 and Easter Monday 2027-03-29 around the change to CEST on the 28th.
    rule = parse_rule(holidays="de-by")
    spec = dataclasses.replace(weekdays, days_off_rule=rule, days_off=Calendars().days_off(rule, around=2027))
    sleep, wake = recurrence.next_occurrences(spec, after=utc(2027, 3, 25, 12), limit=2)
    assert (sleep.key, sleep.at) == ("dev-eu:2027-03-25:sleep", utc(2027, 3, 25, 19))  # 20:00 CET
    assert (wake.key, wake.at) == ("dev-eu:2027-03-30:wake", utc(2027, 3, 30, 6))  # 08:00 CEST
    reasons = [d.reason() for _, d in recurrence.days_off_between(spec, start=sleep.at, end=wake.at)]
    assert reasons == [
        "Stays asleep: Good Friday (DE-BY)",
        "Stays asleep: Good Friday (DE-BY)",
        "Stays asleep: Easter Monday (DE-BY)",
        "Stays asleep: Easter Monday (DE-BY)",
    ]


def test_a_calendar_day_skips_the_sleep_in_the_repeated_hour_of_the_autumn_change() -> None:
    # A daily 02:30 sleep: on 2026-10-25 02:30 happens twice; the day off drops that date's one sleep.
    spec = with_days_off(
        make_spec("daily 02:30", "daily 09:00", BERLIN),
        DayOff(date(2026, 10, 25), "Release", "calendar releases", "skip_sleep"),
    )
    found = recurrence.occurrences_between(spec, start=utc(2026, 10, 24), end=utc(2026, 10, 26, 12))
    assert [(o.key, o.at) for o in found] == [
        ("dev-eu:2026-10-24:sleep", utc(2026, 10, 24, 0, 30)),
        ("dev-eu:2026-10-24:wake", utc(2026, 10, 24, 7)),
        ("dev-eu:2026-10-25:wake", utc(2026, 10, 25, 8)),
        ("dev-eu:2026-10-26:sleep", utc(2026, 10, 26, 1, 30)),
        ("dev-eu:2026-10-26:wake", utc(2026, 10, 26, 8)),
    ]
    [(dropped, why)] = recurrence.days_off_between(spec, start=utc(2026, 10, 24), end=utc(2026, 10, 26, 12))
    assert (dropped.key, dropped.at) == ("dev-eu:2026-10-25:sleep", utc(2026, 10, 25, 0, 30))
    assert why.reason() == "Stays awake: Release (calendar releases)"


def test_days_off_rules_parse() -> None:
    assert parse_rule(holidays=" de-by ", calendar="releases", action="skip-wake") == DaysOffRule(
        "DE-BY", "releases", "skip_wake"
    )
    assert parse_rule() == DaysOffRule() and not DaysOffRule()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"holidays": "Germany/Bavaria"}, 'holidays "Germany/Bavaria": give a country code'),
        ({"calendar": "../etc/passwd"}, 'calendar "../etc/passwd": name a calendar of the configuration'),
        ({"action": "sleep-in"}, 'on_holiday "sleep-in": use stay-asleep'),
    ],
)
def test_days_off_rules_refuse_with_an_example(kwargs: dict[str, str], fragment: str) -> None:
    refusal = assert_refused(lambda: make_spec(**kwargs), fragment)
    assert refusal.field == "holidays"


# Days off drawn over the spring and autumn changes of 2026 (and the weeks around them).
days_off_2026 = st.lists(
    st.builds(
        DayOff,
        st.one_of(
            st.dates(min_value=date(2026, 3, 20), max_value=date(2026, 4, 8)),
            st.dates(min_value=date(2026, 10, 16), max_value=date(2026, 11, 4)),
        ),
        st.just("Holiday"),
        st.sampled_from(["DE-BY", "calendar releases"]),
        st.sampled_from(["stay_asleep", "skip_wake", "skip_sleep"]),
    ),
    max_size=8,
)
dst_instants = st.one_of(
    st.datetimes(min_value=datetime(2026, 3, 18), max_value=datetime(2026, 4, 8), timezones=st.just(UTC)),
    st.datetimes(min_value=datetime(2026, 10, 14), max_value=datetime(2026, 11, 4), timezones=st.just(UTC)),
)


def _spec_with(zone: str, sleep: WeeklyTime, wake: WeeklyTime, days_off: list[DayOff]) -> ScheduleSpec:
    if (wake.hour, wake.minute) == (sleep.hour, sleep.minute):
        wake = WeeklyTime(wake.days, wake.hour, (wake.minute + 1) % 60)
    return ScheduleSpec("dev-eu", "dev-eu", sleep, wake, zone, days_off=tuple(days_off))


@given(
    zone=st.sampled_from(DST_ZONES),
    sleep=weekly_times,
    wake=weekly_times,
    days_off=days_off_2026,
    after=dst_instants,
)
@settings(deadline=None)
def test_days_off_keep_the_dst_rules_and_each_event_is_either_scheduled_or_explained(
    zone: str, sleep: WeeklyTime, wake: WeeklyTime, days_off: list[DayOff], after: datetime
) -> None:
    spec = _spec_with(zone, sleep, wake, days_off)
    plain = dataclasses.replace(spec, days_off=())
    end = after + timedelta(days=10)
    kept = recurrence.occurrences_between(spec, start=after, end=end)
    explained = recurrence.days_off_between(spec, start=after, end=end)
    everything = recurrence.occurrences_between(plain, start=after, end=end)
    # Every event of the weekly times either happens or is suppressed by a day off that says why.
    assert sorted([*kept, *(o for o, _ in explained)], key=lambda o: (o.at, o.action)) == everything
    for occ in kept:
        assert spec.day_off(occ.local_date, occ.action) is None
    for occ, day_off in explained:
        assert day_off.day == occ.local_date and day_off.skips(occ.action)
    # At most one event per action and local date, strictly later each time.
    for action in ("sleep", "wake"):
        mine = [o for o in kept if o.action == action]
        assert all(a.at < b.at and a.local_date < b.local_date for a, b in itertools.pairwise(mine))
        following = recurrence.next_occurrence(spec, action, after=after)
        assert following is None or following.at > after
        assert following is None or spec.day_off(following.local_date, action) is None
        if mine:
            assert following == mine[0]


@given(
    zone=st.sampled_from(DST_ZONES),
    sleep=weekly_times,
    wake=weekly_times,
    days_off=days_off_2026,
    last_done=dst_instants,
    down_for=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=9)),
)
@settings(deadline=None)
def test_missed_runs_with_days_off_in_between_decide_only_on_events_that_happen(
    zone: str,
    sleep: WeeklyTime,
    wake: WeeklyTime,
    days_off: list[DayOff],
    last_done: datetime,
    down_for: timedelta,
) -> None:
    spec = _spec_with(zone, sleep, wake, days_off)
    now = last_done + down_for
    decisions = one_off.decide_missed(spec, last_done=last_done, now=now)
    for decision in decisions:
        occ = decision.occurrence
        assert spec.day_off(occ.local_date, occ.action) is None
        assert last_done < occ.at <= now
    if decisions:  # only the most recent event that happens counts; the earlier are superseded
        assert all(d.verdict == "noop" for d in decisions[:-1])
        start = max(last_done, now - one_off.MISSED_LOOKBACK)
        latest = recurrence.occurrences_between(spec, start=start, end=now)
        assert decisions[-1].occurrence == latest[-1]
        assert decisions[-1].verdict != "noop"


@given(
    zone=st.sampled_from(DST_ZONES),
    sleep=weekly_times,
    wake=weekly_times,
    days_off=days_off_2026,
    after=dst_instants,
    delta=st.timedeltas(min_value=timedelta(minutes=1), max_value=timedelta(days=6)),
)
@settings(deadline=None)
def test_postpone_and_skip_with_days_off_stop_only_at_an_event_that_happens(
    zone: str,
    sleep: WeeklyTime,
    wake: WeeklyTime,
    days_off: list[DayOff],
    after: datetime,
    delta: timedelta,
) -> None:
    spec = _spec_with(zone, sleep, wake, days_off)
    [first] = recurrence.next_occurrences(spec, after=after, limit=1) or [None]
    if first is None:
        return
    decided = one_off.postpone(first, by="U", delta=delta, spec=spec)
    until = first.at + delta
    opposite = "wake" if first.action == "sleep" else "sleep"
    happening = [
        o for o in recurrence.occurrences_between(spec, start=first.at, end=until) if o.action == opposite
    ]
    # A postpone turns into a skip exactly when it would pass an opposite event that happens; one a
    # day off suppresses is no boundary.
    assert decided.kind == ("skip" if happening else "postpone")
    assert one_off.effective_time(first, [decided]) == (None if happening else until)
    skipped = one_off.skip(first, by="U", spec=spec)
    following = recurrence.next_occurrence(spec, first.action, after=first.at)
    assert one_off.effective_time(first, [skipped]) is None
    assert following is None or one_off.effective_time(following, [skipped]) == following.at

"""Where days off come from: public holidays by country and region (the `holidays` library) and
iCalendar files kept in the configuration (team freezes, release weekends).

The adapter between those sources and the pure schedule arithmetic: `Calendars.days_off` turns a
schedule's `DaysOffRule` into dated `DayOff` values for a span of years, which the service hands to
`engine.schedules.core.recurrence`. Nothing in spec, recurrence, one_off or timer reads a calendar.

A calendar file is read and checked once, when the configuration is loaded (`load_calendar`): a
file that cannot be read, is not iCalendar, is too large, or whose recurrences expand to more days
than any team calendar has is refused with a message naming the file and what to do. Event names
are data: `days_off.clean_name` makes them one short printable line, renderers escape them.

Rules for calendar events
- An all-day event covers its dates, DTEND excluded (RFC 5545); a one-day event has no DTEND.
- A timed event covers the dates it touches as written in the file (in its own zone).
- Recurrences (RRULE, RDATE, EXDATE, changed instances) are expanded by `recurring-ical-events`.
- Cancelled events (STATUS:CANCELLED) and events marked free (TRANSP:TRANSPARENT) still count: the
  calendar is kept for scalebot, so what is in it is meant.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import holidays as holiday_library
import icalendar
import recurring_ical_events  # type: ignore[import-untyped]

from engine.domain.errors import Category, ScalebotError
from engine.schedules.core.days_off import DayOff, DaysOffRule, clean_name, format_region, parse_region

MAX_CALENDAR_BYTES = 2 * 1024 * 1024
"""A team calendar is kilobytes; a larger file is not one (or not meant for this)."""
MAX_CALENDAR_DAYS = 20_000
"""Days one calendar may cover over the years a schedule looks at (a daily rule for 12 years is
about 4,400): a recurrence that expands beyond it is refused rather than expanded for minutes."""
MAX_EVENT_DAYS = 400
"""One event longer than this is a mistake (a missing DTEND year): refused."""
YEARS_BEFORE, YEARS_AFTER = 1, 11
"""The years resolved around a schedule's latest activity: the look-back of missed runs and the
ten-year search horizon of `engine.schedules.core.recurrence`."""
_LANGUAGE = "en_US"


class CalendarError(ScalebotError, ValueError):
    """A calendar file or a holiday region that cannot be used; the message says what to do."""

    category = Category.CONFIGURATION


@dataclass(frozen=True)
class CalendarFile:
    """A parsed iCalendar file of the configuration."""

    name: str
    path: Path
    calendar: icalendar.Calendar

    def days(self, first: date, last: date) -> dict[date, str]:
        """Each date from `first` to `last` an event covers, with the event's name (several: joined)."""
        return _calendar_days(self, first, last)


def load_calendar(name: str, path: Path, *, around: int) -> CalendarFile:
    """Read and check one calendar file; `around` is the year its check expands recurrences for."""
    where = f"calendar {name} ({path})"
    try:
        size = path.stat().st_size
        if size > MAX_CALENDAR_BYTES:
            raise CalendarError(
                f"{where}: {size} bytes is more than a team calendar holds ({MAX_CALENDAR_BYTES} at most): "
                "export only the calendar of freezes and release days"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise CalendarError(f"{where}: cannot read the file ({exc.strerror or exc})") from None
    try:
        parsed = icalendar.Calendar.from_ical(raw)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise CalendarError(
            f"{where}: not an iCalendar file ({_first_line(exc)}): export it as .ics (BEGIN:VCALENDAR … "
            "END:VCALENDAR)"
        ) from None
    if not isinstance(parsed, icalendar.Calendar) or parsed.name != "VCALENDAR":
        raise CalendarError(f"{where}: not an iCalendar file: it must start with BEGIN:VCALENDAR")
    for event in parsed.walk("VEVENT"):
        if event.get("DTSTART") is None:
            summary = clean_name(str(event.get("SUMMARY", "") or ""))
            raise CalendarError(f'{where}: event "{summary}" has no DTSTART: every event needs its date')
    found = CalendarFile(name, path, parsed)
    found.days(date(around - YEARS_BEFORE, 1, 1), date(around + YEARS_AFTER, 12, 31))  # raises if unusable
    return found


class Calendars:
    """Resolves a schedule's days-off rule into dated values; checks a rule before it is saved."""

    def __init__(self, files: Mapping[str, CalendarFile] | None = None) -> None:
        self.files = dict(files or {})

    def check(self, rule: DaysOffRule) -> str:
        """Why the rule cannot be followed ("" when it can): an unknown country, region or calendar."""
        if rule.holidays:
            problem = region_problem(rule.holidays)
            if problem:
                return problem
        if rule.calendar and rule.calendar not in self.files:
            known = ", ".join(sorted(self.files)) or "none configured"
            return (
                f'unknown calendar "{rule.calendar}" (calendars: {known}): add it to the configuration '
                "under calendars: (name: path to an .ics file) and restart, or leave calendar= out"
            )
        return ""

    def days_off(self, rule: DaysOffRule, *, around: int) -> tuple[DayOff, ...]:
        """The rule's days off from January of `around` - 1 to December of `around` + 11."""
        if not rule:
            return ()
        return _resolved(self, rule, around)


@functools.lru_cache(maxsize=256)
def _resolved(calendars: Calendars, rule: DaysOffRule, around: int) -> tuple[DayOff, ...]:
    first, last = date(around - YEARS_BEFORE, 1, 1), date(around + YEARS_AFTER, 12, 31)
    found: list[DayOff] = []
    if rule.holidays and not region_problem(rule.holidays):
        country, subdiv = parse_region(rule.holidays)
        for day, name in _public_holidays(country, subdiv, first.year, last.year):
            found.append(DayOff(day, name, rule.holidays, rule.action))
    calendar = calendars.files.get(rule.calendar) if rule.calendar else None
    if calendar is not None:
        source = f"calendar {calendar.name}"
        found += [DayOff(day, name, source, rule.action) for day, name in calendar.days(first, last).items()]
    return tuple(sorted(found, key=lambda d: (d.day, d.source)))


def region_problem(region: str) -> str:
    """Why the `holidays` library has no such country or region ("" when it has)."""
    country, subdiv = parse_region(region)
    supported = _supported()
    if country not in supported:
        close = difflib.get_close_matches(country, list(supported), n=1)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        return (
            f'unknown country "{country}" for holidays{hint}: use an ISO 3166-1 code the holidays library '
            'knows, e.g. "DE", "US", "GB"'
        )
    regions = supported[country]
    if subdiv and _subdivision(country, subdiv) is None:
        listed = ", ".join(regions[:40]) + (" …" if len(regions) > 40 else "")
        if not regions:
            return f'{country} has no regions for holidays: give the country alone, e.g. "{country}"'
        return (
            f'unknown region "{subdiv}" of {country} for holidays: use one of {listed}, '
            f'e.g. "{format_region(country, regions[0])}"'
        )
    return ""


def _subdivision(country: str, subdiv: str) -> str | None:
    """The library's spelling of a region ("Augsburg" for "AUGSBURG"), None when it has none such."""
    return next((s for s in _supported().get(country, []) if s.upper() == subdiv.upper()), None)


@functools.cache
def _supported() -> dict[str, list[str]]:
    return {str(k): [str(s) for s in v] for k, v in holiday_library.list_supported_countries().items()}


@functools.lru_cache(maxsize=64)
def _public_holidays(country: str, subdiv: str, first: int, last: int) -> tuple[tuple[date, str], ...]:
    region = _subdivision(country, subdiv) if subdiv else None
    entity = holiday_library.country_holidays(country, subdiv=region)
    language = _LANGUAGE if _LANGUAGE in (getattr(entity, "supported_languages", ()) or ()) else None
    found = holiday_library.country_holidays(
        country, subdiv=region, years=range(first, last + 1), language=language
    )
    return tuple(sorted((day, clean_name(str(name))) for day, name in found.items()))


# --- iCalendar ----------------------------------------------------------------------------------------


def _calendar_days(calendar: CalendarFile, first: date, last: date) -> dict[date, str]:
    where = f"calendar {calendar.name} ({calendar.path})"
    days: dict[date, list[str]] = {}
    try:
        # Lazily, in start order: a rule that repeats every minute is refused after the cap, never
        # expanded for the whole span first.
        events: Iterable[Any] = recurring_ical_events.of(calendar.calendar).after(first)
        for count, event in enumerate(events):
            if count >= MAX_CALENDAR_DAYS:
                raise CalendarError(
                    f"{where}: its events repeat more than {MAX_CALENDAR_DAYS} times in the years "
                    "scalebot looks at: check the RRULEs (a FREQ=HOURLY or a missing UNTIL?)"
                )
            dates = _event_dates(event, where)
            if dates[0] > last:
                break
            name = clean_name(str(event.get("SUMMARY", "") or ""))
            for day in dates:
                if first <= day <= last:
                    days.setdefault(day, [])
                    if name not in days[day]:
                        days[day].append(name)
    except CalendarError:
        raise
    except Exception as exc:  # the libraries raise many kinds for malformed dates and rules
        raise CalendarError(
            f"{where}: an event cannot be read ({_first_line(exc)}): fix or remove it"
        ) from None
    total = sum(1 for _ in days)
    if total > MAX_CALENDAR_DAYS:
        raise CalendarError(f"{where}: covers more than {MAX_CALENDAR_DAYS} days: check its events")
    return {day: clean_name(" / ".join(names)) for day, names in sorted(days.items())}


def _event_dates(event: Any, where: str) -> list[date]:
    start = event.get("DTSTART")
    if start is None:
        raise CalendarError(f"{where}: an event has no DTSTART: every event needs its date")
    begin = start.dt
    end_prop = event.get("DTEND")
    end: date | datetime
    if end_prop is not None:
        end = end_prop.dt
    elif event.get("DURATION") is not None:
        end = begin + event.get("DURATION").dt
    else:
        end = begin if isinstance(begin, datetime) else begin + timedelta(days=1)
    if isinstance(begin, datetime):
        first_day = begin.date()
        end_dt = end if isinstance(end, datetime) else datetime.combine(end, begin.timetz())
        last_day = (end_dt - timedelta(microseconds=1)).date() if end_dt > begin else first_day
    else:
        first_day = begin
        end_day = end.date() if isinstance(end, datetime) else end
        last_day = end_day - timedelta(days=1) if end_day > begin else begin
    span = (last_day - first_day).days + 1
    if span > MAX_EVENT_DAYS:
        name = clean_name(str(event.get("SUMMARY", "") or ""))
        raise CalendarError(
            f'{where}: event "{name}" lasts {span} days (from {first_day}): check its DTEND '
            f"(at most {MAX_EVENT_DAYS} days)"
        )
    return [first_day + timedelta(days=i) for i in range(span)]


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"

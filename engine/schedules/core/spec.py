"""Schedules: parse and validate them, and the values the schedule arithmetic works on.

Owns the schedule value (`ScheduleSpec`), its occurrences (`Occurrence`, with the idempotency key),
one-occurrence overrides (`Override`) and the missed-run verdict (`MissedDecision`) as values, the
parsing and validation of what people type, and how an instant or a span is described. When the
sleeps and wakes happen is `engine.schedules.core.recurrence`; what overrides, missed runs and manual
wakes change is `engine.schedules.core.one_off`. The bot layer stores schedules, overrides and done
keys in SQLite and uses APScheduler only as a timer that wakes it at the instants computed there.
It stays one module (a little over 600 lines): the values, their parser and their validation are one
language, and each parse error names the value's own field and example.

Pure: stdlib only (zoneinfo reads the time-zone database), no other I/O, no clock. Every instant comes
in as an argument (`after=`, `now=`) and every instant going out is an aware UTC `datetime`.

Rules
- Expressions are "<days> <H:MM>": "Mon-Fri 20:00", "Fri 19:00", "Sat,Sun 09:30", "daily 02:30" (or
  "* 02:30"), "Mon-Sun 7:00". Ranges wrap ("Fri-Mon" is Fri, Sat, Sun, Mon). Times are 24-hour.
- Zones are IANA names only: a name must contain "/" ("Europe/Berlin") or be "UTC". Abbreviations
  such as CET, PST or EST are refused even though zoneinfo loads some of them: they name no place's
  DST rules. Schedules store the zone by name.
- The idempotency key of an occurrence is "<schedule>:<local date>:<action>".
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal, NotRequired, TypedDict, TypeVar
from zoneinfo import ZoneInfo, available_timezones

from engine.domain.errors import Category, ScalebotError
from engine.schedules.core.days_off import DayOff, DaysOffError, DaysOffRule, parse_rule

NO_DAYS_OFF = DaysOffRule()

Action = Literal["sleep", "wake"]
OverrideKind = Literal["postpone", "skip", "run_now"]
Verdict = Literal["run", "run_late", "announce_missed", "noop"]
State = Literal["asleep", "awake"]
_T = TypeVar("_T")

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
ALL_DAYS = frozenset(range(7))

_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_LOOKUP = {name.lower(): i for i, name in enumerate(DAY_NAMES)} | {
    n: i for i, n in enumerate(_FULL_NAMES)
}
OPPOSITE_ACTION: dict[Action, Action] = {"sleep": "wake", "wake": "sleep"}
_MINUTES_PER_DAY = 24 * 60
_MINUTES_PER_WEEK = 7 * _MINUTES_PER_DAY
_SHOWN_CHARS = 40

_TIME = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_SEPARATOR_SPACES = re.compile(r"\s*([,-])\s*(?=[A-Za-z*])")
_LEAD = re.compile(r"(?:([0-9]{1,3})h)?(?:([0-9]{1,4})m(?:in)?)?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")

EXAMPLE_TIME = '"Mon-Fri 20:00"'
EXAMPLE_ZONE = '"Europe/Berlin" or "UTC"'
EXAMPLE_LEADS = '"60m,10m"'
EXAMPLE_DATE = '"2026-12-24"'

# Common abbreviations and the IANA zone a user of them most likely means (a hint, never applied).
_ABBREVIATIONS = {
    "CET": "Europe/Berlin",
    "CEST": "Europe/Berlin",
    "MET": "Europe/Berlin",
    "MEZ": "Europe/Berlin",
    "WET": "Europe/Lisbon",
    "EET": "Europe/Athens",
    "BST": "Europe/London",
    "GMT": "Europe/London",
    "EST": "America/New_York",
    "EDT": "America/New_York",
    "EST5EDT": "America/New_York",
    "CST": "America/Chicago",
    "CDT": "America/Chicago",
    "MST": "America/Denver",
    "MDT": "America/Denver",
    "PST": "America/Los_Angeles",
    "PDT": "America/Los_Angeles",
    "PST8PDT": "America/Los_Angeles",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "AEST": "Australia/Sydney",
    "AEDT": "Australia/Sydney",
    "NZST": "Pacific/Auckland",
}
_UTC_SPELLINGS = frozenset({"utc", "z", "zulu", "universal", "uct", "gmt0", "gmt+0", "gmt-0", "etc/utc"})


SpecField = Literal[
    "name", "cluster", "sleep", "wake", "tz", "lead", "except", "holidays", "channel", "target", "approval"
]
"""The part of a schedule a refusal is about (a form shows the error at that field)."""


class ScheduleError(ScalebotError, ValueError):
    """Bad schedule input or request; the message names the bad part and shows an accepted example,
    and `field` says which part of the schedule it is about (None: the request, not a field)."""

    category = Category.USAGE

    def __init__(self, message: str, field: SpecField | None = None) -> None:
        super().__init__(message)
        self.field: SpecField | None = field


@contextmanager
def _about(field: SpecField) -> Iterator[None]:
    """Errors raised inside are about `field` (unless they already name another)."""
    try:
        yield
    except ScheduleError as exc:
        exc.field = exc.field or field
        raise


# --- values -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeeklyTime:
    """A wall-clock time on some local weekdays (0 = Monday)."""

    days: frozenset[int]
    hour: int
    minute: int

    def __str__(self) -> str:
        return format_weekly(self)


@dataclass(frozen=True)
class Window:
    """The parsed sleep/wake pair and zone of a schedule (`parse_window`)."""

    sleep: WeeklyTime
    wake: WeeklyTime | None
    tz: str


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as the engine needs it; the bot layer adds target, channel, approval mode, paused."""

    name: str
    cluster: str
    sleep: WeeklyTime
    wake: WeeklyTime | None
    tz: str
    lead_times: tuple[timedelta, ...] = ()
    exceptions: frozenset[date] = frozenset()
    days_off_rule: DaysOffRule = NO_DAYS_OFF
    """Where its days off come from and what it does on them (the service resolves them)."""
    days_off: tuple[DayOff, ...] = field(default=(), compare=False)
    """The rule's days off, resolved for the years around the schedule's activity: values, so
    nothing here reads a calendar."""

    @functools.cached_property
    def _days_off_by_date(self) -> dict[date, tuple[DayOff, ...]]:
        by_date: dict[date, list[DayOff]] = {}
        for day_off in self.days_off:
            by_date.setdefault(day_off.day, []).append(day_off)
        return {day: tuple(found) for day, found in by_date.items()}

    def day_off(self, day: date, action: Action) -> DayOff | None:
        """The day off that suppresses `action` on local date `day`, if any."""
        return next((d for d in self._days_off_by_date.get(day, ()) if d.skips(action)), None)


@dataclass(frozen=True)
class Occurrence:
    """One scheduled sleep or wake: the local date it belongs to and its UTC instant."""

    schedule: str
    action: Action
    local_date: date
    at: datetime

    @property
    def key(self) -> str:
        """Idempotency key: at most one run per schedule, local date and action."""
        return f"{self.schedule}:{self.local_date.isoformat()}:{self.action}"


@dataclass(frozen=True)
class Override:
    """A human decision about one occurrence (by key). `until` is the new instant for a postpone and
    the instant a human asked for "run now"; a skip has none. `note` explains the decision."""

    key: str
    kind: OverrideKind
    until: datetime | None
    by: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("postpone", "skip", "run_now"):
            raise ScheduleError(f'unknown override kind "{_shown(self.kind)}": use postpone, skip or run_now')
        if self.kind == "skip" and self.until is not None:
            raise ScheduleError("a skip override has no time: pass until=None")
        if self.kind != "skip" and (self.until is None or self.until.utcoffset() is None):
            raise ScheduleError(f"a {self.kind} override needs a timezone-aware until=, e.g. 21:00 UTC")


@dataclass(frozen=True)
class MissedDecision:
    """What to do about one due occurrence found at start-up or at a fire."""

    occurrence: Occurrence
    verdict: Verdict
    late_by: timedelta
    reason: str


# --- parsing ------------------------------------------------------------------------------------------


def parse_weekly(text: str) -> WeeklyTime:
    """Parse "<days> <H:MM>": "Mon-Fri 20:00", "Fri-Mon 07:00", "Sat,Sun 09:30", "daily 02:30"."""
    parts = _SEPARATOR_SPACES.sub(r"\1", text.strip()).split()
    if not parts:
        raise ScheduleError(f"empty schedule time: write days and a time, e.g. {EXAMPLE_TIME}")
    if len(parts) == 1:
        if _TIME.fullmatch(parts[0]):
            raise ScheduleError(
                f'missing days before "{parts[0]}": e.g. "daily {parts[0]}" or "Mon-Fri {parts[0]}"'
            )
        raise ScheduleError(f'missing time after "{_shown(parts[0])}": add H:MM, e.g. {EXAMPLE_TIME}')
    if len(parts) > 2:
        extra = _shown(" ".join(parts[2:]))
        raise ScheduleError(
            f'unexpected "{extra}" in "{_shown(text)}": write days then one time, e.g. {EXAMPLE_TIME}'
        )
    hour, minute = _parse_clock(parts[1])
    return WeeklyTime(_parse_days(parts[0]), hour, minute)


def format_weekly(weekly: WeeklyTime) -> str:
    """The canonical text of a weekly time; `parse_weekly(format_weekly(w)) == w`."""
    return f"{format_days(weekly.days)} {weekly.hour:02d}:{weekly.minute:02d}"


def format_days(days: Set[int]) -> str:
    """ "daily", "Mon-Fri", "Fri-Mon", "Sat,Sun", "Mon,Wed": runs of three or more become ranges."""
    if set(days) >= ALL_DAYS:
        return "daily"
    start = (max(ALL_DAYS - set(days)) + 1) % 7  # begin after a missing day so no run is cut in two
    runs: list[list[int]] = []
    for day in ((start + i) % 7 for i in range(7)):
        if day not in days:
            continue
        if runs and (runs[-1][-1] + 1) % 7 == day:
            runs[-1].append(day)
        else:
            runs.append([day])
    return ",".join(_format_run(run) for run in runs)


def parse_zone(name: str) -> ZoneInfo:
    """An IANA zone by name ("Europe/Berlin", "UTC"); abbreviations and unknown names are refused."""
    key = name.strip()
    if not key:
        raise ScheduleError(f"missing time zone: give an IANA name, e.g. {EXAMPLE_ZONE}")
    if key != "UTC" and "/" not in key:
        raise ScheduleError(_not_iana_message(key))
    if key not in _known_zones():
        raise ScheduleError(
            f'unknown time zone "{_shown(key)}"{_zone_hint(key)}: use an IANA name, e.g. {EXAMPLE_ZONE}'
        )
    return ZoneInfo(key)


def parse_lead_times(text: str) -> tuple[timedelta, ...]:
    """Announcement lead times, "60m,10m" or "1h,10m"; longest first. Empty text means none."""
    if not text.strip():
        return ()
    leads: list[timedelta] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ScheduleError(
                f'empty lead time in "{_shown(text)}": separate them with one comma, e.g. {EXAMPLE_LEADS}'
            )
        lead = _parse_lead(part)
        if lead in leads:
            raise ScheduleError(f'lead time "{part}" is given twice: list each once, e.g. {EXAMPLE_LEADS}')
        leads.append(lead)
    return tuple(sorted(leads, reverse=True))


def parse_date(text: str) -> date:
    """A local date in ISO form, "2026-12-24"."""
    value = text.strip()
    match = _DATE.fullmatch(value)
    if match is None:
        raise ScheduleError(f'invalid date "{_shown(value)}": use YYYY-MM-DD, e.g. {EXAMPLE_DATE}')
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError as exc:
        raise ScheduleError(f'invalid date "{value}": {exc}; use YYYY-MM-DD, e.g. {EXAMPLE_DATE}') from exc


def parse_dates(text: str) -> frozenset[date]:
    """Exception dates separated by commas or spaces, "2026-12-24, 2026-12-31"; empty means none."""
    return frozenset(parse_date(part) for part in re.split(r"[,\s]+", text.strip()) if part)


def parse_window(*, sleep: str, wake: str | None, tz: str) -> Window:
    """Sleep and wake expressions in one zone; a blank or missing wake means "sleep only"."""
    with _about("sleep"):
        sleep_time = _labelled("sleep time", parse_weekly, sleep)
    with _about("wake"):
        wake_time = None if wake is None or not wake.strip() else _labelled("wake time", parse_weekly, wake)
    with _about("tz"):
        zone = _labelled("time zone", parse_zone, tz)
    with _about("wake"):
        _check_wake(sleep_time, wake_time)
    return Window(sleep_time, wake_time, zone.key)


class SpecText(TypedDict):
    """A schedule's definition as people type it: the keyword arguments of `parse_spec`, which
    `Schedules.add` takes as they are (so a new schedule option is declared here and in
    `parse_spec`, and passes through the service untouched). An option is NotRequired: "" (unset)
    when not given."""

    name: str
    cluster: str
    sleep: str
    wake: str | None
    tz: str
    lead_times: NotRequired[str]
    exceptions: NotRequired[str]
    holidays: NotRequired[str]
    calendar: NotRequired[str]
    on_holiday: NotRequired[str]


def parse_spec(
    *,
    name: str,
    cluster: str,
    sleep: str,
    wake: str | None,
    tz: str,
    lead_times: str = "",
    exceptions: str = "",
    holidays: str = "",
    calendar: str = "",
    on_holiday: str = "",
) -> ScheduleSpec:
    """Parse every field of a schedule and validate the whole; raises ScheduleError on the first problem.
    `holidays`, `calendar` and `on_holiday` are checked for their form only: whether the country,
    region or calendar exists is the service's check (`engine.schedules.calendars`)."""
    window = parse_window(sleep=sleep, wake=wake, tz=tz)
    with _about("lead"):
        leads = _labelled("lead times", parse_lead_times, lead_times)
    with _about("except"):
        dates = _labelled("exception dates", parse_dates, exceptions)
    try:
        rule = parse_rule(holidays=holidays, calendar=calendar, action=on_holiday)
    except DaysOffError as exc:
        raise ScheduleError(str(exc), "holidays") from None
    spec = ScheduleSpec(
        name=name,
        cluster=cluster,
        sleep=window.sleep,
        wake=window.wake,
        tz=window.tz,
        lead_times=leads,
        exceptions=dates,
        days_off_rule=rule,
    )
    validate_spec(spec)
    return spec


# --- validation ---------------------------------------------------------------------------------------


def validate_spec(spec: ScheduleSpec) -> None:
    """Raise ScheduleError for a schedule that must not be saved.

    Checks names, day sets (non-empty, 0-6), hours and minutes, the zone, a wake that collides with
    a sleep (same day and time: the cluster cannot sleep and wake at once), and announcement lead
    times longer than the shortest gap between two consecutive events. That gap is measured in
    wall-clock time over a representative fortnight, between any two consecutive events (sleep→wake,
    wake→sleep, or two of a kind), so an announcement never precedes the event before its own.
    A wake earlier than the sleep on the same days is accepted: it is an overnight window
    ("Mon-Fri 20:00" → "Mon-Fri 07:00") or a week-long one ("Wed 18:00" → "Wed 09:00").
    """
    with _about("name"):
        _check_name("schedule name", spec.name)
    with _about("cluster"):
        _check_name("cluster", spec.cluster)
    with _about("sleep"):
        _check_weekly("sleep time", spec.sleep)
    with _about("wake"):
        if spec.wake is not None:
            _check_weekly("wake time", spec.wake)
    with _about("tz"):
        _labelled("time zone", parse_zone, spec.tz)
    with _about("wake"):
        _check_wake(spec.sleep, spec.wake)
    with _about("lead"):
        _check_lead_times(spec)


def _check_name(label: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ScheduleError(
            f'invalid {label} "{_shown(value)}": use up to 63 letters, digits, ".", "_" or "-", e.g. "dev-eu"'
        )


def _check_weekly(label: str, weekly: WeeklyTime) -> None:
    if not weekly.days:
        raise ScheduleError(f"{label} has no days: give at least one day, e.g. {EXAMPLE_TIME}")
    if not weekly.days <= ALL_DAYS:
        raise ScheduleError(f"{label} has days {sorted(weekly.days)}: days are 0 (Mon) to 6 (Sun)")
    if not (0 <= weekly.hour <= 23 and 0 <= weekly.minute <= 59):
        raise ScheduleError(
            f"{label} {weekly.hour}:{weekly.minute:02d} is not a time of day: use 00:00 to 23:59"
        )


def _check_wake(sleep: WeeklyTime, wake: WeeklyTime | None) -> None:
    if wake is None or (wake.hour, wake.minute) != (sleep.hour, sleep.minute):
        return
    shared = sleep.days & wake.days
    if shared:
        raise ScheduleError(
            f'wake "{wake}" is at the same time as sleep "{sleep}" on {format_days(shared)}: the cluster '
            'cannot sleep and wake at once; e.g. sleep "Mon-Fri 20:00" with wake "Mon-Fri 07:00"'
        )


def _check_lead_times(spec: ScheduleSpec) -> None:
    if not spec.lead_times:
        return
    gap, between = _shortest_gap(spec)
    longest = max(spec.lead_times)
    if longest > gap:
        raise ScheduleError(
            f"lead time {_lead_text(longest)} is longer than the shortest gap between two events "
            f"({span_text(gap)}: {between}): shorten it to at most {_lead_text(gap)}, e.g. {EXAMPLE_LEADS}"
        )


def _shortest_gap(spec: ScheduleSpec) -> tuple[timedelta, str]:
    """Shortest wall-clock gap between consecutive events over a fortnight (cyclic), and its events."""
    events = sorted(
        (week * _MINUTES_PER_WEEK + day * _MINUTES_PER_DAY + weekly.hour * 60 + weekly.minute, action)
        for action, weekly in weekly_timings(spec)
        for day in weekly.days
        for week in (0, 1)
    )
    wrapped = [*events[1:], (events[0][0] + 2 * _MINUTES_PER_WEEK, events[0][1])]
    gap, first, second = min((b[0] - a[0], a, b) for a, b in zip(events, wrapped, strict=True))
    return timedelta(minutes=gap), f"{_event_text(*first)} → {_event_text(*second)}"


def _event_text(minute_of_fortnight: int, action: Action) -> str:
    day, minute = divmod(minute_of_fortnight % _MINUTES_PER_WEEK, _MINUTES_PER_DAY)
    return f"{action} {DAY_NAMES[day]} {minute // 60:02d}:{minute % 60:02d}"


def weekly_timings(spec: ScheduleSpec) -> list[tuple[Action, WeeklyTime]]:
    timings: list[tuple[Action, WeeklyTime]] = [("sleep", spec.sleep)]
    if spec.wake is not None:
        timings.append(("wake", spec.wake))
    return timings


# --- display ------------------------------------------------------------------------------------------


def describe(occurrence: Occurrence | datetime, tz: str | tzinfo) -> str:
    """Short local text, "Fri 19:00 CET" (the abbreviation is for display only)."""
    at = occurrence.at if isinstance(occurrence, Occurrence) else occurrence
    zone = parse_zone(tz) if isinstance(tz, str) else tz
    local = aware_utc(at, "at").astimezone(zone)
    return f"{DAY_NAMES[local.weekday()]} {local:%H:%M} {local.tzname() or ''}".rstrip()


def in_words(delta: timedelta) -> str:
    """ "in 60 min", "in 2 h 30 min", "in 2 days 11 h", "5 min ago", or "now" (under half a minute)."""
    if abs(delta) < timedelta(seconds=30):
        return "now"
    return f"in {span_text(delta)}" if delta > timedelta(0) else f"{span_text(-delta)} ago"


def span_text(delta: timedelta) -> str:
    minutes = round(abs(delta).total_seconds() / 60)
    sign = "-" if delta < timedelta(0) and minutes else ""
    if minutes < 120:
        return f"{sign}{minutes} min"
    if minutes < 48 * 60:
        hours, rest = divmod(minutes, 60)
        return f"{sign}{hours} h" + (f" {rest} min" if rest else "")
    days, rest = divmod(minutes, _MINUTES_PER_DAY)
    hours = rest // 60
    return f"{sign}{days} days" + (f" {hours} h" if hours else "")


# --- parsing helpers ----------------------------------------------------------------------------------


def _parse_days(token: str) -> frozenset[int]:
    if token.lower() in ("daily", "*"):
        return ALL_DAYS
    days: set[int] = set()
    for part in token.split(","):
        days |= _parse_day_part(part, token)
    return frozenset(days)


def _parse_day_part(part: str, token: str) -> frozenset[int]:
    if not part:
        raise ScheduleError(
            f'empty day in "{_shown(token)}": separate days with one comma, e.g. "Sat,Sun 09:30"'
        )
    ends = part.split("-")
    if len(ends) > 2 or not all(ends):
        raise ScheduleError(
            f'invalid day range "{_shown(part)}": write two days, e.g. "Mon-Fri" or "Fri-Mon"'
        )
    first, last = _parse_day(ends[0]), _parse_day(ends[-1])
    if len(ends) == 1:
        return frozenset({first})
    if first == last:
        raise ScheduleError(
            f'day range "{_shown(part)}" starts and ends on one day: write "{ends[0]}" or "daily"'
        )
    return frozenset((first + i) % 7 for i in range((last - first) % 7 + 1))


def _parse_day(name: str) -> int:
    day = _DAY_LOOKUP.get(name.lower())
    if day is None:
        raise ScheduleError(
            f'unknown day "{_shown(name)}": use Mon, Tue, Wed, Thu, Fri, Sat, Sun or "daily", '
            f"e.g. {EXAMPLE_TIME}"
        )
    return day


def _parse_clock(token: str) -> tuple[int, int]:
    match = _TIME.fullmatch(token)
    if match is None:
        raise ScheduleError(f'invalid time "{_shown(token)}": use 24-hour H:MM, e.g. "20:00" or "7:30"')
    hour, minute = int(match[1]), int(match[2])
    if hour > 23:
        raise ScheduleError(
            f'hour {hour} in "{token}" is out of range 0-23: e.g. "23:30"; midnight is "00:00"'
        )
    if minute > 59:
        raise ScheduleError(f'minute {minute} in "{token}" is out of range 00-59: e.g. "20:45"')
    return hour, minute


def _format_run(run: list[int]) -> str:
    if len(run) >= 3:
        return f"{DAY_NAMES[run[0]]}-{DAY_NAMES[run[-1]]}"
    return ",".join(DAY_NAMES[day] for day in run)


def _parse_lead(part: str) -> timedelta:
    match = _LEAD.fullmatch(part.lower())
    if match is None or not (match[1] or match[2]):
        hint = f' (a bare number has no unit: write "{part}m")' if re.fullmatch(r"[0-9]+", part) else ""
        raise ScheduleError(
            f'invalid lead time "{_shown(part)}"{hint}: use minutes or hours like "60m", "1h" or "1h30m", '
            f"e.g. {EXAMPLE_LEADS}"
        )
    lead = timedelta(hours=int(match[1] or 0), minutes=int(match[2] or 0))
    if not lead:
        raise ScheduleError(f'lead time "{part}" is zero: an announcement needs a positive lead, e.g. "10m"')
    return lead


def _lead_text(lead: timedelta) -> str:
    minutes = int(lead.total_seconds() // 60)
    if minutes < 120:
        return f"{minutes}m"
    return f"{minutes // 60}h" + (f"{minutes % 60:02d}m" if minutes % 60 else "")


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


@functools.cache
def _zones_by_lower_name() -> dict[str, str]:
    iana = sorted(zone for zone in _known_zones() if "/" in zone)
    return {zone.rsplit("/", 1)[-1].lower(): zone for zone in iana} | {zone.lower(): zone for zone in iana}


def _not_iana_message(key: str) -> str:
    if key.lower() in _UTC_SPELLINGS:
        return f'time zone "{_shown(key)}": write "UTC" for coordinated universal time'
    suggestion = _ABBREVIATIONS.get(key.upper()) or _zones_by_lower_name().get(key.lower())
    hint = f'; for {_shown(key)} use e.g. "{suggestion}"' if suggestion and "/" in suggestion else ""
    return (
        f'time zone "{_shown(key)}" is not an IANA zone name: a name contains "/" or is "UTC"; abbreviations '
        f"such as CET, PST or EST follow no place's DST rules{hint} (e.g. {EXAMPLE_ZONE})"
    )


def _zone_hint(key: str) -> str:
    if len(key) > 64:
        return ""
    exact = _zones_by_lower_name().get(key.lower())
    iana = sorted(zone for zone in _known_zones() if "/" in zone)
    close = [exact] if exact else difflib.get_close_matches(key, iana, n=1, cutoff=0.75)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _labelled(label: str, parse: Callable[[str], _T], text: str) -> _T:
    try:
        return parse(text)
    except ScheduleError as exc:
        raise ScheduleError(f"{label}: {exc}", exc.field) from None


def _shown(text: str) -> str:
    """User text quoted in a message: one line, at most 40 characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN_CHARS else flat[: _SHOWN_CHARS - 1] + "…"


def aware_utc(instant: datetime, name: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ScheduleError(f"{name} must be timezone-aware, e.g. datetime(2026, 3, 27, 19, 0, tzinfo=UTC)")
    return instant.astimezone(UTC)

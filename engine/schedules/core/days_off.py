"""Days off: public holidays and calendar days a schedule follows, as values.

A schedule names where its days off come from (`DaysOffRule`: a country and region for the
`holidays` library, a calendar file of the configuration by name) and what it does on them (stay
asleep, skip the wake, skip the sleep). The adapter (`engine.schedules.calendars`) turns a rule into
dated `DayOff` values; the arithmetic (`engine.schedules.core.recurrence`) only ever sees those values, so the
schedule's arithmetic stays pure and testable on plain data.

Names come from outside (a library's translations, anyone who can edit the team's calendar): they
are cleaned here (one line, printable, at most 80 characters) and every renderer escapes them.

Pure: values and string functions only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Literal

from engine.domain.errors import Category, ScalebotError

DayOffAction = Literal["stay_asleep", "skip_wake", "skip_sleep"]
DAY_OFF_ACTIONS: tuple[DayOffAction, ...] = ("stay_asleep", "skip_wake", "skip_sleep")
ACTION_WORDS: dict[DayOffAction, str] = {
    "stay_asleep": "Stays asleep",
    "skip_wake": "No wake",
    "skip_sleep": "Stays awake",
}
"""How a day off is told: "Stays asleep: Whit Monday (DE-BY)"."""
ACTION_TEXT: dict[DayOffAction, str] = {
    "stay_asleep": "stay asleep",
    "skip_wake": "skip the wake",
    "skip_sleep": "skip the sleep",
}
EXAMPLE_REGION = '"DE-BY" (Germany, Bavaria) or "US"'
MAX_NAME = 80

_REGION = re.compile(r"([A-Za-z]{2,3})(?:-([A-Za-z0-9]{1,10}))?")
_CALENDAR_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ACTION_SPELLINGS: dict[str, DayOffAction] = {
    spelling: action
    for action in DAY_OFF_ACTIONS
    for spelling in (action, action.replace("_", "-"), action.replace("_", ""))
}


class DaysOffError(ScalebotError, ValueError):
    """A bad days-off setting; the message names it and shows an accepted example."""

    category = Category.USAGE


@dataclass(frozen=True, slots=True)
class DaysOffRule:
    """Where a schedule's days off come from and what it does on them (stored with the schedule)."""

    holidays: str = ""
    """ "DE-BY": a country (ISO 3166-1) and optionally its region, for the `holidays` library."""
    calendar: str = ""
    """The name of an iCalendar file in the configuration (`calendars:`)."""
    action: DayOffAction = "stay_asleep"

    def __bool__(self) -> bool:
        return bool(self.holidays or self.calendar)

    def describe(self) -> str:
        """ "holidays DE-BY and calendar releases: stay asleep"."""
        sources = [f"holidays {self.holidays}"] if self.holidays else []
        sources += [f"calendar {self.calendar}"] if self.calendar else []
        return f"{' and '.join(sources)}: {ACTION_TEXT[self.action]}" if sources else ""

    def to_json(self) -> dict[str, str]:
        return {"holidays": self.holidays, "calendar": self.calendar, "action": self.action}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> DaysOffRule:
        action = data.get("action", "stay_asleep")
        return cls(
            str(data.get("holidays", "")),
            str(data.get("calendar", "")),
            action if action in DAY_OFF_ACTIONS else "stay_asleep",
        )


@dataclass(frozen=True, slots=True)
class DayOff:
    """One local date a schedule treats differently, and why."""

    day: date
    name: str
    """ "Whit Monday", "Release weekend": cleaned (`clean_name`), still outside text."""
    source: str
    """ "DE-BY" or "calendar releases"."""
    action: DayOffAction

    def reason(self) -> str:
        """ "Stays asleep: Whit Monday (DE-BY)" (plain text: renderers escape it)."""
        return f"{ACTION_WORDS[self.action]}: {self.name} ({self.source})"

    def skips(self, event: str) -> bool:
        """Whether this day off suppresses the schedule's `event` ("sleep" or "wake") of its date."""
        if self.action == "stay_asleep":
            return True
        return event == ("wake" if self.action == "skip_wake" else "sleep")


def parse_region(text: str) -> tuple[str, str]:
    """ "DE-BY" → ("DE", "BY"), "us" → ("US", ""); whether the library knows it is the adapter's check."""
    value = text.strip()
    match = _REGION.fullmatch(value)
    if match is None:
        raise DaysOffError(
            f'holidays "{_shown(value)}": give a country code and optionally its region, '
            f"e.g. {EXAMPLE_REGION}"
        )
    return match[1].upper(), (match[2] or "").upper()


def format_region(country: str, subdiv: str) -> str:
    return f"{country}-{subdiv}" if subdiv else country


def parse_action(text: str) -> DayOffAction:
    """ "stay-asleep", "skip-wake", "skip-sleep" (underscores work too); empty means stay asleep."""
    value = text.strip().lower()
    if not value:
        return "stay_asleep"
    action = _ACTION_SPELLINGS.get(value)
    if action is None:
        raise DaysOffError(
            f'on_holiday "{_shown(value)}": use stay-asleep (no wake, no sleep that day), skip-wake or '
            "skip-sleep"
        )
    return action


def parse_calendar_name(text: str) -> str:
    value = text.strip()
    if value and not _CALENDAR_NAME.fullmatch(value):
        raise DaysOffError(
            f'calendar "{_shown(value)}": name a calendar of the configuration (calendars:), '
            'lowercase letters, digits, "-" or "_", e.g. "releases"'
        )
    return value


def parse_rule(*, holidays: str = "", calendar: str = "", action: str = "") -> DaysOffRule:
    """A schedule's days-off rule from its text fields; syntax only (the adapter knows what exists)."""
    region = format_region(*parse_region(holidays)) if holidays.strip() else ""
    return DaysOffRule(region, parse_calendar_name(calendar), parse_action(action))


def clean_name(text: str) -> str:
    """Outside text as one printable line of at most 80 characters (never empty)."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    if len(flat) > MAX_NAME:
        flat = flat[: MAX_NAME - 1] + "…"
    return flat or "(no name)"


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 40 else flat[:39] + "…"

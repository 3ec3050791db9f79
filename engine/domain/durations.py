"""Human durations as kubectl and Go write them: "90s", "10m", "1h30m", "2h", "500ms".

Every duration scalebot reads (CLI flags, the config file, Slack and console commands, schedule
lead times) goes through `parse_duration`. A number needs a unit, as in Go's time.ParseDuration
(kubectl refuses `--timeout=5`: "missing unit in duration"): a bare "5" is refused instead of
being read as 5 seconds, since "--graceful-window 5" meant 5 minutes to whoever typed it and
5 seconds to the bot. The one exception is "0", which Go and kubectl accept too: zero has no unit.

Pure. Errors name the bad text and show the accepted form; the caller prefixes the field.
"""

from __future__ import annotations

import re
from datetime import timedelta

from engine.domain.errors import Category, ScalebotError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ScalebotError, ValueError):
    category = Category.USAGE


class MissingUnitError(DurationError):
    """A number without a unit ("5"): the message asks which unit was meant."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration; "0" means zero, any other number without a unit is refused."""
    value = text.strip().lower()
    if re.fullmatch(r"0+", value):
        return timedelta(0)
    if re.fullmatch(r"\d+(\.\d+)?", value):
        raise MissingUnitError(f"a duration needs a unit — {value}s or {value}m?")
    pos, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(value) or not value:
        raise DurationError(f'invalid duration "{text}": use a number with a unit, e.g. 90s, 10m or 1h30m')
    return timedelta(seconds=total)


def format_duration(delta: timedelta) -> str:
    """Compact form for messages: "4m05s", "1h02m", "12s"."""
    seconds = round(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"

"""Human durations as kubectl and Go write them: "90s", "10m", "1h30m", "2h", "500ms".

Pure. Errors name the bad text and show the accepted form.
"""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration; a bare number means seconds, "0" means zero."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+", value):
        return timedelta(seconds=int(value))
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

"""Channels as people write them: Slack's link `<#C123|name>`, a bare ID `C123`, or `#name`.

Pure reading of text, shared by the settings (which keep a `#name` until Slack turns it into an ID)
and the Slack directory (which asks Slack for a name's ID); it sits in `bot.config`, the bottom
layer, because the settings read it. No lookups here: a name is only recognised as a name.
"""

from __future__ import annotations

import re

_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,30}")
_CHANNEL_LINK = re.compile(r"<#([CG][A-Z0-9]{1,30})(?:\|[^<>]*)?>")
_CHANNEL_NAME = re.compile(r"#([a-z0-9][a-z0-9_\-]{0,79})")
"""Slack channel names: lower case letters, digits, `-` and `_`, at most 80 characters."""


def channel_id(value: str) -> str | None:
    """The channel ID written in `value` (`C123` or Slack's link `<#C123|name>`), else None."""
    linked = _CHANNEL_LINK.fullmatch(value)
    if linked:
        return linked.group(1)
    return value if _CHANNEL_ID.fullmatch(value) else None


def channel_name(value: str) -> str | None:
    """The name in a `#name` reference (without the `#`), else None."""
    named = _CHANNEL_NAME.fullmatch(value)
    return named.group(1) if named else None

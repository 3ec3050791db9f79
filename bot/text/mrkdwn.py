"""Slack mrkdwn that text from outside cannot turn into markup.

Slack reads `&`, `<` and `>` as control characters in mrkdwn and in a message's fallback `text`
(https://docs.slack.dev/messaging/formatting-message-text, "Escaping text"): `<@U…>` notifies a
person, `<!subteam^S…>` a user group, `<!date^…^…^URL|x>` and `<URL|x>` are links. Names, reasons
and messages that come from a cluster, a user or a config are data, so they are escaped; the only
tokens a message carries are built here, from values scalebot owns (validated Slack IDs, integer
timestamps, its own date formats), and a date token never carries a link.

`Mrkdwn` marks text that is already safe: scalebot's own formatting with escaped data and tokens
from this module. Renderers escape every other `str` once (`escape` leaves `Mrkdwn` as it is). A
`str` operation on a `Mrkdwn` (concatenation, an f-string) gives a plain `str` again, which is
then escaped: losing the mark shows a token as text, it never makes outside text live.

Pure: string functions only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_USER_ID = re.compile(r"[UW][A-Z0-9]{1,20}")
_GROUP_ID = re.compile(r"S[A-Z0-9]{1,20}")
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,20}")
_DATE_FORMAT = re.compile(
    r"(?:\{(?:date_num|date|date_short|date_long|date_pretty|date_short_pretty|date_long_pretty"
    r"|time|time_secs|ago)\}|[ ,:.\-])+"
)
"""Slack's date tokens and separators: no `^` (a link would follow it), no `|`, `<` or `>`."""
_SLACK_URL = re.compile(r"https://[A-Za-z0-9.-]+\.slack\.com/[A-Za-z0-9/._?=&%-]*")
"""A permalink to a message, the only link scalebot makes (to its own threads)."""


class Mrkdwn(str):
    """Text safe to send as mrkdwn: scalebot's formatting, escaped data, tokens built here."""

    __slots__ = ()


def escape(text: str) -> Mrkdwn:
    """`&`, `<`, `>` as Slack's entities; text already marked safe is returned as it is (so
    nothing is escaped twice)."""
    if isinstance(text, Mrkdwn):
        return text
    return Mrkdwn(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def fmt(template: str, *args: object) -> Mrkdwn:
    """scalebot's own `template` ({} placeholders) with each argument escaped unless marked safe."""
    return Mrkdwn(template.format(*(escape(a if isinstance(a, str) else str(a)) for a in args)))


def join(separator: str, parts: Iterable[str]) -> Mrkdwn:
    """Parts joined by scalebot's `separator`, each escaped unless marked safe."""
    return Mrkdwn(separator.join(escape(part) for part in parts))


def is_user_id(value: str) -> bool:
    return _USER_ID.fullmatch(value) is not None


def user(user_id: str) -> Mrkdwn:
    """A mention of a Slack user; anything that is not a user ID is shown as text."""
    return Mrkdwn(f"<@{user_id}>") if is_user_id(user_id) else escape(user_id)


def group(group_id: str) -> Mrkdwn:
    """A mention of a user group (`<!subteam^S…>`), from the policy's group IDs."""
    return Mrkdwn(f"<!subteam^{group_id}>") if _GROUP_ID.fullmatch(group_id) else escape(group_id)


def channel(channel_id: str) -> Mrkdwn:
    return Mrkdwn(f"<#{channel_id}>") if _CHANNEL_ID.fullmatch(channel_id) else escape(channel_id)


def date(timestamp: int, date_format: str, fallback: str) -> Mrkdwn:
    """A time each reader sees in their own zone; no link, ever. `fallback` is what clients that
    cannot format it show (escaped)."""
    if type(timestamp) is not int:  # bool is an int too, and a str could smuggle a `^`
        raise TypeError(f"a Slack date needs an integer timestamp, not {timestamp!r}")
    if not _DATE_FORMAT.fullmatch(date_format):
        raise ValueError(f"not one of Slack's date formats: {date_format!r}")
    return Mrkdwn(f"<!date^{timestamp}^{date_format}|{escape(fallback)}>")


def link(url: str, label: str) -> Mrkdwn:
    """A link to a Slack permalink; any other URL is left out and the label shown as text."""
    if not _SLACK_URL.fullmatch(url):
        return escape(label)
    return Mrkdwn(f"<{url.replace('&', '&amp;')}|{escape(label)}>")

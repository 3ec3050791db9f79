"""Requests come from our workspace and our app: the team, enterprise and app IDs of a Slack
request checked against configuration, before any listener sees it.

A signed request proves it came from Slack for this app, not that the person is one of ours: in a
Slack Connect channel, users of other organisations can type `/scale` and click our buttons, and
their clicks carry their own team (`user.team_id`). Each ID the payload carries (the request's team,
the user's team, the enterprise, the app) must be in the allowed set. Unset allowed teams default
to the workspace the bot token belongs to (`auth.test`), so the check is on unless configured wider.

Pure: `origin_of(body)` reads the IDs, `refusal(origin, allowed)` decides; `bot.slack.app` applies them
as a Bolt middleware (HTTP and Socket Mode alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Origin:
    """Who a request says it comes from. Empty fields: the payload does not carry them."""

    teams: frozenset[str]
    """The request's team and, when given, the user's own team (differs in Slack Connect)."""
    enterprise: str
    app: str
    user: str
    channel: str


@dataclass(frozen=True, slots=True)
class AllowedOrigins:
    teams: frozenset[str]
    enterprises: frozenset[str] = frozenset()
    """Empty: any (or none)."""
    apps: frozenset[str] = frozenset()
    """Empty: any."""


def origin_of(body: Mapping[str, Any]) -> Origin:
    """The IDs of a slash command (form fields) or an interactive payload (nested objects)."""
    team, user, channel, enterprise = (
        body.get("team"),
        body.get("user"),
        body.get("channel"),
        body.get("enterprise"),
    )
    teams = {
        _text(body.get("team_id")),
        _text(body.get("user_team")),
        _text(team.get("id")) if isinstance(team, Mapping) else "",
        _text(user.get("team_id")) if isinstance(user, Mapping) else "",
    }
    return Origin(
        teams=frozenset(t for t in teams if t),
        enterprise=_text(body.get("enterprise_id"))
        or (_text(enterprise.get("id")) if isinstance(enterprise, Mapping) else ""),
        app=_text(body.get("api_app_id")),
        user=_text(body.get("user_id")) or (_text(user.get("id")) if isinstance(user, Mapping) else ""),
        channel=_text(body.get("channel_id"))
        or (_text(channel.get("id")) if isinstance(channel, Mapping) else ""),
    )


def refusal(origin: Origin, allowed: AllowedOrigins) -> str:
    """ "" when the request may go on; otherwise why not (for the log, the audit and the person)."""
    if not origin.teams:
        return "the request names no Slack workspace"
    foreign = sorted(origin.teams - allowed.teams)
    if foreign:
        return f"workspace {', '.join(foreign)} is not allowed to use this scalebot"
    if allowed.enterprises and origin.enterprise and origin.enterprise not in allowed.enterprises:
        return f"enterprise {origin.enterprise} is not allowed to use this scalebot"
    if allowed.apps and origin.app not in allowed.apps:
        return f"app {origin.app or '(none)'} is not this scalebot"
    return ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""

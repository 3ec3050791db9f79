"""Whether scalebot can post in a channel, asked before a request is accepted.

With only `chat:write`, Slack refuses posts to a channel the bot has not joined (`not_in_channel`):
an approval card would never appear while its request held its locks. `conversations.info` says
`is_member`; a public channel is also fine when the app has the opt-in `chat:write.public` scope
(read from the `x-oauth-scopes` header Slack sends with every Web API response). A channel the
bot is in is remembered for a while (Tier 3 allows ~50 calls a minute); a "no" is never cached,
so `/invite @scalebot` works at once. When Slack cannot say (the token lacks `channels:read` /
`groups:read`, Slack is unreachable), the answer is `Access.UNKNOWN`, never a refusal: the request
goes ahead, an operation that needs no approval waits for its card to be posted, and a refused
first post cancels the request (bot.slack.delivery.progress).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)

MEMBER_TTL_SECONDS = 300.0
_UNKNOWN_CHANNEL = frozenset({"channel_not_found"})


class Access(enum.Enum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"
    """Slack could not say (missing scope, unreachable): find out when the card is posted."""


class ConversationsApi(Protocol):
    def conversations_info(self, *, channel: str) -> Any: ...


class SlackChannels:
    def __init__(
        self,
        client: ConversationsApi,
        *,
        ttl: float = MEMBER_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._members: dict[str, float] = {}

    def can_post(self, channel: str) -> Access:
        now = self._clock()
        with self._lock:
            known = self._members.get(channel)
        if known is not None and now - known < self._ttl:
            return Access.YES
        try:
            response = self._client.conversations_info(channel=channel)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if error in _UNKNOWN_CHANNEL:
                return Access.NO  # a private channel the bot is not in looks exactly like this
            log.warning("cannot tell whether scalebot is in %s (%s); the card will say", channel, error)
            return Access.UNKNOWN
        except Exception:  # Slack unreachable: the post itself will retry and say
            log.warning("cannot tell whether scalebot is in %s; the card will say", channel, exc_info=True)
            return Access.UNKNOWN
        info = response.get("channel") or {}
        public = bool(info.get("is_channel")) and not info.get("is_private")
        if info.get("is_member") or (public and "chat:write.public" in _scopes(response)):
            with self._lock:
                self._members[channel] = now
            return Access.YES
        return Access.NO


def everywhere(channel: str) -> Access:
    """For wiring without Slack (the console): every channel can be posted to."""
    return Access.YES


def _scopes(response: Any) -> set[str]:
    headers = getattr(response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "x-oauth-scopes":
            raw = value[0] if isinstance(value, list | tuple) else value
            return {s.strip() for s in str(raw).split(",")}
    return set()

"""People by name and channels by `#name`, as Slack knows them: `users.info` and
`conversations.list`, each behind a small cache.

A name is what people read; an ID is what scalebot trusts. Names are shown only where a text
cannot mention the person (a preformatted history, a plain fallback), and a failed lookup shows
the ID, never an error. A `#name` a person types is turned into the channel's ID here before any
rule sees it, or refused: a rule never compares names.

Lookups run on the bot's executor (after Slack's ack), never on a listener thread.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from bot.config.channel_refs import channel_id, channel_name
from engine.domain.errors import Category, ScalebotError

log = logging.getLogger(__name__)

NAME_TTL_SECONDS = 3600.0
"""A person's name is read again after an hour (people rename themselves rarely)."""
NAME_CACHE_SIZE = 2000
"""Names kept at most; the least recently used go first."""
FAILED_TTL_SECONDS = 300.0
"""A person Slack does not know is asked about again after five minutes; when Slack itself fails
(unreachable, no `users:read`), nobody is looked up for that long: IDs are shown at once."""
PER_PERSON_ERRORS = frozenset({"user_not_found", "user_not_visible"})
"""users.info errors about the one person; any other failure is Slack's as a whole."""
CHANNEL_TTL_SECONDS = 300.0
"""The channel list is read again after five minutes, or sooner for a name it lacks..."""
CHANNEL_REREAD_SECONDS = 30.0
"""... but not within 30 s of the last read: names typed by anyone cannot drive conversations.list
(Tier 2, about 20 calls a minute) into Slack's rate limit."""
CHANNEL_PAGES = 50
"""`conversations.list` pages read at most (200 channels each)."""

_USER_ID = re.compile(r"[UW][A-Z0-9]{1,20}")
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,30}")

Names = Callable[[str], str]
"""A Slack user ID -> how to show that person in plain text (the ID when nobody can tell)."""


def no_names(user_id: str) -> str:
    return user_id


def display_name(user: Mapping[str, Any]) -> str:
    """The name Slack shows for a `users.info` user: display name, real name, then handle."""
    profile = user.get("profile")
    profile = profile if isinstance(profile, Mapping) else {}
    for candidate in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return " ".join(candidate.split())[:80]
    return ""


class UsersApi(Protocol):
    def users_info(self, *, user: str) -> Any: ...


class ChannelListApi(Protocol):
    def conversations_list(
        self, *, cursor: str | None = None, limit: int, types: str, exclude_archived: bool
    ) -> Any: ...


class PeopleNames:
    """`users.info` names, cached (bounded, with a TTL); the ID when Slack does not say."""

    def __init__(
        self,
        client: UsersApi,
        *,
        ttl: float = NAME_TTL_SECONDS,
        failed_ttl: float = FAILED_TTL_SECONDS,
        size: int = NAME_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client, self._ttl, self._failed_ttl, self._size, self._clock = (
            client,
            ttl,
            failed_ttl,
            size,
            clock,
        )
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """User ID -> (name, or "" when Slack did not say; until when it holds)."""
        self._silent_until = float("-inf")
        """Slack failed as a whole: until then nobody is looked up."""

    def __call__(self, user_id: str) -> str:
        if not _USER_ID.fullmatch(user_id):
            return user_id  # `cli:alice`, `schedule:nightly`, `scalebot`: not Slack users
        now = self._clock()
        with self._lock:
            cached = self._cache.get(user_id)
            if cached is not None and now < cached[1]:
                self._cache.move_to_end(user_id)
                return cached[0] or user_id
            if now < self._silent_until:
                return user_id
        name, until = "", now + self._failed_ttl
        try:
            found = self._client.users_info(user=user_id)["user"]
            name = display_name(found) if isinstance(found, Mapping) else ""
            until = now + self._ttl
        except Exception as exc:  # no users:read, unknown user, Slack unreachable: show the ID
            log.info("no name for %s (%s); showing the ID", user_id, exc)
            if _slack_error(exc) not in PER_PERSON_ERRORS:
                with self._lock:
                    self._silent_until = now + self._failed_ttl
                return user_id
        with self._lock:
            self._cache[user_id] = (name, until)
            self._cache.move_to_end(user_id)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return name or user_id


def _slack_error(exc: Exception) -> str:
    """Slack's error code of a refused call (`SlackApiError.response["error"]`), else ""."""
    response = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    return error if isinstance(error, str) else ""


class ChannelNotFoundError(ScalebotError, ValueError):
    """A `#name` scalebot could not turn into a channel ID (the message says what to do)."""

    category = Category.USAGE


class ChannelDirectory:
    """`#name` -> channel ID through `conversations.list` (public and private channels the app
    can see), read page by page and cached."""

    def __init__(
        self,
        client: ChannelListApi,
        *,
        ttl: float = CHANNEL_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client, self._ttl, self._clock = client, ttl, clock
        self._lock = threading.Lock()
        self._ids: dict[str, str] = {}
        self._read_at = float("-inf")

    def resolve(self, value: str) -> str:
        """The channel ID for `C123`, `<#C123|name>` or `#name`; raises ChannelNotFoundError."""
        found = channel_id(value)
        if found is not None:
            return found
        name = channel_name(value)
        if name is None:
            raise ChannelNotFoundError(
                f"'{value[:80]}' is not a channel: write `#name`, the channel's ID (C…), or pick it with `#`"
            )
        with self._lock:
            age = self._clock() - self._read_at
            known = self._ids.get(name)
        if age >= self._ttl or (known is None and age >= CHANNEL_REREAD_SECONDS):
            self._read()
            with self._lock:
                known = self._ids.get(name)
        if known is None:
            raise ChannelNotFoundError(
                f"I cannot find the channel #{name}: check its name, and for a private channel invite "
                "scalebot first (or give its ID, C…)"
            )
        return known

    def _read(self) -> None:
        ids: dict[str, str] = {}
        cursor: str | None = None
        try:
            for _ in range(CHANNEL_PAGES):
                page = self._client.conversations_list(
                    cursor=cursor, limit=200, types="public_channel,private_channel", exclude_archived=True
                )
                for channel in page.get("channels") or []:
                    cid, name = channel.get("id"), channel.get("name")
                    if isinstance(cid, str) and isinstance(name, str) and _CHANNEL_ID.fullmatch(cid):
                        ids[name] = cid
                cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "") or None
                if cursor is None:
                    break
        except Exception as exc:
            raise ChannelNotFoundError(
                f"Slack did not list its channels ({exc}); give the channel's ID (C…) instead, or check "
                "that scalebot has the channels:read and groups:read scopes"
            ) from exc
        with self._lock:
            self._ids, self._read_at = ids, self._clock()

"""Slack user-group membership for policies that grant roles to groups (S… IDs).

`usergroups.list` is Tier 2 and needs the optional `usergroups:read` scope (and a paid plan), so
membership is read at most once per `ttl` seconds for everyone, on the bot's executor threads.
When the call fails (scope missing, plan_upgrade_required, Slack down) users have no group roles
until the next successful refresh, even if an earlier one gave them some: denying is the safe
direction (a person removed from a group must not keep its role because Slack is down). The lock
guards the cached map only, never the Slack call: other clicks are not held by a slow Slack. Only
used when a policy names groups.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)


class GroupsApi(Protocol):
    def api_call(self, api_method: str, *, params: dict[str, Any] | None = None) -> Any: ...


class SlackGroups:
    def __init__(
        self, client: GroupsApi, *, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._members: dict[str, tuple[str, ...]] = {}
        self._loaded_at = float("-inf")

    def __call__(self, user: str) -> Sequence[str]:
        with self._lock:
            stale = self._clock() - self._loaded_at >= self._ttl
            if stale:
                self._loaded_at = self._clock()  # one caller refreshes; the others use what is known
        if stale:
            members = self._load()
            with self._lock:
                self._members = members
        with self._lock:
            return self._members.get(user, ())

    def _load(self) -> dict[str, tuple[str, ...]]:
        try:
            response = self._client.api_call("usergroups.list", params={"include_users": "true"})
        except Exception as exc:  # any failure: no group roles until the next successful refresh
            log.warning("cannot read Slack user groups (%s); group roles grant nothing for now", exc)
            return {}
        by_user: dict[str, list[str]] = {}
        for group in response.get("usergroups") or ():
            for user in group.get("users") or ():
                by_user.setdefault(str(user), []).append(str(group.get("id")))
        return {user: tuple(sorted(ids)) for user, ids in by_user.items()}

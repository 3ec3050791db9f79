"""Slack user-group roles fail closed: a failed lookup grants nothing, and no lock is held across it."""

from __future__ import annotations

from typing import Any

from bot.slack.groups import SlackGroups


class FlakyGroups:
    """usergroups.list that answers once, then fails; it records whether the cache lock was held."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock_held: list[bool] = []
        self.groups: SlackGroups | None = None

    def api_call(self, api_method: str, *, params: dict[str, Any] | None = None) -> Any:
        assert api_method == "usergroups.list"
        assert self.groups is not None
        self.lock_held.append(self.groups._lock.locked())
        self.calls += 1
        if self.calls > 1:
            raise ConnectionError("slack is down")
        return {"ok": True, "usergroups": [{"id": "S0SRE", "users": ["U1"]}]}


def test_a_failed_lookup_grants_nothing_and_holds_no_lock() -> None:
    now = [0.0]
    api = FlakyGroups()
    groups = SlackGroups(api, ttl=60, clock=lambda: now[0])
    api.groups = groups
    assert groups("U1") == ("S0SRE",)
    now[0] = 61.0  # the next call refreshes, and Slack fails
    assert groups("U1") == (), "a removed member must not keep the group's role while Slack is down"
    assert api.calls == 2
    assert api.lock_held == [False, False]

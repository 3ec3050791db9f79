"""People by name and channels by `#name`: cached Slack lookups that fall back or refuse."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from bot.config.channel_refs import channel_id, channel_name
from bot.slack.directory import ChannelDirectory, ChannelNotFoundError, PeopleNames


class Users:
    """users.info over a dict; `down` makes every call fail as an unreachable Slack does."""

    def __init__(self, people: dict[str, dict[str, Any]]) -> None:
        self.people, self.down = people, False
        self.asked: list[str] = []

    def users_info(self, *, user: str) -> Any:
        self.asked.append(user)
        if self.down:
            raise ConnectionError("slack is down")
        if user not in self.people:
            raise SlackApiError("users.info failed", {"ok": False, "error": "user_not_found"})
        return {"ok": True, "user": self.people[user]}


class Channels:
    """conversations.list, `size` channels a page, with Slack's cursors."""

    def __init__(self, channels: list[dict[str, str]], size: int = 2) -> None:
        self.channels, self.size, self.pages = channels, size, 0
        self.fail = False

    def conversations_list(
        self, *, cursor: str | None = None, limit: int, types: str, exclude_archived: bool
    ) -> Any:
        if self.fail:
            raise ConnectionError("slack is down")
        self.pages += 1
        start = int(cursor or 0)
        more = start + self.size < len(self.channels)
        return {
            "channels": self.channels[start : start + self.size],
            "response_metadata": {"next_cursor": str(start + self.size) if more else ""},
        }


def test_a_person_is_named_once_an_hour_and_an_unknown_one_stays_an_id() -> None:
    now = [0.0]
    users = Users({"U1": {"name": "ann", "profile": {"display_name": "", "real_name": "Ann  Example"}}})
    names = PeopleNames(users, ttl=3600, failed_ttl=300, clock=lambda: now[0])

    assert names("U1") == "Ann Example"
    assert names("U1") == "Ann Example"
    assert names("U9") == "U9"
    assert names("cli:alice") == "cli:alice" and names("schedule:nightly") == "schedule:nightly"
    assert users.asked == ["U1", "U9"], "cached, and only Slack user IDs are looked up"
    now[0] = 3601.0
    users.down = True
    assert names("U1") == "U1", "Slack unreachable: the ID, never an error"
    assert names("U1") == "U1" and names("U2") == "U2"
    assert users.asked == ["U1", "U9", "U1"], "while Slack fails, nobody is looked up"
    now[0] = 3601.0 + 301
    users.down = False
    assert names("U1") == "Ann Example" and names("U9") == "U9"
    assert users.asked == ["U1", "U9", "U1", "U1", "U9"], "asked again once the failure is old"


def test_the_name_cache_is_bounded() -> None:
    users = Users({f"U{i}": {"name": f"p{i}"} for i in range(5)})
    names = PeopleNames(users, size=2)
    for i in range(5):
        names(f"U{i}")
    names("U4")
    names("U0")
    assert users.asked == ["U0", "U1", "U2", "U3", "U4", "U0"], "only the last two were kept"


def test_channel_references_are_ids_links_or_hash_names() -> None:
    assert channel_id("C0123") == "C0123" and channel_id("<#C0123|ops>") == "C0123"
    assert channel_id("<#G0123>") == "G0123" and channel_id("#ops") is None
    assert channel_name("#ops-alerts") == "ops-alerts"
    assert channel_name("ops") is None and channel_name("#Ops") is None and channel_name("#a b") is None


def test_a_hash_name_resolves_through_every_page_and_is_cached() -> None:
    now = [0.0]
    listed = [{"id": f"C{i}", "name": f"team-{i}"} for i in range(5)] + [{"id": "C0OPS", "name": "ops"}]
    api = Channels(listed)
    directory = ChannelDirectory(api, ttl=300, clock=lambda: now[0])

    assert directory.resolve("#ops") == "C0OPS"
    assert api.pages == 3
    assert directory.resolve("#team-1") == "C1"
    assert directory.resolve("<#C0OPS|whatever>") == "C0OPS" and directory.resolve("C9") == "C9"
    assert api.pages == 3, "the list is read once per TTL"
    with pytest.raises(ChannelNotFoundError):
        directory.resolve("#new")
    assert api.pages == 3, "an unknown name does not re-read a list just read"
    api.channels.append({"id": "C0NEW", "name": "new"})
    now[0] = 31.0
    assert directory.resolve("#new") == "C0NEW", "a channel made since is found after 30 s"
    assert api.pages == 7


def test_an_unknown_or_unlistable_name_is_refused_with_what_to_do() -> None:
    api = Channels([{"id": "C0OPS", "name": "ops"}])
    directory = ChannelDirectory(api)
    with pytest.raises(ChannelNotFoundError, match=r"cannot find the channel #nope: .*invite scalebot"):
        directory.resolve("#nope")
    with pytest.raises(ChannelNotFoundError, match="is not a channel"):
        directory.resolve("ops")
    api.fail = True
    with pytest.raises(ChannelNotFoundError, match="give the channel's ID"):
        ChannelDirectory(api).resolve("#ops")

"""The engine's reasons, rendered for Slack and for a terminal from the same data."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.text import messages
from engine.domain.reasons import (
    AlreadyDecided,
    Busy,
    ChannelNotAllowed,
    NoScheduleToResleep,
    UnknownOperation,
)

AT = datetime(2026, 3, 2, 14, 2, tzinfo=UTC)


def test_slack_gets_mentions_links_dates_and_the_slash_command() -> None:
    busy = Busy("web", "op-1a2b3c4d", "zero", "U0OPS", "awaiting approval")
    assert messages.reason(busy) == (
        "web is busy: operation op-1a2b3c4d (zero, requested by <@U0OPS>, awaiting approval) is using it; "
        "wait for it or cancel it with `/scale ops cancel op-1a2b3c4d`"
    )
    decided = messages.reason(AlreadyDecided("op-1", "rejected", "U0APP", AT))
    assert decided == f"operation op-1 is already rejected by <@U0APP> at {messages.slack_time(AT)}"
    assert (
        messages.reason(ChannelNotAllowed("prod", ("C1", "C2"))) == "prod is operated only from <#C1>, <#C2>"
    )
    assert "`/scale wake dev-eu`" in messages.reason(NoScheduleToResleep("dev-eu"))


def test_the_cli_gets_the_same_data_as_plain_text() -> None:
    busy = Busy("web", "op-1a2b3c4d", "zero", "cli:alice", "running")
    plain = messages.reason(busy, slack=False)
    assert "requested by alice" in plain and "`scalebot operations cancel op-1a2b3c4d`" in plain
    assert messages.reason(UnknownOperation("op-9"), slack=False) == (
        "no operation op-9; `scalebot operations list` shows the recent ones"
    )
    decided = messages.reason(AlreadyDecided("op-1", "cancelled", "U0APP", AT), slack=False)
    assert decided == "operation op-1 is already cancelled by U0APP at 14:02 UTC"
    for text in (plain, decided):
        assert "<" not in text

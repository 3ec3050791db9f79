"""`bot.text.mrkdwn`: text from outside is escaped once, and every token is built from values
scalebot owns."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.text import messages, mrkdwn
from bot.text.mrkdwn import Mrkdwn, escape, fmt
from engine.domain.operation import OpKind

TOKEN = re.compile(r"<[^<>]*>")
HOSTILE = (
    "<!subteam^S0X> <@U0EVIL> <!date^1^{date}^https://evil.example|x> <https://evil.example|y> & <!here>"
)


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@given(st.text())
def test_escaped_text_has_no_token_and_reads_back_as_it_was(text: str) -> None:
    shown = escape(text)
    assert "<" not in shown and ">" not in shown
    assert _unescape(shown) == text
    assert escape(shown) == shown  # marked safe: never escaped a second time


@given(st.lists(st.text(), max_size=4))
def test_fmt_keeps_only_the_templates_tokens(args: list[str]) -> None:
    template = "<@U0OPS> said " + " / ".join("{}" for _ in args)
    shown = fmt(template, *args)
    assert TOKEN.findall(shown) == ["<@U0OPS>"]


@given(st.text())
def test_a_user_mention_is_made_only_from_a_user_id(value: str) -> None:
    shown = mrkdwn.user(value)
    tokens = TOKEN.findall(shown)
    assert tokens == ([f"<@{value}>"] if re.fullmatch(r"[UW][A-Z0-9]{1,20}", value) else [])


def test_a_str_made_from_marked_text_is_no_longer_marked() -> None:
    ours = mrkdwn.user("U0OPS")
    assert isinstance(ours, Mrkdwn)
    assert not isinstance(ours + " & more", Mrkdwn)
    assert escape(f"{ours} & more") == "&lt;@U0OPS&gt; &amp; more"  # shown as text, never live


def test_a_date_carries_no_link_and_an_escaped_fallback() -> None:
    assert mrkdwn.date(1700000000, "{date_short} {time}", "<b> & c") == (
        "<!date^1700000000^{date_short} {time}|&lt;b&gt; &amp; c>"
    )
    with pytest.raises(ValueError, match="date formats"):
        mrkdwn.date(1700000000, "{date}^https://evil.example", "x")
    with pytest.raises(TypeError, match="integer"):
        mrkdwn.date("1700000000^{date}^https://evil.example", "{date}", "x")  # type: ignore[arg-type]


def test_only_slack_permalinks_become_links() -> None:
    permalink = "https://acme.slack.com/archives/C0DEV/p1700000000000001?thread_ts=1.2&cid=C0DEV"
    assert mrkdwn.link(permalink, "thread") == (
        "<https://acme.slack.com/archives/C0DEV/p1700000000000001?thread_ts=1.2&amp;cid=C0DEV|thread>"
    )
    assert mrkdwn.link("https://evil.example/phish", "thread") == "thread"
    assert mrkdwn.link("https://acme.slack.com/x|click here", "thread") == "thread"


def test_messages_escape_what_comes_from_outside() -> None:
    at = datetime(2026, 3, 2, 14, 2, tzinfo=UTC)
    assert TOKEN.findall(messages.who(f"cli:{HOSTILE}")) == []
    assert TOKEN.findall(messages.who(f"schedule:{HOSTILE}")) == []
    assert TOKEN.findall(messages.who(HOSTILE)) == []
    assert TOKEN.findall(messages.request_line("U0OPS", messages.OpKind.DRAIN, HOSTILE, HOSTILE)) == [
        "<@U0OPS>"
    ]
    assert TOKEN.findall(messages.approvers_line(["U0APP", HOSTILE], ["S0SRE", HOSTILE])) == [
        "<@U0APP>",
        "<!subteam^S0SRE>",
    ]
    line = messages.card_not_posted(OpKind.ZERO, HOSTILE, "C0DEV", f"gave_up:{HOSTILE}")
    assert TOKEN.findall(line) == ["<#C0DEV>"]
    [date] = TOKEN.findall(messages.slack_time(at, fallback=HOSTILE))
    assert date == f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}|{escape(HOSTILE)}>"

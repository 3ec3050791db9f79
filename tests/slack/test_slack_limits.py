"""What Slack shows and how fast it is written to, against a local Web API that enforces Slack's
pacing (tests/slack/harness.py `enforce_limits`: posts per channel, edits of one message).

Covers: a whole approval flow (card, approval, a real zero-scale of the in-memory cluster with
its thread replies, the final summary) is delivered without one 429; a final arriving right
after an edit waits instead of editing the message twice in a moment; an edit that had to fall
back to text clears the card's buttons (`blocks: []`); the sender forgets finished messages.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.config.settings import SenderSettings
from bot.slack.blocks import operations as blocks
from bot.slack.blocks.kit import Message
from engine.domain.operation import OpState
from tests.slack.conftest import APPROVER, CHANNEL, RunningBot
from tests.slack.harness import EDIT_GAP, all_text, buttons_of

SLACK_PACE = SenderSettings(update_interval=1.0, updates_per_minute=40, posts_per_second=1.0)


def test_an_approval_flow_stays_within_slacks_limits(make_bot: Callable[..., RunningBot]) -> None:
    bot = make_bot(sender=SLACK_PACE, run=True)
    bot.api.enforce_limits()
    bot.command("zero dev-eu")
    approve = bot.approve_button()

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)

    assert bot.wait_finished().state is OpState.SUCCEEDED
    bot.settle(timeout=30)
    assert bot.api.violations == []
    posts = bot.api.calls_to("chat.postMessage")
    assert len(posts) >= 4, "the flow posts the card and several thread replies"
    card_ts = posts[0].response["ts"]
    assert "Completed" in all_text(bot.api.calls_to("chat.update")[-1])
    assert buttons_of(bot.api.calls_to("chat.update")[-1]) == []
    assert bot.api.shown(CHANNEL, card_ts)["blocks"] == bot.api.calls_to("chat.update")[-1].body["blocks"]
    assert bot.sender.tracked() == 0, "the finished message's state was not pruned"


def test_a_final_right_after_an_edit_waits_its_turn(make_bot: Callable[..., RunningBot]) -> None:
    bot = make_bot(sender=SLACK_PACE)
    bot.api.enforce_limits()
    bot.sender.show("k", Message("step 1", ()), channel=CHANNEL)
    bot.api.wait_for_call("chat.postMessage")
    bot.sender.show("k", Message("step 2", ()), channel=CHANNEL)
    bot.api.wait_for_call("chat.update")

    bot.sender.show("k", Message("step 3", ()), channel=CHANNEL)
    bot.sender.show("k", Message("done", ()), channel=CHANNEL, final=True)  # merges into step 3

    bot.settle()
    updates = bot.api.calls_to("chat.update")
    assert [u.body["text"] for u in updates] == ["step 2", "done"]
    assert updates[1].at - updates[0].at >= EDIT_GAP
    assert bot.api.violations == []
    assert bot.sender.tracked() == 0
    bot.sender.show("k", Message("late progress", ()), channel=CHANNEL)
    bot.settle()
    assert len(bot.api.calls_to("chat.update")) == 2, "a finished message was edited again"


def test_an_edit_that_falls_back_to_text_clears_the_buttons(bot: RunningBot) -> None:
    bot.command("scale web 1")
    card = bot.card()
    approve = bot.approve_button()
    bot.settle()
    bot.api.fail("chat.update", times=1, status=200, error="invalid_blocks")

    bot.reject(approve["value"], user=APPROVER)

    text_only = bot.api.wait_for_call("chat.update", lambda c: c.response.get("ok") is True)
    assert text_only.body["blocks"] == [] and "Rejected" in text_only.body["text"]
    shown = bot.api.shown(CHANNEL, card.response["ts"])
    assert shown["blocks"] == [], "Slack would still show Approve / Reject"

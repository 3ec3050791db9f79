"""What Slack shows and how fast it is written to, against a local Web API that enforces Slack's
pacing (tests/slack/harness.py `enforce_limits`: posts per channel, edits of one message, Tier
methods per workspace).

Covers: the local Web API itself refuses what Slack refuses (the 51st chat.update of a workspace
within a minute, whatever message it edits; a second post to one channel within a second), with a
Retry-After that says when a call would be accepted; a whole approval flow (card, approval, a real
zero-scale of the in-memory cluster with its thread replies, the final summary) is delivered
without one 429; a final arriving right after an edit waits instead of editing the message twice
in a moment; an edit that had to fall back to text clears the card's buttons (`blocks: []`); the
sender forgets finished messages.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

from bot.config.settings import SenderSettings
from bot.slack.blocks import operations as blocks
from bot.slack.blocks.kit import Message
from engine.domain.operation import OpState
from tests.slack.conftest import APPROVER, CHANNEL, RunningBot
from tests.slack.harness import EDIT_GAP, SlackApiServer, all_text, buttons_of

SLACK_PACE = SenderSettings(update_interval=1.0, updates_per_minute=40, posts_per_second=1.0)


def test_the_local_slack_refuses_the_51st_chat_update_of_a_workspace_in_a_minute(
    slack_api: SlackApiServer,
) -> None:
    slack_api.enforce_limits()
    # Fifty different messages in fifty channels: Tier 3 counts the method per workspace.
    for n in range(50):
        status, _ = _edit(slack_api, f"C{n:04d}", f"1700000000.{n:06d}")
        assert status == 200, f"edit {n + 1} was refused"

    status, retry_after = _edit(slack_api, "C9999", "1700000000.999999")

    assert status == 429
    assert retry_after is not None and 1 <= int(retry_after) <= 60
    assert slack_api.violations == ["chat.update call 51 within a minute"]
    # Other methods keep their own budget.
    status, _ = _raw(slack_api, "chat.postEphemeral", {"channel": "C0DEV", "user": "U1", "text": "hi"})
    assert status == 200


def test_the_local_slack_refuses_a_second_post_to_one_channel_within_a_second(
    slack_api: SlackApiServer,
) -> None:
    slack_api.enforce_limits(post_burst=1)
    assert _raw(slack_api, "chat.postMessage", {"channel": "C0DEV", "text": "one"})[0] == 200

    status, retry_after = _raw(slack_api, "chat.postMessage", {"channel": "C0DEV", "text": "two"})

    assert (status, retry_after) == (429, "1")
    assert _raw(slack_api, "chat.postMessage", {"channel": "C0OPS", "text": "elsewhere"})[0] == 200
    assert slack_api.violations == ["chat.postMessage C0DEV"]


def _edit(api: SlackApiServer, channel: str, ts: str) -> tuple[int, str | None]:
    return _raw(api, "chat.update", {"channel": channel, "ts": ts, "text": "progress"})


def _raw(api: SlackApiServer, method: str, body: dict[str, object]) -> tuple[int, str | None]:
    """One Web API call over HTTP as slack_sdk makes it: (status, its Retry-After header)."""
    request = urllib.request.Request(
        api.url + method,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json; charset=utf-8", "Authorization": "Bearer xoxb-t"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        with error:
            assert json.loads(error.read()) == {"ok": False, "error": "ratelimited"}
            return error.code, error.headers.get("Retry-After")


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
    # The card, then in its thread the PodDisruptionBudget that held the drain and the summary for
    # its requester; the phases edited the card.
    replies = [all_text(p) for p in posts[1:] if p.body.get("thread_ts") == posts[0].response["ts"]]
    assert len(replies) == len(posts) - 1 and [t for t in replies if "Completed" in t][:2] == replies[-1:]
    assert all("Completed" in t or "disruption budget" in t for t in replies), replies
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

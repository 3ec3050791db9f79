"""Slack timeouts, through the real sender and a real slack_sdk WebClient over HTTP.

tests/slack covers 429 + Retry-After, 500s and a final refused until a restart; the full
`scalebot run` flow under 429s, 500s and a slow answer is in test_security.py. What is left is
the timeout: the sender's client gives up on a call (here after 1 s instead of the product's
15 s, so the test takes seconds) and must retry without losing or repeating anything.

- Slack not answering for a while (requests accepted, never processed: an outage): every update
  and reply is delivered once, in order, the final state last, nothing left in the outbox.
- Slack DID post a message but answered after the client's timeout: chat.postMessage has no
  idempotency key (slackapi/slack-api-specs#10), so every post carries message metadata with an
  opaque key, and the retry first reads the thread (conversations.replies) or the channel
  (conversations.history) for it: a reply or a card found there is adopted, not posted again.
- A post dropped unprocessed is looked for, not found, and posted once.
- A lookup Slack refuses (no `channels:history` scope) falls back to posting: never lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bot.config.settings import Secret, SenderSettings, Settings, SlackSettings
from bot.slack.app import web_client
from bot.slack.blocks import views
from bot.slack.delivery.outbox import MemoryOutbox
from bot.slack.delivery.sender import Sender
from tests.reliability.support import InFlightSlack, slack_server
from tests.slack.harness import all_text

CLIENT_TIMEOUT = 1


@pytest.fixture
def slack() -> Iterator[InFlightSlack]:
    with slack_server() as server:
        yield server


@pytest.fixture
def sender(slack: InFlightSlack) -> Iterator[tuple[Sender, MemoryOutbox]]:
    settings = Settings(
        slack=SlackSettings(
            bot_token=Secret("xoxb-1-timeouts"), signing_secret=Secret("s"), api_url=slack.url
        ),
        sender=SenderSettings(update_interval=0.2, updates_per_minute=600, posts_per_second=50),
    )
    outbox = MemoryOutbox()
    s = Sender(
        web_client(settings, for_sender=True, timeout=CLIENT_TIMEOUT), outbox, settings=settings.sender
    )
    s.start()
    yield s, outbox
    s.stop(timeout=1)


def _is_reply(method: str, body: dict[str, object]) -> bool:
    return method == "chat.postMessage" and bool(body.get("thread_ts"))


def _texts(slack: InFlightSlack, method: str, *, replies: bool) -> list[str]:
    calls = slack.calls_to(method, ok_only=True)
    return [all_text(c).split("\n")[0] for c in calls if bool(c.body.get("thread_ts")) == replies]


def test_slack_not_answering_for_a_while(slack: InFlightSlack, sender: tuple[Sender, MemoryOutbox]) -> None:
    s, outbox = sender
    s.show("op:1", views.text_message("running"), channel="C1")
    assert s.flush(5)
    # Slack goes quiet: the next 3 replies and 2 edits are accepted, then dropped unprocessed.
    for _ in range(3):
        slack.hold(_is_reply, CLIENT_TIMEOUT + 0.5, processed=False)
    for _ in range(2):
        slack.hold(lambda method, _: method == "chat.update", CLIENT_TIMEOUT + 0.5, processed=False)

    s.reply("op:1", views.text_message("Cordoned 2 nodes"), channel="C1")
    s.show("op:1", views.text_message("draining"), channel="C1")
    s.reply("op:1", views.text_message("Drain completed"), channel="C1")
    s.show("op:1", views.text_message("succeeded"), channel="C1", final=True)
    s.reply("op:1", views.text_message("Completed in 1m"), channel="C1", final=True)

    assert s.flush(60), "everything was delivered once Slack answered again"
    assert slack.held == 0
    assert _texts(slack, "chat.postMessage", replies=True) == [
        "Cordoned 2 nodes",
        "Drain completed",
        "Completed in 1m",
    ]
    assert _texts(slack, "chat.update", replies=False)[-1] == "succeeded"
    assert _texts(slack, "chat.postMessage", replies=False) == ["running"], "one card"
    assert outbox.pending() == []


LATE = CLIENT_TIMEOUT + 0.2
"""Slack processes the held post this long after it arrived: after the client gave up (1 s), and
before the sender looks for it (as long again as the failed call took, so at 2 s at the earliest)."""


def test_a_reply_slack_posted_but_answered_too_late_is_not_repeated(
    slack: InFlightSlack, sender: tuple[Sender, MemoryOutbox]
) -> None:
    s, _ = sender
    s.show("op:1", views.text_message("running"), channel="C1")
    assert s.flush(5)
    slack.hold(_is_reply, LATE, processed=True)
    s.reply("op:1", views.text_message("Cordoned 2 nodes"), channel="C1")
    assert s.flush(30)
    slack.wait_for(lambda cs: len(slack.held_bodies) == 1 and slack.held == 0, 10, "the late answer")
    slack.wait_for(lambda cs: any(c.body == slack.held_bodies[0] for c in cs), 10, "the held reply")
    assert _texts(slack, "chat.postMessage", replies=True) == ["Cordoned 2 nodes"]

    card_ts = slack.calls_to("chat.postMessage")[0].response["ts"]
    (lookup,) = slack.calls_to("conversations.replies")
    assert lookup.body["ts"] == card_ts and lookup.body["include_all_metadata"] is True
    key = slack.held_bodies[0]["metadata"]["event_payload"]["key"]
    replies = [m for m in lookup.response["messages"] if m["ts"] != card_ts]  # after the parent
    assert [m["metadata"]["event_payload"] for m in replies] == [{"key": key}]
    assert "Cordoned" not in key and "op:1" not in key  # the key is opaque


def test_a_card_slack_posted_but_answered_too_late_is_adopted(
    slack: InFlightSlack, sender: tuple[Sender, MemoryOutbox]
) -> None:
    s, outbox = sender
    slack.hold(lambda method, body: method == "chat.postMessage", LATE, processed=True)
    s.show("op:1", views.text_message("running"), channel="C1")
    s.reply("op:1", views.text_message("Cordoned 2 nodes"), channel="C1")
    assert s.flush(30)
    slack.wait_for(lambda cs: slack.held == 0, 10, "the late answer")

    (card,) = slack.calls_to("chat.postMessage", ok_only=True)[:1]
    assert _texts(slack, "chat.postMessage", replies=False) == ["running"], "one card"
    ts = card.response["ts"]
    assert s.message_ts("op:1") == ts and outbox.lookup("op:1") == ("C1", ts)
    assert [c.body["thread_ts"] for c in slack.calls_to("chat.postMessage")[1:]] == [ts]
    (lookup,) = slack.calls_to("conversations.history")
    assert lookup.body["channel"] == "C1" and lookup.body["include_all_metadata"] is True
    assert slack.shown("C1", ts)["text"] == "running"


def test_a_reply_dropped_unprocessed_is_looked_for_and_posted_once(
    slack: InFlightSlack, sender: tuple[Sender, MemoryOutbox]
) -> None:
    s, _ = sender
    s.show("op:1", views.text_message("running"), channel="C1")
    assert s.flush(5)
    slack.hold(_is_reply, CLIENT_TIMEOUT + 0.5, processed=False)
    s.reply("op:1", views.text_message("Cordoned 2 nodes"), channel="C1")
    assert s.flush(30)

    card_ts = slack.calls_to("chat.postMessage")[0].response["ts"]
    (lookup,) = slack.calls_to("conversations.replies")
    assert lookup.status == 200 and [m["ts"] for m in lookup.response["messages"]] == [card_ts]
    assert _texts(slack, "chat.postMessage", replies=True) == ["Cordoned 2 nodes"]


def test_a_refused_lookup_falls_back_to_posting(
    slack: InFlightSlack, sender: tuple[Sender, MemoryOutbox], caplog: pytest.LogCaptureFixture
) -> None:
    s, _ = sender
    s.show("op:1", views.text_message("running"), channel="C1")
    assert s.flush(5)
    slack.fail("conversations.replies", status=200, error="missing_scope")  # no channels:history
    slack.hold(_is_reply, CLIENT_TIMEOUT + 0.5, processed=False)
    with caplog.at_level(logging.WARNING, logger="bot.slack.delivery.sender"):
        s.reply("op:1", views.text_message("Cordoned 2 nodes"), channel="C1")
        assert s.flush(30)

    (lookup,) = slack.calls_to("conversations.replies")
    assert lookup.response == {"ok": False, "error": "missing_scope"}
    assert _texts(slack, "chat.postMessage", replies=True) == ["Cordoned 2 nodes"]
    logged = [r.getMessage() for r in caplog.records]
    assert any("missing_scope" in line and "posting it again" in line for line in logged), logged

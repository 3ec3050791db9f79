"""The pure decisions of posting once: which failures may have posted, where to look, what matches.

Covers: a post's metadata names only its opaque key; a timeout, a reset or a broken answer may have
landed, a 429, an error answer or a refused connection did not; a reply (or a message posted in a
thread) is looked for in its thread, a top-level post in the channel's history, from a margin
before the attempt, with metadata asked for; only a message carrying our event type and this key
matches; a direct message by user ID cannot be looked up; the sender's WebClient retries by itself
only a request that never reached Slack.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from bot.slack.delivery.post_lookup import (
    LOOKUP_MARGIN_SECONDS,
    POST_EVENT_TYPE,
    can_look_up,
    find_post,
    lookup_request,
    may_have_landed,
    post_metadata,
)


def _answer(status: int, error: str) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="chat.postMessage",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=status,
    )
    return SlackApiError("failed", response)


def test_a_posts_metadata_names_only_its_key() -> None:
    assert post_metadata("4f0c") == {"event_type": "scalebot_post", "event_payload": {"key": "4f0c"}}


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError("The read operation timed out"),
        ConnectionResetError(104, "Connection reset by peer"),
        urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer")),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        http.client.IncompleteRead(b""),
        _answer(504, "gateway_timeout"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_failure_after_the_request_left_may_have_posted(exc: BaseException) -> None:
    assert may_have_landed(exc)


@pytest.mark.parametrize(
    "exc",
    [
        _answer(429, "ratelimited"),
        _answer(500, "internal_error"),
        _answer(200, "channel_not_found"),
        _answer(200, "invalid_blocks"),
        ConnectionRefusedError(111, "Connection refused"),
        urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
        urllib.error.URLError(socket.gaierror(-2, "Name or service not known")),
        ValueError("a bug"),
    ],
    ids=lambda e: f"{type(e).__name__}-{getattr(getattr(e, 'response', None), 'status_code', '')}",
)
def test_an_answer_or_a_request_that_never_left_did_not_post(exc: BaseException) -> None:
    assert not may_have_landed(exc)


def test_a_reply_is_looked_for_in_its_thread_a_post_in_the_channel() -> None:
    method, args = lookup_request("C1", "1700000000.000100", 1_700_000_100.0)
    assert method == "conversations.replies"
    assert args["ts"] == "1700000000.000100" and args["channel"] == "C1"
    assert args["include_all_metadata"] is True  # without it Slack leaves metadata out
    assert float(args["oldest"]) == 1_700_000_100.0 - LOOKUP_MARGIN_SECONDS
    assert 0 < args["limit"] <= 100

    method, args = lookup_request("C1", "", 1_700_000_100.0)
    assert method == "conversations.history" and "ts" not in args
    assert args["include_all_metadata"] is True


def test_only_a_message_with_our_event_type_and_this_key_matches() -> None:
    ours = {"event_type": POST_EVENT_TYPE, "event_payload": {"key": "k1"}}
    messages: list[dict[str, Any]] = [
        {"ts": "1.1", "text": "a person's message"},
        {"ts": "1.2", "metadata": {"event_type": "other_app", "event_payload": {"key": "k1"}}},
        {"ts": "1.3", "metadata": {"event_type": POST_EVENT_TYPE, "event_payload": {"key": "k2"}}},
        {"ts": "1.4", "metadata": "not an object"},
        {"ts": "1.5", "metadata": ours},
    ]
    assert find_post(messages, "k1") == "1.5"
    assert find_post(messages, "k3") is None
    assert find_post([], "k1") is None


def test_a_direct_message_by_user_id_cannot_be_looked_up() -> None:
    assert can_look_up("C0123") and can_look_up("G0123") and can_look_up("D0123")
    assert not can_look_up("U0123") and not can_look_up("W0123") and not can_look_up("")


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), True),
        (urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer")), False),
        (ConnectionResetError(104, "Connection reset by peer"), False),
        (http.client.RemoteDisconnected("closed"), False),
    ],
    ids=["refused", "reset-in-urlerror", "reset", "remote-disconnected"],
)
def test_the_senders_client_retries_only_requests_that_never_reached_slack(
    error: Exception, retried: bool
) -> None:
    from slack_sdk.http_retry.request import HttpRequest
    from slack_sdk.http_retry.state import RetryState

    from bot.slack.app import UnsentRetryHandler

    request = HttpRequest(method="POST", url="https://slack.invalid/api/chat.postMessage", headers={})
    handler = UnsentRetryHandler(max_retry_count=2)
    assert handler.can_retry(state=RetryState(), request=request, error=error) is retried

"""Posting once although Slack's answer can be lost: the sender's pure helpers for it.

chat.postMessage has no idempotency key. When a post fails after its request left (the client's
timeout, a connection broken before the answer), Slack may have posted it anyway, and posting
again would show it twice. So every post carries message metadata naming an opaque key (a random
ID, never user text); after such a failure the sender first reads the thread or the channel since
just before that attempt and, if a message carries the key, takes its `ts` as the post's answer.

No I/O and no clock: the sender makes the calls and passes the times.
"""

from __future__ import annotations

import http.client
import socket
import urllib.error
from collections.abc import Iterable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError

POST_EVENT_TYPE = "scalebot_post"
"""The metadata `event_type` of every message the sender posts."""
LOOKUP_MARGIN_SECONDS = 10.0
"""Looked for from this long before the attempt: Slack's clock and ours may differ a little (a
host whose clock runs further ahead misses its post and posts again: at-least-once)."""
LOOKUP_LIMIT = 15
"""Messages one lookup reads (one page; 15 is the most Slack gives commercially distributed
non-Marketplace apps since 2025). A post not among them is posted again: at-least-once."""
_NOT_SENT = (ConnectionRefusedError, socket.gaierror)
"""Failures before the request left this host: Slack cannot have seen it."""
_GATEWAY_TIMEOUT = 504


def post_metadata(key: str) -> dict[str, Any]:
    """The `metadata` argument of chat.postMessage for the post `key`."""
    return {"event_type": POST_EVENT_TYPE, "event_payload": {"key": key}}


def may_have_landed(exc: BaseException) -> bool:
    """True when a failed call may still have been processed by Slack: the client gave up waiting
    or the connection broke after the request was sent (or Slack's gateway timed out). False
    when Slack answered (a 429, an error: nothing was posted) or the request never left."""
    if isinstance(exc, SlackApiError):
        return int(getattr(exc.response, "status_code", 0) or 0) == _GATEWAY_TIMEOUT
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, _NOT_SENT):
        return False
    return isinstance(exc, OSError | http.client.HTTPException)


def can_look_up(channel: str) -> bool:
    """A direct message addressed by user ID (U…, W…) cannot be read back by that ID."""
    return bool(channel) and channel[:1] not in ("U", "W")


def lookup_request(channel: str, thread_ts: str, since: float) -> tuple[str, dict[str, Any]]:
    """(method, arguments) reading what may hold the post: the thread `thread_ts` for a reply (or a
    message posted in a thread), else the channel; only messages after `since` (Unix seconds), with
    their metadata (Slack returns it only when asked)."""
    oldest = f"{max(since - LOOKUP_MARGIN_SECONDS, 0.0):.6f}"
    args: dict[str, Any] = {
        "channel": channel,
        "oldest": oldest,
        "include_all_metadata": True,
        "limit": LOOKUP_LIMIT,
    }
    if thread_ts:
        return "conversations.replies", {**args, "ts": thread_ts}
    return "conversations.history", args


def find_post(messages: Iterable[Mapping[str, Any]], key: str) -> str | None:
    """The `ts` of the message among `messages` (a lookup's answer) that carries the post `key`."""
    for message in messages:
        metadata = message.get("metadata")
        if not isinstance(metadata, Mapping) or metadata.get("event_type") != POST_EVENT_TYPE:
            continue
        payload = metadata.get("event_payload")
        if isinstance(payload, Mapping) and payload.get("key") == key and message.get("ts"):
            return str(message["ts"])
    return None

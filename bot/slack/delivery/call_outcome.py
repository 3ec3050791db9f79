"""How one Slack Web API write ended, and how long to wait: the sender's pure helpers.

No I/O and no clock: callers pass `now`. `classify` turns what a call raised into what the sender
does next (wait out a 429, back off and retry, resend without blocks, or drop), `backoff` spaces
the retries, and `TokenBucket` paces chat.update (Tier 3) and chat.postMessage per channel.
"""

from __future__ import annotations

import enum
import http.client
import random
from typing import Any

from slack_sdk.errors import SlackApiError

TEXT_ONLY_ERRORS = frozenset(
    {"invalid_blocks", "invalid_blocks_format", "msg_too_long", "msg_blocks_too_long"}
)
"""Slack refused the blocks themselves: the text fallback still tells people what happened."""
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
MAX_BACKOFF_SECONDS = 60.0
MAX_RETRY_AFTER_SECONDS = 300.0


class Result(enum.Enum):
    OK = "ok"
    RATE_LIMITED = "rate_limited"
    """429: wait Retry-After seconds before calling this method again."""
    TRANSIENT = "transient"
    """5xx, a broken connection, a timeout: back off and try again."""
    TEXT_ONLY = "text_only"
    """The blocks were refused: send the same message as text."""
    PERMANENT = "permanent"
    """channel_not_found, not_in_channel, message_not_found …: retrying cannot help."""


def classify(exc: Exception, *, has_blocks: bool) -> tuple[Result, Any]:
    """(what to do, Retry-After seconds or the error code) for an exception from a Web API call."""
    if isinstance(exc, SlackApiError):
        status = int(getattr(exc.response, "status_code", 0) or 0)
        error = str(exc.response.get("error", "") if exc.response is not None else "") or f"http_{status}"
        if status == 429 or error == "ratelimited":
            return Result.RATE_LIMITED, retry_after(exc)
        if status >= 500 or error in TRANSIENT_ERRORS:
            return Result.TRANSIENT, error
        if error in TEXT_ONLY_ERRORS and has_blocks:
            return Result.TEXT_ONLY, error
        return Result.PERMANENT, error
    if isinstance(exc, OSError | http.client.HTTPException):  # URLError, timeouts, resets
        return Result.TRANSIENT, type(exc).__name__
    return Result.PERMANENT, type(exc).__name__  # a bug, not Slack: never retried forever


def retry_after(exc: SlackApiError) -> float:
    """Seconds from the Retry-After header (any case), 1 s when Slack sent none."""
    headers = getattr(exc.response, "headers", None) or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list | tuple) else value
            try:
                return min(max(float(raw), 0.0), MAX_RETRY_AFTER_SECONDS)
            except (TypeError, ValueError):
                break
    return 1.0


def backoff(attempts: int) -> float:
    """0.5 s, 1 s, 2 s … up to a minute, with jitter so several writers do not retry in step."""
    return min(MAX_BACKOFF_SECONDS, 0.5 * float(2 ** min(attempts - 1, 10))) * (1 + random.random() / 4)


class TokenBucket:
    """`rate` tokens per second up to `capacity`; callers ask how long until one is free."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self.tokens, self.at = capacity, now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def wait_time(self, now: float) -> float:
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1.0

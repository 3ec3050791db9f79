"""Request signing as Slack does it, on the raw bytes, checked with Slack's documented vector.

The HTTP server verifies with Bolt's own verifier (slack_sdk's SignatureVerifier, used by Bolt's
RequestVerification middleware); these tests pin what it accepts, and that the test harness's
signer (every signed request of tests/slack) agrees with it byte for byte.

Covers: the documented test vector (secret, timestamp, body, expected signature); the replay
window (300 s accepted, 301 s refused); junk timestamps and signatures.
"""

from __future__ import annotations

from collections.abc import Mapping

from slack_sdk.signature import SignatureVerifier

from tests.slack.harness import Signer

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TIMESTAMP = 1531420618
BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
EXPECTED = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


def headers(signature: str = EXPECTED, timestamp: str = str(TIMESTAMP)) -> dict[str, str]:
    return {"x-slack-request-timestamp": timestamp, "x-slack-signature": signature}


def is_signed(secret: bytes, body: bytes, headers: Mapping[str, str], *, now: float) -> bool:
    """As the HTTP server checks: a numeric timestamp (bot.slack.app), then Bolt's verifier."""
    if not headers.get("x-slack-request-timestamp", "").isdigit():
        return False
    verifier = SignatureVerifier(secret.decode(), clock=_At(now))
    return verifier.is_valid_request(body.decode(), dict(headers))


class _At:
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def test_slacks_documented_vector() -> None:
    assert is_signed(SECRET.encode(), BODY, headers(), now=TIMESTAMP + 10)


def test_harness_signer_matches_the_vector() -> None:
    signed = Signer(SECRET).headers(BODY, timestamp=TIMESTAMP)
    assert signed["X-Slack-Signature"] == EXPECTED


def test_replay_window_is_five_minutes() -> None:
    assert is_signed(SECRET.encode(), BODY, headers(), now=TIMESTAMP + 300)
    assert not is_signed(SECRET.encode(), BODY, headers(), now=TIMESTAMP + 301)
    assert not is_signed(SECRET.encode(), BODY, headers(), now=TIMESTAMP - 301)


def test_anything_else_is_refused() -> None:
    now = TIMESTAMP + 1
    assert not is_signed(SECRET.encode(), BODY + b" ", headers(), now=now)
    assert not is_signed(b"another-secret", BODY, headers(), now=now)
    assert not is_signed(SECRET.encode(), BODY, headers(signature=EXPECTED.upper()), now=now)
    assert not is_signed(SECRET.encode(), BODY, headers(timestamp="1531420618.5"), now=now)
    assert not is_signed(SECRET.encode(), BODY, headers(timestamp="-1"), now=now)
    assert not is_signed(SECRET.encode(), BODY, {}, now=now)

"""The sender's queue discipline, against an in-memory Slack (the HTTP path is in tests/slack).

Covers: post once then edit in place; skip unchanged; coalescing to the latest rendering under a
per-message interval; final renderings jump the queue, are persisted first, never overwritten
by a late non-final one, and survive a restart through the outbox; thread replies in order and
only after their parent exists; a 429 blocks only its method for Retry-After; refused blocks
fall back to text; permanent errors are dropped; metrics hooks see calls, 429s and errors; a refused
first post reaches the unposted hooks; `tell` becomes a direct message when the ephemeral is refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from bot.config.settings import SenderSettings
from bot.slack.blocks import views
from bot.slack.blocks.kit import Message
from bot.slack.delivery.call_outcome import TokenBucket
from bot.slack.delivery.outbox import MemoryOutbox, OutboxItem
from bot.slack.delivery.post_lookup import LOOKUP_MARGIN_SECONDS, post_metadata
from bot.slack.delivery.sender import Sender, SenderMetrics, workspace_post_bucket

FAST = SenderSettings(
    update_interval=0.05, updates_per_minute=6000, posts_per_second=1000, posts_per_minute=60_000
)


def msg(text: str) -> Message:
    return views.text_message(text)


@dataclass
class FakeSlack:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    errors: dict[str, list[tuple[int, str, dict[str, str]]]] = field(default_factory=dict)
    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    cond: threading.Condition = field(default_factory=threading.Condition)
    ts: int = 0
    at: list[float] = field(default_factory=list)
    """When each call in `calls` reached Slack (time.monotonic())."""

    def __post_init__(self) -> None:
        self.gate.set()

    def fail(
        self, method: str, status: int, error: str, headers: dict[str, str] | None = None, times: int = 1
    ) -> None:
        self.errors.setdefault(method, []).extend([(status, error, headers or {})] * times)

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
        self.entered.set()
        self.gate.wait(10)
        with self.cond:
            self.calls.append((api_method, dict(json or {})))
            self.at.append(time.monotonic())
            self.cond.notify_all()
            queued = self.errors.get(api_method)
            if queued:
                status, error, headers = queued.pop(0)
                response = SlackResponse(
                    client=None,
                    http_verb="POST",
                    api_url=api_method,
                    req_args={},
                    data={"ok": False, "error": error},
                    headers=headers,
                    status_code=status,
                )
                raise SlackApiError("failed", response)
            self.ts += 1
            return {"ok": True, "ts": f"1.{self.ts:04d}", "channel": (json or {}).get("channel")}

    def wait(self, predicate: Any, timeout: float = 5.0) -> list[tuple[str, dict[str, Any]]]:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.calls), timeout), self.calls
            return list(self.calls)

    def texts(self, method: str | None = None) -> list[str]:
        return [body.get("text", "") for m, body in self.calls if method in (None, m)]


@pytest.fixture
def slack() -> FakeSlack:
    return FakeSlack()


@pytest.fixture
def outbox() -> MemoryOutbox:
    return MemoryOutbox()


@pytest.fixture
def sender(slack: FakeSlack, outbox: MemoryOutbox) -> Iterator[Sender]:
    s = Sender(slack, outbox, settings=FAST)
    s.start()
    yield s
    slack.gate.set()
    s.stop(timeout=1)


def test_first_rendering_is_posted_then_edited_in_place(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:1", msg("one"), channel="C1")
    assert sender.flush(5)
    sender.show("op:1", msg("two"), channel="C1")
    assert sender.flush(5)

    assert [m for m, _ in slack.calls] == ["chat.postMessage", "chat.update"]
    assert slack.calls[1][1]["ts"] == "1.0001" and slack.calls[1][1]["channel"] == "C1"
    assert sender.message_ts("op:1") == "1.0001"


def test_flush_waits_until_a_posted_message_is_recorded(slack: FakeSlack, sender: Sender) -> None:
    recording, release = threading.Event(), threading.Event()
    recorded: list[tuple[str, str, str]] = []

    def slow_hook(key: str, channel: str, ts: str) -> None:  # the SQLite write of the card's ts
        recording.set()
        release.wait(10)
        recorded.append((key, channel, ts))

    sender.add_posted_hook(slow_hook)
    sender.show("op:1", msg("one"), channel="C1")
    assert recording.wait(5), "the posted hook never ran"

    assert not sender.flush(0.2), "flush returned while the posted message's ts was still being recorded"
    release.set()
    assert sender.flush(5)
    assert recorded == [("op:1", "C1", "1.0001")]


def test_unchanged_rendering_is_not_sent(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:1", msg("same"), channel="C1")
    assert sender.flush(5)
    for _ in range(10):
        sender.show("op:1", msg("same"), channel="C1")
    assert sender.flush(5)

    assert len(slack.calls) == 1


def test_rapid_renderings_coalesce_to_the_latest(slack: FakeSlack, outbox: MemoryOutbox) -> None:
    coalesced: list[str] = []
    s = Sender(
        slack,
        outbox,
        settings=SenderSettings(update_interval=0.3, updates_per_minute=6000, posts_per_second=1000),
        metrics=SenderMetrics(coalesced=coalesced.append),
    )
    s.start()
    try:
        s.show("op:1", msg("v0"), channel="C1")
        slack.wait(lambda calls: len(calls) == 1)
        for i in range(1, 31):
            s.show("op:1", msg(f"v{i}"), channel="C1")
        assert s.flush(5)
    finally:
        s.stop(1)

    updates = slack.texts("chat.update")
    assert updates[-1] == "v30" and len(updates) <= 2
    assert len(coalesced) >= 28


def test_finals_jump_the_queue(slack: FakeSlack, sender: Sender) -> None:
    slack.gate.clear()  # the writer is stuck in its first call while the queue fills up
    sender.show("op:a", msg("a"), channel="C1")
    assert slack.entered.wait(5)
    sender.reply("op:a", msg("a-reply"), channel="C1")
    sender.show("op:b", msg("b"), channel="C1")
    sender.show("op:c", msg("c-final"), channel="C1", final=True)
    slack.gate.set()
    assert sender.flush(5)

    assert slack.texts() == ["a", "c-final", "b", "a-reply"]


def test_a_late_non_final_rendering_never_replaces_a_final_one(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:1", msg("running"), channel="C1")
    assert sender.flush(5)
    sender.show("op:1", msg("completed"), channel="C1", final=True)
    sender.show("op:1", msg("still running"), channel="C1")
    assert sender.flush(5)
    sender.show("op:1", msg("running again"), channel="C1")
    assert sender.flush(5)

    assert slack.texts() == ["running", "completed"]


def test_replies_wait_for_their_parent_and_keep_their_order(slack: FakeSlack, sender: Sender) -> None:
    slack.fail("chat.postMessage", 500, "internal_error")  # the parent's first post fails
    sender.show("op:1", msg("parent"), channel="C1", thread_ts="9.0001")
    for i in range(5):
        sender.reply("op:1", msg(f"reply {i}"), channel="C1")
    assert sender.flush(10)

    posts = [(body["text"], body.get("thread_ts")) for m, body in slack.calls if m == "chat.postMessage"]
    assert posts[0] == ("parent", "9.0001") and posts[1] == ("parent", "9.0001")
    assert posts[2:] == [(f"reply {i}", "9.0001") for i in range(5)]  # a thread inside a thread: same thread


def test_replies_to_an_unknown_message_go_to_the_channel(slack: FakeSlack, sender: Sender) -> None:
    sender.reply("op:gone", msg("orphan"), channel="C1")
    assert sender.flush(5)
    body = slack.calls[0][1]
    assert slack.calls == [
        (
            "chat.postMessage",
            {"channel": "C1", "text": "orphan", "blocks": body["blocks"], "metadata": body["metadata"]},
        )
    ]


def test_429_blocks_only_that_method_for_retry_after(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:1", msg("v1"), channel="C1")
    assert sender.flush(5)
    limited: list[tuple[str, float]] = []
    sender._metrics = SenderMetrics(rate_limited=lambda m, s: limited.append((m, s)))
    slack.fail("chat.update", 429, "ratelimited", {"Retry-After": "1"})

    started = time.monotonic()
    sender.show("op:1", msg("v2"), channel="C1")
    slack.wait(lambda calls: sum(m == "chat.update" for m, _ in calls) == 1)
    sender.show("op:2", msg("other message"), channel="C1")
    slack.wait(lambda calls: calls[-1][1].get("text") == "other message")
    posted_other = time.monotonic()
    assert sender.flush(5)

    assert posted_other - started < 1.0  # chat.postMessage was not held up
    assert slack.texts("chat.update") == ["v2", "v2"]
    assert time.monotonic() - started >= 1.0
    assert limited == [("chat.update", 1.0)]


def test_refused_blocks_fall_back_to_text(slack: FakeSlack, sender: Sender) -> None:
    slack.fail("chat.postMessage", 200, "invalid_blocks")
    sender.show("op:1", msg("hello"), channel="C1")
    assert sender.flush(5)

    first, second = slack.calls
    assert "blocks" in first[1] and "blocks" not in second[1] and second[1]["text"] == "hello"


def test_permanent_errors_are_dropped_and_counted(slack: FakeSlack, outbox: MemoryOutbox) -> None:
    errors: list[tuple[str, str]] = []
    calls: list[str] = []
    s = Sender(
        slack,
        outbox,
        settings=FAST,
        metrics=SenderMetrics(call=calls.append, error=lambda m, e: errors.append((m, e))),
    )
    s.start()
    try:
        slack.fail("chat.postMessage", 200, "channel_not_found")
        s.show("op:1", msg("final words"), channel="C404", final=True)
        assert s.flush(5)
    finally:
        s.stop(1)

    assert calls == ["chat.postMessage"] and errors == [("chat.postMessage", "channel_not_found")]
    assert outbox.pending() == []


def test_finals_are_persisted_before_delivery_and_survive_a_restart(
    slack: FakeSlack, outbox: MemoryOutbox
) -> None:
    first = Sender(slack, outbox, settings=FAST)
    posted: list[tuple[str, str, str]] = []
    first.add_posted_hook(lambda *args: posted.append(args))
    first.start()
    first.show("op:1", msg("running"), channel="C1")
    assert first.flush(5)
    slack.fail("chat.update", 500, "internal_error", times=1000)
    slack.fail("chat.postMessage", 503, "service_unavailable", times=1000)
    first.show("op:1", msg("completed"), channel="C1", final=True)
    first.reply("op:1", msg("summary"), channel="C1", final=True)
    assert not first.stop(timeout=0.3)
    assert [(i.kind, i.text) for i in outbox.pending()] == [("message", "completed"), ("reply", "summary")]
    assert posted == [("op:1", "C1", "1.0001")] and outbox.lookup("op:1") == ("C1", "1.0001")

    slack.errors.clear()
    second = Sender(slack, outbox, settings=FAST)
    second.start()
    try:
        assert second.flush(5)
    finally:
        second.stop(1)

    delivered = [
        (m, body["text"], body.get("ts") or body.get("thread_ts"))
        for m, body in slack.calls
        if m in ("chat.update", "chat.postMessage")
    ][-2:]
    assert sorted(delivered) == [
        ("chat.postMessage", "summary", "1.0001"),
        ("chat.update", "completed", "1.0001"),
    ]
    assert outbox.pending() == []


def test_ephemerals_are_sent_to_their_user(slack: FakeSlack, sender: Sender) -> None:
    sender.ephemeral("C1", "U1", msg("only you"))
    assert sender.flush(5)
    assert slack.calls[0][0] == "chat.postEphemeral" and slack.calls[0][1]["user"] == "U1"


def test_a_refused_first_post_is_reported_to_the_unposted_hooks(slack: FakeSlack, sender: Sender) -> None:
    unposted: list[tuple[str, str, str]] = []
    sender.add_unposted_hook(lambda *args: unposted.append(args))
    slack.fail("chat.postMessage", 200, "not_in_channel")
    sender.show("op:1", msg("card"), channel="C9")
    assert sender.flush(5)
    assert unposted == [("op:1", "C9", "not_in_channel")]
    sender.show("op:2", msg("card"), channel="C1")
    assert sender.flush(5)
    slack.fail("chat.update", 200, "message_not_found")
    sender.show("op:2", msg("edited"), channel="C1")
    assert sender.flush(5)
    assert [m for m, _ in slack.calls][-1] == "chat.update"
    assert unposted == [("op:1", "C9", "not_in_channel")], "only a first post counts"


def test_tell_falls_back_to_a_direct_message_when_the_ephemeral_is_refused(
    slack: FakeSlack, sender: Sender
) -> None:
    sender.tell("C1", "U1", msg("shown to you"))
    assert sender.flush(5)
    assert [m for m, _ in slack.calls] == ["chat.postEphemeral"], "the ephemeral went: no DM"
    slack.fail("chat.postEphemeral", 200, "not_in_channel")
    sender.tell("C9", "U2", msg("told privately"))
    assert sender.flush(5)
    method, body = slack.calls[-1]
    assert (method, body["channel"], body["text"]) == ("chat.postMessage", "U2", "told privately")
    assert [m for m, _ in slack.calls].count("chat.postMessage") == 1


def test_the_workspace_bucket_never_allows_more_than_its_budget_in_any_minute() -> None:
    for per_minute in (10.0, 60.0, 120.0, 600.0):
        bucket = workspace_post_bucket(per_minute, now=0.0)
        taken: list[float] = []
        now = 0.0
        while now < 300.0:  # take every token the moment it is there, for five minutes
            now += bucket.wait_time(now)
            bucket.take(now)
            taken.append(now)
        peak = max(sum(1 for t in taken if start <= t < start + 60.0) for start in taken)
        assert peak <= per_minute, (per_minute, peak)
        assert peak >= per_minute - 1, "the budget is used, not wasted"


def test_the_workspace_post_budget_holds_and_finals_go_first_under_it(outbox: MemoryOutbox) -> None:
    """Forty clusters' messages, each in its own channel (the per-channel pace never binds), posted
    under a budget of 600 a minute: after the burst, posts go out at the budget's pace, never
    faster, and finals queued while forty others wait for their turn are the next ones posted."""
    slack = FakeSlack()
    budget = SenderSettings(
        update_interval=1.0, updates_per_minute=40, posts_per_second=1.0, posts_per_minute=600
    )
    sender = Sender(slack, outbox, settings=budget)
    clusters = [f"c{n:02d}" for n in range(40)]
    for cluster in clusters:
        sender.show(f"op:{cluster}", msg(f"{cluster} card"), channel=f"C{cluster}", share=cluster)
    sender.start()
    try:
        posted = slack.wait(lambda calls: len(calls) >= 15, timeout=10)
        queued_at = len(posted)
        assert queued_at < 30, "the budget let every card out at once"
        failing = clusters[:5]  # the first five, already posted: their failure summaries
        for cluster in failing:
            sender.reply(
                f"op:{cluster}", msg(f"{cluster} failed"), channel=f"C{cluster}", final=True, share=cluster
            )
        assert sender.flush(20)
    finally:
        sender.stop(1)

    texts = slack.texts("chat.postMessage")
    assert len(texts) == 45
    # One post may have been on its way when the finals came: they are the next five after it.
    assert {f"{c} failed" for c in failing} <= set(texts[queued_at : queued_at + 6]), texts[queued_at:]
    bucket = workspace_post_bucket(600, now=0.0)
    for i, start in enumerate(slack.at):
        for j in range(i, len(slack.at)):  # in any window, at most the burst plus its refill
            window = slack.at[j] - start
            assert j - i + 1 <= bucket.capacity + bucket.rate * window + 1, (i, j, window)


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=2.0, capacity=2.0, now=0.0)
    assert bucket.wait_time(0.0) == 0.0
    bucket.take(0.0)
    bucket.take(0.0)
    assert bucket.wait_time(0.0) == pytest.approx(0.5)
    assert bucket.wait_time(0.5) == 0.0


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CALL_SECONDS = 2.0
"""Virtual time one Web API call takes here: the budget below always has a token by then."""
FLEET = {f"c{n}": n + 1 for n in range(6)}
"""Cluster -> how many operation messages it has running at once (1 to 6)."""


class FleetSlack(FakeSlack):
    """Each call takes CALL_SECONDS of virtual time, during which every running operation of every
    cluster reports progress again (as a fleet's drains do, far faster than Slack allows)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        self.sender: Sender | None = None
        self.running: set[str] = set()
        self.renderings = 0
        self.served: list[tuple[str, str, str]] = []
        """(method, message key, text) in call order."""
        self.on_call: list[Any] = []

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
        answer = super().api_call(api_method, json=json)
        self.clock.now += CALL_SECONDS
        text = str((json or {}).get("text", ""))
        self.served.append((api_method, text.split(" ", maxsplit=1)[0], text))
        assert self.sender is not None
        for key in sorted(self.running):
            self.renderings += 1
            self.sender.show(
                key, msg(f"{key} progress {self.renderings}"), channel=_channel(key), share=key[3:5]
            )
        for hook in self.on_call:
            hook(len(self.served))
        return answer


def _channel(key: str) -> str:
    return "C" + key[3:5].upper()


def test_a_fleets_progress_shares_the_workspace_budget_fairly_and_finals_go_first(
    outbox: MemoryOutbox,
) -> None:
    clock = VirtualClock()
    slack = FleetSlack(clock)
    pace = SenderSettings(update_interval=5.0, updates_per_minute=40, posts_per_second=1.0)
    sender = Sender(slack, outbox, settings=pace, clock=clock)
    slack.sender = sender
    keys = {cluster: [f"op:{cluster}-{m}" for m in range(n)] for cluster, n in FLEET.items()}
    progress_phase = (sum(FLEET.values()), sum(FLEET.values()) + 120)
    finishing_first = ["c0", "c2", "c4"]
    finals_at: dict[str, int] = {}

    def script(calls: int) -> None:
        if calls in (progress_phase[1], progress_phase[1] + 30):
            clock.now += 10.0  # the operations end a little later, not within the edit just made
        if calls == progress_phase[1]:  # half the fleet finishes while the rest keeps reporting
            for cluster in finishing_first:
                for key in keys[cluster]:
                    slack.running.discard(key)
                    sender.show(key, msg(f"{key} final"), channel=_channel(key), final=True, share=cluster)
                    finals_at[key] = calls
        if calls == progress_phase[1] + 30:
            for cluster in ("c1", "c3", "c5"):
                for key in keys[cluster]:
                    slack.running.discard(key)
                    sender.show(key, msg(f"{key} final"), channel=_channel(key), final=True, share=cluster)

    slack.on_call.append(script)
    for cluster, cluster_keys in keys.items():
        for key in cluster_keys:
            sender.show(key, msg(f"{key} starting"), channel=_channel(key), share=cluster)
            slack.running.add(key)
    sender.start()
    try:
        assert sender.flush(20), "the sender never caught up with the fleet"
    finally:
        sender.stop(1)

    first, last = progress_phase
    progress = [key for method, key, _ in slack.served[first:last] if method == "chat.update"]
    assert len(progress) == last - first
    per_cluster = {cluster: sum(1 for key in progress if key[3:5] == cluster) for cluster in FLEET}
    fair = len(progress) / len(FLEET)
    print(f"\nchat.update per cluster over {len(progress)} calls: {per_cluster} (fair share {fair:.0f})")
    for cluster, served in per_cluster.items():
        assert 0.75 * fair <= served <= 1.25 * fair, f"{cluster} got {served} of {len(progress)}"
    assert slack.renderings > 10 * len(progress), "the renderings did not outpace the budget"

    # The finishing half's finals are the very next writes, before any other cluster's progress.
    after = [text for method, _, text in slack.served[last:] if method == "chat.update"]
    finals = [f"{key} final" for cluster in finishing_first for key in keys[cluster]]
    assert sorted(after[: len(finals)]) == sorted(finals)
    # Every message ends on its final rendering, each edited with it exactly once.
    final_texts = [text for method, _, text in slack.served if text.endswith(" final")]
    assert sorted(final_texts) == sorted(f"{key} final" for ks in keys.values() for key in ks)
    assert sender.tracked() == 0


# -- a post whose answer was lost ---------------------------------------------------------------------


@dataclass
class LosingSlack(FakeSlack):
    """FakeSlack that can lose the answer of posts it made (the client timed out: TimeoutError) and
    answers conversations.history / conversations.replies from what it posted."""

    lose: int = 0
    """The next `lose` chat.postMessage calls are posted, then answered too late."""
    posted: list[dict[str, Any]] = field(default_factory=list)

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
        body = dict(json or {})
        if api_method in ("conversations.history", "conversations.replies"):
            answer = super().api_call(api_method, json=body)  # recorded; may raise a scripted error
            thread = body.get("ts")
            found = [m for m in self.posted if m["channel"] == body["channel"] and m.get("thread") == thread]
            return {**answer, "messages": found}
        answer = super().api_call(api_method, json=body)
        if api_method == "chat.postMessage":
            message = {"channel": body["channel"], "thread": body.get("thread_ts"), "ts": answer["ts"]}
            self.posted.append({**message, "metadata": body.get("metadata")})
            with self.cond:
                if self.lose:
                    self.lose -= 1
                    raise TimeoutError("The read operation timed out")
        return answer


def test_every_post_and_reply_carries_an_opaque_key_in_its_metadata(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:secret-name", msg("card"), channel="C1")
    sender.reply("op:secret-name", msg("reply one"), channel="C1")
    sender.reply("op:secret-name", msg("reply two"), channel="C1")
    assert sender.flush(5)

    metadata = [body["metadata"] for m, body in slack.calls if m == "chat.postMessage"]
    assert [m["event_type"] for m in metadata] == ["scalebot_post"] * 3
    keys = [m["event_payload"]["key"] for m in metadata]
    assert len(set(keys)) == 3 and all(len(k) == 32 and int(k, 16) >= 0 for k in keys)  # random IDs
    assert [body.get("metadata") for m, body in slack.calls if m != "chat.postMessage"] == []


def test_a_card_whose_answer_was_lost_is_found_and_adopted_not_posted_again(outbox: MemoryOutbox) -> None:
    slack = LosingSlack(lose=1)
    sender = Sender(slack, outbox, settings=FAST)
    posted: list[tuple[str, str, str]] = []
    sender.add_posted_hook(lambda *args: posted.append(args))
    sender.start()
    try:
        sender.show("op:1", msg("running"), channel="C1")
        sender.reply("op:1", msg("Cordoned"), channel="C1")
        assert sender.flush(10)
    finally:
        sender.stop(1)

    methods = [m for m, _ in slack.calls]
    assert methods[:2] == ["chat.postMessage", "conversations.history"]
    assert sorted(methods[2:]) == ["chat.postMessage", "chat.update"]  # the reply, the card's edit
    lookup = slack.calls[1][1]
    assert (
        lookup["channel"] == "C1" and lookup["include_all_metadata"] is True and float(lookup["oldest"]) > 0
    )
    # The card posted before the answer was lost is the card: edited to the latest rendering, and
    # the thread goes under it.
    assert posted == [("op:1", "C1", "1.0001")] and sender.message_ts("op:1") == "1.0001"
    after = dict(slack.calls[2:])
    assert after["chat.update"]["ts"] == "1.0001" and after["chat.update"]["text"] == "running"
    assert after["chat.postMessage"]["thread_ts"] == "1.0001"


def test_a_lookup_refused_by_a_rate_limit_falls_back_to_posting_again(outbox: MemoryOutbox) -> None:
    slack = LosingSlack()
    limited: list[tuple[str, float]] = []
    sender = Sender(
        slack, outbox, settings=FAST, metrics=SenderMetrics(rate_limited=lambda m, s: limited.append((m, s)))
    )
    sender.start()
    try:
        sender.show("op:1", msg("running"), channel="C1")
        assert sender.flush(5)
        slack.lose = 1
        slack.fail("conversations.replies", 429, "ratelimited", {"Retry-After": "30"})
        sender.reply("op:1", msg("Cordoned"), channel="C1")
        assert sender.flush(10)
    finally:
        sender.stop(1)

    methods = [m for m, _ in slack.calls]
    assert methods == ["chat.postMessage", "chat.postMessage", "conversations.replies", "chat.postMessage"]
    assert slack.texts("chat.postMessage") == ["running", "Cordoned", "Cordoned"]  # at-least-once, never lost
    assert limited == [("conversations.replies", 30.0)]


class RecordingOutbox(MemoryOutbox):
    """MemoryOutbox that notes, at each Slack call, which post attempts it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[str, float] | None]] = []


def test_a_post_is_recorded_as_attempted_before_it_leaves_and_forgotten_once_settled() -> None:
    outbox = RecordingOutbox()

    class Watching(FakeSlack):
        def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
            body = json or {}
            if api_method == "chat.postMessage":
                key = "op:1" if not body.get("thread_ts") else body["metadata"]["event_payload"]["key"]
                outbox.seen.append((body["text"], outbox.attempted(key)))
            return super().api_call(api_method, json=json)

    slack = Watching()
    sender = Sender(slack, outbox, settings=FAST, wall_clock=lambda: 1000.0)
    sender.start()
    try:
        sender.show("op:1", msg("card"), channel="C1")
        sender.reply("op:1", msg("progress"), channel="C1")
        sender.reply("op:1", msg("done"), channel="C1", final=True)
        assert sender.flush(5)
    finally:
        sender.stop(1)

    [card_key] = [b["metadata"]["event_payload"]["key"] for m, b in slack.calls if not b.get("thread_ts")]
    final_id = next(b["metadata"]["event_payload"]["key"] for _, b in slack.calls if b["text"] == "done")
    # The card and the final reply (both sent again by a restarted process) are recorded while
    # they are in flight; a non-final reply (never sent again) is not.
    assert outbox.seen == [("card", (card_key, 1000.0)), ("progress", None), ("done", (final_id, 1000.0))]
    assert outbox.attempted("op:1") is None and outbox.attempted(final_id) is None  # settled


def _show_once(sender: Sender, text: str) -> None:
    """Start `sender`, show message op:1 in C1, wait until it is delivered, stop."""
    sender.start()
    try:
        sender.show("op:1", msg(text), channel="C1")
        assert sender.flush(5)
    finally:
        sender.stop(1)


def test_a_card_an_earlier_process_was_posting_is_looked_for_and_adopted_not_posted_again() -> None:
    outbox = MemoryOutbox()
    outbox.attempting("op:1", "k" * 32, 1000.0)  # the process died with this post in flight
    slack = LosingSlack()
    # Slack processed that call after its sender died: the card is in the channel.
    slack.posted.append({"channel": "C1", "thread": None, "ts": "0.9", "metadata": post_metadata("k" * 32)})
    sender = Sender(slack, outbox, settings=FAST, wall_clock=lambda: 1000.0 + 31.0, call_timeout=15.0)
    posted: list[tuple[str, str, str]] = []
    sender.add_posted_hook(lambda *args: posted.append(args))
    _show_once(sender, "running")

    assert [m for m, _ in slack.calls] == ["conversations.history", "chat.update"]
    assert float(slack.calls[0][1]["oldest"]) == 1000.0 - LOOKUP_MARGIN_SECONDS
    assert posted == [("op:1", "C1", "0.9")] and outbox.lookup("op:1") == ("C1", "0.9")
    assert slack.calls[1][1]["ts"] == "0.9" and slack.calls[1][1]["text"] == "running"
    assert outbox.attempted("op:1") is None


def test_the_look_waits_until_slack_has_had_twice_the_client_timeout() -> None:
    outbox = MemoryOutbox()
    started = time.time()
    outbox.attempting("op:1", "k" * 32, started)  # just sent by a process that died at once
    slack = LosingSlack()
    _show_once(Sender(slack, outbox, settings=FAST, call_timeout=0.25), "running")

    assert [m for m, _ in slack.calls] == ["conversations.history", "chat.postMessage"]  # not found
    looked_at = slack.at[0] - time.monotonic() + time.time()
    assert looked_at >= started + 0.5 - 0.01, "looked before Slack had 2 x the client timeout"
    # The new post carries the same metadata key, so a later lookup would find either.
    assert slack.calls[1][1]["metadata"] == post_metadata("k" * 32)


def test_a_final_reply_an_earlier_process_was_posting_is_found_in_the_thread_not_posted_again() -> None:
    outbox = MemoryOutbox()
    outbox.remember("op:1", "C1", "0.5")
    reply = OutboxItem(id="r" * 32, kind="reply", key="op:1", channel="C1", text="done", final=True)
    outbox.add(reply)
    outbox.attempting(reply.id, reply.id, 1000.0)
    slack = LosingSlack()
    slack.posted.append({"channel": "C1", "thread": "0.5", "ts": "0.7", "metadata": post_metadata(reply.id)})
    sender = Sender(slack, outbox, settings=FAST, wall_clock=lambda: 1100.0)
    sender.start()
    try:
        assert sender.flush(5)
    finally:
        sender.stop(1)

    assert [(m, b.get("ts")) for m, b in slack.calls] == [("conversations.replies", "0.5")]
    assert outbox.pending() == [] and outbox.attempted(reply.id) is None


def test_a_card_given_up_forgets_its_attempt(slack: FakeSlack, outbox: MemoryOutbox) -> None:
    sender = Sender(slack, outbox, settings=FAST)
    sender.start()
    try:
        slack.fail("chat.postMessage", 200, "channel_not_found")
        sender.show("op:1", msg("card"), channel="C404")
        assert sender.flush(5)
    finally:
        sender.stop(1)

    assert [m for m, _ in slack.calls] == ["chat.postMessage"] and outbox.attempted("op:1") is None


def test_a_clean_error_answer_is_retried_without_a_lookup(slack: FakeSlack, sender: Sender) -> None:
    sender.show("op:1", msg("running"), channel="C1")
    assert sender.flush(5)
    slack.fail("chat.postMessage", 500, "internal_error")  # Slack answered: it did not post
    sender.reply("op:1", msg("Cordoned"), channel="C1")
    assert sender.flush(5)

    assert [m for m, _ in slack.calls] == ["chat.postMessage"] * 3

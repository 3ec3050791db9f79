"""The one Slack writer: every chat.postMessage, chat.update and chat.postEphemeral goes here.

One thread owns all Web API writes, so a slow or rate-limited Slack stalls nobody else (the
engine emits events; listeners enqueue and return). What it does with the queue:
- messages are addressed by a key (`op:<id>`): the first rendering is posted, later ones edit
  that message in place; only the latest unsent rendering of a message is kept (coalescing),
  and a rendering equal to what Slack already shows is not sent at all;
- one message is updated at most every `update_interval` seconds, and all chat.update calls
  share a token bucket below Slack's Tier 3 (~50/min per workspace);
- that budget is shared fairly between `share`s (a message's cluster): among the writes ready
  at once, the share served least recently goes first, so a fleet of clusters sleeping at the
  same minute each get their turn however many messages or renderings one of them produces;
  within a share, the message waiting longest goes first (a newer rendering replacing a pending
  one keeps its place in line, so a message that re-renders often is not pushed to the back);
- chat.postMessage (thread replies and direct messages included) is paced per channel: one per
  second after a burst of at most two (Slack: about one per second, short bursts only); and
  across the workspace by a second token bucket, `posts_per_minute` at most in any rolling minute
  (Slack's workspace-wide limit, "several hundred a minute"): the bucket's burst plus what it
  refills in a minute is exactly the budget, so no minute exceeds it however the posts fall; the
  same fair turns between shares, finals first, decide who gets each token;
- thread replies of a message go out in order, after the message itself exists;
- final renderings jump the queue, are never coalesced into a non-final one, are persisted in
  the `Outbox` before being accepted and marked sent only after Slack said ok, so a restart
  still delivers them; a final waits at least `FINAL_EDIT_GAP` after the previous edit of its
  message, so one arriving right after an update replaces the pending edit instead of
  editing the message twice in a moment;
- an edit always carries `blocks` (`[]` for a text-only rendering): without it Slack keeps the
  old blocks, and a decided card would still show Approve / Reject;
- once a message's final rendering and its replies are delivered, its state is dropped; only
  its key is kept (bounded), so a late event can never edit a finished message again;
- a 429 blocks that method for its Retry-After (the sender handles it itself, so it can keep
  coalescing and other methods keep flowing); 5xx and transport errors back off and retry;
- a post is delivered once although Slack's answer can be lost: every chat.postMessage carries
  message metadata naming an opaque key (post_lookup), and after a failure that Slack may still
  have processed (the client's timeout, a connection broken after the request left) the retry,
  given as long again as the failed call took, first reads the thread (conversations.replies)
  or the channel (conversations.history) for a message with that key and adopts its ts instead
  of posting again. Those are Tier 3 reads paced by their own small bucket; they happen only
  after such a failure, so they are rare. A lookup that fails (a missing `channels:history` /
  `groups:history` scope, a 429, an error) posts again, as before: at-least-once, never lost.
  A process can die while Slack holds its post, so each post that a restarted process would send
  again (a message, a final reply) is recorded in the outbox before it leaves, with its metadata
  key, until it is settled; the next process then looks for it, no sooner than twice the client's
  timeout after that attempt (when this process would have looked), before posting it.
The WebClient given here must not retry a request that may have reached Slack (a timeout or a
reset after sending: the sender looks before posting again); retrying one that never left (a
refused connection) is fine, which is what `bot.slack.app.web_client(for_sender=True)` does.
One module over 600 lines on purpose: the rules above act on one queue owned by one thread, and
splitting them would share that queue's state across modules.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from slack_sdk.errors import SlackApiError

from bot.config.settings import SenderSettings
from bot.slack.blocks.kit import Message
from bot.slack.delivery.call_outcome import Result, TokenBucket, backoff, classify
from bot.slack.delivery.outbox import Outbox, OutboxItem
from bot.slack.delivery.post_lookup import (
    can_look_up,
    find_post,
    lookup_request,
    may_have_landed,
    post_metadata,
)

log = logging.getLogger(__name__)

_MAX_ATTEMPTS = 8
"""Non-final writes give up after this many failed attempts; finals never do."""
FINAL_EDIT_GAP = 1.0
"""Seconds between the last edit of a message and its final edit (at most `update_interval`)."""
DEFAULT_CALL_TIMEOUT = 15.0
"""Seconds the WebClient waits for one call (`bot.slack.app.web_client`'s default)."""
POST_BURST = 2.0
"""chat.postMessage calls one channel may get at once before the per-second pace applies."""
POST_WORKSPACE_BURST = 10.0
"""chat.postMessage calls the whole workspace may get at once, out of its per-minute budget."""
_FINISHED_KEYS = 10_000
"""How many finished message keys are remembered, to refuse late renderings of them."""
_DM_FALLBACK = "dm-fallback"
"""Key of an ephemeral that becomes a direct message when Slack refuses it (`tell`)."""
LOOKUPS_PER_MINUTE = 20.0
"""conversations.replies / conversations.history calls at most, well under their Tier 3 (~50 a
minute per workspace, for internal and Marketplace apps; a commercially distributed
non-Marketplace app gets 1 a minute since 2025, and a lookup refused with 429 posts again): only
a post whose answer was lost needs one, so they are rare."""
LOOKUP_BURST = 2.0


class SlackApi(Protocol):
    """The part of slack_sdk.WebClient the sender uses."""

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any: ...


def _ignore(*_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class SenderMetrics:
    """Hooks to bind to Prometheus counters; every callable must be cheap and never raise."""

    call: Callable[[str], None] = _ignore
    """A Web API call attempt (method)."""
    rate_limited: Callable[[str, float], None] = _ignore
    """A 429 (method, Retry-After seconds)."""
    error: Callable[[str, str], None] = _ignore
    """A failed call (method, error code)."""
    coalesced: Callable[[str], None] = _ignore
    """A rendering that needed no call: replaced by a newer one, or unchanged (key)."""


@dataclass(slots=True)
class _Retry:
    """When the next attempt may happen after failures (backoff), and how many failed."""

    retry_at: float = 0.0
    attempts: int = 0
    maybe_posted_since: float | None = None
    """Unix time of the first attempt of the current post that Slack may have processed without
    the answer arriving: look for it before posting again. Kept across `reset()` (a newer
    rendering does not undo a post that may have landed); cleared once the post is settled."""
    look_not_before: float = 0.0
    """Monotonic time before which that post is not looked for: an earlier process sent it and
    Slack may still be holding the call (kept across `reset()`, like `maybe_posted_since`)."""

    def failed(self, now: float) -> int:
        self.attempts += 1
        self.retry_at = now + backoff(self.attempts)
        return self.attempts

    def reset(self) -> None:
        self.retry_at, self.attempts = 0.0, 0


@dataclass(slots=True)
class _Lane(_Retry):
    """Writes that go out strictly in order: a thread's replies, or the ephemerals."""

    items: deque[tuple[int, OutboxItem]] = field(default_factory=deque)

    def pop(self) -> None:
        self.items.popleft()
        self.reset()
        self.maybe_posted_since, self.look_not_before = None, 0.0


@dataclass(slots=True, kw_only=True)
class _Msg(_Retry):
    """One message key: where it lives, its latest unsent rendering, what Slack shows now."""

    key: str
    channel: str
    thread_ts: str = ""
    ts: str | None = None
    pending: OutboxItem | None = None
    pending_seq: int = 0
    sent: tuple[str, tuple[Any, ...]] | None = None
    sent_at: float = float("-inf")
    final_done: bool = False
    share: str = ""
    """Whose turn this message's writes take (the cluster), for fair sharing of the budget."""
    replies: _Lane = field(default_factory=_Lane)
    post_key: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The opaque key its post carries as metadata, the same for every rendering and attempt."""


JobKind = Literal["post", "update", "reply", "ephemeral"]
_METHOD: dict[JobKind, str] = {
    "post": "chat.postMessage",
    "update": "chat.update",
    "reply": "chat.postMessage",
    "ephemeral": "chat.postEphemeral",
}
_BASE_PRIORITY: dict[JobKind, int] = {"ephemeral": 1, "post": 2, "reply": 3, "update": 4}


@dataclass(frozen=True, slots=True)
class _Lookup:
    """Where to look for a post that may have landed, and the key it carries."""

    method: str
    args: dict[str, Any]
    key: str


@dataclass(frozen=True, slots=True)
class _Job:
    kind: JobKind
    item: OutboxItem
    msg: _Msg | None
    lookup: _Lookup | None = None
    """Look for this post first: an earlier attempt may have landed."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    result: Result
    detail: Any = None
    """The new message's ts (a post), Retry-After seconds (429) or the error code."""
    maybe_posted_at: float | None = None
    """Unix time of an attempt of a post that failed after its request left: Slack may have posted it."""
    took: float = 0.0
    """Seconds the failed call took (about the client's timeout when it timed out)."""
    adopted: bool = False
    """The post was found in Slack (its answer had been lost): `detail` is its ts."""


class Sender:
    def __init__(
        self,
        client: SlackApi,
        outbox: Outbox,
        *,
        settings: SenderSettings | None = None,
        metrics: SenderMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        """`call_timeout`: how long `client` waits for one call; a post an earlier process sent is
        looked for no sooner than twice that after it left, as this process would have."""
        self._client = client
        self._call_timeout = call_timeout
        self._outbox = outbox
        self._settings = settings or SenderSettings()
        self._metrics = metrics or SenderMetrics()
        self._posted_hooks: list[Callable[[str, str, str], None]] = []
        self._unposted_hooks: list[Callable[[str, str, str], None]] = []
        self._unposted: list[tuple[str, str, str]] = []
        self._clock = clock
        self._wall_clock = wall_clock
        """Unix time, for the `oldest` of a lookup (Slack's ts are Unix times)."""
        self._cond = threading.Condition()
        self._messages: dict[str, _Msg] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._ephemerals = _Lane()
        self._seq = itertools.count()
        self._blocked_until: dict[str, float] = {}
        self._turns = itertools.count()
        self._served: dict[str, int] = {}
        """The turn at which each share was last served (fair sharing picks the oldest)."""
        now = clock()
        per_minute = self._settings.updates_per_minute
        self._updates = TokenBucket(per_minute / 60.0, max(1.0, min(5.0, per_minute / 10)), now)
        self._posts: dict[str, TokenBucket] = {}
        self._workspace_posts = workspace_post_bucket(self._settings.posts_per_minute, now)
        self._lookups = TokenBucket(LOOKUPS_PER_MINUTE / 60.0, LOOKUP_BURST, now)
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- public API (any thread) ------------------------------------------------------------------

    def start(self) -> None:
        """Load what the outbox still owes Slack, then start the writer thread."""
        for item in self._outbox.pending():
            self._accept(item, persisted=True)
        self._thread = threading.Thread(target=self._run, name="scalebot-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Deliver what can be delivered within `timeout`, then stop. Undelivered finals stay in
        the outbox for the next start. True when everything was delivered."""
        with self._cond:
            if self._stopping:
                return self._idle()
        flushed = self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, timeout))
        return flushed

    def show(
        self,
        key: str,
        message: Message,
        *,
        channel: str,
        thread_ts: str = "",
        final: bool = False,
        broadcast: bool = False,
        share: str = "",
    ) -> None:
        """Post message `key` the first time, edit it in place afterwards; a message posted in a
        thread (`thread_ts`) is also shown in the channel when `broadcast`. `share` (the cluster)
        is whose turn its writes take when the budget is shared."""
        self._accept(
            self._item(
                "message", key, channel, message, thread_ts=thread_ts, final=final, broadcast=broadcast
            ),
            share=share,
        )

    def reply(
        self,
        key: str,
        message: Message,
        *,
        channel: str,
        final: bool = False,
        broadcast: bool = False,
        share: str = "",
    ) -> None:
        """A reply in the thread of message `key`, after the replies queued before it;
        `broadcast` also shows it in the channel."""
        self._accept(
            self._item("reply", key, channel, message, final=final, broadcast=broadcast), share=share
        )

    def ephemeral(self, channel: str, user: str, message: Message) -> None:
        self._accept(self._item("ephemeral", "", channel, message, user=user))

    def tell(self, channel: str, user: str, message: Message) -> None:
        """Privately: an ephemeral in `channel`, or a direct message when Slack refuses that (an
        ephemeral needs the bot in the channel too)."""
        self._accept(self._item("ephemeral", _DM_FALLBACK, channel, message, user=user))

    def add_posted_hook(self, hook: Callable[[str, str, str], None]) -> None:
        """Call `hook(key, channel, ts)` (on the sender thread) whenever a message is first posted."""
        self._posted_hooks.append(hook)

    def add_unposted_hook(self, hook: Callable[[str, str, str], None]) -> None:
        """Call `hook(key, channel, error)` (on the sender thread) when the first post of a message
        failed for good: refused (`not_in_channel`, `channel_not_found`, `is_archived`, …) or given
        up after retries (`gave_up:<last error>`). Later renderings of it are dropped the same way."""
        self._unposted_hooks.append(hook)

    def adopt(self, key: str, channel: str, ts: str) -> None:
        """Message `key` already exists (posted before a restart): future renderings edit it."""
        with self._cond:
            msg = self._message(key, channel, "")
            if msg.ts is None:
                msg.ts = ts

    def message_ts(self, key: str) -> str | None:
        with self._cond:
            msg = self._messages.get(key)
            return msg.ts if msg else None

    def tracked(self) -> int:
        """Messages whose state the sender still holds (finished ones are pruned)."""
        with self._cond:
            return len(self._messages)

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight; False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(self._idle, timeout=timeout)

    # -- queueing ---------------------------------------------------------------------------------

    @staticmethod
    def _item(
        kind: Literal["message", "reply", "ephemeral"],
        key: str,
        channel: str,
        message: Message,
        *,
        thread_ts: str = "",
        user: str = "",
        final: bool = False,
        broadcast: bool = False,
    ) -> OutboxItem:
        return OutboxItem(
            id=uuid.uuid4().hex,
            kind=kind,
            key=key,
            channel=channel,
            text=message.text,
            blocks=tuple(message.block_dicts()),
            thread_ts=thread_ts,
            user=user,
            final=final,
            broadcast=broadcast,
        )

    def _accept(self, item: OutboxItem, *, persisted: bool = False, share: str = "") -> None:
        with self._cond:
            if item.kind == "ephemeral":
                self._ephemerals.items.append((next(self._seq), item))
            elif item.kind == "reply":
                msg = self._message(item.key, item.channel, "", share)
                self._persist(item, persisted)
                if persisted and not msg.replies.items:
                    # Only a lane's first reply is ever in flight: an earlier process may have
                    # sent this one when it died.
                    self._restore_attempt(msg.replies, item.id, item.id)
                msg.replies.items.append((next(self._seq), item))
            else:
                self._accept_rendering(item, persisted, share)
            self._cond.notify_all()

    def _accept_rendering(self, item: OutboxItem, persisted: bool, share: str = "") -> None:
        if item.key in self._finished:
            # Its final state is in Slack and its state was pruned: nothing may edit it again.
            self._metrics.coalesced(item.key)
            if persisted:
                self._drop(item)
            return
        msg = self._message(item.key, item.channel, item.thread_ts, share)
        current = msg.pending
        if not item.final and (msg.final_done or (current is not None and current.final)):
            # Never let a late progress event overwrite "Completed" / "Rejected".
            self._metrics.coalesced(item.key)
            if persisted:
                self._drop(item)
            return
        if msg.ts is not None and msg.sent == (item.text, item.blocks):
            self._metrics.coalesced(item.key)
            self._set_pending(msg, None)
            if persisted:
                self._drop(item)
            return
        self._persist(item, persisted)
        self._set_pending(msg, item)

    def _persist(self, item: OutboxItem, persisted: bool) -> None:
        if item.final and not persisted:
            try:
                self._outbox.add(item)
            except Exception:  # durability is best effort; delivery must still happen
                log.exception("could not persist a final Slack message", extra={"key": item.key})
                self._metrics.error("outbox", "persist_failed")

    def _drop(self, item: OutboxItem) -> None:
        if item.final:
            try:
                self._outbox.mark_sent(item.id)
            except Exception:
                log.exception("could not mark an outbox item done", extra={"key": item.key})

    def _set_pending(self, msg: _Msg, item: OutboxItem | None) -> None:
        if msg.pending is not None and msg.pending is not item:
            self._metrics.coalesced(msg.key)
            self._drop(msg.pending)
        if msg.pending is None:
            # A rendering replacing a pending one keeps its place in line: a message that
            # re-renders faster than the budget allows must not fall to the back every time.
            msg.pending_seq = next(self._seq)
        msg.pending = item
        msg.reset()

    def _message(self, key: str, channel: str, thread_ts: str, share: str = "") -> _Msg:
        msg = self._messages.get(key)
        if msg is not None and share:
            msg.share = share
        if msg is None:
            msg = _Msg(key=key, channel=channel, thread_ts=thread_ts, share=share)
            known = self._outbox.lookup(key) if key else None
            if known is not None:
                msg.channel, msg.ts = known
            elif key:
                msg.post_key = self._restore_attempt(msg, key, msg.post_key)
            self._messages[key] = msg
        return msg

    def _restore_attempt(self, state: _Retry, key: str, post_key: str) -> str:
        """The post key to use for `key`: the one an earlier process's unsettled attempt carried
        (then look for that post first, once Slack has had as long as this process would have
        given it), else `post_key`."""
        try:
            attempt = self._outbox.attempted(key)
        except Exception:  # at worst the post shows twice, as before the record existed
            log.exception("could not read whether %s was being posted", key)
            return post_key
        if attempt is None:
            return post_key
        recorded_key, at = attempt
        state.maybe_posted_since = at
        left = at + 2 * self._call_timeout - self._wall_clock()
        state.look_not_before = self._clock() + max(0.0, left)
        log.info(
            "an earlier process was posting %s when it stopped: looking for it in Slack before posting",
            key,
        )
        return recorded_key

    def _idle(self) -> bool:
        if self._busy or self._ephemerals.items:
            return False
        return all(m.pending is None and not m.replies.items for m in self._messages.values())

    # -- the writer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                job = None
                while job is None:
                    if self._stopping:
                        return
                    job, wait = self._next_job(self._clock())
                    if job is None:
                        self._cond.wait(timeout=wait)
                self._busy = True
            outcome = self._call(job)  # never raises
            with self._cond:
                posted = self._apply(job, outcome)
            if posted is not None:
                self._announce(*posted)
            self._report_unposted()
            # Idle only once the new message's ts is recorded: flush() (and stop()) promise that
            # nothing is in flight, and whoever flushed reads that ts next.
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _next_job(self, now: float) -> tuple[_Job | None, float | None]:
        best: tuple[tuple[int, int, int], _Job] | None = None
        waits: list[float] = []

        def consider(
            kind: JobKind, item: OutboxItem, msg: _Msg | None, seq: int, *, ready_at: float, final: bool
        ) -> None:
            nonlocal best
            method = _METHOD[kind]
            ready_at = max(ready_at, self._blocked_until.get(method, 0.0))
            lookup = None
            if kind == "update":
                ready_at = max(ready_at, now + self._updates.wait_time(now))
            elif kind in ("post", "reply"):
                ready_at = max(
                    ready_at,
                    now + self._post_bucket(item.channel, now).wait_time(now),
                    now + self._workspace_posts.wait_time(now),
                )
                lookup = self._lookup(kind, item, msg, now)
                if lookup is not None:
                    assert msg is not None
                    state = msg.replies if kind == "reply" else msg
                    ready_at = max(ready_at, now + self._lookups.wait_time(now), state.look_not_before)
            if ready_at > now:
                waits.append(ready_at - now)
                return
            share = msg.share if msg is not None else ""
            rank = (0 if final else _BASE_PRIORITY[kind], self._served.get(share, -1), seq)
            if best is None or rank < best[0]:
                best = (rank, _Job(kind, item, msg, lookup))

        if self._ephemerals.items:
            seq, item = self._ephemerals.items[0]
            consider("ephemeral", item, None, seq, ready_at=self._ephemerals.retry_at, final=False)
        for msg in self._messages.values():
            if msg.pending is not None:
                if msg.ts is None:
                    consider(
                        "post",
                        msg.pending,
                        msg,
                        msg.pending_seq,
                        ready_at=msg.retry_at,
                        final=msg.pending.final,
                    )
                else:
                    gap = min(FINAL_EDIT_GAP, self._interval()) if msg.pending.final else self._interval()
                    due = max(msg.retry_at, msg.sent_at + gap)
                    consider(
                        "update", msg.pending, msg, msg.pending_seq, ready_at=due, final=msg.pending.final
                    )
            if msg.replies.items and (msg.ts is not None or msg.pending is None):
                seq, item = msg.replies.items[0]
                final = any(r.final for _, r in msg.replies.items)
                consider("reply", item, msg, seq, ready_at=msg.replies.retry_at, final=final)
        if best is None:
            return None, min(waits) if waits else None
        job = best[1]
        self._served[job.msg.share if job.msg is not None else ""] = next(self._turns)
        if job.kind == "update":
            self._updates.take(now)
        elif job.kind in ("post", "reply"):
            self._post_bucket(job.item.channel, now).take(now)
            self._workspace_posts.take(now)
            if job.lookup is not None:
                self._lookups.take(now)
            elif self._post_state(job).maybe_posted_since is not None:
                log.warning(
                    "Slack may already have posted %s but it cannot be looked for now; posting it "
                    "again (it may show twice)",
                    job.item.key or job.item.channel,
                )
        return job, None

    def _post_state(self, job: _Job) -> _Retry:
        """Where a post's or a reply's attempts are counted: its message, or its thread's lane."""
        state = self._lane(job) or job.msg
        assert state is not None
        return state

    def _lookup(self, kind: JobKind, item: OutboxItem, msg: _Msg | None, now: float) -> _Lookup | None:
        """The read that finds this post if an earlier attempt of it landed; None when no attempt
        may have, or it cannot be read now (a direct message by user ID, the method rate limited:
        then it is posted again, at-least-once as without the lookup)."""
        if msg is None:
            return None
        state = msg.replies if kind == "reply" else msg
        since = state.maybe_posted_since
        channel = (msg.channel or item.channel) if kind == "reply" else item.channel
        if since is None or not can_look_up(channel):
            return None
        thread = (msg.thread_ts or msg.ts or "") if kind == "reply" else msg.thread_ts
        method, args = lookup_request(channel, thread, since)
        if self._blocked_until.get(method, 0.0) > now:
            return None
        return _Lookup(method, args, self._post_key(kind, item, msg))

    @staticmethod
    def _post_key(kind: JobKind, item: OutboxItem, msg: _Msg | None) -> str:
        """A message's post carries its message's key, a reply its own item's (both random IDs)."""
        return msg.post_key if kind == "post" and msg is not None else item.id

    def _interval(self) -> float:
        return self._settings.update_interval

    def _post_bucket(self, channel: str, now: float) -> TokenBucket:
        bucket = self._posts.get(channel)
        if bucket is None:
            rate = self._settings.posts_per_second
            bucket = self._posts[channel] = TokenBucket(rate, max(POST_BURST, rate), now)
        return bucket

    def _payload(self, job: _Job) -> dict[str, Any]:
        item = job.item
        payload: dict[str, Any] = {"channel": item.channel, "text": item.text}
        if item.blocks or job.kind == "update":
            payload["blocks"] = [dict(b) for b in item.blocks]
        msg = job.msg
        if job.kind == "post" and msg is not None and msg.thread_ts:
            payload["thread_ts"] = msg.thread_ts
            if item.broadcast:
                payload["reply_broadcast"] = True
        elif job.kind == "update" and msg is not None:
            payload["channel"], payload["ts"] = msg.channel, msg.ts
        elif job.kind == "reply" and msg is not None:
            payload["channel"] = msg.channel or item.channel
            thread = msg.thread_ts or msg.ts
            if thread:
                payload["thread_ts"] = thread
                if item.broadcast:
                    payload["reply_broadcast"] = True
        elif job.kind == "ephemeral":
            payload["user"] = item.user
        if job.kind in ("post", "reply"):
            payload["metadata"] = post_metadata(self._post_key(job.kind, item, msg))
        return payload

    def _call(self, job: _Job) -> _Outcome:
        """One Web API write (after a lookup, for a post that may have landed), outside the lock."""
        method = _METHOD[job.kind]
        if job.lookup is not None:
            ts = self._look_up(job.lookup, job.item)
            if ts is not None:
                log.info("Slack had posted %s; its answer was lost: not posting it again", job.item.key)
                return _Outcome(Result.OK, ts, adopted=True)
        self._metrics.call(method)
        started, attempted_at = self._clock(), self._wall_clock()
        self._record_attempt(job, attempted_at)
        try:
            response = self._client.api_call(method, json=self._payload(job))
            return _Outcome(Result.OK, response.get("ts") if job.kind == "post" else None)
        except Exception as exc:
            result, detail = classify(exc, has_blocks=bool(job.item.blocks))
            if result is Result.PERMANENT and not isinstance(exc, SlackApiError):
                log.exception("unexpected failure calling %s", method, extra={"key": job.item.key})
            if result is not Result.RATE_LIMITED:
                self._metrics.error(method, str(detail))
            landed = job.kind in ("post", "reply") and may_have_landed(exc)
            return _Outcome(result, detail, attempted_at if landed else None, self._clock() - started)

    @staticmethod
    def _attempt_key(job: _Job) -> str | None:
        """Under which key a post's attempts are recorded: only a post a restarted process would
        send again (a message, whose key the operation renders again: its key; a final reply, kept
        in the outbox: its item ID) and could look for."""
        item, msg = job.item, job.msg
        if msg is None:
            return None
        if job.kind == "post" and can_look_up(item.channel):
            return msg.key
        if job.kind == "reply" and item.final and can_look_up(msg.channel or item.channel):
            return item.id
        return None

    def _record_attempt(self, job: _Job, at: float) -> None:
        """Before a post leaves; the first attempt's record stays until the post is settled."""
        key = self._attempt_key(job)
        if key is None:
            return
        try:
            self._outbox.attempting(key, self._post_key(job.kind, job.item, job.msg), at)
        except Exception:  # best effort, like persisting a final: delivery must still happen
            log.exception("could not record that %s is being posted", key)
            self._metrics.error("outbox", "persist_failed")

    def _look_up(self, lookup: _Lookup, item: OutboxItem) -> str | None:
        """The ts of the post if Slack has it; None if not, or if Slack could not be asked (then
        the caller posts again: a failed lookup must never lose the message)."""
        self._metrics.call(lookup.method)
        try:
            response = self._client.api_call(lookup.method, json=lookup.args)
            return find_post(response.get("messages") or (), lookup.key)
        except Exception as exc:
            result, detail = classify(exc, has_blocks=False)
            if result is Result.RATE_LIMITED:
                self._metrics.rate_limited(lookup.method, float(detail))
                with self._cond:
                    until = self._clock() + float(detail)
                    blocked = self._blocked_until.get(lookup.method, 0.0)
                    self._blocked_until[lookup.method] = max(blocked, until)
            else:
                self._metrics.error(lookup.method, str(detail))
            log.warning(
                "could not look in Slack for %s (%s %s); posting it again (it may show twice)",
                item.key or item.channel,
                lookup.method,
                detail,
            )
            return None

    def _apply(self, job: _Job, outcome: _Outcome) -> tuple[str, str, str] | None:
        """Record a call's outcome; returns (key, channel, ts) when a message was just posted."""
        now = self._clock()
        method = _METHOD[job.kind]
        result, detail = outcome.result, outcome.detail
        if result == Result.OK:
            return self._delivered(job, detail, now, adopted=outcome.adopted)
        if self._answered_unposted(job, outcome) and (key := self._attempt_key(job)):
            self._forget_attempt(key)  # nothing of this post can be in Slack: no need to look
        if result == Result.RATE_LIMITED:
            log.warning("Slack rate limit on %s: waiting %.1fs (Retry-After)", method, detail)
            self._metrics.rate_limited(method, float(detail))
            self._blocked_until[method] = max(self._blocked_until.get(method, 0.0), now + float(detail))
        elif result == Result.TEXT_ONLY:
            log.error(
                "Slack refused the blocks of %s (%s); sending text only", job.item.key or method, detail
            )
            self._replace(job, _text_only(job.item))
        elif result == Result.TRANSIENT:
            if outcome.maybe_posted_at is not None:
                state = self._post_state(job)
                if state.maybe_posted_since is None:
                    state.maybe_posted_since = outcome.maybe_posted_at
            self._retry_later(job, detail, now, outcome)
        else:
            log.error(
                "Slack refused %s for %s: %s; dropped", method, job.item.key or job.item.channel, detail
            )
            self._give_up(job, str(detail))
            if job.kind == "ephemeral" and job.item.key == _DM_FALLBACK:
                self._accept(_direct_message(job.item))
        return None

    def _answered_unposted(self, job: _Job, outcome: _Outcome) -> bool:
        """A failed post that Slack answered (nothing posted), with no earlier attempt that may
        have landed."""
        return (
            job.kind in ("post", "reply")
            and outcome.maybe_posted_at is None
            and self._post_state(job).maybe_posted_since is None
        )

    def _delivered(
        self, job: _Job, ts: str | None, now: float, *, adopted: bool = False
    ) -> tuple[str, str, str] | None:
        item, msg, lane = job.item, job.msg, self._lane(job)
        if adopted and job.kind == "post" and msg is not None and ts:
            # The post found in Slack may show an older rendering than this one (a newer one can
            # replace a pending post): keep this one pending, as an edit of the found message.
            msg.ts, msg.maybe_posted_since, msg.sent = ts, None, None
            msg.reset()
            return (msg.key, msg.channel, ts)
        self._drop(item)
        if lane is not None:
            lane.pop()
            self._prune(msg)
            return None
        assert msg is not None
        posted = None
        if job.kind == "post" and ts:
            msg.ts, msg.maybe_posted_since = ts, None
            posted = (msg.key, msg.channel, ts)
        msg.sent, msg.sent_at = (item.text, item.blocks), now
        msg.final_done = msg.final_done or item.final
        if msg.pending is item:
            msg.pending = None
            msg.reset()
        elif msg.pending is not None and msg.sent == (msg.pending.text, msg.pending.blocks):
            self._set_pending(msg, None)
        if posted is None:
            self._prune(msg)
        return posted

    def _prune(self, msg: _Msg | None) -> None:
        """Forget a message once its final state and every reply are in Slack."""
        if msg is None or not msg.final_done or msg.pending is not None or msg.replies.items:
            return
        if self._messages.get(msg.key) is msg:
            del self._messages[msg.key]
            self._finished[msg.key] = None
            while len(self._finished) > _FINISHED_KEYS:
                self._finished.popitem(last=False)

    def _announce(self, key: str, channel: str, ts: str) -> None:
        """Record where a message now lives; outside the lock, since both hooks may write SQLite."""
        try:
            self._outbox.remember(key, channel, ts)
        except Exception:
            log.exception("could not record where message %s was posted", key)
        for hook in list(self._posted_hooks):
            try:
                hook(key, channel, ts)
            except Exception:
                log.exception("posted hook failed for %s", key)

    def _lane(self, job: _Job) -> _Lane | None:
        if job.kind == "ephemeral":
            return self._ephemerals
        return job.msg.replies if job.kind == "reply" and job.msg is not None else None

    def _retry_later(self, job: _Job, error: Any, now: float, outcome: _Outcome | None = None) -> None:
        state = self._lane(job) or job.msg
        assert state is not None
        attempts = state.failed(now)
        if outcome is not None and outcome.maybe_posted_at is not None:
            # Slack may still be working on it: give it as long again as the call waited before
            # looking, so a post it completes late is found rather than posted twice.
            state.retry_at = max(state.retry_at, now + outcome.took)
            log.warning(
                "Slack %s failed (%s), attempt %d; it may have been posted: looking for it before "
                "posting again",
                _METHOD[job.kind],
                error,
                attempts,
            )
        else:
            log.warning("Slack %s failed (%s), attempt %d; retrying", _METHOD[job.kind], error, attempts)
        if attempts >= _MAX_ATTEMPTS and not job.item.final:
            log.error("giving up on %s for %s after %d attempts", _METHOD[job.kind], job.item.key, attempts)
            self._give_up(job, f"gave_up:{error}")

    def _give_up(self, job: _Job, error: str) -> None:
        self._drop(job.item)
        lane, msg = self._lane(job), job.msg
        if lane is not None:
            lane.pop()
        elif msg is not None and msg.pending is job.item:
            msg.pending = None
            msg.reset()
        if job.kind == "post" and msg is not None:
            msg.maybe_posted_since = None
            self._forget_attempt(msg.key)
            self._unposted.append((msg.key, msg.channel, error))

    def _forget_attempt(self, key: str) -> None:
        try:
            self._outbox.forget_attempt(key)
        except Exception:  # a stale record only makes a later post look first
            log.exception("could not forget the post attempt of %s", key)

    def _report_unposted(self) -> None:
        """Tell the hooks about first posts that failed for good; outside the lock (they may write
        SQLite and queue messages)."""
        with self._cond:
            failed, self._unposted = self._unposted, []
        for key, channel, error in failed:
            for hook in list(self._unposted_hooks):
                try:
                    hook(key, channel, error)
                except Exception:
                    log.exception("unposted hook failed for %s", key)

    def _replace(self, job: _Job, item: OutboxItem) -> None:
        lane, msg = self._lane(job), job.msg
        if lane is not None:
            lane.items[0] = (lane.items[0][0], item)
        elif msg is not None and msg.pending is job.item:
            msg.pending = item


def workspace_post_bucket(per_minute: float, now: float) -> TokenBucket:
    """The workspace's chat.postMessage budget as a token bucket whose burst plus one minute's refill
    is `per_minute`: a full bucket emptied at once and refilled for a minute never exceeds it."""
    burst = max(1.0, min(POST_WORKSPACE_BURST, per_minute / 10))
    return TokenBucket(max(per_minute - burst, 1.0) / 60.0, burst, now)


def _text_only(item: OutboxItem) -> OutboxItem:
    return OutboxItem(
        id=item.id,
        kind=item.kind,
        key=item.key,
        channel=item.channel,
        text=item.text,
        thread_ts=item.thread_ts,
        user=item.user,
        final=item.final,
        broadcast=item.broadcast,
    )


def _direct_message(item: OutboxItem) -> OutboxItem:
    """An ephemeral Slack refused, as a direct message to its user (posted in the app's DM)."""
    return OutboxItem(
        id=uuid.uuid4().hex,
        kind="message",
        key=f"dm:{item.id}",
        channel=item.user,
        text=item.text,
        blocks=item.blocks,
        final=True,
    )

"""What the sender must not forget across a restart: final renderings and where messages live.

The sender writes an `OutboxItem` here before it accepts a final state (a decided card, a
completed / failed operation, the final thread reply) and marks it sent after Slack said ok.
On start it asks for `pending()` and delivers them, so the last word on an operation reaches
Slack even if the process died first. It also remembers which Slack message (`channel`, `ts`)
a key such as `op:<id>` was posted as, so updates after a restart edit the same message. And it
records each post that left without an answer yet (`attempting`) until the post is settled:
chat.postMessage has no idempotency key, and Slack may still post a call whose sender died, so a
restarted process looks for that post (its metadata key) before posting it again.

`MemoryOutbox` is the in-process implementation for tests; production backs the Protocol with
SQLite (engine.store.database) so it survives the process.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from engine.store.ports import OutboxRecords

OutboxKind = Literal["message", "reply", "ephemeral"]


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: str
    kind: OutboxKind
    """message: post or update the message `key`; reply: a thread reply under it; ephemeral."""
    key: str
    channel: str
    text: str
    blocks: tuple[Mapping[str, Any], ...] = ()
    """Block Kit JSON, already validated."""
    thread_ts: str = ""
    """kind=message: post the message itself inside this thread (a schedule announcement's)."""
    user: str = ""
    """kind=ephemeral: the only person who sees it."""
    final: bool = False
    broadcast: bool = False
    """kind=reply: also show it in the channel (`reply_broadcast`), e.g. a failure."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "channel": self.channel,
            "text": self.text,
            "blocks": [dict(b) for b in self.blocks],
            "thread_ts": self.thread_ts,
            "user": self.user,
            "final": self.final,
            "broadcast": self.broadcast,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutboxItem:
        kind = data["kind"]
        if kind not in ("message", "reply", "ephemeral"):
            raise ValueError(f"unknown outbox item kind {kind!r}")
        return cls(
            id=str(data["id"]),
            kind=kind,
            key=str(data.get("key") or ""),
            channel=str(data["channel"]),
            text=str(data.get("text") or ""),
            blocks=tuple(data.get("blocks") or ()),
            thread_ts=str(data.get("thread_ts") or ""),
            user=str(data.get("user") or ""),
            final=bool(data.get("final")),
            broadcast=bool(data.get("broadcast")),
        )


class Outbox(Protocol):
    def add(self, item: OutboxItem) -> None:
        """Persist an item that must be delivered; durable when this returns."""
        ...

    def pending(self) -> list[OutboxItem]:
        """Items added and not yet marked sent, oldest first."""
        ...

    def mark_sent(self, item_id: str) -> None:
        """Delivered, or superseded by a newer rendering of the same message; idempotent."""
        ...

    def remember(self, key: str, channel: str, ts: str) -> None:
        """The message `key` now exists in Slack as (`channel`, `ts`)."""
        ...

    def lookup(self, key: str) -> tuple[str, str] | None:
        """(channel, ts) of the message `key`, if it was posted."""
        ...

    def attempting(self, key: str, post_key: str, at: float) -> None:
        """A post of `key` (a message key, or a final reply's item ID) carrying the metadata key
        `post_key` leaves at Unix time `at`; kept (the first attempt's) until `remember(key)`,
        `mark_sent(key)` or `forget_attempt(key)`."""
        ...

    def attempted(self, key: str) -> tuple[str, float] | None:
        """(post_key, Unix time) of the first unsettled attempt to post `key`, if any."""
        ...

    def forget_attempt(self, key: str) -> None:
        """The post of `key` is settled without being posted (given up): nothing to look for."""
        ...


class MemoryOutbox:
    """Outbox in memory: for tests, and for a process that accepts losing finals on a crash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, OutboxItem] = {}
        self._messages: dict[str, tuple[str, str]] = {}
        self._attempts: dict[str, tuple[str, float]] = {}
        self.sent: list[str] = []

    def add(self, item: OutboxItem) -> None:
        with self._lock:
            self._items[item.id] = item

    def pending(self) -> list[OutboxItem]:
        with self._lock:
            return list(self._items.values())

    def mark_sent(self, item_id: str) -> None:
        with self._lock:
            self._attempts.pop(item_id, None)
            if self._items.pop(item_id, None) is not None:
                self.sent.append(item_id)

    def remember(self, key: str, channel: str, ts: str) -> None:
        with self._lock:
            self._attempts.pop(key, None)
            self._messages[key] = (channel, ts)

    def lookup(self, key: str) -> tuple[str, str] | None:
        with self._lock:
            return self._messages.get(key)

    def attempting(self, key: str, post_key: str, at: float) -> None:
        with self._lock:
            self._attempts.setdefault(key, (post_key, at))

    def attempted(self, key: str) -> tuple[str, float] | None:
        with self._lock:
            return self._attempts.get(key)

    def forget_attempt(self, key: str) -> None:
        with self._lock:
            self._attempts.pop(key, None)


class StoreOutbox:
    """The Outbox in scalebot's SQLite database, so owed finals survive a crash or a restart."""

    def __init__(self, store: OutboxRecords) -> None:
        self._store = store

    def add(self, item: OutboxItem) -> None:
        self._store.outbox_add(item.id, item.to_json())

    def pending(self) -> list[OutboxItem]:
        return [OutboxItem.from_json(data) for data in self._store.outbox_pending()]

    def mark_sent(self, item_id: str) -> None:
        self._store.outbox_mark_sent(item_id)

    def remember(self, key: str, channel: str, ts: str) -> None:
        self._store.remember_message(key, channel, ts)

    def lookup(self, key: str) -> tuple[str, str] | None:
        return self._store.message(key)

    def attempting(self, key: str, post_key: str, at: float) -> None:
        self._store.post_attempt_add(key, post_key, at)

    def attempted(self, key: str) -> tuple[str, float] | None:
        return self._store.post_attempt(key)

    def forget_attempt(self, key: str) -> None:
        self._store.post_attempt_forget(key)

"""engine.store.outbox through the sender's `StoreOutbox`: a post attempt recorded in SQLite
outlives the process, the first attempt is the one kept, and it is gone once the post is settled.

Covers: `attempting` then a new `Store` on the same file reads it back; a second attempt does not
move the first; `remember` (a message posted), `mark_sent` (a final reply delivered) and
`forget_attempt` (given up) each clear theirs and nothing else; a record older than a week is
dropped at the next attempt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.slack.delivery.outbox import OutboxItem, StoreOutbox
from engine.store.database import Store
from engine.store.outbox import POST_ATTEMPTS_KEPT_SECONDS


@contextmanager
def store_outbox(path: Path) -> Iterator[StoreOutbox]:
    store = Store(path)
    try:
        yield StoreOutbox(store)
    finally:
        store.close()


def test_a_post_attempt_survives_the_process_and_the_first_one_is_kept(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    with store_outbox(db) as outbox:
        outbox.attempting("op:1", "a" * 32, 1000.0)
        outbox.attempting("op:1", "b" * 32, 1030.0)  # a retry: the lookup must reach the first

    with store_outbox(db) as again:
        assert again.attempted("op:1") == ("a" * 32, 1000.0)
        assert again.attempted("op:2") is None


def test_each_way_a_post_is_settled_clears_only_its_own_record(tmp_path: Path) -> None:
    with store_outbox(tmp_path / "scalebot.db") as outbox:
        reply = OutboxItem(id="r" * 32, kind="reply", key="op:1", channel="C1", text="done", final=True)
        outbox.add(reply)
        for key in ("op:1", reply.id, "op:2", "op:3"):
            outbox.attempting(key, key, 1000.0)

        outbox.remember("op:1", "C1", "1.0001")
        assert outbox.attempted("op:1") is None and outbox.lookup("op:1") == ("C1", "1.0001")
        outbox.mark_sent(reply.id)
        assert outbox.attempted(reply.id) is None and outbox.pending() == []
        outbox.forget_attempt("op:2")
        assert outbox.attempted("op:2") is None
        assert outbox.attempted("op:3") == ("op:3", 1000.0)


def test_a_record_older_than_a_week_is_dropped_at_the_next_attempt(tmp_path: Path) -> None:
    with store_outbox(tmp_path / "scalebot.db") as outbox:
        outbox.attempting("op:old", "o" * 32, 1000.0)
        outbox.attempting("op:recent", "r" * 32, 1000.0 + POST_ATTEMPTS_KEPT_SECONDS - 1)
        outbox.attempting("op:new", "n" * 32, 1000.0 + POST_ATTEMPTS_KEPT_SECONDS + 1)

        assert outbox.attempted("op:old") is None
        assert outbox.attempted("op:recent") is not None and outbox.attempted("op:new") is not None

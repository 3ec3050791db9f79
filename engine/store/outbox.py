"""The Slack outbox: what the sender still owes, where each message it posted lives, and which posts
were sent without an answer yet (a restarted process looks for those before posting again)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.store.base import StoreBase

POST_ATTEMPTS_KEPT_SECONDS = 7 * 24 * 3600.0
"""An attempt whose post was never settled (its message not rendered again after a crash) is
forgotten after this long: no Slack post waits that long, and the table stays small."""


class OutboxStore(StoreBase):
    """Items to deliver, in order, and the messages they became."""

    def outbox_add(self, item_id: str, item: Mapping[str, Any]) -> None:
        with self.transaction():
            seq = self._conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox").fetchone()[0]
            self.db.table("outbox").upsert(
                {"id": item_id, "seq": seq, "item": json.dumps(dict(item), sort_keys=True), "sent": 0},
                pk="id",
            )

    def outbox_pending(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self.db.table("outbox").rows_where("sent = 0", order_by="seq")
            return [json.loads(r["item"]) for r in rows]

    def outbox_mark_sent(self, item_id: str) -> None:
        with self.transaction():
            self.db.table("outbox").delete_where("id = ?", [item_id])
            self.db.table("post_attempts").delete_where("key = ?", [item_id])

    def remember_message(self, key: str, channel: str, ts: str) -> None:
        with self.transaction():
            self.db.table("messages").upsert({"key": key, "channel": channel, "ts": ts}, pk="key")
            self.db.table("post_attempts").delete_where("key = ?", [key])

    def post_attempt_add(self, key: str, post_key: str, at: float) -> None:
        """The first attempt wins: a lookup must reach back to the earliest post that may have landed."""
        with self.transaction():
            self._conn.execute("DELETE FROM post_attempts WHERE at < ?", [at - POST_ATTEMPTS_KEPT_SECONDS])
            self._conn.execute(
                "INSERT OR IGNORE INTO post_attempts (key, post_key, at) VALUES (?, ?, ?)",
                [key, post_key, at],
            )

    def post_attempt(self, key: str) -> tuple[str, float] | None:
        with self._lock:
            rows = list(self.db.table("post_attempts").rows_where("key = ?", [key]))
        return (str(rows[0]["post_key"]), float(rows[0]["at"])) if rows else None

    def post_attempt_forget(self, key: str) -> None:
        with self.transaction():
            self.db.table("post_attempts").delete_where("key = ?", [key])

    def message(self, key: str) -> tuple[str, str] | None:
        with self._lock:
            rows = list(self.db.table("messages").rows_where("key = ?", [key]))
        return (rows[0]["channel"], rows[0]["ts"]) if rows else None

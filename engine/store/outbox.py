"""The Slack outbox: what the sender still owes, and where each message it posted lives."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.store.base import StoreBase


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

    def remember_message(self, key: str, channel: str, ts: str) -> None:
        with self.transaction():
            self.db.table("messages").upsert({"key": key, "channel": channel, "ts": ts}, pk="key")

    def message(self, key: str) -> tuple[str, str] | None:
        with self._lock:
            rows = list(self.db.table("messages").rows_where("key = ?", [key]))
        return (rows[0]["channel"], rows[0]["ts"]) if rows else None

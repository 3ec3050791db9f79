"""What a sleep keeps for its wake: each pool's day-time size, each workload's day-time value and
the workloads whose pods the sleep displaced."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.store.base import StoreBase


@dataclass(frozen=True, slots=True)
class StoredRestore:
    cluster: str
    pool: str
    desired: int
    min_size: int
    max_size: int | None
    recorded_at: datetime
    op_id: str
    extra: Mapping[str, Any]


class RestoreStore(StoreBase):
    """Sizes and workloads to restore; the first record of a thing wins."""

    # -- sizes to restore -------------------------------------------------------------------------

    def record_restore(self, record: StoredRestore) -> bool:
        """Keep the first record: a second scale-down must not overwrite the day-time size."""
        with self.transaction():
            if list(
                self.db.table("restore").rows_where("cluster = ? AND pool = ?", [record.cluster, record.pool])
            ):
                return False
            self.db.table("restore").insert(
                {
                    "cluster": record.cluster,
                    "pool": record.pool,
                    "desired": record.desired,
                    "min_size": record.min_size,
                    "max_size": record.max_size,
                    "recorded_at": record.recorded_at.isoformat(),
                    "op_id": record.op_id,
                    "extra": json.dumps(dict(record.extra), sort_keys=True),
                }
            )
            return True

    def restore_records(self, cluster: str) -> list[StoredRestore]:
        with self._lock:
            return [
                StoredRestore(
                    r["cluster"],
                    r["pool"],
                    r["desired"],
                    r["min_size"],
                    r["max_size"],
                    datetime.fromisoformat(r["recorded_at"]),
                    r["op_id"],
                    json.loads(r["extra"] or "{}"),
                )
                for r in self.db.table("restore").rows_where("cluster = ?", [cluster], order_by="pool")
            ]

    # -- workloads put to sleep ---------------------------------------------------------------------

    def record_workload(
        self, cluster: str, key: str, record: Mapping[str, Any], *, op_id: str, at: datetime
    ) -> bool:
        """Keep the first record of an object: a second sleep must not replace its day-time value."""
        with self.transaction():
            if list(self.db.table("workload_records").rows_where("cluster = ? AND key = ?", [cluster, key])):
                return False
            self.db.table("workload_records").insert(
                {
                    "cluster": cluster,
                    "key": key,
                    "record": json.dumps(dict(record), sort_keys=True),
                    "op_id": op_id,
                    "at": at.isoformat(),
                }
            )
            return True

    def workload_records(self, cluster: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self.db.table("workload_records").rows_where("cluster = ?", [cluster], order_by="key")
            return [json.loads(r["record"]) for r in rows]

    def clear_workload_records(self, cluster: str) -> None:
        with self.transaction():
            self.db.table("workload_records").delete_where("cluster = ?", [cluster])

    def clear_restore(self, cluster: str, pool: str) -> None:
        """Forget a pool's size to restore and the workloads its sleep displaced (one lifetime)."""
        with self.transaction():
            self.db.table("restore").delete_where("cluster = ? AND pool = ?", [cluster, pool])
            self.db.table("displaced").delete_where("cluster = ? AND pool = ?", [cluster, pool])

    def record_displaced(
        self, cluster: str, pool: str, keys: Collection[str], *, op_id: str, at: datetime
    ) -> None:
        """Workloads (`Kind/namespace/name`) whose pods were on `pool`'s nodes as a sleep emptied them."""
        if not keys:
            return
        with self.transaction():
            self.db.table("displaced").upsert_all(
                [
                    {"cluster": cluster, "pool": pool, "key": key, "op_id": op_id, "at": at.isoformat()}
                    for key in sorted(keys)
                ],
                pk=("cluster", "pool", "key"),
            )

    def displaced(self, cluster: str, pools: Collection[str]) -> frozenset[str]:
        """The workloads the sleeps of `pools` displaced, until their wake clears the pool's restore."""
        with self._lock:
            rows = self.db.table("displaced").rows_where("cluster = ?", [cluster])
            return frozenset(str(r["key"]) for r in rows if r["pool"] in pools)

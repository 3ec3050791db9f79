"""SQLite persistence (sqlite-utils): operations, their journal, approvals, audit, locks, sizes.

SQLite is the single source of truth: the runner, the bot and the scheduler hold nothing that
cannot be rebuilt from it at start-up. The only module that knows SQL.

- One connection shared by all threads (`check_same_thread=False`) behind one re-entrant lock;
  WAL mode so readers never block the writer.
- `transaction()` is `BEGIN IMMEDIATE … COMMIT`: a decision two threads could race on (the
  second approval vote, a pool lock) is taken inside one write transaction.
- The journal and the audit table are append-only: triggers abort any UPDATE or DELETE, so
  no code path (and no bug) can rewrite history.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from engine.operation import Operation, OperationPlan, OpKind, OpState, Target

SCHEMA_VERSION = 1


class StoreError(RuntimeError):
    """The database cannot be opened or written; the message says what to do."""


class LockConflict(Exception):
    def __init__(self, key: str, op_id: str) -> None:
        self.key = key
        self.op_id = op_id
        super().__init__(f"{key} is locked by operation {op_id}")


@dataclass(frozen=True, slots=True)
class JournalRow:
    at: datetime
    op_id: str
    step: str
    event: str
    detail: str


@dataclass(frozen=True, slots=True)
class AuditRow:
    at: datetime
    actor: str
    action: str
    op_id: str
    cluster: str
    detail: str


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


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA quick_check").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"cannot open the database {self.path}: {exc} (check the path and permissions, "
                "or move a corrupted file aside)"
            ) from exc
        self._conn = conn
        self.db = sqlite_utils.Database(conn)
        self._lock = threading.RLock()
        with self.transaction():
            self._migrate()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            if self._conn.in_transaction:  # nested: join the outer transaction
                yield
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"the database {self.path} is locked or unwritable: {exc}") from exc
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"cannot write the database {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        db = self.db
        if "meta" not in db.table_names():
            db.table("meta").create({"key": str, "value": str}, pk="key")
        db.table("operations").create(
            {
                "id": str,
                "kind": str,
                "cluster": str,
                "target": str,
                "state": str,
                "requested_by": str,
                "channel": str,
                "created_at": str,
                "updated_at": str,
                "plan": str,
                "plan_hash": str,
                "step": str,
                "step_data": str,
                "approval_id": str,
                "approvals_required": int,
                "expires_at": str,
                "message_ts": str,
                "thread_ts": str,
                "result": str,
                "error": str,
            },
            pk="id",
            if_not_exists=True,
        )
        db.table("operations").create_index(["approval_id"], if_not_exists=True)
        db.table("operations").create_index(["state"], if_not_exists=True)
        db.table("journal").create(
            {"id": int, "at": str, "op_id": str, "step": str, "event": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("journal").create_index(["op_id"], if_not_exists=True)
        db.table("audit").create(
            {"id": int, "at": str, "actor": str, "action": str, "op_id": str, "cluster": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("audit").create_index(["op_id"], if_not_exists=True)
        db.table("votes").create(
            {"approval_id": str, "user": str, "vote": str, "at": str},
            pk=("approval_id", "user"),
            if_not_exists=True,
        )
        db.table("locks").create({"key": str, "op_id": str, "at": str}, pk="key", if_not_exists=True)
        db.table("restore").create(
            {
                "cluster": str,
                "pool": str,
                "desired": int,
                "min_size": int,
                "max_size": int,
                "recorded_at": str,
                "op_id": str,
                "extra": str,
            },
            pk=("cluster", "pool"),
            if_not_exists=True,
        )
        for table in ("journal", "audit"):
            for verb in ("UPDATE", "DELETE"):
                self._conn.execute(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
                )
        db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    # -- operations ------------------------------------------------------------------------------

    def insert_operation(self, op: Operation) -> None:
        with self.transaction():
            self.db.table("operations").insert(_op_to_row(op))

    def save_operation(self, op: Operation) -> None:
        with self.transaction():
            self.db.table("operations").upsert(_op_to_row(op), pk="id")

    def get_operation(self, op_id: str) -> Operation | None:
        with self._lock:
            rows = list(self.db.table("operations").rows_where("id = ?", [op_id]))
        return _row_to_op(rows[0]) if rows else None

    def operation_by_approval(self, approval_id: str) -> Operation | None:
        with self._lock:
            rows = list(self.db.table("operations").rows_where("approval_id = ?", [approval_id]))
        return _row_to_op(rows[0]) if rows else None

    def list_operations(
        self, *, cluster: str | None = None, states: Sequence[OpState] | None = None, limit: int = 50
    ) -> list[Operation]:
        where, args = [], []
        if cluster:
            where.append("cluster = ?")
            args.append(cluster)
        if states:
            where.append(f"state IN ({','.join('?' for _ in states)})")
            args.extend(s.value for s in states)
        with self._lock:
            rows = self.db.table("operations").rows_where(
                " AND ".join(where) or None, args, order_by="created_at DESC, id DESC", limit=limit
            )
            return [_row_to_op(r) for r in rows]

    # -- journal and audit (append-only) ----------------------------------------------------------

    def journal(self, op_id: str, *, at: datetime, step: str, event: str, detail: str = "") -> None:
        with self.transaction():
            self.db.table("journal").insert(
                {"at": at.isoformat(), "op_id": op_id, "step": step, "event": event, "detail": detail}
            )

    def journal_rows(self, op_id: str) -> list[JournalRow]:
        with self._lock:
            return [
                JournalRow(datetime.fromisoformat(r["at"]), r["op_id"], r["step"], r["event"], r["detail"])
                for r in self.db.table("journal").rows_where("op_id = ?", [op_id], order_by="id")
            ]

    def audit(
        self, *, at: datetime, actor: str, action: str, op_id: str = "", cluster: str = "", detail: str = ""
    ) -> None:
        with self.transaction():
            self.db.table("audit").insert(
                {
                    "at": at.isoformat(),
                    "actor": actor,
                    "action": action,
                    "op_id": op_id,
                    "cluster": cluster,
                    "detail": detail,
                }
            )

    def audit_rows(self, *, op_id: str | None = None) -> list[AuditRow]:
        with self._lock:
            rows = self.db.table("audit").rows_where(
                "op_id = ?" if op_id else None, [op_id] if op_id else [], order_by="id"
            )
            return [
                AuditRow(
                    datetime.fromisoformat(r["at"]),
                    r["actor"],
                    r["action"],
                    r["op_id"],
                    r["cluster"],
                    r["detail"],
                )
                for r in rows
            ]

    # -- votes ------------------------------------------------------------------------------------

    def add_vote(self, approval_id: str, user: str, vote: str, *, at: datetime) -> bool:
        """Record a vote; False when this user already voted (a double click)."""
        with self.transaction():
            if list(self.db.table("votes").rows_where("approval_id = ? AND user = ?", [approval_id, user])):
                return False
            self.db.table("votes").insert(
                {"approval_id": approval_id, "user": user, "vote": vote, "at": at.isoformat()}
            )
            return True

    def votes(self, approval_id: str) -> list[tuple[str, str, datetime]]:
        with self._lock:
            return [
                (r["user"], r["vote"], datetime.fromisoformat(r["at"]))
                for r in self.db.table("votes").rows_where("approval_id = ?", [approval_id], order_by="at")
            ]

    # -- locks ------------------------------------------------------------------------------------

    def acquire_locks(self, keys: Sequence[str], op_id: str, *, at: datetime) -> None:
        """All or nothing: raises LockConflict naming the operation that holds a key."""
        with self.transaction():
            for key in keys:
                held = list(self.db.table("locks").rows_where("key = ?", [key]))
                if held and held[0]["op_id"] != op_id:
                    raise LockConflict(key, held[0]["op_id"])
            for key in keys:
                self.db.table("locks").upsert({"key": key, "op_id": op_id, "at": at.isoformat()}, pk="key")

    def release_locks(self, op_id: str) -> None:
        with self.transaction():
            self.db.table("locks").delete_where("op_id = ?", [op_id])

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

    def clear_restore(self, cluster: str, pool: str) -> None:
        with self.transaction():
            self.db.table("restore").delete_where("cluster = ? AND pool = ?", [cluster, pool])


def _op_to_row(op: Operation) -> dict[str, Any]:
    return {
        "id": op.id,
        "kind": op.kind.value,
        "cluster": op.target.cluster,
        "target": json.dumps(op.target.to_json(), sort_keys=True),
        "state": op.state.value,
        "requested_by": op.requested_by,
        "channel": op.channel,
        "created_at": op.created_at.isoformat(),
        "updated_at": op.updated_at.isoformat(),
        "plan": json.dumps(op.plan.to_json(), sort_keys=True),
        "plan_hash": op.plan.plan_hash,
        "step": op.step,
        "step_data": json.dumps(dict(op.step_data), sort_keys=True),
        "approval_id": op.approval_id,
        "approvals_required": op.approvals_required,
        "expires_at": op.expires_at.isoformat() if op.expires_at else "",
        "message_ts": op.message_ts,
        "thread_ts": op.thread_ts,
        "result": json.dumps(dict(op.result), sort_keys=True),
        "error": op.error,
    }


def _row_to_op(row: Mapping[str, Any]) -> Operation:
    return Operation(
        id=row["id"],
        kind=OpKind(row["kind"]),
        target=Target.from_json(json.loads(row["target"])),
        state=OpState(row["state"]),
        requested_by=row["requested_by"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        plan=OperationPlan.from_json(json.loads(row["plan"])),
        channel=row["channel"] or "",
        step=row["step"] or "",
        step_data=json.loads(row["step_data"] or "{}"),
        approval_id=row["approval_id"] or "",
        approvals_required=int(row["approvals_required"] or 0),
        expires_at=datetime.fromisoformat(row["expires_at"]) if row["expires_at"] else None,
        message_ts=row["message_ts"] or "",
        thread_ts=row["thread_ts"] or "",
        result=json.loads(row["result"] or "{}"),
        error=row["error"] or "",
    )

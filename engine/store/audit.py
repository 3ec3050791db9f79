"""The hash-chained audit: rows appended with the SHA-256 of the row before, the check of that
chain, and the append-only triggers that guard the journal, the audit and the overrides."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.store.base import StoreBase, StoreError

APPEND_ONLY_TABLES = ("journal", "audit", "overrides")

GENESIS_HASH = "0" * 64
"""`prev_hash` of the first audit row."""


class AuditUnverifiable(StoreError):
    """The audit chain cannot be verified: its columns, triggers or schema version are not the ones
    this scalebot writes (someone removed them, or another version wrote the file)."""


@dataclass(frozen=True, slots=True)
class AuditRow:
    at: datetime
    actor: str
    action: str
    op_id: str
    cluster: str
    detail: str


@dataclass(frozen=True, slots=True)
class AuditProblem:
    """A break in the audit hash chain: the first row whose hashes do not match what precedes it."""

    row_id: int
    reason: str


class AuditStore(StoreBase):
    """Append to the audit and read it back; `verify_audit` re-computes its chain."""

    def audit(
        self, *, at: datetime, actor: str, action: str, op_id: str = "", cluster: str = "", detail: str = ""
    ) -> None:
        with self.transaction():
            last = self._conn.execute("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
            row_id = (last[0] + 1) if last else 1
            prev = last[1] if last else GENESIS_HASH
            values = (row_id, at.isoformat(), actor, action, op_id, cluster, detail)
            digest = _audit_hash(prev, values)
            self._conn.execute(
                "INSERT INTO audit (id, at, actor, action, op_id, cluster, detail, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*values, prev, digest),
            )
            self._pending_heads.append((row_id, digest))

    def verify_audit(self) -> tuple[int, list[AuditProblem]]:
        """Re-compute the audit hash chain: (rows checked, the breaks found). An edited row breaks its
        own hash; an inserted or deleted row breaks the link of the row after it."""
        with self._lock:
            rows = self._conn.execute(_AUDIT_CHAIN_ROWS).fetchall()
        return len(rows), _chain_problems(rows)

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


_AUDIT_CHAIN_ROWS = (
    "SELECT id, at, actor, action, op_id, cluster, detail, prev_hash, hash FROM audit ORDER BY id"
)


def _chain_problems(rows: Sequence[Sequence[Any]]) -> list[AuditProblem]:
    problems: list[AuditProblem] = []
    prev = GENESIS_HASH
    for row in rows:
        if row[7] != prev:
            problems.append(AuditProblem(row[0], "links to a previous row that is not the one before it"))
        if row[8] != _audit_hash(row[7] or "", row[:7]):
            problems.append(AuditProblem(row[0], "its content does not match its hash"))
        prev = row[8]
    return problems


def _append_only_triggers(table: str) -> dict[str, str]:
    """Trigger name -> its SQL exactly as SQLite keeps it in `sqlite_master`."""
    return {
        f"{table}_no_{verb.lower()}": f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
        for verb in ("UPDATE", "DELETE")
    }


def _audit_hash(prev: str, values: Sequence[Any]) -> str:
    """SHA-256 over the previous row's hash and this row's fields (id included, so rows cannot move)."""
    payload = json.dumps([prev, *values], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()

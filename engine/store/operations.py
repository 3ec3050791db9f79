"""Operations (compare-and-set state changes), their append-only journal and their approval votes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationProgress,
    OperationSummary,
    OpKind,
    OpState,
    Target,
)
from engine.store.claims import ClaimsStore

_ENCODER = msgspec.json.Encoder(order="deterministic")

_PROGRESS = msgspec.json.Decoder(OperationProgress)

_SUMMARY = msgspec.json.Decoder(OperationSummary | None)


@dataclass(frozen=True, slots=True)
class JournalRow:
    at: datetime
    op_id: str
    step: str
    event: str
    detail: str
    runner: str = ""
    """The runner (pod or host, pid) that wrote the row; empty for rows written outside a runner."""


class OperationsStore(ClaimsStore):
    """Operations, journal and votes; a final state releases the operation's locks (`ClaimsStore`)
    in the same transaction."""

    # -- operations ------------------------------------------------------------------------------

    def insert_operation(self, op: Operation) -> None:
        with self.transaction():
            self.db.table("operations").insert(_op_to_row(op))

    def save_operation(self, op: Operation) -> None:
        with self.transaction():
            self.db.table("operations").upsert(_op_to_row(op), pk="id")

    def save_progress(self, op: Operation) -> bool:
        """Write only what the runner owns, so a concurrent `set_message` is never overwritten.

        Compare-and-set: written only while the stored operation is still running (a cancel or a
        second runner may have finished it); False when nothing was written. A final state
        releases the operation's locks in the same transaction."""
        row = _op_to_row(op)
        runner_owned = ("state", "updated_at", "step", "step_data", "result", "error")
        with self.transaction():
            changed = self._update_if(op.id, OpState.RUNNING, {k: row[k] for k in runner_owned})
            if changed and op.state.is_terminal:
                self.release_locks(op.id)
            return changed

    def transition(self, op: Operation, *, expected: OpState) -> bool:
        """Compare-and-set the whole operation row (but where its message lives): written only if
        the stored state is still `expected`. A final state releases the locks in the same write."""
        row = _op_to_row(op)
        values = {k: v for k, v in row.items() if k not in ("id", "channel", "message_ts")}
        with self.transaction():
            changed = self._update_if(op.id, expected, values)
            if changed and op.state.is_terminal:
                self.release_locks(op.id)
            return changed

    def _update_if(self, op_id: str, expected: OpState, values: Mapping[str, Any]) -> bool:
        assignments = ", ".join(f"[{k}] = ?" for k in values)
        cursor = self._conn.execute(
            f"UPDATE operations SET {assignments} WHERE id = ? AND state = ?",
            [*values.values(), op_id, expected.value],
        )
        return cursor.rowcount == 1

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        with self.transaction():
            self.db.table("operations").update(op_id, {"channel": channel, "message_ts": ts})

    def get_operation(self, op_id: str) -> Operation | None:
        with self._lock:
            rows = list(self.db.table("operations").rows_where("id = ?", [op_id]))
        return row_to_op(rows[0]) if rows else None

    def operation_by_approval(self, approval_id: str) -> Operation | None:
        with self._lock:
            rows = list(self.db.table("operations").rows_where("approval_id = ?", [approval_id]))
        return row_to_op(rows[0]) if rows else None

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
            return [row_to_op(r) for r in rows]

    # -- journal (append-only) ----------------------------------------------------------------------

    def journal(
        self, op_id: str, *, at: datetime, step: str, event: str, detail: str = "", runner: str = ""
    ) -> None:
        with self.transaction():
            self.db.table("journal").insert(
                {
                    "at": at.isoformat(),
                    "op_id": op_id,
                    "step": step,
                    "event": event,
                    "detail": detail,
                    "runner": runner,
                }
            )

    def journal_rows(self, op_id: str) -> list[JournalRow]:
        with self._lock:
            return [
                JournalRow(
                    datetime.fromisoformat(r["at"]),
                    r["op_id"],
                    r["step"],
                    r["event"],
                    r["detail"],
                    r["runner"] or "",
                )
                for r in self.db.table("journal").rows_where("op_id = ?", [op_id], order_by="id")
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


def encode_record(record: OperationProgress | OperationSummary | None) -> str:
    return _ENCODER.encode(record).decode()


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
        "step_data": encode_record(op.progress),
        "approval_id": op.approval_id,
        "approvals_required": op.approvals_required,
        "expires_at": op.expires_at.isoformat() if op.expires_at else "",
        "message_ts": op.message_ts,
        "thread_ts": op.thread_ts,
        "result": encode_record(op.summary),
        "error": op.error,
        "initiated_by": json.dumps(list(op.initiated_by)),
    }


def row_to_op(row: Mapping[str, Any]) -> Operation:
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
        progress=_PROGRESS.decode(row["step_data"] or "{}"),
        approval_id=row["approval_id"] or "",
        approvals_required=int(row["approvals_required"] or 0),
        expires_at=datetime.fromisoformat(row["expires_at"]) if row["expires_at"] else None,
        message_ts=row["message_ts"] or "",
        thread_ts=row["thread_ts"] or "",
        summary=_SUMMARY.decode(row["result"] or "null"),
        error=row["error"] or "",
        initiated_by=tuple(json.loads(row.get("initiated_by") or "[]")),
    )

"""The hash-chained audit: rows appended with the hash of the row before, the check of that chain,
the append-only triggers that guard the journal, the audit and the overrides, and the trigger that
refuses an audit row not chained to the current head.

Keyed chain. With a key (`SCALEBOT_AUDIT_KEY`, or `SCALEBOT_AUDIT_KEY_FILE` naming a file such as a
mounted Kubernetes Secret; never stored in the database) each row's hash is an HMAC-SHA256, so
someone who can write the file but does not hold the key cannot re-chain it after an edit or a
deletion, nor append a row that verifies. Without a key the chain is plain SHA-256: it shows
accidental damage and careless edits, but anyone with write access can rewrite it consistently,
and only an audit head kept outside the file (the `audit head` log line) reveals that.

A database written before a key was set stays verifiable: the first row written with the key is
the marker `audit_key_applied` (its detail names the key's id, never the key); rows before it are
checked as SHA-256, the marker and every later row as HMAC. A keyed file must be appended to with
its key, and verified with it; one key per file (a new key needs a new file).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.store.base import StoreBase, StoreError

APPEND_ONLY_TABLES = ("journal", "audit", "overrides")

GENESIS_HASH = "0" * 64
"""`prev_hash` of the first audit row."""

AUDIT_KEY_ENV = "SCALEBOT_AUDIT_KEY"
AUDIT_KEY_FILE_ENV = "SCALEBOT_AUDIT_KEY_FILE"
MIN_KEY_BYTES = 32
KEY_APPLIED = "audit_key_applied"
"""The action of the first keyed row: from it on, every row's hash is an HMAC."""
KEY_ACTOR = "scalebot"


class AuditKeyError(StoreError):
    """The audit key in the environment is unusable, or does not fit the database's chain."""


@dataclass(frozen=True, slots=True)
class AuditKey:
    """The secret that keys the audit chain; `key_id` names it in the database and in messages."""

    secret: bytes = field(repr=False)

    @property
    def key_id(self) -> str:
        return hmac.new(self.secret, b"scalebot audit key id", hashlib.sha256).hexdigest()[:16]


def audit_key_from_environment(environ: Mapping[str, str] | None = None) -> AuditKey | None:
    """The key of `SCALEBOT_AUDIT_KEY` (the text itself) or `SCALEBOT_AUDIT_KEY_FILE` (a file's
    content, a trailing newline dropped), at least 32 bytes; None when neither is set."""
    env = os.environ if environ is None else environ
    text, path = env.get(AUDIT_KEY_ENV, ""), env.get(AUDIT_KEY_FILE_ENV, "")
    if text and path:
        raise AuditKeyError(f"set {AUDIT_KEY_ENV} or {AUDIT_KEY_FILE_ENV}, not both")
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read().rstrip(b"\r\n")
        except OSError as exc:
            raise AuditKeyError(
                f"{AUDIT_KEY_FILE_ENV}={path}: cannot read the audit key ({exc.strerror or exc}); "
                "check the path of the mounted Secret"
            ) from exc
        origin = f"{AUDIT_KEY_FILE_ENV}={path}"
    elif text:
        secret, origin = text.encode(), AUDIT_KEY_ENV
    else:
        return None
    if len(secret) < MIN_KEY_BYTES:
        raise AuditKeyError(
            f"{origin}: the audit key has {len(secret)} bytes; use at least {MIN_KEY_BYTES} random bytes "
            "(e.g. `openssl rand -hex 32`)"
        )
    return AuditKey(secret)


class FromEnvironment:
    """`Store(audit_key=FROM_ENVIRONMENT)`: read the key where the process was given it."""


FROM_ENVIRONMENT = FromEnvironment()


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

    _audit_key: AuditKey | None
    _keyed_from: int | None
    """The id of the `audit_key_applied` row (None: unkeyed, as far as this store has seen)."""

    @property
    def audit_keyed(self) -> bool:
        return self._audit_key is not None

    def audit(
        self, *, at: datetime, actor: str, action: str, op_id: str = "", cluster: str = "", detail: str = ""
    ) -> None:
        with self.transaction():
            keyed_from = self._keyed_from
            if keyed_from is None:  # not keyed when last seen: another process may have keyed it
                found = _marker(self._conn)
                if found is not None and self._audit_key is not None:
                    _require_same_key(found, self._audit_key, self.path)
                keyed_from = self._keyed_from = found[0] if found else None
            if keyed_from is not None and self._audit_key is None:
                raise AuditKeyError(
                    f"the audit chain of {self.path} is keyed (from row {keyed_from}): set "
                    f"{AUDIT_KEY_ENV} or {AUDIT_KEY_FILE_ENV} to its key to write to it; nothing was changed"
                )
            if keyed_from is None and self._audit_key is not None:
                # The first row written with the key: the chain is keyed from here on.
                self._append_audit_row(
                    at, KEY_ACTOR, KEY_APPLIED, op_id="", cluster="", detail=_marker_detail(self._audit_key)
                )
            self._append_audit_row(at, actor, action, op_id=op_id, cluster=cluster, detail=detail)

    def _check_audit_key(self) -> None:
        """At open: a keyed chain is written and verified with its own key only (one key per file)."""
        found = _marker(self._conn)
        if found is None:
            return
        self._keyed_from = found[0]
        if self._audit_key is not None:
            _require_same_key(found, self._audit_key, self.path)

    def _append_audit_row(
        self, at: datetime, actor: str, action: str, *, op_id: str, cluster: str, detail: str
    ) -> None:
        last = self._conn.execute("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
        row_id = (last[0] + 1) if last else 1
        prev = last[1] if last else GENESIS_HASH
        values = (row_id, at.isoformat(), actor, action, op_id, cluster, detail)
        key = self._audit_key.secret if self._audit_key is not None else None
        digest = audit_hash(prev, values, key)
        self._conn.execute(
            "INSERT INTO audit (id, at, actor, action, op_id, cluster, detail, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*values, prev, digest),
        )
        if action == KEY_APPLIED and self._keyed_from is None:
            self._keyed_from = row_id
        self._pending_heads.append((row_id, digest))

    def verify_audit(self) -> tuple[int, list[AuditProblem]]:
        """Re-compute the audit hash chain with this store's key: (rows checked, the breaks found).
        An edited row breaks its own hash; an inserted or deleted row breaks the link of the row
        after it. Raises AuditUnverifiable when the chain is keyed and this store has no key (or
        another one), or this store has a key and the chain carries none."""
        with self._lock:
            rows = self._conn.execute(AUDIT_CHAIN_ROWS).fetchall()
        return len(rows), chain_problems(rows, self._audit_key, self.path)

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


AUDIT_CHAIN_ROWS = (
    "SELECT id, at, actor, action, op_id, cluster, detail, prev_hash, hash FROM audit ORDER BY id"
)


def chain_problems(rows: Sequence[Sequence[Any]], key: AuditKey | None, path: str) -> list[AuditProblem]:
    marker = next((i for i, row in enumerate(rows) if row[3] == KEY_APPLIED), None)
    if marker is not None:
        marked = (int(rows[marker][0]), str(rows[marker][6]))
        if key is None:
            raise AuditUnverifiable(
                f"the audit chain of {path} is keyed from row {marked[0]} (HMAC-SHA256, "
                f"{marked[1]}): set {AUDIT_KEY_ENV} or {AUDIT_KEY_FILE_ENV} to its key to verify it"
            )
        _require_same_key(marked, key, path, error=AuditUnverifiable)
    elif key is not None and rows:
        raise AuditUnverifiable(
            f"a key was given but no row of the audit chain of {path} is keyed: either no scalebot with "
            f"a key ever wrote to it, or its {len(rows)} rows were rewritten without the key"
        )
    problems: list[AuditProblem] = []
    prev = GENESIS_HASH
    for index, row in enumerate(rows):
        secret = key.secret if key is not None and marker is not None and index >= marker else None
        if row[7] != prev:
            problems.append(AuditProblem(row[0], "links to a previous row that is not the one before it"))
        if not hmac.compare_digest(str(row[8]), audit_hash(row[7] or "", row[:7], secret)):
            problems.append(AuditProblem(row[0], "its content does not match its hash"))
        prev = row[8]
    return problems


def _marker(conn: Any) -> tuple[int, str] | None:
    """The first `audit_key_applied` row: (id, detail)."""
    found = conn.execute(
        "SELECT id, detail FROM audit WHERE action = ? ORDER BY id LIMIT 1", (KEY_APPLIED,)
    ).fetchone()
    return (int(found[0]), str(found[1])) if found else None


def _marker_detail(key: AuditKey) -> str:
    return f"key id {key.key_id}; this row and every later one are HMAC-SHA256"


def _require_same_key(
    marker: tuple[int, str], key: AuditKey, path: str, *, error: type[StoreError] = AuditKeyError
) -> None:
    if f"key id {key.key_id};" not in marker[1]:
        raise error(
            f"the audit chain of {path} is keyed from row {marker[0]} with another key "
            f"({marker[1].split(';')[0]}; the key given has id {key.key_id}): set the key the file was "
            "written with (a new key needs a new database file)"
        )


def append_only_triggers(table: str) -> dict[str, str]:
    """Trigger name -> its SQL exactly as SQLite keeps it in `sqlite_master`."""
    return {
        f"{table}_no_{verb.lower()}": f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
        for verb in ("UPDATE", "DELETE")
    }


AUDIT_CHAINED_TRIGGER = "audit_chained"


def audit_triggers() -> dict[str, str]:
    """The audit table's triggers (name -> SQL as SQLite keeps it): append-only, and an inserted row
    must take the next id and name the current head as its `prev_hash` (a row not chained to the
    head is refused, whoever inserts it)."""
    chained = (
        f"CREATE TRIGGER {AUDIT_CHAINED_TRIGGER} BEFORE INSERT ON audit "
        "WHEN NEW.id IS NOT (SELECT COALESCE(MAX(id), 0) + 1 FROM audit) "
        "OR NEW.prev_hash IS NOT "
        f"COALESCE((SELECT hash FROM audit ORDER BY id DESC LIMIT 1), '{GENESIS_HASH}') "
        "BEGIN SELECT RAISE(ABORT, 'an audit row must follow the last one and name its hash as prev_hash'); "
        "END"
    )
    return {**append_only_triggers("audit"), AUDIT_CHAINED_TRIGGER: chained}


def audit_hash(prev: str, values: Sequence[Any], key: bytes | None = None) -> str:
    """SHA-256 (HMAC-SHA256 with a key) over the previous row's hash and this row's fields (id
    included, so rows cannot move)."""
    payload = json.dumps([prev, *values], ensure_ascii=False, separators=(",", ":")).encode()
    if key is not None:
        return hmac.new(key, payload, hashlib.sha256).hexdigest()
    return hashlib.sha256(payload).hexdigest()

"""SQLite persistence (sqlite-utils): operations, their journal, approvals, audit, locks, sizes,
and schedules with their occurrences and one-occurrence overrides.

SQLite is the single source of truth: the runner, the bot and the scheduler hold nothing that
cannot be rebuilt from it at start-up. The only module that knows SQL.

- One connection shared by all threads (`check_same_thread=False`) behind one re-entrant lock;
  WAL mode so readers never block the writer.
- `transaction()` is `BEGIN IMMEDIATE … COMMIT`: a decision two threads could race on (the
  second approval vote, a pool lock) is taken inside one write transaction.
- The journal, the audit table and the schedule overrides are append-only: triggers abort any
  UPDATE or DELETE, so no code path (and no bug) can rewrite history. Each audit row also carries
  the SHA-256 of the previous row (`prev_hash`) and its own (`hash`): someone with write access to
  the file who drops the triggers and edits, inserts or deletes a row breaks the chain, which
  `verify_audit` reports; `verify_audit_file` (`scalebot operations verify-audit`) checks a file
  opened read-only, never migrating it. Every committed audit row's hash is also logged ("audit
  head"), so a copy of the chain's head lives where an operator of the file cannot rewrite it.
- Operation state changes are compare-and-set (`transition`, `save_progress`): the write names the
  state it expects and does nothing when another thread or process moved the operation first. A
  finished operation's locks are released in the same transaction as its final state.
- Schedules are stored as the text people typed (canonical form), occurrences by their
  idempotency key (`engine.schedules.spec.Occurrence.key`); `engine.schedules.service` owns their meaning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import msgspec
import sqlite_utils

from engine.domain.errors import Category, ScalebotError
from engine.domain.legacy_records import progress_from_legacy, summary_from_legacy
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationProgress,
    OperationSummary,
    OpKind,
    OpState,
    Target,
)

SCHEMA_VERSION = 4
"""3: the audit rows are hash-chained. 4: an operation's progress and summary are typed records
(msgspec JSON of `OperationProgress` / `OperationSummary`), no longer free-form objects.
A database of a newer schema is refused: this version cannot know what the newer one wrote."""
TYPED_RECORDS_SCHEMA = 4
AUDIT_CHAIN_SCHEMA = 3
APPEND_ONLY_TABLES = ("journal", "audit", "overrides")
_ENCODER = msgspec.json.Encoder(order="deterministic")
_PROGRESS = msgspec.json.Decoder(OperationProgress)
_SUMMARY = msgspec.json.Decoder(OperationSummary | None)
GENESIS_HASH = "0" * 64
"""`prev_hash` of the first audit row."""


log = logging.getLogger(__name__)


class StoreError(ScalebotError, RuntimeError):
    """The database cannot be opened or written; the message says what to do."""

    category = Category.CONFIGURATION


class AuditUnverifiable(StoreError):
    """The audit chain cannot be verified: its columns, triggers or schema version are not the ones
    this scalebot writes (someone removed them, or another version wrote the file)."""


_DAMAGED = (
    "move it aside, keeping it for recovery (`sqlite3 FILE .recover`), and start again with a new "
    "file; sizes to restore are also on the pool objects, so wake still works"
)


def _space_hint(path: str) -> str:
    """ "; only N KiB free on its disk" when the disk holding `path` is (nearly) full."""
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return ""
    return f"; only {free // 1024} KiB free on its disk" if free < 1024 * 1024 else ""


class Fenced(ScalebotError, RuntimeError):
    """A runner's claim on an operation was taken over: its writes are refused (nothing written)."""

    category = Category.INTERNAL


class ClaimHeld(ScalebotError, RuntimeError):
    """Another live runner holds the operation; the message names it."""

    category = Category.TRANSIENT

    def __init__(self, claim: RunnerClaim, *, now: datetime, ttl_seconds: float) -> None:
        self.claim = claim
        heard = max(0.0, (now - claim.heartbeat_at).total_seconds())
        super().__init__(
            f"operation {claim.op_id} is being run by {claim.owner} (pid {claim.pid} on {claim.host}, "
            f"last heard from {heard:.0f} s ago): not starting a second runner; if that process is "
            f"gone, its claim lapses {ttl_seconds:.0f} s after it was last heard from"
        )


@dataclass(frozen=True, slots=True)
class RunnerId:
    """Who runs an operation: a display name (the pod or host), the host, the pid, a per-process nonce."""

    owner: str
    host: str
    pid: int
    nonce: str


@dataclass(frozen=True, slots=True)
class RunnerClaim:
    """The one runner allowed to act on an operation, and its fencing token (bumped by each claim)."""

    op_id: str
    owner: str
    host: str
    pid: int
    nonce: str
    token: int
    heartbeat_at: datetime


class LockConflict(ScalebotError):
    category = Category.TRANSIENT

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
    runner: str = ""
    """The runner (pod or host, pid) that wrote the row; empty for rows written outside a runner."""


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


@dataclass(frozen=True, slots=True)
class ScheduleApproval:
    """One approver's pre-approval of one definition of a schedule (`fingerprint`)."""

    schedule: str
    user: str
    at: datetime
    fingerprint: str


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


@dataclass(frozen=True, slots=True)
class ForceDecision:
    """A decision about force on a schedule: `scope` is `ForceScope.to_json()` plus the pool of
    each Pod shown (`pools`). On one occurrence (`key`): `needed` (what its announcement showed,
    no `user`), `approved` (one approver's click, `digest` of the scope approved) or `excluded`
    (`pool` left out of that run). On the schedule itself (`key` ""): `standing`, one approver's
    approval of a standing scope, bound to the schedule's targets by `binding`."""

    schedule: str
    key: str
    kind: str
    user: str = ""
    pool: str = ""
    digest: str = ""
    binding: str = ""
    scope: Mapping[str, Any] = field(default_factory=dict)
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    name: str
    cluster: str
    target: Mapping[str, Any]
    sleep: str
    wake: str
    """Empty when the schedule only sleeps."""
    tz: str
    lead_times: tuple[int, ...]
    """Seconds, longest first."""
    channel: str
    approval_mode: str
    """Either `pre_approved` (runs go without approval once enough approvers pre-approved this
    definition: `schedule_approvals`) or `per_run`."""
    approved_by: str
    """Schema 2 only (the approver who created it); schema 3 moved it into `schedule_approvals`."""
    enabled: bool
    exceptions: tuple[str, ...]
    """ISO local dates."""
    created_by: str
    created_at: datetime
    active_since: datetime
    """Creation or the last resume: events before it are never run late nor announced as missed."""
    last_done_at: datetime | None = None
    """Scheduled instant of the latest occurrence run (or decided) by the timer."""
    days_off: Mapping[str, str] = field(default_factory=dict)
    """Public holidays / calendar the schedule follows and what it does on them (empty: none)."""


@dataclass(frozen=True, slots=True)
class StoredOccurrence:
    key: str
    schedule: str
    action: str
    local_date: str
    due_at: datetime
    """The scheduled instant (overrides move the effective one)."""
    state: str
    """pending | announced | running | done | skipped | missed."""
    kind: str = "scheduled"
    """Either `scheduled` (from the schedule's times) or `resleep` (the end of a temporary wake)."""
    op_id: str = ""
    announce_channel: str = ""
    announce_ts: str = ""
    announced_for: datetime | None = None
    """The effective instant the last announcement was made for (a postpone starts afresh)."""
    announced_lead: int | None = None
    """Seconds: the shortest lead already announced for `announced_for`."""
    summary: str = ""
    note: str = ""
    done_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredOverride:
    key: str
    schedule: str
    kind: str
    until: datetime | None
    by: str
    at: datetime
    note: str = ""


_RELEASED_AT = "1970-01-01T00:00:00+00:00"


OPEN_BUSY_SECONDS = 10.0
"""How long opening waits for another process that holds the database's lock (SQLite's busy timeout
for every statement after that is the same)."""


def _connect(path: str) -> tuple[sqlite3.Connection, list[str]]:
    """A connection in WAL mode and the quick check's findings; sqlite3 errors propagate."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=OPEN_BUSY_SECONDS)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(OPEN_BUSY_SECONDS * 1000)}")
        return conn, [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    except BaseException:
        conn.close()
        raise


def _connect_when_free(path: str) -> tuple[sqlite3.Connection, list[str]]:
    """`_connect`, again while another process holds the lock, for up to OPEN_BUSY_SECONDS.

    SQLite's busy timeout does not cover every lock: when two processes open a new file at once, the
    switch to WAL needs an exclusive lock, and SQLite answers "database is locked" at once instead
    of waiting where waiting could deadlock. Two scalebot replicas starting together hit that.
    """
    deadline = time.monotonic() + OPEN_BUSY_SECONDS
    pause = 0.01
    while True:
        try:
            return _connect(path)
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            conn, problems = _connect_when_free(self.path)
        except sqlite3.OperationalError as exc:  # cannot open, I/O error, locked, disk full
            raise StoreError(
                f"cannot open the database {self.path}: {exc}{_space_hint(self.path)} "
                "(check the path, its permissions and the free space on its disk)"
            ) from exc
        except sqlite3.DatabaseError as exc:  # not a database, malformed
            raise StoreError(f"the database {self.path} is damaged ({exc}): {_DAMAGED}") from exc
        if problems != ["ok"]:
            conn.close()
            found = " ".join(" ".join(problems).split())[:200]
            raise StoreError(f"the database {self.path} is damaged ({found}): {_DAMAGED}")
        self._conn = conn
        self.db = sqlite_utils.Database(conn)
        self._lock = threading.RLock()
        self._pending_heads: list[tuple[int, str]] = []
        """Audit rows written in the open transaction: their heads are logged once it commits."""
        try:
            with self.transaction():
                self._migrate()
        except BaseException:
            conn.close()
            raise

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
                raise StoreError(
                    f"the database {self.path} is locked by another process or unwritable ({exc})"
                    f"{_space_hint(self.path)}: is another scalebot using this file?"
                ) from exc
            self._pending_heads.clear()
            try:
                yield
            except sqlite3.OperationalError as exc:  # e.g. disk full: SQLite has rolled back already
                self._rollback()
                raise StoreError(
                    f"cannot write the database {self.path}: {exc}{_space_hint(self.path)}"
                ) from exc
            except BaseException:
                self._rollback()
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._rollback()
                raise StoreError(
                    f"cannot write the database {self.path}: {exc}{_space_hint(self.path)}"
                ) from exc
            self._log_heads()

    def _log_heads(self) -> None:
        """Publish the committed audit rows' hashes outside the file: `verify-audit --expect-head`
        checks a kept line against it. Only committed rows: a rolled-back one never existed."""
        for row_id, digest in self._pending_heads:
            log.info(
                "audit head %s (row %d)", digest, row_id, extra={"audit_row": row_id, "audit_head": digest}
            )
        self._pending_heads.clear()

    def _rollback(self) -> None:
        # After SQLITE_FULL and some I/O errors SQLite has already rolled back; a second ROLLBACK
        # would raise "no transaction is active" and hide the real error.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def schema_version(self) -> int:
        """The schema the database was written with (0: before the version was recorded)."""
        if "meta" not in self.db.table_names():
            return 0
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            return int(row[0]) if row else 0
        except ValueError as exc:
            raise StoreError(
                f"the database {self.path} has an unreadable schema version {row[0]!r}: {_DAMAGED}"
            ) from exc

    def _migrate(self) -> None:
        db = self.db
        found = self.schema_version()
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the database {self.path} was written by a newer scalebot (schema {found}; this "
                f"version reads schema {SCHEMA_VERSION} and older): run the newer scalebot with it, "
                "or start this one with another file; nothing was changed"
            )
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
        self._add_columns("operations", {"initiated_by": str})
        db.table("operations").create_index(["approval_id"], if_not_exists=True)
        db.table("operations").create_index(["state"], if_not_exists=True)
        db.table("journal").create(
            {"id": int, "at": str, "op_id": str, "step": str, "event": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("journal").create_index(["op_id"], if_not_exists=True)
        if "runner" not in db.table("journal").columns_dict:
            db.table("journal").add_column("runner", str)
        # One runner per operation: the claim's token fences the writes of a runner that lost it.
        db.table("runner_claims").create(
            {
                "op_id": str,
                "owner": str,
                "host": str,
                "pid": int,
                "nonce": str,
                "token": int,
                "heartbeat_at": str,
            },
            pk="op_id",
            if_not_exists=True,
        )
        db.table("audit").create(
            {"id": int, "at": str, "actor": str, "action": str, "op_id": str, "cluster": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("audit").create_index(["op_id"], if_not_exists=True)
        self._migrate_audit_chain(found)
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
        db.table("workload_records").create(
            {"cluster": str, "key": str, "record": str, "op_id": str, "at": str},
            pk=("cluster", "key"),
            if_not_exists=True,
        )
        # Workloads whose pods were on the nodes a sleep removed: what its wake follows back.
        db.table("displaced").create(
            {"cluster": str, "pool": str, "key": str, "op_id": str, "at": str},
            pk=("cluster", "pool", "key"),
            if_not_exists=True,
        )
        # Slack delivery: what the sender still owes (JSON items) and where each message lives.
        db.table("outbox").create(
            {"id": str, "seq": int, "item": str, "sent": int}, pk="id", if_not_exists=True
        )
        db.table("messages").create({"key": str, "channel": str, "ts": str}, pk="key", if_not_exists=True)
        # The built-in simulated cluster (`--simulated`): its objects as JSON, one row per part, so
        # that separate commands on the same file see one cluster, as they would a real one.
        db.table("simulation").create(
            {"cluster": str, "part": str, "state": str, "saved_at": str},
            pk=("cluster", "part"),
            if_not_exists=True,
        )
        # The last week whose savings post each cluster claimed (a restart never posts it twice).
        db.table("savings_posts").create(
            {"cluster": str, "week": str, "claimed_at": str}, pk="cluster", if_not_exists=True
        )
        self._migrate_schedules()
        self._restore_append_only_triggers(found)
        if found < TYPED_RECORDS_SCHEMA:
            self._migrate_operation_records()
        db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    def _restore_append_only_triggers(self, found: int) -> None:
        """Create the append-only triggers; one dropped or replaced outside scalebot is put back
        and reported (its rows may have been edited meanwhile: `verify-audit` says which)."""
        existing = {
            str(name): str(sql)
            for name, sql in self._conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        }
        for table in APPEND_ONLY_TABLES:
            for name, sql in _append_only_triggers(table).items():
                if existing.get(name) == sql:
                    continue
                if name in existing:
                    self._conn.execute(f"DROP TRIGGER {name}")
                if name in existing or (table == "audit" and found >= AUDIT_CHAIN_SCHEMA):
                    log.warning(
                        "the append-only trigger %s of %s was %s outside scalebot; restored. "
                        "`scalebot operations verify-audit` names any row edited meanwhile",
                        name,
                        self.path,
                        "replaced" if name in existing else "dropped",
                    )
                self._conn.execute(sql)

    def _migrate_operation_records(self) -> None:
        """Schema 4: each operation's free-form progress and result objects become typed records."""
        for op_id, step_data, result in self._conn.execute(
            "SELECT id, step_data, result FROM operations"
        ).fetchall():
            progress = progress_from_legacy(json.loads(step_data or "{}"))
            summary = summary_from_legacy(json.loads(result or "{}"))
            self._conn.execute(
                "UPDATE operations SET step_data = ?, result = ? WHERE id = ?",
                (_encode(progress), _encode(summary), op_id),
            )

    def _add_columns(self, table: str, columns: Mapping[str, type]) -> None:
        existing = self.db.table(table).columns_dict
        for name, kind in columns.items():
            if name not in existing:
                self.db.table(table).add_column(name, kind)

    def _migrate_audit_chain(self, found: int) -> None:
        """Schema 3: hash-chain the audit rows written before the chain existed, once.

        Keyed on the recorded schema version, never on a missing column: a chained database whose
        hash columns were dropped must not be re-chained (that would bless whatever was edited)."""
        columns = self.db.table("audit").columns_dict
        if found >= AUDIT_CHAIN_SCHEMA:
            if not {"prev_hash", "hash"} <= set(columns):
                raise StoreError(
                    f"the audit table of {self.path} has lost its hash chain (schema {found} has "
                    "`prev_hash` and `hash` columns): it was altered outside scalebot. Nothing was "
                    "changed; keep the file for investigation and start scalebot with a new one"
                )
            return
        if "hash" in columns:  # a new database: created with the chain, nothing to backfill
            return
        self._add_columns("audit", {"prev_hash": str, "hash": str})
        # The append-only trigger forbids the one-time backfill; it is re-created right after.
        self._conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
        prev = GENESIS_HASH
        for row in self._conn.execute(
            "SELECT id, at, actor, action, op_id, cluster, detail FROM audit ORDER BY id"
        ).fetchall():
            digest = _audit_hash(prev, row)
            self._conn.execute(
                "UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", (prev, digest, row[0])
            )
            prev = digest

    def _migrate_schedules(self) -> None:
        db = self.db
        db.table("schedules").create(
            {
                "name": str,
                "cluster": str,
                "target": str,
                "sleep": str,
                "wake": str,
                "tz": str,
                "lead_times": str,
                "channel": str,
                "approval_mode": str,
                "approved_by": str,
                "enabled": int,
                "exceptions": str,
                "created_by": str,
                "created_at": str,
                "active_since": str,
                "last_done_at": str,
            },
            pk="name",
            if_not_exists=True,
        )
        self._add_columns("schedules", {"days_off": str})
        db.table("occurrences").create(
            {
                "key": str,
                "schedule": str,
                "action": str,
                "local_date": str,
                "due_at": str,
                "state": str,
                "kind": str,
                "op_id": str,
                "announce_channel": str,
                "announce_ts": str,
                "announced_for": str,
                "announced_lead": int,
                "summary": str,
                "note": str,
                "done_at": str,
            },
            pk="key",
            if_not_exists=True,
        )
        db.table("occurrences").create_index(["schedule", "state"], if_not_exists=True)
        db.table("occurrences").create_index(["op_id"], if_not_exists=True)
        db.table("overrides").create(
            {
                "id": int,
                "key": str,
                "schedule": str,
                "kind": str,
                "until": str,
                "by": str,
                "at": str,
                "note": str,
            },
            pk="id",
            if_not_exists=True,
        )
        db.table("overrides").create_index(["schedule"], if_not_exists=True)
        if "schedule_approvals" not in db.table_names():
            db.table("schedule_approvals").create(
                {"schedule": str, "user": str, "at": str, "fingerprint": str},
                pk=("schedule", "user", "fingerprint"),
            )
            # Schema 2 recorded one pre-approver per schedule; it counts as one of the quorum now,
            # and not at all where it is the creator (unless the policy allows self-approval).
            for row in db.table("schedules").rows_where(
                "approval_mode = 'pre_approved' AND approved_by != ''"
            ):
                stored = _row_to_schedule(row)
                db.table("schedule_approvals").insert(
                    {
                        "schedule": stored.name,
                        "user": stored.approved_by,
                        "at": stored.created_at.isoformat(),
                        "fingerprint": schedule_fingerprint(stored),
                    }
                )
        db.table("force_decisions").create(
            {
                "schedule": str,
                "key": str,
                "kind": str,
                "user": str,
                "pool": str,
                "digest": str,
                "binding": str,
                "scope": str,
                "at": str,
            },
            pk=("schedule", "key", "kind", "user", "pool"),
            if_not_exists=True,
        )

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

    # -- runner claims (one runner per operation, fencing) ----------------------------------------

    def claim_operation(
        self,
        op_id: str,
        me: RunnerId,
        *,
        now: datetime,
        ttl_seconds: float,
        gone: Callable[[RunnerClaim], bool],
    ) -> int:
        """Become the operation's one runner; returns the new fencing token.

        Raises ClaimHeld while another runner holds it: heard from within `ttl_seconds` and not
        `gone` (the caller's liveness test, e.g. a dead pid on this host). Each claim bumps the
        token, so every write of the previous holder is refused from then on (`fenced`).
        """
        with self.transaction():
            current = self.runner_claim(op_id)
            if current is not None and current.nonce and current.nonce != me.nonce:
                fresh = (now - current.heartbeat_at).total_seconds() < ttl_seconds
                if fresh and not gone(current):
                    raise ClaimHeld(current, now=now, ttl_seconds=ttl_seconds)
            token = (current.token if current is not None else 0) + 1
            self.db.table("runner_claims").upsert(
                {
                    "op_id": op_id,
                    "owner": me.owner,
                    "host": me.host,
                    "pid": me.pid,
                    "nonce": me.nonce,
                    "token": token,
                    "heartbeat_at": now.isoformat(),
                },
                pk="op_id",
            )
            return token

    def runner_claim(self, op_id: str) -> RunnerClaim | None:
        with self._lock:
            rows = list(self.db.table("runner_claims").rows_where("op_id = ?", [op_id]))
        if not rows:
            return None
        r = rows[0]
        return RunnerClaim(
            r["op_id"],
            r["owner"],
            r["host"],
            int(r["pid"]),
            r["nonce"],
            int(r["token"]),
            datetime.fromisoformat(r["heartbeat_at"]),
        )

    def renew_claims(self, tokens: Mapping[str, int], *, now: datetime) -> set[str]:
        """Heartbeat the claims still ours; returns the operations whose claim another runner took."""
        lost = set()
        with self.transaction():
            for op_id, token in tokens.items():
                cursor = self._conn.execute(
                    "UPDATE runner_claims SET heartbeat_at = ? WHERE op_id = ? AND token = ?",
                    [now.isoformat(), op_id, token],
                )
                if cursor.rowcount == 0:
                    lost.add(op_id)
        return lost

    def release_claim(self, op_id: str, token: int) -> None:
        """Give the claim up (the operation ended, or this runner stops): the next runner need not
        wait for it to lapse. The row stays, so tokens only ever grow and a stale one never matches."""
        with self.transaction():
            self._conn.execute(
                "UPDATE runner_claims SET nonce = '', heartbeat_at = ? WHERE op_id = ? AND token = ?",
                [_RELEASED_AT, op_id, token],
            )

    @contextmanager
    def fenced(self, op_id: str, token: int) -> Iterator[None]:
        """One write transaction that happens only while `token` is still the operation's claim.

        Raises Fenced (nothing written) once another runner has claimed the operation.
        """
        with self.transaction():
            row = self._conn.execute("SELECT token FROM runner_claims WHERE op_id = ?", [op_id]).fetchone()
            if row is None or int(row[0]) != token:
                raise Fenced(
                    f"operation {op_id} was claimed by another runner: this runner's writes are refused"
                )
            yield

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

    def lock_holder(self, keys: Sequence[str]) -> tuple[str, str] | None:
        """(key, operation) of the first of `keys` an operation holds, if any."""
        with self._lock:
            for key in keys:
                held = list(self.db.table("locks").rows_where("key = ?", [key]))
                if held:
                    return key, held[0]["op_id"]
        return None

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

    # -- Slack delivery (the bot's outbox) ----------------------------------------------------------

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

    # -- the weekly savings post -------------------------------------------------------------------

    def savings_post_week(self, cluster: str) -> date | None:
        """The Monday of the last week whose savings post `cluster` claimed (None: never)."""
        with self._lock:
            rows = list(self.db.table("savings_posts").rows_where("cluster = ?", [cluster]))
        return date.fromisoformat(rows[0]["week"]) if rows else None

    def claim_savings_week(self, cluster: str, week: date, *, at: datetime) -> bool:
        """Claim the post of `week` before sending it: False if that week (or a later one) is
        already claimed, so two ticks or a restart never post one week twice."""
        with self.transaction():
            rows = list(self.db.table("savings_posts").rows_where("cluster = ?", [cluster]))
            if rows and date.fromisoformat(rows[0]["week"]) >= week:
                return False
            self.db.table("savings_posts").upsert(
                {"cluster": cluster, "week": week.isoformat(), "claimed_at": at.isoformat()}, pk="cluster"
            )
        return True

    def release_savings_week(self, cluster: str, week: date, previous: date | None) -> None:
        """Give back the claim of a post Slack refused, so the next start tries that week again."""
        with self.transaction():
            table = self.db.table("savings_posts")
            if not list(table.rows_where("cluster = ? AND week = ?", [cluster, week.isoformat()])):
                return  # claimed again since (a later week): that claim stands
            if previous is None:
                table.delete(cluster)
            else:
                table.update(cluster, {"week": previous.isoformat()})

    # -- the simulated cluster -------------------------------------------------------------------

    def save_simulation(self, cluster: str, part: str, state: Mapping[str, Any], *, at: datetime) -> None:
        """Replace one part of a simulated cluster's state (one transaction: a crash keeps the old
        or the new state, never half of it)."""
        row = {
            "cluster": cluster,
            "part": part,
            "state": json.dumps(state, sort_keys=True),
            "saved_at": at.isoformat(),
        }
        with self.transaction():
            self.db.table("simulation").upsert(row, pk=("cluster", "part"))

    def simulation(self, cluster: str) -> dict[str, dict[str, Any]]:
        """The saved parts of a simulated cluster's state by name (empty: never saved)."""
        with self._lock:
            rows = list(self.db.table("simulation").rows_where("cluster = ?", [cluster]))
        return {str(r["part"]): json.loads(r["state"]) for r in rows}

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

    # -- schedules --------------------------------------------------------------------------------

    def insert_schedule(self, schedule: StoredSchedule) -> bool:
        """False when a schedule of that name exists (nothing is written)."""
        with self.transaction():
            if list(self.db.table("schedules").rows_where("name = ?", [schedule.name])):
                return False
            self.db.table("schedules").insert(_schedule_to_row(schedule))
            return True

    def get_schedule(self, name: str) -> StoredSchedule | None:
        with self._lock:
            rows = list(self.db.table("schedules").rows_where("name = ?", [name]))
        return _row_to_schedule(rows[0]) if rows else None

    def list_schedules(self, *, cluster: str | None = None) -> list[StoredSchedule]:
        with self._lock:
            rows = self.db.table("schedules").rows_where(
                "cluster = ?" if cluster else None, [cluster] if cluster else [], order_by="name"
            )
            return [_row_to_schedule(r) for r in rows]

    def set_schedule_enabled(self, name: str, enabled: bool, *, since: datetime | None = None) -> None:
        """Pause or resume; a resume moves `active_since` so events while paused are never run late."""
        values: dict[str, Any] = {"enabled": int(enabled)}
        if since is not None:
            values["active_since"] = since.isoformat()
        with self.transaction():
            self.db.table("schedules").update(name, values)

    def set_schedule_done(self, name: str, at: datetime) -> None:
        """Move `last_done_at` forward (never back: an older occurrence decided late changes nothing)."""
        with self.transaction():
            current = self.get_schedule(name)
            if current is not None and (current.last_done_at is None or at > current.last_done_at):
                self.db.table("schedules").update(name, {"last_done_at": at.isoformat()})

    def delete_schedule(self, name: str) -> bool:
        """Remove a schedule and its occurrences still to come; run ones stay as history."""
        with self.transaction():
            if not list(self.db.table("schedules").rows_where("name = ?", [name])):
                return False
            self.db.table("schedules").delete(name)
            self.db.table("schedule_approvals").delete_where("schedule = ?", [name])
            self.db.table("force_decisions").delete_where("schedule = ?", [name])
            self.db.table("occurrences").delete_where(
                "schedule = ? AND state IN ('pending', 'announced')", [name]
            )
            return True

    # -- occurrences ------------------------------------------------------------------------------

    def get_occurrence(self, key: str) -> StoredOccurrence | None:
        with self._lock:
            rows = list(self.db.table("occurrences").rows_where("key = ?", [key]))
        return _row_to_occurrence(rows[0]) if rows else None

    def save_occurrence(self, occurrence: StoredOccurrence) -> None:
        with self.transaction():
            self.db.table("occurrences").upsert(_occurrence_to_row(occurrence), pk="key")

    def list_occurrences(
        self, *, schedule: str | None = None, states: Sequence[str] = (), op_id: str | None = None
    ) -> list[StoredOccurrence]:
        where, args = [], []
        if schedule is not None:
            where.append("schedule = ?")
            args.append(schedule)
        if states:
            where.append(f"state IN ({','.join('?' for _ in states)})")
            args.extend(states)
        if op_id is not None:
            where.append("op_id = ?")
            args.append(op_id)
        with self._lock:
            rows = self.db.table("occurrences").rows_where(
                " AND ".join(where) or None, args, order_by="due_at, key"
            )
            return [_row_to_occurrence(r) for r in rows]

    # -- pre-approvals of schedules --------------------------------------------------------------

    def add_schedule_approval(self, approval: ScheduleApproval) -> bool:
        """False when this approver already pre-approved this definition (nothing is written)."""
        with self.transaction():
            key = [approval.schedule, approval.user, approval.fingerprint]
            where = "schedule = ? AND user = ? AND fingerprint = ?"
            if list(self.db.table("schedule_approvals").rows_where(where, key)):
                return False
            self.db.table("schedule_approvals").insert(
                {
                    "schedule": approval.schedule,
                    "user": approval.user,
                    "at": approval.at.isoformat(),
                    "fingerprint": approval.fingerprint,
                }
            )
            return True

    def remove_schedule_approvals(self, schedule: str, *, user: str | None = None) -> int:
        """Withdraw pre-approvals of `schedule`: `user`'s own, or all of them; how many went."""
        where, args = "schedule = ?", [schedule]
        if user is not None:
            where, args = "schedule = ? AND user = ?", [schedule, user]
        with self.transaction():
            table = self.db.table("schedule_approvals")
            count = table.count_where(where, args)
            table.delete_where(where, args)
            return count

    def schedule_approvals(self, schedule: str) -> list[ScheduleApproval]:
        with self._lock:
            rows = self.db.table("schedule_approvals").rows_where("schedule = ?", [schedule], order_by="at")
            return [
                ScheduleApproval(r["schedule"], r["user"], datetime.fromisoformat(r["at"]), r["fingerprint"])
                for r in rows
            ]

    # -- force decisions on schedules and their occurrences ---------------------------------------

    def save_force_decision(self, decision: ForceDecision) -> None:
        """Insert or replace the decision of that (schedule, key, kind, user, pool)."""
        with self.transaction():
            self.db.table("force_decisions").upsert(
                {
                    "schedule": decision.schedule,
                    "key": decision.key,
                    "kind": decision.kind,
                    "user": decision.user,
                    "pool": decision.pool,
                    "digest": decision.digest,
                    "binding": decision.binding,
                    "scope": json.dumps(dict(decision.scope), sort_keys=True),
                    "at": decision.at.isoformat() if decision.at else "",
                },
                pk=("schedule", "key", "kind", "user", "pool"),
            )

    def force_decisions(self, schedule: str, *, key: str | None = None) -> list[ForceDecision]:
        """A schedule's force decisions (`key` "" for its standing scope), oldest first."""
        where, args = "schedule = ?", [schedule]
        if key is not None:
            where, args = "schedule = ? AND key = ?", [schedule, key]
        with self._lock:
            rows = self.db.table("force_decisions").rows_where(where, args, order_by="at, user, pool")
            return [
                ForceDecision(
                    r["schedule"],
                    r["key"],
                    r["kind"],
                    r["user"] or "",
                    r["pool"] or "",
                    r["digest"] or "",
                    r["binding"] or "",
                    json.loads(r["scope"] or "{}"),
                    _time_or_none(r["at"]),
                )
                for r in rows
            ]

    def remove_force_decisions(self, schedule: str, *, key: str, kind: str, user: str | None = None) -> int:
        """Remove decisions of one kind on `key` (one person's, or everyone's); how many went."""
        where, args = "schedule = ? AND key = ? AND kind = ?", [schedule, key, kind]
        if user is not None:
            where, args = where + " AND user = ?", [*args, user]
        with self.transaction():
            table = self.db.table("force_decisions")
            count = table.count_where(where, args)
            table.delete_where(where, args)
            return count

    # -- overrides (append-only) ------------------------------------------------------------------

    def add_override(self, override: StoredOverride) -> None:
        with self.transaction():
            self.db.table("overrides").insert(
                {
                    "key": override.key,
                    "schedule": override.schedule,
                    "kind": override.kind,
                    "until": override.until.isoformat() if override.until else "",
                    "by": override.by,
                    "at": override.at.isoformat(),
                    "note": override.note,
                }
            )

    def overrides(self, *, schedule: str | None = None) -> list[StoredOverride]:
        """In the order they were decided (the latest for a key wins)."""
        with self._lock:
            rows = self.db.table("overrides").rows_where(
                "schedule = ?" if schedule else None, [schedule] if schedule else [], order_by="id"
            )
            return [
                StoredOverride(
                    r["key"],
                    r["schedule"],
                    r["kind"],
                    _time_or_none(r["until"]),
                    r["by"],
                    datetime.fromisoformat(r["at"]),
                    r["note"] or "",
                )
                for r in rows
            ]


def schedule_fingerprint(stored: StoredSchedule) -> str:
    """What a pre-approval consents to: what the schedule does, when, where it is announced."""
    essence: dict[str, Any] = {
        "cluster": stored.cluster,
        "target": dict(stored.target),
        "sleep": stored.sleep,
        "wake": stored.wake,
        "tz": stored.tz,
        "lead_times": list(stored.lead_times),
        "channel": stored.channel,
        "exceptions": list(stored.exceptions),
        "approval_mode": stored.approval_mode,
    }
    if stored.days_off:  # only when set, so the schedules saved before it keep their pre-approvals
        essence["days_off"] = dict(stored.days_off)
    return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:16]


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


@dataclass(frozen=True, slots=True)
class AuditCheck:
    """What `verify_audit_file` found: rows, the chain's head hash, breaks, and where a kept head is."""

    rows: int
    head: str
    problems: tuple[AuditProblem, ...]
    altered: tuple[str, ...] = ()
    """What was altered around the rows (a missing or replaced append-only trigger)."""
    expected_row: int | None = None
    """The row whose hash is `--expect-head` (None: not asked, or not in the chain)."""


def verify_audit_file(path: str, *, expect_head: str | None = None) -> AuditCheck:
    """Verify the audit chain of a database file without changing a byte of it.

    Read-only (`mode=ro`), never migrating. A file at rest (no `-wal`) is opened `immutable`, so
    SQLite creates no `-wal`/`-shm` beside it either. A live file (scalebot running, its `-wal` and
    `-shm` present) is read through them so committed rows count; SQLite then updates its read
    marks in the `-shm`, as any reader does, and nothing else. A `-wal` without its `-shm` is
    refused: reading it would create one. Raises AuditUnverifiable when the schema version,
    the chain's columns or the append-only triggers are not this scalebot's, StoreError when the
    file cannot be read."""
    conn = _open_read_only(path)
    try:
        altered = _require_chain_schema(conn, path)
        rows = conn.execute(_AUDIT_CHAIN_ROWS).fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the database {path}: {exc}") from exc
    finally:
        conn.close()
    expected_row = None
    if expect_head is not None:
        expected_row = next((int(row[0]) for row in rows if row[8] == expect_head), None)
    head = str(rows[-1][8]) if rows else GENESIS_HASH
    return AuditCheck(len(rows), head, tuple(_chain_problems(rows)), altered, expected_row)


def read_operations_file(path: str) -> list[Operation]:
    """Every operation recorded in a database file, read-only and never migrating (as
    `verify_audit_file` opens it): for reports that must not change the file they read."""
    conn = _open_read_only(path)
    conn.row_factory = sqlite3.Row
    try:
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if found is None or str(found[0]) != str(SCHEMA_VERSION):
            raise StoreError(
                f"{path} has schema version {found[0] if found else 'none'}; this scalebot reads schema "
                f"{SCHEMA_VERSION} (start scalebot on the file once to migrate it)"
            )
        rows = conn.execute("SELECT * FROM operations ORDER BY created_at, id").fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the database {path}: {exc}") from exc
    finally:
        conn.close()
    return [_row_to_op(dict(row)) for row in rows]


def _open_read_only(path: str) -> sqlite3.Connection:
    file = Path(path)
    if not file.is_file():
        raise StoreError(f"no database file at {path}")
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if wal.exists() and not shm.exists():
        raise StoreError(
            f"{path} has a write-ahead log ({wal.name}) but no {shm.name}: reading it would create one. "
            f'Verify a copy (`sqlite3 {path} ".backup copy.db"`, then verify copy.db); nothing was changed'
        )
    mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(f"{file.absolute().as_uri()}?{mode}", uri=True, isolation_level=None)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the database {path} read-only: {exc}") from exc
    return conn


def _require_chain_schema(conn: sqlite3.Connection, path: str) -> tuple[str, ...]:
    """Raises when the rows cannot be checked (schema version, chain columns); returns what else
    was altered (the append-only triggers), for the caller to report with the rows' own breaks."""
    objects = {
        (str(kind), str(name)): str(sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    }
    found = 0
    if ("table", "meta") in objects:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        found = int(row[0]) if row and str(row[0]).isdecimal() else -1
    if found != SCHEMA_VERSION:
        newer = found > SCHEMA_VERSION
        raise AuditUnverifiable(
            f"{path} has schema version {found}; this scalebot verifies schema {SCHEMA_VERSION} only. "
            + (
                "Verify it with the newer scalebot that wrote it"
                if newer
                else "An older scalebot's file is migrated (and chained) by starting scalebot on it, "
                "never by verifying; a version set back by hand means the file was altered"
            )
        )
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(audit)").fetchall()}
    missing = [c for c in ("prev_hash", "hash") if c not in columns]
    if missing:
        raise AuditUnverifiable(
            f"the audit table of {path} has no {' or '.join(f'`{c}`' for c in missing)} column: "
            "its hash chain was removed outside scalebot, so the rows cannot be trusted"
        )
    altered = []
    for name, sql in _append_only_triggers("audit").items():
        if objects.get(("trigger", name)) != sql:
            state = "is missing" if ("trigger", name) not in objects else "was replaced"
            altered.append(
                f"the append-only trigger {name} {state}: the audit table was altered outside scalebot"
            )
    return tuple(altered)


def _audit_hash(prev: str, values: Sequence[Any]) -> str:
    """SHA-256 over the previous row's hash and this row's fields (id included, so rows cannot move)."""
    payload = json.dumps([prev, *values], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def _time_or_none(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _schedule_to_row(s: StoredSchedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "cluster": s.cluster,
        "target": json.dumps(dict(s.target), sort_keys=True),
        "sleep": s.sleep,
        "wake": s.wake,
        "tz": s.tz,
        "lead_times": json.dumps(list(s.lead_times)),
        "channel": s.channel,
        "approval_mode": s.approval_mode,
        "approved_by": s.approved_by,
        "enabled": int(s.enabled),
        "exceptions": json.dumps(list(s.exceptions)),
        "created_by": s.created_by,
        "created_at": s.created_at.isoformat(),
        "active_since": s.active_since.isoformat(),
        "last_done_at": s.last_done_at.isoformat() if s.last_done_at else "",
        "days_off": json.dumps(dict(s.days_off), sort_keys=True) if s.days_off else "",
    }


def _row_to_schedule(row: Mapping[str, Any]) -> StoredSchedule:
    return StoredSchedule(
        name=row["name"],
        cluster=row["cluster"],
        target=json.loads(row["target"]),
        sleep=row["sleep"],
        wake=row["wake"] or "",
        tz=row["tz"],
        lead_times=tuple(json.loads(row["lead_times"] or "[]")),
        channel=row["channel"] or "",
        approval_mode=row["approval_mode"],
        approved_by=row["approved_by"] or "",
        enabled=bool(row["enabled"]),
        exceptions=tuple(json.loads(row["exceptions"] or "[]")),
        created_by=row["created_by"] or "",
        created_at=datetime.fromisoformat(row["created_at"]),
        active_since=datetime.fromisoformat(row["active_since"]),
        last_done_at=_time_or_none(row["last_done_at"]),
        days_off=json.loads(row.get("days_off") or "{}"),
    )


def _occurrence_to_row(o: StoredOccurrence) -> dict[str, Any]:
    return {
        "key": o.key,
        "schedule": o.schedule,
        "action": o.action,
        "local_date": o.local_date,
        "due_at": o.due_at.isoformat(),
        "state": o.state,
        "kind": o.kind,
        "op_id": o.op_id,
        "announce_channel": o.announce_channel,
        "announce_ts": o.announce_ts,
        "announced_for": o.announced_for.isoformat() if o.announced_for else "",
        "announced_lead": o.announced_lead,
        "summary": o.summary,
        "note": o.note,
        "done_at": o.done_at.isoformat() if o.done_at else "",
    }


def _row_to_occurrence(row: Mapping[str, Any]) -> StoredOccurrence:
    return StoredOccurrence(
        key=row["key"],
        schedule=row["schedule"],
        action=row["action"],
        local_date=row["local_date"],
        due_at=datetime.fromisoformat(row["due_at"]),
        state=row["state"],
        kind=row["kind"] or "scheduled",
        op_id=row["op_id"] or "",
        announce_channel=row["announce_channel"] or "",
        announce_ts=row["announce_ts"] or "",
        announced_for=_time_or_none(row["announced_for"]),
        announced_lead=row["announced_lead"],
        summary=row["summary"] or "",
        note=row["note"] or "",
        done_at=_time_or_none(row["done_at"]),
    )


def _encode(record: OperationProgress | OperationSummary | None) -> str:
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
        "step_data": _encode(op.progress),
        "approval_id": op.approval_id,
        "approvals_required": op.approvals_required,
        "expires_at": op.expires_at.isoformat() if op.expires_at else "",
        "message_ts": op.message_ts,
        "thread_ts": op.thread_ts,
        "result": _encode(op.summary),
        "error": op.error,
        "initiated_by": json.dumps(list(op.initiated_by)),
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

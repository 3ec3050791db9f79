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
  the hash of the previous row (`prev_hash`) and its own (`hash`; HMAC-SHA256 with the audit key,
  `engine.store.audit`), and a trigger refuses an inserted row not chained to the head: someone
  with write access to the file who drops the triggers and edits, inserts or deletes a row breaks
  the chain, which `verify_audit` reports; `verify_audit_file` (`scalebot operations verify-audit`)
  checks a file opened read-only, never migrating it. Every committed audit row's hash is also
  logged ("audit head"), so a copy of the chain's head lives where an operator of the file cannot
  rewrite it.
- Operation state changes are compare-and-set (`transition`, `save_progress`): the write names the
  state it expects and does nothing when another thread or process moved the operation first. A
  finished operation's locks are released in the same transaction as its final state.
- Schedules are stored as the text people typed (canonical form), occurrences by their
  idempotency key (`engine.schedules.core.spec.Occurrence.key`); `engine.schedules` owns their
  meaning.

The store is one `Store`, composed of one part per concern (see the package docstring):
`operations` (operations, journal, votes), `claims` (runner claims, locks), `audit`, `schedules`,
`restore` (sizes and workloads a sleep keeps), `outbox`, `savings`, `simulation`, `migrations`;
`readonly` reads a file without changing it, and `Store.read_only` gives the CLI's read commands a
store over such a connection (never migrated: an older schema is migrated in a copy in memory).
This module opens the file and composes the parts;
every other name is imported from the part that owns it (`engine.store.claims.Fenced`,
`engine.store.base.StoreError`, ...).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import sqlite_utils

from engine.store import readonly
from engine.store.audit import (
    FROM_ENVIRONMENT,
    AuditKey,
    AuditStore,
    FromEnvironment,
    audit_key_from_environment,
)
from engine.store.base import DAMAGED_FILE_ADVICE, StoreBase, StoreError, space_hint
from engine.store.claims import ClaimsStore
from engine.store.migrations import SCHEMA_VERSION, MigrationsStore
from engine.store.operations import OperationsStore
from engine.store.outbox import OutboxStore
from engine.store.restore import RestoreStore
from engine.store.savings import SavingsStore
from engine.store.schedules import SchedulesStore
from engine.store.simulation import SimulationStore

__all__ = ["Store"]


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


class Store(
    OperationsStore,
    ClaimsStore,
    AuditStore,
    SchedulesStore,
    RestoreStore,
    OutboxStore,
    SavingsStore,
    SimulationStore,
    MigrationsStore,
    StoreBase,
):
    """The database: opened (and migrated) by the constructor, one part per concern."""

    def __init__(
        self, path: str | Path, *, audit_key: AuditKey | FromEnvironment | None = FROM_ENVIRONMENT
    ) -> None:
        """`audit_key`: the key of the audit chain (default: `SCALEBOT_AUDIT_KEY` or
        `SCALEBOT_AUDIT_KEY_FILE`, so every store a process opens chains with the same key;
        None: unkeyed). Raises StoreError when the key does not fit the file's chain."""
        self.path = str(path)
        if isinstance(audit_key, FromEnvironment):
            audit_key = audit_key_from_environment()
        self._audit_key = audit_key
        self._keyed_from = None
        try:
            conn, problems = _connect_when_free(self.path)
        except sqlite3.OperationalError as exc:  # cannot open, I/O error, locked, disk full
            raise StoreError(
                f"cannot open the database {self.path}: {exc}{space_hint(self.path)} "
                "(check the path, its permissions and the free space on its disk)"
            ) from exc
        except sqlite3.DatabaseError as exc:  # not a database, malformed
            raise StoreError(f"the database {self.path} is damaged ({exc}): {DAMAGED_FILE_ADVICE}") from exc
        if problems != ["ok"]:
            conn.close()
            found = " ".join(" ".join(problems).split())[:200]
            raise StoreError(f"the database {self.path} is damaged ({found}): {DAMAGED_FILE_ADVICE}")
        self._attach(conn)
        try:
            with self.transaction():
                self._migrate()
                self._check_audit_key()
        except BaseException:
            conn.close()
            raise

    @classmethod
    def read_only(cls, path: str | Path) -> Store:
        """The file opened for reading only (`mode=ro`, as `readonly` opens it): never created,
        migrated or written (a write raises). A file of an older schema is read from a copy in
        memory, migrated there, so it reads as this version's; a newer one is refused. Raises
        StoreError naming the file (`no database at PATH` when there is none)."""
        conn = readonly.open_read_only(str(path))
        try:
            found = readonly.schema_version(conn)
            tables = {
                str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"cannot read the database {path}: {exc}") from exc
        if found < 0 or "operations" not in tables:
            conn.close()
            what = (
                f"has an unreadable schema version: {DAMAGED_FILE_ADVICE}"
                if found < 0
                else "is not a scalebot database"
            )
            raise StoreError(f"{path} {what}")
        if found > SCHEMA_VERSION:
            conn.close()
            raise StoreError(
                f"the database {path} was written by a newer scalebot (schema {found}; this version "
                f"reads schema {SCHEMA_VERSION} and older): read it with the newer scalebot"
            )
        store = cls.__new__(cls)
        store.path = str(path)
        # Reading writes no audit row, so no key is needed (verify-audit takes the key itself).
        store._audit_key = None
        store._keyed_from = None
        if found == SCHEMA_VERSION:
            store._attach(conn)
            return store
        # Older: the schema this version reads, built on a copy; the file keeps its own.
        copy = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        try:
            conn.backup(copy)
        finally:
            conn.close()
        store._attach(copy)
        with store.transaction():
            store._migrate()
        return store

    def _attach(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.db = sqlite_utils.Database(conn)
        self._lock = threading.RLock()
        self._pending_heads: list[tuple[int, str]] = []
        """Audit rows written in the open transaction: their heads are logged once it commits."""
        self._head_listeners = []

    def close(self) -> None:
        with self._lock:
            self._conn.close()

"""Reading a database file without changing a byte of it: the audit chain's check
(`scalebot operations verify-audit`) and the operations reports read."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from engine.domain.operation import (
    Operation,
)
from engine.store.audit import (
    AUDIT_CHAIN_ROWS,
    AUDIT_CHAINED_TRIGGER,
    GENESIS_HASH,
    KEY_APPLIED,
    AuditKey,
    AuditProblem,
    AuditUnverifiable,
    audit_triggers,
    chain_problems,
)
from engine.store.base import StoreError
from engine.store.migrations import SCHEMA_VERSION
from engine.store.operations import row_to_op


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
    appended: tuple[AuditEntry, ...] = ()
    """The rows after `--expect-head`: written since that head was kept (or slipped in)."""
    keyed_from: int | None = None
    """The first keyed (HMAC) row; None: the chain is unkeyed."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit row as a person checks it: which row, when, who, what."""

    row_id: int
    at: str
    actor: str
    action: str


def verify_audit_file(
    path: str, *, expect_head: str | None = None, key: AuditKey | None = None
) -> AuditCheck:
    """Verify the audit chain of a database file without changing a byte of it, with `key` when
    the chain is keyed (HMAC rows from its `audit_key_applied` row on).

    Read-only (`mode=ro`), never migrating. A file at rest (no `-wal`) is opened `immutable`, so
    SQLite creates no `-wal`/`-shm` beside it either. A live file (scalebot running, its `-wal` and
    `-shm` present) is read through them so committed rows count; SQLite then updates its read
    marks in the `-shm`, as any reader does, and nothing else. A `-wal` without its `-shm` is
    refused: reading it would create one. Raises AuditUnverifiable when the schema version,
    the chain's columns or the append-only triggers are not this scalebot's, StoreError when the
    file cannot be read."""
    conn = open_read_only(path)
    try:
        altered = _require_chain_schema(conn, path)
        rows = conn.execute(AUDIT_CHAIN_ROWS).fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the database {path}: {exc}") from exc
    finally:
        conn.close()
    problems = tuple(chain_problems(rows, key, path))
    expected_row = None
    appended: tuple[AuditEntry, ...] = ()
    if expect_head is not None:
        expected_row = next((int(row[0]) for row in rows if row[8] == expect_head), None)
        if expected_row is not None:
            after = [r for r in rows if int(r[0]) > expected_row]
            appended = tuple(AuditEntry(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in after)
    head = str(rows[-1][8]) if rows else GENESIS_HASH
    keyed_from = next((int(r[0]) for r in rows if r[3] == KEY_APPLIED), None)
    return AuditCheck(len(rows), head, problems, altered, expected_row, appended, keyed_from)


def read_operations_file(path: str) -> list[Operation]:
    """Every operation recorded in a database file, read-only and never migrating (as
    `verify_audit_file` opens it): for reports that must not change the file they read."""
    conn = open_read_only(path)
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
    return [row_to_op(dict(row)) for row in rows]


CLUSTER_COLUMNS = (
    ("operations", "cluster"),
    ("audit", "cluster"),
    ("schedules", "cluster"),
    ("restore", "cluster"),
    ("workload_records", "cluster"),
    ("displaced", "cluster"),
    ("savings_posts", "cluster"),
    ("simulation", "cluster"),
)
"""Where a database file names the clusters it holds records of."""


def recorded_clusters(path: str) -> frozenset[str]:
    """Every cluster the file holds a record of (operations, audit, schedules, saved sizes, a
    simulated cluster's state), read without changing a byte of it. Raises StoreError for a file
    that is not a scalebot database."""
    conn = open_read_only(path)
    try:
        if schema_version(conn) <= 0:
            raise StoreError(f"{path} is not a scalebot database")
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        names: set[str] = set()
        for table, column in CLUSTER_COLUMNS:
            if table in tables:
                rows = conn.execute(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL")
                names.update(str(r[0]) for r in rows)
        return frozenset(names)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read the database {path}: {exc}") from exc
    finally:
        conn.close()


def open_read_only(path: str) -> sqlite3.Connection:
    """A connection that cannot change the file (`Store.read_only`, the audit check, reports)."""
    file = Path(path)
    if not file.is_file():
        raise StoreError(f"no database at {path}")
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


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version: 0 for a file scalebot never opened, -1 for one it cannot read."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row and str(row[0]).isdecimal() else -1


def _require_chain_schema(conn: sqlite3.Connection, path: str) -> tuple[str, ...]:
    """Raises when the rows cannot be checked (schema version, chain columns); returns what else
    was altered (the append-only triggers), for the caller to report with the rows' own breaks."""
    objects = {
        (str(kind), str(name)): str(sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    }
    found = schema_version(conn)
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
    for name, sql in audit_triggers().items():
        if objects.get(("trigger", name)) != sql:
            state = "is missing" if ("trigger", name) not in objects else "was replaced"
            altered.append(
                f"the {'chaining' if name == AUDIT_CHAINED_TRIGGER else 'append-only'} trigger {name} "
                f"{state}: the audit table was altered outside scalebot"
            )
    return tuple(altered)

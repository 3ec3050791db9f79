"""`scalebot operations verify-audit` reads the file and nothing else: read-only, never migrating.

A database whose hash columns were dropped, whose rows were edited, whose append-only triggers
are gone or replaced, or whose schema version is not this scalebot's fails (exit 1) and stays
byte-identical, with no `-wal`/`-shm` created beside it. A healthy one prints its head hash and
row count; `--expect-head` checks a head kept elsewhere (the `audit head` log line every audit
write emits). Opening a chained database whose hash columns were dropped is refused: the
migration keys on the schema version, so it cannot re-chain (and so bless) edited rows.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.common import EXIT_OK, EXIT_USAGE
from bot.cli.operations import EXIT_AUDIT_BROKEN
from engine.store.audit import audit_hash
from engine.store.base import StoreError
from engine.store.database import Store
from engine.store.migrations import SCHEMA_VERSION
from engine.store.readonly import verify_audit_file

AT = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)


def _database(path: Path, rows: int = 3) -> Path:
    store = Store(path)
    for i in range(rows):
        store.audit(at=AT + timedelta(minutes=i), actor=f"U0A{i}", action="request", cluster="dev-eu")
    store.close()
    return path


def _tamper(path: Path, *statements: str) -> None:
    """Someone with write access to the file, outside scalebot."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def _fingerprint(path: Path) -> tuple[str, list[str]]:
    """The file's bytes and what lies beside it (a `-wal` or `-shm` would show up here)."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in path.parent.iterdir())


def _verify(path: Path, *extra: str) -> int:
    return cli.main(["operations", "verify-audit", "--db", str(path), *extra])


def _verify_unchanged(path: Path, *extra: str) -> int:
    before = _fingerprint(path)
    assert not any(name.endswith(("-wal", "-shm")) for name in before[1]), before
    code = _verify(path, *extra)
    assert _fingerprint(path) == before
    return code


def test_a_healthy_database_prints_its_head_and_row_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="engine.store.database"):
        db = _database(tmp_path / "scalebot.db")
    logged = [r.audit_head for r in caplog.records if hasattr(r, "audit_head")]
    assert len(logged) == 3

    assert _verify_unchanged(db) == EXIT_OK

    out = capsys.readouterr().out
    assert "3 rows" in out and f"head {logged[-1]}" in out


def test_dropped_hash_columns_and_an_edited_row_fail_and_leave_the_file_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _database(tmp_path / "scalebot.db")
    _tamper(
        db,
        "DROP TRIGGER audit_no_update",
        "DROP TRIGGER audit_chained",  # it reads the hash columns: SQLite refuses to drop them before
        "ALTER TABLE audit DROP COLUMN hash",
        "ALTER TABLE audit DROP COLUMN prev_hash",
        "UPDATE audit SET actor = 'U0SOMEONE' WHERE id = 2",
        "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
        "BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END",
    )

    assert _verify_unchanged(db) == EXIT_AUDIT_BROKEN

    err = capsys.readouterr().err
    assert "NOT verified" in err and "`prev_hash` or `hash`" in err
    # Starting scalebot on it does not re-chain the edited rows either: it refuses the file.
    before = _fingerprint(db)
    with pytest.raises(StoreError, match="lost its hash chain"):
        Store(db)
    assert _fingerprint(db)[0] == before[0]


def test_an_edited_row_fails_and_leaves_the_file_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _database(tmp_path / "scalebot.db")
    _tamper(
        db,
        "DROP TRIGGER audit_no_update",
        "UPDATE audit SET detail = 'nothing happened' WHERE id = 2",
        "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
        "BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END",
    )

    assert _verify_unchanged(db) == EXIT_AUDIT_BROKEN

    assert "audit row 2: its content does not match its hash" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("statements", "says"),
    [
        (("DROP TRIGGER audit_no_delete",), "audit_no_delete"),
        (
            (
                "DROP TRIGGER audit_no_update",
                "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT 1; END",
            ),
            "was replaced",
        ),
        ((f"UPDATE meta SET value = '{SCHEMA_VERSION - 2}' WHERE key = 'schema_version'",), "schema version"),
        ((f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'",), "newer scalebot"),
    ],
    ids=["missing-trigger", "replaced-trigger", "older-schema", "newer-schema"],
)
def test_a_missing_trigger_or_another_schema_version_fails_without_migrating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], statements: tuple[str, ...], says: str
) -> None:
    db = _database(tmp_path / "scalebot.db")
    _tamper(db, *statements)

    assert _verify_unchanged(db) == EXIT_AUDIT_BROKEN

    assert says in capsys.readouterr().err


def test_expect_head_passes_for_the_head_and_lists_the_rows_appended_after_an_older_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A row appended with a plain INSERT (chained with SHA-256, as an unkeyed chain is) passes
    the chain check; the head kept before it says rows followed, and which."""
    with caplog.at_level(logging.INFO, logger="engine.store.database"):
        db = _database(tmp_path / "scalebot.db")
    kept = [r.audit_head for r in caplog.records if hasattr(r, "audit_head")]

    assert _verify_unchanged(db, "--expect-head", kept[-1]) == EXIT_OK
    assert "is row 3, the head" in capsys.readouterr().out

    _append_forged_row(db, at=AT + timedelta(hours=1), actor="U0MALLORY", action="approve")
    assert _verify_unchanged(db) == EXIT_OK  # the chain alone cannot tell
    assert _verify_unchanged(db, "--expect-head", kept[-1]) == EXIT_AUDIT_BROKEN
    err = capsys.readouterr().err
    assert f"1 row(s) after the kept head {kept[-1]} (row 3)" in err
    assert "  row 4  2026-03-02T17:00:00+00:00  U0MALLORY  approve" in err

    assert _verify_unchanged(db, "--expect-head", kept[1]) == EXIT_AUDIT_BROKEN
    err = capsys.readouterr().err
    assert "2 row(s) after the kept head" in err and "  row 3  " in err and "  row 4  " in err

    assert _verify_unchanged(db, "--expect-head", "ab" * 32) == EXIT_AUDIT_BROKEN
    assert "is not in the chain" in capsys.readouterr().err


def test_a_rechained_forgery_is_caught_by_the_kept_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever rewrites a row and re-computes every hash after it has a consistent chain; the head
    logged before the forgery is no longer in it."""
    with caplog.at_level(logging.INFO, logger="engine.store.database"):
        db = _database(tmp_path / "scalebot.db")
    kept = [r.audit_head for r in caplog.records if hasattr(r, "audit_head")][-1]
    forged = tmp_path / "forged.db"
    _rechain_with_edit(db, forged)

    assert _verify_unchanged(forged) == EXIT_OK  # the chain alone cannot tell
    assert _verify_unchanged(forged, "--expect-head", kept) == EXIT_AUDIT_BROKEN
    assert "is not in the chain" in capsys.readouterr().err


def _append_forged_row(path: Path, *, at: datetime, actor: str, action: str) -> None:
    """A plain INSERT by someone with write access, chained to the head with SHA-256 as scalebot
    chains an unkeyed file (so the chaining trigger lets it in)."""
    conn = sqlite3.connect(path)
    last_id, prev = conn.execute("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
    values = (last_id + 1, at.isoformat(), actor, action, "", "dev-eu", "")
    conn.execute(
        "INSERT INTO audit (id, at, actor, action, op_id, cluster, detail, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*values, prev, audit_hash(prev, values)),
    )
    conn.commit()
    conn.close()


def _rechain_with_edit(source: Path, target: Path) -> None:
    original = Store(source)
    rows = original.audit_rows()
    original.close()
    store = Store(target)
    for row in rows:
        actor = "U0SOMEONE" if row.actor == "U0A1" else row.actor
        store.audit(at=row.at, actor=actor, action=row.action, cluster=row.cluster, detail=row.detail)
    store.close()


def test_expect_head_must_be_a_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _database(tmp_path / "scalebot.db")

    assert _verify_unchanged(db, "--expect-head", "not-a-hash") == EXIT_USAGE

    assert "64 hex digits" in capsys.readouterr().err


def test_a_write_ahead_log_without_its_index_is_refused_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _database(tmp_path / "scalebot.db")
    (tmp_path / "scalebot.db-wal").write_bytes(b"")
    before = _fingerprint(db)

    assert _verify(db) == EXIT_USAGE

    assert _fingerprint(db) == before
    assert "scalebot.db-shm" in capsys.readouterr().err


def test_only_committed_audit_rows_are_published(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "scalebot.db")
    with caplog.at_level(logging.INFO, logger="engine.store.database"):
        with pytest.raises(RuntimeError), store.transaction():
            store.audit(at=AT, actor="U0A", action="request")
            raise RuntimeError("the rest of the decision failed")
        assert [r for r in caplog.records if hasattr(r, "audit_head")] == []
        store.audit(at=AT, actor="U0A", action="request")
    store.close()

    [published] = [r for r in caplog.records if hasattr(r, "audit_head")]
    assert published.audit_row == 1
    assert (
        verify_audit_file(str(tmp_path / "scalebot.db"), expect_head=published.audit_head).expected_row == 1
    )


def test_a_replaced_trigger_is_restored_and_reported_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _database(tmp_path / "scalebot.db")
    _tamper(
        db,
        "DROP TRIGGER audit_no_update",
        "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN SELECT 1; END",
    )

    with caplog.at_level(logging.WARNING, logger="engine.store.database"):
        store = Store(db)

    assert any("audit_no_update" in r.getMessage() and "replaced" in r.getMessage() for r in caplog.records)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store._conn.execute("UPDATE audit SET detail = 'x'")
    store.close()

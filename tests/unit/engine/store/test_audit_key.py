"""The audit chain keyed with HMAC-SHA256, the trigger that refuses a row not chained to the head,
and the heads published at `scalebot run`'s default log level.

Someone with write access to the database but not the key can neither re-chain it after deleting
a row nor append a row that verifies; an older unkeyed file stays verifiable (rows before the
`audit_key_applied` marker are SHA-256)."""

from __future__ import annotations

import io
import logging
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.common import EXIT_OK, EXIT_USAGE
from bot.cli.operations import EXIT_AUDIT_BROKEN
from bot.config import logs
from engine.store.audit import (
    AUDIT_KEY_ENV,
    AUDIT_KEY_FILE_ENV,
    GENESIS_HASH,
    KEY_APPLIED,
    AuditKey,
    AuditKeyError,
    AuditUnverifiable,
    audit_hash,
    audit_key_from_environment,
)
from engine.store.database import Store

AT = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)
KEY = AuditKey(b"k" * 32)
KEY_TEXT = "k" * 32


def _history(path: Path, key: AuditKey | None) -> None:
    store = Store(path, audit_key=key)
    steps = (("U0REQ", "request"), ("U0BOSS", "approve"), ("scalebot", "execute"))
    for i, (actor, action) in enumerate(steps):
        store.audit(at=AT + timedelta(minutes=i), actor=actor, action=action, op_id="op-1", cluster="prod")
    store.close()


def _verify(path: Path, *extra: str) -> int:
    return cli.main(["operations", "verify-audit", "--db", str(path), *extra])


def _rechain_without(path: Path, action: str) -> None:
    """What someone with write access but no key does: drop the triggers, delete a row, re-compute
    every hash after it with SHA-256 (the only hash they can compute) and put the triggers back."""
    conn = sqlite3.connect(path)
    triggers = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit'"
    saved = conn.execute(triggers).fetchall()
    for name, _ in saved:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DELETE FROM audit WHERE action = ?", (action,))
    columns = "id, at, actor, action, op_id, cluster, detail"
    rows = conn.execute(f"SELECT {columns} FROM audit ORDER BY id").fetchall()
    conn.execute("DELETE FROM audit")
    prev = GENESIS_HASH
    for new_id, row in enumerate(rows, start=1):
        values = (new_id, *row[1:])
        digest = audit_hash(prev, values)
        conn.execute("INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (*values, prev, digest))
        prev = digest
    for _, sql in saved:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("drop", ["approve", KEY_APPLIED], ids=["marker-kept", "marker-dropped-too"])
def test_a_file_rechained_after_deleting_the_approval_is_detected_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, drop: str
) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, KEY)
    _rechain_without(db, "approve")
    if drop == KEY_APPLIED:
        _rechain_without(db, KEY_APPLIED)
    monkeypatch.setenv(AUDIT_KEY_ENV, KEY_TEXT)

    assert _verify(db) == EXIT_AUDIT_BROKEN

    err = capsys.readouterr().err
    if drop == KEY_APPLIED:
        assert "no row of the audit chain" in err and "rewritten without the key" in err
    else:
        assert "audit row 1: its content does not match its hash" in err


def test_a_keyed_chain_verifies_with_its_key_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, KEY)
    rows = Store(db, audit_key=KEY).audit_rows()
    assert [r.action for r in rows] == [KEY_APPLIED, "request", "approve", "execute"]
    assert KEY_TEXT not in rows[0].detail and f"key id {KEY.key_id}" in rows[0].detail

    monkeypatch.setenv(AUDIT_KEY_ENV, KEY_TEXT)
    assert _verify(db) == EXIT_OK
    assert "keyed: rows from 1 on are HMAC-SHA256" in capsys.readouterr().out

    monkeypatch.delenv(AUDIT_KEY_ENV)
    assert _verify(db) == EXIT_AUDIT_BROKEN
    assert f"keyed from row 1 (HMAC-SHA256, key id {KEY.key_id}" in capsys.readouterr().err

    monkeypatch.setenv(AUDIT_KEY_ENV, "o" * 32)
    assert _verify(db) == EXIT_AUDIT_BROKEN
    assert "with another key" in capsys.readouterr().err


def test_an_unkeyed_file_stays_verifiable_once_a_key_is_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, None)
    assert _verify(db) == EXIT_OK
    assert "UNKEYED" in capsys.readouterr().out

    store = Store(db, audit_key=KEY)
    store.audit(at=AT + timedelta(hours=1), actor="U0REQ", action="request", op_id="op-2", cluster="prod")
    store.close()
    assert [r.action for r in Store(db, audit_key=None).audit_rows()][3:] == [KEY_APPLIED, "request"]

    monkeypatch.setenv(AUDIT_KEY_ENV, KEY_TEXT)
    assert _verify(db) == EXIT_OK
    assert "keyed: rows from 4 on" in capsys.readouterr().out


def test_a_keyed_file_refuses_writes_without_its_key_and_opening_with_another(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, KEY)
    unkeyed = Store(db, audit_key=None)
    refused = f"keyed \\(from row 1\\): set {AUDIT_KEY_ENV} or {AUDIT_KEY_FILE_ENV}"
    with pytest.raises(AuditKeyError, match=refused):
        unkeyed.audit(at=AT, actor="U0X", action="request")
    assert len(unkeyed.audit_rows()) == 4, "nothing was written"
    with pytest.raises(AuditUnverifiable, match="set SCALEBOT_AUDIT_KEY"):
        unkeyed.verify_audit()
    unkeyed.close()
    with pytest.raises(AuditKeyError, match="with another key"):
        Store(db, audit_key=AuditKey(b"o" * 32))


def test_an_inserted_row_that_does_not_chain_to_the_head_is_refused_by_the_trigger(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, None)
    conn = sqlite3.connect(db)
    head_id, head = conn.execute("SELECT id, hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
    insert = "INSERT INTO audit (id, at, actor, action, op_id, cluster, detail, prev_hash, hash) VALUES "
    for row_id, prev in ((head_id + 1, "ab" * 32), (head_id + 2, head), (None, head), (2, GENESIS_HASH)):
        with pytest.raises(sqlite3.IntegrityError, match="must follow the last one"):
            values = (row_id, AT.isoformat(), prev, "0" * 64)
            conn.execute(insert + "(?, ?, 'U0X', 'approve', 'op-1', 'prod', '', ?, ?)", values)
    conn.close()
    assert len(Store(db, audit_key=None).audit_rows()) == 3


def test_the_audit_key_comes_from_the_environment_or_a_file_and_must_be_long_enough(tmp_path: Path) -> None:
    assert audit_key_from_environment({}) is None
    assert audit_key_from_environment({AUDIT_KEY_ENV: KEY_TEXT}) == KEY
    secret = tmp_path / "audit-key"
    secret.write_bytes(b"k" * 32 + b"\n")  # a mounted Secret's file, with its trailing newline
    assert audit_key_from_environment({AUDIT_KEY_FILE_ENV: str(secret)}) == KEY
    with pytest.raises(AuditKeyError, match="not both"):
        audit_key_from_environment({AUDIT_KEY_ENV: KEY_TEXT, AUDIT_KEY_FILE_ENV: str(secret)})
    with pytest.raises(AuditKeyError, match="has 5 bytes; use at least 32"):
        audit_key_from_environment({AUDIT_KEY_ENV: "short"})
    with pytest.raises(AuditKeyError, match=f"{AUDIT_KEY_FILE_ENV}=/nope: cannot read the audit key"):
        audit_key_from_environment({AUDIT_KEY_FILE_ENV: "/nope"})
    assert KEY_TEXT not in repr(KEY)


def test_a_bad_key_is_a_usage_error_of_verify_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "scalebot.db"
    _history(db, None)
    monkeypatch.setenv(AUDIT_KEY_ENV, "short")
    assert _verify(db) == EXIT_USAGE
    assert "use at least 32" in capsys.readouterr().err


@pytest.fixture
def restored_logging() -> Iterator[io.StringIO]:
    """`logs.configure` replaces the root handlers: give them back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_audit_head_is_published_at_the_default_level_of_scalebot_run(
    tmp_path: Path, restored_logging: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped deployment runs `scalebot run` without -v (level ERROR): each committed audit
    row's head is printed all the same; other INFO lines are not."""
    args = cli.build_parser().parse_args(["run"])
    monkeypatch.setattr("sys.stderr", restored_logging)
    logs.configure(logging.ERROR, audit_heads=args.audit_heads)
    logging.getLogger("engine.operations.runner").info("an ordinary INFO line")
    store = Store(tmp_path / "scalebot.db", audit_key=KEY)
    store.audit(at=AT, actor="U0REQ", action="request")
    head = Store(tmp_path / "scalebot.db", audit_key=KEY).verify_audit()
    store.close()

    printed = restored_logging.getvalue()
    assert head == (2, [])
    assert "an ordinary INFO line" not in printed
    assert " INFO audit head " in printed
    assert "(row 1) audit_row=1" in printed and "(row 2) audit_row=2" in printed

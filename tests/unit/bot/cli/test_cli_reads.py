"""The read commands only read: `ops list|show`, `status` and `schedule list|next` open the database
read-only.

Covers: a missing `--db` (a typo) is refused with exit 2 and `no database at PATH`, and no file is
created; a database written by an older schema is read as this version reads it (through a copy
migrated in memory) while the file keeps every byte and gains no `-wal`/`-shm`; a database of a
newer schema is refused, naming both versions.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.common import EXIT_OK, EXIT_USAGE
from engine.domain.operation import Operation, OperationPlan, OpKind, OpState, PoolChange, Target
from engine.store.database import Store
from engine.store.migrations import SCHEMA_VERSION, TYPED_RECORDS_SCHEMA

T0 = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
READS = (["ops", "list"], ["ops", "show", "op-1"], ["status"], ["schedule", "list"], ["schedule", "next"])


def _database(path: Path, *, schema: int = SCHEMA_VERSION) -> None:
    """A database with one finished zero-scale, its schema version set back to `schema` (the rows'
    progress and result then as that version wrote them: empty objects)."""
    store = Store(path)
    plan = OperationPlan(kind=OpKind.ZERO, cluster="dev-eu", pools=(PoolChange("web", 2, 0, ("w-0", "w-1")),))
    store.insert_operation(
        Operation(
            id="op-1",
            kind=OpKind.ZERO,
            target=Target(cluster="dev-eu"),
            state=OpState.SUCCEEDED,
            requested_by="cli:alice",
            created_at=T0,
            updated_at=T0,
            plan=plan,
        )
    )
    store.close()
    if schema != SCHEMA_VERSION:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE operations SET step_data = '{}', result = '{}'")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema),))
        conn.close()


def _files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_a_missing_database_is_refused_and_not_created(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "scalebot.db.typo"

    code = cli.main([*command, "--db", str(missing)])

    assert code == EXIT_USAGE
    assert f"no database at {missing}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [], "nothing is created"


def test_an_older_schema_is_read_as_it_is_and_the_file_keeps_every_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "scalebot.db"
    _database(db, schema=TYPED_RECORDS_SCHEMA - 1)  # rows with untyped progress and result
    before = _files(tmp_path)

    for command in READS:
        assert cli.main([*command, "--db", str(db)]) == EXIT_OK, command
    assert cli.main(["ops", "list", "--db", str(db), "-o", "json"]) == EXIT_OK
    out = capsys.readouterr().out

    assert _files(tmp_path) == before, "no migration, no write, no -wal or -shm"
    listed = json.loads(out[out.index("[\n") :])
    assert [(o["id"], o["state"], o["cluster"]) for o in listed] == [("op-1", "succeeded", "dev-eu")]
    assert "op-1: zero succeeded, requested by cli:alice" in out
    assert "cluster dev-eu" in out


def test_a_newer_schema_is_refused_naming_both_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "scalebot.db"
    _database(db, schema=SCHEMA_VERSION + 1)
    before = _files(tmp_path)

    assert cli.main(["status", "--db", str(db)]) == EXIT_USAGE

    err = capsys.readouterr().err
    assert f"schema {SCHEMA_VERSION + 1}; this version reads schema {SCHEMA_VERSION}" in err
    assert _files(tmp_path) == before

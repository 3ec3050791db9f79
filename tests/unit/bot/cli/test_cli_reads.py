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


def _schedules_database(path: Path) -> None:
    """Three schedules: pre-approved by two people (one of them for an older definition), one that
    follows public holidays, one paused."""
    from engine.store.schedules import ScheduleApproval, StoredSchedule, schedule_fingerprint

    store = Store(path)
    base = StoredSchedule(
        name="nightly",
        cluster="dev-eu",
        target={"kind": "pools", "pools": ["batch", "web"], "size": None},
        sleep="Mon-Fri 20:00",
        wake="Mon-Fri 07:00",
        tz="Europe/Berlin",
        lead_times=(3600, 600),
        channel="C0DEV",
        approval_mode="pre_approved",
        approved_by="",
        enabled=True,
        exceptions=("2026-12-24",),
        created_by="U0ALICE",
        created_at=T0,
        active_since=T0,
    )
    holidays = StoredSchedule(
        **{
            **{f: getattr(base, f) for f in base.__slots__},  # type: ignore[attr-defined]
            "name": "weekend",
            "target": {"kind": "cluster", "pools": [], "size": None, "workloads": True},
            "sleep": "Fri 19:00",
            "wake": "Mon 06:00",
            "approval_mode": "per_run",
            "exceptions": (),
            "days_off": {"holidays": "DE-BY", "calendar": "", "action": "stay_asleep"},
        }
    )
    paused = StoredSchedule(
        **{
            **{f: getattr(base, f) for f in base.__slots__},  # type: ignore[attr-defined]
            "name": "lunch",
            "cluster": "prod",
            "wake": "",
            "approval_mode": "per_run",
            "enabled": False,
        }
    )
    for stored in (base, holidays, paused):
        assert store.insert_schedule(stored)
    store.add_schedule_approval(ScheduleApproval("nightly", "U0BOB", T0, schedule_fingerprint(base)))
    store.add_schedule_approval(ScheduleApproval("nightly", "U0CAROL", T0, "an-older-definition"))
    store.close()


def test_schedule_list_reads_without_the_schedule_service_and_says_what_the_service_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`schedule list` reads the rows through the store's mapping, not the service (which loads the
    holiday tables and the cluster client: a second on this machine); each line is the service's."""
    from bot.cli import records
    from engine.domain.clock import SystemClock
    from engine.operations.service import new_operations
    from engine.schedules.core.text import schedule_summary
    from engine.schedules.service import Schedules

    db = tmp_path / "scalebot.db"
    _schedules_database(db)
    store = Store.read_only(str(db))
    service = Schedules(store, new_operations(store, {}, {}, SystemClock()), SystemClock())

    for cluster in (None, "dev-eu", "prod"):
        listed = [schedule_summary(s) for s in records.listed_schedules(store, cluster=cluster)]
        assert listed == [schedule_summary(s) for s in service.all_schedules(cluster=cluster)]
    assert cli.main(["schedule", "list", "--db", str(db), "-o", "json"]) == EXIT_OK
    shown = {s["name"]: s["summary"] for s in json.loads(capsys.readouterr().out)}
    assert "pre-approved by U0BOB;" in shown["nightly"] and "U0CAROL" not in shown["nightly"]
    assert "DE-BY" in shown["weekend"] and shown["lunch"].endswith("; paused")

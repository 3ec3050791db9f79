"""Savings from a recorded history (operations saved in a real SQLite file, read back read-only).

The history, on cluster prod in Europe/Berlin (daylight saving ends Sunday 2026-10-25 03:00):
1. a weekend sleep across the DST change: Friday 20:00 → Monday 06:00 local is 58 h on the wall
   clock but 59 real hours; web 10 → 0 and batch 4 → 0;
2. a sleep cut short: web asleep at 19:00 UTC, woken at 23:30 UTC the same night (4.5 h);
3. a failed wake: web asleep 10 h until a wake that failed (then retried: nothing more counts);
4. nodes someone else scaled: batch 4 → 0, and the wake found 1 node already running;
5. a zero-scale that failed without a record of what it removed: not counted.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bot.text.savings_chart import HEIGHT_PX, WIDTH_PX, weekly_chart
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationSummary,
    OpKind,
    OpState,
    PoolChange,
    PoolSizes,
    Target,
)
from engine.savings.figures import asleep_series, savings
from engine.store.base import StoreError
from engine.store.database import Store
from engine.store.readonly import read_operations_file

BERLIN = ZoneInfo("Europe/Berlin")
REPO = Path(__file__).resolve().parents[4]


def _utc(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 10, day, hour, minute, tzinfo=UTC)


def recorded_op(
    n: int,
    kind: OpKind,
    at: datetime,
    pools: dict[str, tuple[int, int]],
    state: OpState = OpState.SUCCEEDED,
    *,
    summary: bool = True,
) -> Operation:
    changes = tuple(PoolChange(pool, before, after) for pool, (before, after) in pools.items())
    return Operation(
        id=f"op-{n:08x}",
        kind=kind,
        target=Target(cluster="prod", pools=tuple(pools)),
        state=state,
        requested_by="schedule:nights",
        created_at=at - timedelta(minutes=20) if kind is OpKind.ZERO else at,
        updated_at=at,
        plan=OperationPlan(kind=kind, cluster="prod", pools=changes),
        step="finish",
        summary=(
            OperationSummary(duration_seconds=1200, pools={p: PoolSizes(b, a) for p, (b, a) in pools.items()})
            if summary
            else None
        ),
    )


HISTORY = [
    recorded_op(1, OpKind.ZERO, _utc(23, 18), {"web": (10, 0), "batch": (4, 0)}),  # Fri 20:00 CEST
    recorded_op(2, OpKind.WAKE, _utc(26, 5), {"web": (0, 10), "batch": (0, 4)}),  # Mon 06:00 CET
    recorded_op(3, OpKind.ZERO, _utc(26, 19), {"web": (10, 0)}),
    recorded_op(4, OpKind.WAKE, _utc(26, 23, 30), {"web": (0, 10)}),  # cut short
    recorded_op(5, OpKind.ZERO, _utc(27, 19), {"web": (10, 0)}),
    recorded_op(6, OpKind.WAKE, _utc(28, 5), {"web": (0, 10)}, OpState.FAILED, summary=False),
    recorded_op(7, OpKind.WAKE, _utc(28, 6), {"web": (0, 10)}),
    recorded_op(8, OpKind.ZERO, _utc(29, 19), {"batch": (4, 0)}),
    recorded_op(9, OpKind.WAKE, _utc(30, 5), {"batch": (1, 4)}),  # 1 node was back already
    recorded_op(10, OpKind.ZERO, _utc(30, 19), {"web": (10, 0)}, OpState.FAILED, summary=False),
]
NOW = _utc(31, 12)
EXPECTED_WEEKS = {
    ("batch", "2026-10-19"): 4 * 53,  # Fri 18:00 UTC → Sun 23:00 UTC (Monday 00:00 CET)
    ("batch", "2026-10-26"): 4 * 6 + 3 * 10,
    ("web", "2026-10-19"): 10 * 53,
    ("web", "2026-10-26"): 10 * 6 + 10 * 4.5 + 10 * 10,
}


def record_history(db: Path) -> Path:
    """HISTORY saved in a real SQLite file, as scalebot's store writes operations."""
    store = Store(db)
    for op in HISTORY:
        store.insert_operation(op)
    store.close()
    return db


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return record_history(tmp_path / "history.db")


def test_savings_of_a_recorded_history_are_exact(recorded: Path) -> None:
    before = recorded.read_bytes()
    ops = read_operations_file(str(recorded))

    report = savings(ops, now=NOW, tz=BERLIN, prices={("prod", "web"): 0.5})

    assert recorded.read_bytes() == before, "the report reads the file, never writes it"
    weeks = {(r.pool, r.week.isoformat()): r.node_hours for r in report.rows}
    assert weeks == EXPECTED_WEEKS
    assert report.node_hours == 1001
    sleeps = [(p.pool, p.node_hours, p.ended_by) for p in report.periods]
    assert ("web", 590, "wake op-00000002") in sleeps, "59 real hours across the DST change"
    assert ("web", 45, "wake op-00000004") in sleeps
    assert ("web", 100, "failed wake op-00000006") in sleeps
    assert ("batch", 30, "wake op-00000009") in sleeps
    money = {(r.pool, r.week.isoformat()): r.money for r in report.rows}
    assert money[("web", "2026-10-19")] == 265 and money[("batch", "2026-10-19")] is None
    unknowns = "\n".join(report.unknowns)
    assert "prod/web: wake op-00000006 failed" in unknowns
    assert "prod/batch: 1 node(s) were running when op-00000009 woke the pool" in unknowns
    assert "zero-scale op-0000000a failed without a record of the nodes it removed" in unknowns


def test_since_clips_the_sleeps(recorded: Path) -> None:
    report = savings(read_operations_file(str(recorded)), now=NOW, tz=BERLIN, since=_utc(26, 0))
    assert {(r.pool, r.week) for r in report.rows} == {
        ("web", date(2026, 10, 26)),
        ("batch", date(2026, 10, 26)),
    }
    assert report.node_hours == 10 * 5 + 45 + 100 + 4 * 5 + 30


def test_a_sleep_not_woken_counts_until_now_and_says_so(tmp_path: Path) -> None:
    report = savings([HISTORY[0]], now=_utc(24, 18), tz=UTC)
    assert report.node_hours == 24 * 14
    assert any("still asleep since" in note for note in report.unknowns)


def test_the_chart_is_the_reports_weekly_totals(recorded: Path, tmp_path: Path) -> None:
    report = savings(read_operations_file(str(recorded)), now=NOW, tz=BERLIN)
    weeks, week = weekly_chart(report).axes
    [bars] = weeks.containers
    drawn = [
        (label.get_text(), patch.get_height())
        for label, patch in zip(weeks.get_xticklabels(), bars.patches, strict=True)
    ]
    assert drawn == [("19 Oct", 742.0), ("26 Oct", 259.0)]
    assert [h for _, h in drawn] == [h for _, h in report.weekly_totals()]
    # The last 7 days: the weekend sleep (14 nodes) until Monday's wake, the sleep cut short, the
    # sleep ended by the failed wake, and batch's 3 nodes (1 was back already).
    steps = asleep_series(report, NOW - timedelta(days=7), NOW)
    assert steps == [
        (_utc(24, 12), 14),
        (_utc(26, 5), 0),
        (_utc(26, 19), 10),
        (_utc(26, 23, 30), 0),
        (_utc(27, 19), 10),
        (_utc(28, 5), 0),
        (_utc(29, 19), 3),
        (_utc(30, 5), 0),
        (_utc(31, 12), 0),
    ]
    [band] = week.collections
    assert {float(y) for y in band.get_paths()[0].vertices[:, 1]} == {0, 14, 10, 3}, "the band is those steps"


def test_report_savings_cli_json_and_png(recorded: Path, tmp_path: Path) -> None:
    png = tmp_path / "savings.png"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB", "SCALEBOT_CONFIG")}
    config = tmp_path / "scalebot.yaml"
    config.write_text("clusters:\n  prod:\n    node_hour_prices: {web: 0.5}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "report",
            "savings",
            "--db",
            str(recorded),
            "--tz",
            "Europe/Berlin",
            "--since",
            "2026-10-01",
            "-o",
            "json",
            "--png",
            str(png),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "KUBECONFIG": str(tmp_path / "none")},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {(w["pool"], w["week"]): w["node_hours"] for w in data["weeks"]} == EXPECTED_WEEKS
    assert {(w["pool"], w["week"]): w["money"] for w in data["weeks"]}[("web", "2026-10-26")] == 102.5
    assert data["node_hours"] == 1001 and data["cannot_know"]
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (WIDTH_PX, HEIGHT_PX)
    from matplotlib.image import imread

    assert imread(png).shape[:2] == (HEIGHT_PX, WIDTH_PX)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, words in (
        (["--since", "last tuesday"], "--since 'last tuesday'"),
        (["--tz", "Mars/Olympus"], "--tz 'Mars/Olympus' is not a time zone"),
        (["--db", str(tmp_path / "missing.db")], "no database at"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "bot", "report", "savings", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_database_of_another_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(db).executescript(
        "CREATE TABLE meta (key, value); INSERT INTO meta VALUES ('schema_version', 1);"
    )
    with pytest.raises(StoreError, match="schema version 1"):
        read_operations_file(str(db))


EXAMPLE = REPO / "docs" / "savings-example.png"


def test_the_readme_example_chart_is_this_historys(recorded: Path) -> None:
    """docs/savings-example.png (shown in the README) is this test's history drawn by the same
    function; SCALEBOT_WRITE_EXAMPLES=1 regenerates it."""
    from matplotlib.image import imread

    from bot.text.savings_chart import write_png

    prices = {("prod", "web"): 0.192, ("prod", "batch"): 0.05}
    report = savings(read_operations_file(str(recorded)), now=NOW, tz=BERLIN, prices=prices, currency="EUR")
    if os.environ.get("SCALEBOT_WRITE_EXAMPLES"):
        write_png(report, EXAMPLE)
    assert imread(EXAMPLE).shape[:2] == (HEIGHT_PX, WIDTH_PX)

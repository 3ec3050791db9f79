"""`scalebot wake --wave …`: the CLI's wake in waves, each command its own `python -m bot` process
on the simulated cluster kept in one SQLite file.

Covers: `--wave system --wave web` wakes system, then web, then the pool no flag names (batch), each
wave's progress printed and kept with the operation; a pool named in two waves, or an empty name,
is refused with a non-zero exit naming the flag, and nothing wakes.
"""

from __future__ import annotations

from pathlib import Path

from engine.domain.operation import Operation, OpKind, OpState
from engine.store.database import Store
from tests.unit.bot.cli.test_cli_simulated import FAST, scalebot


def _wakes(db: Path) -> list[Operation]:
    return [op for op in Store(db).list_operations(limit=10) if op.kind is OpKind.WAKE]


def test_wake_in_the_waves_the_flags_name(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    zero = scalebot(db, "zero", "--simulated", *FAST, "--yes")
    assert zero.returncode == 0, zero.stderr

    wake = scalebot(db, "wake", "--simulated", "--wave", "system", "--wave", "web")

    assert wake.returncode == 0, wake.stdout + wake.stderr
    out = wake.stdout + wake.stderr
    assert "Wave 1/3 (system)" in out and "waking wave 2/3 (web)" in out and "waking wave 3/3 (batch)" in out
    [op] = _wakes(db)
    assert op.state is OpState.SUCCEEDED, op.error
    assert [w.pools for w in op.progress.wake.waves] == [("system",), ("web",), ("batch",)]
    assert [w.outcome for w in op.progress.wake.waves] == ["ready", "ready", "ready"]
    first, second, third = op.progress.wake.waves
    assert (
        first.ended_at is not None and second.started_at is not None and second.started_at >= first.ended_at
    )
    assert (
        second.ended_at is not None and third.started_at is not None and third.started_at >= second.ended_at
    )


def test_a_pool_in_two_waves_is_refused_and_nothing_wakes(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    assert scalebot(db, "zero", "--simulated", *FAST, "--yes").returncode == 0

    twice = scalebot(db, "wake", "--simulated", "--wave", "system", "--wave", "web,system")
    empty = scalebot(db, "wake", "--simulated", "--wave", "system,")

    assert twice.returncode != 0 and "--wave 'web,system': pool system is already in wave 1" in twice.stderr
    assert empty.returncode != 0 and "--wave 'system,': give pool names separated by commas" in empty.stderr
    assert _wakes(db) == []

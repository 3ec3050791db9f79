"""One runner per operation across processes: a second runner is refused, a stale one is fenced.

Real `scalebot zero` / `scalebot resume` processes on one SQLite file, as the scalebot
ServiceAccount against the local control plane. A PDB (minAvailable 1 over one pod) blocks the
drain, so the operation stays at `drain` as long as the test wants.

- `scalebot resume` while `scalebot zero` runs the operation: exits 1 naming the runner that holds
  it, starts nothing, writes no journal row.
- The runner frozen (SIGSTOP) for longer than the claim TTL (15 s, not shortened): a
  `scalebot resume` takes the operation over; when the frozen runner wakes (SIGCONT) it stops at
  its next step boundary, says why, exits 1, and writes nothing more: every journal row after the
  takeover is the new runner's. The new runner then finishes the operation.

The `scalebot run` side (a standby, and `scalebot resume` beside a leader) is in
tests/reliability/test_two_instances.py.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from engine.operations.runner import CLAIM_TTL_SECONDS
from localcluster import rest, waits
from tests.e2e.support import scalebot_args
from tests.reliability.support import (
    Processes,
    last_step,
    operations,
    poll,
    release_pdb,
)

pytestmark = pytest.mark.e2e


def _journal(db: Path, op_id: str) -> list[tuple[int, str, str, str]]:
    """(row id, step, event, runner) in the order written."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT id, step, event, runner FROM journal WHERE op_id = ? ORDER BY id", (op_id,)
        ).fetchall()
    return [(int(i), str(s), str(e), str(r)) for i, s, e, r in rows]


def test_a_second_runner_is_refused_and_a_frozen_one_is_fenced(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    held_pool: tuple[str, list[str]],
    pool_key: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool, nodes = held_pool
    db = tmp_path / "scalebot.db"
    args = scalebot_args(scalebot_kubeconfig, db, pool_key)

    first = procs.scalebot("zero", "--yes", pool, *args, name="zero", env={"POD_NAME": "runner-a"})
    poll(lambda: last_step(db) == "drain", 60, "the operation to be draining (its PDB blocks it)")
    [op_id] = operations(db)

    # 1. A second runner beside a live one is refused, and writes nothing.
    rows = _journal(db, op_id)
    second = procs.scalebot("resume", *args, name="resume-refused", env={"POD_NAME": "runner-b"})
    assert second.wait(60) == 1, second.output()
    out = second.output()
    assert f"error: operation {op_id} is being run by runner-a (pid {first.pid}" in out, out
    assert "not starting a second runner" in out
    assert _journal(db, op_id) == rows, "the refused runner wrote no journal row"
    assert first.alive()

    # 2. The runner freezes beyond the claim TTL; another takes over; the frozen one is fenced.
    first.popen.send_signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    refused = procs.scalebot("resume", *args, name="resume-early", env={"POD_NAME": "runner-b"})
    assert refused.wait(60) == 1, "still refused within the TTL (a frozen process is not a dead one)"
    # Wait out the TTL (real time: the claim's heartbeat is wall-clock time written by runner-a).
    waits.wait_until(
        lambda: time.monotonic() - frozen_at > CLAIM_TTL_SECONDS + 1, CLAIM_TTL_SECONDS + 5, "the TTL"
    )
    takeover = procs.scalebot("resume", *args, name="resume-takeover", env={"POD_NAME": "runner-b"})
    poll(lambda: any(r == "runner-b" for _, _, _, r in _journal(db, op_id)), 60, "runner-b to take over")
    [(taken_at, _, event, _)] = [row for row in _journal(db, op_id) if row[3] == "runner-b"][:1]
    assert event == "resumed"
    first.popen.send_signal(signal.SIGCONT)
    assert first.wait(60) == 1, first.output()
    assert (
        "was claimed by another runner: this runner stopped without writing anything more" in first.output()
    )
    assert takeover.alive(), "the new runner carries on"

    # Unblock the drain: the new runner finishes; the old one never wrote again.
    release_pdb(admin_api, namespace)
    assert takeover.wait(120) == 0, takeover.output()[-3000:]
    assert operations(db)[op_id] == ("succeeded", "verify")
    journal = _journal(db, op_id)
    assert {r for i, _, _, r in journal if i < taken_at} == {"runner-a"}
    assert {r for i, _, _, r in journal if i >= taken_at} == {"runner-b"}, journal
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & set(nodes)

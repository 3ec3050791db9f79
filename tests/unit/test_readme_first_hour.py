"""README "The first hour", parts 1 and 2: every command, run as written in a fresh directory with
`scalebot` standing for `python -m bot` (no kubeconfig, no Slack). Part 3 needs a cluster: see
tests/e2e/test_readme_cluster.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.readme_walkthrough import blocks, commands

REPO = Path(__file__).resolve().parents[2]


def run_blocks(part: str, cwd: Path) -> str:
    script = "set -euo pipefail\n" + 'scalebot() { "$PYTHON" -m bot "$@"; }\n' + "\n".join(blocks(part))
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEBOT_DB", "KUBECONFIG")}
    env.update(PYTHON=sys.executable, PYTHONPATH=str(REPO), KUBECONFIG=str(cwd / "no-kubeconfig"))
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_part_one_demo_and_the_simulated_cluster_run_as_written(tmp_path: Path) -> None:
    assert commands("1.")[:3] == [
        "scalebot demo",
        "scalebot plan zero --simulated",
        "scalebot zero --simulated --yes",
    ]

    out = run_blocks("1.", tmp_path)

    assert "3 pools, 8 nodes → 0" in out
    assert "kind: wake" in out and "state: succeeded" in out, "ops list -o yaml reads the database"
    assert (tmp_path / "scalebot.db").exists()
    assert "error: no database at typo.db\n" in out and "\nexit 2\n" in out, "a mistyped --db"
    assert not (tmp_path / "typo.db").exists()
    assert "scalebot.db: the SIMULATED cluster is back at its start (3 pools, 8 nodes), no history" in out
    assert "node/batch-0 drained" in out, "a --simulated drain on the reset cluster"


def test_part_two_a_console_day_with_a_schedule_runs_as_written(tmp_path: Path) -> None:
    assert commands("2.") == ["scalebot console --simulated --clock-speed 600 <<'END'"]

    out = run_blocks("2.", tmp_path)

    assert "Schedule saved: nights:" in out
    assert "Something failed" not in out
    assert "asks to zero cluster simulated" in out
    assert "⏸ Stopped: op-" in out, "fast-forward stops at the sleep's approval card"
    assert "✅ Approved by @bob" in out
    assert "simulated is back: 8/8 nodes Ready" in out

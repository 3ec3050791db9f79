"""`scalebot` answers at once: the commands that need no cluster import no heavy module.

Each command runs in a fresh interpreter, as a shell runs it; the test reads the modules it
imported (`sys.modules` at exit). `--version`, `--help` and `completion` build the argument tree
only; `ops list|show`, `status` and `schedule list` read the database only. None of them may load
the Kubernetes client, Slack, plotting, AWS, the engine's planners, its operations service or the
schedule service's calendars (the holiday tables): those cost seconds
(docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.bot.cli.test_cli_reads import _database, _schedules_database

REPO = Path(__file__).resolve().parents[4]
HEAVY = (
    "kubernetes",
    "slack_bolt",
    "slack_sdk",
    "matplotlib",
    "boto3",
    "botocore",
    "engine.planning",
    "engine.kube.client",
    "engine.operations.service",
    "engine.operations.runner",
    "engine.schedules.service",
    "engine.schedules.calendars",
    "holidays",
)
"""A module, or the package whose modules, none of these commands may import."""

RUN = """
import json, sys
from bot.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def imported(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    """The exit code of `scalebot ARGV` in a fresh interpreter, and every module it imported."""
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", RUN, str(report), *argv],
        cwd=tmp_path,
        capture_output=True,
        check=False,
        timeout=60,
    )
    found = json.loads(report.read_text())
    return int(found["code"] or 0), set(found["modules"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["completion", "bash"],
        ["completion", "zsh"],
        ["drain", "--help"],
        ["ops", "list", "--db", "scalebot.db"],
        ["ops", "show", "op-1", "--db", "scalebot.db"],
        ["status", "--db", "scalebot.db"],
        ["schedule", "list", "--db", "schedules.db"],
    ],
    ids=" ".join,
)
def test_commands_without_a_cluster_import_no_heavy_module(argv: list[str], tmp_path: Path) -> None:
    _database(tmp_path / "scalebot.db")
    _schedules_database(tmp_path / "schedules.db")

    code, modules = imported(tmp_path, *argv)

    assert code == 0
    heavy = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], f"`scalebot {' '.join(argv)}` imported {heavy[:8]}"

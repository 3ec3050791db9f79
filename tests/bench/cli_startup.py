"""`python -m tests.bench.cli_startup`: how long `scalebot` takes to answer, per command.

Each command runs `--runs` times as its own `python -m bot` process (what a shell pays), over a
database holding one operation (`schedule list`: one holding three schedules, one of them
following public holidays and one pre-approved); the table gives the median, the fastest and the
slowest wall time and the median CPU time (user + system, which a loaded machine inflates less), with the load
average before and after (the machine may be shared). `--source DIR` runs another
source tree of scalebot (say, a worktree of an older commit) with this interpreter, for a before /
after comparison.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (
    ("--version",),
    ("--help",),
    ("completion", "bash"),
    ("ops", "list", "--db", "scalebot.db"),
    ("ops", "show", "op-1", "--db", "scalebot.db"),
    ("status", "--db", "scalebot.db"),
    ("schedule", "list", "--db", "schedules.db"),
)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(source: Path | None, runs: int, workdir: Path) -> list[tuple[str, list[float], list[float]]]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)  # ahead of the installed (editable) scalebot
    rows = []
    for argv in COMMANDS:
        times, cpu = [], []
        for _ in range(runs):
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "bot", *argv], cwd=workdir, env=env, capture_output=True, check=False
            )
            times.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
            if done.returncode != 0:
                raise SystemExit(
                    f"scalebot {' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}"
                )
        rows.append(
            (" ".join(a for a in argv if a not in ("--db", "scalebot.db", "schedules.db")), times, cpu)
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--source", type=Path, help="another scalebot source tree to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        from tests.unit.bot.cli.test_cli_reads import _database, _schedules_database

        _database(workdir / "scalebot.db")
        _schedules_database(workdir / "schedules.db")
        before = _load()
        rows = measure(args.source, args.runs, workdir)
        after = _load()
    print(f"load average before: {before}; after: {after}; {args.runs} runs each")
    print("| command | wall median | fastest | slowest | CPU median |")
    print("|---|---:|---:|---:|---:|")
    for name, times, cpu in rows:
        median, fastest, slowest = statistics.median(times), min(times), max(times)
        cells = f"{median:.2f} s | {fastest:.2f} s | {slowest:.2f} s | {statistics.median(cpu):.2f} s"
        print(f"| `scalebot {name}` | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

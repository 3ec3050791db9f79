"""Run a small test file in a pytest child process with this suite's conftest loaded as a plugin.

For tests of the suite's own wiring (its hooks, its exit rules): the child sees what a test run
sees, and its output and exit code are what the parent asserts on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_child_pytest(test_file: Path, *, env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, stdout and stderr) of `pytest -q test_file` with tests/conftest.py as a plugin."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-c",
            "/dev/null",
            "--rootdir",
            str(test_file.parent),
            str(test_file),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout + done.stderr

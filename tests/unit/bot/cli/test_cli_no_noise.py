"""No noise on stderr: against an API server that cannot be reached, `-v --log-format json` prints
only JSON lines, none of urllib3's per-attempt `Retrying (Retry(...))` warnings, and one error
that names the URL it tried (not urllib3's `HTTPSConnectionPool(host=…): Max retries …`). Each
command is its own `python -m bot` process, as a person runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kubeconfigs import token_kubeconfig

REPO = Path(__file__).resolve().parents[4]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released: connecting to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unreachable(tmp_path: Path) -> tuple[Path, str]:
    server = f"https://127.0.0.1:{closed_port()}"
    kubeconfig = token_kubeconfig(tmp_path / "kubeconfig", server, insecure_skip_tls_verify=True)
    return kubeconfig, server


@pytest.mark.parametrize("command", [["plan", "zero"], ["drain", "n1"]], ids=["plan-zero", "drain"])
def test_json_logs_hold_no_retry_chatter_and_the_error_names_the_url(
    tmp_path: Path, unreachable: tuple[Path, str], command: list[str]
) -> None:
    kubeconfig, server = unreachable
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB", "SCALEBOT_LOG_FORMAT")
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            *command,
            "--kubeconfig",
            str(kubeconfig),
            "-v",
            "--log-format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    records = [json.loads(line) for line in lines]  # every stderr line is a JSON object
    assert all(isinstance(r, dict) and {"time", "level", "msg"} <= r.keys() for r in records)
    assert not [r for r in records if "Retrying" in r["msg"] or r.get("logger", "").startswith("urllib3")]
    [error] = [r for r in records if r["level"] == "ERROR"]
    assert error["msg"].startswith(
        f"error: cannot reach the Kubernetes API server: list nodes: {server}/api/v1/nodes"
    )
    assert error["msg"].endswith("Connection refused") and "ConnectionPool" not in error["msg"]


def test_the_simulated_notice_is_a_json_line_under_json_logs(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB", "SCALEBOT_LOG_FORMAT")
    }
    db = tmp_path / "scalebot.db"
    runs = {
        fmt: subprocess.run(
            [
                sys.executable,
                "-m",
                "bot",
                "plan",
                "zero",
                "--simulated",
                "--db",
                str(db),
                "--log-format",
                fmt,
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(REPO)},
            timeout=120,
            check=False,
        )
        for fmt in ("json", "text")
    }

    assert all(done.returncode == 0 for done in runs.values()), [d.stderr for d in runs.values()]
    [notice] = [json.loads(line) for line in runs["json"].stderr.splitlines()]
    assert notice["msg"] == f"SIMULATED cluster (kept in {db}): nothing real is changed"
    assert runs["text"].stderr == f"SIMULATED cluster (kept in {db}): nothing real is changed\n", (
        "text: as before"
    )
    assert "Plan: zero on simulated" in runs["json"].stdout


@pytest.mark.parametrize(
    ("argv", "env_format", "usage_of"),
    [
        (["operations", "lsit", "--log-format", "json"], None, "scalebot operations"),
        (["--log-format=json", "drain", "--bogus", "n1"], None, "scalebot drain"),
        (["plan", "zero", "--size"], "json", "scalebot plan zero"),
    ],
    ids=["unknown-action", "unknown-flag", "from-the-environment"],
)
def test_a_usage_error_under_json_logs_is_one_json_line_with_the_commands_usage(
    argv: list[str], env_format: str | None, usage_of: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SCALEBOT_LOG_FORMAT"}
    if env_format:
        env["SCALEBOT_LOG_FORMAT"] = env_format
    done = subprocess.run(
        [sys.executable, "-m", "bot", *argv],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )

    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    record = json.loads(lines[0])
    assert record["level"] == "ERROR"
    assert record["msg"].startswith(f"{usage_of}: error: ")
    assert f"usage: {usage_of} " in record["msg"]


def test_a_usage_error_in_text_keeps_argparses_usage_and_error_lines() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SCALEBOT_LOG_FORMAT"}
    done = subprocess.run(
        [sys.executable, "-m", "bot", "operations", "lsit"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.startswith("usage: scalebot operations ")
    assert "scalebot operations: error: argument ACTION: invalid choice: 'lsit'" in done.stderr

"""`scalebot run` start-up, as a real process against the local Web API recorder.

A refused bot token, an unreachable Slack or a port in use is exactly one line on stderr naming
the problem and the fix, exit 2, no traceback, and "scalebot running" is never printed (before,
a bad token ended in 55 lines of `BoltError` after "scalebot running"). An API server that does
not answer is one warning line: the service still starts, says "scalebot running", reports not
ready on /readyz, and stops on SIGTERM with exit 0.

The cluster's kubeconfig points at a loopback port that is bound but not listening, so the API
server "refuses" without any control plane.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.slack.harness import SlackApiServer, get

REPO = Path(__file__).resolve().parents[2]
TOKEN_FIX = "set it to the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound and not listening: a connection to it is refused, and nothing else can
    take it while the test runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    tmp_path: Path,
    api_url: str,
    api_server_port: int,
    *,
    http_port: int = 0,
    health_port: int = 0,
    app_token: str | None = None,
    cluster: dict[str, object] | None = None,
) -> subprocess.Popen[str]:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{api_server_port}"}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    config = {
        "server": {"host": "127.0.0.1", "http_port": http_port, "health_port": health_port},
        "clusters": {"dev": {"kubeconfig": str(tmp_path / "kubeconfig"), "context": "c", **(cluster or {})}},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SLACK_BOT_TOKEN": "xoxb-start-up-test",
        "SLACK_SIGNING_SECRET": "start-up-secret",
        "SLACK_API_URL": api_url,
        "SCALEBOT_DB": str(tmp_path / "db.sqlite"),
    }
    env.pop("SLACK_APP_TOKEN", None)
    if app_token is not None:
        env["SLACK_APP_TOKEN"] = app_token
    argv = ["run", "--config", str(tmp_path / "config.yaml"), "--no-leader-election"]
    return subprocess.Popen(
        [sys.executable, "-m", "bot", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def failed_start(proc: subprocess.Popen[str]) -> str:
    """The one stderr line of a start that must fail; asserts the rest of the contract."""
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reaps it and closes the pipes
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert out == "", "'scalebot running' only once the checks passed"
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_refused_bot_token_is_one_line_and_exit_2(
    tmp_path: Path, slack_api: SlackApiServer, closed_port: int
) -> None:
    slack_api.fail("auth.test", times=10, status=200, error="invalid_auth")

    line = failed_start(start(tmp_path, slack_api.url, closed_port))

    assert line == f"error: SLACK_BOT_TOKEN: Slack refused the token (invalid_auth); {TOKEN_FIX}"
    assert [c.method for c in slack_api.calls] == ["auth.test"]


def test_a_refused_app_level_token_is_one_line_and_exit_2(
    tmp_path: Path, slack_api: SlackApiServer, closed_port: int
) -> None:
    slack_api.fail("apps.connections.open", times=10, status=200, error="invalid_auth")

    line = failed_start(start(tmp_path, slack_api.url, closed_port, app_token="xapp-start-up-test"))

    assert line == (
        "error: SLACK_APP_TOKEN: Slack refused the token (invalid_auth); set it to an app-level token "
        "(xapp-…) with connections:write from the app's Basic Information page"
    )
    assert [c.method for c in slack_api.calls] == ["auth.test", "apps.connections.open"]


def test_a_config_channel_name_slack_does_not_list_is_one_line_and_exit_2(
    tmp_path: Path, slack_api: SlackApiServer, closed_port: int
) -> None:
    slack_api.channel_list = [{"id": "C0OPS", "name": "ops"}]

    proc = start(tmp_path, slack_api.url, closed_port, cluster={"allowed_channels": ["#ops", "#gone"]})
    line = failed_start(proc)

    assert line.startswith("error: channel #gone in the configuration: I cannot find the channel #gone: "), (
        line
    )
    assert [c.method for c in slack_api.calls] == ["auth.test", "conversations.list"]


def test_an_unreachable_slack_is_one_line_and_exit_2(tmp_path: Path, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/api/"

    line = failed_start(start(tmp_path, url, closed_port))

    assert line.startswith(f"error: cannot reach Slack at {url} (")
    assert line.endswith("); check the network, the proxy (HTTPS_PROXY) or SLACK_API_URL")
    assert "refused" in line.lower()


@pytest.mark.parametrize("key", ["http_port", "health_port"])
def test_a_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, slack_api: SlackApiServer, closed_port: int, key: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        ports = {"http_port": free_port(), "health_port": free_port(), key: port}

        line = failed_start(start(tmp_path, slack_api.url, closed_port, **ports))

    fix = "free it or choose another port"
    assert line == f"error: server.{key}: cannot listen on port {port} (in use); {fix}"


def test_an_unreachable_api_server_is_one_warning_and_the_service_starts_not_ready(
    tmp_path: Path, slack_api: SlackApiServer, closed_port: int
) -> None:
    health_port = free_port()
    proc = start(tmp_path, slack_api.url, closed_port, http_port=free_port(), health_port=health_port)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        running = proc.stdout.readline()  # printed once the health port and Slack intake are up
        assert running.startswith("scalebot running: dev; database "), running
        ready = get(f"http://127.0.0.1:{health_port}/readyz", timeout=20)
        assert ready.status == 503
        lines = ready.body.splitlines()
        assert "[+]database ok" in lines and "[+]slack ok" in lines, ready.body
        assert any(line.startswith("[-]kubernetes failed: ") for line in lines), ready.body
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reaps it and closes the pipes
    assert proc.returncode == 0, err
    assert err.splitlines() == [
        f"warning: clusters.dev: the Kubernetes API server at https://127.0.0.1:{closed_port} does not "
        "answer ([Errno 111] Connection refused); scalebot starts and reports not ready on /readyz "
        "until it does"
    ]

"""`scalebot run` end to end: a real process, the real control plane, Slack-signed HTTP requests.

`/scale zero <pool>` by an operator → an approval card (chat.postMessage) → Approve by the
requester is refused ephemerally → Approve by an approver → the card is edited in place →
progress on the card (each phase an edit) → the completion message in its thread; the
pool is really at zero. The recorded Web API calls are asserted (methods, channel, thread_ts,
content). Then SIGTERM: the process exits 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bot.slack.blocks.operations import ACTION_APPROVE
from localcluster import rest, waits
from localcluster.binaries import ensure_go_tool
from tests import monitoring
from tests.slack.harness import Signer, SlackApiServer, all_text, buttons_of, get, post

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHANNEL = "C0PLATFORM"
OPERATOR, APPROVER = "U0OPERATOR", "U0APPROVER"
SECRET = "e2e-signing-secret"
ALERTS = (
    "ScalebotOperationFailed",
    "ScalebotOperationStuck",
    "ScalebotWakeShortOfSize",
    "ScalebotLeaseLost",
    "ScalebotNoLeader",
    "ScalebotSlackErrors",
)
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.close()


@pytest.fixture
def running(
    slack: SlackApiServer,
    scalebot_kubeconfig: Path,
    unique_name: str,
    tmp_path: Path,
    node_pool: Callable[..., list[str]],
) -> Iterator[Running]:
    pool = f"{unique_name}-web"
    health_port = free_port()
    pool_key = f"{unique_name}.scalebot.test/pool"
    nodes = node_pool(2, name=pool, labels={pool_key: pool})
    with scalebot_run(
        slack,
        tmp_path,
        {
            "dev": {
                "kubeconfig": str(scalebot_kubeconfig),
                "context": "",
                "provider": "labels",
                "pool_label": pool_key,
                "default_channels": [CHANNEL],
                "policy": {
                    "users": {OPERATOR: "operator", APPROVER: "approver"},
                    "approval_required_for": ["zero"],
                    "approvals_required": 1,
                },
            }
        },
        global_args=("-v", "--log-format", "json"),
        health_port=health_port,
    ) as (url, proc):
        yield Running(url, nodes, proc, f"http://127.0.0.1:{health_port}", tmp_path / "scalebot.log")


class Running(NamedTuple):
    url: str
    nodes: list[str]
    proc: subprocess.Popen[str]
    health_url: str
    log: Path


@contextlib.contextmanager
def scalebot_run(
    slack: SlackApiServer,
    tmp_path: Path,
    clusters: dict[str, Any],
    *,
    global_args: Sequence[str] = (),
    health_port: int | None = None,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`scalebot run` in HTTP mode on free ports, its Web API calls going to `slack`; stopped after.
    Its output (stdout and stderr) goes to `tmp_path/scalebot.log`."""
    http_port, health_port = free_port(), health_port or free_port()
    config = {
        "server": {"host": "127.0.0.1", "http_port": http_port, "health_port": health_port},
        "channels": {CHANNEL: next(iter(clusters))},
        "clusters": clusters,
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SLACK_BOT_TOKEN": "xoxb-e2e-token",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.url,
        "SCALEBOT_DB": str(tmp_path / "db.sqlite"),
    }
    env.pop("SLACK_APP_TOKEN", None)
    log = (tmp_path / "scalebot.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot",
            *global_args,
            "run",
            "--config",
            str(tmp_path / "config.yaml"),
            "--no-leader-election",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{http_port}"
    try:
        waits.wait_until(lambda: _ready(url, proc), 30, "scalebot run serving /healthz")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def _ready(url: str, proc: subprocess.Popen[str]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"scalebot run exited with {proc.returncode}")
    try:
        return get(f"{url}/healthz").status == 200
    except OSError:
        return False


def test_zero_request_approval_progress_and_completion(
    running: Running,
    slack: SlackApiServer,
    kube_admin: Any,
    unique_name: str,
) -> None:
    url, nodes, proc = running.url, running.nodes, running.proc
    signer = Signer(SECRET)
    pool = f"{unique_name}-web"
    body = signer.slash_command(
        f"zero {pool}", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
    )
    answer = post(f"{url}/slack/events", body, signer.headers(body))
    assert answer.status == 200

    card = slack.wait_for_call("chat.postMessage", lambda c: ACTION_APPROVE in str(c.body), timeout=30)
    assert card.body["channel"] == CHANNEL
    assert pool in all_text(card)
    [approve] = [b for b in buttons_of(card) if b["action_id"] == ACTION_APPROVE]
    card_ts = card.response["ts"]

    def click(user: str, name: str) -> None:
        payload = signer.block_actions(
            ACTION_APPROVE,
            approve["value"],
            user_id=user,
            channel_id=CHANNEL,
            message_ts=card_ts,
            response_url=slack.response_url(name),
        )
        assert post(f"{url}/slack/events", payload, signer.headers(payload)).status == 200

    click(OPERATOR, "self")
    refusal = slack.wait_for_call("response_url", lambda c: "/response/self" in c.path, timeout=15)
    assert "your own request" in all_text(refusal) and refusal.body.get("response_type") == "ephemeral"
    assert not [c for c in slack.calls_to("chat.update") if c.body.get("ts") == card_ts]

    click(APPROVER, "ok")
    slack.wait_for_call(
        "chat.update", lambda c: c.body.get("ts") == card_ts and "Approved by" in all_text(c), timeout=30
    )
    final = slack.wait_for_call(
        "chat.postMessage",
        lambda c: c.body.get("thread_ts") == card_ts and "Completed" in all_text(c),
        timeout=120,
    )
    replies = [c for c in slack.calls_to("chat.postMessage") if c.body.get("thread_ts") == card_ts]
    assert replies[-1] == final and not any("Cordoned" in all_text(c) for c in replies), (
        "phases edit the card"
    )
    assert "pools" in all_text(final) and f"{pool} 2 → 0" in all_text(final)
    assert not [n for n in rest.list_items(kube_admin, rest.node_path()) if n["metadata"]["name"] in nodes]
    # One by the start-up check (a refused token is one line, exit 2), one by Bolt's token
    # verification; none per request.
    assert len(slack.calls_to("auth.test")) == 2

    # /metrics of the real run: the operation under its cluster, the pool's nodes, no _created.
    exposition = get(f"{running.health_url}/metrics").body
    samples = {s.name: s for f in text_string_to_metric_families(exposition) for s in f.samples}
    assert 'scalebot_operations_total{cluster="dev",kind="zero",state="succeeded"} 1.0' in exposition
    assert f'scalebot_pool_nodes{{cluster="dev",pool="{pool}",state="ready"}} 0.0' in exposition
    assert "scalebot_leader" in samples and "_created" not in exposition
    # The chart's alerts and dashboard read only what this run exposes, and Prometheus' engine
    # evaluates every query over this run's series: no error, no alert for a healthy run, and
    # ScalebotOperationFailed once the zero-scale's failed counter grows.
    assert monitoring.problems(exposition) == []
    engine = ensure_go_tool("promql")
    queries = monitoring.queries()
    exprs = [monitoring.grafana_free(q.expr) for q in queries]
    evaluated = monitoring.evaluate(engine, monitoring.load_text(exposition), exprs)
    assert [e for e in evaluated if e.error] == []
    assert {
        q.where: e.series for q, e in zip(queries, evaluated, strict=True) if q.where.startswith("alert ")
    } == {f"alert {name}": 0 for name in ALERTS}
    panels = {q.where: e.series for q, e in zip(queries, evaluated, strict=True)}
    assert panels["panel 'Nodes per pool and state' A"] >= 4 and panels["panel 'Leader' A"] == 1
    failed = monitoring.series_key(
        "scalebot_operations_total", {"cluster": "dev", "kind": "zero", "state": "failed"}
    )
    (alert,) = [e for q, e in zip(queries, exprs, strict=True) if q.where == "alert ScalebotOperationFailed"]
    (fired,) = monitoring.evaluate(
        engine, monitoring.load_text(exposition, {failed: "0+0x20 1+0x9"}), [alert]
    )
    assert (fired.error, fired.series) == ("", 1) and 'cluster="dev"' in fired.value

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    # Every line of the run is a JSON log line (the start-up line too), in RFC 3339 UTC, with the
    # snake_case fields of the operation it concerns; Bolt warns of nothing on start.
    lines = running.log.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) > 10
    assert all(RFC3339_UTC.fullmatch(r["time"]) for r in records)
    assert [r for r in records if r["msg"].startswith("scalebot running: dev")]
    cordons = [r for r in records if r["msg"] == "Cordoning Node"]
    assert {r["node"] for r in cordons} == set(nodes)
    assert all(r.get("operation") and r.get("cluster") == "dev" for r in cordons), cordons
    assert not [r for r in records if r["logger"].startswith("scalebot.bolt") and r["level"] == "WARNING"]
    assert "will be unused" not in running.log.read_text()


@pytest.fixture
def kube_admin(admin_api: Any) -> Any:
    return admin_api

"""Security, and Slack faults, in one full `scalebot run` flow over Socket Mode.

One real process, the real control plane, a local Slack (Web API + Socket Mode server):
- tokens never leak: the process runs with recognisable test secrets (a bot token `xoxb-…`, an
  app-level token `xapp-…`, a signing secret) and the scalebot ServiceAccount's bearer token in its
  kubeconfig; after a whole flow (request, two approvals, an operation, its progress thread), none
  of them appears in the process's raw output stream (at -v; and no token reached a log call at
  all: the formatter's mask `xoxb-***` appears nowhere), in any recorded Slack request body or
  Socket Mode ack, in /metrics, in the cluster's Kubernetes Events, or anywhere in the SQLite
  file (every row of every table, and the raw bytes of the database and its WAL). The
  Authorization headers sent to Slack carry the bot and app tokens, as they must; nothing else
  does;
- a protected cluster needs its configured number of approvers (2 here): after the first
  approval the card says "1 of 2" and nothing runs; the second starts the operation;
- Slack faults during the flow (429 with Retry-After on chat.postMessage, 500s on chat.update
  and on thread replies, a slow answer): every message arrives, no thread reply twice, one card,
  and the final state is delivered.

The audit table's append-only triggers are proven in tests/unit/engine/operations/test_operations.py
(test_audit_table_is_append_only); signatures, replays and self-approval in tests/slack.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.slack.blocks.operations import ACTION_APPROVE
from localcluster import rest
from tests.reliability.support import (
    APPROVER,
    APPROVER2,
    CHANNEL,
    OPERATOR,
    Processes,
    operations,
    run_setup,
    slack_server,
    start_run,
    wait_healthy,
)
from tests.slack.harness import Signer, SocketModeServer, all_text, buttons_of, get

pytestmark = pytest.mark.e2e

BOT_TOKEN = "xoxb-000111-222333-SecretBotTokenSentinel"
APP_TOKEN = "xapp-1-A0TEST-444555-SecretAppTokenSentinel"
SIGNING_SECRET = "SecretSigningSentinel0123456789abcdef"


@pytest.fixture
def socket_server() -> Iterator[SocketModeServer]:
    server = SocketModeServer().start()
    yield server
    server.close()


def _sa_token(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    token = str(config["users"][0]["user"]["token"])
    assert len(token) > 20
    return token


def _database_text(db: Path) -> str:
    """Every value of every row of every table, plus the raw bytes of the file and its WAL."""
    parts: list[str] = []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert {"operations", "journal", "audit", "outbox", "messages"} <= set(tables)
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                parts.append(json.dumps(row, default=str))
    for suffix in ("", "-wal"):
        path = Path(f"{db}{suffix}")
        if path.exists():
            parts.append(path.read_bytes().decode("latin-1"))
    return "\n".join(parts)


def test_full_flow_under_slack_faults_protected_approvals_and_no_secret_anywhere(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    socket_server: SocketModeServer,
    tmp_path: Path,
) -> None:
    pool_a = f"{unique_name}-a"
    nodes_a = node_pool(2, name=pool_a, labels={pool_key: pool_a})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b"})
    db = tmp_path / "scalebot.db"
    secrets = {
        "bot token": BOT_TOKEN,
        "app token": APP_TOKEN,
        "signing secret": SIGNING_SECRET,
        "ServiceAccount token": _sa_token(scalebot_kubeconfig),
    }

    with slack_server() as slack:
        slack.ws_url = socket_server.url
        setup = run_setup(
            tmp_path,
            name="run",
            kubeconfig=scalebot_kubeconfig,
            pool_key=pool_key,
            slack_url=slack.url,
            db=db,
            approval_required_for=["zero"],
            protected=True,
            bot_token=BOT_TOKEN,
            signing_secret=SIGNING_SECRET,
            app_token=APP_TOKEN,
        )
        proc = start_run(procs, setup, name="run")
        wait_healthy(setup.health_url, proc)
        socket_server.wait_connections(1, timeout=30)
        signer = Signer(SIGNING_SECRET)

        # Slack misbehaves from the start: the card's first two posts are rate limited.
        slack.fail("chat.postMessage", times=2, status=429, retry_after=1)
        fields = signer.slash_command_fields(
            f"zero {pool_a}", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
        )
        socket_server.wait_for_ack(socket_server.push("slash_commands", fields), timeout=15)
        card = slack.wait_for_call(
            "chat.postMessage", lambda c: c.status == 200 and not c.body.get("thread_ts"), timeout=30
        )
        card_ts = str(card.response["ts"])
        [approve] = [b for b in buttons_of(card) if b["action_id"] == ACTION_APPROVE]
        [(op_id, (state, _))] = operations(db).items()
        assert state == "awaiting_approval"

        def click(user: str) -> None:
            payload = signer.block_actions_payload(
                ACTION_APPROVE,
                approve["value"],
                user_id=user,
                channel_id=CHANNEL,
                message_ts=card_ts,
                response_url=slack.response_url(user),
            )
            socket_server.wait_for_ack(socket_server.push("interactive", payload), timeout=15)

        # Then the card's edits fail (500) and one is slow (3 s, within the client's timeout).
        slack.fail("chat.update", times=3, status=500)
        slack.fail("chat.update", times=1, status=200, delay=3)
        click(APPROVER)
        slack.wait_for_call(
            "chat.update",
            lambda c: c.status == 200 and c.body.get("ts") == card_ts and "1 of 2 approvals" in all_text(c),
            timeout=30,
        )
        assert operations(db)[op_id][0] == "awaiting_approval", "one approval is not enough here"

        # Thread replies fail twice with 500 while the operation runs.
        slack.fail("chat.postMessage", times=2, status=500)
        click(APPROVER2)
        final = slack.wait_for_call(
            "chat.postMessage",
            lambda c: c.status == 200 and c.body.get("thread_ts") == card_ts and "Completed" in all_text(c),
            timeout=90,
        )
        assert operations(db)[op_id][0] == "succeeded"
        slack.wait_for(
            lambda cs: any(
                c.method == "chat.update" and c.status == 200 and "Completed" in all_text(c) for c in cs
            ),
            30,
            "the card's final state",
        )
        metrics = get(f"{setup.health_url}/metrics").body
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.output()[-3000:]

    # Slack: one card, every reply once, the final once, nothing owed.
    posts = [c for c in slack.calls_to("chat.postMessage") if c.status == 200]
    assert [c for c in posts if not c.body.get("thread_ts")] == [card]
    replies = [all_text(c) for c in posts if c.body.get("thread_ts") == card_ts]
    assert len(replies) == len(set(replies)), f"a thread reply was posted twice: {replies}"
    assert sum("Completed" in r for r in replies) == 1 and "Completed" in all_text(final)
    assert not any("Cordoned" in r for r in replies), "phases edit the card, they are not replies"
    assert {c.status for c in slack.calls} >= {200, 429, 500}, "the faults happened"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM outbox").fetchone() == (0,)
        approvals = [a for (a,) in conn.execute("SELECT actor FROM audit WHERE action = 'approve'")]
    assert sorted(approvals) == sorted([APPROVER, APPROVER2])
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & set(nodes_a)

    # No secret anywhere it could leak to. The log is the process's raw output stream; its
    # formatter masks Slack-token shapes (`xoxb-***`), so a mask in it would mean a token reached a
    # log call: none may appear. Kubernetes Events (what `kubectl describe` shows) are read back.
    events = rest.list_items(admin_api, "/api/v1/events") + rest.list_items(
        admin_api, "/apis/events.k8s.io/v1/events"
    )
    places = {
        "log": proc.output(),
        "Slack request bodies": "\n".join(json.dumps(c.body) for c in slack.calls),
        "Socket Mode acks": json.dumps(socket_server.acks),
        "/metrics": metrics,
        "database": _database_text(db),
        "Kubernetes Events": json.dumps(events),
    }
    assert "scalebot_operations" in metrics and len(places["log"]) > 1000
    assert any(nodes_a[0] in json.dumps(e) and "scalebot" in json.dumps(e) for e in events), "Events read"
    leaks = [
        (what, where) for what, value in secrets.items() for where, text in places.items() if value in text
    ]
    assert leaks == [], f"secrets found: {leaks}"
    masked = [m for m in ("xoxb-***", "xoxa-***", "xoxp-***", "xoxr-***", "xapp-***") if m in places["log"]]
    assert masked == [], f"a token reached a log call (masked only by the formatter): {masked}"
    # Only where they belong: the bot token authenticates Web API calls, the app token opens the socket.
    auth = {c.headers.get("authorization", "") for c in slack.calls}
    assert f"Bearer {BOT_TOKEN}" in auth and f"Bearer {APP_TOKEN}" in auth

"""The CLI's text output names Slack users when it has the bot token, through the local Web API.

`scalebot operations list/show` read the database; an operation requested and rejected in Slack
carries user IDs. With SLACK_BOT_TOKEN set, the text shows their Slack names (one users.info per
person); JSON keeps the IDs; without a token, or for someone Slack does not know, the ID.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import main as cli
from engine.domain.clock import FakeClock
from engine.domain.operation import OperationRequest, OpKind, Target
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store
from tests.slack.conftest import APPROVER, CHANNEL, OPERATOR, POLICIES, ControlledCluster
from tests.slack.harness import SlackApiServer


@pytest.fixture
def slack_api() -> Iterator[SlackApiServer]:
    api = SlackApiServer().start()
    yield api
    api.close()


def _rejected_operation(db: Path) -> str:
    clock = FakeClock(datetime(2026, 3, 2, 16, 0, tzinfo=UTC))
    cluster = ControlledCluster(now=clock.now)
    cluster.add_node("web-0", labels={"scalebot.io/pool": "web"})
    handle = ClusterHandle("dev-eu", cluster, SimulatedPoolProvider(cluster))
    ops = new_operations(Store(db), {"dev-eu": handle}, {"dev-eu": POLICIES["dev-eu"]}, clock)
    try:
        asked = ops.request(
            OperationRequest(
                kind=OpKind.ZERO, target=Target(cluster="dev-eu"), requested_by=OPERATOR, channel=CHANNEL
            )
        )
        assert asked.ok and asked.operation is not None and asked.operation.approval_id, asked.reply
        assert ops.reject(asked.operation.approval_id, by=APPROVER, reason="not now", channel=CHANNEL).ok
        return asked.operation.id
    finally:
        ops.runner.stop()
        ops.store.close()


def test_operations_show_names_slack_users_in_text_and_keeps_ids_in_json(
    slack_api: SlackApiServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "scalebot.db"
    op_id = _rejected_operation(db)
    slack_api.people = {APPROVER: {"id": APPROVER, "profile": {"display_name": "Ann"}}}
    monkeypatch.setenv("SLACK_API_URL", slack_api.url)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert cli.main(["operations", "show", op_id, "--db", str(db)]) == 0
    assert f" {APPROVER} " in capsys.readouterr().out, "without the bot token: IDs"
    assert slack_api.calls_to("users.info") == []

    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")

    assert cli.main(["operations", "list", "--db", str(db)]) == 0
    assert cli.main(["operations", "show", op_id, "--db", str(db)]) == 0
    shown = capsys.readouterr().out

    assert "Ann" in shown and f" {APPROVER} " not in shown, shown
    assert f"requested by {OPERATOR}" in shown, "Slack does not know them: the ID"
    assert [c.body["user"] for c in slack_api.calls_to("users.info")].count(APPROVER) == 1

    assert cli.main(["operations", "show", op_id, "--db", str(db), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert APPROVER in {e["actor"] for e in data["history"]}, "JSON is for programs: IDs"

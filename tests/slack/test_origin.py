"""Requests come from our workspace and app: the real Bolt app over HTTP, requests signed as Slack
signs them, the real Operations and SQLite.

A signature proves a request came from Slack for this app, not that the person is one of ours: a
Slack Connect channel carries users of other organisations, whose clicks name their own team. Such
a click or command is refused (acked, told, audited) and changes nothing; a protected cluster is
not operated from a direct message, and a cluster limited to some channels only from those.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import replace

from bot.slack.blocks import operations as blocks
from engine.domain.operation import OpState
from tests.slack.conftest import APPROVER, CHANNEL, OPERATOR, SECRET, RunningBot
from tests.slack.harness import Signer, post


def test_a_click_from_another_team_is_refused_and_changes_nothing(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()
    before = len(bot.api.calls_to("chat.update"))

    # An approver's user ID, clicking from another organisation through a Slack Connect channel.
    payload = Signer(SECRET).block_actions_payload(
        blocks.ACTION_APPROVE,
        approve["value"],
        user_id=APPROVER,
        channel_id=CHANNEL,
        message_ts="1700000000.000001",
        response_url=bot.api.response_url(),
    )
    payload["user"]["team_id"] = "T0OTHER"
    body = ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()
    result = post(bot.events_url, body, bot.signer.headers(body))

    assert result.status == 200
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.AWAITING_APPROVAL
    assert bot.ops.store.votes(op.approval_id) == []
    assert len(bot.api.calls_to("chat.update")) == before
    refused = [r for r in bot.ops.store.audit_rows() if r.action == "refused_slack_request"]
    assert [(r.actor, "T0OTHER" in r.detail) for r in refused] == [(APPROVER, True)]


def test_a_command_from_another_workspace_is_refused_in_the_ack(bot: RunningBot) -> None:
    bot.signer = replace(bot.signer, team_id="T0OTHER")
    result, _ = bot.command("zero dev-eu", user=OPERATOR)

    assert result.status == 200
    ack = result.json()
    assert ack["response_type"] == "ephemeral" and "workspace T0OTHER is not allowed" in ack["text"]
    bot.settle()
    assert bot.ops.list_operations() == []
    assert bot.audit_actions() == ["refused_slack_request"]
    assert bot.cluster.writes() == 0


def test_a_protected_cluster_is_not_operated_from_a_direct_message(bot: RunningBot) -> None:
    from engine.operations import policy

    current = bot.ops.policies["dev-eu"]
    bot.ops.policies["dev-eu"] = policy.ClusterPolicy(
        **{name: getattr(current, name) for name in current.__dataclass_fields__} | {"protected": True}
    )
    _, response_url = bot.command("zero dev-eu", user=OPERATOR, channel="D0DIRECT")

    reply = bot.wait_reply(response_url)
    assert "protected: operate it from its channel, not a direct message" in reply.body["text"]
    bot.settle()
    assert bot.ops.list_operations() == []
    assert bot.audit_actions() == ["refused_request"]

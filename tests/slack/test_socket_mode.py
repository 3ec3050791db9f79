"""The same app over Socket Mode, against a local WebSocket server speaking Slack's envelopes.

Covers: envelopes are acked with their envelope_id (a usage error rides in the ack payload); a
request over Socket Mode posts the card and an interactive envelope approves it; Slack's
`disconnect` (refresh_requested) makes the client fetch a new URL (a second
apps.connections.open) and keep working; auth.test happens once; readiness (`Bot.connected`)
follows the WebSocket: true once connected, false when Slack goes away; the Reject dialog
(views.open, then a view_submission envelope) works over Socket Mode too; a request in a channel
the bot is not in is refused privately (response_url) and creates nothing.
"""

from __future__ import annotations

from bot.slack.app import build_bot
from bot.slack.blocks import operations as blocks
from bot.slack.delivery.outbox import MemoryOutbox
from tests.slack.conftest import APPROVER, CHANNEL, OPERATOR, Engine, RunningBot, make_settings
from tests.slack.harness import SlackApiServer, SocketModeServer, all_text, wait_until


def _command(bot: RunningBot, socket: SocketModeServer, text: str, user: str = OPERATOR) -> tuple[str, str]:
    response_url = bot.api.response_url()
    fields = bot.signer.slash_command_fields(
        text, user_id=user, channel_id=CHANNEL, response_url=response_url
    )
    return socket.push("slash_commands", fields), response_url


def test_envelopes_are_acked_with_their_id_and_usage_errors_ride_the_ack(
    socket_bot: RunningBot, socket_server: SocketModeServer
) -> None:
    socket_server.wait_connections(1)

    envelope_id, _ = _command(socket_bot, socket_server, "wkae dev-eu")

    ack = socket_server.wait_for_ack(envelope_id)
    assert ack["payload"]["response_type"] == "ephemeral"
    assert "Did you mean `wake`?" in str(ack["payload"])
    socket_bot.settle()
    socket_bot.assert_unchanged(no_reads=True)


def test_request_and_approval_over_socket_mode(
    socket_bot: RunningBot, socket_server: SocketModeServer
) -> None:
    socket_server.wait_connections(1)
    envelope_id, _ = _command(socket_bot, socket_server, "zero dev-eu")
    ack = socket_server.wait_for_ack(envelope_id)  # "planning…" rides in the ack
    assert "Planning zero of dev-eu" in ack["payload"]["text"]
    card = socket_bot.card()
    op = socket_bot.only_op()

    payload = socket_bot.signer.block_actions_payload(
        blocks.ACTION_APPROVE,
        op.approval_id,
        user_id=APPROVER,
        channel_id=CHANNEL,
        message_ts=card.response["ts"],
        response_url=socket_bot.api.response_url(),
    )
    click = socket_server.push("interactive", payload)

    socket_server.wait_for_ack(click)
    update = socket_bot.api.wait_for_call("chat.update", lambda c: "Approved by <@U0APP>" in all_text(c))
    assert update.body["ts"] == card.response["ts"]


def test_disconnect_reconnects_and_keeps_working(
    socket_bot: RunningBot, socket_server: SocketModeServer
) -> None:
    socket_server.wait_connections(1)

    socket_server.disconnect("refresh_requested")

    socket_bot.api.wait_for(lambda cs: sum(c.method == "apps.connections.open" for c in cs) == 2, timeout=10)
    socket_server.wait_connections(2)
    envelope_id, _ = _command(socket_bot, socket_server, "scale web 1")
    socket_server.wait_for_ack(envelope_id, timeout=10)
    socket_bot.card()
    assert len(socket_bot.api.calls_to("auth.test")) == 1


def test_readiness_follows_the_socket_mode_connection(
    slack_api: SlackApiServer, socket_server: SocketModeServer, engine: Engine
) -> None:
    settings = make_settings(slack_api, app_token="xapp-test-token")
    bot = build_bot(settings, engine.ops, outbox=MemoryOutbox())
    bot.serve_health = False
    bot.start()
    try:
        socket_server.wait_connections(1)
        wait_until(bot.connected, what="the bot reports the open connection")
        assert bot.socket is not None
        bot.socket.client.auto_reconnect_enabled = False

        socket_server.close()  # Slack goes away

        wait_until(lambda: not bot.connected(), what="readiness notices the dropped connection")
    finally:
        bot.stop(timeout=2)


def test_reject_dialog_over_socket_mode(socket_bot: RunningBot, socket_server: SocketModeServer) -> None:
    socket_server.wait_connections(1)
    _command(socket_bot, socket_server, "zero dev-eu")
    card = socket_bot.card()
    op = socket_bot.only_op()
    click = socket_bot.signer.block_actions_payload(
        blocks.ACTION_REJECT,
        op.approval_id,
        user_id=APPROVER,
        channel_id=CHANNEL,
        message_ts=card.response["ts"],
        response_url=socket_bot.api.response_url(),
    )
    socket_server.wait_for_ack(socket_server.push("interactive", click))
    view = socket_bot.api.wait_for_call("views.open").body["view"]

    reason = {
        blocks.REJECT_REASON: {blocks.REJECT_REASON: {"type": "plain_text_input", "value": "not today"}}
    }
    submitted = socket_server.push(
        "interactive", socket_bot.signer.view_submission_payload(view, reason, user_id=APPROVER)
    )

    assert "payload" not in socket_server.wait_for_ack(submitted)  # the dialog closes
    update = socket_bot.api.wait_for_call("chat.update", lambda c: "Rejected by <@U0APP>" in all_text(c))
    assert update.body["ts"] == card.response["ts"] and "not today" in all_text(update)


def test_a_request_in_a_channel_without_the_bot_is_refused_privately_over_socket_mode(
    socket_bot: RunningBot, socket_server: SocketModeServer
) -> None:
    socket_server.wait_connections(1)
    socket_bot.api.members = {"C0ELSEWHERE"}

    envelope_id, response_url = _command(socket_bot, socket_server, "zero dev-eu")

    socket_server.wait_for_ack(envelope_id)
    reply = socket_bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral"
    assert "/invite @scalebot" in reply.body["text"] and "nothing was requested" in reply.body["text"]
    socket_bot.settle()
    socket_bot.assert_unchanged(no_reads=True)
    assert socket_bot.api.calls_to("chat.postMessage") == []

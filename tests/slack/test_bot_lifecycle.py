"""`build_bot` + `Bot.start()` / `Bot.stop()`: the composition the CLI uses, in HTTP mode.

Covers: the bot serves /slack/events and /healthz on its own server, re-adopts the message of
an operation that was already running (edited in place, not posted again), and stops cleanly.
"""

from __future__ import annotations

from dataclasses import replace

from bot.config.settings import ServerSettings
from bot.slack.app import build_bot
from bot.slack.delivery.outbox import MemoryOutbox
from engine.domain.operation import OperationRequest, OpKind, Target
from tests.slack.conftest import CHANNEL, OPERATOR, SECRET, Engine, make_settings
from tests.slack.harness import Signer, SlackApiServer, all_text, get, post


def test_build_start_serve_and_stop(slack_api: SlackApiServer, engine: Engine) -> None:
    running = engine.ops.request(
        OperationRequest(
            kind=OpKind.DRAIN,
            target=Target(cluster="dev-eu", nodes=("web-1",)),
            requested_by=OPERATOR,
            channel=CHANNEL,
        )
    )
    assert running.operation is not None
    engine.ops.set_message(running.operation.id, channel=CHANNEL, ts="1699999999.000001")
    settings = replace(
        make_settings(slack_api), server=ServerSettings(host="127.0.0.1", http_port=0, health_port=0)
    )
    bot = build_bot(settings, engine.ops, outbox=MemoryOutbox())
    bot.start()
    try:
        assert bot.http is not None
        url = f"http://127.0.0.1:{bot.http.port}"
        assert get(f"{url}/healthz").status == 200
        signer = Signer(SECRET)
        body = signer.slash_command(
            "scale web 1", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack_api.response_url()
        )
        assert post(f"{url}/slack/events", body, signer.headers(body)).status == 200
        card = slack_api.wait_for_call("chat.postMessage", lambda c: "Scale" in all_text(c))
        assert card.body["channel"] == CHANNEL
        resumed = slack_api.wait_for_call("chat.update", lambda c: c.body.get("ts") == "1699999999.000001")
        assert "Drain" in all_text(resumed)
    finally:
        bot.stop(timeout=2)
    assert len(slack_api.calls_to("auth.test")) == 1

"""Button listeners: Approve, Reject, Cancel, and a catch-all for buttons scalebot does not know.

Each acks at once (the body of a block_actions ack is ignored; only the 200 matters), reads the
opaque ID from the button value and the clicker's user ID, and hands the one ops call to the
bot's executor, which answers ephemerally or updates the card through the sender. Malformed
payloads (no user, no value) are answered and change nothing.

Reject first asks why: right behind the ack, on the listener thread (a trigger_id lives 3 s),
`views.open` shows the optional-reason dialog; its submission is acked at once and the rejection
runs on the executor. If the dialog cannot be opened, the click rejects without a reason.
"""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import Executor
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient

from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from bot.slack.blocks.kit import Message
from bot.slack.delivery.sender import Sender
from bot.slack.dispatch import Dispatcher, Invocation, answer
from bot.text import messages

log = logging.getLogger(__name__)

HANDLED = (blocks.ACTION_APPROVE, blocks.ACTION_REJECT, blocks.ACTION_CANCEL, blocks.ACTION_ADVISED_SCALE)
_VALUE = re.compile(r"[A-Za-z0-9_-]{1,200}")


def register(app: App, dispatcher: Dispatcher, executor: Executor, sender: Sender) -> None:
    handled = (*HANDLED, *dispatcher.clicks)

    def on_click(ack: Ack, body: dict[str, Any], respond: Respond, client: WebClient) -> None:
        ack()
        inv = Invocation(user=_user(body), channel=_channel(body), respond=respond)
        action = _action(body)
        if action is None or not inv.user or action[0] not in handled:
            executor.submit(answer, inv, views.text_message(messages.unknown_button()))
        elif action[0] == blocks.ACTION_REJECT and _ask_why(client, body, action[1], inv.channel):
            return
        else:
            executor.submit(dispatcher.click, action[0], action[1], inv)

    @app.view(blocks.CALLBACK_REJECT)
    def on_reject_reason(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        ack()
        meta = _metadata(view)
        approval_id, channel, user = meta.get("approval_id", ""), meta.get("channel", ""), _user(body)
        if not _VALUE.fullmatch(approval_id) or not user:
            log.warning("reject dialog submitted without a valid approval ID; ignored")
            return
        # A dialog has no response_url: refusals reach the person as an ephemeral in the channel.
        inv = Invocation(user=user, channel=channel, respond=_ephemeral_to(sender, channel, user))
        executor.submit(dispatcher.reject, approval_id, _reason(view), inv)

    for action_id in handled:
        app.action(action_id)(on_click)
    # Last: any other button (an older card, a hand-made payload) still gets an answer.
    app.action(re.compile(r".*"))(on_click)


def _ask_why(client: WebClient, body: dict[str, Any], approval_id: str, channel: str) -> bool:
    """Open the Reject dialog; False (reject at once, without a reason) when it cannot be opened."""
    trigger = body.get("trigger_id")
    if not isinstance(trigger, str) or not trigger:
        return False
    try:
        client.views_open(
            trigger_id=trigger, view=blocks.reject_modal(approval_id=approval_id, channel=channel)
        )
    except Exception:
        log.warning("could not open the Reject dialog; rejecting without a reason", exc_info=True)
        return False
    return True


def _ephemeral_to(sender: Sender, channel: str, user: str) -> Any:
    def respond(*, text: str, **_: Any) -> None:
        if channel:
            sender.ephemeral(channel, user, Message(text, ()))

    return respond


def _metadata(view: dict[str, Any]) -> dict[str, str]:
    try:
        data = json.loads(str(view.get("private_metadata") or "{}"))
    except ValueError:
        return {}
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _reason(view: dict[str, Any]) -> str:
    values = (view.get("state") or {}).get("values") or {}
    field = (values.get(blocks.REJECT_REASON) or {}).get(blocks.REJECT_REASON) or {}
    text = field.get("value") if isinstance(field, dict) else None
    return " ".join(str(text).split())[: blocks.REJECT_REASON_CHARS] if text else ""


def _action(body: dict[str, Any]) -> tuple[str, str] | None:
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return None
    action_id, value = actions[0].get("action_id"), actions[0].get("value")
    if not isinstance(action_id, str) or not isinstance(value, str) or not _VALUE.fullmatch(value):
        return None
    return action_id, value


def _user(body: dict[str, Any]) -> str:
    user = body.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    return user_id if isinstance(user_id, str) else ""


def _channel(body: dict[str, Any]) -> str:
    channel = body.get("channel")
    channel_id = channel.get("id") if isinstance(channel, dict) else None
    if isinstance(channel_id, str):
        return channel_id
    container = body.get("container")
    container_channel = container.get("channel_id") if isinstance(container, dict) else None
    return container_channel if isinstance(container_channel, str) else ""

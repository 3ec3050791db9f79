"""Button listeners: Approve, Reject, Cancel, and a catch-all for buttons scalebot does not know.

Each acks at once (the body of a block_actions ack is ignored; only the 200 matters), reads the
opaque ID from the button value and the clicker's user ID, and hands the one ops call to the
bot's executor, which answers ephemerally or updates the card through the sender. Malformed
payloads (no user, no value) are answered and change nothing.
"""

from __future__ import annotations

import re
from concurrent.futures import Executor
from typing import Any

from slack_bolt import Ack, App, Respond

from bot import blocks, messages
from bot.dispatch import Dispatcher, Invocation, answer

HANDLED = (blocks.ACTION_APPROVE, blocks.ACTION_REJECT, blocks.ACTION_CANCEL)
_VALUE = re.compile(r"[A-Za-z0-9_-]{1,200}")


def register(app: App, dispatcher: Dispatcher, executor: Executor) -> None:
    handled = (*HANDLED, *dispatcher.clicks)

    def on_click(ack: Ack, body: dict[str, Any], respond: Respond) -> None:
        ack()
        inv = Invocation(user=_user(body), channel=_channel(body), respond=respond)
        action = _action(body)
        if action is None or not inv.user or action[0] not in handled:
            executor.submit(answer, inv, blocks.text_message(messages.unknown_button()))
        else:
            executor.submit(dispatcher.click, action[0], action[1], inv)

    for action_id in handled:
        app.action(action_id)(on_click)
    # Last: any other button (an older card, a hand-made payload) still gets an answer.
    app.action(re.compile(r".*"))(on_click)


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

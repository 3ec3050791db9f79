"""Bolt listeners: `register(app, ops, sender, settings, …)` wires every kind onto an App.

Listeners are thin: ack first, parse (pure), hand the one ops call to the bot's executor, return.
The `@app.error` handler is the boundary for anything a listener raises: it logs the traceback
under an incident ID and tells the person, ephemerally, that something failed. Never a trace in
Slack.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

from slack_bolt import App, BoltResponse

from bot.config.settings import Settings
from bot.ports import OperationsPort
from bot.slack.blocks import views
from bot.slack.delivery.progress import Progress
from bot.slack.delivery.sender import Sender
from bot.slack.directory import Names, no_names
from bot.slack.dispatch import (
    ChannelCheck,
    ClickHandler,
    Dispatcher,
    GroupResolver,
    SubcommandHandler,
    error_reply,
    new_incident,
    no_groups,
)
from bot.slack.home import HomeTab
from bot.slack.listeners import actions, commands
from bot.text import messages

log = logging.getLogger(__name__)


def register(
    app: App,
    ops: OperationsPort,
    sender: Sender,
    settings: Settings,
    *,
    progress: Progress,
    executor: Executor,
    groups: GroupResolver = no_groups,
    subcommands: Mapping[str, SubcommandHandler] | None = None,
    clicks: Mapping[str, ClickHandler] | None = None,
    can_post: ChannelCheck | None = None,
    names: Names = no_names,
) -> Dispatcher:
    """Register /scale, the buttons and the error boundary. Other subcommands (`schedule`) and
    buttons (Postpone, Skip, Run now) plug in through `subcommands` / `clicks`: they then get the
    same ack-first handling, executor and error boundary. A catch-all answers unknown buttons."""
    dispatcher = Dispatcher(
        ops,
        progress,
        groups=groups,
        subcommands=subcommands,
        clicks=clicks,
        can_post=can_post,
        names=names,
    )
    commands.register(app, dispatcher, settings, executor)
    actions.register(app, dispatcher, executor, sender)
    app.error(_error_handler(sender))
    return dispatcher


def register_home(app: App, home: HomeTab) -> None:
    """`app_home_opened`: publish that person's Home tab (built on the executor; Bolt acks events)."""

    @app.event("app_home_opened")
    def on_home_opened(event: dict[str, Any]) -> None:
        user = event.get("user")
        if isinstance(user, str) and user and event.get("tab", "home") == "home":
            home.opened(user)


def _error_handler(sender: Sender) -> Any:
    def on_error(error: Exception, body: dict[str, Any], respond: Any, response: Any) -> BoltResponse | None:
        incident = new_incident()
        message = error_reply(error)  # a usage error is shown as it is, as the dispatcher shows it
        if message is None:
            log.error("Slack request failed (incident %s)", incident, exc_info=error)
            message = views.text_message(messages.internal_error(incident, _op_hint(body)))
        if response is not None and "command" in body:
            # Not acked yet: the sentence becomes the ephemeral ack instead of a 500.
            return BoltResponse(status=200, body={"response_type": "ephemeral", "text": message.text})
        try:
            if respond is not None and respond.response_url:
                respond(
                    text=message.text,
                    blocks=message.block_dicts(),
                    response_type="ephemeral",
                    replace_original=False,
                )
            elif _user(body) and _channel(body):
                sender.ephemeral(_channel(body), _user(body), message)
        except Exception:  # the error path must not raise in turn
            log.exception("could not tell the user about incident %s", incident)
        return BoltResponse(status=200, body="") if response is not None else None

    return on_error


def _op_hint(body: dict[str, Any]) -> str | None:
    for action in body.get("actions") or ():
        value = action.get("value") if isinstance(action, dict) else None
        if isinstance(value, str) and re.fullmatch(r"op-[A-Za-z0-9]{1,32}", value):
            return value
    return None


def _user(body: dict[str, Any]) -> str:
    user = body.get("user")
    return str((user.get("id") if isinstance(user, dict) else None) or body.get("user_id") or "")


def _channel(body: dict[str, Any]) -> str:
    channel = body.get("channel")
    return str((channel.get("id") if isinstance(channel, dict) else None) or body.get("channel_id") or "")

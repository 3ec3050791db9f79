"""The `/scale` listener: ack within Slack's 3 s with nothing slow in between.

Parsing is pure and fast, so a usage error (or `help`) is the ephemeral ack body itself and bad
input never reaches the engine. Everything else is handed to the bot's executor: planning takes a
cluster snapshot, and Bolt's listener pool (5 threads) must stay free for acks. A request's ack
says privately that planning has started ("Planning zero of prod…"), since on a large cluster
the card takes seconds; other acks are empty.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

from slack_bolt import Ack, App, Respond

from bot.config.settings import Settings
from bot.slack.blocks import views
from bot.slack.blocks.kit import Message
from bot.slack.dispatch import Dispatcher, Invocation, usage_reply
from bot.text import command_registry, commands, messages
from bot.text.command_registry import AckReply


def register(app: App, dispatcher: Dispatcher, settings: Settings, executor: Executor) -> None:
    @app.command(messages.COMMAND)
    def scale(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        user, channel = str(command.get("user_id") or ""), str(command.get("channel_id") or "")
        if not user or not channel:
            return ack_with(ack, views.text_message(messages.malformed_request()))
        try:
            text = str(command.get("text") or "")
            parsed = commands.parse(
                text, default_cluster=settings.default_cluster(channel), clusters=settings.cluster_names()
            )
        except commands.UsageError as err:
            return ack_with(ack, usage_reply(err))
        # What the ack says is the subcommand's (bot.text.command_registry); the work runs after it.
        says = command_registry.SLACK[commands.subcommand_of(parsed)].ack
        if says is AckReply.ANSWER and isinstance(parsed, commands.Help):
            return ack_with(ack, views.help_view(parsed.topic))
        # A temporary wake (`wake dev-eu for 3h`) belongs to the schedules, which answer it themselves.
        if (
            says is AckReply.PLANNING
            and isinstance(parsed, commands.Request)
            and (parsed.plan_only or parsed.target.wake_for_seconds is None)
        ):
            planning = messages.planning(parsed.kind, parsed.target.cluster, plan_only=parsed.plan_only)
            ack_with(ack, views.text_message(planning))
        else:
            ack()
        executor.submit(dispatcher.run, parsed, Invocation(user=user, channel=channel, respond=respond))


def ack_with(ack: Ack, message: Message) -> None:
    ack(text=message.text, blocks=message.block_dicts(), response_type="ephemeral")

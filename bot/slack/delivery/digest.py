"""The fleet digest: one message for the schedules that fired in the same minute, edited as their
clusters finish.

A fleet's nights fire together (every "Mon-Fri 20:00"); each cluster's card lives in its own
announcement's thread. With `fleet_digest_channel` configured, the operations schedules started in
one minute also get one summary message there: a count per outcome (done, needs attention,
failed, running) and a line per cluster linking to its card (`chat.getPermalink`, asked once per
card). It is one post per minute of firing, then edits that the sender coalesces within the
chat.update budget; its last rendering, once every operation ended, is a final one.

Called only from the progress worker (`Progress`), so its state needs no lock of its own.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from bot.config.settings import Settings
from bot.slack.blocks import operations as blocks
from bot.slack.delivery.sender import Sender
from engine.domain.operation import Operation, OpState

log = logging.getLogger(__name__)

KEY_PREFIX = "digest:"
SHARE = "fleet-digest"
"""The digest's own turn in the sender's budgets (it is no cluster's)."""
_FINISHED = 1_000
"""How many finished minutes are remembered, so a late event never starts a second digest."""
Permalink = Callable[[str, str], str | None]
"""(channel, ts) -> the message's permalink, or None when Slack would not say."""


def digest_key(fired_at: datetime) -> str:
    return f"{KEY_PREFIX}{fired_at:%Y%m%dT%H%M}"


def fired_minute(op: Operation) -> datetime | None:
    """The minute a schedule started `op` in; None for an operation no schedule started."""
    if not op.requested_by.startswith("schedule:"):
        return None
    return op.created_at.replace(second=0, microsecond=0)


def outcome(op: Operation, *, held_up: bool) -> blocks.DigestOutcome:
    if op.state is OpState.SUCCEEDED:
        return "done"
    if op.state is OpState.FAILED:
        return "failed"
    if op.state.is_terminal or op.state is OpState.AWAITING_APPROVAL or held_up:
        return "attention"  # not asleep (cancelled, rejected, expired), or waiting on someone
    return "running"


class FleetDigest:
    def __init__(self, sender: Sender, channel: str, permalink: Permalink) -> None:
        self._sender = sender
        self._channel = channel
        self._permalink = permalink
        self._groups: dict[datetime, dict[str, blocks.DigestEntry]] = {}
        self._links: dict[tuple[str, str], str | None] = {}
        self._finished: OrderedDict[datetime, None] = OrderedDict()

    def note(self, op: Operation, *, held_up: bool, card: tuple[str, str] | None) -> None:
        """`op` changed: update its line and show the digest again (the sender skips unchanged)."""
        minute = fired_minute(op)
        if minute is None or minute in self._finished:
            return
        group = self._groups.setdefault(minute, {})
        group[op.id] = blocks.DigestEntry(
            cluster=op.target.cluster,
            outcome=outcome(op, held_up=held_up),
            ended=op.state.is_terminal,
            link=self._link(card),
        )
        final = all(e.ended for e in group.values())
        message = blocks.fleet_digest(minute, list(group.values()))
        self._sender.show(digest_key(minute), message, channel=self._channel, final=final, share=SHARE)
        if final:
            del self._groups[minute]
            self._finished[minute] = None
            while len(self._finished) > _FINISHED:
                self._finished.popitem(last=False)

    def _link(self, card: tuple[str, str] | None) -> str | None:
        if card is None:
            return None
        if card not in self._links:
            try:
                self._links[card] = self._permalink(*card)
            except Exception:  # a digest line without its link, never a digest missing
                log.warning("no permalink for the card %s in %s", card[1], card[0], exc_info=True)
                return None
        return self._links[card]


class PermalinkApi(Protocol):
    def chat_getPermalink(self, *, channel: str, message_ts: str) -> Any: ...  # noqa: N802 (Slack's name)


def fleet_digest(settings: Settings, sender: Sender, client: PermalinkApi) -> FleetDigest | None:
    """The digest `fleet_digest_channel` asks for, asking `client` for its cards' permalinks."""
    if not settings.fleet_digest_channel:
        return None

    def permalink(channel: str, ts: str) -> str | None:
        return str(client.chat_getPermalink(channel=channel, message_ts=ts).get("permalink") or "") or None

    return FleetDigest(sender, settings.fleet_digest_channel, permalink)

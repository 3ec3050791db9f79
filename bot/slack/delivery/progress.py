"""Live progress in Slack: operation events in, one edited parent message plus thread replies out.

The engine calls `on_event` from its runner threads (and from inside `approve`, sometimes within
a store transaction), so `on_event` only queues: a worker thread renders with
`bot.slack.blocks.operations`, looks up decision lines in the operation's history, and hands
everything to the sender. Listeners call `show(op)` after a request or a click through the same
queue, so renderings stay in order.

Per operation (message key `op:<id>`):
- the parent message is the approval card while awaiting approval and becomes the progress
  parent afterwards (decision line, status line with emoji, Cancel while running), edited in
  place; terminal states are final renderings, which the sender never drops;
- phase changes and the final summary of a schedule's or the CLI's operation that succeeded edit
  that message (its status line); a thread reply is posted only when someone must act or is
  waiting for the answer, since every post counts against the workspace's chat.postMessage budget
  that a fleet's clusters share: a drain blocked (the DrainingSucceeded condition when it changed,
  at most once per `blocker_interval`, because drains report every pass), a failure (also shown in
  the channel), an operation cancelled after it had started (what it left behind, such as nodes
  cordoned before it), and the end of a person's request (the reply mentions them).

A card Slack refuses to post (the bot is not in the channel, which `conversations.info` could not
tell beforehand; the channel is gone or archived) must not leave a request nobody sees holding its
locks: the request is cancelled by the system (`Operations.cancel_unshown`) and the requester is
told privately what to do. An operation that needs no approval and was requested while the channel
could not be checked is held (`show(op, start_when_posted=True)`) and starts once its card is in.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bot.ports import OperationsPort, Unshown
from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from bot.slack.delivery.digest import FleetDigest
from bot.slack.delivery.sender import Sender
from bot.text import messages
from bot.text.mrkdwn import Mrkdwn
from engine.domain.operation import Operation, OpState, ProgressEvent

log = logging.getLogger(__name__)

KEY_PREFIX = "op:"
CARD_REFUSED = frozenset({"not_in_channel", "channel_not_found", "is_archived"})
"""Slack's answers to a card's first post that no retry can change: its request is cancelled."""
_SUMMARISED = (OpState.SUCCEEDED, OpState.FAILED, OpState.EXPIRED, OpState.SUPERSEDED)


def message_key(op_id: str) -> str:
    return f"{KEY_PREFIX}{op_id}"


@dataclass(slots=True)
class _View:
    status: str | None = None
    decision: Mrkdwn | None = None
    decision_loaded: bool = False
    condition_posted: str = ""
    condition_at: float = float("-inf")
    held_up: bool = False
    """The drain's last report named what blocks it (a fleet digest shows "needs attention")."""


class Progress:
    def __init__(
        self,
        ops: OperationsPort,
        sender: Sender,
        *,
        channel_for: Callable[[Operation], str | None] | None = None,
        blocker_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        digest: FleetDigest | None = None,
    ) -> None:
        self._ops = ops
        self._sender = sender
        self._channel_for = channel_for
        self._blocker_interval = blocker_interval
        self._clock = clock
        self._digest = digest
        self._cards: dict[str, tuple[str, str]] = {}
        """Where each operation's card was posted (channel, ts), for the digest's links."""
        self._queue: queue.Queue[ProgressEvent | Operation | None] = queue.Queue()
        self._views: dict[str, _View] = {}
        self._outstanding = 0
        self._held: set[str] = set()
        self._unshown: set[str] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- any thread -------------------------------------------------------------------------------

    def start(self) -> None:
        self._sender.add_posted_hook(self._remember_message)
        self._sender.add_unposted_hook(self._card_refused)
        self._ops.subscribe(self.on_event)
        self._thread = threading.Thread(target=self._run, name="scalebot-progress", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def on_event(self, event: ProgressEvent) -> None:
        """The engine's progress listener: never blocks, never raises."""
        self._put(event)

    def show(self, op: Operation, *, start_when_posted: bool = False) -> None:
        """(Re)render an operation's message, e.g. right after a request or a click.
        `start_when_posted`: the operation was held until its card is in the channel."""
        if start_when_posted:
            with self._cond:
                self._held.add(op.id)
        self._put(op)

    def resume(self, operations: Iterable[Operation]) -> None:
        """At start-up: messages posted before a restart are edited, not posted again."""
        for op in operations:
            if op.message_ts:
                self._sender.adopt(message_key(op.id), op.channel, op.message_ts)
            self.show(op)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued event has been rendered and handed to the sender."""
        with self._cond:
            return self._cond.wait_for(lambda: self._outstanding == 0, timeout=timeout)

    def _put(self, item: ProgressEvent | Operation) -> None:
        with self._cond:
            self._outstanding += 1
        self._queue.put(item)

    def _remember_message(self, key: str, channel: str, ts: str) -> None:
        if not key.startswith(KEY_PREFIX):
            return
        op_id = key[len(KEY_PREFIX) :]
        self._ops.set_message(op_id, channel=channel, ts=ts)
        with self._cond:
            if self._digest is not None:
                self._cards[op_id] = (channel, ts)
            held = op_id in self._held
            self._held.discard(op_id)
        if held:
            self._ops.start_shown(op_id)

    def _card_refused(self, key: str, channel: str, error: str) -> None:
        """The sender's unposted hook: a card Slack would not post ends its request (nothing started)."""
        if not key.startswith(KEY_PREFIX):
            return
        op_id = key[len(KEY_PREFIX) :]
        with self._cond:
            held = op_id in self._held
            self._held.discard(op_id)
            if op_id in self._unshown:
                return  # its cancellation's own rendering failed the same way
            if error not in CARD_REFUSED and not held:
                # Slack unreachable, not a refusal: a later rendering posts the card again, and a
                # request nobody approves expires as usual.
                return
            self._unshown.add(op_id)  # before the cancel: its final event must not render
        outcome = self._ops.cancel_unshown(op_id, Unshown(channel, error))
        op = outcome.operation
        log.warning("card of operation %s not posted in %s (%s): %s", op_id, channel, error, outcome.reply)
        if not outcome.ok:
            with self._cond:
                self._unshown.discard(op_id)
        if outcome.ok and op is not None and _is_person(op.requested_by):
            self._sender.tell(
                channel,
                op.requested_by,
                views.text_message(
                    messages.card_not_posted(op.kind, op.target.cluster, channel, error), emoji="⚠️"
                ),
            )

    # -- the worker -------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if isinstance(item, Operation):
                    self._render(item, self._view(item.id), refresh_decision=True)
                    self._note_digest(item, self._view(item.id))
                else:
                    self._handle(item)
            except Exception:  # one bad event must not end live progress for everyone
                op = item if isinstance(item, Operation) else item.operation
                log.exception("rendering progress failed", extra={"operation": op.id})
            finally:
                with self._cond:
                    self._outstanding -= 1
                    self._cond.notify_all()

    def _view(self, op_id: str) -> _View:
        return self._views.setdefault(op_id, _View())

    def _handle(self, event: ProgressEvent) -> None:
        op = event.operation
        view = self._view(op.id)
        # Decisions ("Approved by …", "Rejected by …") come from the history, not the status line.
        if event.kind in ("phase", "report") or (event.kind == "final" and op.state in _SUMMARISED):
            view.status = event.text
        channel = self._render(op, view, refresh_decision=event.kind in ("state", "final"))
        if event.kind == "report":
            view.held_up = bool(event.condition)
        self._note_digest(op, view)
        if channel is None:
            return
        key = message_key(op.id)
        if event.kind == "report" and event.condition:
            self._maybe_blockers(op, view, event, channel)
        elif event.kind == "final" and _needs_reply(op):
            # A failure is also shown in the channel: people watching it must not miss it.
            failed = op.state is OpState.FAILED
            reply = blocks.final_reply(op, event.text)
            self._sender.reply(
                key, reply, channel=channel, final=True, broadcast=failed, share=op.target.cluster
            )
        if op.state.is_terminal:
            self._views.pop(op.id, None)

    def _note_digest(self, op: Operation, view: _View) -> None:
        if self._digest is None:
            return
        with self._cond:
            card = self._cards.pop(op.id, None) if op.state.is_terminal else self._cards.get(op.id)
        if card is None and op.message_ts:
            card = (op.channel, op.message_ts)
        self._digest.note(op, held_up=view.held_up, card=card)

    def _maybe_blockers(self, op: Operation, view: _View, event: ProgressEvent, channel: str) -> None:
        now = self._clock()
        if event.condition == view.condition_posted or now - view.condition_at < self._blocker_interval:
            return
        view.condition_posted, view.condition_at = event.condition, now
        reply = blocks.blockers_reply(op, event.condition, summary=event.text)
        self._sender.reply(message_key(op.id), reply, channel=channel, share=op.target.cluster)

    def _render(self, op: Operation, view: _View, *, refresh_decision: bool) -> str | None:
        with self._cond:
            if op.id in self._unshown:
                return None  # Slack refused its card: nothing of it can be shown there
        channel = op.channel or (self._channel_for(op) if self._channel_for else None)
        if not channel:
            log.debug("operation %s has no channel; nothing to show in Slack", op.id)
            return None
        if refresh_decision or not view.decision_loaded:
            view.decision = blocks.decision_from_history(op, self._ops.history(op.id))
            view.decision_loaded = True
        asking = op.state is OpState.AWAITING_APPROVAL
        approvers = self._ops.approvers(op.target.cluster, besides=op.requested_by) if asking else None
        message = blocks.operation_message(
            op, status=view.status, decision=view.decision, approvers=approvers
        )
        self._sender.show(
            message_key(op.id),
            message,
            channel=channel,
            thread_ts=op.thread_ts,
            final=op.state.is_terminal,
            # An approval card inside a thread (a schedule's announcement) is also shown in the
            # channel, so the approvers see it.
            broadcast=asking and bool(op.thread_ts),
            share=op.target.cluster,  # clusters take turns in the workspace's budget
        )
        return channel


def _needs_reply(op: Operation) -> bool:
    """A final summary in the thread only when someone must look: a failure, a cancel that left
    work behind, or a person's own request ending (the reply mentions them: an edit notifies
    nobody). A schedule's or the CLI's success says everything on its card (the status line)."""
    if op.state is OpState.FAILED or (op.state is OpState.CANCELLED and bool(op.step)):
        return True
    return op.state is OpState.SUCCEEDED and _is_person(op.requested_by)


def _is_person(actor: str) -> bool:
    return not actor.startswith(("cli:", "schedule:", "policy:", "scalebot"))

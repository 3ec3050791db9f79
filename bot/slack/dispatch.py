"""What a parsed command or a button click does, run after the ack on the bot's own executor.

Listeners ack, parse and submit here; nothing in this module runs on Bolt's listener pool, so a
slow cluster snapshot (`request`, `plan`, `status`) never delays another person's ack. Each
handler makes one call on the operations port and answers: an ephemeral reply through the
interaction's `response_url`, or an operation message through `Progress` (and so the sender).

This is an entry point, so it has the catch-all, which maps an error's category in one place
(`error_reply`): a usage error (`UserError`, a bad command) is shown as it is, a cause fixed outside
scalebot (API server unreachable, RBAC) is named as the CLI names it; anything else is
logged with its traceback under an incident ID, and the person gets one short sentence.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bot.ports import OperationsPort, UserError
from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from bot.slack.blocks.kit import Message
from bot.slack.channels import Access
from bot.slack.delivery.progress import Progress
from bot.slack.directory import Names, no_names
from bot.text import command_registry, commands, messages
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import Operation, OpKind, OpState, Outcome, Target

log = logging.getLogger(__name__)

GroupResolver = Callable[[str], Sequence[str]]
"""Slack user ID -> the user group IDs (S…) the policy may grant roles to."""
ChannelCheck = Callable[[str], Access]
"""Channel ID -> whether scalebot can post there (bot.slack.channels.SlackChannels.can_post)."""


def no_groups(user: str) -> Sequence[str]:
    return ()


@dataclass(frozen=True, slots=True)
class Invocation:
    """Who asked, where, and how to answer them privately."""

    user: str
    channel: str
    respond: Callable[..., object]
    """Bolt's `respond` (the interaction's response_url)."""


SubcommandHandler = Callable[[commands.SubcommandArgs, Invocation], None]
"""A handler for a generically parsed subcommand (`schedule …`), registered by its owner."""
ClickHandler = Callable[[str, Invocation], None]
"""A handler for another button (value = its opaque ID), e.g. blocks.ACTION_POSTPONE_1H."""
WAKE_FOR = "wake-for"
"""`subcommands` key of the handler for `/scale wake CLUSTER for 3h`: a temporary wake belongs to the
schedules (they say when the cluster sleeps again). It receives
SubcommandArgs(WAKE_FOR, (cluster, *pools), (("seconds", "10800"),), flags). Without one, the
request goes to the operations port like any wake."""


def _wake_for_args(target: Target) -> commands.SubcommandArgs:
    flags = frozenset({"workloads"} if target.workloads else ())
    seconds = (("seconds", str(target.wake_for_seconds)),)
    return commands.SubcommandArgs(WAKE_FOR, (target.cluster, *target.pools), seconds, flags)


_C = TypeVar("_C")
CommandHandler = Callable[[commands.Command, Invocation], None]
"""A `Dispatcher` method that runs one kind of parsed command (`CommandSpec.slack` names it)."""


def _expect(command: commands.Command, kind: type[_C]) -> _C:
    """The parsed command as the type its registry entry promises its handler."""
    if not isinstance(command, kind):
        raise TypeError(f"{kind.__name__} expected, got {command!r}")
    return command


def new_incident() -> str:
    return secrets.token_hex(4)


def error_reply(exc: BaseException) -> Message | None:
    """What the person reads about a failure, by its category: the Slack side's one mapping. A
    usage error is shown as it is, and so is a failure fixed outside scalebot (the API server
    unreachable, RBAC refusing), in the CLI's words; anything else (or an exception outside
    scalebot's root) is None, and the caller logs it under an incident ID and answers one short sentence."""
    if isinstance(exc, ScalebotError) and exc.category is Category.USAGE:
        return usage_reply(exc)
    cause = messages.failure_cause(exc)
    if cause is not None:  # fixed outside scalebot: its cause, as the CLI prints it
        done = tuple(getattr(exc, "__notes__", ()))
        return views.text_message(messages.outside_failure(cause, done=done), emoji="⚠️")
    return None


def usage_reply(exc: ScalebotError) -> Message:
    """A usage error as shown: its sentence, and the right form when the error carries one."""
    if exc.hint:
        return views.usage_error(str(exc), exc.hint)
    return views.text_message(str(exc), emoji="⚠️")


def answer(inv: Invocation, message: Message, *, visible: bool = False) -> None:
    inv.respond(
        text=message.text,
        blocks=message.block_dicts(),
        response_type="in_channel" if visible else "ephemeral",
        replace_original=False,
    )


class Dispatcher:
    def __init__(
        self,
        ops: OperationsPort,
        progress: Progress,
        *,
        groups: GroupResolver = no_groups,
        subcommands: Mapping[str, SubcommandHandler] | None = None,
        clicks: Mapping[str, ClickHandler] | None = None,
        can_post: ChannelCheck | None = None,
        names: Names = no_names,
    ) -> None:
        self.ops = ops
        self.names = names
        self.progress = progress
        self.groups = groups
        self.can_post = can_post
        self.subcommands = dict(subcommands or {})
        self.clicks = dict(clicks or {})

    # -- entry points (executor threads) ----------------------------------------------------------

    def run(self, command: commands.Command, inv: Invocation) -> None:
        self._guarded(inv, None, lambda: self._run(command, inv))

    def reject(self, approval_id: str, reason: str, inv: Invocation) -> None:
        """Reject with the reason given in the Reject dialog (shown on the card and audited)."""

        def work() -> None:
            outcome = self.ops.reject(
                approval_id, by=inv.user, groups=self.groups(inv.user), reason=reason, channel=inv.channel
            )
            self._after_click(outcome, inv)

        self._guarded(inv, None, work)

    def click(self, action_id: str, value: str, inv: Invocation) -> None:
        op_hint = value if action_id == blocks.ACTION_CANCEL else None
        self._guarded(inv, op_hint, lambda: self._click(action_id, value, inv))

    def _guarded(self, inv: Invocation, op_hint: str | None, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:
            reply = error_reply(exc)
            if reply is None:
                incident = new_incident()
                log.exception("command failed (incident %s)", incident, extra={"user": inv.user})
                reply = views.text_message(messages.internal_error(incident, op_hint))
            self._safe_answer(inv, reply)

    @staticmethod
    def _safe_answer(inv: Invocation, message: Message) -> None:
        try:
            answer(inv, message)
        except Exception:
            log.exception("could not answer %s", inv.user)

    # -- commands ---------------------------------------------------------------------------------

    def _run(self, command: commands.Command, inv: Invocation) -> None:
        """The handler `bot.text.command_registry` names for the subcommand (one of the methods below)."""
        spec = command_registry.SLACK[commands.subcommand_of(command)]
        handler: CommandHandler = getattr(self, spec.slack)
        handler(command, inv)

    # Handlers of parsed commands, named by `command_registry` (`CommandSpec.slack`).

    def answer_help(self, command: commands.Command, inv: Invocation) -> None:
        answer(inv, views.help_view(_expect(command, commands.Help).topic))

    def answer_status(self, command: commands.Command, inv: Invocation) -> None:
        self._status(_expect(command, commands.Status).cluster, inv)

    def answer_whoami(self, command: commands.Command, inv: Invocation) -> None:
        asked = _expect(command, commands.Whoami)
        self._whoami(asked.cluster, asked.user or inv.user, inv)

    def take_request(self, command: commands.Command, inv: Invocation) -> None:
        self._request(_expect(command, commands.Request), inv)

    def set_cordon(self, command: commands.Command, inv: Invocation) -> None:
        asked = _expect(command, commands.Cordon)
        outcome = self.ops.cordon(
            asked.cluster,
            asked.nodes,
            by=inv.user,
            unschedulable=asked.unschedulable,
            groups=self.groups(inv.user),
            channel=inv.channel,
        ).outcome
        self._reply_outcome(outcome, inv, visible=outcome.ok and outcome.changed)

    def answer_advice(self, command: commands.Command, inv: Invocation) -> None:
        cluster = _expect(command, commands.Advise).cluster
        found = self.ops.advise(cluster, by=inv.user, groups=self.groups(inv.user))
        answer(inv, views.advice_view(cluster, found.scale_up, found.underused, found.threshold))

    def handle_ops(self, command: commands.Command, inv: Invocation) -> None:
        match command:
            case commands.OpsList(cluster, active_only):
                self._ops_list(cluster, active_only, inv)
            case commands.OpsShow(op_id):
                op = self.ops.get(op_id)
                if op is None:
                    answer(inv, views.text_message(messages.no_operation(op_id), emoji="⚠️"))
                else:
                    self._readable(op.target.cluster, inv, "ops")
                    answer(inv, views.ops_show(op, self.ops.history(op_id), names=self.names))
            case commands.OpsCancel(op_id):
                cancelled = self.ops.cancel(
                    op_id, by=inv.user, groups=self.groups(inv.user), channel=inv.channel
                )
                self._after_click(cancelled, inv, tell=True)
            case _:
                raise TypeError(f"not an ops command: {command!r}")

    def hand_to_owner(self, command: commands.Command, inv: Invocation) -> None:
        """A subcommand whose grammar and answers belong to another part (`schedule …`)."""
        args = _expect(command, commands.SubcommandArgs)
        handler = self.subcommands.get(args.name)
        if handler is None:
            answer(inv, views.text_message(messages.schedules_unavailable()))
        else:
            handler(args, inv)

    def _readable(self, cluster: str, inv: Invocation, what: str) -> None:
        """Reads need at least the viewer role on the cluster (raises UserError with the refusal)."""
        refusal = self.ops.may_view(cluster, by=inv.user, groups=self.groups(inv.user), what=what)
        if refusal:
            raise UserError(refusal)

    def _status(self, cluster: str | None, inv: Invocation) -> None:
        if cluster is not None:
            self._readable(cluster, inv, "status")
            answer(inv, views.status_view(self.ops.status(cluster)))
        else:
            visible = self.ops.visible_clusters(inv.user, self.groups(inv.user))
            answer(inv, views.statuses_view([self.ops.status(c) for c in visible]))

    def _ops_list(self, cluster: str | None, active_only: bool, inv: Invocation) -> None:
        if cluster is not None:
            self._readable(cluster, inv, "ops")
            ops = self.ops.list_operations(cluster=cluster, active_only=active_only)
        else:
            visible = set(self.ops.visible_clusters(inv.user, self.groups(inv.user)))
            ops = [
                op
                for op in self.ops.list_operations(active_only=active_only, limit=100)
                if op.target.cluster in visible
            ][:20]
        answer(inv, views.ops_list(ops, cluster=cluster))

    def _whoami(self, cluster: str | None, user: str, inv: Invocation) -> None:
        """One's own roles on every cluster; someone else's only where the asker may look (a role
        there), so a stranger cannot map the clusters and who holds the keys."""
        clusters = [cluster] if cluster else self.ops.clusters()
        if user != inv.user:
            if cluster:
                self._readable(cluster, inv, "whoami")
            else:
                clusters = self.ops.visible_clusters(inv.user, self.groups(inv.user))
                if not clusters:
                    reply = messages.whoami_others_needs_role()
                    raise UserError(self.ops.refuse(inv.user, "whoami", "", reply).reply)
        groups = self.groups(user)
        answer(inv, views.whoami_view(user, {c: self.ops.role(c, user, groups) for c in clusters}))

    def _request(self, command: commands.Request, inv: Invocation) -> None:
        temporary = command.target.wake_for_seconds is not None and not command.plan_only
        if temporary and WAKE_FOR in self.subcommands:
            self.subcommands[WAKE_FOR](_wake_for_args(command.target), inv)
            return
        req = command.to_operation_request(user=inv.user, channel=inv.channel)
        if command.plan_only:
            answer(inv, views.plan_view(self.ops.preview(req, groups=self.groups(inv.user))))
            return
        access = self.can_post(inv.channel) if self.can_post is not None else Access.YES
        if access is Access.NO:
            # The card could not be posted: accept nothing, hold no lock, say what to do.
            answer(inv, views.text_message(messages.not_in_channel(), emoji="⚠️"))
            return
        # Unknown: nothing runs before its card is in the channel; a refused card cancels it.
        unknown = access is Access.UNKNOWN
        outcome = self.ops.request(req, groups=self.groups(inv.user), start_when_shown=unknown)
        if outcome.ok and outcome.operation is not None:
            # The card (or progress parent) in the channel.
            self.progress.show(outcome.operation, start_when_posted=unknown)
        else:
            self._reply_outcome(outcome, inv)

    # -- clicks -----------------------------------------------------------------------------------

    def _click(self, action_id: str, value: str, inv: Invocation) -> None:
        groups = self.groups(inv.user)
        if action_id == blocks.ACTION_APPROVE:
            self._after_click(self.ops.approve(value, by=inv.user, groups=groups, channel=inv.channel), inv)
        elif action_id == blocks.ACTION_REJECT:
            self._after_click(self.ops.reject(value, by=inv.user, groups=groups, channel=inv.channel), inv)
        elif action_id == blocks.ACTION_CANCEL:
            cancelled = self.ops.cancel(value, by=inv.user, groups=groups, channel=inv.channel)
            self._after_click(cancelled, inv, tell=True)
        elif action_id == blocks.ACTION_ADVISED_SCALE:
            advised = self._advised_scale(value, inv)
            if advised is not None:
                # An ordinary scale request by the clicker: their role, the policy's approval, the card.
                self._request(advised, inv)
        elif action_id in self.clicks:
            self.clicks[action_id](value, inv)
        else:
            answer(inv, views.text_message(messages.unknown_button()))

    def _advised_scale(self, value: str, inv: Invocation) -> commands.Request | None:
        """The advice card's scale button as the typed `scale POOL N cluster=NAME` it stands for:
        the value is re-read through the command parser (size bounds, names, known clusters), so a
        tampered value is refused exactly as the typed command would be (the pool is checked by the
        plan, as for the typed command). None: refused, and the person was told why."""
        advised = views.parse_advised_scale(value)
        if advised is None:
            answer(inv, views.text_message(messages.unknown_button()))
            return None
        cluster, pool, size = advised
        audited = cluster if cluster in self.ops.clusters() else ""
        expected = commands.Request(OpKind.SCALE, Target(cluster, pools=(pool,), size=size))
        try:
            typed = commands.parse(
                f"scale {pool} {size} cluster={cluster}", default_cluster=None, clusters=self.ops.clusters()
            )
        except commands.UsageError as err:
            self.ops.refuse(inv.user, "advised_scale", audited, err.message)
            answer(inv, usage_reply(err))
            return None
        if typed != expected:  # names that split into other words: not what the card offered
            self.ops.refuse(inv.user, "advised_scale", audited, "the button's value is not a scale request")
            answer(inv, views.text_message(messages.unknown_button()))
            return None
        return expected

    def _after_click(self, outcome: Outcome, inv: Invocation, *, tell: bool = False) -> None:
        """Every click gets a visible answer: the card changes, or an ephemeral sentence says why not."""
        if tell or not outcome.ok or not outcome.changed:
            self._reply_outcome(outcome, inv)
        op = outcome.operation
        if op is not None and (outcome.changed or op.state.is_terminal):
            self.progress.show(op)
        if op is not None and op.state is OpState.SUPERSEDED:
            self._show_successor(op)

    def _show_successor(self, old: Operation) -> None:
        """A stale plan was re-planned into a new request: post its card, since the service
        creates it without an event. Matching on what was asked keeps this free of reply parsing."""
        for candidate in self.ops.list_operations(cluster=old.target.cluster, active_only=True):
            same_ask = (candidate.kind, candidate.target, candidate.requested_by) == (
                old.kind,
                old.target,
                old.requested_by,
            )
            if same_ask and candidate.id != old.id and not candidate.message_ts:
                self.progress.show(candidate)

    @staticmethod
    def _reply_outcome(outcome: Outcome, inv: Invocation, *, visible: bool = False) -> None:
        if not outcome.reply:
            return
        emoji = "" if outcome.ok else "⚠️"
        said = messages.outcome_text(outcome)
        text = messages.nodes_changed(inv.user, said) if visible else said
        answer(inv, views.text_message(text, emoji=emoji), visible=visible)

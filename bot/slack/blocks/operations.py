"""Block Kit renderers: operation cards, progress and thread replies as `Message` values (the
ephemeral replies and views are `bot.slack.blocks.views`').

Pure: built only with `slack_sdk.models.blocks` (whose `to_dict()` validation enforces Slack's
per-element limits), no I/O, no clock. Identical input renders identical blocks, block IDs
included, so the sender can skip a `chat.update` that would change nothing; a changed rendering
gets new block IDs (they hash the content), which Slack wants for every revision of a message.

Every renderer builds through `bot.slack.blocks.kit.Builder`, which keeps Slack's limits (3,000
characters per section, 50 blocks, a cumulative budget under the ~12k `msg_blocks_too_long`
limit) and ends long lists in "... (N more)". Button values are opaque IDs only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from slack_sdk.models.blocks import (
    ButtonElement,
    ConfirmObject,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.slack.blocks.kit import MESSAGE_BUDGET, Builder, Message, esc, join_limited
from bot.text import messages, mrkdwn
from bot.text.mrkdwn import Mrkdwn, fmt
from engine.domain import force_scope, progress_figures
from engine.domain.durations import format_duration
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationSummary,
    OpKind,
    OpState,
    PoolSizes,
    drain_rules,
    emptied_not_removed,
)
from engine.operations.policy import Approvers

ACTION_APPROVE = "scalebot.approve"
ACTION_REJECT = "scalebot.reject"
ACTION_CANCEL = "scalebot.cancel"
ACTION_ADVISED_SCALE = "scalebot.advised_scale"
"""The advice's button: requests the scale-up it names (an ordinary `scale` request)."""
# Reserved for announcement cards of schedules (the scheduling work registers their listeners).
ACTION_POSTPONE_1H = "scalebot.postpone_1h"
ACTION_POSTPONE_UNTIL = "scalebot.postpone_until"
ACTION_SKIP = "scalebot.skip"
ACTION_RUN_NOW = "scalebot.run_now"
CALLBACK_REJECT = "scalebot.reject_reason"
REJECT_REASON = "reason"
REJECT_REASON_CHARS = 500

_DESTRUCTIVE = {OpKind.DRAIN, OpKind.ZERO, OpKind.SCALE, OpKind.CONSOLIDATE}


class HistoryRow(Protocol):
    """One line of an operation's history (engine.operations.service.HistoryEntry fits)."""

    @property
    def at(self) -> datetime: ...
    @property
    def actor(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def detail(self) -> str: ...


# -- operations: card, decided card, progress parent ---------------------------------------------


def approval_card(
    op: Operation,
    *,
    note: str | None = None,
    votes: Mrkdwn | None = None,
    approvers: Approvers | None = None,
) -> Message:
    """The request as a channel message with Approve / Reject (values: the opaque approval ID).
    `votes` is the "1 of 2 approvals" line once somebody approved; `approvers` are mentioned,
    so the people who can decide are notified."""
    status = note or messages.default_status(op.state, op.approvals_required)
    return _operation_message(
        op, status=status, decision=votes, buttons=_approval_buttons(op), approvers=approvers
    )


def decided_card(op: Operation, *, decision: Mrkdwn) -> Message:
    """The card after a decision: buttons gone, who decided and when."""
    return _operation_message(op, status=None, decision=decision, buttons=())


def progress_parent(op: Operation, *, status: str | None = None, decision: Mrkdwn | None = None) -> Message:
    """The operation's one parent message: plan summary, decision, live status line.
    A running operation keeps a Cancel button (value: the operation ID)."""
    buttons = (_cancel_button(op),) if op.state is OpState.RUNNING else ()
    return _operation_message(op, status=status, decision=decision, buttons=buttons)


def operation_message(
    op: Operation,
    *,
    status: str | None = None,
    decision: Mrkdwn | None = None,
    approvers: Approvers | None = None,
) -> Message:
    """The right rendering of an operation's message for its current state."""
    if op.state is OpState.AWAITING_APPROVAL:
        return approval_card(op, note=status, votes=decision, approvers=approvers)
    if decision is not None and op.state in (OpState.REJECTED, OpState.EXPIRED, OpState.SUPERSEDED):
        return decided_card(op, decision=decision)
    return progress_parent(op, status=status, decision=decision)


def _operation_message(
    op: Operation,
    *,
    status: str | None,
    decision: Mrkdwn | None,
    buttons: Sequence[ButtonElement],
    approvers: Approvers | None = None,
) -> Message:
    b = Builder()
    title = f"{messages.STATE_EMOJI[op.state]} {messages.KIND_TITLE[op.kind]} · {op.target.cluster}"
    b.header(title)
    summary = op.plan.summary()
    b.section(messages.request_line(op.requested_by, op.kind, esc(op.target.cluster), esc(summary)))
    plan_details(b, op.plan, with_blockers=op.state is OpState.AWAITING_APPROVAL)
    if decision:
        b.section(esc(decision), reserve=600)
    line = status or messages.default_status(op.state, op.approvals_required)
    if op.state is OpState.FAILED:  # what failed and what to do next, not the last progress line
        line = messages.failed_headline(op.kind, op.error, op.id)
    shown = esc(line)
    figures = progress_figures.figures(op) if op.state is OpState.RUNNING else None
    if figures is not None:  # the figures lead the status line; the thread keeps the details
        shown = fmt("{}\n{}", progress_figures.status_line(figures), shown)
    b.section(messages.state_line(op.state, shown), reserve=400)
    waves = messages.wave_rows(op.progress.wake.waves) if op.state.is_terminal else []
    if waves:  # a wake in waves that ended: how each wave went (its phases edited this card)
        b.preformatted(waves, max_chars=3_000, reserve=1_000)
    footer = [f"`{op.id}`"]
    if op.state is OpState.AWAITING_APPROVAL:
        if approvers is not None:
            b.section(messages.approvers_line(approvers.users, approvers.groups), reserve=400)
        footer.insert(0, messages.needs_approvals(op.approvals_required))
        if op.expires_at is not None:
            footer.append(messages.expires(op.expires_at))
    b.context(" · ".join(footer))
    if buttons:
        b.actions(*buttons)
    fallback = f"{messages.KIND_TITLE[op.kind]} on {op.target.cluster}: {summary} · {line}"
    return b.build(f"op-{op.id}", fallback)


def plan_details(b: Builder, plan: OperationPlan, *, with_blockers: bool) -> None:
    if plan.pools:
        rows = [f"{'pool':<24} {'before':>6}   {'after':>5}"]
        rows += [f"{p.pool:<24} {p.before:>6} → {p.after:>5}" for p in plan.pools]
        b.preformatted(rows, max_chars=2_000, reserve=3_000)
    removing = [n for p in plan.pools if not p.empties_only for n in p.nodes_to_remove]
    if plan.kind is OpKind.DRAIN:
        removing = list(plan.nodes)
    if removing:
        label = "Nodes to drain" if plan.kind is OpKind.DRAIN else "Nodes to remove"
        b.section(f"*{label}* ({len(removing)}): " + esc(join_limited(removing, 1_500)), reserve=2_500)
    for change in plan.pools:
        for line in drain_rules(change):
            b.context(esc(f"pool {change.pool}: {line}"), reserve=600)
        if change.empties_only:
            nodes = esc(join_limited(list(change.nodes_to_remove), 800))
            b.section(f"*Nodes to empty, not remove* ({len(change.nodes_to_remove)}): {nodes}", reserve=2_500)
            b.context(esc(emptied_not_removed(change)), reserve=1_000)
    if plan.force_phase:
        b.section(messages.force_phase_warning(), reserve=2_000)
    if plan.forcing:  # which pods it forces, and why a plain drain would refuse each
        b.section(f"*{esc(force_scope.heading(plan.forcing))}:*", reserve=2_000)
        lines = force_scope.describe(plan.force_scope or force_scope.ForceScope())
        b.preformatted(lines, max_chars=3_000, reserve=1_500, spread=6)
    if plan.kind is OpKind.CONSOLIDATE:
        _consolidation_details(b, plan, with_kept=with_blockers)
    elif with_blockers and plan.blockers:
        b.section(messages.blockers_heading(len(plan.blockers)), reserve=2_000)
        b.preformatted(_blocker_lines(plan.blockers), max_chars=4_000, reserve=1_500, spread=6)
    if plan.warnings:
        b.context(*(esc(w) for w in plan.warnings[:5]), reserve=1_000)


def _consolidation_details(b: Builder, plan: OperationPlan, *, with_kept: bool) -> None:
    if plan.moves:
        b.section(messages.moves_heading(len(plan.moves)), reserve=2_000)
        lines = [f"{node}: {pod} → {destination}" for node, pod, destination in plan.moves]
        b.preformatted(lines, max_chars=3_000, reserve=1_500, spread=6)
    if with_kept and plan.blockers:
        b.section(messages.kept_heading(len(plan.blockers)), reserve=1_200)
        lines = [f"{node.removeprefix('node ')}: {why}" for node, why in plan.blockers]
        b.preformatted(lines, max_chars=2_000, reserve=1_000, spread=6)


def _blocker_lines(blockers: Sequence[tuple[str, str]]) -> list[str]:
    """DrainingSucceeded style: one line per reason, pods sorted, reasons in a stable order."""
    by_reason: dict[str, list[str]] = {}
    for pod, why in blockers:
        by_reason.setdefault(why, []).append(pod)
    return [f"* {why}: {', '.join(sorted(pods))}" for why, pods in sorted(by_reason.items())]


def _approval_buttons(op: Operation) -> tuple[ButtonElement, ...]:
    confirm = None
    if op.kind in _DESTRUCTIVE:
        confirm = ConfirmObject(
            title=PlainTextObject(text=messages.confirm_title(op.kind)[:100]),
            text=PlainTextObject(
                text=messages.confirm_text(op.kind, op.target.cluster, op.plan.summary())[:300]
            ),
            confirm=PlainTextObject(text="Approve"),
            deny=PlainTextObject(text="Back"),
        )
    approve = ButtonElement(
        text=PlainTextObject(text="Approve"),
        action_id=ACTION_APPROVE,
        value=op.approval_id,
        style="primary",
        confirm=confirm,
    )
    reject = ButtonElement(text=PlainTextObject(text="Reject"), action_id=ACTION_REJECT, value=op.approval_id)
    return approve, reject


def _cancel_button(op: Operation) -> ButtonElement:
    return ButtonElement(
        text=PlainTextObject(text="Cancel"),
        action_id=ACTION_CANCEL,
        value=op.id,
        style="danger",
        confirm=ConfirmObject(
            title=PlainTextObject(text="Cancel this operation?"),
            text=PlainTextObject(text=messages.confirm_cancel(op.id)[:300]),
            confirm=PlainTextObject(text="Cancel it"),
            deny=PlainTextObject(text="Keep running"),
        ),
    )


def decision_from_history(op: Operation, history: Sequence[HistoryRow]) -> Mrkdwn | None:
    """The decision line of a card, rebuilt from the audit trail (so it survives restarts)."""
    by_action: dict[str, list[HistoryRow]] = {}
    for entry in history:
        by_action.setdefault(entry.action, []).append(entry)
    # The engine audits the person's click ("reject", "cancel") and the state it led to
    # ("rejected", "cancelled"); either names who decided.
    for actions, verb, emoji in (
        (("reject", "rejected"), "Rejected", "🚫"),
        (("cancel", "cancelled"), "Cancelled", "🛑"),
    ):
        decided = [e for a in actions for e in by_action.get(a, []) if e.actor != "scalebot"]
        if decided:
            last = max(decided, key=lambda e: e.at)
            reason = next((e.detail for e in decided if e.detail), "") if verb == "Rejected" else ""
            # The reason is the rejecter's own text: escaped here, once.
            said = fmt(": {}", reason) if reason else ""
            return fmt("{} {}{}", emoji, messages.decision(verb, [last.actor], last.at), said)
    approvals = by_action.get("approve", [])
    if not approvals:
        return None
    # A stored vote whose author is no longer an approver stopped counting (engine: vote_not_counted).
    dropped = {e.actor for e in by_action.get("vote_not_counted", [])}
    voters = [v for v in dict.fromkeys(e.actor for e in approvals) if v not in dropped]
    if not voters:
        return None
    if op.state is OpState.AWAITING_APPROVAL:
        people = mrkdwn.join(", ", (messages.who(v) for v in voters))
        return fmt("☑️ {} of {} approvals: {}", len(voters), op.approvals_required, people)
    return fmt("✅ {}", messages.decision("Approved", voters, approvals[-1].at))


def reject_modal(*, approval_id: str, channel: str) -> View:
    """Reject asks why (optional): the reason goes on the card and into the audit."""
    return View(
        type="modal",
        callback_id=CALLBACK_REJECT,
        title=PlainTextObject(text="Reject request"),
        submit=PlainTextObject(text="Reject"),
        close=PlainTextObject(text="Back"),
        private_metadata=json.dumps({"approval_id": approval_id, "channel": channel}),
        blocks=[
            SectionBlock(text=MarkdownTextObject(text=messages.reject_intro())),
            InputBlock(
                block_id=REJECT_REASON,
                label=PlainTextObject(text=messages.reject_reason_label()),
                optional=True,
                element=PlainTextInputElement(
                    action_id=REJECT_REASON, multiline=True, max_length=REJECT_REASON_CHARS
                ),
            ),
        ],
    )


# -- thread replies ------------------------------------------------------------------------------


def blockers_reply(op: Operation, condition: str, *, summary: str = "") -> Message:
    """The DrainingSucceeded condition message, preformatted and cut to Slack's limits."""
    b = Builder()
    b.section(messages.progress_blockers_heading(esc(summary)))
    b.preformatted(condition.splitlines(), max_chars=MESSAGE_BUDGET - 600, spread=8)
    return b.build(f"blockers-{op.id}", f"{op.id}: {summary or 'drain not completed yet'}")


def final_reply(op: Operation, text: str = "") -> Message:
    """Duration, pods evicted and force-deleted, nodes removed, pools before → after."""
    summary = op.summary
    b = Builder()
    b.section(" · ".join([messages.final_heading(op.state), *_summary_fields(op, summary)]))
    if not op.requested_by.startswith(("cli:", "schedule:")):
        b.section(messages.finished_for(op.requested_by, op.state))
    pools = (summary.pools if summary is not None else None) or {
        p.pool: PoolSizes(p.before, p.after) for p in op.plan.pools
    }
    if pools:
        rows = [f"{'pool':<24} {'before':>6}   {'after':>5}"]
        rows += [f"{name:<24} {v.before:>6} → {v.after:>5}" for name, v in sorted(pools.items())]
        b.preformatted(rows, max_chars=4_000, reserve=1_000)
    waves = messages.wave_rows(op.progress.wake.waves)
    if waves:  # a wake in waves: how each wave went, and what a timed-out one waited for
        b.preformatted(waves, max_chars=3_000, reserve=1_000)
    if op.error:
        b.section(f"*Error:* {esc(op.error)}", reserve=500)
    if text:  # the engine's own summary ("12/12 nodes Ready", which nodes are not and why)
        b.context(esc(text))
    return b.build(f"final-{op.id}", f"{op.id} {op.state.value}: {text}")


def _summary_fields(op: Operation, summary: OperationSummary | None) -> list[str]:
    """The figures of an operation that ended; only its duration when it ended without a summary
    (rejected, cancelled, failed before its last step)."""
    if summary is None:
        seconds = (op.updated_at - op.created_at).total_seconds()
        return [f"*Duration* {format_duration(timedelta(seconds=seconds))}"]
    fields = [
        f"*Duration* {format_duration(timedelta(seconds=summary.duration_seconds))}",
        f"*Pods evicted* {summary.pods_evicted}",
        f"*Force-deleted* {summary.pods_force_deleted}",
        f"*Nodes removed* {summary.nodes_removed}",
    ]
    if summary.nodes_emptied:  # only pools that cannot remove nodes say it
        fields.append(f"*Emptied, not removed* {summary.nodes_emptied}")
    if summary.nodes_ready is not None:
        ready, wanted = summary.nodes_ready
        fields.append(f"*Nodes Ready* {ready}/{wanted}")
    return fields


# -- the fleet digest ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DigestEntry:
    """One cluster's scheduled operation in a fleet digest."""

    cluster: str
    outcome: DigestOutcome
    ended: bool
    """Its operation reached a final state (the digest is final once every entry has)."""
    link: str | None = None
    """The permalink of its card (in its announcement's thread), once Slack gave one."""


DigestOutcome = Literal["running", "done", "attention", "failed"]
_DIGEST_ORDER: dict[str, int] = {"failed": 0, "attention": 1, "running": 2, "done": 3}
_DIGEST_EMOJI: dict[str, str] = {"failed": "❌", "attention": "⚠️", "running": "🔄", "done": "✅"}


def fleet_digest(fired_at: datetime, entries: Sequence[DigestEntry]) -> Message:
    """The schedules that fired in the minute `fired_at`: a count per outcome, then one line per
    cluster (failures and those needing attention first), each linking to its card's thread.
    Cluster names come from the configuration: escaped, as any text a person wrote."""
    ordered = sorted(entries, key=lambda e: (_DIGEST_ORDER[e.outcome], e.cluster))
    counts = {o: sum(1 for e in entries if e.outcome == o) for o in _DIGEST_ORDER}
    b = Builder()
    heading = messages.digest_heading(len(entries))
    b.section(fmt("*{}* {}", heading, messages.slack_time(fired_at, "{time}")))
    b.section(messages.digest_counts(counts))
    lines = [_digest_line(e) for e in ordered]
    for start in range(0, len(lines), 40):  # a section holds 3,000 characters: forty lines at most
        b.section("\n".join(lines[start : start + 40]), reserve=200)
    fallback = f"{heading} {fired_at:%H:%M} UTC: {messages.digest_counts(counts)}"
    return b.build("digest", fallback)


def _digest_line(entry: DigestEntry) -> Mrkdwn:
    name = esc(entry.cluster)
    shown = fmt("<{}|{}>", entry.link, name) if entry.link else name
    return fmt("{} {} · {}", _DIGEST_EMOJI[entry.outcome], shown, messages.DIGEST_OUTCOME[entry.outcome])

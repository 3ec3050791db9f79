"""Block Kit renderers: operations, progress, views and errors as `Message` values.

Pure: built only with `slack_sdk.models.blocks` (whose `to_dict()` validation enforces Slack's
per-element limits), no I/O, no clock. Identical input renders identical blocks, block IDs
included, so the sender can skip a `chat.update` that would change nothing; a changed rendering
gets new block IDs (they hash the content), which Slack wants for every revision of a message.

Every renderer builds through `bot.slack.blocks.kit.Builder`, which keeps Slack's limits (3,000
characters per section, 50 blocks, a cumulative budget under the ~12k `msg_blocks_too_long`
limit) and ends long lists in "... (N more)". Button values are opaque IDs only.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

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
from bot.slack.directory import Names, no_names
from bot.text import messages, mrkdwn
from bot.text.mrkdwn import Mrkdwn, fmt
from engine.domain import force_scope, progress_figures
from engine.domain.announcement import NextEvent
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
from engine.operations.policy import Approvers, Role
from engine.planning.advice import ScaleUpAdvice
from engine.planning.consolidation import Underused
from engine.pools.base import Pool

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


class ClusterView(Protocol):
    """A cluster's status (engine.operations.service.ClusterStatus fits)."""

    @property
    def cluster(self) -> str: ...
    @property
    def pools(self) -> Sequence[Pool]: ...
    @property
    def running(self) -> Sequence[Operation]: ...
    @property
    def next_event(self) -> NextEvent | None: ...


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
    _plan_details(b, op.plan, with_blockers=op.state is OpState.AWAITING_APPROVAL)
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


def _plan_details(b: Builder, plan: OperationPlan, *, with_blockers: bool) -> None:
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


def phase_reply(op: Operation, text: str) -> Message:
    b = Builder()
    b.section(f"🔹 {esc(text)}")
    return b.build(f"phase-{op.id}", text)


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


# -- views (ephemeral replies) -------------------------------------------------------------------


def plan_view(plan: OperationPlan) -> Message:
    b = Builder()
    b.header(f"Plan: {messages.KIND_TITLE[plan.kind]} · {plan.cluster}")
    b.section(f"{esc(plan.summary())} _(nothing was changed)_")
    _plan_details(b, plan, with_blockers=True)
    return b.build(f"plan-{plan.cluster}", f"Plan for {plan.cluster}: {plan.summary()}")


def advised_scale_value(cluster: str, pool: str, size: int) -> str | None:
    """The advice button's value: cluster, pool and size, url-safe (button values allow no separators).
    None when the names are too long for a value; the advice then says which command to type."""
    raw = json.dumps([cluster, pool, size], separators=(",", ":")).encode()
    value = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return value if len(value) <= 200 else None


def parse_advised_scale(value: str) -> tuple[str, str, int] | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError):
        return None
    if (
        not isinstance(data, list)
        or len(data) != 3
        or not all(isinstance(x, str) for x in data[:2])
        or not isinstance(data[2], int)
    ):
        return None
    return data[0], data[1], data[2]


def advice_view(
    cluster: str, scale_up: ScaleUpAdvice, underused: Sequence[Underused], threshold: float = 0.5
) -> Message:
    """`/scale advise`: the pool that wastes least for the pending pods, one click to request it."""
    b = Builder()
    b.header(f"Advice · {cluster}")
    best = scale_up.best
    if best is None and not scale_up.unhelped:
        b.section(messages.no_pending_pods())
    if best is not None:
        target = best.size + best.nodes
        b.section(messages.advice_headline(best.pool, best.nodes, len(best.pods), best.size, target))
        b.preformatted(
            [
                f"{o.describe()} (+{o.nodes} node(s), {len(o.pods)} pod(s))"
                + (" (pool maximum reached)" if o.limited_by_max else "")
                for o in scale_up.options
            ],
            max_chars=3_000,
            reserve=2_500,
        )
        value = advised_scale_value(cluster, best.pool, target)
        if value is None:
            b.context(esc(f"Request it with `/scale scale {best.pool} {target} cluster={cluster}`"))
        else:
            b.actions(
                ButtonElement(
                    text=PlainTextObject(text=f"Request: {best.pool} → {target} nodes"[:75]),
                    action_id=ACTION_ADVISED_SCALE,
                    value=value,
                    style="primary",
                )
            )
    if scale_up.unhelped:
        b.section(messages.unhelped_heading(len(scale_up.unhelped)), reserve=1_500)
        b.preformatted(
            [f"{pod}: {why}" for pod, why in sorted(scale_up.unhelped.items())],
            max_chars=2_000,
            reserve=1_200,
        )
    b.section(messages.underused_heading(len(underused), threshold), reserve=1_000)
    if underused:
        b.preformatted(
            [
                f"{u.node} ({u.pool or 'no pool'}): cpu {u.cpu:.0%}, memory {u.memory:.0%}; "
                + ("its pods could move" if not u.movable else f"stays: {u.movable}")
                for u in underused
            ],
            max_chars=2_500,
            reserve=600,
        )
    if scale_up.notes:
        b.context(*(esc(n) for n in scale_up.notes[:5]))
    b.context(messages.advice_only())
    return b.build(f"advice-{cluster}", f"Advice for {cluster}")


def status_view(status: ClusterView) -> Message:
    b = Builder()
    b.header(f"Cluster {status.cluster}")
    if status.pools:
        rows = [f"{'pool':<20} {'provider':<9} {'nodes':>7} {'desired':>7}  note"]
        for pool in sorted(status.pools, key=lambda p: p.name):
            nodes = f"{len(pool.ready_nodes)}/{pool.size}"
            notes = [pool.removal.zero_text() + (f" ({pool.removal_reason})" if pool.removal_reason else "")]
            if pool.emptied:
                notes.append(f"{len(pool.emptied)} emptied, not removed")
            if pool.progress:
                notes.append(pool.progress)
            if pool.restore and pool.desired == 0:
                notes.append(f"asleep, wakes to {pool.restore.desired}")
            note = "; ".join(notes)
            rows.append(f"{pool.name:<20} {pool.provider:<9} {nodes:>7} {pool.desired:>7}  {note}".rstrip())
        b.preformatted(rows, max_chars=5_000, reserve=2_000)
    else:
        b.section("_No node pools found._")
    if status.running:
        b.section(
            "*Running operations*\n" + "\n".join(_op_line(op) for op in status.running[:10]), reserve=600
        )
    b.context(messages.next_event(status.next_event) if status.next_event else "No scheduled events.")
    return b.build(f"status-{status.cluster}", f"Status of {status.cluster}")


@dataclass(frozen=True, slots=True)
class HomeChart:
    """A cluster's savings chart on the Home tab: an uploaded image (`file_id`), or why there is
    none (`note`, shown as text beside the figures)."""

    file_id: str = ""
    title: str = ""
    alt_text: str = ""
    note: str = ""


def home_view(
    user: str,
    clusters: Sequence[tuple[ClusterView, Role]],
    links: Mapping[str, str],
    savings: Mapping[str, str] | None = None,
    charts: Mapping[str, HomeChart] | None = None,
) -> Message:
    """The App Home tab of `user`: per cluster they have a role on, their role, pools and sizes,
    running and pending operations (linked to their threads: `links` maps operation ID -> URL),
    the next scheduled event, what its sleeps saved lately (`savings`: cluster -> line) and the
    savings chart (`charts`: cluster -> the uploaded image, or why it is not shown)."""
    b = Builder()
    b.header("scalebot")
    if not clusters:
        b.section(messages.home_no_role(user))
        return b.build(f"home-{user}", "scalebot")
    for status, role in clusters[:10]:
        b.section(f"*{esc(status.cluster)}* · you are {role.label}", reserve=800)
        pools = [
            f"{p.name:<20} {len(p.ready_nodes):>4}/{p.size:<4} desired {p.desired}"
            for p in sorted(status.pools, key=lambda p: p.name)
        ]
        if pools:
            b.preformatted(pools, max_chars=1_500, reserve=800)
        active = [_op_line(op) + _thread_link(op.id, links) for op in status.running[:8]]
        b.section("\n".join(active) if active else "_No running or pending operations._", reserve=600)
        b.context(messages.next_event(status.next_event) if status.next_event else "No scheduled events.")
        if savings and savings.get(status.cluster):
            b.context(esc(savings[status.cluster]))
        chart = (charts or {}).get(status.cluster)
        if chart is not None and chart.file_id:
            b.image(chart.file_id, title=chart.title, alt_text=chart.alt_text)
        elif chart is not None and chart.note:
            b.context(esc(chart.note))
    return b.build(f"home-{user}", "scalebot")


def _thread_link(op_id: str, links: Mapping[str, str]) -> str:
    url = links.get(op_id)
    return f" · {mrkdwn.link(url, 'thread')}" if url else ""


def statuses_view(statuses: Sequence[ClusterView]) -> Message:
    """Status of several clusters in one reply (a channel without a default cluster)."""
    b = Builder()
    for status in statuses[:10]:
        pools = ", ".join(
            f"{p.name} {len(p.ready_nodes)}/{p.size}" for p in sorted(status.pools, key=lambda p: p.name)
        )
        running = f" · {len(status.running)} running" if status.running else ""
        b.section(f"*{esc(status.cluster)}*: {esc(pools) or 'no pools'}{running}")
    return b.build("statuses", "Cluster status")


def _op_line(op: Operation) -> str:
    when = messages.slack_time(op.created_at, "{date_short} {time}")
    title = f"{messages.STATE_EMOJI[op.state]} {messages.KIND_TITLE[op.kind]} {esc(op.target.cluster)}"
    return f"`{op.id}` {title}: {esc(op.plan.summary())} · {messages.who(op.requested_by)} · {when}"


def ops_list(ops: Sequence[Operation], *, cluster: str | None = None) -> Message:
    b = Builder()
    if not ops:
        b.section(esc(messages.no_operations(cluster)))
        return b.build("ops", messages.no_operations(cluster))
    b.section(f"*Recent operations{f' on {esc(cluster)}' if cluster else ''}*")
    for op in ops[:40]:
        b.section(_op_line(op), reserve=100)
    return b.build("ops", f"{len(ops)} operations")


def ops_show(op: Operation, history: Sequence[HistoryRow], *, names: Names = no_names) -> Message:
    """An operation and its history; the history is preformatted, where a mention cannot show, so
    people in it are shown by name (`names`, from Slack) and the name is text from outside."""
    b = Builder()
    b.header(
        f"{messages.STATE_EMOJI[op.state]} {op.id} · {messages.KIND_TITLE[op.kind]} · {op.target.cluster}"
    )
    b.section(_op_line(op))
    b.section(
        f"*State:* {op.state.value.replace('_', ' ')}" + (f" · *step:* {esc(op.step)}" if op.step else "")
    )
    if op.error:
        b.section(f"*Error:* {esc(op.error)}")
    lines = [
        f"{e.at.strftime('%Y-%m-%d %H:%M:%S')}Z {names(e.actor)}: {e.action}"
        + (f" ({e.detail})" if e.detail else "")
        for e in history
    ]
    if lines:
        b.section("*History*")
        b.preformatted(lines, max_chars=6_000)
    return b.build(f"show-{op.id}", f"Operation {op.id}: {op.state.value}")


def whoami_view(user: str, roles: Mapping[str, Role | None]) -> Message:
    b = Builder()
    lines = [f"• *{esc(c)}*: {role.label if role else 'no role'}" for c, role in sorted(roles.items())]
    b.section(f"Roles of {messages.who(user)}:\n" + ("\n".join(lines) or "no clusters configured"))
    return b.build("whoami", fmt("Roles of {}", messages.who(user)))


def help_view(topic: str | None = None) -> Message:
    b = Builder()
    if topic:
        b.section(f"`{messages.usage(topic)}`\n{messages.SUMMARY.get(topic, '')}")
        return b.build(f"help-{topic}", messages.usage(topic))
    b.section("*scalebot* drains nodes and scales node pools, with approvals.")
    b.section("\n".join(f"`{messages.usage(s)}`\n      {messages.SUMMARY[s]}" for s in messages.USAGE))
    return b.build("help", "scalebot help")


def usage_error(message: str, hint: str) -> Message:
    b = Builder()
    b.section(f"⚠️ {esc(message)}")
    b.context(f"Usage: `{esc(hint)}` · `{messages.COMMAND} help` lists everything")
    return b.build("usage", fmt("{} Usage: {}", message, hint))


def text_message(text: str, *, emoji: str = "") -> Message:
    """A short reply: an engine sentence (refusal, confirmation) or one of ours."""
    b = Builder()
    shown = esc(text)
    b.section(f"{emoji + ' ' if emoji else ''}{shown}")
    return b.build("reply", shown)

"""Block Kit renderers of the ephemeral replies and views: a plan, advice, status, the App Home,
the operations list and one operation's history, whoami, help, usage errors and plain text.

Pure, like `bot.slack.blocks.operations` (whose card helpers a plan view reuses): built only with
`slack_sdk.models.blocks`, no I/O, no clock, through `bot.slack.blocks.kit.Builder`, so Slack's
limits hold and an unchanged rendering is byte-identical.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slack_sdk.models.blocks import (
    ButtonElement,
    PlainTextObject,
)

from bot.slack.blocks.kit import Builder, Message, esc
from bot.slack.blocks.operations import ACTION_ADVISED_SCALE, HistoryRow, plan_details
from bot.slack.directory import Names, no_names
from bot.text import command_registry, messages, mrkdwn
from bot.text.mrkdwn import fmt
from engine.domain.announcement import NextEvent
from engine.domain.operation import (
    Operation,
    OperationPlan,
)
from engine.operations.policy import Role
from engine.planning.advice import ScaleUpAdvice
from engine.planning.consolidation import Underused
from engine.pools.base import Pool


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


def plan_view(plan: OperationPlan) -> Message:
    b = Builder()
    b.header(f"Plan: {messages.KIND_TITLE[plan.kind]} · {plan.cluster}")
    b.section(f"{esc(plan.summary())} _(nothing was changed)_")
    plan_details(b, plan, with_blockers=True)
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
        spec = command_registry.SLACK.get(topic)
        examples = spec.examples_for(messages.COMMAND) if spec is not None else ()
        shown = "".join(f"\n`{line}`" for line in examples)
        b.section(
            f"`{messages.usage(topic)}`\n{messages.SUMMARY.get(topic, '')}"
            + (f"\nExamples:{shown}" if shown else "")
        )
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

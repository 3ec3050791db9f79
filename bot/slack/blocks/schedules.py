"""Block Kit and copy for schedules: announcement cards and `/scale schedule …` replies
(the two modals are `bot.slack.blocks.schedule_modals`').

Pure: built only with `slack_sdk.models.blocks` (and its `View`), no I/O, no clock: times come in
as arguments. Messages go through `bot.slack.blocks.kit.Builder`, so Slack's limits hold, long lists end in
"... (N more)", and an unchanged rendering is byte-identical (the sender then skips the update).

Announcement buttons carry the occurrence key ("nights:2026-03-02:sleep") and nothing else. The
click listener only accepts values made of [A-Za-z0-9_-], so the key travels base64url-encoded
(`button_value` / `key_of`); every check is redone against SQLite at click time.

Sentences the engine wrote (announcement texts, refusals) are shown as they are; the sentences
below are the bot's own, in the style of `bot.text.messages`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from slack_sdk.models.blocks import (
    ButtonElement,
    ConfirmObject,
    PlainTextObject,
)

from bot.slack.blocks.kit import Builder, Message, esc
from bot.slack.blocks.operations import ACTION_POSTPONE_1H, ACTION_POSTPONE_UNTIL, ACTION_RUN_NOW, ACTION_SKIP
from bot.slack.blocks.views import text_message
from bot.text import messages, mrkdwn, schedule_copy
from bot.text.mrkdwn import Mrkdwn, fmt
from engine.domain.announcement import Announcement, ForceNotice
from engine.schedules.core import spec as schedule
from engine.schedules.core.model import Schedule, ScheduleOutcome
from engine.schedules.core.spec import Occurrence

if TYPE_CHECKING:
    from bot.ports import ProviderSchedules

MESSAGE_PREFIX = "sched:"
"""Sender key of an occurrence's announcement: `sched:<occurrence key>` (one message, edited)."""
BACK_PREFIX = "sched-back:"
"""Sender key of a wake's "dev-eu is back" report."""

ACTION_FORCE_APPROVE = "scalebot.schedule.force_approve"
"""Approve with force: the value carries the occurrence key and the digest of the scope shown."""
ACTION_EXCLUDE_POOL = "scalebot.schedule.exclude_pool"
"""Leave one pool out of this run: the value carries the occurrence key and the pool."""
EXCLUDE_BUTTONS = 5
"""At most this many "Leave out POOL" buttons (an actions block's IDs are unique: one ID each)."""
CALLBACK_POSTPONE = "scalebot.schedule.postpone_until"
CALLBACK_ADD = "scalebot.schedule.add"
_VALUE_PREFIX = "o"
_CHOICE_PREFIX = "c"
_CHOICE_SEPARATOR = "\x1f"
_MAX_EVENTS = 20

_EXAMPLE = (
    "e.g. `/scale schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin "
    "lead=60m,10m approval=per-run`"
)


# -- button values ---------------------------------------------------------------------------------


def button_value(key: str) -> str:
    """An occurrence key in the characters a button value may hold here ([A-Za-z0-9_-])."""
    return _VALUE_PREFIX + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def key_of(value: str) -> str | None:
    """The occurrence key of a button value, or None for a value scalebot did not make."""
    key = _decoded(value, _VALUE_PREFIX)
    return key if key is not None and key.count(":") == 2 and key.isprintable() else None


def _decoded(value: str, prefix: str) -> str | None:
    """The text a button value made here carries (after `prefix`, base64url), or None."""
    if not value.startswith(prefix):
        return None
    raw = value[len(prefix) :]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def exclude_action(index: int) -> str:
    return f"{ACTION_EXCLUDE_POOL}.{index}"


def choice_value(key: str, detail: str) -> str:
    """A force choice's value: the occurrence key and one detail (the scope digest, or a pool)."""
    raw = f"{key}{_CHOICE_SEPARATOR}{detail}".encode()
    return _CHOICE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def choice_of(value: str) -> tuple[str, str] | None:
    """(occurrence key, detail) of a force choice's value, or None for a value scalebot did not
    make; the service then checks both against SQLite (the pool offered, the scope shown)."""
    text = _decoded(value, _CHOICE_PREFIX)
    if text is None:
        return None
    key, separator, detail = text.partition(_CHOICE_SEPARATOR)
    if not separator or key.count(":") != 2 or not key.isprintable():
        return None
    if not detail or len(detail) > 63 or not all(c.isalnum() or c in "-_." for c in detail):
        return None
    return key, detail


# -- copy ------------------------------------------------------------------------------------------


def no_schedules(cluster: str | None) -> str:
    return f"No schedules{f' on {cluster}' if cluster else ''} yet; {_EXAMPLE}."


def nothing_next(cluster: str | None) -> str:
    return f"Nothing is scheduled{f' on {cluster}' if cluster else ''}."


def unknown_announcement() -> str:
    return "That button does not name a scheduled event scalebot knows; nothing changed."


def modal_unavailable() -> str:
    return (
        "I could not open the dialog (Slack allows 3 seconds after a click). Try again, or use "
        "*Postpone 1h*; nothing changed."
    )


def add_modal_unavailable() -> str:
    typed = schedule_copy.usage("add")
    return f"I could not open the dialog; nothing changed. Type the schedule instead: `{typed}`."


def wake_for_whole_cluster(cluster: str) -> str:
    return (
        f"A temporary wake wakes a whole cluster and puts it back to sleep: `{messages.COMMAND} wake "
        f"{cluster} for 3h` (pools and --workloads do not combine with `for`). Nothing changed."
    )


def schedule_not_added(reply: str) -> Mrkdwn:
    return fmt(
        "The schedule was not saved: {}. Nothing changed; `{}` opens the form again.",
        Mrkdwn(reply.rstrip(".")) if isinstance(reply, Mrkdwn) else reply.rstrip("."),
        f"{messages.COMMAND} schedule add",
    )


def schedule_added(actor: str, outcome: ScheduleOutcome) -> Mrkdwn:
    """Told in the channel: the saved schedule and its next event, each time in the reader's zone."""
    sched = outcome.schedule
    if sched is None:
        return fmt("{} added a schedule. {}", messages.who(actor), outcome.reply)
    if outcome.next_event is None:
        following = Mrkdwn("Nothing is scheduled in the next ten years.")
    else:
        occ, at = outcome.next_event
        following = fmt("Next: {} {}.", occ.action, messages.event_time(at, sched.spec.tz))
    return fmt("{} added a schedule. Schedule saved: {}. {}", messages.who(actor), summary(sched), following)


def changed(actor: str, outcome: ScheduleOutcome) -> Mrkdwn:
    """A change told in the channel; a pre-approval names the pre-approvers as mentions, a
    temporary wake its return to sleep as a time every reader sees in their own zone."""
    op = outcome.operation
    if outcome.ok and op is not None and op.target.wake_for_seconds and outcome.effective is not None:
        woke = messages.woken_for(op.id, op.target.cluster, op.plan.summary(), outcome.effective)
        return messages.nodes_changed(actor, woke)
    sched = outcome.schedule
    if sched is not None and outcome.ok and sched.approval_mode == "pre_approved":
        text = fmt(
            "Pre-approved schedule {}: {}.",
            sched.name,
            messages.schedule_approval(sched.name, sched.approval),
        )
        return messages.nodes_changed(actor, text)
    return messages.nodes_changed(actor, messages.outcome_text(outcome))


def summary(sched: Schedule) -> Mrkdwn:
    """One line for `/scale schedule list|show`: its channel and pre-approvers as Slack links."""
    spec = sched.spec
    wake = f" → wake {spec.wake}" if spec.wake else " (no wake)"
    leads = ", ".join(messages.lead_text(lead) for lead in spec.lead_times) or "none"
    holidays = ", ".join(d.isoformat() for d in sorted(spec.exceptions))
    force_scope = (
        fmt(
            "; standing force scope: {} (approved by {})",
            ", ".join(sched.force_units),
            mrkdwn.join(", ", [messages.who(u) for u in sched.force_by]),
        )
        if sched.force_units
        else ""
    )
    return fmt(
        "{}: {}, {}; sleep {}{} ({}); announced {} before in {}; {}{}{}{}",
        sched.name,
        sched.cluster,
        sched.target.describe(),
        spec.sleep,
        wake,
        spec.tz,
        leads,
        mrkdwn.channel(sched.channel),
        messages.schedule_approval(sched.name, sched.approval),
        f"; not on {holidays}" if holidays else "",
        force_scope,
        f"; {spec.days_off_rule.describe()}" if spec.days_off_rule else "",
        "" if sched.enabled else "; paused",
    )


def started(reply: str) -> Mrkdwn:
    return fmt("🔄 {}", reply)


def failed_to_start(reply: str) -> Mrkdwn:
    return fmt("❌ {}", reply)


def done_without_change(reply: str) -> Mrkdwn:
    return fmt("✅ {}", reply)


# -- announcements ---------------------------------------------------------------------------------


def announcement(note: Announcement, *, status: str = "", buttons: bool | None = None) -> Message:
    """An occurrence's channel message: the engine's text (first line in bold), an optional status
    line (what happened to it), and Postpone 1h / Postpone until… / Skip this time / Run now."""
    show_buttons = note.buttons if buttons is None else buttons
    lines = announcement_lines(note)
    b = Builder()
    head = f"{_emoji(note)} *{esc(lines[0])}*"
    b.section("\n".join([head, *(esc(line) for line in lines[1:])]), reserve=800)
    notice = note.upcoming.force if note.upcoming is not None else None
    if notice is not None:
        b.section(force_lines(notice), reserve=800)
    if status:
        b.section(esc(status), reserve=600)
    footer = f"Schedule `{esc(note.schedule)}` · cluster {esc(note.cluster)}"
    if show_buttons:
        footer += " · Postpone and Skip change only this occurrence, never the schedule"
    b.context(footer)
    if show_buttons:
        b.actions(*_force_buttons(note, notice), *_buttons(note))
    needs = " · needs force: approve it, leave out a pool, or skip" if notice and notice.unresolved else ""
    fallback = fmt("{}{}{}", lines[0], needs, fmt(" · {}", status) if status else "")
    return b.build(f"sched-{note.key}", fallback)


def announcement_lines(note: Announcement) -> list[str]:
    """An upcoming sleep from its data (times in each reader's zone), a decision's line after it;
    the engine's plain account for the other kinds."""
    if note.upcoming is not None:
        lines: list[str] = [*messages.upcoming_lines(note.cluster, note.schedule, note.upcoming)]
        if note.decision is not None:
            lines.append(messages.decided_line(note.decision))
        return lines
    if note.decision is not None:
        return [messages.decided_line(note.decision)]
    return note.text.splitlines() or [note.text]


def reminder(note: Announcement) -> Message | None:
    """The thread reply of a later lead, from the occurrence's data; None when it has none."""
    if note.upcoming is None:
        return None
    return text_message(messages.reminder(note.cluster, note.upcoming, note.lead), emoji="⏰")


def occurrence_status(key: str, text: str) -> Message:
    """What happened to an occurrence that was never announced (e.g. a sleep that could not start)."""
    b = Builder()
    b.section(esc(text))
    b.context(f"Schedule `{esc(key.rsplit(':', 2)[0])}`")
    return b.build(f"sched-{key}", text)


def force_lines(notice: ForceNotice, *, limit: int = 15) -> Mrkdwn:
    """A sleep that needs force, said before it runs: each Pod with its owner, pool and why a plain
    drain refuses it (all data from the cluster, escaped), what was decided, and the choices."""
    lines: list[Mrkdwn] = []
    if notice.unresolved:
        lines.append(
            Mrkdwn(
                "⚠️ *This run needs force.* Without it, it fails at once: these Pods are removed only "
                "by force."
            )
        )
    else:
        lines.append(Mrkdwn("*This run needs force* for these Pods:"))
    for pod in notice.pods[:limit]:
        left_out = " (pool left out of this run)" if pod.pool in notice.excluded else ""
        pool = pod.pool or "?"
        lines.append(fmt("• `{}` (owner {}, pool {}){}: {}", pod.pod, pod.owner, pool, left_out, pod.reason))
    if len(notice.pods) > limit:
        lines.append(fmt("… ({} more)", len(notice.pods) - limit))
    if notice.approved_by:
        who = mrkdwn.join(", ", [messages.who(u) for u in notice.approved_by])
        lines.append(fmt("✅ Force approved for this run by {}, for exactly these owners.", who))
    elif notice.standing_by:
        who = mrkdwn.join(", ", [messages.who(u) for u in notice.standing_by])
        lines.append(fmt("✅ The schedule's standing force scope covers them (approved by {}).", who))
    for pool in notice.excluded:
        lines.append(fmt("⏭️ Pool {} is left out of this run.", pool))
    if notice.unresolved:
        choices = [Mrkdwn("*Approve with force* (an approver; force is approved, never implied)")]
        if notice.excludable:
            choices.append(fmt("*Leave out* pool {}", ", ".join(notice.excludable)))
        choices.append(Mrkdwn("*Skip this time*"))
        lines.append(fmt("Choose: {}.", mrkdwn.join(", or ", choices)))
    return mrkdwn.join("\n", lines)


def _force_buttons(note: Announcement, notice: ForceNotice | None) -> tuple[ButtonElement, ...]:
    if notice is None or not notice.unresolved:
        return ()
    owners = len({p.owner for p in notice.pods})
    confirm = ConfirmObject(
        title=PlainTextObject(text="Approve force for this run?"),
        text=PlainTextObject(
            text=(
                f"This run of {note.schedule} on {note.cluster} may then evict the Pods of {owners} "
                "owner(s) a plain drain refuses, as listed, and nothing else."
            )[:300]
        ),
        confirm=PlainTextObject(text="Approve with force"),
        deny=PlainTextObject(text="Back"),
    )
    buttons = [
        ButtonElement(
            text=PlainTextObject(text="Approve with force"),
            action_id=ACTION_FORCE_APPROVE,
            value=choice_value(note.key, notice.digest),
            style="danger",
            confirm=confirm,
        )
    ]
    for pool in notice.excludable[:EXCLUDE_BUTTONS]:
        buttons.append(
            ButtonElement(
                text=PlainTextObject(text=f"Leave out {pool}"[:75]),
                action_id=exclude_action(len(buttons) - 1),
                value=choice_value(note.key, pool),
            )
        )
    return tuple(buttons)


def _emoji(note: Announcement) -> str:
    if note.kind == "back":
        return "☀️" if " is back:" in note.text else "⚠️"
    if note.kind == "decided":
        if note.effective is None:
            return "⏭️"
        return "⏰" if note.buttons else "▶️"
    return {"upcoming": "🌙", "late": "⏰", "missed": "⚠️"}.get(note.kind, "🗓️")


def _buttons(note: Announcement) -> tuple[ButtonElement, ...]:
    value = button_value(note.key)
    run_now = ConfirmObject(
        title=PlainTextObject(text="Run it now?"),
        text=PlainTextObject(text=f"Start this event on {note.cluster} now instead of at its time."[:300]),
        confirm=PlainTextObject(text="Run now"),
        deny=PlainTextObject(text="Back"),
    )
    return (
        ButtonElement(
            text=PlainTextObject(text="Postpone 1h"),
            action_id=ACTION_POSTPONE_1H,
            value=value,
            style="primary",
        ),
        ButtonElement(
            text=PlainTextObject(text="Postpone until…"), action_id=ACTION_POSTPONE_UNTIL, value=value
        ),
        ButtonElement(text=PlainTextObject(text="Skip this time"), action_id=ACTION_SKIP, value=value),
        ButtonElement(
            text=PlainTextObject(text="Run now"),
            action_id=ACTION_RUN_NOW,
            value=value,
            style="danger",
            confirm=run_now,
        ),
    )


# -- `/scale schedule` views (ephemeral) -----------------------------------------------------------


def schedule_list(
    schedules: Sequence[Schedule],
    *,
    cluster: str | None = None,
    provider: Sequence[ProviderSchedules] = (),
) -> Message:
    """scalebot's schedules, then those the clusters' own systems keep (`provider`), read-only."""
    b = Builder()
    theirs = [p for p in provider if p.schedules or p.unreadable]
    if not schedules:
        b.section(esc(no_schedules(cluster)))
    else:
        b.section(f"*Schedules{f' on {esc(cluster)}' if cluster else ''}* ({len(schedules)})")
        for sched in schedules[:40]:
            emoji = "🗓️" if sched.enabled else "⏸️"
            b.section(f"{emoji} {summary(sched)}", reserve=200)
    for kept in theirs[:10]:
        b.section(_provider_schedules(kept), reserve=300)
    count = len(schedules) + sum(len(p.schedules) for p in theirs)
    return b.build("schedules", f"{count} schedules" if count else no_schedules(cluster))


def _provider_schedules(kept: ProviderSchedules) -> str:
    """One cluster's schedules kept by its own system, labelled as theirs: scalebot never runs or
    changes them, and they may wake what scalebot put to sleep (or the reverse)."""
    if kept.unreadable:
        return f"*{esc(kept.cluster)}*: its own schedules could not be read: {esc(kept.unreadable[:300])}"
    first = kept.schedules[0]
    lines = [
        f"*{esc(first.system)}'s own schedules on {esc(kept.cluster)}* ({esc(first.owner)}; read-only: "
        f"{esc(first.system)} runs them, change them there)"
    ]
    for sched in kept.schedules[:20]:
        events = (("hibernate", sched.start), ("wake", sched.end))
        parts = [f"{verb} `{esc(cron)}`" for verb, cron in events if cron]
        zone = sched.location or "UTC, not set"
        lines.append(f"🌙 {', '.join(parts)} ({esc(zone)})")
    return "\n".join(lines)


def schedule_detail(
    sched: Schedule, events: Sequence[tuple[Occurrence, datetime]], *, now: datetime
) -> Message:
    b = Builder()
    b.header(f"Schedule {sched.name}" + ("" if sched.enabled else " (paused)"))
    b.section(summary(sched))
    tz = sched.spec.tz
    lines = [_event_line(occ, at, tz, now) for occ, at in events[:_MAX_EVENTS]]
    b.section("*Next events*\n" + ("\n".join(lines) if lines else "_none_"), reserve=300)
    created = messages.slack_time(sched.created_at, "{date_short} {time}")
    b.context(f"Created by {messages.who(sched.created_by)} {created}")
    return b.build(f"schedule-{sched.name}", fmt("Schedule {}: {}", sched.name, summary(sched)))


def next_events(
    events: Sequence[tuple[Occurrence, datetime]],
    clusters: Mapping[str, str],
    *,
    tz: str,
    now: datetime,
    cluster: str | None = None,
    days_off: Sequence[tuple[Occurrence, str]] = (),
) -> Message:
    """The next sleeps and wakes across clusters in `tz` (the reader's Slack time zone), and among
    them, struck through, those a day off suppresses with the reason (`days_off`: outside text)."""
    b = Builder()
    if not events:
        b.section(esc(nothing_next(cluster)))
        return b.build("schedule-next", nothing_next(cluster))
    shown = list(events[:_MAX_EVENTS])
    last = max(at for _, at in shown)
    skipped = [(occ.at, occ, why) for occ, why in days_off if occ.at <= last]
    merged = sorted([(at, occ, "") for occ, at in shown] + skipped, key=lambda row: (row[0], row[1].key))
    rows = [
        (_event_line(occ, at, tz, now) if not why else _day_off_line(occ, why, tz))
        + f" · {esc(clusters.get(occ.schedule, '?'))}"
        for at, occ, why in merged
    ]
    b.section(f"*Next scheduled events* (times in {esc(tz)})\n" + "\n".join(rows))
    return b.build("schedule-next", f"Next scheduled events ({tz})")


def _day_off_line(occ: Occurrence, why: str, tz: str) -> str:
    verb = "sleep" if occ.action == "sleep" else "wake"
    when = esc(schedule.describe(occ.at, tz))
    return f"• ~{when}~ · no {verb} · `{esc(occ.schedule)}` · {esc(why)}"


def _event_line(occ: Occurrence, at: datetime, tz: str, now: datetime) -> str:
    verb = "😴 sleep" if occ.action == "sleep" else "☀️ wake"
    moved = " (moved)" if at != occ.at else ""
    when = esc(schedule.describe(at, tz))
    return f"• *{when}*{moved} · {verb} · `{esc(occ.schedule)}` · {schedule.in_words(at - now)}"

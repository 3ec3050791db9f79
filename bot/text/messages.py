"""Every sentence a Slack user reads that the bot itself writes, in one place.

Pure: string formatting only, no I/O and no clock (times come in as arguments). What names people,
channels, times or commands comes from the engine as data (`Outcome.reason`, schedule announcements)
and is rendered here, for Slack and (`slack=False`) for the CLI; the engine's other plain sentences
(`Outcome.reply`, progress texts, condition messages) are shown as they are.
Slack mrkdwn: a sentence that carries a mention, a channel or a date is `bot.text.mrkdwn.Mrkdwn`, built
with `mrkdwn.fmt` so the names and texts in it are escaped; renderers escape every other sentence
once, whole (`mrkdwn.escape`), so text from a cluster, a user or a config is never markup.

One module over 600 lines on purpose: keeping every sentence in one place is what keeps the bot's
wording consistent and reviewable as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from bot.text import command_registry, mrkdwn
from bot.text.mrkdwn import Mrkdwn, fmt
from engine.domain.announcement import ApprovalPromise, DecisionNote, EventKind, NextEvent, Upcoming
from engine.domain.durations import format_duration
from engine.domain.errors import OutsideFault, ScalebotError
from engine.domain.operation import OpKind, OpState
from engine.domain.reasons import (
    AlreadyDecided,
    Busy,
    ChannelNotAllowed,
    NeedsApprovalInstead,
    NoScheduleToResleep,
    Reason,
    UnknownOperation,
)
from engine.domain.wake_waves import WaveProgress
from engine.schedules.core import spec as schedule

COMMAND = "/scale"
CLI = "scalebot"

USAGE: dict[str, str] = {name: spec.usage for name, spec in command_registry.SLACK.items()}
"""Usage per subcommand, without the leading command; also the order `help` lists them in
(`bot.text.command_registry`)."""

SUMMARY: dict[str, str] = {name: spec.summary for name, spec in command_registry.SLACK.items()}

KIND_TITLE: dict[OpKind, str] = {
    OpKind.DRAIN: "Drain",
    OpKind.SCALE: "Scale",
    OpKind.ZERO: "Zero-scale",
    OpKind.WAKE: "Wake-up",
    OpKind.CONSOLIDATE: "Consolidation",
}

STATE_EMOJI: dict[OpState, str] = {
    OpState.AWAITING_APPROVAL: "⏳",
    OpState.RUNNING: "🔄",
    OpState.SUCCEEDED: "✅",
    OpState.FAILED: "❌",
    OpState.REJECTED: "🚫",
    OpState.EXPIRED: "⌛",
    OpState.SUPERSEDED: "♻️",
    OpState.CANCELLED: "🛑",
}


def usage(subcommand: str) -> str:
    return f"{COMMAND} {USAGE.get(subcommand, 'help')}"


# -- parser errors -------------------------------------------------------------------------------


def empty_command() -> str:
    return f"Tell me what to do, e.g. `{COMMAND} status` or `{COMMAND} help`."


def too_long(length: int, limit: int) -> str:
    return f"That command is {length:,} characters long; the limit is {limit:,}."


def unknown_subcommand(word: str, suggestion: str | None) -> str:
    hint = f" Did you mean `{suggestion}`?" if suggestion else ""
    return f"I don't know the subcommand `{word}`.{hint}"


def unknown_option(option: str, subcommand: str, suggestion: str | None) -> str:
    hint = f" Did you mean `{suggestion}`?" if suggestion else ""
    return f"`{subcommand}` has no option `{option}`.{hint}"


def missing_value(option: str) -> str:
    return f"`{option}` needs a value, e.g. `{option} dev-eu`."


def bad_name(token: str, what: str) -> str:
    return (
        f"`{token}` is not a valid {what} name: use lowercase letters, digits, '-' and '.' "
        "(a Kubernetes DNS-1123 name)."
    )


def looks_like_injection(token: str) -> str:
    return (
        f"`{token}` looks like a selector or shell syntax; name things one by one, separated by spaces "
        "(selectors and shell characters are not accepted)."
    )


def bad_token(token: str) -> str:
    return f"`{token}` contains characters I don't accept here."


def missing_argument(what: str) -> str:
    return f"Missing {what}."


def unexpected_arguments(tokens: Sequence[str]) -> str:
    return f"Unexpected argument{'s' if len(tokens) > 1 else ''}: {' '.join(f'`{t}`' for t in tokens)}."


def bad_size(token: str) -> str:
    return f"`{token}` is not a pool size: use a whole number from 0 to 10000."


def bad_duration(token: str, reason: str = "") -> str:
    """`reason`: the duration parser's own words ("a duration needs a unit — 30s or 30m?")."""
    if reason:
        return f"`for {token}`: {reason}"
    return f"`{token}` is not a duration: use e.g. `90m`, `3h` or `1h30m`."


def no_cluster(clusters: Sequence[str]) -> str:
    known = ", ".join(clusters) if clusters else "none configured"
    return (
        f"Which cluster? Add `cluster=NAME` (clusters: {known}), or set a default cluster for this channel."
    )


def unknown_cluster(name: str, clusters: Sequence[str]) -> str:
    return f"Unknown cluster `{name}`; clusters: {', '.join(clusters) or 'none configured'}."


def bad_operation_id(token: str) -> str:
    return f"`{token}` is not an operation ID (they look like `op-1a2b3c4d`)."


def plan_needs_kind() -> str:
    return "`plan` needs what to plan: `zero`, `wake`, `scale` or `drain`."


def mention_not_allowed(token: str) -> str:
    return f"A mention (`{token}`) does not belong here."


def schedules_unavailable() -> str:
    return "Schedules are not available in this scalebot yet."


# -- replies -------------------------------------------------------------------------------------


def internal_error(incident: str, op_id: str | None = None) -> str:
    about = f" (operation {op_id})" if op_id else ""
    return (
        f"Something failed{about}. Nothing more will happen for this request; "
        f"the details are in scalebot's log under incident `{incident}`."
    )


def outside_fault(exc: BaseException) -> OutsideFault | None:
    """The fault outside scalebot behind a failure, following the chain of causes (a step's error
    raised from the API server's), or None when its fix is not outside scalebot."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ScalebotError) and current.outside_fault is not None:
            return current.outside_fault
        current = current.__cause__
    return None


def failure_cause(exc: BaseException) -> str | None:
    """The one line naming a failure's cause when it is fixed outside scalebot, the same words in
    the CLI's error line and in Slack (plain text: the Slack renderer escapes it); None for any
    other failure."""
    fault = outside_fault(exc)
    if fault is None:
        return None
    detail = str(exc)
    if fault is OutsideFault.API_UNREACHABLE:
        return f"cannot reach the Kubernetes API server: {detail}"
    return f"forbidden: {detail} (check scalebot's RBAC: manifests/base/rbac.yaml)"


def outside_failure(cause: str, *, done: Sequence[str] = ()) -> str:
    """The Slack reply to a request that failed on a cause fixed outside scalebot. Every request
    reads the cluster before it writes, so an unanswered first call changes nothing; a change of
    several steps that failed part-way says what it had already done (`done`: the error's notes)."""
    changed = f"Not everything was left as it was: {'; '.join(done)}" if done else "Nothing was changed"
    return f"{cause[:1].upper()}{cause[1:]}. {changed}; ask again once it is fixed."


def malformed_request() -> str:
    return "That request was incomplete (no user or channel), so I ignored it."


def whoami_others_needs_role() -> str:
    return (
        "Looking up someone else's roles needs a role on at least one cluster; "
        f"`{COMMAND} whoami` shows yours, and an admin can add you."
    )


def unknown_button() -> str:
    return "That button is not one scalebot handles (it may come from an older version); nothing changed."


def no_operation(op_id: str) -> str:
    return f"No operation `{op_id}`; `{COMMAND} ops list` shows the recent ones."


def no_operations(cluster: str | None) -> str:
    return f"No operations{f' on {cluster}' if cluster else ''} yet."


def not_in_channel() -> str:
    return (
        "I'm not in this channel, so I could not post the request's card here. Add me with "
        "`/invite @scalebot` and ask again; nothing was requested."
    )


def card_not_posted(kind: OpKind, cluster: str, channel: str, error: str) -> Mrkdwn:
    """Why a request was cancelled by scalebot itself: Slack refused to post its card."""
    what = fmt("{} of {}", KIND_TITLE[kind].lower(), cluster)
    where_ = mrkdwn.channel(channel)
    if error == "is_archived":
        where = fmt("{} is archived. Ask again in another channel", where_)
    elif error.startswith("gave_up:"):
        where = fmt(
            "Slack did not accept it in {} after several tries ({}). Ask again later", where_, error[8:]
        )
    else:
        where = fmt("I'm not in {}. Add me with `/invite @scalebot` and ask again", where_)
    return fmt(
        "I could not post the card of your request ({}), so I cancelled it; nothing was started. {}.",
        what,
        where,
    )


def planning(kind: OpKind, cluster: str, *, plan_only: bool) -> str:
    what = {
        OpKind.DRAIN: "a drain",
        OpKind.SCALE: "a scale",
        OpKind.ZERO: "zero",
        OpKind.WAKE: "a wake-up",
        OpKind.CONSOLIDATE: "a consolidation",
    }
    tail = " (nothing changes)" if plan_only else "; the card follows in the channel"
    return f"Planning {what[kind]} of {cluster}…{tail}"


def reject_intro() -> str:
    return "Reject this request? Nothing changes in the cluster; the requester sees who rejected it and why."


def reject_reason_label() -> str:
    return "Why? (optional; shown on the card and kept in the audit)"


def home_no_role(user: str) -> Mrkdwn:
    return fmt(
        "{}, you have no role on any cluster scalebot operates. An admin grants roles in "
        "scalebot's config; `{}` lists the commands.",
        who(user),
        f"{COMMAND} help",
    )


def no_channel() -> str:
    return "I can only post operation cards in a channel; run the command in a channel."


def nodes_changed(actor: str, reply: str) -> Mrkdwn:
    return fmt("{}: {}", who(actor), reply)


# -- cards ---------------------------------------------------------------------------------------


def who(actor: str) -> Mrkdwn:
    """How a requester or actor is shown: Slack users as mentions, others by what they are."""
    if actor.startswith("cli:"):
        return fmt("{} (CLI)", actor[4:])
    if actor.startswith("schedule:"):
        return fmt("schedule *{}*", actor[9:])
    if actor == "scalebot":
        return Mrkdwn("scalebot")
    if actor.startswith("policy:"):
        return fmt("the *{}* policy", actor[7:])
    return mrkdwn.user(actor)


def slack_time(
    at: datetime, date_format: str = "{date_short_pretty} {time}", *, fallback: str = ""
) -> Mrkdwn:
    """A time Slack shows in each reader's own time zone ("today 14:02", "Mar 2 14:02"); the
    fallback (clients that cannot format it) is UTC unless given. The date is always there, so the
    text stays true in a message nobody edits any more."""
    shown = fallback or at.strftime("%Y-%m-%d %H:%M UTC")
    return mrkdwn.date(int(at.timestamp()), date_format, shown)


def request_line(actor: str, kind: OpKind, cluster: str, summary: str) -> Mrkdwn:
    verb = {
        OpKind.DRAIN: "drain nodes on",
        OpKind.SCALE: "scale",
        OpKind.ZERO: "zero",
        OpKind.WAKE: "wake",
        OpKind.CONSOLIDATE: "consolidate",
    }[kind]
    return fmt("{} asks to *{}* cluster *{}*: {}", who(actor), verb, cluster, summary)


def approvers_line(users: Sequence[str], groups: Sequence[str], limit: int = 12) -> Mrkdwn:
    """Who is asked to approve, as mentions (a user group as `<!subteam^…>`), so they are notified."""
    mentions = [mrkdwn.user(u) for u in users] + [mrkdwn.group(g) for g in groups]
    if not mentions:
        return Mrkdwn("*Approvers:* nobody has the approver role on this cluster; ask an admin to grant it")
    shown = mrkdwn.join(", ", mentions[:limit])
    rest = len(mentions) - limit
    return fmt("*Approvers:* {}{}", shown, f" and {rest} more" if rest > 0 else "")


def finished_for(requester: str, state: OpState) -> Mrkdwn:
    """The line that tells the requester their operation ended (a mention notifies them)."""
    verb = {OpState.SUCCEEDED: "finished", OpState.FAILED: "failed", OpState.CANCELLED: "was cancelled"}
    return fmt("{}: your operation {}", who(requester), verb.get(state, state.value))


def needs_approvals(count: int) -> str:
    return f"Needs {count} approval{'s' if count != 1 else ''}"


def expires(at: datetime) -> Mrkdwn:
    return fmt("expires {}", slack_time(at))


def force_phase_warning(window: str = "the graceful window") -> str:
    return (
        "⚠️ *Every pool goes to 0.* Pods still running after "
        f"{window} are force-deleted (phase 2: grace 0, PodDisruptionBudgets bypassed)."
    )


def confirm_title(kind: OpKind) -> str:
    return f"Approve this {KIND_TITLE[kind].lower()}?"


def confirm_text(kind: OpKind, cluster: str, summary: str) -> str:
    return f"{KIND_TITLE[kind]} on {cluster}: {summary}. This changes the cluster."


def confirm_cancel(op_id: str) -> str:
    return f"Cancel operation {op_id}? The current step finishes first; nothing is rolled back."


def decision(verb: str, actors: Sequence[str], at: datetime | None) -> Mrkdwn:
    people = mrkdwn.join(", ", (who(a) for a in actors))
    return fmt("{} by {}{}", verb, people, fmt(" at {}", slack_time(at)) if at else Mrkdwn(""))


def state_line(state: OpState, text: str) -> str:
    return f"{STATE_EMOJI[state]} {text}"


_AFTER_FAILURE: dict[OpKind, str] = {
    OpKind.DRAIN: "the nodes stay cordoned: drain them again once the cause is fixed, or uncordon them",
    OpKind.SCALE: "the pool keeps the nodes not removed yet: scale again once the cause is fixed",
    OpKind.ZERO: "what was scaled down stays down: `wake` restores the recorded sizes, or zero again "
    "once the cause is fixed",
    OpKind.WAKE: "wake again once the cause is fixed: the recorded sizes are kept",
    OpKind.CONSOLIDATE: "the nodes not removed yet stay: consolidate again once the cause is fixed",
}


def failed_headline(kind: OpKind, error: str, op_id: str) -> str:
    """A failed operation's status line: what failed, then what to do next."""
    what = error.removeprefix("Failed: ").rstrip(".") or "it stopped"
    return f"Failed: {what}. Next: {_AFTER_FAILURE[kind]} (`{COMMAND} ops show {op_id}` has each step)."


def default_status(state: OpState, approvals_required: int) -> str:
    return {
        OpState.AWAITING_APPROVAL: "Waiting for approval",
        OpState.RUNNING: "Running",
        OpState.SUCCEEDED: "Completed",
        OpState.FAILED: "Failed",
        OpState.REJECTED: "Rejected",
        OpState.EXPIRED: "Expired: nobody approved in time",
        OpState.SUPERSEDED: "Superseded: the cluster changed since this plan was shown; a new plan follows",
        OpState.CANCELLED: "Cancelled",
    }[state]


def blockers_heading(count: int) -> str:
    return f"*Pods that will block the drain* ({count})"


def moves_heading(count: int) -> str:
    return f"*Where their pods go* ({count}; the scheduler decides, the fit is re-checked before each node)"


def kept_heading(count: int) -> str:
    return f"*Nodes that stay, and why* ({count})"


def no_pending_pods() -> str:
    return "No pod is Unschedulable: nothing to grow."


def advice_headline(pool: str, nodes: int, pods: int, size: int, target: int) -> Mrkdwn:
    return fmt(
        "*Grow pool {} by {}* ({} → {}) for {}: it wastes least (cluster-autoscaler's "
        "least-waste expander; every pool that helps, best first):",
        pool,
        f"{nodes} node{'s' if nodes != 1 else ''}",
        size,
        target,
        f"{pods} pending pod{'s' if pods != 1 else ''}",
    )


def unhelped_heading(count: int) -> str:
    return f"*Pending pods no pool's new node would take* ({count})"


def underused_heading(count: int, threshold: float = 0.5) -> str:
    share = f"{threshold * 100:.3g}%"
    return f"*Nodes at or under {share} of allocatable requested* ({count})" + ("" if count else ": none")


def advice_only() -> str:
    return "Advice only: nothing was changed. The button requests the scale-up like `/scale scale` does."


DRAIN_NOT_COMPLETED = "Drain not completed yet"
"""The condition message's own first line: the heading above it must not say it again."""


def progress_blockers_heading(summary: str = "") -> str:
    """ "13 Pods remaining (DrainingSucceeded)": the condition below starts with "Drain not completed
    yet:", so the heading says what the summary adds, once."""
    rest = summary.removeprefix(DRAIN_NOT_COMPLETED).lstrip(": ")
    return f"*{rest or DRAIN_NOT_COMPLETED}* (DrainingSucceeded)"


def more(count: int) -> str:
    return f"... ({count} more)"


def more_lines(count: int) -> str:
    return f"... ({count} more line{'s' if count != 1 else ''})"


DIGEST_OUTCOME: dict[str, str] = {
    "failed": "failed",
    "attention": "needs attention",
    "running": "running",
    "done": "done",
}
"""How a fleet digest names each cluster's outcome (its scheduled operation)."""


def digest_heading(clusters: int) -> str:
    return f"Fleet: {clusters} scheduled run{'s' if clusters != 1 else ''} fired together at"


def digest_counts(counts: Mapping[str, int]) -> str:
    """ "3 done · 1 needs attention · 1 failed · 2 running", the outcomes that occur."""
    order = ("done", "attention", "failed", "running")
    shown = [f"{counts[o]} {DIGEST_OUTCOME[o]}" for o in order if counts.get(o)]
    return " · ".join(shown)


def final_heading(state: OpState) -> str:
    return {
        OpState.SUCCEEDED: "✅ *Completed*",
        OpState.FAILED: "❌ *Failed*",
        OpState.CANCELLED: "🛑 *Cancelled*",
    }.get(state, f"{STATE_EMOJI[state]} *{state.value}*")


# -- scheduled events ----------------------------------------------------------------------------

EVENT_TITLE: dict[EventKind, str] = {
    "shutdown": "Scheduled shutdown",
    "weekend_shutdown": "Weekend shutdown",
    "scale_down": "Scheduled scale-down",
    "wake_up": "Wake-up",
    "return_to_sleep": "Return to sleep",
}


def event_time(at: datetime, tz: str) -> Mrkdwn:
    """A scheduled instant in each reader's zone; the fallback is the schedule's own ("Mon 20:00 CET")."""
    return slack_time(at, fallback=schedule.describe(at, tz))


def upcoming_lines(cluster: str, name: str, event: Upcoming) -> list[Mrkdwn]:
    """An announced sleep: when it starts and what it does, when the cluster is back, its approval.
    Absolute times only: the message stays true after its last edit."""
    head = fmt(
        "{} of {} starts {}: {}",
        EVENT_TITLE[event.event],
        cluster,
        event_time(event.at, event.tz),
        event.summary,
    )
    if event.wake_at is None:
        back = fmt("No wake is scheduled: `{}` brings it back.", f"{COMMAND} wake {cluster}")
    else:
        exceptions = ", ".join(d.isoformat() for d in event.no_wake_on)
        back = fmt(
            "Back {}.{}{}",
            event_time(event.wake_at, event.tz),
            f" No wake on {exceptions} (exception dates)." if event.no_wake_on else "",
            "".join(f" {reason}." for reason in event.days_off),
        )
    if event.approval.complete:
        approval = fmt("Runs without a further approval ({}).", schedule_approval(name, event.approval))
    else:
        approval = Mrkdwn("Needs an approval when it starts.")
    return [head, back, approval]


def reminder(cluster: str, event: Upcoming, lead: timedelta | None) -> Mrkdwn:
    """The thread reply of a later lead (the message itself is edited, which notifies nobody)."""
    before = f" ({lead_text(lead)} before)" if lead is not None else ""
    title = EVENT_TITLE[event.event].lower()
    return fmt("Reminder{}: {} of {} starts {}", before, title, cluster, event_time(event.at, event.tz))


def lead_text(lead: timedelta) -> str:
    minutes = int(lead.total_seconds() // 60)
    return f"{minutes} min" if minutes < 120 or minutes % 60 else f"{minutes // 60} h"


def woken_for(op_id: str, cluster: str, summary: str, resleep_at: datetime) -> Mrkdwn:
    """A temporary wake, told in the channel: absolute times only, the message is never edited."""
    return fmt(
        "Operation {} wakes {} ({}); back to sleep {}, announced before.",
        op_id,
        cluster,
        summary,
        slack_time(resleep_at),
    )


def next_event(event: NextEvent) -> Mrkdwn:
    """A cluster's next sleep or wake, in each reader's zone (the Home tab is not re-rendered as
    time passes, so no "in 2 h")."""
    return fmt(
        "Next scheduled event: {} ({}) {}{}",
        event.action,
        event.schedule,
        event_time(event.at, event.tz),
        "".join(f"; before it: {reason}" for reason in event.days_off),
    )


def decided_line(decision: DecisionNote) -> Mrkdwn:
    return fmt("{} ({})", decision.note, who(decision.by))


def schedule_approval(name: str, approval: ApprovalPromise) -> Mrkdwn:
    """How a schedule's runs are approved, with its pre-approvers as mentions."""
    if approval.mode != "pre_approved":
        return Mrkdwn("approval at each run")
    if not approval.pre_approvers:
        return fmt("pre-approval asked, none given yet (`{}`)", f"{COMMAND} schedule approve {name}")
    return fmt("pre-approved by {}", mrkdwn.join(", ", (who(u) for u in approval.pre_approvers)))


# -- the engine's reasons ------------------------------------------------------------------------


class Answered(Protocol):
    """An engine answer: `Outcome` or `ScheduleOutcome`."""

    @property
    def reply(self) -> str: ...

    @property
    def reason(self) -> Reason | None: ...


def outcome_text(outcome: Answered, *, slack: bool = True) -> str:
    """What to tell the person: the engine's reason rendered here when it has one, else its reply."""
    return reason(outcome.reason, slack=slack) if outcome.reason is not None else outcome.reply


def reason(why: Reason, *, slack: bool = True) -> str:
    """A reason for Slack (mentions, channel links, `/scale …`; `Mrkdwn` with the names in it
    escaped) or for a terminal (plain, `scalebot …`)."""
    command = COMMAND if slack else CLI
    ops = f"{COMMAND} ops" if slack else f"{CLI} operations"
    person = who if slack else _plain_who
    say = fmt if slack else _plain
    match why:
        case ChannelNotAllowed(cluster, channels):
            where = mrkdwn.join(", ", map(mrkdwn.channel, channels)) if slack else ", ".join(channels)
            return say("{} is operated only from {}", cluster, where)
        case AlreadyDecided(op_id, state, by, at):
            when = (
                Mrkdwn("")
                if at is None
                else say(" at {}", slack_time(at) if slack else at.strftime("%H:%M UTC"))
            )
            return say(
                "operation {} is already {}{}", op_id, state, say(" by {}{}", person(by), when) if by else ""
            )
        case Busy(what, op_id, kind, requested_by, state):
            if not state:
                return say("{} is busy with operation {}", what, op_id)
            return say(
                "{} is busy: operation {} ({}, requested by {}, {}) is using it; wait for it or cancel it "
                "with `{}`",
                what,
                op_id,
                kind,
                person(requested_by),
                state,
                f"{ops} cancel {op_id}",
            )
        case UnknownOperation(op_id):
            return say("no operation {}; `{}` shows the recent ones", op_id, f"{ops} list")
        case NeedsApprovalInstead(verb, cluster, why_text):
            drain = f"{command} drain NODE cluster={cluster}"
            return say("{} on {} needs approval ({}); request `{}` instead", verb, cluster, why_text, drain)
        case NoScheduleToResleep(cluster):
            return say(
                "{} has no active schedule to say when it sleeps again: wake it with `{}` and put it "
                "to sleep with `{}`",
                cluster,
                f"{command} wake {cluster}",
                f"{command} zero {cluster}",
            )


def _plain(template: str, *args: object) -> str:
    return template.format(*args)


def _plain_who(actor: str) -> str:
    return actor.removeprefix("cli:")


def wave_rows(waves: Sequence[WaveProgress]) -> list[str]:
    """A wake's waves as table rows for its final reply: pools, nodes Ready, how each ended
    (a wave that timed out names what it waited for)."""
    if len(waves) < 2:
        return []
    rows = [f"{'wave':<5} {'pools':<30} {'Ready':>7}   outcome"]
    for i, wave in enumerate(waves, start=1):
        took = (
            format_duration(wave.ended_at - wave.started_at)
            if wave.ended_at is not None and wave.started_at is not None
            else ""
        )
        if wave.outcome == "timed_out":
            outcome = f"timed out after {took}: {'; '.join(wave.waited_for) or 'its nodes'}"
        elif wave.outcome == "ready":
            outcome = f"Ready in {took}"
        else:
            outcome = "not reached" if wave.started_at is None else "waiting"
        pools = ", ".join(wave.pools)
        rows.append(f"{i:<5} {pools:<30} {f'{wave.ready}/{wave.wanted}':>7}   {outcome}")
    return rows

"""The plain text schedules produce: a scheduled wake's report, a schedule's one-line summary (the
audit, the CLI), event titles and the small wording helpers the service's replies share.

Pure: reads values, returns strings. Slack renders its own blocks from the same data
(bot.slack.blocks.schedules).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from engine.domain.announcement import ApprovalMode, EventKind
from engine.domain.operation import Operation
from engine.schedules.core.due import event_kind
from engine.schedules.core.model import Schedule
from engine.schedules.core.spec import Occurrence

DOING = {
    "add": "creating a schedule",
    "pre_approve": "pre-approving a schedule",
    "pause": "pausing a schedule",
    "resume": "resuming a schedule",
    "delete": "deleting a schedule",
    "skip": "skipping",
    "postpone": "postponing",
    "run_now": "running it now",
    "exclude": "leaving a pool out of a run",
    "force_scope": "removing a standing force scope",
}
"""What a verb is doing, for "… needs the operator role" refusals."""

EVENT_TITLE: dict[EventKind, str] = {
    "shutdown": "Scheduled shutdown",
    "weekend_shutdown": "Weekend shutdown",
    "scale_down": "Scheduled scale-down",
    "wake_up": "Wake-up",
    "return_to_sleep": "Return to sleep",
}


def wake_report(op: Operation) -> str:
    """The final line of a scheduled wake: "dev-eu is back: 24/24 nodes Ready, 61/61 workloads
    available", or what is not back and why. Pure: reads the operation's summary and wake progress."""
    cluster = op.target.cluster
    nodes = op.summary.nodes_ready if op.summary is not None else None
    if nodes is None:
        return f"{cluster} did not come back: {op.error or op.state.value.replace('_', ' ')}"
    ready, wanted = nodes
    parts = [f"{ready}/{wanted} nodes Ready"]
    complete = ready >= wanted
    workloads = op.summary.workloads if op.summary is not None else None
    if workloads:
        parts.append(f"{workloads.available}/{workloads.total} workloads available")
        complete = complete and workloads.available >= workloads.total
    text = f"{cluster} is {'back' if complete else 'only partly back'}: {', '.join(parts)}"
    not_ready = list(op.progress.wake.not_ready)
    if not complete and not_ready:
        more = f" ... ({len(not_ready) - 5} more)" if len(not_ready) > 5 else ""
        text += "; not Ready: " + "; ".join(not_ready[:5]) + more
    not_back = list(op.progress.workloads.not_back)
    if not_back:
        more = f" ... ({len(not_back) - 5} more)" if len(not_back) > 5 else ""
        text += "; not back: " + "; ".join(not_back[:5]) + more
    return text


# --- the service --------------------------------------------------------------------------------------


def schedule_summary(sched: Schedule) -> str:
    """One plain line (the audit, the CLI); the bot renders its own from the same fields."""
    spec = sched.spec
    wake = f" → wake {spec.wake}" if spec.wake else " (no wake)"
    leads = ", ".join(lead_text(lead) for lead in spec.lead_times) or "none"
    holidays = ", ".join(d.isoformat() for d in sorted(spec.exceptions))
    approval = approval_text(sched.approval_mode, sched.approvers)
    return (
        f"{sched.name}: {sched.cluster}, {sched.target.describe()}; sleep {spec.sleep}{wake} ({spec.tz}); "
        f"announced {leads} before in channel {sched.channel}; {approval}"
        + (f"; not on {holidays}" if holidays else "")
        + (f"; {spec.days_off_rule.describe()}" if spec.days_off_rule else "")
        + ("" if sched.enabled else "; paused")
    )


def approval_text(mode: ApprovalMode, approvers: Sequence[str]) -> str:
    if mode != "pre_approved":
        return "approval at each run"
    if not approvers:
        return "pre-approval asked, none given yet"
    return "pre-approved by " + ", ".join(approvers)


def voided_pre_approval(name: str) -> str:
    return (
        f"Its pre-approval is void: it was resumed by someone who could not pre-approve it, so each "
        f"run asks for approval until approvers give `schedule approve {name}` again."
    )


def lead_text(lead: timedelta) -> str:
    minutes = int(lead.total_seconds() // 60)
    return f"{minutes}m" if minutes < 120 or minutes % 60 else f"{minutes // 60}h"


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def event_title(sched: Schedule, occ: Occurrence) -> str:
    """ "Scheduled shutdown", "Weekend shutdown", "Wake-up", ...: what people call this occurrence."""
    return EVENT_TITLE[event_kind(sched, occ)]

"""What scalebot says about a scheduled event, as data: the timer's service fills it in, the bot
renders it (bot/text/messages.py). Times stay instants, so each reader sees them in their own zone.

Pure: dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal

ApprovalMode = Literal["pre_approved", "per_run"]
AnnouncementKind = Literal["upcoming", "late", "missed", "decided", "back"]
EventKind = Literal["shutdown", "weekend_shutdown", "scale_down", "wake_up", "return_to_sleep"]


@dataclass(frozen=True, slots=True)
class ApprovalPromise:
    """What an announcement may say about approval: who pre-approved, and whether that is enough
    for the run to go without a further approval (each run re-checks it)."""

    mode: ApprovalMode
    pre_approvers: tuple[str, ...] = ()
    complete: bool = False


@dataclass(frozen=True, slots=True)
class ForcedPodNotice:
    """One Pod a scheduled sleep removes only with force: its owner (the unit an approval names),
    why a plain drain refuses it, and the pool it runs in (the pool a person may exclude)."""

    pod: str
    owner: str
    reason: str
    pool: str


@dataclass(frozen=True, slots=True)
class ForceNotice:
    """A scheduled sleep whose plan already says it needs force: without an approved force scope
    it would fail at once, so the announcement offers the choices (approve with force, exclude a
    pool, skip) before it runs.

    `digest` names the scope shown (its owners and budgets): an approval binds to it, so a
    different scope at the next lead is not approved by a click on the older card."""

    pods: tuple[ForcedPodNotice, ...]
    digest: str
    excludable: tuple[str, ...] = ()
    """Pools that may be left out of this run (others remain to run)."""
    approved_by: tuple[str, ...] = ()
    """Who approved force for this run, for exactly this scope."""
    standing_by: tuple[str, ...] = ()
    """The schedule's standing force scope covers it: who approved that scope."""
    excluded: tuple[str, ...] = ()
    """Pools left out of this run."""

    @property
    def unresolved(self) -> bool:
        """Nothing decided yet covers every Pod shown (an approval, a standing scope, exclusions)."""
        if self.approved_by or self.standing_by:
            return False
        return any(p.pool not in self.excluded for p in self.pods)


@dataclass(frozen=True, slots=True)
class Upcoming:
    """An upcoming sleep as data: the bot renders it with times every reader sees in their own zone,
    so nothing in it goes stale ("in 60 min") in a message that is no longer edited."""

    event: EventKind
    at: datetime
    summary: str
    """The plan, when the announcement was made ("2 pools, 5 nodes → 0")."""
    tz: str
    """The schedule's zone: the fallback text of a time, for clients that cannot format one."""
    wake_at: datetime | None = None
    no_wake_on: tuple[date, ...] = ()
    """Exception dates on which no wake follows this sleep."""
    days_off: tuple[str, ...] = ()
    """Why the cluster stays down longer: the days off this sleep spans ("Stays asleep: Whit Monday
    (DE-BY)"); outside text (a calendar's event names), escaped by the renderer."""
    approval: ApprovalPromise = ApprovalPromise("per_run")
    force: ForceNotice | None = None
    """Set when the plan needs force: the Pods, the choices, what was decided."""


@dataclass(frozen=True, slots=True)
class DecisionNote:
    """A decision someone took on one occurrence: `note` is the schedule's own account of it
    (also in the audit), `by` who took it (shown as a mention by the bot)."""

    by: str
    note: str


@dataclass(frozen=True, slots=True)
class Announcement:
    """A channel message about one occurrence. `key` is what its buttons carry; `message_ts` is the
    message to update in place ("" posts a new one); `thread_ts` threads it under another.

    An upcoming sleep (and a decision on one) carries `upcoming`, which the bot renders; `text` is
    a plain account for the other kinds (late, missed, back, a decision on a wake)."""

    key: str
    schedule: str
    cluster: str
    channel: str
    text: str
    kind: AnnouncementKind
    effective: datetime | None = None
    lead: timedelta | None = None
    message_ts: str = ""
    thread_ts: str = ""
    buttons: bool = False
    """Postpone 1h / Postpone until… / Skip this time / Run now are offered."""
    upcoming: Upcoming | None = None
    decision: DecisionNote | None = None
    reminder: bool = False
    """This occurrence already has its message (an earlier lead, a decision): this lead edits that
    message, so the bot also says it in its thread (an edit notifies nobody)."""


@dataclass(frozen=True, slots=True)
class NextEvent:
    """A cluster's next scheduled sleep or wake (`/scale status`, the Home tab)."""

    action: str
    """"sleep" or "wake"."""
    schedule: str
    at: datetime
    tz: str
    """The schedule's zone: the fallback text of the time."""
    days_off: tuple[str, ...] = ()
    """Why the events before it do not happen ("Stays asleep: Whit Monday (DE-BY)"); outside text."""

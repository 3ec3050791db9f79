"""Announcements: the notice posted at each lead time before a sleep (its plan, its force notice,
its approval promise), the text after a decision, a late or missed event, and what comes next."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from engine.domain.announcement import (
    Announcement,
    AnnouncementKind,
    ApprovalPromise,
    DecisionNote,
    Upcoming,
)
from engine.domain.operation import OperationPlan
from engine.kube.errors import KubeError
from engine.operations import policy
from engine.operations.service import Operations, UserError
from engine.schedules.book import ScheduleBook
from engine.schedules.core import one_off, recurrence
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import event_kind
from engine.schedules.core.model import Due, Resleep, Schedule
from engine.schedules.core.requests import sleep_request
from engine.schedules.core.spec import Occurrence
from engine.schedules.core.text import event_title
from engine.schedules.force_records import ForceRecords
from engine.store.schedules import StoredOccurrence


class Announcing:
    """The announcements before a sleep and the texts after decisions and events."""

    def __init__(self, book: ScheduleBook, ops: Operations, force: ForceRecords) -> None:
        self.book = book
        self.ops = ops
        self.force = force

    # -- announcements ---------------------------------------------------------------------------

    def announce(self, occurrence: Occurrence, lead: timedelta, now: datetime) -> Announcement:
        """The announcement of a sleep at `lead`; marks the occurrence announced for that lead."""
        sched = self.book.require(occurrence.schedule)
        effective = one_off.effective_time(occurrence, self.book.overrides(sched.name)) or occurrence.at
        # Cluster listings: outside the write transaction.
        plain, summary = self._planned_sleep(sched)
        needed = self.force.force_needed(sched, plain) if plain is not None else None
        with self.book.store.transaction():
            self.force.record_needed(sched, occurrence.key, needed, now)
            row = self.book.row(occurrence)
            # Decided from what SQLite says was shown before, so it also holds after a restart.
            reminder = bool(row.announce_ts) or (
                row.announced_for == effective
                and row.announced_lead is not None
                and row.announced_lead > lead.total_seconds()
            )
            self.book.store.save_occurrence(
                replace(
                    row,
                    state="announced" if row.state == "pending" else row.state,
                    announced_for=effective,
                    announced_lead=int(lead.total_seconds()),
                    announce_channel=row.announce_channel or sched.channel,
                    summary=summary,
                )
            )
        return Announcement(
            key=occurrence.key,
            schedule=sched.name,
            cluster=sched.cluster,
            channel=sched.channel,
            text="",
            kind="upcoming",
            effective=effective,
            lead=lead,
            message_ts=row.announce_ts,
            buttons=True,
            upcoming=self._upcoming_sleep(sched, occurrence, effective, summary),
            reminder=reminder,
        )

    def set_announcement(self, key: str, *, channel: str, ts: str) -> None:
        """Remember the Slack message of an occurrence: decisions update it, the run threads under it."""
        with self.book.store.transaction():
            found = self.book.resolve(key)
            if isinstance(found, str):
                return
            row = self.book.row(found[1])
            self.book.store.save_occurrence(replace(row, announce_channel=channel, announce_ts=ts))

    # -- internals: texts ------------------------------------------------------------------------

    def _upcoming_sleep(
        self, sched: Schedule, occ: Occurrence, effective: datetime, summary: str
    ) -> Upcoming:
        """An upcoming sleep as data: when, what, the wake that follows, what approval it needs."""
        following = recurrence.next_occurrence(sched.spec, "wake", after=effective)
        holidays = (
            recurrence.skipped_wakes(sched.spec, occ)
            if following is not None and not isinstance(occ, Resleep)
            else ()
        )
        days_off = (
            recurrence.days_off_between(sched.spec, start=effective, end=following.at)
            if following is not None
            else []
        )
        return Upcoming(
            event=event_kind(sched, occ),
            at=effective,
            summary=summary,
            tz=sched.spec.tz,
            wake_at=following.at if following is not None else None,
            no_wake_on=tuple(holidays),
            days_off=tuple(dict.fromkeys(day_off.reason() for _, day_off in days_off)),
            approval=ApprovalPromise(
                sched.approval_mode, sched.approvers, complete=self._pre_approval_complete(sched)
            ),
            force=self.force.notice(sched, occ.key),
        )

    def decided_announcement(
        self,
        sched: Schedule,
        occ: Occurrence,
        row: StoredOccurrence,
        *,
        effective: datetime | None,
        now: datetime,
        decision: DecisionNote,
    ) -> Announcement:
        upcoming = None
        if effective is not None and occ.action == "sleep":
            summary = row.summary or "see the plan when it starts"
            upcoming = self._upcoming_sleep(sched, occ, effective, summary)
        return Announcement(
            key=occ.key,
            schedule=sched.name,
            cluster=sched.cluster,
            channel=row.announce_channel or sched.channel,
            text=decision.note,
            kind="decided",
            effective=effective,
            message_ts=row.announce_ts,
            buttons=effective is not None and effective > now,
            upcoming=upcoming,
            decision=decision,
        )

    def _pre_approval_complete(self, sched: Schedule) -> bool:
        """What an announcement may promise; each run re-checks it against the roles of the day."""
        if sched.approval_mode != "pre_approved":
            return False
        pol = self.ops.policies[sched.cluster]
        roles = {u: self.ops.role(sched.cluster, u, self.ops.groups_of(u)) for u in sched.approvers}
        standing = policy.standing_pre_approvers(pol, roles, initiated_by=(sched.requester, sched.created_by))
        return policy.pre_approval_covers(pol, max(1, pol.approvals_required), standing)

    def late_announcement(self, item: Due) -> Announcement | None:
        sched = self.book.load(item.occurrence.schedule)
        if sched is None or item.decision is None:
            return None
        title = event_title(sched, item.occurrence)
        return self.note(
            sched, item.occurrence, "late", f"{title} of {sched.cluster}: {item.decision.reason}."
        )

    def note(self, sched: Schedule, occ: Occurrence, kind: AnnouncementKind, text: str) -> Announcement:
        row = self.book.store.get_occurrence(occ.key)
        return Announcement(
            key=occ.key,
            schedule=sched.name,
            cluster=sched.cluster,
            channel=(row.announce_channel if row else "") or sched.channel,
            text=text,
            kind=kind,
            effective=occ.at,
        )

    def next_text(self, sched: Schedule, now: datetime) -> str:
        upcoming = self.book.upcoming(sched, now, limit=1)
        if not upcoming:
            return "Nothing is scheduled in the next ten years."
        occ, at = upcoming[0]
        return f"Next: {occ.action} {schedule.describe(at, sched.spec.tz)} ({schedule.in_words(at - now)})."

    def _planned_sleep(self, sched: Schedule) -> tuple[OperationPlan | None, str]:
        """The sleep's plain plan and its one-line summary; no plan when it cannot be made now."""
        try:
            plan = self.ops.plan(sleep_request(sched))
        except UserError as exc:
            return None, f"cannot plan it now ({exc})"
        except KubeError as exc:  # the announcement still goes out; the fire plans again
            return None, f"cannot plan it now (the Kubernetes API server answered: {exc})"
        return plan, plan.summary()

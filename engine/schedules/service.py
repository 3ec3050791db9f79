"""Scheduled shutdowns and wake-ups: the service behind the bot's timer, `/scale schedule …` and the
announcement buttons.

Owns schedules as data (`add`, `pause`, `resume`, `delete`, `skip_date`), what is due when (`due`, and
`next_wakeups`: the instants the bot's timer must wake up at), announcements before a sleep, the
decisions people take on one occurrence (postpone, skip, run now), firing an occurrence through
`Operations.request` exactly like a human request (`requested_by="schedule:<name>"`), the catch-up at
start-up and temporary wakes. The arithmetic (DST, overrides, missed runs) is `engine.schedules.spec`'s; this
module applies it to what SQLite says. The values are `engine.schedules.model`'s, what is due when is
`engine.schedules.timer`'s (pure, given what this module reads), the plain text `engine.schedules.text`'s.

No APScheduler, no Slack, no clock reads in the timer paths: they take `now`. Clicks and commands read
the injected clock once. SQLite is the source of truth: an occurrence becomes handled (running, done,
skipped, missed) once, by its key, inside one write transaction, so a second fire of the same key, or a
postpone racing a fire, cannot run it twice.

Rules on top of engine.schedules.spec:
- Sleeps are announced at each lead time (the disruptive event); a wake posts its report when done
  ("dev-eu is back: 24/24 nodes Ready").
- Only the shortest lead already reached is announced (a timer that wakes late does not post "in
  60 min" and "in 10 min" together); a postpone counts as the announcement of the new time's past leads.
- A sleep whose pools are already at the target does nothing; a wake with nothing asleep does nothing
  (the cluster was woken by hand). Both are recorded as done, with the reason.
- Events while a schedule is paused are never run late nor announced as missed.
- Days off (public holidays by country and region, calendar files of the configuration) are resolved
  by `engine.schedules.calendars` when a schedule is loaded and handed to the spec as values; an
  unknown country, region or calendar is refused when saving. Announcements, `next_event` and
  `days_off_until` say why an event does not happen ("Stays asleep: Whit Monday (DE-BY)").
- A temporary wake needs a schedule on the cluster: the schedule says when to sleep again.
- Pre-approval is given per approver (`pre_approve`), by the same quorum as each run would need, and
  binds to the schedule's definition (its fingerprint): a changed definition is not pre-approved.
  Each run hands the pre-approvers to `Operations.request`, which re-checks their roles then; a run
  they do not cover (too few, roles gone, protected cluster) asks for approval like any request.
  "Run now" is made on behalf of whoever clicked it too, so they cannot approve that run themselves.
- Nothing here holds the write transaction across a cluster listing: a fire plans first, then
  decides and creates the operation in one transaction.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import cast, overload

from engine.domain.announcement import (
    Announcement,
    AnnouncementKind,
    ApprovalMode,
    ApprovalPromise,
    DecisionNote,
    ForceNotice,
    NextEvent,
    Upcoming,
)
from engine.domain.clock import Clock
from engine.domain.force_scope import ForceScope
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    OpState,
    ProgressEvent,
    Target,
)
from engine.domain.reasons import NoScheduleToResleep
from engine.kube.errors import KubeError
from engine.operations import policy
from engine.operations.service import Operations, UserError
from engine.pools.base import Pool
from engine.schedules import force
from engine.schedules import spec as schedule
from engine.schedules.calendars import Calendars
from engine.schedules.days_off import DaysOffRule
from engine.schedules.model import (
    APPROVAL_MODES,
    HANDLED,
    TARGET_KINDS,
    Due,
    Resleep,
    Schedule,
    ScheduleOutcome,
    ScheduleTarget,
)
from engine.schedules.spec import Occurrence, Override, ScheduleError, ScheduleSpec, SpecField
from engine.schedules.text import (
    DOING,
    EVENT_TITLE,
    approval_text,
    cap,
    schedule_summary,
    voided_pre_approval,
    wake_report,
)
from engine.schedules.timer import (
    RETRY_AFTER,
    UPCOMING_PER_SCHEDULE,
    due_announcements,
    due_fires,
    due_resleeps,
    event_kind,
    occurrence_on,
    occurrences_on,
    reached_lead,
    upcoming,
)
from engine.store.database import (
    ForceDecision,
    ScheduleApproval,
    Store,
    StoredOccurrence,
    StoredOverride,
    StoredSchedule,
    schedule_fingerprint,
)


@dataclass(frozen=True, slots=True)
class _Run:
    ok: bool
    state: str
    reply: str
    operation: Operation | None = None


# --- the service --------------------------------------------------------------------------------------


class Schedules:
    def __init__(
        self,
        store: Store,
        ops: Operations,
        clock: Clock,
        *,
        grace: timedelta = schedule.DEFAULT_GRACE,
        calendars: Calendars | None = None,
    ) -> None:
        self.store = store
        self.ops = ops
        self.clock = clock
        self.grace = grace
        """A missed sleep this late still runs at start-up; beyond it, it is announced as missed."""
        self.calendars = calendars or Calendars()
        """Public holidays (always) and the configuration's calendar files, by name."""

    # -- managing schedules ----------------------------------------------------------------------

    def add(
        self,
        *,
        name: str,
        cluster: str,
        target: ScheduleTarget,
        sleep: str,
        wake: str | None,
        tz: str,
        lead_times: str = "",
        channel: str,
        approval_mode: str,
        exceptions: str = "",
        holidays: str = "",
        calendar: str = "",
        on_holiday: str = "",
        by: str,
        groups: Sequence[str] = (),
    ) -> ScheduleOutcome:
        """Validate and save a schedule; every refusal names the problem and nothing is saved."""
        try:
            spec = schedule.parse_spec(
                name=name,
                cluster=cluster,
                sleep=sleep,
                wake=wake,
                tz=tz,
                lead_times=lead_times,
                exceptions=exceptions,
                holidays=holidays,
                calendar=calendar,
                on_holiday=on_holiday,
            )
        except ScheduleError as exc:
            return self._refused_add(by, cluster, name, str(exc), exc.field)
        problem = self.calendars.check(spec.days_off_rule)
        if problem:
            return self._refused_add(by, cluster, name, problem, "holidays")
        problem = self._check_cluster(cluster)
        if problem:
            return self._refused_add(by, cluster, name, problem, "cluster")
        refusal = self._check_creator(cluster, by, groups, approval_mode)  # audited by the check
        if refusal:
            return replace(_refused(refusal), field="approval")
        where = policy.channel_allowed(self.ops.policies[cluster], channel.strip())
        problem = _check_channel(channel) or where.reason
        if problem:
            refused = self._refused_add(by, cluster, name, problem, "channel")
            return replace(refused, reason=None if _check_channel(channel) else where.detail)
        problem = self._check_target(cluster, target)
        if problem:
            return self._refused_add(by, cluster, name, problem, "target")
        everything = {p.name for p in self._pools(cluster)}  # a cluster listing: before the transaction
        now = self.clock.now()
        mode: ApprovalMode = "pre_approved" if approval_mode == "pre_approved" else "per_run"
        stored = _to_stored(spec, target, channel=channel, mode=mode, by=by, now=now)
        with self.store.transaction():
            conflict = self._check_overlap(spec.name, cluster, target, everything)
            if conflict:
                return self._refused_add(by, cluster, name, conflict, "target")
            if not self.store.insert_schedule(stored):
                return self._refused_add(
                    by,
                    cluster,
                    name,
                    f'a schedule named "{name}" exists: pick another name or delete it first',
                    "name",
                )
            saved = self._from_stored(stored)
            self._audit(by, "schedule_add", cluster, f"{schedule_summary(saved)} [{saved.fingerprint}]")
            if mode == "pre_approved":
                self._record_pre_approval(saved, by, groups, now)
            saved = self._require(saved.name)
        upcoming = self._upcoming(saved, now, limit=1)
        return ScheduleOutcome(
            True,
            f"Schedule saved: {schedule_summary(saved)}. {self._next_text(saved, now)}",
            changed=True,
            schedule=saved,
            next_event=upcoming[0] if upcoming else None,
        )

    def pre_approve(
        self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """One approver's pre-approval of the schedule as it is now defined; the runs go without a
        further approval once as many distinct approvers as a run needs have given theirs."""
        sched = self._load(name)
        if sched is None:
            return _refused(self._unknown_schedule(name))
        misplaced = self._misplaced(sched.cluster, by, channel, "pre_approve")
        if misplaced is not None:
            return misplaced
        if sched.approval_mode != "pre_approved":
            self._audit(by, "refused_schedule_pre_approve", sched.cluster, f"{name}: per_run schedule")
            return _refused(
                f"schedule {name} asks for an approval at each run (per_run); create it with "
                "approval=pre-approved to pre-approve it"
            )
        pol = self.ops.policies[sched.cluster]
        decision = policy.can_pre_approve(
            pol, voter=by, voter_role=self.ops.role(sched.cluster, by, groups), created_by=sched.created_by
        )
        if not decision.allowed:
            self._audit(by, "refused_schedule_pre_approve", sched.cluster, f"{name}: {decision.reason}")
            return _refused(decision.reason)
        with self.store.transaction():
            added = self._record_pre_approval(sched, by, groups, self.clock.now())
            sched = self._require(name)
        if not added:
            return ScheduleOutcome(True, f"you have already pre-approved schedule {name}")
        return ScheduleOutcome(
            True,
            f"Pre-approved schedule {name}: {approval_text(sched.approval_mode, sched.approvers)}.",
            changed=True,
            schedule=sched,
        )

    def _record_pre_approval(self, sched: Schedule, by: str, groups: Sequence[str], now: datetime) -> bool:
        """Record `by`'s pre-approval if the policy lets it count (the creator's only with self-approval)."""
        if not self._may_pre_approve(sched, by, groups):
            return False
        added = self.store.add_schedule_approval(ScheduleApproval(sched.name, by, now, sched.fingerprint))
        if added:
            self._audit(by, "schedule_pre_approve", sched.cluster, f"{sched.name} [{sched.fingerprint}]")
        return added

    def _refused_add(
        self, by: str, cluster: str, name: str, reason: str, field: SpecField | None
    ) -> ScheduleOutcome:
        self._audit(by, "refused_schedule_add", cluster, f"{name[:63]}: {reason}")
        return replace(_refused(reason), field=field)

    def show(self, name: str) -> Schedule | None:
        return self._load(name)

    def pause(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        """Stop firing and announcing; occurrences while paused are never run late. `channel`, here
        and for every change a person makes: where they typed or clicked (the cluster's channel rule)."""
        return self._manage(
            name, by, groups, "pause", lambda s: self.store.set_schedule_enabled(s, False), channel=channel
        )

    def resume(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        """Resume firing. A pre-approval does not outlive a pause lifted by someone who could not
        have given it (an operator resuming what an approver paused): it is void, and the reply says
        so; the approvers pre-approve again if they agree."""
        now = self.clock.now()
        sched = self._load(name)
        keeps = (
            sched is None or sched.approval_mode != "pre_approved" or self._may_pre_approve(sched, by, groups)
        )
        voided: builtins.list[int] = []

        def act(name: str) -> None:
            self.store.set_schedule_enabled(name, True, since=now)
            if not keeps and sched is not None:
                voided.append(self.store.remove_schedule_approvals(name))
                if voided[0]:
                    why = f"{name}: resumed by {by}, who could not pre-approve it"
                    self._audit(by, "schedule_pre_approval_voided", sched.cluster, why)

        outcome = self._manage(name, by, groups, "resume", act, channel=channel)
        if not voided or not voided[0]:
            return outcome
        return replace(outcome, reply=f"{outcome.reply} {voided_pre_approval(name)}")

    def unapprove(
        self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Withdraw one's own pre-approval of a schedule: no role needed and from any channel, since
        taking one's approval back only ever narrows what runs unasked."""
        sched = self._load(name)
        if sched is None:
            return _refused(self._unknown_schedule(name))
        with self.store.transaction():
            withdrawn = self.store.remove_schedule_approvals(name, user=by)
            if withdrawn:
                self._audit(by, "schedule_unapprove", sched.cluster, name)
            else:
                self._audit(by, "refused_schedule_unapprove", sched.cluster, f"{name}: no pre-approval")
        if not withdrawn:
            return _refused(f"you have not pre-approved schedule {name}; there is nothing to withdraw")
        left = approval_text(sched.approval_mode, self._require(name).approvers)
        return ScheduleOutcome(True, f"Withdrew your pre-approval of schedule {name}: {left}.", changed=True)

    def _may_pre_approve(self, sched: Schedule, by: str, groups: Sequence[str]) -> bool:
        role = self.ops.role(sched.cluster, by, groups)
        pol = self.ops.policies[sched.cluster]
        return policy.can_pre_approve(pol, voter=by, voter_role=role, created_by=sched.created_by).allowed

    def delete(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        return self._manage(name, by, groups, "delete", self.store.delete_schedule, channel=channel)

    def skip_date(
        self, name: str, day: date | str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Skip the sleep and the wake of one local date (a one-off holiday); the schedule is unchanged."""
        sched = self._load(name)
        if sched is None:
            return _refused(self._unknown_schedule(name))
        misplaced = self._misplaced(sched.cluster, by, channel, "skip")
        if misplaced is not None:
            return misplaced
        try:
            local = schedule.parse_date(day) if isinstance(day, str) else day
        except ScheduleError as exc:
            return _refused(str(exc))
        refusal = self._authorise(sched.cluster, by, groups, "skip", detail=f"{name} {local}")
        if refusal:
            return _refused(refusal)
        now = self.clock.now()
        with self.store.transaction():
            overrides = self._overrides(name)
            handled = self._handled_keys(name)
            todo = [
                occ
                for occ in occurrences_on(sched.spec, local)
                if occ.key not in handled and (schedule.effective_time(occ, overrides) or now) > now
            ]
            if not todo:
                return _refused(
                    f"schedule {name} has nothing left to skip on {local:%a} {local}: "
                    "no sleep or wake that day, or they are past"
                )
            for occ in todo:
                self._save_override(sched, schedule.skip(occ, by=by, spec=sched.spec), now)
                self._close_row(sched, occ, "skipped", now, note=f"skipped by {by}")
        what = " and the ".join(f"{occ.action} of {schedule.describe(occ, sched.spec.tz)}" for occ in todo)
        return ScheduleOutcome(
            True, f"Skipping the {what} ({name}); the schedule is unchanged.", changed=True
        )

    # -- what comes next -------------------------------------------------------------------------

    def next_events(
        self, now: datetime, *, limit: int = 10, cluster: str | None = None
    ) -> builtins.list[tuple[Occurrence, datetime]]:
        """The next sleeps and wakes (with their effective times) across clusters, soonest first."""
        events: list[tuple[Occurrence, datetime]] = []
        for sched in self._schedules(cluster=cluster):
            events += self._upcoming(sched, now, limit=limit)
        return sorted(events, key=lambda pair: (pair[1], pair[0].key))[:limit]

    def next_event(self, cluster: str, now: datetime) -> NextEvent | None:
        """For `/scale status` and the Home tab: the cluster's next sleep or wake, at its effective time."""
        events = self.next_events(now, limit=1, cluster=cluster)
        if not events:
            return None
        occ, at = events[0]
        sched = self._load(occ.schedule)
        if sched is None:
            return NextEvent(occ.action, occ.schedule, at, "UTC")
        skipped = schedule.days_off_between(sched.spec, start=now, end=at)
        reasons = tuple(dict.fromkeys(day_off.reason() for _, day_off in skipped))
        return NextEvent(occ.action, occ.schedule, at, sched.spec.tz, days_off=reasons)

    def days_off_problems(self) -> builtins.list[str]:
        """Schedules whose days off cannot be followed now (their calendar left the configuration,
        the holiday library dropped their region), each with what to do: `scalebot run` logs them
        at start, since a schedule that silently lost its days off would sleep through a freeze."""
        problems: list[str] = []
        for sched in self._schedules(enabled_only=False):
            problem = self.calendars.check(sched.spec.days_off_rule) if sched.spec.days_off_rule else ""
            if problem:
                problems.append(
                    f"schedule {sched.name} ({sched.spec.days_off_rule.describe()}): {problem}; until then "
                    "it runs without those days off (or delete the schedule)"
                )
        return problems

    def days_off_until(
        self, now: datetime, until: datetime, *, cluster: str | None = None
    ) -> builtins.list[tuple[Occurrence, str]]:
        """The sleeps and wakes a day off suppresses between `now` and `until`, each with its reason
        ("Stays asleep: Whit Monday (DE-BY)"), soonest first: `schedule next` shows them."""
        found: list[tuple[Occurrence, str]] = []
        for sched in self._schedules(cluster=cluster):
            found += [
                (occ, day_off.reason())
                for occ, day_off in schedule.days_off_between(sched.spec, start=now, end=until)
            ]
        return sorted(found, key=lambda pair: (pair[0].at, pair[0].key))

    def due(self, now: datetime) -> builtins.list[Due]:
        """What the timer must do at `now`, in time order."""
        found: list[Due] = []
        for sched in self._schedules():
            found += self._due_fires(sched, now)
            found += self._due_resleeps(sched, now)
            found += self._due_announcements(sched, now)
        return sorted(found, key=lambda item: (item.at, item.occurrence.key))

    def next_wakeups(self, now: datetime) -> builtins.list[datetime]:
        """The future instants at which something becomes due: the timer arms one-shot jobs for them.
        Something still due now (a tick that failed: the API server was down) is retried in a minute."""
        instants: set[datetime] = {now + RETRY_AFTER} if self.due(now) else set()
        for sched in self._schedules():
            for occ, at in self._upcoming(sched, now, limit=UPCOMING_PER_SCHEDULE):
                instants.add(at)
                if occ.action == "sleep":
                    leads = schedule.announcement_times(occ, sched.spec.lead_times, at=at)
                    instants.update(instant for _, instant in leads if instant > now)
        return sorted(instants)

    def run_due(self, now: datetime) -> builtins.list[ScheduleOutcome]:
        """The timer's one call: announce, fire, or report as missed whatever is due at `now`."""
        return [self._handle(item, now) for item in self.due(now)]

    def startup(self, now: datetime) -> builtins.list[ScheduleOutcome]:
        """At start-up: settle occurrences whose operation finished while we were down, then apply the
        missed-run rules (each outcome carries its `decision`) and post announcements now due."""
        self._settle_running(now)
        return self.run_due(now)

    # -- announcements ---------------------------------------------------------------------------

    def announce(self, occurrence: Occurrence, lead: timedelta, now: datetime) -> Announcement:
        """The announcement of a sleep at `lead`; marks the occurrence announced for that lead."""
        sched = self._require(occurrence.schedule)
        effective = schedule.effective_time(occurrence, self._overrides(sched.name)) or occurrence.at
        # Cluster listings: outside the write transaction.
        plain, summary = self._planned_sleep(sched)
        needed = self._force_needed(sched, plain) if plain is not None else None
        with self.store.transaction():
            self._record_needed(sched, occurrence.key, needed, now)
            row = self._row(occurrence)
            # Decided from what SQLite says was shown before, so it also holds after a restart.
            reminder = bool(row.announce_ts) or (
                row.announced_for == effective
                and row.announced_lead is not None
                and row.announced_lead > lead.total_seconds()
            )
            self.store.save_occurrence(
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
        with self.store.transaction():
            found = self._resolve(key)
            if isinstance(found, str):
                return
            row = self._row(found[1])
            self.store.save_occurrence(replace(row, announce_channel=channel, announce_ts=ts))

    # -- decisions on one occurrence -------------------------------------------------------------

    def postpone(
        self,
        key: str,
        *,
        by: str,
        delta: timedelta = timedelta(hours=1),
        groups: Sequence[str] = (),
        channel: str = "",
    ) -> ScheduleOutcome:
        """`channel`, here and for every decision: where the click came from (the cluster's channel
        rule applies to it as to a typed request)."""
        return self._decide(
            key,
            by,
            groups,
            "postpone",
            lambda s, occ, ovs, now: schedule.postpone(occ, by=by, delta=delta, spec=s.spec, overrides=ovs),
            channel=channel,
        )

    def postpone_until(
        self, key: str, *, by: str, until: datetime, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        return self._decide(
            key,
            by,
            groups,
            "postpone",
            lambda s, occ, ovs, now: schedule.postpone_until(
                occ, by=by, until=until, spec=s.spec, overrides=ovs
            ),
            channel=channel,
        )

    def skip(self, key: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        return self._decide(
            key,
            by,
            groups,
            "skip",
            lambda s, occ, ovs, now: schedule.skip(occ, by=by, spec=s.spec),
            channel=channel,
        )

    def run_now(self, key: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        decided = self._decide(
            key,
            by,
            groups,
            "run_now",
            lambda s, occ, ovs, now: schedule.run_now(occ, by=by, now=now, spec=s.spec),
            channel=channel,
        )
        if not decided.ok:
            return decided
        fired = self.fire(key, self.clock.now(), by=by)
        return replace(
            fired, reply=f"{decided.reply} {fired.reply}", announcement=decided.announcement, decided_by=by
        )

    # -- firing ----------------------------------------------------------------------------------

    def fire(self, key: str, now: datetime, *, by: str = "") -> ScheduleOutcome:
        """Run one occurrence now, once: a second fire of the same key is a no-op. The operation is
        created inside the same write transaction that marks the key, so a crash leaves neither.

        The cluster is listed and the plan made before that transaction (a slow API server must not
        hold the database); the transaction re-checks the key and starts what was planned. `by` is
        whoever clicked "Run now": the run is made on their behalf too."""
        found = self._resolve(key)
        prepared = self._prepare(found[0], found[1], by) if not isinstance(found, str) else None
        with self.store.transaction():
            found = self._resolve(key)
            if isinstance(found, str):
                return _refused(found, key=key)
            sched, occ = found
            row = self._row(occ)
            what = f"the {_title(sched, occ).lower()} of {sched.cluster}"
            if row.state in HANDLED:
                return ScheduleOutcome(True, f"{cap(what)} is already {row.state}; nothing to do", key=key)
            if not sched.enabled:
                return _refused(f"schedule {sched.name} is paused; resume it first", key=key)
            effective = schedule.effective_time(occ, self._overrides(sched.name))
            if effective is None:
                self._close_row(sched, occ, "skipped", now, note="skipped")
                self._mark_done(sched, occ, now)
                return ScheduleOutcome(True, f"{cap(what)} is skipped; nothing runs", changed=True, key=key)
            assert prepared is not None
            run = self._start(prepared, what, thread_ts=row.announce_ts)
            op_id = run.operation.id if run.operation else ""
            self._close_row(sched, occ, run.state, now, note=run.reply, op_id=op_id)
            self._mark_done(sched, occ, now)
            self._audit(
                sched.requester, f"schedule_{occ.action}", sched.cluster, f"{key}: {run.reply}", op_id
            )
        return ScheduleOutcome(
            run.ok, run.reply, changed=True, key=key, effective=effective, operation=run.operation
        )

    def operation_finished(self, event: ProgressEvent) -> Announcement | None:
        """Feed every progress event here: a final one closes the occurrence that started it, and a
        scheduled wake returns its "dev-eu is back: …" report to post."""
        op = event.operation
        if not event.final or not op.requested_by.startswith("schedule:"):
            return None
        now = self.clock.now()
        with self.store.transaction():
            rows = self.store.list_occurrences(op_id=op.id)
            for row in rows:
                if row.state == "running":
                    self.store.save_occurrence(replace(row, state="done", done_at=now))
        if op.kind is not OpKind.WAKE or not rows:
            return None
        sched = self._load(rows[0].schedule)
        return Announcement(
            key=rows[0].key,
            schedule=rows[0].schedule,
            cluster=op.target.cluster,
            channel=sched.channel if sched else op.channel,
            text=wake_report(op),
            kind="back",
            thread_ts=op.thread_ts,
        )

    # -- temporary wake --------------------------------------------------------------------------

    def wake_for(
        self, cluster: str, duration: timedelta, *, by: str, channel: str, groups: Sequence[str] = ()
    ) -> ScheduleOutcome:
        """`/scale wake dev-eu for 3h`: wake now; back to sleep at the expiry (announced like any sleep)
        if the schedule has the cluster asleep then. Scheduled sleeps inside the window are held."""
        problem = self._check_cluster(cluster)
        if problem:
            return _refused(problem)
        now = self.clock.now()
        scheds = self._schedules(cluster=cluster)
        if not scheds:
            return replace(
                _refused(
                    f"{cluster} has no active schedule to say when it sleeps again: wake it, and put it "
                    "to sleep again, by hand"
                ),
                reason=NoScheduleToResleep(cluster),
            )
        try:
            resleeps = [(s, schedule.temporary_wake(now, duration, s.spec)) for s in scheds]
        except ScheduleError as exc:
            return _refused(str(exc))
        seconds = int(duration.total_seconds())
        target = Target(cluster=cluster, wake_for_seconds=seconds)
        request = OperationRequest(kind=OpKind.WAKE, target=target, requested_by=by, channel=channel)
        out = self.ops.request(request, groups=groups)
        if not out.ok:
            return _refused(out.reply)
        with self.store.transaction():
            notes = [self._hold(s, now, at, by) for s, at in resleeps]
            self._audit(by, "schedule_wake_for", cluster, f"for {duration}: " + " ".join(notes))
        first = min(at for _, at in resleeps)
        return ScheduleOutcome(
            True, f"{out.reply}. {' '.join(notes)}", changed=True, effective=first, operation=out.operation
        )

    # -- internals: loading ----------------------------------------------------------------------

    def _load(self, name: str) -> Schedule | None:
        stored = self.store.get_schedule(name)
        return self._with_approvers(self._from_stored(stored)) if stored else None

    def _from_stored(self, stored: StoredSchedule) -> Schedule:
        """A stored schedule with its days off resolved around its latest activity (not the clock:
        the timer's paths read none), so the years it looks at move on as it runs."""
        sched = _from_stored(stored)
        rule = sched.spec.days_off_rule
        if not rule:
            return sched
        around = (stored.last_done_at or stored.active_since).year
        days_off = self.calendars.days_off(rule, around=around)
        return replace(sched, spec=replace(sched.spec, days_off=days_off))

    def _with_approvers(self, sched: Schedule) -> Schedule:
        standing = self._standing(sched)
        if standing:
            scope = ForceScope.from_json(standing[-1].scope.get("scope") or {})
            sched = replace(sched, force_units=scope.units, force_by=tuple(d.user for d in standing))
        if sched.approval_mode != "pre_approved":
            return sched
        current = [
            a.user for a in self.store.schedule_approvals(sched.name) if a.fingerprint == sched.fingerprint
        ]
        return replace(sched, approvers=tuple(dict.fromkeys(current)))

    def _require(self, name: str) -> Schedule:
        sched = self._load(name)
        if sched is None:
            raise UserError(self._unknown_schedule(name))
        return sched

    def _schedules(self, *, cluster: str | None = None, enabled_only: bool = True) -> builtins.list[Schedule]:
        stored = self.store.list_schedules(cluster=cluster)
        return [self._with_approvers(self._from_stored(s)) for s in stored if s.enabled or not enabled_only]

    def _overrides(self, name: str) -> builtins.list[Override]:
        return [
            Override(o.key, cast(schedule.OverrideKind, o.kind), o.until, o.by, o.note)
            for o in self.store.overrides(schedule=name)
        ]

    def _handled_keys(self, name: str) -> frozenset[str]:
        return frozenset(r.key for r in self.store.list_occurrences(schedule=name, states=tuple(HANDLED)))

    def _resleeps(self, name: str) -> builtins.list[Occurrence]:
        rows = self.store.list_occurrences(schedule=name, states=("pending", "announced"))
        return [_resleep_of(r) for r in rows if r.kind == "resleep"]

    def _row(self, occ: Occurrence) -> StoredOccurrence:
        existing = self.store.get_occurrence(occ.key)
        if existing is not None:
            return existing
        kind = "resleep" if isinstance(occ, Resleep) else "scheduled"
        return StoredOccurrence(
            occ.key, occ.schedule, occ.action, occ.local_date.isoformat(), occ.at, "pending", kind
        )

    def _resolve(self, key: str) -> tuple[Schedule, Occurrence] | str:
        """The schedule and occurrence a button's key names, or why there is none."""
        parts = key.rsplit(":", 2)
        sched = self._load(parts[0]) if len(parts) == 3 else None
        if sched is None:
            return f'unknown or deleted schedule in "{key[:80]}"; the list of schedules shows them'
        occ: Occurrence | None = None
        if parts[2].startswith("resleep-"):
            row = self.store.get_occurrence(key)
            occ = _resleep_of(row) if row is not None and row.kind == "resleep" else None
        elif parts[2] in ("sleep", "wake"):
            try:
                day = date.fromisoformat(parts[1])
            except ValueError:
                return f'unknown occurrence "{key[:80]}"'
            occ = occurrence_on(sched.spec, day, parts[2])
        if occ is None:
            return f"schedule {sched.name} has no such event ({key[:80]})"
        return sched, occ

    def _upcoming(
        self, sched: Schedule, now: datetime, *, limit: int
    ) -> builtins.list[tuple[Occurrence, datetime]]:
        return upcoming(
            sched,
            now,
            limit=limit,
            overrides=self._overrides(sched.name),
            handled=self._handled_keys(sched.name),
            resleeps=self._resleeps(sched.name),
        )

    # -- internals: what is due ------------------------------------------------------------------

    def _due_fires(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        return due_fires(
            sched,
            now,
            grace=self.grace,
            manual_action_at=self._manual_action_at(sched),
            handled=self._handled_keys(sched.name),
            overrides=self._overrides(sched.name),
        )

    def _due_resleeps(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        return due_resleeps(
            sched,
            now,
            grace=self.grace,
            resleeps=self._resleeps(sched.name),
            overrides=self._overrides(sched.name),
        )

    def _due_announcements(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        if not sched.spec.lead_times:
            return []
        coming = self._upcoming(sched, now, limit=UPCOMING_PER_SCHEDULE)
        announced: dict[str, tuple[datetime | None, float | None]] = {}
        for occ, _ in coming:
            row = self.store.get_occurrence(occ.key)
            if row is not None:
                announced[occ.key] = (row.announced_for, row.announced_lead)
        return due_announcements(sched, now, coming=coming, announced=announced)

    def _handle(self, item: Due, now: datetime) -> ScheduleOutcome:
        if item.what == "announce" and item.lead is not None:
            note = self.announce(item.occurrence, item.lead, now)
            return ScheduleOutcome(
                True, note.text, changed=True, key=note.key, effective=note.effective, announcement=note
            )
        if item.what == "fire":
            fired = self.fire(item.occurrence.key, now)
            late = item.decision is not None and item.decision.verdict == "run_late"
            return replace(
                fired,
                decision=item.decision,
                announcement=self._late_announcement(item) if late and fired.changed else None,
            )
        return self._close_due(item, now)

    def _close_due(self, item: Due, now: datetime) -> ScheduleOutcome:
        """Missed beyond the grace (announced) or nothing to do (skipped, superseded, a manual action won)."""
        sched = self._require(item.occurrence.schedule)
        reason = item.decision.reason if item.decision else ""
        skipped = schedule.effective_time(item.occurrence, self._overrides(sched.name)) is None
        state = "skipped" if skipped else "missed"
        with self.store.transaction():
            if self._row(item.occurrence).state in HANDLED:
                return ScheduleOutcome(True, reason, key=item.occurrence.key, decision=item.decision)
            self._close_row(sched, item.occurrence, state, now, note=reason)
            self._mark_done(sched, item.occurrence, now)
            if item.what == "missed":
                self._audit("scalebot", "schedule_missed", sched.cluster, f"{item.occurrence.key}: {reason}")
        note = None
        if item.what == "missed":
            title = _title(sched, item.occurrence)
            note = self._note(
                sched, item.occurrence, "missed", f"{title} of {sched.cluster} did not run: {reason}."
            )
        return ScheduleOutcome(
            True, reason, changed=True, key=item.occurrence.key, announcement=note, decision=item.decision
        )

    # -- internals: running ----------------------------------------------------------------------

    def _prepare(self, sched: Schedule, occ: Occurrence, by: str) -> _Prepared:
        """What a fire will do, from a cluster listing and a plan: taken outside any transaction."""
        what = f"the {_title(sched, occ).lower()} of {sched.cluster}"
        on_behalf = (by,) if by else ()
        if occ.action == "wake":
            asleep = self._asleep_pools(sched.cluster)
            wanted = asleep if sched.target.kind == "cluster" else asleep & set(sched.target.pools)
            if not wanted:
                return _Run(True, "done", f"{cap(what)}: nothing to do, {sched.cluster} is already awake")
            pools = () if sched.target.kind == "cluster" else tuple(sorted(wanted))
            request = _request(
                OpKind.WAKE, Target(cluster=sched.cluster, pools=pools), sched, "", on_behalf=on_behalf
            )
        else:
            if _already_asleep(sched.target, self._pools(sched.cluster)):
                return _Run(True, "done", f"{cap(what)}: nothing to do, {sched.target.describe()} already")
            excluded = self._excluded(sched, occ.key)
            sleep = _sleep_request(sched, on_behalf=on_behalf, pools=self._run_pools(sched, excluded))
            if sleep is None:
                return _Run(True, "done", f"{cap(what)}: nothing to do, every pool is left out of this run")
            try:
                return self._prepare_sleep(sched, occ, sleep, what)
            except UserError as exc:
                return _Run(False, "missed", f"{cap(what)} could not start: {exc}")
        try:
            return request, self.ops.plan(request), self.ops.pre_approver_groups(request)
        except UserError as exc:
            return _Run(False, "missed", f"{cap(what)} could not start: {exc}")

    def _prepare_sleep(
        self, sched: Schedule, occ: Occurrence, request: OperationRequest, what: str
    ) -> _Prepared:
        """A sleep whose plain plan runs, runs as planned. One that Pods only force removes would
        fail at once runs forced only when an approved force scope (this run's, else the
        schedule's standing one) covers all the forced plan needs, with exactly that scope and
        its approvers standing in for the run's approval; otherwise it does not start, and says
        which Pods, owners and reasons, and how to approve them."""
        plain = self.ops.plan(request)
        if plain.forcing or not plain.blockers:
            return request, plain, self.ops.pre_approver_groups(request)
        forced_request = _forced(request)
        forced = self.ops.plan(forced_request)
        needed = force.dead_end(plain, forced)
        if needed is None:
            return request, plain, self.ops.pre_approver_groups(request)
        approved = self._approved_force(sched, occ.key, needed)
        if approved is None:
            self._audit(
                sched.requester,
                "schedule_force_missing",
                sched.cluster,
                f"{occ.key}: needs force for {', '.join(needed.units)}",
            )
            return _Run(False, "missed", _needs_force_text(cap(what), sched.name, needed))
        scope, approvers = approved
        # Force is approved, never implied: only the approvers of this scope stand in for the run's
        # approval (the schedule's pre-approvers approved it without force). A per-run schedule
        # still asks at the run, on a card showing the forced plan.
        stand_in = tuple(approvers) if sched.approval_mode == "pre_approved" else ()
        forced_request = replace(forced_request, pre_approvers=stand_in)
        planned = replace(forced, force_scope=replace(scope, pods=needed.pods))
        return forced_request, planned, self.ops.pre_approver_groups(forced_request)

    def _start(self, prepared: _Prepared, what: str, *, thread_ts: str) -> _Run:
        if isinstance(prepared, _Run):
            return prepared
        request, planned, groups = prepared
        name = request.requested_by.removeprefix("schedule:")
        if request.kind is OpKind.WAKE:
            thread_ts = thread_ts or self._last_sleep_thread(name)
        out = self.ops.request(
            replace(request, thread_ts=thread_ts), planned=planned, pre_approver_groups=groups
        )
        if not out.ok:
            return _Run(False, "missed", f"{cap(what)} could not start: {out.reply}")
        return _Run(True, "running", f"{cap(what)} ({name}): {out.reply}", out.operation)

    def _settle_running(self, now: datetime) -> None:
        """Occurrences whose operation ended while scalebot was down are done."""
        for row in self.store.list_occurrences(states=("running",)):
            op = self.ops.get(row.op_id) if row.op_id else None
            if op is None or op.state.is_terminal:
                self.store.save_occurrence(replace(row, state="done", done_at=now))

    def _hold(self, sched: Schedule, now: datetime, resleep_at: datetime, by: str) -> str:
        """Skip the scheduled sleeps inside a temporary wake and record its re-sleep."""
        tz = sched.spec.tz
        until = schedule.describe(resleep_at, tz)
        for occ in schedule.held_sleeps(sched.spec, woke_at=now, resleep_at=resleep_at):
            note = f"The sleep of {schedule.describe(occ, tz)} is held by a temporary wake until {until}."
            self._save_override(sched, Override(occ.key, "skip", None, by, note), now)
            self._close_row(sched, occ, "skipped", now, note=note)
        following = schedule.next_occurrence(sched.spec, "sleep", after=now)
        if following is not None and following.at == resleep_at:
            return f"{sched.name}: back to sleep at the scheduled sleep, {until}."
        local = resleep_at.astimezone(schedule.parse_zone(tz)).date()
        resleep = Resleep(sched.name, "sleep", local, resleep_at)
        self.store.save_occurrence(self._row(resleep))
        return (
            f"{sched.name}: back to sleep {until} ({schedule.in_words(resleep_at - now)}), announced before."
        )

    # -- internals: decisions --------------------------------------------------------------------

    def _decide(
        self,
        key: str,
        by: str,
        groups: Sequence[str],
        verb: str,
        make: Callable[[Schedule, Occurrence, builtins.list[Override], datetime], Override],
        *,
        channel: str,
    ) -> ScheduleOutcome:
        """One decision on one occurrence, in one write transaction (a fire cannot slip in between)."""
        now = self.clock.now()
        with self.store.transaction():
            found = self._clicked(key, by, channel, verb)
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            refusal = self._authorise(sched.cluster, by, groups, verb, detail=key)
            if refusal:
                return _refused(refusal, key=key)
            row = self._row(occ)
            if row.state in HANDLED:
                return _refused(
                    f"the {occ.action} of {schedule.describe(occ, sched.spec.tz)} is already {row.state}",
                    key=key,
                )
            overrides = self._overrides(sched.name)
            try:
                override = make(sched, occ, overrides, now)
            except ScheduleError as exc:
                return _refused(str(exc), key=key)
            self._save_override(sched, override, now)
            effective = schedule.effective_time(occ, [*overrides, override])
            row = self._after_decision(sched, row, effective, now, override)
        decided = DecisionNote(by, override.note)
        note = self._decided_announcement(sched, occ, row, effective=effective, now=now, decision=decided)
        return ScheduleOutcome(
            True, override.note, changed=True, key=key, effective=effective, announcement=note, decided_by=by
        )

    def _after_decision(
        self,
        sched: Schedule,
        row: StoredOccurrence,
        effective: datetime | None,
        now: datetime,
        override: Override,
    ) -> StoredOccurrence:
        if effective is None:
            new = replace(row, state="skipped", done_at=now, note=override.note)
        else:
            # The decision's update of the message is the announcement of the leads already reached.
            lead = reached_lead(sched.spec.lead_times, effective, now)
            new = replace(
                row, announced_for=effective, announced_lead=int(lead.total_seconds()) if lead else None
            )
        self.store.save_occurrence(new)
        return new

    def _save_override(self, sched: Schedule, override: Override, now: datetime) -> None:
        self.store.add_override(
            StoredOverride(
                override.key, sched.name, override.kind, override.until, override.by, now, override.note
            )
        )
        self._audit(
            override.by, f"schedule_{override.kind}", sched.cluster, f"{override.key}: {override.note}"
        )

    # -- internals: texts ------------------------------------------------------------------------

    def _upcoming_sleep(
        self, sched: Schedule, occ: Occurrence, effective: datetime, summary: str
    ) -> Upcoming:
        """An upcoming sleep as data: when, what, the wake that follows, what approval it needs."""
        following = schedule.next_occurrence(sched.spec, "wake", after=effective)
        holidays = (
            schedule.skipped_wakes(sched.spec, occ)
            if following is not None and not isinstance(occ, Resleep)
            else ()
        )
        days_off = (
            schedule.days_off_between(sched.spec, start=effective, end=following.at)
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
            force=self._force_notice(sched, occ.key),
        )

    def _decided_announcement(
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

    def _late_announcement(self, item: Due) -> Announcement | None:
        sched = self._load(item.occurrence.schedule)
        if sched is None or item.decision is None:
            return None
        title = _title(sched, item.occurrence)
        return self._note(
            sched, item.occurrence, "late", f"{title} of {sched.cluster}: {item.decision.reason}."
        )

    def _note(self, sched: Schedule, occ: Occurrence, kind: AnnouncementKind, text: str) -> Announcement:
        row = self.store.get_occurrence(occ.key)
        return Announcement(
            key=occ.key,
            schedule=sched.name,
            cluster=sched.cluster,
            channel=(row.announce_channel if row else "") or sched.channel,
            text=text,
            kind=kind,
            effective=occ.at,
        )

    def _next_text(self, sched: Schedule, now: datetime) -> str:
        upcoming = self._upcoming(sched, now, limit=1)
        if not upcoming:
            return "Nothing is scheduled in the next ten years."
        occ, at = upcoming[0]
        return f"Next: {occ.action} {schedule.describe(at, sched.spec.tz)} ({schedule.in_words(at - now)})."

    def _planned_sleep(self, sched: Schedule) -> tuple[OperationPlan | None, str]:
        """The sleep's plain plan and its one-line summary; no plan when it cannot be made now."""
        try:
            plan = self.ops.plan(_sleep_request(sched))
        except UserError as exc:
            return None, f"cannot plan it now ({exc})"
        except KubeError as exc:  # the announcement still goes out; the fire plans again
            return None, f"cannot plan it now (the Kubernetes API server answered: {exc})"
        return plan, plan.summary()

    # -- force: announced ahead, approved per run or standing, never implied ---------------------

    def approve_force(
        self, key: str, shown: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """An approver's "Approve with force" on an announcement: records that they approve this run
        forcing exactly the scope the card showed (`shown`, its digest). Approvers only, by the
        same rule as a pre-approval (not the schedule's creator unless self-approval is allowed);
        a card whose scope has changed since approves nothing."""
        now = self.clock.now()
        with self.store.transaction():
            found = self._clicked(key, by, channel, "force_approve")
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            why = self._force_refusal(sched, by, groups)
            if why:
                self._audit(by, "refused_schedule_force_approve", sched.cluster, f"{key}: {why}")
                return _refused(why, key=key)
            row = self._row(occ)
            needed = self._needed(sched, key)
            problem = _force_problem(occ, row.state, needed, shown)
            if problem or needed is None:
                self._audit(by, "refused_schedule_force_approve", sched.cluster, f"{key}: {problem}")
                return _refused(problem, key=key)
            self.store.save_force_decision(
                ForceDecision(sched.name, key, force.APPROVED, by, "", shown, "", needed.to_json(), now)
            )
            units = ", ".join(needed.scope.units)
            self._audit(by, "schedule_force_approve", sched.cluster, f"{key}: force for {units} [{shown}]")
        note = f"Force approved for this run, for {units}"
        return self._decision_outcome(sched, occ, by, note, now)

    def exclude_pool(
        self, key: str, pool: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Leave one pool out of this run (the others run): an operator's decision, like a skip;
        only a pool the announcement offered (one holding Pods only force removes)."""
        now = self.clock.now()
        with self.store.transaction():
            found = self._clicked(key, by, channel, "exclude")
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            refusal = self._authorise(sched.cluster, by, groups, "exclude", detail=f"{key} {pool[:63]}")
            if refusal:
                return _refused(refusal, key=key)
            notice = self._force_notice(sched, key, roles=False)  # only what it offers: no look-up
            if self._row(occ).state in HANDLED or notice is None or pool not in notice.excludable:
                offered = ", ".join(notice.excludable) if notice else ""
                choice = f"the pools offered are {offered}" if offered else "none is offered now"
                why = f"pool {pool[:63]} cannot be left out of {key[:80]}: {choice}"
                self._audit(by, "refused_schedule_exclude", sched.cluster, why)
                return _refused(why, key=key)
            self.store.save_force_decision(
                ForceDecision(sched.name, key, force.EXCLUDED, by, pool, "", "", {}, now)
            )
            self._audit(by, "schedule_exclude", sched.cluster, f"{key}: pool {pool} left out of this run")
        note = f"Pool {pool} is left out of this run; the other pools run"
        return self._decision_outcome(sched, occ, by, note, now)

    def set_force_scope(
        self, name: str, units: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """`schedule force NAME --force-scope=Kind/ns/name,…`: an approver approves a standing force
        scope for the schedule's sleeps (the same rule as a pre-approval; a second approver of the
        same scope adds to its quorum, a different scope replaces it). `none` removes it (an
        operator may: that only narrows what runs). Bound to the schedule's targets."""
        sched = self._load(name)
        if sched is None:
            return _refused(self._unknown_schedule(name))
        misplaced = self._misplaced(sched.cluster, by, channel, "force_scope")
        if misplaced is not None:
            return misplaced
        now = self.clock.now()
        if units.strip().lower() in force.CLEAR_WORDS:
            refusal = self._authorise(sched.cluster, by, groups, "force_scope", detail=name)
            if refusal:
                return _refused(refusal)
            with self.store.transaction():
                gone = self.store.remove_force_decisions(name, key="", kind=force.STANDING)
                self._audit(by, "schedule_force_scope_removed", sched.cluster, name)
            if not gone:
                return _refused(f"schedule {name} has no standing force scope; there is nothing to remove")
            return ScheduleOutcome(
                True, f"Removed the standing force scope of schedule {name}.", changed=True
            )
        try:
            scope = force.parse_units(units)
        except force.ForceScopeError as exc:
            return _refused(str(exc))
        why = self._force_refusal(sched, by, groups)
        if why:
            self._audit(by, "refused_schedule_force_scope", sched.cluster, f"{name}: {why}")
            return _refused(why)
        digest, bound = force.digest(scope), force.binding(sched.cluster, sched.target)
        with self.store.transaction():
            current = [d for d in self._standing(sched) if d.digest == digest]
            if not current:  # another scope (or none): this approval starts a new one
                self.store.remove_force_decisions(name, key="", kind=force.STANDING)
            self.store.save_force_decision(
                ForceDecision(
                    name, "", force.STANDING, by, "", digest, bound, {"scope": scope.to_json()}, now
                )
            )
            self._audit(
                by, "schedule_force_scope", sched.cluster, f"{name}: {', '.join(scope.units)} [{digest}]"
            )
            sched = self._require(name)
        approvers = ", ".join(sched.force_by)
        return ScheduleOutcome(
            True,
            f"Standing force scope of schedule {name}: {', '.join(scope.units)} (approved by {approvers}). "
            "Its sleeps use it only when their plan needs force, and only within it.",
            changed=True,
        )

    def _clicked(
        self, key: str, by: str, channel: str, verb: str
    ) -> tuple[Schedule, Occurrence] | ScheduleOutcome:
        """The schedule and occurrence a button names, or the refusal: unknown, or clicked where the
        cluster is not operated from."""
        found = self._resolve(key)
        if isinstance(found, str):
            return _refused(found, key=key)
        misplaced = self._misplaced(found[0].cluster, by, channel, verb)
        return found if misplaced is None else replace(misplaced, key=key)

    def _force_refusal(self, sched: Schedule, by: str, groups: Sequence[str]) -> str:
        """Who may approve force on a schedule (a run's or a standing scope): the rule of a
        pre-approval (approver role now; not its creator unless self-approval is allowed). ""
        when `by` may."""
        pol = self.ops.policies[sched.cluster]
        role = self.ops.role(sched.cluster, by, groups)
        decision = policy.can_pre_approve(pol, voter=by, voter_role=role, created_by=sched.created_by)
        if decision.allowed:
            return ""
        why = decision.reason.replace("pre-approve a schedule", "approve force for a schedule")
        return why.replace("pre-approving a schedule", "approving force for a schedule")

    def _may_force(self, sched: Schedule, user: str) -> bool:
        """Whether `user` may approve force on `sched` now, their groups looked up again (Slack;
        a failed look-up grants nothing)."""
        try:
            groups = tuple(self.ops.groups_of(user))
        except Exception:  # fail closed, as the run's check does
            groups = ()
        return not self._force_refusal(sched, user, groups)

    def _decision_outcome(
        self, sched: Schedule, occ: Occurrence, by: str, note: str, now: datetime
    ) -> ScheduleOutcome:
        row = self._row(occ)
        effective = schedule.effective_time(occ, self._overrides(sched.name))
        decided = DecisionNote(by, note)
        told = self._decided_announcement(sched, occ, row, effective=effective, now=now, decision=decided)
        return ScheduleOutcome(
            True, note, changed=True, key=occ.key, effective=effective, announcement=told, decided_by=by
        )

    def _force_needed(self, sched: Schedule, plain: OperationPlan) -> force.Needed | None:
        """Given the sleep's plain plan, plan it forced (cluster listings, outside any transaction):
        what it needs force for, with each Pod's pool; None when it runs without (or cannot be
        planned now)."""
        if plain.forcing or not plain.blockers:
            return None
        try:
            scope = force.dead_end(plain, self.ops.plan(_forced(_sleep_request(sched))))
            if scope is None:
                return None
            handle = self.ops.handles[sched.cluster]
            node_pool = {n: p.name for p in handle.pools.list_pools() for n in p.nodes}
            wanted = {p.pod for p in scope.pods}
            pools = {p.key: node_pool.get(p.node_name, "") for p in handle.api.list_pods() if p.key in wanted}
        except (UserError, KubeError):  # the announcement still goes out; the fire plans again
            return None
        acts_on = tuple(c.pool for c in plain.pools)
        return force.Needed(scope, pools, acts_on)

    def _record_needed(self, sched: Schedule, key: str, needed: force.Needed | None, now: datetime) -> None:
        self.store.remove_force_decisions(sched.name, key=key, kind=force.NEEDED)
        if needed is not None:
            self.store.save_force_decision(
                ForceDecision(
                    sched.name,
                    key,
                    force.NEEDED,
                    "",
                    "",
                    force.digest(needed.scope),
                    "",
                    needed.to_json(),
                    now,
                )
            )

    def _needed(self, sched: Schedule, key: str) -> force.Needed | None:
        rows = [d for d in self.store.force_decisions(sched.name, key=key) if d.kind == force.NEEDED]
        return force.Needed.from_json(rows[-1].scope) if rows else None

    def _excluded(self, sched: Schedule, key: str) -> tuple[str, ...]:
        rows = self.store.force_decisions(sched.name, key=key)
        return tuple(sorted({d.pool for d in rows if d.kind == force.EXCLUDED}))

    def _standing(self, sched: Schedule) -> builtins.list[ForceDecision]:
        """The standing force scope's approvals that still bind: a changed target voids them."""
        bound = force.binding(sched.cluster, sched.target)
        rows = self.store.force_decisions(sched.name, key="")
        return [d for d in rows if d.kind == force.STANDING and d.binding == bound]

    def _force_notice(self, sched: Schedule, key: str, *, roles: bool = True) -> ForceNotice | None:
        """What the announcement says about force, from what SQLite recorded (no listing). With
        `roles`, an approval counts on the card only while its author may still approve force (their
        user groups are looked up: never inside a transaction); the run checks them again."""
        needed = self._needed(sched, key)
        if needed is None:
            return None
        shown = force.digest(needed.scope)
        rows = self.store.force_decisions(sched.name, key=key)
        approved = [d.user for d in rows if d.kind == force.APPROVED and d.digest == shown]
        standing = [
            d.user
            for d in self._standing(sched)
            if not force.uncovered(needed.scope, ForceScope.from_json(d.scope.get("scope") or {}))
        ]
        if roles:
            may = {u: self._may_force(sched, u) for u in {*approved, *standing}}
            approved, standing = [u for u in approved if may[u]], [u for u in standing if may[u]]
        return force.notice(
            needed, approved_by=approved, standing_by=standing, excluded=self._excluded(sched, key)
        )

    def _approved_force(
        self, sched: Schedule, key: str, needed: ForceScope
    ) -> tuple[ForceScope, builtins.list[str]] | None:
        """The approved scope that covers all a forced run needs now, and who approved it: this
        run's approval first, else the schedule's standing scope; None when none covers it."""
        rows = self.store.force_decisions(sched.name, key=key)
        candidates: dict[str, tuple[ForceScope, builtins.list[str]]] = {}
        for d in rows:
            if d.kind == force.APPROVED:
                scope = force.Needed.from_json(d.scope).scope
                candidates.setdefault("run:" + d.digest, (scope, []))[1].append(d.user)
        for d in self._standing(sched):
            scope = ForceScope.from_json(d.scope.get("scope") or {})
            candidates.setdefault("standing:" + d.digest, (scope, []))[1].append(d.user)
        for scope, users in candidates.values():
            if not force.uncovered(needed, scope):
                return ForceScope(units=scope.units, pdbs=scope.pdbs), users
        return None

    def _run_pools(self, sched: Schedule, excluded: Sequence[str]) -> tuple[str, ...] | None:
        """The pools this run acts on once some were left out of it (None: nothing was)."""
        if not excluded:
            return None
        acts_on = (
            [p.name for p in self._pools(sched.cluster)]
            if sched.target.kind == "cluster"
            else sched.target.pools
        )
        return tuple(sorted(p for p in acts_on if p not in set(excluded)))

    # -- internals: checks and cluster facts -----------------------------------------------------

    def _authorise(
        self,
        cluster: str,
        by: str,
        groups: Sequence[str],
        verb: str,
        *,
        need: policy.Role = policy.Role.OPERATOR,
        detail: str = "",
    ) -> str:
        role = self.ops.role(cluster, by, groups)
        if role is not None and role >= need:
            return ""
        self._audit(by, f"refused_schedule_{verb}", cluster, detail)
        have = f"you are {role.label}" if role is not None else "you have no role there"
        return f"{DOING.get(verb, verb)} needs the {need.label} role on {cluster}; {have}"

    def _check_cluster(self, cluster: str) -> str:
        if cluster in self.ops.clusters():
            return ""
        return f'unknown cluster "{cluster}"; clusters: {", ".join(self.ops.clusters()) or "none"}'

    def _check_creator(self, cluster: str, by: str, groups: Sequence[str], mode: str) -> str:
        if mode not in APPROVAL_MODES:
            return f'unknown approval mode "{mode[:40]}": use pre_approved or per_run'
        refusal = self._authorise(cluster, by, groups, "add")
        if refusal or mode == "per_run":
            return refusal
        # Pre-approval is the approval of every run to come: only an approver may give it.
        return self._authorise(cluster, by, groups, "pre_approve", need=policy.Role.APPROVER)

    def _check_target(self, cluster: str, target: ScheduleTarget) -> str:
        if target.kind not in TARGET_KINDS:
            return f'unknown target "{str(target.kind)[:40]}": use cluster, pools, scale or workloads'
        if target.kind == "workloads":
            return (
                "workloads-only schedules are not available yet: the operations service has no "
                "workloads-only operation; schedule the cluster or its pools instead"
            )
        pools = {p.name: p for p in self._pools(cluster)}
        return _target_problem(cluster, target, pools)

    def _check_overlap(self, name: str, cluster: str, target: ScheduleTarget, everything: set[str]) -> str:
        mine = _pool_set(target, everything)
        for other in self._schedules(cluster=cluster, enabled_only=False):
            shared = mine & _pool_set(other.target, everything)
            if other.name != name and shared:
                return (
                    f"overlaps schedule {other.name}, which already acts on pool(s) "
                    f"{', '.join(sorted(shared))} of {cluster}: two schedules on the same pools would "
                    f"fight; change {other.name} or pick other pools"
                )
        return ""

    def _manage(
        self,
        name: str,
        by: str,
        groups: Sequence[str],
        verb: str,
        act: Callable[[str], object],
        *,
        channel: str,
    ) -> ScheduleOutcome:
        sched = self._load(name)
        if sched is None:
            return _refused(self._unknown_schedule(name))
        misplaced = self._misplaced(sched.cluster, by, channel, verb)
        if misplaced is not None:
            return misplaced
        refusal = self._authorise(sched.cluster, by, groups, verb, detail=name)
        if refusal:
            return _refused(refusal)
        with self.store.transaction():
            act(name)
            self._audit(by, f"schedule_{verb}", sched.cluster, name)
        done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb]
        return ScheduleOutcome(True, f"Schedule {name} {done}.", changed=True)

    def _misplaced(self, cluster: str, by: str, channel: str, verb: str) -> ScheduleOutcome | None:
        """The channel rule of typed requests (`Operations.origin_refusal`), for schedule changes."""
        elsewhere = self.ops.origin_refusal(cluster, by=by, channel=channel, what=f"schedule_{verb}")
        return None if elsewhere is None else replace(_refused(elsewhere.reply), reason=elsewhere.reason)

    def _unknown_schedule(self, name: str) -> str:
        names = [s.name for s in self._schedules(enabled_only=False)]
        return f'no schedule "{name[:63]}"; schedules: {", ".join(names) or "none"}'

    def _pools(self, cluster: str) -> builtins.list[Pool]:
        return self.ops.handles[cluster].pools.list_pools()

    def _asleep_pools(self, cluster: str) -> set[str]:
        """Pools with sizes to restore: in SQLite, else on the pool objects (a lost database)."""
        recorded = {r.pool for r in self.store.restore_records(cluster)}
        return recorded | {p.name for p in self._pools(cluster) if p.restore is not None}

    def _manual_action_at(self, sched: Schedule) -> datetime | None:
        """The latest zero / scale / wake of this schedule's pools requested by a person."""
        mine = None if sched.target.kind == "cluster" else set(sched.target.pools)
        for op in self.store.list_operations(cluster=sched.cluster, limit=50):
            if op.requested_by.startswith("schedule:") or op.kind is OpKind.DRAIN:
                continue
            if op.state not in (OpState.RUNNING, OpState.SUCCEEDED):
                continue
            if mine is None or mine & set(op.pools_locked):
                return op.created_at
        return None

    def _last_sleep_thread(self, name: str) -> str:
        rows = self.store.list_occurrences(schedule=name, states=("running", "done"))
        sleeps = [r for r in rows if r.action == "sleep" and r.announce_ts]
        return sleeps[-1].announce_ts if sleeps else ""

    def _close_row(
        self, sched: Schedule, occ: Occurrence, state: str, now: datetime, *, note: str, op_id: str = ""
    ) -> None:
        row = self._row(occ)
        done_at = None if state == "running" else now
        self.store.save_occurrence(replace(row, state=state, note=note, op_id=op_id, done_at=done_at))

    def _mark_done(self, sched: Schedule, occ: Occurrence, now: datetime) -> None:
        """Move the missed-run look-back past an occurrence the timer handled. Never beyond `now`: an
        occurrence run early ("run now") must not hide the events before its scheduled time."""
        if not isinstance(occ, Resleep):
            self.store.set_schedule_done(sched.name, min(occ.at, now))

    def _audit(self, actor: str, action: str, cluster: str, detail: str, op_id: str = "") -> None:
        self.store.audit(
            at=self.clock.now(), actor=actor, action=action, op_id=op_id, cluster=cluster, detail=detail
        )

    def all_schedules(self, *, cluster: str | None = None) -> builtins.list[Schedule]:
        """Every schedule, paused ones included, by name."""
        return self._schedules(cluster=cluster, enabled_only=False)


# --- helpers ------------------------------------------------------------------------------------------


def _refused(reply: str, *, key: str = "") -> ScheduleOutcome:
    return ScheduleOutcome(False, reply, key=key)


def _check_channel(channel: str) -> str:
    if channel.strip():
        return ""
    return "missing channel: announcements and progress need one, e.g. the channel you type the command in"


def _target_problem(cluster: str, target: ScheduleTarget, pools: Mapping[str, Pool]) -> str:
    known = ", ".join(sorted(pools)) or "none"
    unknown = [p for p in target.pools if p not in pools]
    if unknown:
        return f"unknown pool(s) {', '.join(unknown)} in {cluster}; pools: {known}"
    if target.kind == "cluster" and target.pools:
        return "a whole-cluster target takes no pools: use the pools target to name some"
    if target.kind == "pools" and not target.pools:
        return f"the pools target needs at least one pool; pools of {cluster}: {known}"
    if target.kind != "scale":
        return ""
    if len(target.pools) != 1 or target.size is None:
        return "the scale target needs exactly one pool and a size, e.g. pool web to 1"
    pool = pools[target.pools[0]]
    if target.size < 0 or (pool.max_size is not None and target.size > pool.max_size):
        return f"pool {pool.name} cannot be scaled to {target.size}: use 0 to {pool.max_size or 'its size'}"
    return ""


def _pool_set(target: ScheduleTarget, everything: set[str]) -> set[str]:
    """The pools a schedule acts on; "workloads" stands for the workloads of the cluster."""
    if target.kind == "cluster":
        return set(everything)
    if target.kind == "workloads":
        return {"(workloads)"}
    return set(target.pools)


def _already_asleep(target: ScheduleTarget, pools: Sequence[Pool]) -> bool:
    """True when every pool the sleep acts on is at (or below) its night-time size."""
    names = {p.name for p in pools} if target.kind == "cluster" else set(target.pools)
    size = target.size if target.kind == "scale" and target.size is not None else 0
    acted = [p for p in pools if p.name in names]
    return bool(acted) and all(p.desired <= size for p in acted)


_Prepared = _Run | tuple[OperationRequest, OperationPlan, Mapping[str, Sequence[str]]]
"""What a fire will start (a request, its plan, its pre-approvers' user groups), or why it starts nothing."""


@overload
def _sleep_request(
    sched: Schedule, *, thread_ts: str = "", on_behalf: tuple[str, ...] = ()
) -> OperationRequest: ...


@overload
def _sleep_request(
    sched: Schedule, *, thread_ts: str = "", on_behalf: tuple[str, ...] = (), pools: tuple[str, ...] | None
) -> OperationRequest | None: ...


def _sleep_request(
    sched: Schedule,
    *,
    thread_ts: str = "",
    on_behalf: tuple[str, ...] = (),
    pools: tuple[str, ...] | None = None,
) -> OperationRequest | None:
    """The sleep's request; `pools`: the pools this run acts on when some were left out of it
    (None: the schedule's target as it is; empty: nothing is left, no request)."""
    target = sched.target
    if pools is not None:
        if not pools:
            return None
        target = replace(target, kind="pools", pools=pools) if target.kind == "cluster" else target
        target = replace(target, pools=pools)
    if target.kind == "scale":
        return _request(
            OpKind.SCALE,
            Target(cluster=sched.cluster, pools=target.pools, size=target.size),
            sched,
            thread_ts,
            on_behalf=on_behalf,
        )
    return _request(
        OpKind.ZERO, Target(cluster=sched.cluster, pools=target.pools), sched, thread_ts, on_behalf=on_behalf
    )


def _request(
    kind: OpKind, target: Target, sched: Schedule, thread_ts: str, *, on_behalf: tuple[str, ...] = ()
) -> OperationRequest:
    return OperationRequest(
        kind=kind,
        target=target,
        requested_by=sched.requester,
        channel=sched.channel,
        thread_ts=thread_ts,
        reason=f"schedule {sched.name}",
        pre_approvers=sched.approvers if sched.approval_mode == "pre_approved" else (),
        # Its creator stands behind every run, whoever clicked "Run now" behind that one.
        on_behalf_of=tuple(dict.fromkeys(u for u in (sched.created_by, *on_behalf) if u)),
    )


def _force_problem(occ: Occurrence, state: str, needed: force.Needed | None, shown: str) -> str:
    """Why an "Approve with force" click approves nothing ("" when it may)."""
    if state in HANDLED:
        return f"the {occ.action} of {occ.local_date} is already {state}"
    if needed is None:
        return "this run needs no force now: there is nothing to approve"
    if force.digest(needed.scope) != shown:
        return (
            "the force scope has changed since that card was shown; nothing was approved. The "
            "announcement shows the current one"
        )
    return ""


def _forced(request: OperationRequest) -> OperationRequest:
    return replace(request, target=replace(request.target, force=True))


def _needs_force_text(what: str, name: str, needed: ForceScope) -> str:
    """Why a sleep that only force could run did not start, naming each Pod, owner and reason."""
    pods = "; ".join(f"{p.pod} (owner {p.unit}): {p.reason}" for p in needed.pods[:10])
    more = f"; ... ({len(needed.pods) - 10} more)" if len(needed.pods) > 10 else ""
    return (
        f"{what} did not start: Pods that only force removes hold it ({pods}{more}), and no approved "
        f"force scope covers {', '.join(needed.units)}. Nothing was changed. An approver approves force "
        f"on the announcement, or sets a standing one: `schedule force {name} "
        f"--force-scope={','.join(needed.units)}`; or leave the pool out of the run"
    )


def _resleep_of(row: StoredOccurrence) -> Occurrence:
    return Resleep(row.schedule, "sleep", date.fromisoformat(row.local_date), row.due_at)


def _title(sched: Schedule, occ: Occurrence) -> str:
    return EVENT_TITLE[event_kind(sched, occ)]


def _to_stored(
    spec: ScheduleSpec, target: ScheduleTarget, *, channel: str, mode: ApprovalMode, by: str, now: datetime
) -> StoredSchedule:
    return StoredSchedule(
        name=spec.name,
        cluster=spec.cluster,
        target=target.to_json(),
        sleep=schedule.format_weekly(spec.sleep),
        wake=schedule.format_weekly(spec.wake) if spec.wake else "",
        tz=spec.tz,
        lead_times=tuple(int(lead.total_seconds()) for lead in spec.lead_times),
        channel=channel.strip(),
        approval_mode=mode,
        approved_by="",
        enabled=True,
        exceptions=tuple(sorted(d.isoformat() for d in spec.exceptions)),
        days_off=spec.days_off_rule.to_json() if spec.days_off_rule else {},
        created_by=by,
        created_at=now,
        active_since=now,
    )


def _from_stored(s: StoredSchedule) -> Schedule:
    spec = ScheduleSpec(
        name=s.name,
        cluster=s.cluster,
        sleep=schedule.parse_weekly(s.sleep),
        wake=schedule.parse_weekly(s.wake) if s.wake else None,
        tz=s.tz,
        lead_times=tuple(timedelta(seconds=seconds) for seconds in s.lead_times),
        exceptions=frozenset(date.fromisoformat(d) for d in s.exceptions),
        days_off_rule=DaysOffRule.from_json(dict(s.days_off)) if s.days_off else DaysOffRule(),
    )
    mode: ApprovalMode = "pre_approved" if s.approval_mode == "pre_approved" else "per_run"
    return Schedule(
        spec=spec,
        target=ScheduleTarget.from_json(s.target),
        channel=s.channel,
        approval_mode=mode,
        enabled=s.enabled,
        created_by=s.created_by,
        created_at=s.created_at,
        active_since=s.active_since,
        last_done_at=s.last_done_at,
        fingerprint=schedule_fingerprint(s),
    )

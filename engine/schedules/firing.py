"""The timer's side: what is due when, running it (`due`, `next_wakeups`, `run_due`, the catch-up at
`startup`), firing one occurrence through `Operations.request`, the re-sleep after a temporary wake
(`wake_for`), and the report when a scheduled operation finishes."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from engine.domain.announcement import Announcement
from engine.domain.clock import Clock
from engine.domain.force_scope import ForceScope
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    ProgressEvent,
    Target,
)
from engine.domain.reasons import NoScheduleToResleep
from engine.operations.service import Operations, UserError
from engine.pools.base import Pool
from engine.schedules.access import ScheduleAccess
from engine.schedules.announcing import Announcing
from engine.schedules.book import ScheduleBook
from engine.schedules.core import force, one_off, recurrence
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import (
    RETRY_AFTER,
    UPCOMING_PER_SCHEDULE,
    due_announcements,
    due_fires,
    due_resleeps,
)
from engine.schedules.core.model import (
    HANDLED,
    Due,
    Resleep,
    Schedule,
    ScheduleOutcome,
    ScheduleTarget,
    refused,
)
from engine.schedules.core.requests import forced, sleep_request, wake_request
from engine.schedules.core.spec import Occurrence, Override, ScheduleError
from engine.schedules.core.text import cap, event_title, wake_report
from engine.schedules.force_records import ForceRecords


@dataclass(frozen=True, slots=True)
class _Run:
    """What a fire did, or why it started nothing: the occurrence's state and the reply."""

    ok: bool
    state: str
    reply: str
    operation: Operation | None = None


def _already_asleep(target: ScheduleTarget, pools: Sequence[Pool]) -> bool:
    """True when every pool the sleep acts on is at (or below) its night-time size."""
    names = {p.name for p in pools} if target.kind == "cluster" else set(target.pools)
    size = target.size if target.kind == "scale" and target.size is not None else 0
    acted = [p for p in pools if p.name in names]
    return bool(acted) and all(p.desired <= size for p in acted)


_Prepared = _Run | tuple[OperationRequest, OperationPlan, Mapping[str, Sequence[str]]]
"""What a fire will start (a request, its plan, its pre-approvers' user groups), or why it starts nothing."""


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


class Firing:
    """What is due, firing it, the catch-up at start-up, temporary wakes and finished runs."""

    def __init__(
        self,
        book: ScheduleBook,
        access: ScheduleAccess,
        ops: Operations,
        *,
        clock: Clock,
        force: ForceRecords,
        announcing: Announcing,
        grace: timedelta,
    ) -> None:
        self.book = book
        self.access = access
        self.ops = ops
        self.clock = clock
        self.force = force
        self.announcing = announcing
        self.grace = grace
        """A missed sleep this late still runs at start-up; beyond it, it is announced as missed."""

    def due(self, now: datetime) -> builtins.list[Due]:
        """What the timer must do at `now`, in time order."""
        found: list[Due] = []
        for sched in self.book.schedules():
            found += self._due_fires(sched, now)
            found += self._due_resleeps(sched, now)
            found += self._due_announcements(sched, now)
        return sorted(found, key=lambda item: (item.at, item.occurrence.key))

    def next_wakeups(self, now: datetime) -> builtins.list[datetime]:
        """The future instants at which something becomes due: the timer arms one-shot jobs for them.
        Something still due now (a tick that failed: the API server was down) is retried in a minute."""
        instants: set[datetime] = {now + RETRY_AFTER} if self.due(now) else set()
        for sched in self.book.schedules():
            for occ, at in self.book.upcoming(sched, now, limit=UPCOMING_PER_SCHEDULE):
                instants.add(at)
                if occ.action == "sleep":
                    leads = recurrence.announcement_times(occ, sched.spec.lead_times, at=at)
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

    # -- firing ----------------------------------------------------------------------------------

    def fire(self, key: str, now: datetime, *, by: str = "") -> ScheduleOutcome:
        """Run one occurrence now, once: a second fire of the same key is a no-op. The operation is
        created inside the same write transaction that marks the key, so a crash leaves neither.

        The cluster is listed and the plan made before that transaction (a slow API server must not
        hold the database); the transaction re-checks the key and starts what was planned. `by` is
        whoever clicked "Run now": the run is made on their behalf too."""
        found = self.book.resolve(key)
        prepared = self._prepare(found[0], found[1], by) if not isinstance(found, str) else None
        with self.book.store.transaction():
            found = self.book.resolve(key)
            if isinstance(found, str):
                return refused(found, key=key)
            sched, occ = found
            row = self.book.row(occ)
            what = f"the {event_title(sched, occ).lower()} of {sched.cluster}"
            if row.state in HANDLED:
                return ScheduleOutcome(True, f"{cap(what)} is already {row.state}; nothing to do", key=key)
            if not sched.enabled:
                return refused(f"schedule {sched.name} is paused; resume it first", key=key)
            effective = one_off.effective_time(occ, self.book.overrides(sched.name))
            if effective is None:
                self.book.close_row(occ, "skipped", now, note="skipped")
                self.book.mark_done(sched, occ, now)
                return ScheduleOutcome(True, f"{cap(what)} is skipped; nothing runs", changed=True, key=key)
            assert prepared is not None
            run = self._start(prepared, what, thread_ts=row.announce_ts)
            op_id = run.operation.id if run.operation else ""
            self.book.close_row(occ, run.state, now, note=run.reply, op_id=op_id)
            self.book.mark_done(sched, occ, now)
            self.book.audit(
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
        with self.book.store.transaction():
            rows = self.book.store.list_occurrences(op_id=op.id)
            for row in rows:
                if row.state == "running":
                    self.book.store.save_occurrence(replace(row, state="done", done_at=now))
        if op.kind is not OpKind.WAKE or not rows:
            return None
        sched = self.book.load(rows[0].schedule)
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
        problem = self.access.check_cluster(cluster, by, groups)
        if problem:
            self.book.audit(by, "refused_schedule_wake_for", cluster[:63], problem)
            return refused(problem)
        now = self.clock.now()
        scheds = self.book.schedules(cluster=cluster)
        if not scheds:
            return replace(
                refused(
                    f"{cluster} has no active schedule to say when it sleeps again: wake it, and put it "
                    "to sleep again, by hand"
                ),
                reason=NoScheduleToResleep(cluster),
            )
        try:
            resleeps = [(s, one_off.temporary_wake(now, duration, s.spec)) for s in scheds]
        except ScheduleError as exc:
            return refused(str(exc))
        seconds = int(duration.total_seconds())
        target = Target(cluster=cluster, wake_for_seconds=seconds)
        request = OperationRequest(kind=OpKind.WAKE, target=target, requested_by=by, channel=channel)
        out = self.ops.request(request, groups=groups)
        if not out.ok:
            return refused(out.reply)
        with self.book.store.transaction():
            notes = [self._hold(s, now, at, by) for s, at in resleeps]
            self.book.audit(by, "schedule_wake_for", cluster, f"for {duration}: " + " ".join(notes))
        first = min(at for _, at in resleeps)
        return ScheduleOutcome(
            True, f"{out.reply}. {' '.join(notes)}", changed=True, effective=first, operation=out.operation
        )

    # -- internals: what is due ------------------------------------------------------------------

    def _due_fires(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        return due_fires(
            sched,
            now,
            grace=self.grace,
            manual_action_at=self.book.manual_action_at(sched),
            handled=self.book.handled_keys(sched.name),
            overrides=self.book.overrides(sched.name),
        )

    def _due_resleeps(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        return due_resleeps(
            sched,
            now,
            grace=self.grace,
            resleeps=self.book.resleeps(sched.name),
            overrides=self.book.overrides(sched.name),
        )

    def _due_announcements(self, sched: Schedule, now: datetime) -> builtins.list[Due]:
        if not sched.spec.lead_times:
            return []
        coming = self.book.upcoming(sched, now, limit=UPCOMING_PER_SCHEDULE)
        announced: dict[str, tuple[datetime | None, float | None]] = {}
        for occ, _ in coming:
            row = self.book.store.get_occurrence(occ.key)
            if row is not None:
                announced[occ.key] = (row.announced_for, row.announced_lead)
        return due_announcements(sched, now, coming=coming, announced=announced)

    def _handle(self, item: Due, now: datetime) -> ScheduleOutcome:
        if item.what == "announce" and item.lead is not None:
            note = self.announcing.announce(item.occurrence, item.lead, now)
            return ScheduleOutcome(
                True, note.text, changed=True, key=note.key, effective=note.effective, announcement=note
            )
        if item.what == "fire":
            fired = self.fire(item.occurrence.key, now)
            late = item.decision is not None and item.decision.verdict == "run_late"
            return replace(
                fired,
                decision=item.decision,
                announcement=self.announcing.late_announcement(item) if late and fired.changed else None,
            )
        return self._close_due(item, now)

    def _close_due(self, item: Due, now: datetime) -> ScheduleOutcome:
        """Missed beyond the grace (announced) or nothing to do (skipped, superseded, a manual action won)."""
        sched = self.book.require(item.occurrence.schedule)
        reason = item.decision.reason if item.decision else ""
        skipped = one_off.effective_time(item.occurrence, self.book.overrides(sched.name)) is None
        state = "skipped" if skipped else "missed"
        with self.book.store.transaction():
            if self.book.row(item.occurrence).state in HANDLED:
                return ScheduleOutcome(True, reason, key=item.occurrence.key, decision=item.decision)
            self.book.close_row(item.occurrence, state, now, note=reason)
            self.book.mark_done(sched, item.occurrence, now)
            if item.what == "missed":
                self.book.audit(
                    "scalebot", "schedule_missed", sched.cluster, f"{item.occurrence.key}: {reason}"
                )
        note = None
        if item.what == "missed":
            title = event_title(sched, item.occurrence)
            note = self.announcing.note(
                sched, item.occurrence, "missed", f"{title} of {sched.cluster} did not run: {reason}."
            )
        return ScheduleOutcome(
            True, reason, changed=True, key=item.occurrence.key, announcement=note, decision=item.decision
        )

    # -- internals: running ----------------------------------------------------------------------

    def _prepare(self, sched: Schedule, occ: Occurrence, by: str) -> _Prepared:
        """What a fire will do, from a cluster listing and a plan: taken outside any transaction."""
        what = f"the {event_title(sched, occ).lower()} of {sched.cluster}"
        on_behalf = (by,) if by else ()
        if occ.action == "wake":
            asleep = self.book.asleep_pools(sched.cluster)
            workloads_asleep = bool(self.book.store.workload_records(sched.cluster))
            wake = wake_request(sched, asleep, workloads_asleep=workloads_asleep, on_behalf=on_behalf)
            if wake is None:
                return _Run(True, "done", f"{cap(what)}: nothing to do, {sched.cluster} is already awake")
            request = wake
        else:
            if sched.target.kind == "workloads" and self.book.store.workload_records(sched.cluster):
                return _Run(True, "done", f"{cap(what)}: nothing to do, the workloads are asleep already")
            if _already_asleep(sched.target, self.book.pools(sched.cluster)):
                return _Run(True, "done", f"{cap(what)}: nothing to do, {sched.target.describe()} already")
            excluded = self.force.excluded(sched, occ.key)
            sleep = sleep_request(sched, on_behalf=on_behalf, pools=self.force.run_pools(sched, excluded))
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
        forced_request = forced(request)
        forced_plan = self.ops.plan(forced_request)
        needed = force.dead_end(plain, forced_plan)
        if needed is None:
            return request, plain, self.ops.pre_approver_groups(request)
        approved = self.force.approved_force(sched, occ.key, needed)
        if approved is None:
            self.book.audit(
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
        planned = replace(forced_plan, force_scope=replace(scope, pods=needed.pods))
        return forced_request, planned, self.ops.pre_approver_groups(forced_request)

    def _start(self, prepared: _Prepared, what: str, *, thread_ts: str) -> _Run:
        if isinstance(prepared, _Run):
            return prepared
        request, planned, groups = prepared
        name = request.requested_by.removeprefix("schedule:")
        if request.kind is OpKind.WAKE:
            thread_ts = thread_ts or self.book.last_sleep_thread(name)
        out = self.ops.request(
            replace(request, thread_ts=thread_ts), planned=planned, pre_approver_groups=groups
        )
        if not out.ok:
            return _Run(False, "missed", f"{cap(what)} could not start: {out.reply}")
        return _Run(True, "running", f"{cap(what)} ({name}): {out.reply}", out.operation)

    def _settle_running(self, now: datetime) -> None:
        """Occurrences whose operation ended while scalebot was down are done."""
        for row in self.book.store.list_occurrences(states=("running",)):
            op = self.ops.get(row.op_id) if row.op_id else None
            if op is None or op.state.is_terminal:
                self.book.store.save_occurrence(replace(row, state="done", done_at=now))

    def _hold(self, sched: Schedule, now: datetime, resleep_at: datetime, by: str) -> str:
        """Skip the scheduled sleeps inside a temporary wake and record its re-sleep."""
        tz = sched.spec.tz
        until = schedule.describe(resleep_at, tz)
        for occ in one_off.held_sleeps(sched.spec, woke_at=now, resleep_at=resleep_at):
            note = f"The sleep of {schedule.describe(occ, tz)} is held by a temporary wake until {until}."
            self.book.save_override(sched, Override(occ.key, "skip", None, by, note), now)
            self.book.close_row(occ, "skipped", now, note=note)
        following = recurrence.next_occurrence(sched.spec, "sleep", after=now)
        if following is not None and following.at == resleep_at:
            return f"{sched.name}: back to sleep at the scheduled sleep, {until}."
        local = resleep_at.astimezone(schedule.parse_zone(tz)).date()
        resleep = Resleep(sched.name, "sleep", local, resleep_at)
        self.book.store.save_occurrence(self.book.row(resleep))
        return (
            f"{sched.name}: back to sleep {until} ({schedule.in_words(resleep_at - now)}), announced before."
        )

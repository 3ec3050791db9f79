"""The schedule book: schedules and their occurrences as SQLite holds them (loading, with days off
resolved and pre-approvers and standing force attached), what comes next, the cluster facts the
parts read (pools, what is asleep, the latest manual action), the writes every part shares (an
occurrence row closed, an override saved) and the audit.

Every other part of `Schedules` reads and writes through it; it calls none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import date, datetime
from typing import cast

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.force_scope import ForceScope
from engine.domain.operation import OpKind, OpState
from engine.operations.service import Operations, UserError
from engine.pools.base import Pool
from engine.schedules.calendars import Calendars
from engine.schedules.core import force, recurrence
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import occurrence_on, upcoming
from engine.schedules.core.model import HANDLED, Resleep, Schedule
from engine.schedules.core.spec import Occurrence, Override
from engine.schedules.stored import resleep_of, schedule_of
from engine.store.database import Store
from engine.store.schedules import ForceDecision, StoredOccurrence, StoredOverride, StoredSchedule


class ScheduleBook:
    """Schedules and occurrences as stored, what comes next, the shared writes and the audit."""

    def __init__(self, store: Store, ops: Operations, clock: Clock, calendars: Calendars) -> None:
        self.store = store
        self.ops = ops
        self.clock = clock
        self.calendars = calendars
        """Public holidays (always) and the configuration's calendar files, by name."""

    # -- loading ---------------------------------------------------------------------------------

    def load(self, name: str) -> Schedule | None:
        stored = self.store.get_schedule(name)
        return self._with_approvers(self.from_stored(stored)) if stored else None

    def require(self, name: str) -> Schedule:
        sched = self.load(name)
        if sched is None:
            raise UserError(f'no schedule "{name[:63]}"')
        return sched

    def schedules(self, *, cluster: str | None = None, enabled_only: bool = True) -> list[Schedule]:
        stored = self.store.list_schedules(cluster=cluster)
        return [self._with_approvers(self.from_stored(s)) for s in stored if s.enabled or not enabled_only]

    def from_stored(self, stored: StoredSchedule) -> Schedule:
        """A stored schedule with its days off resolved around its latest activity (not the clock:
        the timer's paths read none), so the years it looks at move on as it runs."""
        sched = schedule_of(stored)
        rule = sched.spec.days_off_rule
        if not rule:
            return sched
        around = (stored.last_done_at or stored.active_since).year
        days_off = self.calendars.days_off(rule, around=around)
        return replace(sched, spec=replace(sched.spec, days_off=days_off))

    def standing_force(self, sched: Schedule) -> list[ForceDecision]:
        """The standing force scope's approvals that still bind: a changed target voids them."""
        bound = force.binding(sched.cluster, sched.target)
        rows = self.store.force_decisions(sched.name, key="")
        return [d for d in rows if d.kind == force.STANDING and d.binding == bound]

    def _with_approvers(self, sched: Schedule) -> Schedule:
        standing = self.standing_force(sched)
        if standing:
            scope = ForceScope.from_json(standing[-1].scope.get("scope") or {})
            sched = replace(sched, force_units=scope.units, force_by=tuple(d.user for d in standing))
        if sched.approval_mode != "pre_approved":
            return sched
        current = [
            a.user for a in self.store.schedule_approvals(sched.name) if a.fingerprint == sched.fingerprint
        ]
        return replace(sched, approvers=tuple(dict.fromkeys(current)))

    # -- occurrences -----------------------------------------------------------------------------

    def overrides(self, name: str) -> list[Override]:
        return [
            Override(o.key, cast(schedule.OverrideKind, o.kind), o.until, o.by, o.note)
            for o in self.store.overrides(schedule=name)
        ]

    def handled_keys(self, name: str) -> frozenset[str]:
        return frozenset(r.key for r in self.store.list_occurrences(schedule=name, states=tuple(HANDLED)))

    def resleeps(self, name: str) -> list[Occurrence]:
        rows = self.store.list_occurrences(schedule=name, states=("pending", "announced"))
        return [resleep_of(r) for r in rows if r.kind == "resleep"]

    def row(self, occ: Occurrence) -> StoredOccurrence:
        """The occurrence's row as stored, or a pending one not saved yet."""
        existing = self.store.get_occurrence(occ.key)
        if existing is not None:
            return existing
        kind = "resleep" if isinstance(occ, Resleep) else "scheduled"
        return StoredOccurrence(
            occ.key, occ.schedule, occ.action, occ.local_date.isoformat(), occ.at, "pending", kind
        )

    def resolve(
        self, key: str, *, named: Callable[[str], Schedule | None] | None = None
    ) -> tuple[Schedule, Occurrence] | str:
        """The schedule and occurrence a button's key names, or why there is none. `named` looks the
        schedule up (`ScheduleAccess` passes its role check: the answer of an unknown schedule to
        someone without a role on its cluster); by default, `load`."""
        parts = key.rsplit(":", 2)
        sched = (named or self.load)(parts[0]) if len(parts) == 3 else None
        if sched is None:
            return f'unknown or deleted schedule in "{key[:80]}"; the list of schedules shows them'
        occ: Occurrence | None = None
        if parts[2].startswith("resleep-"):
            row = self.store.get_occurrence(key)
            occ = resleep_of(row) if row is not None and row.kind == "resleep" else None
        elif parts[2] in ("sleep", "wake"):
            try:
                day = date.fromisoformat(parts[1])
            except ValueError:
                return f'unknown occurrence "{key[:80]}"'
            occ = occurrence_on(sched.spec, day, parts[2])
        if occ is None:
            return f"schedule {sched.name} has no such event ({key[:80]})"
        return sched, occ

    def upcoming(self, sched: Schedule, now: datetime, *, limit: int) -> list[tuple[Occurrence, datetime]]:
        return upcoming(
            sched,
            now,
            limit=limit,
            overrides=self.overrides(sched.name),
            handled=self.handled_keys(sched.name),
            resleeps=self.resleeps(sched.name),
        )

    def last_sleep_thread(self, name: str) -> str:
        rows = self.store.list_occurrences(schedule=name, states=("running", "done"))
        sleeps = [r for r in rows if r.action == "sleep" and r.announce_ts]
        return sleeps[-1].announce_ts if sleeps else ""

    # -- what comes next -------------------------------------------------------------------------

    def next_events(
        self, now: datetime, *, limit: int = 10, cluster: str | None = None
    ) -> list[tuple[Occurrence, datetime]]:
        """The next sleeps and wakes (with their effective times) across clusters, soonest first."""
        events: list[tuple[Occurrence, datetime]] = []
        for sched in self.schedules(cluster=cluster):
            events += self.upcoming(sched, now, limit=limit)
        return sorted(events, key=lambda pair: (pair[1], pair[0].key))[:limit]

    def next_event(self, cluster: str, now: datetime) -> NextEvent | None:
        """For `/scale status` and the Home tab: the cluster's next sleep or wake, at its effective time."""
        events = self.next_events(now, limit=1, cluster=cluster)
        if not events:
            return None
        occ, at = events[0]
        sched = self.load(occ.schedule)
        if sched is None:
            return NextEvent(occ.action, occ.schedule, at, "UTC")
        skipped = recurrence.days_off_between(sched.spec, start=now, end=at)
        reasons = tuple(dict.fromkeys(day_off.reason() for _, day_off in skipped))
        return NextEvent(occ.action, occ.schedule, at, sched.spec.tz, days_off=reasons)

    def days_off_problems(self) -> list[str]:
        """Schedules whose days off cannot be followed now (their calendar left the configuration,
        the holiday library dropped their region), each with what to do: `scalebot run` logs them
        at start, since a schedule that silently lost its days off would sleep through a freeze."""
        problems: list[str] = []
        for sched in self.schedules(enabled_only=False):
            problem = self.calendars.check(sched.spec.days_off_rule) if sched.spec.days_off_rule else ""
            if problem:
                problems.append(
                    f"schedule {sched.name} ({sched.spec.days_off_rule.describe()}): {problem}; until then "
                    "it runs without those days off (or delete the schedule)"
                )
        return problems

    def days_off_until(
        self, now: datetime, until: datetime, *, cluster: str | None = None
    ) -> list[tuple[Occurrence, str]]:
        """The sleeps and wakes a day off suppresses between `now` and `until`, each with its reason
        ("Stays asleep: Whit Monday (DE-BY)"), soonest first: `schedule next` shows them."""
        found: list[tuple[Occurrence, str]] = []
        for sched in self.schedules(cluster=cluster):
            found += [
                (occ, day_off.reason())
                for occ, day_off in recurrence.days_off_between(sched.spec, start=now, end=until)
            ]
        return sorted(found, key=lambda pair: (pair[0].at, pair[0].key))

    def all_schedules(self, *, cluster: str | None = None) -> list[Schedule]:
        """Every schedule, paused ones included, by name."""
        return self.schedules(cluster=cluster, enabled_only=False)

    # -- cluster facts ---------------------------------------------------------------------------

    def pools(self, cluster: str) -> list[Pool]:
        return self.ops.handles[cluster].pools.list_pools()

    def asleep_pools(self, cluster: str) -> set[str]:
        """Pools with sizes to restore: in SQLite, else on the pool objects (a lost database)."""
        recorded = {r.pool for r in self.store.restore_records(cluster)}
        return recorded | {p.name for p in self.pools(cluster) if p.restore is not None}

    def manual_action_at(self, sched: Schedule) -> datetime | None:
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

    # -- shared writes and the audit -------------------------------------------------------------

    def close_row(self, occ: Occurrence, state: str, now: datetime, *, note: str, op_id: str = "") -> None:
        row = self.row(occ)
        done_at = None if state == "running" else now
        self.store.save_occurrence(replace(row, state=state, note=note, op_id=op_id, done_at=done_at))

    def mark_done(self, sched: Schedule, occ: Occurrence, now: datetime) -> None:
        """Move the missed-run look-back past an occurrence the timer handled. Never beyond `now`: an
        occurrence run early ("run now") must not hide the events before its scheduled time."""
        if not isinstance(occ, Resleep):
            self.store.set_schedule_done(sched.name, min(occ.at, now))

    def save_override(self, sched: Schedule, override: Override, now: datetime) -> None:
        self.store.add_override(
            StoredOverride(
                override.key, sched.name, override.kind, override.until, override.by, now, override.note
            )
        )
        self.audit(
            override.by, f"schedule_{override.kind}", sched.cluster, f"{override.key}: {override.note}"
        )

    def audit(self, actor: str, action: str, cluster: str, detail: str, op_id: str = "") -> None:
        self.store.audit(
            at=self.clock.now(), actor=actor, action=action, op_id=op_id, cluster=cluster, detail=detail
        )

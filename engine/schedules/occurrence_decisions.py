"""Decisions people take on one announced occurrence: postpone (by a delay or to an instant), skip,
run now; each one authorised, audited and saved as an override in one transaction."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from engine.domain.announcement import DecisionNote
from engine.domain.clock import Clock
from engine.schedules.access import ScheduleAccess
from engine.schedules.announcing import Announcing
from engine.schedules.book import ScheduleBook
from engine.schedules.core import one_off
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import reached_lead
from engine.schedules.core.model import (
    HANDLED,
    Schedule,
    ScheduleOutcome,
    refused,
)
from engine.schedules.core.spec import Occurrence, Override, ScheduleError
from engine.schedules.firing import Firing
from engine.store.schedules import StoredOccurrence


class OccurrenceDecisions:
    """Postpone, skip and run now on one occurrence."""

    def __init__(
        self, book: ScheduleBook, access: ScheduleAccess, clock: Clock, announcing: Announcing, firing: Firing
    ) -> None:
        self.book = book
        self.access = access
        self.clock = clock
        self.announcing = announcing
        self.firing = firing

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
            lambda s, occ, ovs, now: one_off.postpone(occ, by=by, delta=delta, spec=s.spec, overrides=ovs),
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
            lambda s, occ, ovs, now: one_off.postpone_until(
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
            lambda s, occ, ovs, now: one_off.skip(occ, by=by, spec=s.spec),
            channel=channel,
        )

    def run_now(self, key: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        decided = self._decide(
            key,
            by,
            groups,
            "run_now",
            lambda s, occ, ovs, now: one_off.run_now(
                occ,
                by=by,
                now=now,
                spec=s.spec,
                announced=self.book.row(occ).state == "announced",
                overrides=ovs,
            ),
            channel=channel,
        )
        if not decided.ok:
            return decided
        fired = self.firing.fire(key, self.clock.now(), by=by)
        return replace(
            fired, reply=f"{decided.reply} {fired.reply}", announcement=decided.announcement, decided_by=by
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
        with self.book.store.transaction():
            found = self.access.clicked(key, by, channel, verb, groups)
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            refusal = self.access.authorise(sched.cluster, by, groups, verb, detail=key)
            if refusal:
                return refused(refusal, key=key)
            row = self.book.row(occ)
            if row.state in HANDLED:
                return refused(
                    f"the {occ.action} of {schedule.describe(occ, sched.spec.tz)} is already {row.state}",
                    key=key,
                )
            overrides = self.book.overrides(sched.name)
            try:
                override = make(sched, occ, overrides, now)
            except ScheduleError as exc:
                self.book.audit(by, f"refused_schedule_{verb}", sched.cluster, f"{key}: {exc}")
                return refused(str(exc), key=key)
            self.book.save_override(sched, override, now)
            effective = one_off.effective_time(occ, [*overrides, override])
            row = self._after_decision(sched, row, effective, now, override)
        decided = DecisionNote(by, override.note)
        note = self.announcing.decided_announcement(
            sched, occ, row, effective=effective, now=now, decision=decided
        )
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
        self.book.store.save_occurrence(new)
        return new

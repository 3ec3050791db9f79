"""Force decisions: what a scheduled run would need forced (announced ahead), approving it for one
run or standing (`approve_force`), excluding a pool from a run (`exclude_pool`), the schedule's
force scope (`set_force_scope`); never implied."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engine.domain.announcement import (
    DecisionNote,
)
from engine.domain.clock import Clock
from engine.schedules.access import ScheduleAccess
from engine.schedules.announcing import Announcing
from engine.schedules.book import ScheduleBook
from engine.schedules.core import force, one_off
from engine.schedules.core.model import (
    HANDLED,
    Schedule,
    ScheduleOutcome,
    refused,
)
from engine.schedules.core.spec import Occurrence
from engine.schedules.force_records import ForceRecords
from engine.store.schedules import ForceDecision


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


class ForceDecisions:
    """Force approved per run or standing, pools excluded, the standing force scope."""

    def __init__(
        self,
        book: ScheduleBook,
        access: ScheduleAccess,
        clock: Clock,
        force: ForceRecords,
        announcing: Announcing,
    ) -> None:
        self.book = book
        self.access = access
        self.clock = clock
        self.force = force
        self.announcing = announcing

    # -- force: announced ahead, approved per run or standing, never implied ---------------------

    def approve_force(
        self, key: str, shown: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """An approver's "Approve with force" on an announcement: records that they approve this run
        forcing exactly the scope the card showed (`shown`, its digest). Approvers only, by the
        same rule as a pre-approval (not the schedule's creator unless self-approval is allowed);
        a card whose scope has changed since approves nothing."""
        now = self.clock.now()
        with self.book.store.transaction():
            found = self.access.clicked(key, by, channel, "force_approve", groups)
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            why = self.access.force_refusal(sched, by, groups)
            if why:
                self.book.audit(by, "refused_schedule_force_approve", sched.cluster, f"{key}: {why}")
                return refused(why, key=key)
            row = self.book.row(occ)
            needed = self.force.needed(sched, key)
            problem = _force_problem(occ, row.state, needed, shown)
            if problem or needed is None:
                self.book.audit(by, "refused_schedule_force_approve", sched.cluster, f"{key}: {problem}")
                return refused(problem, key=key)
            self.book.store.save_force_decision(
                ForceDecision(sched.name, key, force.APPROVED, by, "", shown, "", needed.to_json(), now)
            )
            units = ", ".join(needed.scope.units)
            self.book.audit(
                by, "schedule_force_approve", sched.cluster, f"{key}: force for {units} [{shown}]"
            )
        note = f"Force approved for this run, for {units}"
        return self._decision_outcome(sched, occ, by, note, now)

    def exclude_pool(
        self, key: str, pool: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Leave one pool out of this run (the others run): an operator's decision, like a skip;
        only a pool the announcement offered (one holding Pods only force removes)."""
        now = self.clock.now()
        with self.book.store.transaction():
            found = self.access.clicked(key, by, channel, "exclude", groups)
            if isinstance(found, ScheduleOutcome):
                return found
            sched, occ = found
            refusal = self.access.authorise(sched.cluster, by, groups, "exclude", detail=f"{key} {pool[:63]}")
            if refusal:
                return refused(refusal, key=key)
            notice = self.force.notice(sched, key, roles=False)  # only what it offers: no look-up
            if self.book.row(occ).state in HANDLED or notice is None or pool not in notice.excludable:
                offered = ", ".join(notice.excludable) if notice else ""
                choice = f"the pools offered are {offered}" if offered else "none is offered now"
                why = f"pool {pool[:63]} cannot be left out of {key[:80]}: {choice}"
                self.book.audit(by, "refused_schedule_exclude", sched.cluster, why)
                return refused(why, key=key)
            self.book.store.save_force_decision(
                ForceDecision(sched.name, key, force.EXCLUDED, by, pool, "", "", {}, now)
            )
            self.book.audit(by, "schedule_exclude", sched.cluster, f"{key}: pool {pool} left out of this run")
        note = f"Pool {pool} is left out of this run; the other pools run"
        return self._decision_outcome(sched, occ, by, note, now)

    def set_force_scope(
        self, name: str, units: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """`schedule force NAME --force-scope=Kind/ns/name,…`: an approver approves a standing force
        scope for the schedule's sleeps (the same rule as a pre-approval; a second approver of the
        same scope adds to its quorum, a different scope replaces it). `none` removes it (an
        operator may: that only narrows what runs). Bound to the schedule's targets."""
        sched = self.access.visible(name, by, groups, "force_scope")
        if sched is None:
            return refused(self.access.unknown_schedule(name, by, groups))
        misplaced = self.access.misplaced(sched.cluster, by, channel, "force_scope")
        if misplaced is not None:
            return misplaced
        now = self.clock.now()
        if units.strip().lower() in force.CLEAR_WORDS:
            refusal = self.access.authorise(sched.cluster, by, groups, "force_scope", detail=name)
            if refusal:
                return refused(refusal)
            with self.book.store.transaction():
                gone = self.book.store.remove_force_decisions(name, key="", kind=force.STANDING)
                self.book.audit(by, "schedule_force_scope_removed", sched.cluster, name)
            if not gone:
                return refused(f"schedule {name} has no standing force scope; there is nothing to remove")
            return ScheduleOutcome(
                True, f"Removed the standing force scope of schedule {name}.", changed=True
            )
        try:
            scope = force.parse_units(units)
        except force.ForceScopeError as exc:
            return refused(str(exc))
        why = self.access.force_refusal(sched, by, groups)
        if why:
            self.book.audit(by, "refused_schedule_force_scope", sched.cluster, f"{name}: {why}")
            return refused(why)
        digest, bound = force.digest(scope), force.binding(sched.cluster, sched.target)
        with self.book.store.transaction():
            current = [d for d in self.book.standing_force(sched) if d.digest == digest]
            if not current:  # another scope (or none): this approval starts a new one
                self.book.store.remove_force_decisions(name, key="", kind=force.STANDING)
            self.book.store.save_force_decision(
                ForceDecision(
                    name, "", force.STANDING, by, "", digest, bound, {"scope": scope.to_json()}, now
                )
            )
            self.book.audit(
                by, "schedule_force_scope", sched.cluster, f"{name}: {', '.join(scope.units)} [{digest}]"
            )
            sched = self.book.require(name)
        approvers = ", ".join(sched.force_by)
        return ScheduleOutcome(
            True,
            f"Standing force scope of schedule {name}: {', '.join(scope.units)} (approved by {approvers}). "
            "Its sleeps use it only when their plan needs force, and only within it.",
            changed=True,
        )

    def _decision_outcome(
        self, sched: Schedule, occ: Occurrence, by: str, note: str, now: datetime
    ) -> ScheduleOutcome:
        row = self.book.row(occ)
        effective = one_off.effective_time(occ, self.book.overrides(sched.name))
        decided = DecisionNote(by, note)
        told = self.announcing.decided_announcement(
            sched, occ, row, effective=effective, now=now, decision=decided
        )
        return ScheduleOutcome(
            True, note, changed=True, key=occ.key, effective=effective, announcement=told, decided_by=by
        )

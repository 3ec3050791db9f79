"""Force decisions: what a scheduled run would need forced (announced ahead), approving it for one
run or standing (`approve_force`), excluding a pool from a run (`exclude_pool`), the schedule's
force scope (`set_force_scope`); never implied."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from engine.domain.announcement import (
    DecisionNote,
    ForceNotice,
)
from engine.domain.force_scope import ForceScope
from engine.domain.operation import OperationPlan
from engine.kube.errors import KubeError
from engine.operations import policy
from engine.operations.service import UserError
from engine.schedules import force, one_off
from engine.schedules.announcing import Announcing
from engine.schedules.base import (
    _forced,
    _refused,
    _sleep_request,
)
from engine.schedules.model import (
    HANDLED,
    Schedule,
    ScheduleOutcome,
)
from engine.schedules.spec import Occurrence
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


class ForceDecisions(Announcing):
    """Force announced ahead, approved per run or standing, pools excluded, the force scope."""

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
            found = self._clicked(key, by, channel, "force_approve", groups)
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
            found = self._clicked(key, by, channel, "exclude", groups)
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
        sched = self._visible(name, by, groups, "force_scope")
        if sched is None:
            return _refused(self._unknown_schedule(name, by, groups))
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
        self, key: str, by: str, channel: str, verb: str, groups: Sequence[str]
    ) -> tuple[Schedule, Occurrence] | ScheduleOutcome:
        """The schedule and occurrence a button names, or the refusal: unknown (or on a cluster the
        clicker has no role on: the same answer), or clicked where the cluster is not operated from."""
        found = self._resolve(key, by=by, groups=groups, verb=verb)
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
        effective = one_off.effective_time(occ, self._overrides(sched.name))
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

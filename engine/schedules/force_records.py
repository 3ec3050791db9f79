"""Force on scheduled sleeps, as recorded: what a run needs forced (planned ahead, outside any
transaction, and recorded with its announcement), the pools left out of a run, what its announcement
says about force, and the approved scope that covers a run. The decisions themselves (approve, exclude,
a standing scope) are `engine.schedules.force_decisions`'; the rules, `engine.schedules.core.force`'s."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engine.domain.announcement import ForceNotice
from engine.domain.force_scope import ForceScope
from engine.domain.operation import OperationPlan
from engine.kube.errors import KubeError
from engine.operations.service import Operations, UserError
from engine.schedules.access import ScheduleAccess
from engine.schedules.book import ScheduleBook
from engine.schedules.core import force
from engine.schedules.core.model import Schedule
from engine.schedules.core.requests import forced, sleep_request
from engine.store.schedules import ForceDecision


class ForceRecords:
    """What a scheduled run needs forced and what was approved or left out, as SQLite records it."""

    def __init__(self, book: ScheduleBook, access: ScheduleAccess, ops: Operations) -> None:
        self.book = book
        self.access = access
        self.ops = ops

    def force_needed(self, sched: Schedule, plain: OperationPlan) -> force.Needed | None:
        """Given the sleep's plain plan, plan it forced (cluster listings, outside any transaction):
        what it needs force for, with each Pod's pool; None when it runs without (or cannot be
        planned now)."""
        if plain.forcing or not plain.blockers:
            return None
        try:
            scope = force.dead_end(plain, self.ops.plan(forced(sleep_request(sched))))
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

    def record_needed(self, sched: Schedule, key: str, needed: force.Needed | None, now: datetime) -> None:
        self.book.store.remove_force_decisions(sched.name, key=key, kind=force.NEEDED)
        if needed is not None:
            self.book.store.save_force_decision(
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

    def needed(self, sched: Schedule, key: str) -> force.Needed | None:
        rows = [d for d in self.book.store.force_decisions(sched.name, key=key) if d.kind == force.NEEDED]
        return force.Needed.from_json(rows[-1].scope) if rows else None

    def excluded(self, sched: Schedule, key: str) -> tuple[str, ...]:
        rows = self.book.store.force_decisions(sched.name, key=key)
        return tuple(sorted({d.pool for d in rows if d.kind == force.EXCLUDED}))

    def notice(self, sched: Schedule, key: str, *, roles: bool = True) -> ForceNotice | None:
        """What the announcement says about force, from what SQLite recorded (no listing). With
        `roles`, an approval counts on the card only while its author may still approve force (their
        user groups are looked up: never inside a transaction); the run checks them again."""
        needed = self.needed(sched, key)
        if needed is None:
            return None
        shown = force.digest(needed.scope)
        rows = self.book.store.force_decisions(sched.name, key=key)
        approved = [d.user for d in rows if d.kind == force.APPROVED and d.digest == shown]
        standing = [
            d.user
            for d in self.book.standing_force(sched)
            if not force.uncovered(needed.scope, ForceScope.from_json(d.scope.get("scope") or {}))
        ]
        if roles:
            may = {u: self.access.may_force(sched, u) for u in {*approved, *standing}}
            approved, standing = [u for u in approved if may[u]], [u for u in standing if may[u]]
        return force.notice(
            needed, approved_by=approved, standing_by=standing, excluded=self.excluded(sched, key)
        )

    def approved_force(
        self, sched: Schedule, key: str, needed: ForceScope
    ) -> tuple[ForceScope, list[str]] | None:
        """The approved scope that covers all a forced run needs now, and who approved it: this
        run's approval first, else the schedule's standing scope; None when none covers it."""
        rows = self.book.store.force_decisions(sched.name, key=key)
        candidates: dict[str, tuple[ForceScope, list[str]]] = {}
        for d in rows:
            if d.kind == force.APPROVED:
                scope = force.Needed.from_json(d.scope).scope
                candidates.setdefault("run:" + d.digest, (scope, []))[1].append(d.user)
        for d in self.book.standing_force(sched):
            scope = ForceScope.from_json(d.scope.get("scope") or {})
            candidates.setdefault("standing:" + d.digest, (scope, []))[1].append(d.user)
        for scope, users in candidates.values():
            if not force.uncovered(needed, scope):
                return ForceScope(units=scope.units, pdbs=scope.pdbs), users
        return None

    def run_pools(self, sched: Schedule, excluded: Sequence[str]) -> tuple[str, ...] | None:
        """The pools this run acts on once some were left out of it (None: nothing was)."""
        if not excluded:
            return None
        acts_on = (
            [p.name for p in self.book.pools(sched.cluster)]
            if sched.target.kind == "cluster"
            else sched.target.pools
        )
        return tuple(sorted(p for p in acts_on if p not in set(excluded)))

"""What every part of `Schedules` shares: the state it works on, loading schedules and their
occurrences from the store, the checks (authorisation, cluster, target, overlap), the cluster facts
(pools, what is asleep), the audit, and the helpers that build a run's request and a refusal."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, cast, overload

from engine.domain.announcement import (
    Announcement,
    AnnouncementKind,
    ApprovalMode,
    ForceNotice,
)
from engine.domain.clock import Clock
from engine.domain.force_scope import ForceScope
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    OpState,
    Target,
)
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
from engine.schedules.spec import Occurrence, Override, ScheduleSpec
from engine.schedules.text import (
    DOING,
    EVENT_TITLE,
)
from engine.schedules.timer import (
    event_kind,
    occurrence_on,
    upcoming,
)
from engine.store.database import Store
from engine.store.schedules import ForceDecision, StoredOccurrence, StoredSchedule, schedule_fingerprint


@dataclass(frozen=True, slots=True)
class _Run:
    ok: bool
    state: str
    reply: str
    operation: Operation | None = None


def _refused(reply: str, *, key: str = "") -> ScheduleOutcome:
    return ScheduleOutcome(False, reply, key=key)


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
    if target.workloads:
        return "workloads go to sleep with the cluster or its pools at 0, not with a pool scaled to a size"
    if len(target.pools) != 1 or target.size is None:
        return "the scale target needs exactly one pool and a size, e.g. pool web to 1"
    pool = pools[target.pools[0]]
    if target.size < 0 or (pool.max_size is not None and target.size > pool.max_size):
        return f"pool {pool.name} cannot be scaled to {target.size}: use 0 to {pool.max_size or 'its size'}"
    return ""


def _pool_set(target: ScheduleTarget, everything: set[str]) -> set[str]:
    """The pools a schedule acts on; "(workloads)" stands for the workloads of the cluster, which a
    sleep with workloads scales whichever pools it zeroes."""
    workloads = {"(workloads)"} if target.kind == "workloads" or target.workloads else set()
    if target.kind == "cluster":
        return set(everything) | workloads
    return set(target.pools) | workloads


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
    if target.kind == "workloads":
        workloads_only = Target(cluster=sched.cluster, workloads_only=True)
        return _request(OpKind.ZERO, workloads_only, sched, thread_ts, on_behalf=on_behalf)
    if pools is not None:
        if not pools:
            return None
        target = replace(target, kind="pools", pools=pools) if target.kind == "cluster" else target
        target = replace(target, pools=pools)
    if target.kind == "scale":
        return _request(
            OpKind.SCALE,
            Target(cluster=sched.cluster, pools=target.pools, size=target.size, workloads=target.workloads),
            sched,
            thread_ts,
            on_behalf=on_behalf,
        )
    zero = Target(cluster=sched.cluster, pools=target.pools, workloads=target.workloads)
    return _request(OpKind.ZERO, zero, sched, thread_ts, on_behalf=on_behalf)


def _wake_request(
    sched: Schedule, asleep: set[str], *, workloads_asleep: bool, on_behalf: tuple[str, ...] = ()
) -> OperationRequest | None:
    """The wake's request: the schedule's pools that are asleep, and the workloads when its sleeps
    scale them (restored from their records even once the pools are up); None: nothing is asleep."""
    wanted = asleep if sched.target.kind == "cluster" else asleep & set(sched.target.pools)
    workloads = sched.target.kind == "workloads" or sched.target.workloads
    if not wanted and not (workloads and workloads_asleep):
        return None
    pools = () if sched.target.kind == "cluster" else tuple(sorted(wanted))
    wake = Target(
        cluster=sched.cluster, pools=pools, workloads=sched.target.workloads, workloads_only=not wanted
    )
    return _request(OpKind.WAKE, wake, sched, "", on_behalf=on_behalf)


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


def _forced(request: OperationRequest) -> OperationRequest:
    return replace(request, target=replace(request.target, force=True))


def _resleep_of(row: StoredOccurrence) -> Occurrence:
    return Resleep(row.schedule, "sleep", date.fromisoformat(row.local_date), row.due_at)


def _title(sched: Schedule, occ: Occurrence) -> str:
    return EVENT_TITLE[event_kind(sched, occ)]


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


class SchedulesBase:
    """The state each part of `Schedules` works on (set by `Schedules.__init__`) and what they share."""

    store: Store
    ops: Operations
    clock: Clock
    grace: timedelta
    calendars: Calendars

    if TYPE_CHECKING:
        # What the mixins call on one another, so `mypy --strict` checks each against one `Schedules`.
        def announce(self, occurrence: Occurrence, lead: timedelta, now: datetime) -> Announcement: ...
        def fire(self, key: str, now: datetime, *, by: str = "") -> ScheduleOutcome: ...
        def _save_override(self, sched: Schedule, override: Override, now: datetime) -> None: ...
        def _late_announcement(self, item: Due) -> Announcement | None: ...
        def _note(
            self, sched: Schedule, occ: Occurrence, kind: AnnouncementKind, text: str
        ) -> Announcement: ...
        def _next_text(self, sched: Schedule, now: datetime) -> str: ...
        def _clicked(
            self, key: str, by: str, channel: str, verb: str, groups: Sequence[str]
        ) -> tuple[Schedule, Occurrence] | ScheduleOutcome: ...
        def _force_needed(self, sched: Schedule, plain: OperationPlan) -> force.Needed | None: ...
        def _record_needed(
            self, sched: Schedule, key: str, needed: force.Needed | None, now: datetime
        ) -> None: ...
        def _excluded(self, sched: Schedule, key: str) -> tuple[str, ...]: ...
        def _standing(self, sched: Schedule) -> builtins.list[ForceDecision]: ...
        def _force_notice(self, sched: Schedule, key: str, *, roles: bool = True) -> ForceNotice | None: ...
        def _approved_force(
            self, sched: Schedule, key: str, needed: ForceScope
        ) -> tuple[ForceScope, builtins.list[str]] | None: ...
        def _run_pools(self, sched: Schedule, excluded: Sequence[str]) -> tuple[str, ...] | None: ...

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
            raise UserError(f'no schedule "{name[:63]}"')
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

    def _resolve(
        self, key: str, *, by: str | None = None, groups: Sequence[str] = (), verb: str = ""
    ) -> tuple[Schedule, Occurrence] | str:
        """The schedule and occurrence a button's key names, or why there is none. With `by`: the
        same answer as for an unknown schedule when they have no role on its cluster."""
        parts = key.rsplit(":", 2)
        sched = None
        if len(parts) == 3:
            sched = self._load(parts[0]) if by is None else self._visible(parts[0], by, groups, verb)
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

    def _check_cluster(self, cluster: str, by: str, groups: Sequence[str]) -> str:
        """ "" for a cluster `by` has a role on. Otherwise one answer whether it exists or not, naming
        only the clusters they have a role on (as `whoami`): nobody learns of the others here. The
        caller audits the refusal."""
        if cluster in self.ops.clusters() and self.ops.role(cluster, by, groups) is not None:
            return ""
        visible = [c for c in self.ops.clusters() if self.ops.role(c, by, groups) is not None]
        return f'unknown cluster "{cluster[:63]}"; clusters: {", ".join(visible) or "none"}'

    def _visible(self, name: str, by: str, groups: Sequence[str], verb: str) -> Schedule | None:
        """The schedule `name` if `by` has a role on its cluster; None (an unknown schedule's answer)
        otherwise, so a person without a role there learns nothing of it, not even that it exists."""
        sched = self._load(name)
        if sched is None or self.ops.role(sched.cluster, by, groups) is not None:
            return sched
        self._audit(by, f"refused_schedule_{verb}", sched.cluster, f"{name}: no role on the cluster")
        return None

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
        if target.kind == "workloads" and (target.pools or target.size is not None):
            return "a workloads-only target takes no pools and no size: it changes no node pool"
        if (target.kind == "workloads" or target.workloads) and self.ops.handles[cluster].workloads is None:
            return (
                f"cluster {cluster} has no workloads provider configured: "
                "schedule its pools without their workloads"
            )
        if target.kind == "workloads":
            return ""
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
        sched = self._visible(name, by, groups, verb)
        if sched is None:
            return _refused(self._unknown_schedule(name, by, groups))
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

    def _unknown_schedule(self, name: str, by: str, groups: Sequence[str]) -> str:
        """The answer to a schedule `by` may not see or that does not exist: the same, listing only
        the schedules of clusters they have a role on."""
        visible = {c for c in self.ops.clusters() if self.ops.role(c, by, groups) is not None}
        names = [s.name for s in self._schedules(enabled_only=False) if s.cluster in visible]
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

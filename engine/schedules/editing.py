"""Schedules as data: adding one (with its checks and its first pre-approval), pre-approving and
withdrawing it, pausing, resuming, deleting, and skipping one date."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime
from typing import Unpack

from engine.domain.announcement import ApprovalMode
from engine.domain.clock import Clock
from engine.operations import policy
from engine.operations.service import Operations
from engine.pools.base import Pool
from engine.schedules.access import ScheduleAccess
from engine.schedules.announcing import Announcing
from engine.schedules.book import ScheduleBook
from engine.schedules.core import one_off
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import occurrences_on
from engine.schedules.core.model import (
    TARGET_KINDS,
    Schedule,
    ScheduleOutcome,
    ScheduleTarget,
    refused,
)
from engine.schedules.core.spec import ScheduleError, SpecField, SpecText
from engine.schedules.core.text import (
    approval_text,
    schedule_summary,
    voided_pre_approval,
)
from engine.schedules.stored import stored_schedule
from engine.store.schedules import ScheduleApproval


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


class ScheduleEditing:
    """Adding, pre-approving, pausing, resuming, deleting schedules and skipping a date."""

    def __init__(
        self,
        book: ScheduleBook,
        access: ScheduleAccess,
        ops: Operations,
        clock: Clock,
        announcing: Announcing,
    ) -> None:
        self.book = book
        self.access = access
        self.ops = ops
        self.clock = clock
        self.announcing = announcing

    # -- managing schedules ----------------------------------------------------------------------

    def add(
        self,
        *,
        target: ScheduleTarget,
        channel: str,
        approval_mode: str,
        by: str,
        groups: Sequence[str] = (),
        typed_in: str | None = None,
        **text: Unpack[SpecText],
    ) -> ScheduleOutcome:
        """Validate and save a schedule; every refusal names the problem and nothing is saved.
        `text`: the definition as typed (name, cluster, sleep, wake, tz and the options: `SpecText`).
        `typed_in`: the channel the command was typed in (Slack), which must be one the cluster is
        operated from, as for any request; `channel` is where its announcements go."""
        name, cluster = text["name"], text["cluster"]
        try:
            spec = schedule.parse_spec(**text)
        except ScheduleError as exc:
            return self._refused_add(by, cluster, name, str(exc), exc.field)
        problem = self.book.calendars.check(spec.days_off_rule)
        if problem:
            return self._refused_add(by, cluster, name, problem, "holidays")
        problem = self.access.check_cluster(cluster, by, groups)
        if problem:
            return self._refused_add(by, cluster, name, problem, "cluster")
        refusal = self.access.check_creator(cluster, by, groups, approval_mode)  # audited by the check
        if refusal:
            return replace(refused(refusal), field="approval")
        misplaced = None if typed_in is None else self.access.misplaced(cluster, by, typed_in, "add")
        if misplaced is not None:
            return replace(misplaced, field="cluster")
        where = policy.channel_allowed(self.ops.policies[cluster], channel.strip())
        problem = _check_channel(channel) or where.reason
        if problem:
            no_channel = self._refused_add(by, cluster, name, problem, "channel")
            return replace(no_channel, reason=None if _check_channel(channel) else where.detail)
        problem = self._check_target(cluster, target)
        if problem:
            return self._refused_add(by, cluster, name, problem, "target")
        everything = {p.name for p in self.book.pools(cluster)}  # a cluster listing: before the transaction
        now = self.clock.now()
        mode: ApprovalMode = "pre_approved" if approval_mode == "pre_approved" else "per_run"
        stored = stored_schedule(spec, target, channel=channel, mode=mode, by=by, now=now)
        with self.book.store.transaction():
            conflict = self._check_overlap(spec.name, cluster, target, everything)
            if conflict:
                return self._refused_add(by, cluster, name, conflict, "target")
            if not self.book.store.insert_schedule(stored):
                return self._refused_add(
                    by,
                    cluster,
                    name,
                    f'a schedule named "{name}" exists: pick another name or delete it first',
                    "name",
                )
            saved = self.book.from_stored(stored)
            self.book.audit(by, "schedule_add", cluster, f"{schedule_summary(saved)} [{saved.fingerprint}]")
            if mode == "pre_approved":
                self._record_pre_approval(saved, by, groups, now)
            saved = self.book.require(saved.name)
        upcoming = self.book.upcoming(saved, now, limit=1)
        return ScheduleOutcome(
            True,
            f"Schedule saved: {schedule_summary(saved)}. {self.announcing.next_text(saved, now)}",
            changed=True,
            schedule=saved,
            next_event=upcoming[0] if upcoming else None,
        )

    def pre_approve(
        self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """One approver's pre-approval of the schedule as it is now defined; the runs go without a
        further approval once as many distinct approvers as a run needs have given theirs."""
        sched = self.access.visible(name, by, groups, "pre_approve")
        if sched is None:
            return refused(self.access.unknown_schedule(name, by, groups))
        misplaced = self.access.misplaced(sched.cluster, by, channel, "pre_approve")
        if misplaced is not None:
            return misplaced
        if sched.approval_mode != "pre_approved":
            self.book.audit(by, "refused_schedule_pre_approve", sched.cluster, f"{name}: per_run schedule")
            return refused(
                f"schedule {name} asks for an approval at each run (per_run); create it with "
                "approval=pre-approved to pre-approve it"
            )
        pol = self.ops.policies[sched.cluster]
        decision = policy.can_pre_approve(
            pol, voter=by, voter_role=self.ops.role(sched.cluster, by, groups), created_by=sched.created_by
        )
        if not decision.allowed:
            self.book.audit(by, "refused_schedule_pre_approve", sched.cluster, f"{name}: {decision.reason}")
            return refused(decision.reason)
        with self.book.store.transaction():
            added = self._record_pre_approval(sched, by, groups, self.clock.now())
            sched = self.book.require(name)
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
        if not self.access.may_pre_approve(sched, by, groups):
            return False
        added = self.book.store.add_schedule_approval(
            ScheduleApproval(sched.name, by, now, sched.fingerprint)
        )
        if added:
            self.book.audit(by, "schedule_pre_approve", sched.cluster, f"{sched.name} [{sched.fingerprint}]")
        return added

    def _refused_add(
        self, by: str, cluster: str, name: str, reason: str, field: SpecField | None
    ) -> ScheduleOutcome:
        self.book.audit(by, "refused_schedule_add", cluster, f"{name[:63]}: {reason}")
        return replace(refused(reason), field=field)

    def pause(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        """Stop firing and announcing; occurrences while paused are never run late. `channel`, here
        and for every change a person makes: where they typed or clicked (the cluster's channel rule)."""
        return self._manage(
            name,
            by,
            groups,
            "pause",
            lambda s: self.book.store.set_schedule_enabled(s, False),
            channel=channel,
        )

    def resume(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        """Resume firing. A pre-approval does not outlive a pause lifted by someone who could not
        have given it (an operator resuming what an approver paused): it is void, and the reply says
        so; the approvers pre-approve again if they agree."""
        now = self.clock.now()
        sched = self.book.load(name)
        keeps = (
            sched is None
            or sched.approval_mode != "pre_approved"
            or self.access.may_pre_approve(sched, by, groups)
        )
        voided: builtins.list[int] = []

        def act(name: str) -> None:
            self.book.store.set_schedule_enabled(name, True, since=now)
            if not keeps and sched is not None:
                voided.append(self.book.store.remove_schedule_approvals(name))
                if voided[0]:
                    why = f"{name}: resumed by {by}, who could not pre-approve it"
                    self.book.audit(by, "schedule_pre_approval_voided", sched.cluster, why)

        outcome = self._manage(name, by, groups, "resume", act, channel=channel)
        if not voided or not voided[0]:
            return outcome
        return replace(outcome, reply=f"{outcome.reply} {voided_pre_approval(name)}")

    def unapprove(
        self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Withdraw one's own pre-approval of a schedule: no role needed and from any channel, since
        taking one's approval back only ever narrows what runs unasked."""
        sched = self.book.load(name)
        # Someone whose role was taken away may still withdraw their own pre-approval; anyone else
        # without a role there gets the answer of an unknown schedule.
        gave = sched is not None and any(a.user == by for a in self.book.store.schedule_approvals(name))
        if sched is None or (not gave and self.access.visible(name, by, groups, "unapprove") is None):
            return refused(self.access.unknown_schedule(name, by, groups))
        with self.book.store.transaction():
            withdrawn = self.book.store.remove_schedule_approvals(name, user=by)
            if withdrawn:
                self.book.audit(by, "schedule_unapprove", sched.cluster, name)
            else:
                self.book.audit(by, "refused_schedule_unapprove", sched.cluster, f"{name}: no pre-approval")
        if not withdrawn:
            return refused(f"you have not pre-approved schedule {name}; there is nothing to withdraw")
        left = approval_text(sched.approval_mode, self.book.require(name).approvers)
        return ScheduleOutcome(True, f"Withdrew your pre-approval of schedule {name}: {left}.", changed=True)

    def delete(self, name: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> ScheduleOutcome:
        return self._manage(name, by, groups, "delete", self.book.store.delete_schedule, channel=channel)

    def skip_date(
        self, name: str, day: date | str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> ScheduleOutcome:
        """Skip the sleep and the wake of one local date (a one-off holiday); the schedule is unchanged."""
        sched = self.access.visible(name, by, groups, "skip")
        if sched is None:
            return refused(self.access.unknown_schedule(name, by, groups))
        misplaced = self.access.misplaced(sched.cluster, by, channel, "skip")
        if misplaced is not None:
            return misplaced
        try:
            local = schedule.parse_date(day) if isinstance(day, str) else day
        except ScheduleError as exc:
            return refused(str(exc))
        refusal = self.access.authorise(sched.cluster, by, groups, "skip", detail=f"{name} {local}")
        if refusal:
            return refused(refusal)
        now = self.clock.now()
        with self.book.store.transaction():
            overrides = self.book.overrides(name)
            handled = self.book.handled_keys(name)
            todo = [
                occ
                for occ in occurrences_on(sched.spec, local)
                if occ.key not in handled and (one_off.effective_time(occ, overrides) or now) > now
            ]
            if not todo:
                return refused(
                    f"schedule {name} has nothing left to skip on {local:%a} {local}: "
                    "no sleep or wake that day, or they are past"
                )
            for occ in todo:
                self.book.save_override(sched, one_off.skip(occ, by=by, spec=sched.spec), now)
                self.book.close_row(occ, "skipped", now, note=f"skipped by {by}")
        what = " and the ".join(f"{occ.action} of {schedule.describe(occ, sched.spec.tz)}" for occ in todo)
        return ScheduleOutcome(
            True, f"Skipping the {what} ({name}); the schedule is unchanged.", changed=True
        )

    # -- internals ---------------------------------------------------------------------------------

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
        pools = {p.name: p for p in self.book.pools(cluster)}
        return _target_problem(cluster, target, pools)

    def _check_overlap(self, name: str, cluster: str, target: ScheduleTarget, everything: set[str]) -> str:
        mine = _pool_set(target, everything)
        for other in self.book.schedules(cluster=cluster, enabled_only=False):
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
        sched = self.access.visible(name, by, groups, verb)
        if sched is None:
            return refused(self.access.unknown_schedule(name, by, groups))
        misplaced = self.access.misplaced(sched.cluster, by, channel, verb)
        if misplaced is not None:
            return misplaced
        refusal = self.access.authorise(sched.cluster, by, groups, verb, detail=name)
        if refusal:
            return refused(refusal)
        with self.book.store.transaction():
            act(name)
            self.book.audit(by, f"schedule_{verb}", sched.cluster, name)
        done = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb]
        return ScheduleOutcome(True, f"Schedule {name} {done}.", changed=True)

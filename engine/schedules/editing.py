"""Schedules as data: adding one (with its checks and its first pre-approval), pre-approving and
withdrawing it, pausing, resuming, deleting, and skipping one date."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, datetime

from engine.domain.announcement import ApprovalMode
from engine.operations import policy
from engine.schedules import one_off
from engine.schedules import spec as schedule
from engine.schedules.base import (
    SchedulesBase,
    _refused,
)
from engine.schedules.model import (
    Schedule,
    ScheduleOutcome,
    ScheduleTarget,
)
from engine.schedules.spec import ScheduleError, ScheduleSpec, SpecField
from engine.schedules.text import (
    approval_text,
    schedule_summary,
    voided_pre_approval,
)
from engine.schedules.timer import occurrences_on
from engine.store.schedules import ScheduleApproval, StoredSchedule


def _check_channel(channel: str) -> str:
    if channel.strip():
        return ""
    return "missing channel: announcements and progress need one, e.g. the channel you type the command in"


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


class ScheduleEditing(SchedulesBase):
    """Adding, pre-approving, pausing, resuming, deleting schedules and skipping a date."""

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
        typed_in: str | None = None,
    ) -> ScheduleOutcome:
        """Validate and save a schedule; every refusal names the problem and nothing is saved.
        `typed_in`: the channel the command was typed in (Slack), which must be one the cluster is
        operated from, as for any request; `channel` is where its announcements go."""
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
        problem = self._check_cluster(cluster, by, groups)
        if problem:
            return self._refused_add(by, cluster, name, problem, "cluster")
        refusal = self._check_creator(cluster, by, groups, approval_mode)  # audited by the check
        if refusal:
            return replace(_refused(refusal), field="approval")
        misplaced = None if typed_in is None else self._misplaced(cluster, by, typed_in, "add")
        if misplaced is not None:
            return replace(misplaced, field="cluster")
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
        sched = self._visible(name, by, groups, "pre_approve")
        if sched is None:
            return _refused(self._unknown_schedule(name, by, groups))
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
        # Someone whose role was taken away may still withdraw their own pre-approval; anyone else
        # without a role there gets the answer of an unknown schedule.
        gave = sched is not None and any(a.user == by for a in self.store.schedule_approvals(name))
        if sched is None or (not gave and self._visible(name, by, groups, "unapprove") is None):
            return _refused(self._unknown_schedule(name, by, groups))
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
        sched = self._visible(name, by, groups, "skip")
        if sched is None:
            return _refused(self._unknown_schedule(name, by, groups))
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
                if occ.key not in handled and (one_off.effective_time(occ, overrides) or now) > now
            ]
            if not todo:
                return _refused(
                    f"schedule {name} has nothing left to skip on {local:%a} {local}: "
                    "no sleep or wake that day, or they are past"
                )
            for occ in todo:
                self._save_override(sched, one_off.skip(occ, by=by, spec=sched.spec), now)
                self._close_row(sched, occ, "skipped", now, note=f"skipped by {by}")
        what = " and the ".join(f"{occ.action} of {schedule.describe(occ, sched.spec.tz)}" for occ in todo)
        return ScheduleOutcome(
            True, f"Skipping the {what} ({name}); the schedule is unchanged.", changed=True
        )

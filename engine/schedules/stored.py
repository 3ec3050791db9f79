"""A schedule as the store keeps it and back: the one place that maps a `ScheduleSpec`, its target and
its approval mode to a `StoredSchedule` row and a row to a `Schedule` (with its fingerprint), and a
re-sleep's occurrence row to its `Resleep`. A new schedule option is mapped here, both ways."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from engine.domain.announcement import ApprovalMode
from engine.schedules.core import spec as schedule
from engine.schedules.core.days_off import DaysOffRule
from engine.schedules.core.model import Resleep, Schedule, ScheduleTarget
from engine.schedules.core.spec import Occurrence, ScheduleSpec
from engine.store.schedules import StoredOccurrence, StoredSchedule, schedule_fingerprint


def stored_schedule(
    spec: ScheduleSpec, target: ScheduleTarget, *, channel: str, mode: ApprovalMode, by: str, now: datetime
) -> StoredSchedule:
    """The row of a schedule being added by `by` at `now`."""
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


def schedule_of(s: StoredSchedule) -> Schedule:
    """The schedule a row holds, its days off not yet resolved (`ScheduleBook` resolves them)."""
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


def resleep_of(row: StoredOccurrence) -> Occurrence:
    return Resleep(row.schedule, "sleep", date.fromisoformat(row.local_date), row.due_at)

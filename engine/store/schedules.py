"""Schedules (with their days off), their occurrences, pre-approvals, force decisions and the
append-only one-occurrence overrides."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.store.base import StoreBase


@dataclass(frozen=True, slots=True)
class ScheduleApproval:
    """One approver's pre-approval of one definition of a schedule (`fingerprint`)."""

    schedule: str
    user: str
    at: datetime
    fingerprint: str


@dataclass(frozen=True, slots=True)
class ForceDecision:
    """A decision about force on a schedule: `scope` is `ForceScope.to_json()` plus the pool of
    each Pod shown (`pools`). On one occurrence (`key`): `needed` (what its announcement showed,
    no `user`), `approved` (one approver's click, `digest` of the scope approved) or `excluded`
    (`pool` left out of that run). On the schedule itself (`key` ""): `standing`, one approver's
    approval of a standing scope, bound to the schedule's targets by `binding`."""

    schedule: str
    key: str
    kind: str
    user: str = ""
    pool: str = ""
    digest: str = ""
    binding: str = ""
    scope: Mapping[str, Any] = field(default_factory=dict)
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    name: str
    cluster: str
    target: Mapping[str, Any]
    sleep: str
    wake: str
    """Empty when the schedule only sleeps."""
    tz: str
    lead_times: tuple[int, ...]
    """Seconds, longest first."""
    channel: str
    approval_mode: str
    """Either `pre_approved` (runs go without approval once enough approvers pre-approved this
    definition: `schedule_approvals`) or `per_run`."""
    approved_by: str
    """Schema 2 only (the approver who created it); schema 3 moved it into `schedule_approvals`."""
    enabled: bool
    exceptions: tuple[str, ...]
    """ISO local dates."""
    created_by: str
    created_at: datetime
    active_since: datetime
    """Creation or the last resume: events before it are never run late nor announced as missed."""
    last_done_at: datetime | None = None
    """Scheduled instant of the latest occurrence run (or decided) by the timer."""
    days_off: Mapping[str, str] = field(default_factory=dict)
    """Public holidays / calendar the schedule follows and what it does on them (empty: none)."""


@dataclass(frozen=True, slots=True)
class StoredOccurrence:
    key: str
    schedule: str
    action: str
    local_date: str
    due_at: datetime
    """The scheduled instant (overrides move the effective one)."""
    state: str
    """pending | announced | running | done | skipped | missed."""
    kind: str = "scheduled"
    """Either `scheduled` (from the schedule's times) or `resleep` (the end of a temporary wake)."""
    op_id: str = ""
    announce_channel: str = ""
    announce_ts: str = ""
    announced_for: datetime | None = None
    """The effective instant the last announcement was made for (a postpone starts afresh)."""
    announced_lead: int | None = None
    """Seconds: the shortest lead already announced for `announced_for`."""
    summary: str = ""
    note: str = ""
    done_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredOverride:
    key: str
    schedule: str
    kind: str
    until: datetime | None
    by: str
    at: datetime
    note: str = ""


class SchedulesStore(StoreBase):
    """Schedules as typed (canonical text) and occurrences by idempotency key;
    `engine.schedules.service` owns their meaning."""

    # -- schedules --------------------------------------------------------------------------------

    def insert_schedule(self, schedule: StoredSchedule) -> bool:
        """False when a schedule of that name exists (nothing is written)."""
        with self.transaction():
            if list(self.db.table("schedules").rows_where("name = ?", [schedule.name])):
                return False
            self.db.table("schedules").insert(_schedule_to_row(schedule))
            return True

    def get_schedule(self, name: str) -> StoredSchedule | None:
        with self._lock:
            rows = list(self.db.table("schedules").rows_where("name = ?", [name]))
        return row_to_schedule(rows[0]) if rows else None

    def list_schedules(self, *, cluster: str | None = None) -> list[StoredSchedule]:
        with self._lock:
            rows = self.db.table("schedules").rows_where(
                "cluster = ?" if cluster else None, [cluster] if cluster else [], order_by="name"
            )
            return [row_to_schedule(r) for r in rows]

    def set_schedule_enabled(self, name: str, enabled: bool, *, since: datetime | None = None) -> None:
        """Pause or resume; a resume moves `active_since` so events while paused are never run late."""
        values: dict[str, Any] = {"enabled": int(enabled)}
        if since is not None:
            values["active_since"] = since.isoformat()
        with self.transaction():
            self.db.table("schedules").update(name, values)

    def set_schedule_done(self, name: str, at: datetime) -> None:
        """Move `last_done_at` forward (never back: an older occurrence decided late changes nothing)."""
        with self.transaction():
            current = self.get_schedule(name)
            if current is not None and (current.last_done_at is None or at > current.last_done_at):
                self.db.table("schedules").update(name, {"last_done_at": at.isoformat()})

    def delete_schedule(self, name: str) -> bool:
        """Remove a schedule and its occurrences still to come; run ones stay as history."""
        with self.transaction():
            if not list(self.db.table("schedules").rows_where("name = ?", [name])):
                return False
            self.db.table("schedules").delete(name)
            self.db.table("schedule_approvals").delete_where("schedule = ?", [name])
            self.db.table("force_decisions").delete_where("schedule = ?", [name])
            self.db.table("occurrences").delete_where(
                "schedule = ? AND state IN ('pending', 'announced')", [name]
            )
            return True

    # -- occurrences ------------------------------------------------------------------------------

    def get_occurrence(self, key: str) -> StoredOccurrence | None:
        with self._lock:
            rows = list(self.db.table("occurrences").rows_where("key = ?", [key]))
        return _row_to_occurrence(rows[0]) if rows else None

    def save_occurrence(self, occurrence: StoredOccurrence) -> None:
        with self.transaction():
            self.db.table("occurrences").upsert(_occurrence_to_row(occurrence), pk="key")

    def list_occurrences(
        self, *, schedule: str | None = None, states: Sequence[str] = (), op_id: str | None = None
    ) -> list[StoredOccurrence]:
        where, args = [], []
        if schedule is not None:
            where.append("schedule = ?")
            args.append(schedule)
        if states:
            where.append(f"state IN ({','.join('?' for _ in states)})")
            args.extend(states)
        if op_id is not None:
            where.append("op_id = ?")
            args.append(op_id)
        with self._lock:
            rows = self.db.table("occurrences").rows_where(
                " AND ".join(where) or None, args, order_by="due_at, key"
            )
            return [_row_to_occurrence(r) for r in rows]

    # -- pre-approvals of schedules --------------------------------------------------------------

    def add_schedule_approval(self, approval: ScheduleApproval) -> bool:
        """False when this approver already pre-approved this definition (nothing is written)."""
        with self.transaction():
            key = [approval.schedule, approval.user, approval.fingerprint]
            where = "schedule = ? AND user = ? AND fingerprint = ?"
            if list(self.db.table("schedule_approvals").rows_where(where, key)):
                return False
            self.db.table("schedule_approvals").insert(
                {
                    "schedule": approval.schedule,
                    "user": approval.user,
                    "at": approval.at.isoformat(),
                    "fingerprint": approval.fingerprint,
                }
            )
            return True

    def remove_schedule_approvals(self, schedule: str, *, user: str | None = None) -> int:
        """Withdraw pre-approvals of `schedule`: `user`'s own, or all of them; how many went."""
        where, args = "schedule = ?", [schedule]
        if user is not None:
            where, args = "schedule = ? AND user = ?", [schedule, user]
        with self.transaction():
            table = self.db.table("schedule_approvals")
            count = table.count_where(where, args)
            table.delete_where(where, args)
            return count

    def schedule_approvals(self, schedule: str) -> list[ScheduleApproval]:
        with self._lock:
            rows = self.db.table("schedule_approvals").rows_where("schedule = ?", [schedule], order_by="at")
            return [
                ScheduleApproval(r["schedule"], r["user"], datetime.fromisoformat(r["at"]), r["fingerprint"])
                for r in rows
            ]

    # -- force decisions on schedules and their occurrences ---------------------------------------

    def save_force_decision(self, decision: ForceDecision) -> None:
        """Insert or replace the decision of that (schedule, key, kind, user, pool)."""
        with self.transaction():
            self.db.table("force_decisions").upsert(
                {
                    "schedule": decision.schedule,
                    "key": decision.key,
                    "kind": decision.kind,
                    "user": decision.user,
                    "pool": decision.pool,
                    "digest": decision.digest,
                    "binding": decision.binding,
                    "scope": json.dumps(dict(decision.scope), sort_keys=True),
                    "at": decision.at.isoformat() if decision.at else "",
                },
                pk=("schedule", "key", "kind", "user", "pool"),
            )

    def force_decisions(self, schedule: str, *, key: str | None = None) -> list[ForceDecision]:
        """A schedule's force decisions (`key` "" for its standing scope), oldest first."""
        where, args = "schedule = ?", [schedule]
        if key is not None:
            where, args = "schedule = ? AND key = ?", [schedule, key]
        with self._lock:
            rows = self.db.table("force_decisions").rows_where(where, args, order_by="at, user, pool")
            return [
                ForceDecision(
                    r["schedule"],
                    r["key"],
                    r["kind"],
                    r["user"] or "",
                    r["pool"] or "",
                    r["digest"] or "",
                    r["binding"] or "",
                    json.loads(r["scope"] or "{}"),
                    _time_or_none(r["at"]),
                )
                for r in rows
            ]

    def remove_force_decisions(self, schedule: str, *, key: str, kind: str, user: str | None = None) -> int:
        """Remove decisions of one kind on `key` (one person's, or everyone's); how many went."""
        where, args = "schedule = ? AND key = ? AND kind = ?", [schedule, key, kind]
        if user is not None:
            where, args = where + " AND user = ?", [*args, user]
        with self.transaction():
            table = self.db.table("force_decisions")
            count = table.count_where(where, args)
            table.delete_where(where, args)
            return count

    # -- overrides (append-only) ------------------------------------------------------------------

    def add_override(self, override: StoredOverride) -> None:
        with self.transaction():
            self.db.table("overrides").insert(
                {
                    "key": override.key,
                    "schedule": override.schedule,
                    "kind": override.kind,
                    "until": override.until.isoformat() if override.until else "",
                    "by": override.by,
                    "at": override.at.isoformat(),
                    "note": override.note,
                }
            )

    def overrides(self, *, schedule: str | None = None) -> list[StoredOverride]:
        """In the order they were decided (the latest for a key wins)."""
        with self._lock:
            rows = self.db.table("overrides").rows_where(
                "schedule = ?" if schedule else None, [schedule] if schedule else [], order_by="id"
            )
            return [
                StoredOverride(
                    r["key"],
                    r["schedule"],
                    r["kind"],
                    _time_or_none(r["until"]),
                    r["by"],
                    datetime.fromisoformat(r["at"]),
                    r["note"] or "",
                )
                for r in rows
            ]


def schedule_fingerprint(stored: StoredSchedule) -> str:
    """What a pre-approval consents to: what the schedule does, when, where it is announced."""
    essence: dict[str, Any] = {
        "cluster": stored.cluster,
        "target": dict(stored.target),
        "sleep": stored.sleep,
        "wake": stored.wake,
        "tz": stored.tz,
        "lead_times": list(stored.lead_times),
        "channel": stored.channel,
        "exceptions": list(stored.exceptions),
        "approval_mode": stored.approval_mode,
    }
    # An option enters only when set, so the schedules saved before it keep their pre-approvals
    # (tests/unit/engine/schedules/test_schedule_fingerprint.py enumerates the fields).
    if stored.days_off:
        essence["days_off"] = dict(stored.days_off)
    return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:16]


def _time_or_none(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _schedule_to_row(s: StoredSchedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "cluster": s.cluster,
        "target": json.dumps(dict(s.target), sort_keys=True),
        "sleep": s.sleep,
        "wake": s.wake,
        "tz": s.tz,
        "lead_times": json.dumps(list(s.lead_times)),
        "channel": s.channel,
        "approval_mode": s.approval_mode,
        "approved_by": s.approved_by,
        "enabled": int(s.enabled),
        "exceptions": json.dumps(list(s.exceptions)),
        "created_by": s.created_by,
        "created_at": s.created_at.isoformat(),
        "active_since": s.active_since.isoformat(),
        "last_done_at": s.last_done_at.isoformat() if s.last_done_at else "",
        "days_off": json.dumps(dict(s.days_off), sort_keys=True) if s.days_off else "",
    }


def row_to_schedule(row: Mapping[str, Any]) -> StoredSchedule:
    return StoredSchedule(
        name=row["name"],
        cluster=row["cluster"],
        target=json.loads(row["target"]),
        sleep=row["sleep"],
        wake=row["wake"] or "",
        tz=row["tz"],
        lead_times=tuple(json.loads(row["lead_times"] or "[]")),
        channel=row["channel"] or "",
        approval_mode=row["approval_mode"],
        approved_by=row["approved_by"] or "",
        enabled=bool(row["enabled"]),
        exceptions=tuple(json.loads(row["exceptions"] or "[]")),
        created_by=row["created_by"] or "",
        created_at=datetime.fromisoformat(row["created_at"]),
        active_since=datetime.fromisoformat(row["active_since"]),
        last_done_at=_time_or_none(row["last_done_at"]),
        days_off=json.loads(row.get("days_off") or "{}"),
    )


def _occurrence_to_row(o: StoredOccurrence) -> dict[str, Any]:
    return {
        "key": o.key,
        "schedule": o.schedule,
        "action": o.action,
        "local_date": o.local_date,
        "due_at": o.due_at.isoformat(),
        "state": o.state,
        "kind": o.kind,
        "op_id": o.op_id,
        "announce_channel": o.announce_channel,
        "announce_ts": o.announce_ts,
        "announced_for": o.announced_for.isoformat() if o.announced_for else "",
        "announced_lead": o.announced_lead,
        "summary": o.summary,
        "note": o.note,
        "done_at": o.done_at.isoformat() if o.done_at else "",
    }


def _row_to_occurrence(row: Mapping[str, Any]) -> StoredOccurrence:
    return StoredOccurrence(
        key=row["key"],
        schedule=row["schedule"],
        action=row["action"],
        local_date=row["local_date"],
        due_at=datetime.fromisoformat(row["due_at"]),
        state=row["state"],
        kind=row["kind"] or "scheduled",
        op_id=row["op_id"] or "",
        announce_channel=row["announce_channel"] or "",
        announce_ts=row["announce_ts"] or "",
        announced_for=_time_or_none(row["announced_for"]),
        announced_lead=row["announced_lead"],
        summary=row["summary"] or "",
        note=row["note"] or "",
        done_at=_time_or_none(row["done_at"]),
    )

"""A pre-approval binds to the schedule's fingerprint (`engine.store.schedules.schedule_fingerprint`):
a changed definition is not pre-approved. So a schedule option added later must enter the
fingerprint only when it is set; one that always entered it would change the fingerprint of every
schedule saved before it, and every existing pre-approval would lapse without a word (the runs would
quietly start asking for approval again).

These tests enumerate every field of the stored schedule, of its target and of its spec, so a new
field fails here until it is classified: part of the definition since pre-approvals exist, an
option (with a set value, checked to enter the fingerprint only when set), or bookkeeping (never in
it). The fingerprint of a schedule with every option at its default is the one computed from the
definition as it was before any option existed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.schedules.core import spec as schedule
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.core.spec import ScheduleSpec
from engine.schedules.stored import schedule_of, stored_schedule
from engine.store.schedules import StoredSchedule, schedule_fingerprint

DEFINITION = (
    "cluster",
    "target",
    "sleep",
    "wake",
    "tz",
    "lead_times",
    "channel",
    "exceptions",
    "approval_mode",
)
"""What a pre-approval has consented to since pre-approvals exist (store schema 3)."""
BOOKKEEPING = ("name", "approved_by", "enabled", "created_by", "created_at", "active_since", "last_done_at")
"""Not what the schedule does: who made it, when, paused or not, how far the timer got."""
OPTIONS: dict[str, Any] = {"days_off": {"holidays": "DE-BY", "calendar": "", "action": "stay_asleep"}}
"""Each option added since, with a value that sets it: it enters the fingerprint only when set."""

TARGET_DEFINITION = ("kind", "pools", "size")
TARGET_OPTIONS: dict[str, Any] = {"workloads": True}

SPEC_STORED_AS = {
    "name": "name",
    "cluster": "cluster",
    "sleep": "sleep",
    "wake": "wake",
    "tz": "tz",
    "lead_times": "lead_times",
    "exceptions": "exceptions",
    "days_off_rule": "days_off",
    "days_off": "",  # the rule's days resolved at load time from the calendars: never stored
}
"""Where each field of `ScheduleSpec` is stored ("" for none): a new one needs a stored field."""

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BASE = StoredSchedule(
    name="nights",
    cluster="dev-eu",
    target={"kind": "pools", "pools": ["web"], "size": None},
    sleep="mon-fri 19:00",
    wake="mon-fri 07:00",
    tz="Europe/Berlin",
    lead_times=(3600, 600),
    channel="C0OPS",
    approval_mode="pre_approved",
    approved_by="",
    enabled=True,
    exceptions=("2026-04-03",),
    created_by="U0CREATOR",
    created_at=NOW,
    active_since=NOW,
)
"""A schedule with every option at its default."""


def fingerprint_before_options(stored: StoredSchedule) -> str:
    """The fingerprint as it was computed before any option existed: the definition alone."""
    essence = {name: getattr(stored, name) for name in DEFINITION}
    essence = {**essence, "target": dict(stored.target), "lead_times": list(stored.lead_times)}
    essence["exceptions"] = list(stored.exceptions)
    return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:16]


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    assert field.default_factory is not dataclasses.MISSING, f"option {field.name} has no default"
    return field.default_factory()


def test_every_stored_schedule_field_is_classified() -> None:
    fields = {f.name for f in dataclasses.fields(StoredSchedule)}
    unclassified = fields - set(DEFINITION) - set(BOOKKEEPING) - set(OPTIONS)
    assert not unclassified, (
        f"classify the new StoredSchedule field(s) {sorted(unclassified)}: a schedule option goes in "
        "OPTIONS with a value that sets it, and enters schedule_fingerprint only when set"
    )
    assert not (set(DEFINITION) | set(BOOKKEEPING) | set(OPTIONS)) - fields, "a classified field is gone"


def test_every_target_and_spec_field_is_classified() -> None:
    target_fields = {f.name for f in dataclasses.fields(ScheduleTarget)}
    assert target_fields == set(TARGET_DEFINITION) | set(TARGET_OPTIONS), (
        "classify the new ScheduleTarget field: a target option goes in TARGET_OPTIONS, and "
        "ScheduleTarget.to_json writes it only when set"
    )
    spec_fields = {f.name for f in dataclasses.fields(ScheduleSpec)}
    assert spec_fields == set(SPEC_STORED_AS), (
        f"store the new ScheduleSpec field(s) {sorted(spec_fields - set(SPEC_STORED_AS))} in StoredSchedule "
        "(engine/schedules/stored.py maps them) and classify them here"
    )
    stored = {f.name for f in dataclasses.fields(StoredSchedule)}
    assert {name for name in SPEC_STORED_AS.values() if name} <= stored


def test_a_schedule_with_every_option_at_its_default_keeps_the_fingerprint_from_before_the_options() -> None:
    assert schedule_fingerprint(BASE) == fingerprint_before_options(BASE)


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_an_option_enters_the_fingerprint_only_when_set(option: str) -> None:
    [field] = [f for f in dataclasses.fields(StoredSchedule) if f.name == option]
    at_default = dataclasses.replace(BASE, **{option: default_of(field)})
    assert schedule_fingerprint(at_default) == fingerprint_before_options(BASE), (
        f"option {option} at its default changes the fingerprint: every existing pre-approval would lapse"
    )
    is_set = dataclasses.replace(BASE, **{option: OPTIONS[option]})
    assert schedule_fingerprint(is_set) != schedule_fingerprint(BASE), (
        f"option {option}, set, is not part of what a pre-approval consents to"
    )


@pytest.mark.parametrize("option", sorted(TARGET_OPTIONS))
def test_a_target_option_enters_the_fingerprint_only_when_set(option: str) -> None:
    target = ScheduleTarget.from_json(BASE.target)
    [field] = [f for f in dataclasses.fields(ScheduleTarget) if f.name == option]
    at_default = dataclasses.replace(
        BASE, target=dataclasses.replace(target, **{option: default_of(field)}).to_json()
    )
    assert schedule_fingerprint(at_default) == fingerprint_before_options(BASE)
    is_set = dataclasses.replace(
        BASE, target=dataclasses.replace(target, **{option: TARGET_OPTIONS[option]}).to_json()
    )
    assert schedule_fingerprint(is_set) != schedule_fingerprint(BASE)


def test_a_schedule_saved_without_options_keeps_the_fingerprint_from_before_the_options() -> None:
    """The path `schedule add` takes: parsed, stored, loaded back."""
    spec = schedule.parse_spec(
        name="nights",
        cluster="dev-eu",
        sleep="mon-fri 19:00",
        wake="mon-fri 07:00",
        tz="Europe/Berlin",
        lead_times="60m,10m",
        exceptions="2026-04-03",
    )
    target = ScheduleTarget.zero_pools("web")
    stored = stored_schedule(spec, target, channel="C0OPS", mode="pre_approved", by="U0CREATOR", now=NOW)
    assert schedule_of(stored).fingerprint == fingerprint_before_options(stored)
    with_days_off = schedule.parse_spec(
        name="nights",
        cluster="dev-eu",
        sleep="mon-fri 19:00",
        wake="mon-fri 07:00",
        tz="Europe/Berlin",
        lead_times="60m,10m",
        exceptions="2026-04-03",
        holidays="DE-BY",
    )
    changed = stored_schedule(
        with_days_off, target, channel="C0OPS", mode="pre_approved", by="U0CREATOR", now=NOW
    )
    assert schedule_of(changed).fingerprint != fingerprint_before_options(stored)

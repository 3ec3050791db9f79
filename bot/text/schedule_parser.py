"""`/scale schedule …` text and the schedule modals' submitted values, read into typed arguments.

Pure, like `bot.text.commands`: no Slack client, no I/O; a bad value raises `ScheduleUsage` or comes back
as an error per modal field. `bot.slack.schedule_ui` routes the commands and modals to the service.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, time
from typing import Any

from bot.text import messages, schedule_copy
from bot.text.commands import SubcommandArgs, is_size
from engine.domain.errors import Category, ScalebotError
from engine.schedules.core import days_off
from engine.schedules.core import spec as schedule
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.core.spec import ScheduleError, SpecField

_TIME_TOKEN = re.compile(r"\d{1,2}:\d{2}")
_DATE_LIKE = re.compile(r"\d")
_CHANNEL_REF = re.compile(r"<#([CG][A-Z0-9]{2,30})(?:\|[^>]*)?>")
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,30}")
_QUOTES = "\"'\u201c\u201d\u2018\u2019"
"""Straight and typographic quotes (Slack clients turn " into “ ”), stripped from option values."""
_ADD_KEYS = (
    "cluster",
    "sleep",
    "wake",
    "tz",
    "lead",
    "channel",
    "approval",
    "pools",
    "size",
    "workloads",
    "except",
    "holidays",
    "calendar",
    "on_holiday",
)
_KEY_ALIASES = {
    "timezone": "tz",
    "zone": "tz",
    "leads": "lead",
    "lead_times": "lead",
    "pool": "pools",
    "exceptions": "except",
    "on-holiday": "on_holiday",
    "onholiday": "on_holiday",
    "public_holidays": "holidays",
}
_APPROVAL = {
    "pre": "pre_approved",
    "pre-approved": "pre_approved",
    "pre_approved": "pre_approved",
    "preapproved": "pre_approved",
    "per-run": "per_run",
    "per_run": "per_run",
    "perrun": "per_run",
    "each": "per_run",
}


class ScheduleUsage(ScalebotError, ValueError):
    """Bad `/scale schedule` text: `message` names the problem; `verb` picks the usage line (`hint`)."""

    category = Category.USAGE

    def __init__(self, message: str, verb: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.verb = verb
        self.hint = schedule_copy.usage(verb)


@dataclass(frozen=True, slots=True)
class AddArgs:
    """`schedule add …` as the keyword arguments of `Schedules.add` (minus who asks)."""

    name: str
    cluster: str
    target: ScheduleTarget
    sleep: str
    wake: str | None
    tz: str
    lead_times: str
    channel: str
    approval_mode: str
    exceptions: str
    holidays: str = ""
    calendar: str = ""
    on_holiday: str = ""

    def as_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def parse_add(
    args: SubcommandArgs,
    *,
    channel: str,
    default_cluster: str | None,
    clusters: Sequence[str],
    find_channel: Callable[[str], str] | None = None,
) -> AddArgs:
    """`schedule add NAME key=value …` → AddArgs. Slack splits on spaces and the parser drops quotes,
    so `sleep=Mon-Fri 20:00` arrives as `sleep=Mon-Fri` plus a positional `20:00`: a sleep or wake
    without a time takes the next time token, in the order the options were written.
    `find_channel`: `#name` -> channel ID (raises ValueError with what to do); without it a name is
    refused."""
    if args.flags:
        raise ScheduleUsage(schedule_copy.unknown_flag(sorted(args.flags)[0]), "add")
    options = _add_options(args.options)
    words = list(args.args[1:])
    mentions = [m.group(1) for w in words if (m := _CHANNEL_REF.fullmatch(w))]
    words = [w for w in words if not _CHANNEL_REF.fullmatch(w)]
    if not words:
        raise ScheduleUsage(schedule_copy.missing_name("add"), "add")
    name, rest = words[0], words[1:]
    for key in [k for k, _ in args.options if _canonical(k) in ("sleep", "wake")]:
        options[_canonical(key)] = _with_time(options[_canonical(key)], rest)
    if rest:
        raise ScheduleUsage(messages.unexpected_arguments(rest[:5]), "add")
    if "sleep" not in options:
        example = "when the cluster goes to sleep, e.g. `sleep=Mon-Fri 20:00`"
        raise ScheduleUsage(schedule_copy.missing_option("sleep", example), "add")
    if "tz" not in options:
        raise ScheduleUsage(
            schedule_copy.missing_option("tz", "the IANA zone of the times, e.g. `tz=Europe/Berlin`"), "add"
        )
    cluster = options.get("cluster") or default_cluster
    if not cluster:
        raise ScheduleUsage(messages.no_cluster(sorted(clusters)), "add")
    return AddArgs(
        name=name,
        cluster=cluster,
        target=_target(options),
        sleep=options["sleep"],
        wake=options.get("wake"),
        tz=options["tz"],
        lead_times=options.get("lead", ""),
        channel=_channel(options.get("channel"), mentions, default=channel, find=find_channel),
        approval_mode=_approval(options.get("approval", "per-run")),
        exceptions=options.get("except", ""),
        holidays=options.get("holidays", ""),
        calendar=options.get("calendar", ""),
        on_holiday=options.get("on_holiday", ""),
    )


def _canonical(key: str) -> str:
    return _KEY_ALIASES.get(key, key)


def _add_options(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    options: dict[str, str] = {}
    for raw, value in pairs:
        key = _canonical(raw)
        if key not in _ADD_KEYS:
            close = difflib.get_close_matches(key, [*_ADD_KEYS, *_KEY_ALIASES], n=1, cutoff=0.6)
            raise ScheduleUsage(
                schedule_copy.unknown_option(raw[:40], _canonical(close[0]) if close else None), "add"
            )
        if key == "holidays" and _DATE_LIKE.match(value.strip(_QUOTES)):
            key = "except"  # `holidays=2026-12-24` meant exception dates before holidays named regions
        if key in options:
            raise ScheduleUsage(schedule_copy.given_twice(key), "add")
        options[key] = value.strip(_QUOTES).replace("@", " ")
    return options


def _with_time(value: str, rest: list[str]) -> str:
    if _TIME_TOKEN.search(value):
        return value
    for index, token in enumerate(rest):
        if _TIME_TOKEN.fullmatch(token.strip(_QUOTES)):
            del rest[index]
            return f"{value} {token.strip(_QUOTES)}"
    return value  # the engine's parser names what is missing ("missing time after …")


_WORKLOADS = {"yes": True, "true": True, "on": True, "no": False, "false": False, "off": False}


def _target(options: Mapping[str, str]) -> ScheduleTarget:
    pools = [p for p in re.split(r"[,\s]+", options.get("pools", "")) if p]
    size = options.get("size")
    workloads = options.get("workloads", "").strip().lower() or "no"
    if workloads == "only":
        if pools or size is not None:
            raise ScheduleUsage(schedule_copy.workloads_only_takes_no_pools(), "add")
        return ScheduleTarget.workloads_only()
    if workloads not in _WORKLOADS:
        raise ScheduleUsage(schedule_copy.bad_workloads(workloads[:20]), "add")
    with_workloads = _WORKLOADS[workloads]
    if size is None:
        target = ScheduleTarget.zero_pools(*pools) if pools else ScheduleTarget.whole_cluster()
        return replace(target, workloads=with_workloads)
    if not is_size(size):
        raise ScheduleUsage(schedule_copy.bad_size(size[:20]), "add")
    if len(pools) != 1:
        raise ScheduleUsage(schedule_copy.size_needs_one_pool(), "add")
    if with_workloads:
        raise ScheduleUsage(schedule_copy.workloads_need_zero(), "add")
    return ScheduleTarget.scale_pool(pools[0], int(size))


def _channel(
    value: str | None, mentions: Sequence[str], *, default: str, find: Callable[[str], str] | None
) -> str:
    if value is not None and mentions:
        raise ScheduleUsage(schedule_copy.given_twice("channel"), "add")
    if len(mentions) > 1:
        raise ScheduleUsage(schedule_copy.given_twice("channel"), "add")
    if value is None:
        return mentions[0] if mentions else default
    linked = _CHANNEL_REF.fullmatch(value)
    if linked:
        return linked.group(1)
    if _CHANNEL_ID.fullmatch(value):
        return value
    if not value.startswith("#"):
        raise ScheduleUsage(schedule_copy.channel_by_name(value[:80]), "add")
    if find is None:  # the console: no Slack to ask
        raise ScheduleUsage(schedule_copy.channel_name_needs_slack(value[:80]), "add")
    try:
        # The schedule keeps the ID Slack gave for the name: its rules never compare names.
        return find(value)
    except ValueError as exc:
        raise ScheduleUsage(str(exc), "add") from exc


def _approval(value: str) -> str:
    mode = _APPROVAL.get(value.lower())
    if mode is None:
        raise ScheduleUsage(schedule_copy.bad_approval(value[:40]), "add")
    return mode


def name_arg(args: SubcommandArgs, verb: str) -> str:
    if len(args.args) < 2:
        raise ScheduleUsage(schedule_copy.missing_name(verb), verb)
    if len(args.args) > 2 or args.options:
        extra = list(args.args[2:]) + [f"{k}={v}" for k, v in args.options]
        raise ScheduleUsage(messages.unexpected_arguments(extra[:5]), verb)
    return args.args[1]


def optional_word(args: SubcommandArgs, verb: str) -> str | None:
    """`list` / `next`: an optional cluster, as a word or `cluster=`."""
    words = [*args.args[1:], *(v for k, v in args.options if k == "cluster")]
    others = [f"{k}={v}" for k, v in args.options if k != "cluster"]
    if len(words) > 1 or others:
        raise ScheduleUsage(messages.unexpected_arguments([*words[1:], *others][:5]), verb)
    return words[0] if words else None


def read_postpone_form(values: Mapping[str, Any], tz: str) -> tuple[datetime | None, dict[str, str]]:
    """The modal's date and time, read in the schedule's zone, or errors by block ID."""
    day_text, time_text = (
        _field(values, schedule_copy.POSTPONE_DATE),
        _field(values, schedule_copy.POSTPONE_TIME),
    )
    try:
        day = date.fromisoformat(day_text)
    except ValueError:
        return None, {schedule_copy.POSTPONE_DATE: "Pick a date."}
    match = _TIME_TOKEN.fullmatch(time_text)
    if match is None or int(time_text[:-3]) > 23 or int(time_text[-2:]) > 59:
        return None, {schedule_copy.POSTPONE_TIME: "Pick a time of day (HH:MM)."}
    # A wall time in a DST gap reads as fold=0 and lands after the jump, as the engine's times do.
    local = datetime.combine(day, time(int(time_text[:-3]), int(time_text[-2:])), schedule.parse_zone(tz))
    return local.astimezone(UTC), {}


def read_add_form(values: Mapping[str, Any]) -> tuple[AddArgs | None, dict[str, str]]:
    """The add modal's fields, each checked with the engine's own parsers so the error sits on its
    field; the service then checks the whole (cluster, pools, overlaps, leads against the gaps)."""
    get = {block: _field(values, block) for block in schedule_copy.ADD_FIELDS}
    errors: dict[str, str] = {}
    target = ScheduleTarget.whole_cluster()
    for block in ("name", "cluster", "sleep_days", "sleep_time", "tz", "channel"):
        if not get[block]:
            errors[block] = "Required."
    wake: str | None = None
    if get["wake_days"] or get["wake_time"]:
        missing = "wake_time" if get["wake_days"] else "wake_days"
        if not get[missing]:
            errors[missing] = "Give both the days and the time of the wake, or neither."
        wake = f"{get['wake_days']} {get['wake_time']}"
    checks: list[tuple[str, Callable[[str], object], str]] = [
        ("sleep_days", schedule.parse_weekly, f"{get['sleep_days']} {get['sleep_time']}"),
        ("tz", schedule.parse_zone, get["tz"]),
        ("lead", schedule.parse_lead_times, get["lead"]),
        ("except", schedule.parse_dates, get["except"]),
        ("holidays", _days_off_check(get), ""),
    ]
    if wake is not None and "wake_days" not in errors and "wake_time" not in errors:
        checks.append(("wake_days", schedule.parse_weekly, wake))
    for block, parse, text in checks:
        if block in errors or (block == "sleep_days" and "sleep_time" in errors):
            continue
        try:
            parse(text)
        except ScheduleError as exc:
            errors[block] = str(exc)[:300]
    try:
        target = _target({"pools": get["pools"], "workloads": get["workloads"]})
    except ScheduleUsage as exc:
        errors["pools"] = exc.message
    if errors:
        return None, errors
    form = AddArgs(
        name=get["name"],
        cluster=get["cluster"],
        target=target,
        sleep=f"{get['sleep_days']} {get['sleep_time']}",
        wake=wake,
        tz=get["tz"],
        lead_times=get["lead"],
        channel=get["channel"],
        approval_mode=get["approval"] or "per_run",
        exceptions=get["except"],
        holidays=get["holidays"],
        calendar=get["calendar"],
        on_holiday=get["on_holiday"],
    )
    return form, {}


def _days_off_check(get: Mapping[str, str]) -> Callable[[str], object]:
    """The add modal's days-off fields, checked for their form (the service checks they exist)."""

    def check(_: str) -> object:
        try:
            return days_off.parse_rule(
                holidays=get["holidays"], calendar=get["calendar"], action=get["on_holiday"]
            )
        except days_off.DaysOffError as exc:
            raise ScheduleError(str(exc), "holidays") from None

    return check


def spec_problem(form: AddArgs) -> ScheduleError | None:
    """What is wrong with the schedule itself (pure: no cluster, no database), or None."""
    try:
        schedule.parse_spec(
            name=form.name,
            cluster=form.cluster,
            sleep=form.sleep,
            wake=form.wake,
            tz=form.tz,
            lead_times=form.lead_times,
            exceptions=form.exceptions,
            holidays=form.holidays,
            calendar=form.calendar,
            on_holiday=form.on_holiday,
        )
    except ScheduleError as exc:
        return exc
    return None


FIELD_BLOCK: dict[SpecField, str] = {
    "name": "name",
    "cluster": "cluster",
    "sleep": "sleep_days",
    "wake": "wake_days",
    "tz": "tz",
    "lead": "lead",
    "except": "except",
    "holidays": "holidays",
    "channel": "channel",
    "target": "pools",
    "approval": "approval",
}
"""The add modal's block for each part of a schedule a refusal can be about."""


def _field(values: Mapping[str, Any], block: str) -> str:
    element = (values.get(block) or {}).get(block) or {}
    for key in ("value", "selected_date", "selected_time", "selected_conversation"):
        if element.get(key):
            return str(element[key]).strip()
    option = element.get("selected_option") or {}
    return str(option.get("value") or "").strip()


def view_state(view: Mapping[str, Any]) -> Mapping[str, Any]:
    state = view.get("state") or {}
    values = state.get("values") if isinstance(state, Mapping) else None
    return values if isinstance(values, Mapping) else {}


def view_metadata(view: Mapping[str, Any]) -> dict[str, Any]:
    try:
        data = json.loads(str(view.get("private_metadata") or "{}"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

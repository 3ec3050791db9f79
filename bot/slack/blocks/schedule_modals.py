"""Block Kit for the two schedule modals: "Postpone until…" (a date and a time in the schedule's zone)
and `/scale schedule add` without arguments (the command's fields, with time pickers).

Pure: built only with `slack_sdk.models` views and blocks, no I/O, no clock. The callback IDs and
the other schedule renderings are `bot.slack.blocks.schedules`'; the field IDs and the reading of a
submission are `bot.text.schedule_copy`'s and `bot.text.schedule_parser`'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from slack_sdk.models.blocks import (
    ConversationSelectElement,
    DatePickerElement,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
    TimePickerElement,
)
from slack_sdk.models.views import View

from bot.slack.blocks.kit import esc
from bot.slack.blocks.schedules import CALLBACK_ADD, CALLBACK_POSTPONE
from bot.text import schedule_copy
from engine.domain.announcement import Announcement
from engine.schedules.core import spec as schedule


def postpone_modal(note: Announcement, *, tz: str, default: datetime) -> View:
    """ "Postpone until…": a date and a time in the schedule's zone; `default` is preselected."""
    local = default.astimezone(schedule.parse_zone(tz))
    current = schedule.describe(note.effective, tz) if note.effective else "its time"
    intro = (
        f"Move *{esc(note.cluster)}*'s event of {esc(current)} to another time. Only this occurrence "
        "moves; the schedule is unchanged. A time past the next opposite event skips it instead."
    )
    meta = json.dumps({"key": note.key, "channel": note.channel})
    return View(
        type="modal",
        callback_id=CALLBACK_POSTPONE,
        title=PlainTextObject(text="Postpone until…"),
        submit=PlainTextObject(text="Postpone"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=meta,
        blocks=[
            SectionBlock(text=MarkdownTextObject(text=intro)),
            InputBlock(
                block_id=schedule_copy.POSTPONE_DATE,
                label=PlainTextObject(text="Date"),
                element=DatePickerElement(
                    action_id=schedule_copy.POSTPONE_DATE, initial_date=local.date().isoformat()
                ),
            ),
            InputBlock(
                block_id=schedule_copy.POSTPONE_TIME,
                label=PlainTextObject(text=f"Time ({tz})"[:2000]),
                element=TimePickerElement(
                    action_id=schedule_copy.POSTPONE_TIME, initial_time=f"{local:%H:%M}"
                ),
            ),
        ],
    )


def add_modal(clusters: Sequence[str], *, cluster: str | None, channel: str, tz: str) -> View:
    """`/scale schedule add` without arguments: the same fields as the command, with time pickers."""
    options = [Option(text=PlainTextObject(text=c[:75]), value=c[:150]) for c in clusters[:100]]
    initial = next((o for o in options if o.value == cluster), None)
    approval = [
        Option(text=PlainTextObject(text="Approval at each run"), value="per_run"),
        Option(text=PlainTextObject(text="Pre-approved by me (approvers only)"), value="pre_approved"),
    ]
    on_holiday = [
        Option(text=PlainTextObject(text="Stay asleep (no wake, no sleep)"), value="stay_asleep"),
        Option(text=PlainTextObject(text="Skip the wake"), value="skip_wake"),
        Option(text=PlainTextObject(text="Skip the sleep (stay awake)"), value="skip_sleep"),
    ]
    workloads = [
        Option(text=PlainTextObject(text="Leave them running"), value="no"),
        Option(text=PlainTextObject(text="Scale them to zero first"), value="yes"),
        Option(text=PlainTextObject(text="Only the workloads (no pool changes)"), value="only"),
    ]
    blocks = [
        _text_input("name", "Name", placeholder="nights"),
        InputBlock(
            block_id="cluster",
            label=PlainTextObject(text="Cluster"),
            element=StaticSelectElement(action_id="cluster", options=options, initial_option=initial),
        ),
        _text_input("sleep_days", "Sleep on (days)", initial="Mon-Fri", hint="Mon-Fri, daily, Fri, Sat,Sun"),
        _time_input("sleep_time", "Sleep at", "20:00"),
        _text_input("wake_days", "Wake on (days)", initial="Mon-Fri", optional=True, hint="Empty: no wake"),
        _time_input("wake_time", "Wake at", "07:00", optional=True),
        _text_input("tz", "Time zone (IANA)", initial=tz, hint="e.g. Europe/Berlin, America/New_York, UTC"),
        _text_input(
            "lead", "Announce before", initial="60m,10m", optional=True, hint="Empty: no announcements"
        ),
        InputBlock(
            block_id="channel",
            label=PlainTextObject(text="Announce in"),
            element=ConversationSelectElement(action_id="channel", initial_conversation=channel or None),
        ),
        _select_input("approval", "Approval", approval),
        _text_input("pools", "Pools", optional=True, hint="Empty: every pool of the cluster; or web,batch"),
        _select_input(
            "workloads",
            "Workloads",
            workloads,
            optional=True,
            hint="Scaled to zero before the pools (CronJobs suspended); the wake restores them",
        ),
        _text_input("except", "Except on", optional=True, hint="Holidays: 2026-12-24,2026-12-31"),
        _text_input(
            "holidays", "Public holidays of", optional=True, hint="Country and region, e.g. DE-BY or US"
        ),
        _text_input(
            "calendar", "Calendar", optional=True, hint="A calendar of the configuration, e.g. releases"
        ),
        _select_input("on_holiday", "On a holiday or calendar day", on_holiday, optional=True),
    ]
    return View(
        type="modal",
        callback_id=CALLBACK_ADD,
        title=PlainTextObject(text="New schedule"),
        submit=PlainTextObject(text="Save"),
        close=PlainTextObject(text="Cancel"),
        blocks=blocks,
    )


def _text_input(
    block: str,
    label: str,
    *,
    initial: str = "",
    placeholder: str = "",
    hint: str = "",
    optional: bool = False,
) -> InputBlock:
    element = PlainTextInputElement(
        action_id=block, initial_value=initial or None, placeholder=placeholder or None, max_length=200
    )
    return InputBlock(
        block_id=block,
        label=PlainTextObject(text=label),
        element=element,
        hint=PlainTextObject(text=hint) if hint else None,
        optional=optional,
    )


def _select_input(
    block: str, label: str, options: list[Option], *, optional: bool = False, hint: str = ""
) -> InputBlock:
    """A choice among `options`, the first one picked."""
    return InputBlock(
        block_id=block,
        label=PlainTextObject(text=label),
        element=StaticSelectElement(action_id=block, options=options, initial_option=options[0]),
        hint=PlainTextObject(text=hint) if hint else None,
        optional=optional,
    )


def _time_input(block: str, label: str, initial: str, *, optional: bool = False) -> InputBlock:
    return InputBlock(
        block_id=block,
        label=PlainTextObject(text=label),
        element=TimePickerElement(action_id=block, initial_time=initial),
        optional=optional,
    )

"""The CLI's read-only commands: what SQLite records, read without a kubeconfig.

`scalebot ops list|show`, `status` and `schedule list|next` read the database only (every cluster
recorded there, the simulated one included), so they work on a laptop with no cluster access. Each takes
`-o text|json|yaml` as kubectl's `get` does; json and yaml carry the same fields, times in ISO 8601
with their zone (UTC).

They open the file read-only (`Store.read_only`): a missing file is refused (`no database at PATH`,
exit 2) rather than created, a read-only copy reads, and nothing is migrated or written (an older
schema is read through a migrated copy in memory). They read the store itself, not the operations
service, whose import brings the cluster client: `ops list` and `status` answer in a fraction of a
second. Only the schedule views load the schedule service (days off, overrides), and `status` only
when the database holds a schedule.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from bot.cli.common import EXIT_OK
from bot.slack.directory import Names, PeopleNames, no_names
from engine.domain.clock import SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import Operation, OpState

if TYPE_CHECKING:
    from engine.schedules.core.model import Schedule
    from engine.schedules.service import Schedules
    from engine.store.database import Store

NAME_TIMEOUT_SECONDS = 5
"""One users.info call of the CLI at most this long; a failure shows IDs from then on."""


class ReadError(ScalebotError):
    """Bad input for a read command: `bot.cli.main` prints it as one line and exits 2."""

    category = Category.USAGE


class HistoryEntry(NamedTuple):
    """One line of an operation's history: an audit row or a step of its journal."""

    at: datetime
    actor: str
    action: str
    detail: str


def stamp(at: datetime | None) -> str:
    """The CLI's one time format: ISO 8601 with the zone, to the second."""
    return at.isoformat(timespec="seconds") if at is not None else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """kubectl's columns: a header row, each column as wide as its widest cell, three spaces apart
    (the last column, free text, is not padded)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "   ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def age(since: datetime, now: datetime) -> str:
    """kubectl's AGE: the largest unit that fits, "45s", "12m", "5h", "3d"."""
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def emit(data: Any, output: str, text: Callable[[], Sequence[str]]) -> None:
    """Print `data` as json or yaml, or the `text` lines (also for `wide` and `name`, which the
    command's `text` lines show)."""
    if output == "json":
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    else:
        for line in text():
            print(line)


def open_records(db: str) -> Store:
    """The database, read-only: never created, migrated or written."""
    with _numpy_unseen():
        from engine.store.database import Store
    return Store.read_only(db)  # a StoreError (configuration: exit 2) names the file


@contextlib.contextmanager
def _numpy_unseen() -> Iterator[None]:
    """sqlite-utils imports numpy, when installed (matplotlib brings it), only to store numpy
    values, which the store never writes; that import is a fifth of a read command's time. A read
    command that is first to load the store hides numpy from it; numpy imports normally after."""
    hidden = "numpy" not in sys.modules
    if hidden:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        yield
    finally:
        if hidden and sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]


def history(store: Store, op_id: str) -> list[HistoryEntry]:
    """An operation's audit rows and journal steps in time order (as `Operations.history` has them)."""
    entries = [HistoryEntry(r.at, r.actor, r.action, r.detail) for r in store.audit_rows(op_id=op_id)]
    entries += [
        HistoryEntry(r.at, "scalebot", f"{r.step}: {r.event}", r.detail) for r in store.journal_rows(op_id)
    ]
    return sorted(entries, key=lambda e: e.at)


def operation_json(op: Operation, history: Sequence[HistoryEntry] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": op.id,
        "kind": op.kind.value,
        "state": op.state.value,
        "cluster": op.target.cluster,
        "requested_by": op.requested_by,
        "created_at": stamp(op.created_at),
        "updated_at": stamp(op.updated_at),
        "summary": op.plan.summary(),
        "target": op.target.to_json(),
        "error": op.error,
    }
    if history is not None:
        data["plan"] = op.plan.to_json()
        data["history"] = [
            {"at": stamp(e.at), "actor": e.actor, "action": e.action, "detail": e.detail} for e in history
        ]
    return data


def people_names(env: Mapping[str, str]) -> Names:
    """Slack users by name in the CLI's text output when it has the bot token (SLACK_BOT_TOKEN,
    SLACK_API_URL): their IDs otherwise, and whenever Slack does not answer. JSON and YAML keep
    the IDs: they are for programs."""
    token = env.get("SLACK_BOT_TOKEN", "")
    if not token:
        return no_names
    from slack_sdk import WebClient

    base_url = env.get("SLACK_API_URL") or WebClient.BASE_URL
    return PeopleNames(WebClient(token=token, base_url=base_url, timeout=NAME_TIMEOUT_SECONDS))


def list_operations(args: argparse.Namespace) -> int:
    """The recent operations, newest first: a header row and one row each (`-o wide` adds who asked,
    the creation time and the error; `-o name` prints `operation/ID` lines)."""
    found = open_records(args.db).list_operations(limit=50)
    emit([operation_json(op) for op in found], args.output, lambda: _operation_rows(found, args))
    return EXIT_OK


def _operation_rows(found: Sequence[Operation], args: argparse.Namespace) -> list[str]:
    if not found:
        return ["no operations recorded in " + args.db]
    if args.output == "name":
        return [f"operation/{op.id}" for op in found]
    now = SystemClock().now()
    header = ["ID", "STATE", "KIND", "CLUSTER", "AGE", "SUMMARY"]
    rows = [
        [op.id, op.state.value, op.kind.value, op.target.cluster, age(op.created_at, now), op.plan.summary()]
        for op in found
    ]
    if args.output == "wide":
        names = people_names(os.environ)
        header[-1:] = ["REQUESTED BY", "CREATED", "SUMMARY", "ERROR"]
        for row, op in zip(rows, found, strict=True):
            row[-1:] = [names(op.requested_by), stamp(op.created_at), op.plan.summary(), op.error or ""]
    return table(header, rows)


def show_operation(args: argparse.Namespace) -> int:
    store = open_records(args.db)
    op = store.get_operation(args.operation_id)
    if op is None:
        raise ReadError(
            f"no operation {args.operation_id} in {args.db}; `scalebot operations list` shows the recent ones"
        )
    entries = history(store, op.id)
    names = people_names(os.environ) if args.output == "text" else no_names
    emit(operation_json(op, entries), args.output, lambda: _show_lines(op, entries, names))
    return EXIT_OK


def _show_lines(op: Operation, history: Sequence[HistoryEntry], names: Names) -> list[str]:
    requester = names(op.requested_by)
    lines = [
        f"{op.id}: {op.kind.value} {op.state.value}, requested by {requester}, {stamp(op.created_at)}",
        op.plan.to_text(),
    ]
    if op.error:
        lines.append(f"error: {op.error}")
    for entry in history:
        detail = f": {entry.detail}" if entry.detail else ""
        lines.append(f"  {stamp(entry.at)} {names(entry.actor):<16} {entry.action}{detail}")
    return lines


def _schedules(store: Store) -> Schedules:
    """The schedule service over the read-only store (its days off and overrides applied); no
    cluster is connected and nothing runs."""
    from engine.operations.service import new_operations
    from engine.schedules.service import Schedules

    clock = SystemClock()
    return Schedules(store, new_operations(store, {}, {}, clock), clock)


def listed_schedules(store: Store, *, cluster: str | None = None) -> list[Schedule]:
    """Every schedule (paused ones too) by name, as `schedule list` shows it: each row through the
    store's one mapping (`engine.schedules.stored.schedule_of`) and its current pre-approvers. The
    schedule service is what `next` needs (days off resolved through its calendars, which load the
    holiday tables and the cluster client: half a second); a listed schedule names its days-off
    rule, never its days, and `test_cli_reads` holds each line to the service's own."""
    from dataclasses import replace

    from engine.schedules.stored import schedule_of

    def with_approvers(sched: Schedule) -> Schedule:
        if sched.approval_mode != "pre_approved":
            return sched
        rows = store.schedule_approvals(sched.name)
        current = (a.user for a in rows if a.fingerprint == sched.fingerprint)
        return replace(sched, approvers=tuple(dict.fromkeys(current)))

    return [with_approvers(schedule_of(stored)) for stored in store.list_schedules(cluster=cluster)]


def cmd_schedule(args: argparse.Namespace) -> int:
    (list_schedules if args.action == "list" else next_schedule_events)(args)
    return EXIT_OK


def list_schedules(args: argparse.Namespace) -> None:
    from engine.schedules.core.text import schedule_summary

    found = listed_schedules(open_records(args.db), cluster=args.cluster)
    emit(
        [
            {
                "name": s.name,
                "cluster": s.cluster,
                "enabled": s.enabled,
                "summary": schedule_summary(s),
                "channel": s.channel,
            }
            for s in found
        ],
        args.output,
        lambda: _schedule_rows(found, schedule_summary, args),
    )


def _schedule_rows(
    found: Sequence[Any], summary: Callable[[Any], str], args: argparse.Namespace
) -> list[str]:
    if not found:
        return [f"no schedules in {args.db}"]
    if args.output == "name":
        return [f"schedule/{s.name}" for s in found]
    header = ["NAME", "CLUSTER", "STATUS", "SCHEDULE"]
    rows = [[s.name, s.cluster, "active" if s.enabled else "paused", summary(s)] for s in found]
    if args.output == "wide":
        header.append("CHANNEL")
        for row, sched in zip(rows, found, strict=True):
            row.append(sched.channel or "")
    return table(header, rows)


def next_schedule_events(args: argparse.Namespace) -> None:
    from engine.schedules.core.due import first_of_each

    service = _schedules(open_records(args.db))
    clusters = {s.name: s.cluster for s in service.all_schedules()}
    events = first_of_each(service.next_events(service.clock.now(), limit=50, cluster=args.cluster))
    rows = [
        {
            "at": stamp(at),
            "event": str(occ.action),
            "schedule": occ.schedule,
            "cluster": clusters.get(occ.schedule, ""),
        }
        for occ, at in events
    ]
    emit(
        rows,
        args.output,
        lambda: (
            ([f"schedule/{r['schedule']}" for r in rows] if args.output == "name" else [])
            or table(["AT", "EVENT", "SCHEDULE", "CLUSTER"], [list(r.values()) for r in rows])
            if rows
            else [f"nothing scheduled in {args.db}"]
        ),
    )


def status(args: argparse.Namespace) -> int:
    """What the database knows of each cluster: operations in flight, pools asleep (sizes recorded
    to restore), the next scheduled event. The pools' live sizes need the cluster (`plan wake`)."""
    store = open_records(args.db)
    now = SystemClock().now()
    active = store.list_operations(states=(OpState.AWAITING_APPROVAL, OpState.RUNNING), limit=100)
    scheduled = store.list_schedules()
    # The schedule service (days off, overrides) only when there is a schedule to ask it about.
    service = _schedules(store) if scheduled else None
    names = sorted(
        {o.target.cluster for o in store.list_operations(limit=200)} | {s.cluster for s in scheduled}
    )
    wanted = [args.cluster] if args.cluster else names
    data = []
    for cluster in wanted:
        upcoming = service.next_event(cluster, now) if service is not None else None
        data.append(
            {
                "cluster": cluster,
                "operations": [operation_json(o) for o in active if o.target.cluster == cluster],
                "asleep": [
                    {
                        "pool": r.pool,
                        "restore_to": r.desired,
                        "since": stamp(r.recorded_at),
                        "operation": r.op_id,
                    }
                    for r in store.restore_records(cluster)
                ],
                "next_event": None
                if upcoming is None
                else {"at": stamp(upcoming.at), "event": str(upcoming.action), "schedule": upcoming.schedule},
            }
        )
    emit(data, args.output, lambda: _status_lines(data) or [f"nothing recorded in {args.db}"])
    return EXIT_OK


def _status_lines(data: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for c in data:
        lines.append(f"cluster {c['cluster']}")
        lines += [f"  {o['id']} {o['state']}: {o['kind']} {o['summary']}" for o in c["operations"]]
        lines += [
            f"  pool {a['pool']} asleep since {a['since']}, wakes to {a['restore_to']}" for a in c["asleep"]
        ]
        nxt = c["next_event"]
        lines.append(
            f"  next: {nxt['event']} {nxt['at']} ({nxt['schedule']})" if nxt else "  nothing scheduled"
        )
    return lines

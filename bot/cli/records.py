"""The CLI's read-only commands: what SQLite records, read without a kubeconfig.

`scalebot ops list|show`, `status` and `schedule list|next` read the database only (every cluster
recorded there, the simulated one included), so they work on a laptop with no cluster access. Each takes
`-o text|json|yaml` as kubectl's `get` does; json and yaml carry the same fields, times in ISO 8601
with their zone (UTC).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import yaml

from bot.slack.directory import Names, PeopleNames, no_names
from engine.domain.clock import SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import Operation
from engine.operations.service import HistoryEntry, Operations, new_operations
from engine.schedules.service import Schedules
from engine.schedules.text import schedule_summary
from engine.schedules.timer import first_of_each
from engine.store.base import StoreError
from engine.store.database import Store

OUTPUTS = ("text", "json", "yaml")
NAME_TIMEOUT_SECONDS = 5
"""One users.info call of the CLI at most this long; a failure shows IDs from then on."""


class ReadError(ScalebotError):
    """Bad input for a read command: `bot.cli.main` prints it as one line and exits 2."""

    category = Category.USAGE


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default="text", help="output format (default text)"
    )


def stamp(at: datetime | None) -> str:
    """The CLI's one time format: ISO 8601 with the zone, to the second."""
    return at.isoformat(timespec="seconds") if at is not None else ""


def emit(data: Any, output: str, text: Callable[[], Sequence[str]]) -> None:
    """Print `data` as json or yaml, or the `text` lines."""
    if output == "json":
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    else:
        for line in text():
            print(line)


def open_records(db: str) -> Operations:
    """The operations service over the database alone: no cluster is connected, nothing runs."""
    try:
        store = Store(db)
    except StoreError as exc:
        raise ReadError(str(exc)) from exc
    return new_operations(store, {}, {}, SystemClock())


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


def list_operations(args: argparse.Namespace) -> None:
    ops = open_records(args.db)
    found = ops.list_operations(limit=50)
    names = people_names(os.environ) if args.output == "text" else no_names
    emit(
        [operation_json(op) for op in found],
        args.output,
        lambda: (
            [
                f"{op.id}  {op.state.value:<17} {op.kind.value:<5} {names(op.requested_by):<16} "
                f"{stamp(op.created_at)}  {op.plan.summary()}"
                for op in found
            ]
            or ["no operations recorded in " + args.db]
        ),
    )


def show_operation(args: argparse.Namespace) -> None:
    ops = open_records(args.db)
    op = ops.get(args.operation_id)
    if op is None:
        raise ReadError(
            f"no operation {args.operation_id} in {args.db}; `scalebot operations list` shows the recent ones"
        )
    history = ops.history(op.id)
    names = people_names(os.environ) if args.output == "text" else no_names
    emit(operation_json(op, history), args.output, lambda: _show_lines(op, history, names))


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


def _schedules(args: argparse.Namespace) -> Schedules:
    ops = open_records(args.db)
    return Schedules(ops.store, ops, ops.clock)


def list_schedules(args: argparse.Namespace) -> None:
    found = _schedules(args).all_schedules(cluster=args.cluster)
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
        lambda: (
            [f"{s.name}: {schedule_summary(s)}{'' if s.enabled else ' (paused)'}" for s in found]
            or [f"no schedules in {args.db}"]
        ),
    )


def next_schedule_events(args: argparse.Namespace) -> None:
    service = _schedules(args)
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
            [f"{r['at']}  {r['event']:<5} {r['schedule']}  ({r['cluster']})" for r in rows]
            or [f"nothing scheduled in {args.db}"]
        ),
    )


def status(args: argparse.Namespace) -> None:
    """What the database knows of each cluster: operations in flight, pools asleep (sizes recorded
    to restore), the next scheduled event. The pools' live sizes need the cluster (`plan wake`)."""
    ops = open_records(args.db)
    service = Schedules(ops.store, ops, ops.clock)
    active = ops.list_operations(active_only=True, limit=100)
    names = sorted(
        {o.target.cluster for o in ops.list_operations(limit=200)}
        | {s.cluster for s in service.all_schedules()}
    )
    wanted = [args.cluster] if args.cluster else names
    data = []
    for cluster in wanted:
        upcoming = service.next_event(cluster, ops.clock.now())
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
                    for r in ops.store.restore_records(cluster)
                ],
                "next_event": None
                if upcoming is None
                else {"at": stamp(upcoming.at), "event": str(upcoming.action), "schedule": upcoming.schedule},
            }
        )
    emit(data, args.output, lambda: _status_lines(data) or [f"nothing recorded in {args.db}"])


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

"""The CLI's read-only commands: what SQLite records, read without a kubeconfig.

`scalebot ops list|show` reads the database only (the operations of every cluster recorded
there, the simulated one included), so it works on a laptop with no cluster access. Each takes
`-o text|json|yaml` as kubectl's `get` does; json and yaml carry the same fields, times in ISO 8601
with their zone (UTC).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import yaml

from engine.clock import SystemClock
from engine.operation import Operation
from engine.operations import HistoryEntry, Operations, new_operations
from engine.store import Store, StoreError

OUTPUTS = ("text", "json", "yaml")


class ReadError(Exception):
    """Bad input for a read command: `bot.cli` prints it as one line and exits 2."""


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


def list_operations(args: argparse.Namespace) -> None:
    ops = open_records(args.db)
    found = ops.list_operations(limit=50)
    emit(
        [operation_json(op) for op in found],
        args.output,
        lambda: (
            [
                f"{op.id}  {op.state.value:<17} {op.kind.value:<5} {op.requested_by:<16} "
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
    emit(operation_json(op, history), args.output, lambda: _show_lines(op, history))


def _show_lines(op: Operation, history: Sequence[HistoryEntry]) -> list[str]:
    lines = [
        f"{op.id}: {op.kind.value} {op.state.value}, requested by {op.requested_by}, {stamp(op.created_at)}",
        op.plan.to_text(),
    ]
    if op.error:
        lines.append(f"error: {op.error}")
    for entry in history:
        detail = f": {entry.detail}" if entry.detail else ""
        lines.append(f"  {stamp(entry.at)} {entry.actor:<16} {entry.action}{detail}")
    return lines

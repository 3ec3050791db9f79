"""`scalebot drain`, `cordon` and `uncordon`: nodes by name or selector, with kubectl's semantics and
wording (also `--dry-run=client|server`), plus the drain pre-flight `plan drain` shows.

Each goes through the operations service (`engine.operations.service_nodes`), as Slack's cordon and
drain do, so the service's rules hold here too: refused while an operation holds a node or its pool,
recorded in the audit log of `--db`, and a forced drain confined to the force scope its confirmation
showed (a Pod outside it is refused, not forced)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading

from bot.cli.common import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    Refused,
    cli_user,
    confirm,
    duration_flag,
    live_display,
    on_interrupt,
)
from bot.cli.live import DrainLive
from bot.cli.operations_from_flags import node_operations
from engine.domain.clock import SystemClock
from engine.domain.model import NodeInfo
from engine.domain.settings import DrainSettings
from engine.operations.service import Operations
from engine.operations.service_nodes import DrainFlags, DrainPreview, DrainReport


def selected_nodes(ops: Operations, args: argparse.Namespace) -> list[NodeInfo]:
    """The nodes the arguments name or select; an unknown name or an empty selection is an error."""
    return ops.select_nodes(ops.clusters()[0], args.nodes, args.selector, by=cli_user())


def drain_flags(args: argparse.Namespace) -> DrainFlags:
    return DrainFlags(
        force=args.force,
        ignore_daemonsets=args.ignore_daemonsets,
        delete_emptydir_data=args.delete_emptydir_data,
        disable_eviction=bool(getattr(args, "disable_eviction", False)),
        pod_selector=getattr(args, "pod_selector", None),
        grace_period_seconds=getattr(args, "grace_period", None),
    )


def preview(ops: Operations, nodes: list[NodeInfo], flags: DrainFlags) -> DrainPreview:
    return ops.drain_preview(ops.clusters()[0], nodes, flags, by=cli_user())


def cmd_drain(args: argparse.Namespace) -> int:
    timeout = duration_flag(args.timeout, "--timeout")
    interval = duration_flag(args.interval, "--interval")
    if args.parallel < 1:
        raise CliError("--parallel must be at least 1")
    ops = node_operations(args)
    cluster = ops.clusters()[0]
    nodes = selected_nodes(ops, args)
    flags = drain_flags(args)
    if args.dry_run == "client":
        print(preview(ops, nodes, flags).plan.to_text())
        return EXIT_OK
    if args.dry_run == "server":
        return _server_dry_run(ops, nodes, flags)
    approved = None
    if (args.force or args.disable_eviction) and not args.yes:
        flag = "--force" if args.force else "--disable-eviction"
        shown = preview(ops, nodes, flags)
        confirm(args, shown.to_text(), f"drain {flag} {', '.join(n.name for n in nodes)}")
        approved = shown.force_scope  # what was shown is all the drain may force
    cancel = threading.Event()
    on_interrupt(cancel)

    # On a terminal one live panel with the figures; elsewhere the condition messages, one per change.
    live = DrainLive([n.name for n in nodes]) if live_display(args) else None

    def show(report: DrainReport) -> None:
        if live is None:
            print(report.condition_message(args.style) or report.summary_line(), flush=True)

    names = [n.name for n in nodes]
    settings = DrainSettings(interval=interval, timeout=timeout or None, parallel=args.parallel)
    with contextlib.ExitStack() as panel:

        def started() -> None:
            """The service took the drain: say so, then draw the panel (on a terminal)."""
            for node in nodes:
                cordoned = "already cordoned" if node.unschedulable else "cordoned"
                print(f"node/{node.name} {cordoned}", flush=True)
            if live is not None:
                panel.enter_context(live)

        outcome = ops.drain_nodes(
            cluster,
            names,
            flags,
            settings,
            by=cli_user(),
            approved=approved,
            on_report=show,
            on_progress=live.on_progress if live is not None else None,
            cancel=cancel,
            on_start=started,
        )
    if live is not None:
        live.summary(outcome, SystemClock().now())
    failed = outcome.failed_nodes
    if outcome.completed or (failed and not outcome.timed_out and not outcome.cancelled):
        for node in nodes:
            if node.name not in failed:
                print(f"node/{node.name} drained")
        if not failed:
            return EXIT_OK
        # kubectl's wording: each refused node named with its reason, then the pending list.
        for name, reason in sorted(failed.items()):
            print(
                f'error: unable to drain node "{name}" due to error: {reason}, continuing command...',
                file=sys.stderr,
            )
        pending = "".join(f"\n {name}" for name in sorted(failed))
        print(f"There are pending nodes to be drained:{pending}", file=sys.stderr)
        return EXIT_INCOMPLETE
    if outcome.cancelled:
        print("interrupted: the nodes stay cordoned; run `scalebot uncordon` to undo", file=sys.stderr)
        return EXIT_INTERRUPTED
    message = outcome.report.condition_message(args.style)
    print(f"error: drain did not complete within {args.timeout}:\n{message}", file=sys.stderr)
    return EXIT_INCOMPLETE


def _server_dry_run(ops: Operations, nodes: list[NodeInfo], flags: DrainFlags) -> int:
    """`--dry-run=server`: kubectl's lines in order (refusals on stderr); exit 1 when the server (a
    PDB, admission) or a rule would refuse one."""
    lines = ops.drain_server_dry_run(ops.clusters()[0], nodes, flags, by=cli_user())
    for line in lines:
        print(line.text, file=sys.stderr if line.refused else sys.stdout)
    return EXIT_INCOMPLETE if any(line.refused for line in lines) else EXIT_OK


def cmd_cordon(args: argparse.Namespace) -> int:
    ops = node_operations(args)
    nodes = selected_nodes(ops, args)
    done = ops.cordon(
        ops.clusters()[0], [n.name for n in nodes], by=cli_user(), unschedulable=args.unschedulable
    )
    if not done.outcome.ok:
        raise Refused(done.outcome)
    verb = "cordoned" if args.unschedulable else "uncordoned"
    for node in nodes:
        print(f"node/{node.name} {verb if node.name in done.changed else 'already ' + verb}")
    return EXIT_OK

"""The `scalebot` command line: drain, cordon, uncordon, plan, and the local sandbox cluster.

Exit codes: 0 done; 1 the operation did not complete (timeout, refused pods); 2 bad input or
configuration (nothing was changed); 130 interrupted. Errors are one line on stderr that names
the problem and what to do.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType

from engine import drainer, filters, plan
from engine.clock import SystemClock
from engine.durations import DurationError, parse_duration
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.model import NodeInfo
from engine.report import DrainReport

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(Exception):
    """A problem with the user's input or environment: printed as one line, exit 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.handler(args))
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except errors.Forbidden as exc:
        print(f"error: forbidden: {exc} (check scalebot's RBAC: manifests/base/rbac.yaml)", file=sys.stderr)
        return EXIT_USAGE
    except errors.TransportError as exc:
        print(f"error: cannot reach the Kubernetes API server: {exc}", file=sys.stderr)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scalebot", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    drain = commands.add_parser("drain", help="cordon and drain nodes (kubectl drain semantics)")
    _add_cluster_args(drain)
    _add_node_args(drain)
    _add_filter_args(drain)
    drain.add_argument("--timeout", default="0", help="give up after this long, e.g. 10m (default 0: wait)")
    drain.add_argument(
        "--grace-period",
        type=int,
        default=None,
        metavar="SECONDS",
        help="termination grace for evicted pods (default: each pod's own)",
    )
    drain.add_argument(
        "--parallel", type=int, default=16, metavar="N", help="evictions in flight (default 16)"
    )
    drain.add_argument("--interval", default="20s", help="longest gap between drain passes (default 20s)")
    drain.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    drain.add_argument(
        "--style",
        choices=("legacy", "current"),
        default="legacy",
        help="Cluster API condition message layout (default legacy)",
    )
    drain.set_defaults(handler=cmd_drain)

    for name, verb in (("cordon", "mark nodes unschedulable"), ("uncordon", "mark nodes schedulable")):
        sub = commands.add_parser(name, help=verb)
        _add_cluster_args(sub)
        _add_node_args(sub)
        sub.set_defaults(handler=cmd_cordon, unschedulable=name == "cordon")

    plan_cmd = commands.add_parser("plan", help="show what an operation would do, changing nothing")
    plan_kinds = plan_cmd.add_subparsers(dest="plan_kind", required=True, metavar="KIND")
    plan_drain = plan_kinds.add_parser("drain", help="pre-flight of a drain")
    _add_cluster_args(plan_drain)
    _add_node_args(plan_drain)
    _add_filter_args(plan_drain)
    plan_drain.add_argument("-o", "--output", choices=("text", "json"), default="text")
    plan_drain.set_defaults(handler=cmd_plan_drain)

    sandbox = commands.add_parser("sandbox", help="a local control plane with kwok nodes to play with")
    sandbox.add_argument("action", choices=("up", "down"))
    sandbox.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".scalebot-sandbox"),
        help="where the sandbox keeps its kubeconfigs and process ids",
    )
    sandbox.set_defaults(handler=cmd_sandbox)
    return parser


def _add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")


def _add_node_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nodes", nargs="*", metavar="NODE")
    parser.add_argument("-l", "--selector", help="select nodes by label, e.g. scalebot.io/pool=batch")


def _add_filter_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force", action="store_true", help="also evict pods without a controller and opted-out pods"
    )
    parser.add_argument(
        "--ignore-daemonsets",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="leave DaemonSet pods in place (default: yes)",
    )
    parser.add_argument(
        "--delete-emptydir-data",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="evict pods with emptyDir volumes, losing that data (default: yes)",
    )


def connect(args: argparse.Namespace) -> KubeApi:
    from engine.kube.client import KubeClient, KubeConfigError

    try:
        return KubeClient.from_config(kubeconfig=args.kubeconfig, context=args.context)
    except KubeConfigError as exc:
        raise CliError(str(exc)) from exc


def resolve_nodes(api: KubeApi, names: Sequence[str], selector: str | None) -> list[NodeInfo]:
    """The nodes a command acts on; an unknown name or an empty selection is an error."""
    if not names and not selector:
        raise CliError("name at least one node, or select nodes with -l/--selector")
    try:
        selected = api.list_nodes(label_selector=selector) if selector else []
    except errors.InvalidRequest as exc:
        raise CliError(f'invalid selector "{selector}": {exc}') from exc
    if selector and not selected:
        raise CliError(f'no node matches the selector "{selector}"')
    known = {n.name: n for n in api.list_nodes()} if names else {}
    missing = [n for n in names if n not in known]
    if missing:
        hint = ", ".join(sorted(known)[:10]) + (" ..." if len(known) > 10 else "")
        raise CliError(f"node(s) not found: {', '.join(missing)}; known nodes: {hint or 'none'}")
    chosen = {n.name: n for n in selected}
    chosen.update({n: known[n] for n in names})
    return [chosen[n] for n in sorted(chosen)]


def drain_options(args: argparse.Namespace) -> filters.DrainOptions:
    return filters.DrainOptions.kubectl(
        force=args.force,
        ignore_daemonsets=args.ignore_daemonsets,
        delete_emptydir_data=args.delete_emptydir_data,
    )


def _duration(text: str, flag: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise CliError(f"{flag}: {exc}") from exc


def cmd_drain(args: argparse.Namespace) -> int:
    timeout = _duration(args.timeout, "--timeout")
    interval = _duration(args.interval, "--interval")
    if args.parallel < 1:
        raise CliError("--parallel must be at least 1")
    api = connect(args)
    nodes = resolve_nodes(api, args.nodes, args.selector)
    options = drain_options(args)
    if args.grace_period is not None:
        options = filters.DrainOptions(**{**options.__dict__, "grace_period_seconds": args.grace_period})
    if args.dry_run:
        print(_plan(api, nodes, options).to_text())
        return EXIT_OK
    cancel = threading.Event()
    _on_interrupt(cancel)

    def show(report: DrainReport) -> None:
        print(report.condition_message(args.style) or "Drain completed", flush=True)

    for node in nodes:
        print(f"node/{node.name} {'already cordoned' if node.unschedulable else 'cordoned'}", flush=True)
    outcome = drainer.drain_nodes(
        api,
        [n.name for n in nodes],
        options=options,
        clock=SystemClock(),
        settings=drainer.DrainSettings(interval=interval, timeout=timeout or None, parallel=args.parallel),
        on_report=show,
        cancel=cancel,
    )
    if outcome.completed:
        for node in nodes:
            print(f"node/{node.name} drained")
        return EXIT_OK
    if outcome.cancelled:
        print("interrupted: the nodes stay cordoned; run `scalebot uncordon` to undo", file=sys.stderr)
        return EXIT_INTERRUPTED
    message = outcome.report.condition_message(args.style)
    print(f"error: drain did not complete within {args.timeout}:\n{message}", file=sys.stderr)
    return EXIT_INCOMPLETE


def cmd_cordon(args: argparse.Namespace) -> int:
    api = connect(args)
    for node in resolve_nodes(api, args.nodes, args.selector):
        changed = api.set_unschedulable(node.name, args.unschedulable)
        verb = "cordoned" if args.unschedulable else "uncordoned"
        print(f"node/{node.name} {verb if changed else 'already ' + verb}")
    return EXIT_OK


def cmd_plan_drain(args: argparse.Namespace) -> int:
    api = connect(args)
    nodes = resolve_nodes(api, args.nodes, args.selector)
    result = _plan(api, nodes, drain_options(args))
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def _plan(api: KubeApi, nodes: Sequence[NodeInfo], options: filters.DrainOptions) -> plan.DrainPlan:
    ctx = filters.DrainContext(
        options=options,
        now=SystemClock().now(),
        daemonset_keys=api.list_daemonset_keys(),
        unreachable_nodes=frozenset(n.name for n in nodes if n.is_unreachable),
    )
    pods = api.list_pods(node_names=[n.name for n in nodes])
    return plan.plan_drain(nodes, pods, api.list_pdbs(), ctx)


def cmd_sandbox(args: argparse.Namespace) -> int:
    from localcluster import sandbox

    if args.action == "down":
        sandbox.down(args.state_dir)
        print("sandbox stopped")
        return EXIT_OK
    info = sandbox.up(args.state_dir)
    print(json.dumps(info, indent=2, default=str))
    return EXIT_OK


def _on_interrupt(cancel: threading.Event) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)

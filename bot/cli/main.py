"""scalebot: drain nodes and scale node pools to zero and back, now or on a schedule, with approvals.

Exit codes: 0 done; 1 the operation did not complete (timeout, refused pods); 2 bad input or
configuration (nothing was changed); 130 interrupted. Errors are one line on stderr that names
the problem and what to do.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from bot.cli import records as cli_read
from bot.cli import report as report_cli
from bot.cli.live import DrainLive, LiveDisplay
from bot.config import logs, providers
from bot.runtime import wiring
from bot.text import messages
from engine.domain.clock import ScaledClock, SystemClock
from engine.domain.durations import DurationError, parse_duration
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import NodeInfo, parse_label_selector
from engine.domain.operation import OperationRequest, OpKind, OpState, Outcome, ProgressEvent, Target
from engine.domain.settings import ConsolidationPolicy, ConsolidationSettings, DrainSettings, RunnerSettings
from engine.domain.wake_waves import WakeWaves, WaveSpec
from engine.drain import driver as drainer
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.report import DrainReport
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.operations.policy import ClusterPolicy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, UserError, new_operations
from engine.planning import advice, consolidation
from engine.planning import preflight as plan
from engine.store.database import AuditUnverifiable, ClaimHeld, Store, StoreError, verify_audit_file

if TYPE_CHECKING:
    from engine.kube.client import KubeClient

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_AUDIT_BROKEN = 1
LOG_FORMATS = ("text", "json")
"""`operations verify-audit`: the hash chain is broken (a row was edited, inserted or deleted), its
columns, triggers or schema version are not this scalebot's, or `--expect-head` is not in it."""
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


EXIT_CODES = {
    Category.USAGE: EXIT_USAGE,
    Category.CONFIGURATION: EXIT_USAGE,
    Category.CLUSTER: EXIT_USAGE,
    Category.TRANSIENT: EXIT_USAGE,
}
"""The CLI's one mapping of a failure's category to its exit code: the command stopped on a failure
its one line names (2); an internal error is not caught, so its traceback shows (1)."""


DEFAULT_GRACEFUL_WINDOW = "5m"


class CliError(ScalebotError):
    """A problem with the user's input or environment: printed as one line, exit 2."""

    category = Category.USAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_format not in LOG_FORMATS:  # argparse checks choices on the command line only
        parser.error(f"SCALEBOT_LOG_FORMAT: '{args.log_format}' is not one of {', '.join(LOG_FORMATS)}")
    # Progress already goes to stdout; the log is for -v (the operation log with node=/pod= fields).
    logs.configure(logging.INFO if args.verbose else logging.ERROR, json_format=args.log_format == "json")
    try:
        return int(args.handler(args))
    except ScalebotError as exc:
        code = EXIT_CODES.get(exc.category)
        if code is None:
            raise  # an internal error: its traceback is the report
        _error(args, f"error: {_failure_line(exc)}")
        return code


def _failure_line(exc: ScalebotError) -> str:
    """What a failed command prints after "error: ", with where to look for the two Kubernetes
    failures an operator fixes outside scalebot."""
    if isinstance(exc, errors.Forbidden):
        return f"forbidden: {exc} (check scalebot's RBAC: manifests/base/rbac.yaml)"
    if isinstance(exc, errors.TransportError):
        return f"cannot reach the Kubernetes API server: {exc}"
    return str(exc)


def _error(args: argparse.Namespace, message: str) -> None:
    """The one line a failed command prints on stderr (a JSON log line with --log-format json)."""
    logs.announce(message, json_format=args.log_format == "json", stream=sys.stderr, level=logging.ERROR)


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("scalebot")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scalebot", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"scalebot {_installed_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step to stderr")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=os.environ.get("SCALEBOT_LOG_FORMAT") or "text",
        help="log line format (default: $SCALEBOT_LOG_FORMAT, else text)",
    )
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
    drain.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="none",
        choices=("none", "client", "server"),
        help="client: print the plan; server: also send each eviction with dryRun=All (the API server "
        "checks PDBs and admission); nothing is changed",
    )
    drain.add_argument(
        "--pod-selector", metavar="SELECTOR", help="only drain the pods matching this label selector"
    )
    drain.add_argument(
        "--disable-eviction",
        action="store_true",
        help="delete pods instead of evicting them, bypassing PodDisruptionBudgets (asks like --force)",
    )
    _add_yes_flag(drain)
    drain.add_argument(
        "--style",
        choices=("current", "legacy"),
        default="current",
        help="Cluster API condition message layout: per-Pod lines (v1.9+, default) or grouped (legacy)",
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

    _add_pool_commands(commands, plan_kinds)

    demo = commands.add_parser(
        "demo", help="zero-scale and wake the built-in SIMULATED cluster, for a first look"
    )
    demo.set_defaults(handler=cmd_demo)

    con = commands.add_parser(
        "console", help="the /scale commands, approvals and live progress in a terminal"
    )
    _add_ops_args(con)
    con.add_argument(
        "--clock-speed",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="with --simulated: run the clock this many times faster (600: a weekend in 5 minutes)",
    )
    con.set_defaults(handler=cmd_console)

    run = commands.add_parser("run", help="serve Slack (Socket Mode or HTTP), run operations and schedules")
    run.add_argument("--config", help="config file (default $SCALEBOT_CONFIG); see the README's reference")
    run.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold a Lease so one instance acts (default: on inside Kubernetes)",
    )
    run.set_defaults(handler=cmd_run)

    sandbox = commands.add_parser("sandbox", help="a local control plane with kwok nodes to play with")
    sandbox.add_argument("action", choices=("up", "down"))
    sandbox.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".scalebot-sandbox"),
        help="where the sandbox keeps its kubeconfigs and process ids",
    )
    sandbox.set_defaults(handler=cmd_sandbox)

    _add_read_commands(commands)

    completion = commands.add_parser("completion", help="print a shell completion script (bash or zsh)")
    completion.add_argument("shell", choices=("bash", "zsh"))
    completion.set_defaults(handler=cmd_completion)
    return parser


def _add_read_commands(commands: Any) -> None:
    """`status` and `schedule list|next`: the database only, no kubeconfig (bot.cli.records)."""
    db_help = "SQLite database (default $SCALEBOT_DB or ./scalebot.db)"
    status = commands.add_parser(
        "status", help="operations in flight, pools asleep, the next scheduled event"
    )
    sched = commands.add_parser(
        "schedule", help="the schedules (add and change them in Slack or the console)"
    )
    sched.add_argument("action", choices=("list", "next"))
    for parser in (status, sched):
        parser.add_argument("cluster", nargs="?", metavar="CLUSTER", help="only this cluster")
        parser.add_argument(
            "--db", metavar="FILE", default=os.environ.get("SCALEBOT_DB", "scalebot.db"), help=db_help
        )
        cli_read.add_output_flag(parser)
    status.set_defaults(handler=_read(cli_read.status))
    sched.set_defaults(
        handler=_read(
            lambda a: (cli_read.list_schedules if a.action == "list" else cli_read.next_schedule_events)(a)
        )
    )


def _read(command: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            command(args)
        except cli_read.ReadError as exc:
            raise CliError(str(exc)) from exc
        return EXIT_OK

    return run


def cmd_completion(args: argparse.Namespace) -> int:
    from bot.cli import completion

    print(completion.script(build_parser(), args.shell), end="")
    return EXIT_OK


def _add_pace_flag(parser: Any) -> None:
    parser.add_argument(
        "--one-at-a-time",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drain non-empty nodes one at a time, empty ones together, as cluster-autoscaler does "
        "(default: the cluster's policy drain_one_at_a_time, else all at once)",
    )


def _add_pool_commands(commands: Any, plan_kinds: Any) -> None:
    scale = commands.add_parser("scale", help="scale one node pool to N nodes (drains what it removes)")
    _add_ops_args(scale)
    scale.add_argument("pool", metavar="POOL", help="the pool to scale")
    scale.add_argument("size", type=int, metavar="N", help="its new number of nodes")
    _add_yes_flag(scale)
    _add_pace_flag(scale)
    scale.set_defaults(handler=cmd_pool_op, kind=OpKind.SCALE)

    zero = commands.add_parser("zero", help="scale pools (default: every pool) to 0; two phases when all go")
    _add_ops_args(zero)
    zero.add_argument("pools", nargs="*", metavar="POOL", help="pools to scale to 0 (default: every pool)")
    _add_yes_flag(zero)
    _add_workload_flags(zero)
    _add_pace_flag(zero)
    zero.set_defaults(handler=cmd_pool_op, kind=OpKind.ZERO)

    wake = commands.add_parser(
        "wake", help="restore pools to the sizes recorded before they were scaled down"
    )
    _add_ops_args(wake)
    wake.add_argument("pools", nargs="*", metavar="POOL", help="pools to wake (default: every sleeping pool)")
    _add_workload_flags(wake)
    wake.add_argument(
        "--wave",
        action="append",
        dest="waves",
        metavar="POOL[,POOL...]",
        help="wake in waves: these pools first, all of their nodes Ready before the next --wave "
        "(the README's wake_waves); pools no --wave names wake last",
    )
    wake.set_defaults(handler=cmd_pool_op, kind=OpKind.WAKE)
    _short_usage(scale, zero, wake)

    consolidate_op = commands.add_parser(
        "consolidate",
        help="remove nodes whose pods fit on the others, one by one (fit re-checked before each)",
    )
    _add_ops_args(consolidate_op)
    consolidate_op.add_argument("pools", nargs="*", metavar="POOL", help="only nodes of these pools go")
    _add_consolidation_flags(consolidate_op)
    consolidate_op.set_defaults(handler=cmd_consolidate, kind=OpKind.CONSOLIDATE)

    _add_operations_command(commands)

    resume = commands.add_parser("resume", help="continue operations interrupted by a stop or a crash")
    _add_ops_args(resume)
    resume.set_defaults(handler=cmd_resume)

    consolidate = plan_kinds.add_parser(
        "consolidate", help="which nodes could go because their pods fit on the others (changes nothing)"
    )
    _add_ops_args(consolidate)
    consolidate.add_argument(
        "--node-grace", default="5m", help="leave nodes younger than this alone (default 5m)"
    )
    consolidate.add_argument(
        "--max-nodes", type=int, default=10, help="remove at most this many (default 10)"
    )
    consolidate.add_argument("-o", "--output", choices=("text", "json"), default="text")
    consolidate.set_defaults(handler=cmd_plan_consolidate)

    advise = plan_kinds.add_parser(
        "advise", help="which pool to grow for the unschedulable pods, by how many nodes (changes nothing)"
    )
    _add_ops_args(advise)
    advise.add_argument("-o", "--output", choices=("text", "json"), default="text")
    advise.set_defaults(handler=cmd_plan_advise)

    for kind in (OpKind.ZERO, OpKind.SCALE, OpKind.WAKE):
        sub = plan_kinds.add_parser(kind.value, help=f"pre-flight of `{kind.value}`")
        _add_ops_args(sub)
        sub.add_argument("pools", nargs="*", metavar="POOL")
        if kind is OpKind.SCALE:
            sub.add_argument("--size", type=int, required=True)
        sub.add_argument("-o", "--output", choices=("text", "json"), default="text")
        sub.set_defaults(handler=cmd_plan_op, kind=kind)


def _add_operations_command(commands: Any) -> None:
    opers = commands.add_parser(
        "operations",
        aliases=["ops"],
        help="list, show or cancel operations; verify-audit checks the audit log",
    )
    _add_ops_args(opers)
    opers.add_argument(
        "action", nargs="?", choices=("list", "show", "cancel", "verify-audit"), default="list"
    )
    opers.add_argument("operation_id", nargs="?")
    opers.add_argument(
        "--expect-head",
        metavar="HASH",
        help="verify-audit: fail unless this hash (an `audit head` log line kept elsewhere) is in the chain",
    )
    cli_read.add_output_flag(opers)
    opers.set_defaults(handler=cmd_operations)
    report_cli.add_parser(commands, _read)


def _add_consolidation_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-grace", default="5m", help="leave nodes younger than this alone (default 5m)")
    parser.add_argument("--max-nodes", type=int, default=10, help="remove at most this many (default 10)")
    parser.add_argument(
        "--allow-alongside-autoscaler",
        action="store_true",
        help="consolidate although cluster-autoscaler, Karpenter or CAST AI run on the cluster",
    )


def _add_workload_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workloads",
        action="store_true",
        help="also scale Deployments/StatefulSets to 0, suspend CronJobs, pause KEDA (and back on wake)",
    )
    parser.add_argument(
        "--workloads-only",
        action="store_true",
        help="only workloads, no node pools (for clusters whose autoscaler empties the nodes itself)",
    )


def _add_cluster_args(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current context)")


def _add_ops_args(parser: argparse.ArgumentParser) -> None:
    """The cluster, database and pool provider options every pool command shares, in groups of their
    own so `--help` shows the command's own flags first (`_short_usage` keeps them off the usage line)."""
    cluster = parser.add_argument_group("cluster and database")
    _add_cluster_args(cluster)
    cluster.add_argument(
        "--cluster", metavar="NAME", help="name recorded for this cluster (default: the context name)"
    )
    cluster.add_argument(
        "--simulated",
        action="store_true",
        help="the built-in SIMULATED cluster instead (its state is kept in the database)",
    )
    cluster.add_argument(
        "--db",
        metavar="FILE",
        default=os.environ.get("SCALEBOT_DB", "scalebot.db"),
        help="SQLite database (default $SCALEBOT_DB or ./scalebot.db)",
    )
    cluster.add_argument(
        "--graceful-window",
        metavar="DURATION",
        help=f"phase 1 of a full shutdown (default {DEFAULT_GRACEFUL_WINDOW}; 12s on the simulated cluster)",
    )
    cluster.add_argument(
        "--drain-timeout",
        metavar="DURATION",
        default="1h",
        help="give up on a partial drain after (default 1h)",
    )
    cluster.add_argument(
        "--workloads-return-timeout",
        metavar="DURATION",
        default="5m",
        help="how long a wake follows workloads not yet available once its nodes are Ready (default 5m)",
    )
    pool = parser.add_argument_group(
        "pool provider", "what a pool is, and the options of each provider (the README lists them)"
    )
    pool.add_argument(
        "--provider",
        choices=providers.names(),
        default=providers.DEFAULT_PROVIDER,
        metavar="NAME",
        help=f"{', '.join(providers.names())} (default {providers.DEFAULT_PROVIDER})",
    )
    for option in providers.all_options().values():
        owners = ", ".join(p.name for p in providers.PROVIDERS.values() if option.key in p.option_keys())
        pool.add_argument(
            option.flag,
            dest=f"provider_{option.key}",
            metavar="VALUE",
            help=f"{owners}: {_first_clause(option.help)}",
        )
    pool.add_argument(
        "--namespace", metavar="NAME", default="scalebot", help="scalebot's namespace (pool records)"
    )
    pool.add_argument(
        "--gitops",
        choices=("pause", "warn"),
        default="warn",
        help="workloads Argo CD or Flux applies: pause their owner for the sleep, or warn (default)",
    )


def _short_usage(*parsers: argparse.ArgumentParser) -> None:
    """`scalebot zero [POOL ...] [options]`: the positionals, not the shared options, on the usage line."""
    for parser in parsers:
        shown = " ".join(
            f"[{a.metavar or a.dest} ...]" if a.nargs == "*" else str(a.metavar or a.dest)
            for a in parser._actions
            if not a.option_strings
        )
        parser.usage = f"{parser.prog} {shown + ' ' if shown else ''}[options]"


def _first_clause(text: str) -> str:
    """A provider option's help up to its first parenthesis or semicolon: one line in `--help`."""
    for mark in (" (", ";"):
        text = text.split(mark, 1)[0]
    return text


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
    options = filters.DrainOptions.kubectl(
        force=args.force,
        ignore_daemonsets=args.ignore_daemonsets,
        delete_emptydir_data=args.delete_emptydir_data,
    )
    text = getattr(args, "pod_selector", None)
    try:
        selector = parse_label_selector(text) if text else None
    except ValueError as exc:
        raise CliError(f"--pod-selector: {exc}") from exc
    disable = bool(getattr(args, "disable_eviction", False))
    return replace(options, pod_selector=selector, disable_eviction=disable)


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
    if args.dry_run == "client":
        print(_plan(api, nodes, options).to_text())
        return EXIT_OK
    if args.dry_run == "server":
        return _server_dry_run(api, nodes, options)
    if (args.force or args.disable_eviction) and not args.yes:
        flag = "--force" if args.force else "--disable-eviction"
        names = ", ".join(n.name for n in nodes)
        confirm(args, _plan(api, nodes, options).to_text(), f"drain {flag} {names}")
    cancel = threading.Event()
    _on_interrupt(cancel)

    # On a terminal one live panel with the figures; elsewhere the condition messages, one per change.
    live = DrainLive([n.name for n in nodes]) if live_display(args) else None

    def show(report: DrainReport) -> None:
        if live is None:
            print(report.condition_message(args.style) or report.summary_line(), flush=True)

    for node in nodes:
        print(f"node/{node.name} {'already cordoned' if node.unschedulable else 'cordoned'}", flush=True)
    with live if live is not None else contextlib.nullcontext():
        outcome = drainer.drain_nodes(
            api,
            [n.name for n in nodes],
            options=options,
            clock=SystemClock(),
            settings=DrainSettings(interval=interval, timeout=timeout or None, parallel=args.parallel),
            on_report=show,
            on_pass=live.on_pass if live is not None else None,
            cancel=cancel,
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


def _server_dry_run(api: KubeApi, nodes: Sequence[NodeInfo], options: filters.DrainOptions) -> int:
    """`--dry-run=server`: the plan's evictions and deletions sent with dryRun=All, in kubectl's
    words; exit 1 when the server (a PDB, admission) or a rule would refuse one."""
    from engine.kube.client import KubeClient

    if not isinstance(api, KubeClient):
        raise CliError("--dry-run=server needs a Kubernetes API server")
    drain_plan = _plan(api, nodes, options)
    live = {p.key: p for p in api.list_pods(node_names=[n.name for n in nodes])}
    for node in nodes:
        print(f"node/{node.name} cordoned (server dry run)")
    # A rule kubectl applies itself refuses at once; what the plan only predicts (a budget at 0)
    # is asked of the server, which has the last word.
    refused = [p for p in drain_plan.pods if p.action == "block"]
    for step in refused:
        print(f"error: cannot delete {step.reason}: {step.pod}", file=sys.stderr)
    for step in drain_plan.pods:
        pod = live.get(step.pod)
        if step.action not in ("evict", "blocked", "delete") or pod is None:
            continue
        evict = step.action != "delete"
        verb = "evicting" if evict else "deleting"
        try:
            api.dry_run_remove(pod, evict=evict, grace_seconds=options.grace_period_seconds)
        except errors.KubeError as exc:
            refused.append(step)
            print(f"error when {verb} pod {step.pod} (server dry run): {exc}", file=sys.stderr)
            continue
        print(f"{verb} pod {step.pod} (server dry run)")
    return EXIT_INCOMPLETE if refused else EXIT_OK


def cmd_cordon(args: argparse.Namespace) -> int:
    api = connect(args)
    for node in resolve_nodes(api, args.nodes, args.selector):
        if args.unschedulable:
            changed = api.set_unschedulable(node.name, True)
        else:
            changed = drain.uncordon_node(api, node.name)
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


def _user() -> str:
    return f"cli:{getpass.getuser()}"


def build_operations(
    args: argparse.Namespace, *, policies: Callable[[str], Mapping[str, ClusterPolicy]] | None = None
) -> Operations:
    """Operations on the cluster the arguments name (or the simulated one) and the SQLite file.

    `policies(cluster name)`: who may do what there; none for the CLI itself, whose user holds the
    kubeconfig and acts as admin.
    """
    # The simulated cluster's pods go in seconds: its phase 1 is 12 s, as in the demo and the console.
    window = args.graceful_window or ("12s" if args.simulated else DEFAULT_GRACEFUL_WINDOW)
    settings = RunnerSettings(
        graceful_window=_duration(window, "--graceful-window"),
        drain_timeout=_duration(args.drain_timeout, "--drain-timeout") or None,
        workloads_return_timeout=_duration(args.workloads_return_timeout, "--workloads-return-timeout"),
    )
    try:
        store = Store(args.db)
    except StoreError as exc:
        raise CliError(str(exc)) from exc
    if args.simulated:
        handle, _ = wiring.simulated_cluster(store=store)
        # Simulated pods and nodes answer at once: no need to wait real-cluster intervals for them.
        settings = replace(settings, pass_interval=timedelta(seconds=2), settle=timedelta(seconds=1))
        print(f"SIMULATED cluster (kept in {args.db}): nothing real is changed", file=sys.stderr)
    else:
        handle = _connect_cluster(args)
    if getattr(args, "waves", None):
        handle = replace(handle, wake_waves=_wave_flags(args.waves))
    rules = policies(handle.name) if policies else {}
    return new_operations(store, {handle.name: handle}, rules, SystemClock(), settings=settings)


def _wave_flags(flags: Sequence[str]) -> WakeWaves:
    """`--wave system --wave data,cache`: one wave per flag, in order; a pool in one wave only."""
    waves: list[WaveSpec] = []
    placed: dict[str, int] = {}
    for i, flag in enumerate(flags, start=1):
        pools = tuple(p.strip() for p in flag.split(","))
        if not all(pools):
            raise CliError(f"--wave {flag!r}: give pool names separated by commas, e.g. --wave data,cache")
        for pool in pools:
            if pool in placed:
                raise CliError(f"--wave {flag!r}: pool {pool} is already in wave {placed[pool]}")
            placed[pool] = i
        waves.append(WaveSpec(pools))
    return WakeWaves(tuple(waves))


def _connect_cluster(args: argparse.Namespace) -> ClusterHandle:
    """The real cluster the arguments name: client, pool provider and workloads."""
    try:
        return wiring.connect_cluster(
            args.cluster or args.context or "default",
            kubeconfig=args.kubeconfig,
            context=args.context,
            provider=args.provider,
            options=_provider_options(args),
            namespace=args.namespace,
            gitops=getattr(args, "gitops", "warn"),
        )
    except wiring.WiringError as exc:
        raise CliError(str(exc)) from exc


def _provider_options(args: argparse.Namespace) -> dict[str, str]:
    """The flags of the chosen provider's options that were given; another provider's flag is an error."""
    spec = providers.spec(args.provider)
    given: dict[str, str] = {}
    for option in providers.all_options().values():
        value = getattr(args, f"provider_{option.key}", None)
        if value is None:
            continue
        if option.key not in spec.option_keys():
            raise CliError(f"{option.flag} is not an option of --provider {spec.name}")
        given[option.key] = value
    return given


def _request(args: argparse.Namespace, ops: Operations) -> OperationRequest:
    pools = tuple(args.pools) if hasattr(args, "pools") else (args.pool,)
    target = Target(
        cluster=ops.clusters()[0],
        pools=pools,
        size=getattr(args, "size", None),
        workloads=getattr(args, "workloads", False),
        workloads_only=getattr(args, "workloads_only", False),
        one_at_a_time=getattr(args, "one_at_a_time", None),
    )
    return OperationRequest(kind=args.kind, target=target, requested_by=_user())


def cmd_plan_op(args: argparse.Namespace) -> int:
    ops = build_operations(args)
    try:
        result = ops.plan(_request(args, ops))
    except UserError as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def _real_cluster(args: argparse.Namespace, command: str) -> tuple[ClusterHandle, KubeClient]:
    """The cluster a read-only planning command models: a real API server, never the simulated one."""
    from engine.kube.client import KubeClient

    if args.simulated:
        raise CliError(
            f"{command} reads a real cluster's scheduling rules: give a kubeconfig, not --simulated"
        )
    handle = _connect_cluster(args)
    if not isinstance(handle.api, KubeClient):
        raise CliError(f"{command} needs a Kubernetes API server")
    return handle, handle.api


def cmd_plan_consolidate(args: argparse.Namespace) -> int:
    grace = _duration(args.node_grace, "--node-grace")
    if args.max_nodes < 1:
        raise CliError("--max-nodes must be at least 1")
    handle, client = _real_cluster(args, "plan consolidate")
    # Pool membership comes from the pool provider (labels or Cluster API), not from one label.
    pools = handle.pools.list_pools()
    snap = consolidation.snapshot_from_raw(pools, client.list_nodes_json(), client.list_bound_pods_json())
    result = consolidation.plan_consolidation(
        snap.nodes,
        snap.pods,
        client.list_pdbs(),
        pool_minimums={pool.name: pool.min_size for pool in pools},
        daemonset_keys=client.list_daemonset_keys(),
        now=SystemClock().now(),
        settings=ConsolidationSettings(node_grace=grace, max_nodes=args.max_nodes),
        notes=consolidation.other_consolidators(client.list_deployment_names()),
    )
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def cmd_plan_advise(args: argparse.Namespace) -> int:
    handle, client = _real_cluster(args, "plan advise")
    result = advice.advise_from_raw(
        handle.pools.list_pools(),
        client.list_nodes_json(),
        client.list_bound_pods_json(),
        client.list_unbound_pods_json(),
    )
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def cmd_pool_op(args: argparse.Namespace) -> int:
    ops = build_operations(args)
    request = _request(args, ops)
    if args.kind in (OpKind.ZERO, OpKind.SCALE) and not args.yes:
        try:
            planned = ops.plan(request)
        except UserError as exc:
            raise CliError(str(exc)) from exc
        if any(p.after < p.before for p in planned.pools) or planned.workloads:
            confirm(args, planned.to_text(), f"{args.kind.value} {planned.summary()}")
    return follow(ops, lambda: ops.request(request), live=live_display(args))


def _add_yes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask for confirmation (needed when stdin is not a terminal)",
    )


def confirm(args: argparse.Namespace, plan_text: str, what: str) -> None:
    """A destructive command asks on a terminal; without one it needs --yes. Raises CliError (exit 2,
    nothing changed) when not confirmed."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(
            f"{what}: confirm with --yes (stdin is not a terminal, so scalebot cannot ask); "
            "nothing was changed"
        )
    print(plan_text, flush=True)
    try:
        answer = input(f"{what}: continue? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed; nothing was changed")


def cmd_consolidate(args: argparse.Namespace) -> int:
    if args.max_nodes < 1:
        raise CliError("--max-nodes must be at least 1")
    rules = ConsolidationPolicy(
        node_grace=_duration(args.node_grace, "--node-grace"),
        max_nodes=args.max_nodes,
        allow_alongside_autoscaler=args.allow_alongside_autoscaler,
    )
    ops = build_operations(
        args, policies=lambda name: {name: ClusterPolicy(cluster=name, consolidation=rules)}
    )
    return follow(ops, lambda: ops.request(_request(args, ops)), live=live_display(args))


def cmd_resume(args: argparse.Namespace) -> int:
    ops = build_operations(args)
    return follow(ops, None, live=live_display(args))


def live_display(args: argparse.Namespace) -> bool:
    """A live display on a terminal; plain lines, one per change, in CI logs, pipes and JSON logs."""
    return args.log_format != "json" and sys.stdout.isatty()


def follow(ops: Operations, start: Callable[[], Outcome] | None, *, live: bool = False) -> int:
    """Start (or resume) operations and print their progress until every one has finished."""
    cancel = threading.Event()
    _on_interrupt(cancel)
    printer: _EventPrinter | LiveDisplay = LiveDisplay() if live else _EventPrinter()
    ops.subscribe(printer)
    try:
        return _follow(ops, start, printer, cancel)
    finally:
        ops.unsubscribe(printer)


def _follow(
    ops: Operations,
    start: Callable[[], Outcome] | None,
    printer: _EventPrinter | LiveDisplay,
    cancel: threading.Event,
) -> int:
    if start is not None:
        outcome = start()
        if not outcome.ok:
            raise CliError(messages.outcome_text(outcome, slack=False))
        print(messages.outcome_text(outcome, slack=False), flush=True)
        if outcome.operation is not None:
            print(outcome.operation.plan.to_text(), flush=True)
        ids = [outcome.operation.id] if outcome.operation else []
    else:
        try:
            ids = ops.resume()
        except ClaimHeld as exc:
            raise CliError(str(exc)) from exc
        print(f"resumed: {', '.join(ids) or 'nothing to resume'}", flush=True)
    printer.go_live()
    while not ops.runner.wait_idle(timeout=0.5):
        if cancel.is_set():
            ops.runner.stop(timeout=0)
            if isinstance(printer, LiveDisplay):
                printer.finish(())
            print(
                "interrupted: the operation resumes from its current step with `scalebot resume`",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    for why in {**ops.runner.faults, **ops.runner.handed_over}.values():
        print(f"error: {why}", file=sys.stderr, flush=True)
    finished = [ops.get(i) for i in ids]
    if isinstance(printer, LiveDisplay):
        printer.finish([op for op in finished if op is not None])
    return (
        EXIT_OK
        if all(op is not None and op.state is OpState.SUCCEEDED for op in finished)
        else EXIT_INCOMPLETE
    )


class _EventPrinter:
    """Prints progress events; holds those that arrive before the request's own answer is shown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[str] | None = []

    def __call__(self, event: ProgressEvent) -> None:
        line = f"{cli_read.stamp(SystemClock().now())} {event.operation.id}: {event.text}"
        if event.condition:
            line += f"\n{event.condition}"
        with self._lock:
            if self._held is not None:
                self._held.append(line)
                return
        print(line, flush=True)

    def go_live(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
        for line in held:
            print(line, flush=True)


def cmd_verify_audit(args: argparse.Namespace) -> int:
    """Re-compute the audit log's hash chain, read-only: exit 0 when intact, 1 naming each break."""
    expect = args.expect_head.strip().lower() if args.expect_head else None
    if expect is not None and not _SHA256_HEX.fullmatch(expect):
        raise CliError(f"--expect-head {args.expect_head!r} is not a SHA-256 hash (64 hex digits)")
    try:
        check = verify_audit_file(args.db, expect_head=expect)
    except AuditUnverifiable as exc:
        print(f"audit log NOT verified: {exc}", file=sys.stderr)
        return EXIT_AUDIT_BROKEN
    except StoreError as exc:
        raise CliError(str(exc)) from exc
    for problem in check.problems:
        print(f"audit row {problem.row_id}: {problem.reason}", file=sys.stderr)
    for alteration in check.altered:
        print(f"audit log NOT verified: {alteration}", file=sys.stderr)
    if check.problems or check.altered:
        breaks = f"{len(check.problems)} break(s) in {check.rows} rows"
        print(f"the audit log of {args.db} was altered: {breaks}", file=sys.stderr)
        return EXIT_AUDIT_BROKEN
    if expect is not None and check.expected_row is None:
        print(
            f"audit log NOT verified: the kept head {expect} is not in the chain of {args.db} "
            f"(head {check.head}, {check.rows} rows): rows up to it were rewritten or removed",
            file=sys.stderr,
        )
        return EXIT_AUDIT_BROKEN
    print(f"audit log intact: {check.rows} rows, hash chain verified, head {check.head}")
    if check.expected_row is not None:
        since = check.rows - check.expected_row
        print(f"kept head {expect} is row {check.expected_row} ({since} row(s) appended since)")
    return EXIT_OK


def cmd_operations(args: argparse.Namespace) -> int:
    if args.action == "verify-audit":
        return cmd_verify_audit(args)
    if args.action != "list" and not args.operation_id:
        raise CliError(f"`operations {args.action}` needs an operation ID (see `scalebot operations list`)")
    if args.action in ("list", "show"):  # the database only: no kubeconfig needed
        try:
            (cli_read.list_operations if args.action == "list" else cli_read.show_operation)(args)
        except cli_read.ReadError as exc:
            raise CliError(str(exc)) from exc
        return EXIT_OK
    ops = build_operations(args)
    outcome = ops.cancel(args.operation_id, by=_user())
    if not outcome.ok:
        raise CliError(messages.outcome_text(outcome, slack=False))
    print(messages.outcome_text(outcome, slack=False))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    print("SIMULATED cluster (in memory, nothing real is changed): pools system, web, batch\n")
    handle, _ = wiring.simulated_cluster()
    settings = RunnerSettings(
        graceful_window=timedelta(seconds=12), pass_interval=timedelta(seconds=2), settle=timedelta(seconds=1)
    )
    ops = new_operations(Store(":memory:"), {handle.name: handle}, {}, SystemClock(), settings=settings)
    print("The demo shortens phase 1 from 5 minutes to 12 seconds.\n", flush=True)
    zero = OperationRequest(kind=OpKind.ZERO, target=Target(cluster=handle.name), requested_by=_user())
    code = follow(ops, lambda: ops.request(zero), live=live_display(args))
    if code != EXIT_OK:
        return code
    print("\nNow waking the cluster back to the recorded sizes:\n", flush=True)
    wake = OperationRequest(kind=OpKind.WAKE, target=Target(cluster=handle.name), requested_by=_user())
    return follow(ops, lambda: ops.request(wake), live=live_display(args))


def cmd_console(args: argparse.Namespace) -> int:
    from bot.cli import console

    if args.clock_speed <= 0 or (args.clock_speed != 1 and not args.simulated):
        raise CliError("--clock-speed needs --simulated and a positive factor, e.g. --clock-speed 600")
    if args.simulated:
        ops = console.simulated_operations(clock=ScaledClock(args.clock_speed))
    else:
        # The console's users (alice operator, bob approver, carol viewer) act on this cluster.
        ops = build_operations(args, policies=lambda name: {name: console.console_policy(name)})
    return console.run_console(
        ops=ops,
        default_cluster=ops.clusters()[0],
        users=None,
        stdin=sys.stdin,
        stdout=sys.stdout,
        simulated=args.simulated,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from bot.config import settings
    from bot.runtime import run

    try:
        loaded = settings.load(args.config, os.environ)
        settings.forget_secret_env(os.environ)  # why: settings.forget_secret_env
        named = settings.channel_names(loaded)
        if named:  # `#name` channels need Slack's channel list before any rule may use them
            run.check_slack(loaded)
            loaded = run.resolve_channel_names(loaded)
        # Local checks (config, clusters' kubeconfigs, the database) first, then Slack's answer.
        service = run.build_service(loaded, leader_election=args.leader_election)
        if not named:
            run.check_slack(loaded)
    except (settings.SettingsError, run.RunError) as exc:
        raise CliError(str(exc)) from exc
    run.install_signal_handlers(service)
    json_format = args.log_format == "json"

    def started() -> None:
        for warning in service.warnings:
            logs.announce(warning, json_format=json_format, stream=sys.stderr, level=logging.WARNING)
        logs.announce(
            f"scalebot running: {', '.join(service.ops.clusters())}; database {loaded.db_path}",
            json_format=json_format,
            stream=sys.stdout,
        )

    try:
        return service.serve(on_started=started)
    except run.RunError as exc:
        raise CliError(str(exc)) from exc


def cmd_sandbox(args: argparse.Namespace) -> int:
    try:
        from localcluster import sandbox
    except ModuleNotFoundError as exc:  # cryptography is an extra: only the test control plane signs
        if (exc.name or "").split(".")[0] != "cryptography":
            raise
        raise CliError(
            "scalebot sandbox needs the test control plane's packages: run it from scripts/test's "
            ".venv, or pip install 'scalebot[sandbox]'"
        ) from exc

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

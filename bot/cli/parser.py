"""The `scalebot` argument tree: every command, its flags and its handler (the `cmd_*` function of
the command group's module, named here and imported only when that command runs), the flag groups
the commands share, and `completion`, which prints a shell script generated from this tree.

This module imports no command module, no engine service and no Kubernetes, Slack or plotting
library: `--version`, `--help` and `completion` answer from the tree alone, and each command pays
only for what it uses (a test runs them with `-X importtime`).

One module over 600 lines on purpose: the arguments of some thirty commands, which share their flag
groups; what each command is (its help line, handler and Examples) is `bot.text.command_registry`'s.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from bot.cli.common import DEFAULT_GRACEFUL_WINDOW, EXIT_OK, LOG_FORMATS
from bot.config import providers
from bot.text import command_registry

Handler = Callable[[argparse.Namespace], int | None]
"""A command: its exit code (None: 0)."""

OUTPUTS = ("text", "json", "yaml")
"""The read commands' `-o` formats, as kubectl's `get` has them."""

DESCRIPTION = (
    "scalebot: drain nodes and scale node pools to zero and back, now or on a schedule, with approvals."
)
"""The first line of `scalebot --help` (and of `bot.cli.main`'s docstring)."""


PROG = "scalebot"

AUDITED = ": its audit log records the change, and its operations' locks are respected"


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("scalebot")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def _add(group: Any, path: str) -> argparse.ArgumentParser:
    """The command at `path` ("scale", "plan drain"): its one-line help, its aliases and its handler
    come from `bot.text.command_registry`, the one table of scalebot's commands."""
    spec = command_registry.CLI[path]
    # A hidden command has no help line at all: argparse lists every choice that has one.
    shown = {} if spec.hidden else {"help": spec.summary}
    sub: argparse.ArgumentParser = group.add_parser(
        path.rsplit(" ", 1)[-1], aliases=list(spec.cli_aliases), description=spec.summary, **shown
    )
    if spec.cli:
        sub.set_defaults(handler=command(spec.cli))
    return sub


def command(target: str) -> Handler:
    """The handler `module:function`, imported when its command runs, not when the tree is built."""
    module, name = target.split(":")

    def run(args: argparse.Namespace) -> int | None:
        handler: Handler = getattr(importlib.import_module(module), name)
        return handler(args)

    run.__qualname__ = run.__name__ = target
    return run


class _Version(argparse.Action):
    """`--version`: the installed distribution's version, read only when asked for (reading the
    package metadata costs every other command time)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"scalebot {_installed_version()}")
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that under `--log-format json` a usage error is one JSON log line
    (with the command's usage in it) rather than argparse's plain usage and error lines, so that a
    log collector reading stderr as JSON gets every line of a mistyped command too."""

    def __init__(self, *args: Any, json_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_errors = json_errors

    def add_subparsers(self, **kwargs: Any) -> Any:
        # Commands' parsers are of this class and report errors as their parent does.
        kwargs.setdefault("parser_class", functools.partial(Parser, json_errors=self.json_errors))
        return super().add_subparsers(**kwargs)

    def error(self, message: str) -> NoReturn:
        if not self.json_errors:
            super().error(message)
        from bot.config import logs  # only on a usage error

        usage = " ".join(self.format_usage().split())
        line = f"{self.prog}: error: {message} ({usage}; see {self.prog} --help)"
        logs.announce(line, json_format=True, stream=sys.stderr, level=logging.ERROR)
        self.exit(2)


def wants_json_log(argv: Sequence[str]) -> bool:
    """Whether the command line (or $SCALEBOT_LOG_FORMAT) asks for JSON log lines: read before
    argparse has parsed it, so that its own usage errors come out as JSON too."""
    for i, arg in enumerate(argv):
        if arg == "--log-format=json" or (arg == "--log-format" and argv[i + 1 : i + 2] == ["json"]):
            return True
        if arg == "--log-format" or arg.startswith("--log-format="):
            return False
    return os.environ.get("SCALEBOT_LOG_FORMAT") == "json"


def build_parser(*, json_errors: bool = False) -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=DESCRIPTION, json_errors=json_errors)
    parser.add_argument("--version", action=_Version, help="print scalebot's version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step to stderr")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=os.environ.get("SCALEBOT_LOG_FORMAT") or "text",
        help="log line format (default: $SCALEBOT_LOG_FORMAT, else text)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_drain_command(commands)

    for name in ("cordon", "uncordon"):
        sub = _add(commands, name)
        _add_cluster_args(sub)
        _add_recorded_args(sub)
        _add_node_args(sub)
        sub.set_defaults(unschedulable=name == "cordon")

    plan_cmd = _add(commands, "plan")
    plan_kinds = plan_cmd.add_subparsers(dest="plan_kind", required=True, metavar="KIND")
    plan_drain = _add(plan_kinds, "plan drain")
    _add_cluster_args(plan_drain)
    _add_db_arg(plan_drain, " (with --simulated: the simulated cluster's)")
    _add_node_args(plan_drain)
    _add_filter_args(plan_drain)
    plan_drain.add_argument("-o", "--output", choices=("text", "json"), default="text")

    _add_pool_commands(commands, plan_kinds)

    demo = _add(commands, "demo")
    demo.add_argument(
        "--reset",
        action="store_true",
        help="instead: put the simulated cluster in --db back at its start, its history cleared (a file "
        "with records of any other cluster is refused)",
    )
    _add_db_arg(demo, " the --simulated commands keep the simulated cluster in, for --reset")

    con = _add(commands, "console")
    _add_ops_args(con)
    # The simulated console lives in memory unless --db names a file; bot.cli.serve.cmd_console
    # applies the usual default ($SCALEBOT_DB or ./scalebot.db) to a real cluster's console.
    con.set_defaults(db=None)
    con.add_argument(
        "--clock-speed",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="with --simulated: run the clock this many times faster (600: a weekend in 5 minutes)",
    )

    run = _add(commands, "run")
    run.add_argument("--config", help="config file (default $SCALEBOT_CONFIG); see the README's reference")
    run.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold a Lease so one instance acts (default: on inside Kubernetes)",
    )
    # The service publishes each audit head at its default log level (bot.config.logs).
    run.set_defaults(audit_heads=True)

    sandbox = _add(commands, "sandbox")
    sandbox.add_argument("action", choices=("up", "down"))
    sandbox.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".scalebot-sandbox"),
        help="where the sandbox keeps its kubeconfigs and process ids",
    )

    _add_read_commands(commands)

    completion = _add(commands, "completion")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    _add_complete_command(commands)
    _finish(parser)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands under `parser` by name, aliases included."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def command_paths(
    parser: argparse.ArgumentParser, path: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command of the tree by its path ("", "plan", "plan drain", ...), each parser once (an
    alias such as `ops` is left out: its parser is `operations`')."""
    found = [(path, parser)]
    seen: set[int] = set()
    for name, sub in subcommands(parser).items():
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        found += command_paths(sub, f"{path} {name}".strip())
    return found


def parser_of(args: argparse.Namespace, default: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser of the command `args` were parsed for (its usage goes with an error about it)."""
    found = getattr(args, "command_parser", None)
    return found if isinstance(found, argparse.ArgumentParser) else default


def _finish(parser: argparse.ArgumentParser) -> None:
    """What every command has besides its own flags: the global flags, accepted after the verb as
    kubectl accepts them (`scalebot ops list -v --kubeconfig FILE`; `--kubeconfig`, `--context` and
    `--db` only in the help of the commands they apply to), its Examples, and a pointer back to its
    parser."""
    for path, sub in command_paths(parser):
        if not path:
            continue
        sub.set_defaults(command_parser=sub)
        given = {flag for action in sub._actions for flag in action.option_strings}
        if "--verbose" not in given:
            common = sub.add_argument_group("global options")
            # SUPPRESS: set only when given here, so a value given before the verb stays.
            common.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="log every step to stderr",
            )
            common.add_argument(
                "--log-format",
                choices=LOG_FORMATS,
                default=argparse.SUPPRESS,
                help="log line format: text or json",
            )
        for flag, metavar in (("--kubeconfig", "FILE"), ("--context", "NAME"), ("--db", "FILE")):
            if flag not in given:
                # kubectl's global flags are accepted by every command; where one does not apply
                # it is left out of the help (SUPPRESS) and ignored.
                sub.add_argument(flag, metavar=metavar, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        spec = command_registry.CLI.get(path)
        examples = spec.examples_for(PROG) if spec is not None else ()
        if examples:
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
            sub.epilog = "Examples:\n" + "\n".join(f"  {line}" for line in examples)


def _add_complete_command(commands: Any) -> None:
    """`__complete KIND [--prefix WORD] [flags]`, hidden: what the completion scripts call for names."""
    complete = _add(commands, "__complete")
    complete.add_argument("kind", choices=("nodes", "pools", "operations", "schedules", "clusters"))
    complete.add_argument("--prefix", default="", help="only the names that start with this")
    _add_cluster_args(complete)
    _add_db_arg(complete)
    complete.add_argument("--simulated", action="store_true")


def _add_drain_command(commands: Any) -> None:
    """`scalebot drain`: kubectl drain's flags, and the database and cluster name of its record."""
    drain = _add(commands, "drain")
    _add_cluster_args(drain)
    _add_recorded_args(drain)
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


def _add_read_commands(commands: Any) -> None:
    """`status` and `schedule list|next`: the database only, no kubeconfig (bot.cli.records)."""
    status = _add(commands, "status")
    sched = _add(commands, "schedule")
    sched.add_argument("action", choices=("list", "next"))
    for parser in (status, sched):
        parser.add_argument("cluster", nargs="?", metavar="CLUSTER", help="only this cluster")
        _add_db_arg(parser, ", read-only")
        add_output_flag(parser, wide=parser is sched)


def add_output_flag(parser: argparse.ArgumentParser, *, wide: bool = True) -> None:
    """`-o` of a read command; a list also has kubectl's `wide` (more columns) and `name` (IDs only)."""
    choices = (*OUTPUTS, "wide", "name") if wide else OUTPUTS
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default="text",
        help=f"output format: {', '.join(choices)} (default text)",
    )


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
    scale = _add(commands, "scale")
    _add_ops_args(scale)
    scale.add_argument("pool", metavar="POOL", help="the pool to scale")
    scale.add_argument("size", type=int, metavar="N", help="its new number of nodes")
    _add_yes_flag(scale)
    _add_pace_flag(scale)
    scale.set_defaults(kind="scale")

    zero = _add(commands, "zero")
    _add_ops_args(zero)
    zero.add_argument("pools", nargs="*", metavar="POOL", help="pools to scale to 0 (default: every pool)")
    _add_yes_flag(zero)
    _add_workload_flags(zero)
    _add_pace_flag(zero)
    zero.set_defaults(kind="zero")

    wake = _add(commands, "wake")
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
    wake.set_defaults(kind="wake")
    _short_usage(scale, zero, wake)

    consolidate_op = _add(commands, "consolidate")
    _add_ops_args(consolidate_op)
    consolidate_op.add_argument("pools", nargs="*", metavar="POOL", help="only nodes of these pools go")
    _add_consolidation_flags(consolidate_op)
    consolidate_op.set_defaults(kind="consolidate")

    _add_operations_command(commands)

    resume = _add(commands, "resume")
    _add_ops_args(resume)

    consolidate = _add(plan_kinds, "plan consolidate")
    _add_ops_args(consolidate)
    consolidate.add_argument(
        "--node-grace", default="5m", help="leave nodes younger than this alone (default 5m)"
    )
    consolidate.add_argument(
        "--max-nodes", type=int, default=10, help="remove at most this many (default 10)"
    )
    consolidate.add_argument("-o", "--output", choices=("text", "json"), default="text")

    advise = _add(plan_kinds, "plan advise")
    _add_ops_args(advise)
    advise.add_argument("-o", "--output", choices=("text", "json"), default="text")

    for kind in ("zero", "scale", "wake"):
        sub = _add(plan_kinds, f"plan {kind}")
        _add_ops_args(sub)
        if kind == "scale":  # the words of `scale POOL N` itself
            sub.add_argument("pool", metavar="POOL", help="the pool to scale")
            sub.add_argument("size", type=int, metavar="N", help="its new number of nodes")
        else:
            sub.add_argument("pools", nargs="*", metavar="POOL")
        sub.add_argument("-o", "--output", choices=("text", "json"), default="text")
        sub.set_defaults(kind=kind)
        _short_usage(sub)


def _add_operations_command(commands: Any) -> None:
    """`operations list|show|cancel|verify-audit`, each with its own flags: only `cancel` reaches the
    cluster; `list` and `show` read the database read-only (`operations` alone lists)."""
    opers = _add(commands, "operations")
    actions = opers.add_subparsers(dest="action", metavar="ACTION")
    listed = _add(actions, "operations list")
    show = _add(actions, "operations show")
    show.add_argument("operation_id", metavar="ID")
    for read in (listed, show):
        _add_db_arg(read, ", read-only")
        add_output_flag(read, wide=read is listed)
    cancel = _add(actions, "operations cancel")
    cancel.add_argument("operation_id", metavar="ID")
    _add_ops_args(cancel)
    _short_usage(cancel)
    verify = _add(actions, "operations verify-audit")
    _add_db_arg(verify, ", read-only")
    verify.add_argument(
        "--expect-head",
        metavar="HASH",
        help="fail unless this hash (the last `audit head` log line, kept elsewhere) is the chain's "
        "head; rows after it are listed",
    )
    default_db = os.environ.get("SCALEBOT_DB", "scalebot.db")
    opers.set_defaults(action="list", db=default_db, output="text")
    _add_report_command(commands)


def _add_report_command(commands: Any) -> None:
    """`report savings`: the operation history read-only (bot.cli.report)."""
    report = _add(commands, "report")
    kinds = report.add_subparsers(dest="report", required=True, metavar="REPORT")
    saved = _add(kinds, "report savings")
    saved.add_argument(
        "--since",
        metavar="WHEN",
        help="from this date/time (ISO 8601, e.g. 2026-03-01) or this long ago (e.g. 28d)",
    )
    saved.add_argument(
        "--tz", default="UTC", metavar="ZONE", help="weeks start Monday 00:00 here (default UTC)"
    )
    saved.add_argument("--png", metavar="FILE", help="also draw the weekly chart into this PNG file")
    saved.add_argument("--config", help="config file with node_hour_prices (default $SCALEBOT_CONFIG)")
    _add_db_arg(saved, ", read-only")
    saved.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    saved.add_argument(
        "--post",
        action="store_true",
        help="post each cluster's report with its chart to the cluster's default channel now (needs the "
        "config, SLACK_BOT_TOKEN and the files:write scope); scalebot run posts weekly by itself "
        "where clusters.<name>.savings_report is set",
    )


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
    _add_cluster_name_arg(cluster)
    cluster.add_argument(
        "--simulated",
        action="store_true",
        help="the built-in SIMULATED cluster instead (its state is kept in the database)",
    )
    _add_db_arg(cluster)
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


def _add_recorded_args(parser: argparse.ArgumentParser) -> None:
    """`--cluster` and `--db` of the node commands: the name the cluster's operations lock it under,
    and the database whose locks they respect and whose audit log records them."""
    _add_cluster_name_arg(parser)
    _add_db_arg(parser, AUDITED)


def _add_cluster_name_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--cluster", metavar="NAME", help="name recorded for this cluster (default: the context name)"
    )


def _add_db_arg(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "") -> None:
    parser.add_argument(
        "--db",
        metavar="FILE",
        default=os.environ.get("SCALEBOT_DB", "scalebot.db"),
        help=f"SQLite database{what} (default $SCALEBOT_DB or ./scalebot.db)",
    )


def _add_node_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nodes", nargs="*", metavar="NODE")
    parser.add_argument("-l", "--selector", help="select nodes by label, e.g. scalebot.io/pool=batch")
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="the built-in SIMULATED cluster instead (its state is kept in --db), to rehearse",
    )


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


def _add_yes_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask for confirmation (needed when stdin is not a terminal)",
    )

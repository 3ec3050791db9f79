"""The operations service behind the pool, plan and operations commands: `build_operations` from the
cluster, database and provider flags (or the simulated cluster), the request the flags describe, and
`follow`, which prints an operation's progress until it has finished."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from bot.cli import records as cli_read
from bot.cli.common import (
    DEFAULT_GRACEFUL_WINDOW,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    Refused,
    cli_user,
    duration_flag,
    on_interrupt,
)
from bot.cli.live import LiveDisplay
from bot.cli.rehearsal import simulated_notice
from bot.config import providers
from bot.runtime import wiring
from bot.text import messages
from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Outcome, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.domain.wake_waves import WakeWaves, WaveSpec
from engine.operations.policy import ClusterPolicy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.store.database import Store


def build_operations(
    args: argparse.Namespace,
    *,
    policies: Callable[[str], Mapping[str, ClusterPolicy]] | None = None,
    record: bool = True,
) -> Operations:
    """Operations on the cluster the arguments name (or the simulated one) and the SQLite file.

    `policies(cluster name)`: who may do what there; none for the CLI itself, whose user holds the
    kubeconfig and acts as admin. `record=False`: a read that keeps nothing (`plan consolidate`,
    `plan advise`), over a database in memory instead of the file.
    """
    # The simulated cluster's pods go in seconds: its phase 1 is 12 s, as in the demo and the console.
    window = args.graceful_window or ("12s" if args.simulated else DEFAULT_GRACEFUL_WINDOW)
    settings = RunnerSettings(
        graceful_window=duration_flag(window, "--graceful-window"),
        drain_timeout=duration_flag(args.drain_timeout, "--drain-timeout") or None,
        workloads_return_timeout=duration_flag(args.workloads_return_timeout, "--workloads-return-timeout"),
    )
    store = _store(args.db if record else ":memory:")
    if args.simulated:
        handle, _ = wiring.simulated_cluster(store=store)
        # Simulated pods and nodes answer at once: no need to wait real-cluster intervals for them.
        settings = replace(settings, pass_interval=timedelta(seconds=2), settle=timedelta(seconds=1))
        simulated_notice(args)
    else:
        handle = _connect_cluster(args)
    if getattr(args, "waves", None):
        handle = replace(handle, wake_waves=_wave_flags(args.waves))
    rules = policies(handle.name) if policies else {}
    return new_operations(store, {handle.name: handle}, rules, SystemClock(), settings=settings)


def node_operations(args: argparse.Namespace, *, record: bool = True) -> Operations:
    """Operations on the cluster of `--kubeconfig`/`--context` (named `--cluster`, as the bot's
    configuration names it, for its operations' locks), for the node commands (`drain`, `cordon`,
    `uncordon`, `plan drain`): their pools are the default provider's, and what they do is recorded in
    the `--db` file's audit log (`record=False`: a read, over a database in memory)."""
    if getattr(args, "simulated", False):
        # The simulated cluster lives in the --db file, so a plan over memory would not see it.
        store = _store(args.db)
        handle, _ = wiring.simulated_cluster(store=store)
        simulated_notice(args)
        return new_operations(store, {handle.name: handle}, {}, SystemClock())
    store = _store(args.db if record else ":memory:")
    handle = wiring.connect_cluster(
        getattr(args, "cluster", None) or args.context or "default",
        kubeconfig=args.kubeconfig,
        context=args.context,
    )
    return new_operations(store, {handle.name: handle}, {}, SystemClock())


def _store(path: str) -> Store:
    return Store(path)  # a StoreError (configuration: exit 2) names the file and what to do


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
    return wiring.connect_cluster(  # a WiringError is configuration: exit 2
        args.cluster or args.context or "default",
        kubeconfig=args.kubeconfig,
        context=args.context,
        provider=args.provider,
        options=_provider_options(args),
        namespace=args.namespace,
        gitops=getattr(args, "gitops", "warn"),
    )


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


def request_from_flags(args: argparse.Namespace, ops: Operations) -> OperationRequest:
    pools = tuple(args.pools) if hasattr(args, "pools") else (args.pool,)
    target = Target(
        cluster=ops.clusters()[0],
        pools=pools,
        size=getattr(args, "size", None),
        workloads=getattr(args, "workloads", False),
        workloads_only=getattr(args, "workloads_only", False),
        one_at_a_time=getattr(args, "one_at_a_time", None),
    )
    return OperationRequest(kind=OpKind(args.kind), target=target, requested_by=cli_user())


def follow(ops: Operations, start: Callable[[], Outcome] | None, *, live: bool = False) -> int:
    """Start (or resume) operations and print their progress until every one has finished."""
    cancel = threading.Event()
    on_interrupt(cancel)
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
            raise Refused(outcome)
        print(messages.outcome_text(outcome, slack=False), flush=True)
        if outcome.operation is not None:
            print(outcome.operation.plan.to_text(), flush=True)
        ids = [outcome.operation.id] if outcome.operation else []
    else:
        ids = ops.resume()  # ClaimHeld (another live runner has one): transient, exit 1
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

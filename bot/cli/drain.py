"""`scalebot drain`, `cordon` and `uncordon`: nodes by name or selector, straight through the Kubernetes
API with kubectl's semantics and wording (also `--dry-run=client|server`), plus the drain pre-flight
`plan drain` shows."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace

from bot.cli.common import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    _duration,
    _on_interrupt,
    confirm,
    live_display,
)
from bot.cli.live import DrainLive
from engine.domain.clock import SystemClock
from engine.domain.model import NodeInfo, parse_label_selector
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.report import DrainReport
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.planning import preflight as plan


def connect(args: argparse.Namespace) -> KubeApi:
    from engine.kube.client import KubeClient
    from engine.kube.config import KubeConfigError

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


def _plan(api: KubeApi, nodes: Sequence[NodeInfo], options: filters.DrainOptions) -> plan.DrainPlan:
    ctx = filters.DrainContext(
        options=options,
        now=SystemClock().now(),
        daemonset_keys=api.list_daemonset_keys(),
        unreachable_nodes=frozenset(n.name for n in nodes if n.is_unreachable),
    )
    pods = api.list_pods(node_names=[n.name for n in nodes])
    return plan.plan_drain(nodes, pods, api.list_pdbs(), ctx)

"""`scalebot zero`, `scale`, `wake` and `consolidate`: pool operations through the operations service,
confirmed on a terminal (or with --yes) when they remove nodes."""

from __future__ import annotations

import argparse

from bot.cli.common import CliError, confirm, duration_flag, live_display
from bot.cli.operations_from_flags import build_operations, follow, request_from_flags
from engine.domain.operation import OpKind
from engine.domain.settings import ConsolidationPolicy
from engine.operations.policy import ClusterPolicy


def cmd_pool_op(args: argparse.Namespace) -> int:
    ops = build_operations(args)
    request = request_from_flags(args, ops)
    if request.kind in (OpKind.ZERO, OpKind.SCALE) and not args.yes:
        planned = ops.plan(request)  # a UserError (usage: exit 2) says why it cannot be planned
        if any(p.after < p.before for p in planned.pools) or planned.workloads:
            confirm(args, planned.to_text(), f"{request.kind.value} {planned.summary()}")
    return follow(ops, lambda: ops.request(request), live=live_display(args))


def cmd_consolidate(args: argparse.Namespace) -> int:
    if args.max_nodes < 1:
        raise CliError("--max-nodes must be at least 1")
    rules = ConsolidationPolicy(
        node_grace=duration_flag(args.node_grace, "--node-grace"),
        max_nodes=args.max_nodes,
        allow_alongside_autoscaler=args.allow_alongside_autoscaler,
    )
    ops = build_operations(
        args, policies=lambda name: {name: ClusterPolicy(cluster=name, consolidation=rules)}
    )
    return follow(ops, lambda: ops.request(request_from_flags(args, ops)), live=live_display(args))

"""`scalebot plan drain|zero|scale|wake|consolidate|advise`: what an operation would do, read from the
cluster through the operations service, changing nothing (text or `-o json`)."""

from __future__ import annotations

import argparse
import json

from bot.cli.common import EXIT_OK, CliError, cli_user, duration_flag
from bot.cli.drain import drain_flags, preview, selected_nodes
from bot.cli.operations_from_flags import build_operations, node_operations, request_from_flags
from engine.domain.settings import ConsolidationSettings
from engine.operations.service import Operations


def cmd_plan_drain(args: argparse.Namespace) -> int:
    ops = node_operations(args, record=False)
    result = preview(ops, selected_nodes(ops, args), drain_flags(args)).plan
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def cmd_plan_op(args: argparse.Namespace) -> int:
    ops = build_operations(args)
    result = ops.plan(request_from_flags(args, ops))
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def _real_cluster(args: argparse.Namespace, command: str) -> Operations:
    """The cluster a read-only planning command models: a real API server, never the simulated one."""
    if args.simulated:
        raise CliError(
            f"{command} reads a real cluster's scheduling rules: give a kubeconfig, not --simulated"
        )
    return build_operations(args, record=False)


def cmd_plan_consolidate(args: argparse.Namespace) -> int:
    grace = duration_flag(args.node_grace, "--node-grace")
    if args.max_nodes < 1:
        raise CliError("--max-nodes must be at least 1")
    ops = _real_cluster(args, "plan consolidate")
    settings = ConsolidationSettings(node_grace=grace, max_nodes=args.max_nodes)
    result = ops.consolidation_preview(ops.clusters()[0], settings, by=cli_user())
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


def cmd_plan_advise(args: argparse.Namespace) -> int:
    ops = _real_cluster(args, "plan advise")
    result = ops.scale_up_advice(ops.clusters()[0], by=cli_user())
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK

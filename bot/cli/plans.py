"""`scalebot plan drain|zero|scale|wake|consolidate|advise`: what an operation would do, read from the
cluster, changing nothing (text or `-o json`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from bot.cli.common import EXIT_OK, CliError, _duration
from bot.cli.drain import _plan, connect, drain_options, resolve_nodes
from bot.cli.service import _connect_cluster, _request, build_operations
from engine.domain.clock import SystemClock
from engine.domain.settings import ConsolidationSettings
from engine.operations.runner import ClusterHandle
from engine.operations.service import UserError
from engine.planning import advice, consolidation

if TYPE_CHECKING:
    from engine.kube.client import KubeClient


def cmd_plan_drain(args: argparse.Namespace) -> int:
    api = connect(args)
    nodes = resolve_nodes(api, args.nodes, args.selector)
    result = _plan(api, nodes, drain_options(args))
    print(json.dumps(result.to_json(), indent=2) if args.output == "json" else result.to_text())
    return EXIT_OK


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

"""`python -m tests.bench.consolidation`: consolidation planning time at cluster scale (pure code).

Builds the JSON a 1,000-node / 30,000-pod cluster returns (10 pools, a DaemonSet pod per node,
Deployments with PodDisruptionBudgets, some with hostname anti-affinity or zone spread, node
selectors, a tainted pool) and times `engine.planning.consolidation.plan_consolidation` over it: decoding the
objects into views (the pods as the production client does, from the list's JSON bytes in pages of
500: `engine.kube.projection.decode_pod_page`), then planning. The API listing itself is measured
by the zero-scale benchmark (`python -m tests.bench`); this is the decision scalebot adds on top.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from engine.domain.model import LabelSelector, NodeInfo, PdbInfo, PodInfo
from engine.domain.settings import ConsolidationSettings
from engine.kube import projection
from engine.planning.consolidation import NodeView, plan_consolidation

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
OLD = (NOW - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
ZONE = "topology.kubernetes.io/zone"


def synthetic_cluster(
    nodes: int, pods_per_node: int, seed: int = 7
) -> tuple[list[Any], list[Any], list[PdbInfo]]:
    rng = random.Random(seed)
    raw_nodes, raw_pods = [], []
    apps = [f"app{i}" for i in range(max(1, nodes * pods_per_node // 30))]
    for i in range(nodes):
        pool = f"pool-{i % 10}"
        name = f"{pool}-{i:04d}"
        taints = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}] if pool == "pool-9" else []
        raw_nodes.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {"scalebot.io/pool": pool, ZONE: f"z{i % 3}", "kubernetes.io/hostname": name},
                    "creationTimestamp": OLD,
                },
                "spec": {"taints": taints},
                "status": {
                    "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        raw_pods.append(
            _pod("kube-system", f"agent-{name}", name, "100m", "DaemonSet", "agent", {"app": "agent"})
        )
        for j in range(pods_per_node - 1):
            app = rng.choice(apps)
            spec_extra: dict[str, Any] = {}
            if pool == "pool-9":
                spec_extra["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "batch"}]
            if hash(app) % 10 == 0:
                spec_extra["affinity"] = {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": app}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                }
            elif hash(app) % 10 == 1:
                spec_extra["topologySpreadConstraints"] = [
                    {
                        "maxSkew": 2,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": app}},
                    }
                ]
            cpu = rng.choice(("100m", "250m", "500m"))
            raw_pods.append(
                _pod("shop", f"{app}-{i}-{j}", name, cpu, "ReplicaSet", app, {"app": app}, spec_extra)
            )
    pdbs = [
        PdbInfo(
            namespace="shop",
            name=app,
            selector=LabelSelector(match_labels={"app": app}),
            disruptions_allowed=1,
        )
        for app in apps[::3]
    ]
    return raw_nodes, raw_pods, pdbs


def _pod(
    ns: str,
    name: str,
    node: str,
    cpu: str,
    kind: str,
    owner: str,
    labels: dict[str, str],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": labels,
            "ownerReferences": [
                {"kind": kind, "name": owner, "uid": owner, "controller": True, "apiVersion": "apps/v1"}
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
            **(extra or {}),
        },
        "status": {"phase": "Running"},
    }


PAGE = 500


def pod_pages(raw_pods: list[dict[str, Any]]) -> list[bytes]:
    """The pods as the API server answers a listing of them: JSON pages of PAGE pods."""
    return [
        orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": raw_pods[i : i + PAGE]})
        for i in range(0, len(raw_pods), PAGE)
    ]


def decode_pods(pages: list[bytes]) -> list[PodInfo]:
    """The production decode of a pod listing (`KubeClient.list_pods`)."""
    return [pod for page in pages for pod in projection.decode_pod_page(page).items]


def measure(nodes: int, pods_per_node: int, rounds: int) -> dict[str, Any]:
    raw_nodes, raw_pods, pdbs = synthetic_cluster(nodes, pods_per_node)
    pages = pod_pages(raw_pods)
    pools = {f"pool-{i}": 1 for i in range(10)}
    decode, planning = [], []
    result = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        views = [
            NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"]["scalebot.io/pool"])
            for n in raw_nodes
        ]
        pods = decode_pods(pages)
        t1 = time.perf_counter()
        result = plan_consolidation(
            views,
            pods,
            pdbs,
            pool_minimums=pools,
            daemonset_keys=frozenset({"kube-system/agent"}),
            now=NOW,
            settings=ConsolidationSettings(max_nodes=10),
        )
        t2 = time.perf_counter()
        decode.append(t1 - t0)
        planning.append(t2 - t1)
    tracemalloc.start()
    views = [
        NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"]["scalebot.io/pool"]) for n in raw_nodes
    ]
    plan_consolidation(
        views,
        decode_pods(pages),
        pdbs,
        pool_minimums=pools,
        daemonset_keys=frozenset({"kube-system/agent"}),
        now=NOW,
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result is not None
    return {
        "nodes": nodes,
        "pods": len(raw_pods),
        "decode_s": statistics.median(decode),
        "plan_s": statistics.median(planning),
        "peak_mib": peak / 2**20,
        "removable": len(result.remove),
        "kept": len(result.keep),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    r = measure(args.nodes, args.pods_per_node, args.rounds)
    print(
        f"consolidation planning, {r['nodes']} nodes / {r['pods']} pods: decode {r['decode_s']:.2f} s, "
        f"plan {r['plan_s']:.2f} s (median of {args.rounds}), Python heap peak {r['peak_mib']:.0f} MiB; "
        f"{r['removable']} removable (cap 10), {r['kept']} kept"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

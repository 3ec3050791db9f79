"""`scalebot plan consolidate` against the real control plane, as scalebot's ServiceAccount.

It reads whole nodes and pods (the scheduling fields), PodDisruptionBudgets and DaemonSets, and
changes nothing. The test's pods can only run on the test's own nodes (a node selector), so what the
plan says about those nodes does not depend on the other tests' nodes in the shared control plane.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster import objects, rest, waits
from tests.e2e import support
from tests.e2e.test_cli import scalebot

pytestmark = pytest.mark.e2e


def _pods(api: Any, node: str) -> list[tuple[str, str]]:
    """(namespace/name, uid) of the pods on a node: a pod moved or replaced would change it."""
    pods = rest.pods_on_node(api, node)
    return sorted(
        (f"{p['metadata']['namespace']}/{p['metadata']['name']}", p["metadata"]["uid"]) for p in pods
    )


def test_plan_consolidate_lists_removable_nodes_with_moves_and_keeps_blocked_ones(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    group = support.group(unique_name)
    nodes = node_pool(3, name=f"{unique_name}-c", labels=group, cpu="4")
    # Small enough that the bare pod's node stays under the 50% utilization threshold wherever the
    # scheduler puts both replicas: the bare pod, not utilization, is what keeps that node.
    support.deployment(admin_api, namespace, "web", 2, node_selector=group, cpu="500m", grace=1)
    objects.create_bare_pod(admin_api, namespace, "lonely", node=nodes[0], grace=1)
    before = {n: _pods(admin_api, n) for n in nodes}

    result = scalebot(
        "plan", "consolidate", "--node-grace", "0s", "--max-nodes", "1000", "-o", "json",
        kubeconfig=scalebot_kubeconfig,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    removed = {r["node"]: r for r in plan["remove"] if r["node"] in nodes}
    kept = {k["node"]: k["reason"] for k in plan["keep"] if k["node"] in nodes}
    assert set(removed) | set(kept) == set(nodes)
    assert kept[nodes[0]].startswith(f"{namespace}/lonely: Pods that declare no controller")
    # Two half-CPU pods on three 4-CPU nodes: at least one of the two unblocked nodes can go.
    assert len(removed) >= 1
    for removal in removed.values():
        assert removal["pool"] == f"{unique_name}-c"
        # Every pod of the test on a removed node moves (DaemonSet pods of other tests would stay).
        ours = sorted(key for key, _ in before[removal["node"]] if key.startswith(f"{namespace}/"))
        assert sorted(m["pod"] for m in removal["moves"]) == ours
        # Moves go to the test's nodes that stay, never to one the same plan removes.
        assert {m["to"] for m in removal["moves"]} <= set(nodes) - set(removed)
    # A plan changes nothing.
    assert {n: _pods(admin_api, n) for n in nodes} == before
    assert not any(rest.get(admin_api, rest.node_path(n))["spec"].get("unschedulable") for n in nodes)


def test_plan_consolidate_refuses_the_simulated_cluster() -> None:
    result = scalebot("plan", "consolidate", "--simulated")
    assert result.returncode == 2
    assert "give a kubeconfig, not --simulated" in result.stderr


def test_plan_advise_names_the_pool_that_wastes_least_for_an_unschedulable_pod(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    group = support.group(unique_name)
    small = node_pool(1, name=f"{unique_name}-small", labels=group, cpu="2", memory="4Gi")
    big = node_pool(1, name=f"{unique_name}-big", labels=group, cpu="8", memory="32Gi")
    for node in small + big:  # full, as far as the scheduler is concerned: only new nodes would help
        objects.cordon(admin_api, node)
    objects.create_deployment(admin_api, namespace, "web", 1, node_selector=group, cpu="1500m", memory="1Gi")

    def unschedulable() -> bool:
        pods = rest.list_pods(admin_api, namespace)
        return bool(pods) and any(
            c.get("reason") == "Unschedulable" for c in (pods[0].get("status") or {}).get("conditions") or ()
        )

    waits.wait_until(unschedulable, 30, "the pod to be marked Unschedulable")
    [pod] = [f"{namespace}/{p['metadata']['name']}" for p in rest.list_pods(admin_api, namespace)]

    result = scalebot("plan", "advise", "-o", "json", kubeconfig=scalebot_kubeconfig)
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)
    ours = [o for o in advice["options"] if pod in o["pods"]]
    assert [o["pool"] for o in ours] == [f"{unique_name}-small", f"{unique_name}-big"]
    assert [o["nodes"] for o in ours] == [1, 1]
    # 1.5 of 2 CPUs and 1 of 4 GiB on a new small node; 1.5 of 8 and 1 of 32 on a big one.
    assert ours[0]["line"] == (
        f"Expanding Node Group {unique_name}-small would waste 25.00% CPU, 75.00% Memory, 50.00% Blended"
    )
    assert ours[1]["line"] == (
        f"Expanding Node Group {unique_name}-big would waste 81.25% CPU, 96.88% Memory, 89.06% Blended"
    )
    assert pod not in advice["unhelped"]

"""Pool operations at the edges, on the real control plane as scalebot's ServiceAccount (issue 14).

Covers: a failed operation uncordons the nodes it cordoned and names those that stay cordoned;
pods that opted out of disruption block a pool scale-down (listed as blockers on the plan,
the operation fails with the reason, nothing evicted) instead of being evicted by the machine drain;
a deliberate scale changes what a later zero-and-wake restores.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.kube.client import KubeClient
from engine.model import DRAINING_TAINT_KEY as DRAINING
from engine.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from localcluster import builders
from tests.e2e.test_operations import kube, make_ops, pool_key, pools, request, run

__all__ = ["kube", "pool_key"]  # fixtures, used by name

pytestmark = pytest.mark.e2e

OPT_OUT = {"karpenter.sh/do-not-disrupt": "true"}


def test_opted_out_pods_block_a_scale_down(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    # One opted-out pod on each node: whichever node the scale-down picks holds one.
    names = [f"keep-{i}" for i in range(len(made["a"]))]
    for pod, node in zip(names, made["a"], strict=True):
        builders.create_bare_pod(admin_api, namespace, pod, node=node, grace=1, annotations=OPT_OUT)
    builders.wait_for_pods_running(admin_api, namespace, count=2)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in builders.list_pods(admin_api, namespace)}
    ops = make_ops(kube, pool_key, tmp_path / "db.sqlite")
    try:
        out = ops.request(
            OperationRequest(
                kind=OpKind.SCALE,
                target=Target(cluster="e2e", pools=(f"{unique_name}-a",), size=1),
                requested_by="cli:e2e",
            )
        )
        assert out.ok and out.operation is not None, out.reply
        plan = out.operation.plan
        [victim] = plan.nodes
        [(blocker, why)] = plan.blockers
        assert blocker in {f"{namespace}/{n}" for n in names}
        assert "karpenter.sh/do-not-disrupt=true" in why
        assert ops.runner.wait_idle(90)
        op = ops.get(out.operation.id)
        assert op is not None
        assert op.state is OpState.FAILED
        assert op.error is not None and victim in op.error and "karpenter.sh/do-not-disrupt=true" in op.error
    finally:
        ops.runner.stop()
    after = builders.list_pods(admin_api, namespace)
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == before
    assert all("deletionTimestamp" not in p["metadata"] for p in after)
    nodes = builders.get(admin_api, builders.node_path())["items"]
    assert sorted(
        n["metadata"]["name"] for n in nodes if n["metadata"].get("labels", {}).get(pool_key)
    ) == sorted(made["a"])


def test_wake_restores_the_size_last_chosen_by_a_scale(
    kube: KubeClient,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    pools(node_pool, pool_key, unique_name, a=3)
    pool = f"{unique_name}-a"
    ops = make_ops(kube, pool_key, tmp_path / "db.sqlite")
    try:
        scaled = run(
            ops,
            OperationRequest(
                kind=OpKind.SCALE, target=Target(cluster="e2e", pools=(pool,), size=2), requested_by="cli:e2e"
            ),
        )
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        zeroed = run(ops, request(OpKind.ZERO, pool))
        assert zeroed.state is OpState.SUCCEEDED, zeroed.error
        woken = run(ops, request(OpKind.WAKE, pool))
        assert woken.state is OpState.SUCCEEDED, woken.error
        sizes = {p.name: p.desired for p in ops.status("e2e").pools}
    finally:
        ops.runner.stop()
    assert sizes == {pool: 2}


def test_phase_two_is_withdrawn_when_another_pool_appears_during_phase_one(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from tests.e2e.test_operations import FAST

    made = pools(node_pool, pool_key, unique_name, a=1)
    group = {"scalebot.test/group": unique_name}
    builders.create_deployment(admin_api, namespace, "guarded", 1, node_selector=group, grace=1)
    builders.create_pdb(admin_api, namespace, "guarded", match_labels={"app": "guarded"}, max_unavailable=0)
    builders.wait_for_pdb_observed(admin_api, namespace, "guarded", expected_pods=1)
    builders.wait_for_pods_running(admin_api, namespace, count=1)
    [guarded] = builders.pods_on_node(admin_api, made["a"][0], namespace=namespace)
    settings = replace(FAST, graceful_window=timedelta(seconds=6), drain_timeout=timedelta(seconds=15))
    ops = make_ops(kube, pool_key, tmp_path / "db.sqlite", settings)
    try:
        out = ops.request(request(OpKind.ZERO))
        assert out.ok and out.operation is not None, out.reply
        assert out.operation.plan.force_phase
        op_id = out.operation.id

        def draining() -> bool:
            op = ops.get(op_id)
            return op is not None and op.state is OpState.RUNNING and op.step == "drain"

        builders.wait_until(draining, 60, "phase 1 to be draining")
        # Someone brings up another pool during phase 1: the cluster no longer all goes to zero.
        pools(node_pool, pool_key, unique_name, b=1)
        assert ops.runner.wait_idle(90)
        op = ops.get(op_id)
    finally:
        ops.runner.stop()
    assert op is not None
    assert op.state is OpState.FAILED
    assert f"{unique_name}-b (1)" in op.step_data["force_withdrawn"]
    assert op.error == "drain did not complete within 15s"
    pod = builders.get(admin_api, builders.pod_path(namespace, guarded["metadata"]["name"]))
    assert pod["metadata"]["uid"] == guarded["metadata"]["uid"]
    assert "deletionTimestamp" not in pod["metadata"], "never force-deleted"


def _node(admin_api: Any, name: str) -> dict[str, Any]:
    node: dict[str, Any] = builders.get(admin_api, builders.node_path(name))
    return node


def _draining_taints(admin_api: Any, name: str) -> list[str]:
    return [t["key"] for t in _node(admin_api, name)["spec"].get("taints") or () if t["key"] == DRAINING]


def test_a_failed_operation_uncordons_what_it_cordoned_and_names_what_stays(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """cluster-autoscaler / Karpenter untaint the nodes of a failed scale-down; so does scalebot.

    A partial zero-scale of pool a (pool b stays up) fails on an opted-out pod. The node it
    cordoned is uncordoned and untainted; the node a person had cordoned before stays cordoned
    (only scalebot's taint goes) and the final message names it with the command that undoes it.
    """
    made = pools(node_pool, pool_key, unique_name, a=2, b=1)
    earlier, free = made["a"]
    builders.cordon(admin_api, earlier)
    builders.create_bare_pod(admin_api, namespace, "keep", node=free, grace=1, annotations=OPT_OUT)
    builders.wait_for_pods_running(admin_api, namespace, count=1)
    ops = make_ops(kube, pool_key, tmp_path / "db.sqlite")
    events: list[ProgressEvent] = []
    ops.subscribe(events.append)
    try:
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))
    finally:
        ops.runner.stop()
    assert op.state is OpState.FAILED
    assert "karpenter.sh/do-not-disrupt=true" in op.error
    assert op.step_data["released"] == {"uncordoned": [free], "kept_cordoned": [earlier]}
    assert not _node(admin_api, free)["spec"].get("unschedulable")
    assert _draining_taints(admin_api, free) == []
    assert _node(admin_api, earlier)["spec"].get("unschedulable") is True
    assert _draining_taints(admin_api, earlier) == []
    [final] = [e.text for e in events if e.final]
    assert f"Uncordoned the nodes this operation cordoned: {free}." in final
    assert f"Still cordoned, as they were before this operation: {earlier}" in final
    assert f"`scalebot uncordon {earlier}`" in final

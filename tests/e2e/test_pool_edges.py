"""Pool operations at the edges, on the real control plane as scalebot's ServiceAccount (issue 14).

Covers: a failed operation uncordons the nodes it cordoned and names those that stay cordoned;
a node that joins a pool going to zero is drained and removed too; a scale-down whose pool grew
meanwhile reports it and ends (never RUNNING for ever); a scale after a zero is what wake keeps;
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

from engine.domain.model import DRAINING_TAINT_KEY as DRAINING
from engine.domain.operation import (
    DrainProgress,
    OperationProgress,
    OpKind,
    OpState,
    ProgressEvent,
    Released,
    Target,
)
from engine.kube.client import KubeClient
from localcluster import objects, rest, waits
from tests.e2e.support import FAST, budget, finish, group, operations, pools, request, run, wait_for_step

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
        objects.create_bare_pod(admin_api, namespace, pod, node=node, grace=1, annotations=OPT_OUT)
    waits.wait_for_pods_running(admin_api, namespace, count=2)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rest.list_pods(admin_api, namespace)}
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        out = ops.request(request(OpKind.SCALE, f"{unique_name}-a", size=1))
        assert out.ok and out.operation is not None, out.reply
        plan = out.operation.plan
        [victim] = plan.nodes
        [(blocker, why)] = plan.blockers
        assert blocker in {f"{namespace}/{n}" for n in names}
        assert "karpenter.sh/do-not-disrupt=true" in why
        op = finish(ops, out.operation.id, 90)
        assert op.state is OpState.FAILED
        assert op.error is not None and victim in op.error and "karpenter.sh/do-not-disrupt=true" in op.error
    after = rest.list_pods(admin_api, namespace)
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in after} == before
    assert all("deletionTimestamp" not in p["metadata"] for p in after)
    nodes = rest.get(admin_api, rest.node_path())["items"]
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
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        scaled = run(ops, request(OpKind.SCALE, pool, size=2))
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        zeroed = run(ops, request(OpKind.ZERO, pool))
        assert zeroed.state is OpState.SUCCEEDED, zeroed.error
        woken = run(ops, request(OpKind.WAKE, pool))
        assert woken.state is OpState.SUCCEEDED, woken.error
        sizes = {p.name: p.desired for p in ops.status("e2e").pools}
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

    made = pools(node_pool, pool_key, unique_name, a=1)
    guarded = _guarded_pod(admin_api, namespace, made["a"][0], unique_name)
    settings = replace(FAST, graceful_window=timedelta(seconds=6), drain_timeout=timedelta(seconds=15))
    with operations(kube, pool_key, tmp_path / "db.sqlite", settings) as ops:
        out = ops.request(request(OpKind.ZERO))
        assert out.ok and out.operation is not None, out.reply
        assert out.operation.plan.force_phase
        wait_for_step(ops, out.operation.id, "drain")
        # Someone brings up another pool during phase 1: the cluster no longer all goes to zero.
        pools(node_pool, pool_key, unique_name, b=1)
        op = finish(ops, out.operation.id, 90)
    assert op.state is OpState.FAILED
    assert f"{unique_name}-b (1)" in op.progress.drain.force_withdrawn
    assert op.error == "drain did not complete within 15s"
    pod = rest.get(admin_api, rest.pod_path(namespace, guarded["metadata"]["name"]))
    assert pod["metadata"]["uid"] == guarded["metadata"]["uid"]
    assert "deletionTimestamp" not in pod["metadata"], "never force-deleted"


def _guarded_pod(admin_api: Any, namespace: str, node: str, unique_name: str) -> dict[str, Any]:
    """The one pod of Deployment `guarded` (on `node`, the test's only node when it is made), under
    a PodDisruptionBudget that allows no eviction."""
    objects.create_deployment(admin_api, namespace, "guarded", 1, node_selector=group(unique_name), grace=1)
    budget(admin_api, namespace, "guarded", app="guarded", max_unavailable=0, expected_pods=1)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    [guarded] = rest.pods_on_node(admin_api, node, namespace=namespace)
    return guarded


def _node(admin_api: Any, name: str) -> dict[str, Any]:
    node: dict[str, Any] = rest.get(admin_api, rest.node_path(name))
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
    objects.cordon(admin_api, earlier)
    objects.create_bare_pod(admin_api, namespace, "keep", node=free, grace=1, annotations=OPT_OUT)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    events: list[ProgressEvent] = []
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        ops.subscribe(events.append)
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))
    assert op.state is OpState.FAILED
    assert "karpenter.sh/do-not-disrupt=true" in op.error
    assert op.progress.drain.released == Released(uncordoned=(free,), kept_cordoned=(earlier,))
    assert not _node(admin_api, free)["spec"].get("unschedulable")
    assert _draining_taints(admin_api, free) == []
    assert _node(admin_api, earlier)["spec"].get("unschedulable") is True
    assert _draining_taints(admin_api, earlier) == []
    [final] = [e.text for e in events if e.final]
    assert f"Uncordoned the nodes this operation cordoned: {free}." in final
    assert f"Still cordoned, as they were before this operation: {earlier}" in final
    assert f"`scalebot uncordon {earlier}`" in final


def test_a_node_that_joins_a_pool_going_to_zero_is_drained_too(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """A node that joins during phase 1 is cordoned, drained and removed; the change is reported.

    On the previous code the operation stayed RUNNING for ever in verify (the pool at 1, not 0).
    """
    from dataclasses import replace

    [first] = pools(node_pool, pool_key, unique_name, a=1)["a"]
    pool = f"{unique_name}-a"
    _guarded_pod(admin_api, namespace, first, unique_name)
    settings = replace(FAST, graceful_window=timedelta(seconds=5))
    with operations(kube, pool_key, tmp_path / "db.sqlite", settings) as ops:
        out = ops.request(request(OpKind.ZERO))
        assert out.ok and out.operation is not None, out.reply
        wait_for_step(ops, out.operation.id, "drain")
        # A node joins the pool during phase 1; the Deployment's replacement pod can land on it.
        [late] = node_pool(1, name=f"{unique_name}-late", labels={pool_key: pool, **group(unique_name)})
        op = finish(ops, out.operation.id, 120)
    assert op.state is OpState.SUCCEEDED, op.error
    assert op.progress.removal.joined == {pool: (late,)}
    [change] = op.progress.removal.pool_changes
    assert f"{pool}: {late}" in change and "draining them too" in change
    assert op.summary.nodes_removed == 2
    names = {n.name for n in kube.list_nodes()}
    assert first not in names and late not in names


def test_a_scale_down_whose_pool_grew_meanwhile_ends_with_the_reason(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """A label pool cannot shrink by a size: the operation reports the change and fails at once.

    On the previous code the operation stayed RUNNING for ever in verify, holding its lock.
    """
    made = pools(node_pool, pool_key, unique_name, a=2)
    pool = f"{unique_name}-a"
    for i, node in enumerate(made["a"]):
        objects.create_bare_pod(admin_api, namespace, f"held-{i}", node=node, grace=1, labels={"app": "held"})
    budget(admin_api, namespace, "held", app="held", min_available=2, expected_pods=2)
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        out = ops.request(request(OpKind.SCALE, pool, size=1, force=True))
        assert out.ok and out.operation is not None, out.reply
        wait_for_step(ops, out.operation.id, "drain")
        [late] = node_pool(1, name=f"{unique_name}-late", labels={pool_key: pool})
        rest.delete(admin_api, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/held")
        op = finish(ops, out.operation.id, 60)
        relocked = ops.request(request(OpKind.ZERO, pool))
    assert op.state is OpState.FAILED
    assert op.error.startswith(f"pool {pool} is at 2, expected 1: label pool {pool} has 2 nodes")
    [change] = op.progress.removal.pool_changes
    assert change == (
        f"pool {pool} changed during the operation: planned 2 → 1, at 2 after removing the drained nodes"
    )
    assert op.summary.nodes_removed == 1
    assert late in {n.name for n in kube.list_nodes()}
    assert relocked.ok, "the failed operation released its lock"


def test_a_scale_after_a_zero_is_what_wake_keeps(
    kube: KubeClient,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """zero (from 3), then `scale a 2` by hand: a is awake at the size chosen; wake leaves it at 2.

    On the previous code wake brought the pool back to 3 (the zero's record outlived the scale).
    """
    pools(node_pool, pool_key, unique_name, a=3)
    pool = f"{unique_name}-a"
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        zeroed = run(ops, request(OpKind.ZERO, pool))
        assert zeroed.state is OpState.SUCCEEDED, zeroed.error
        scaled = run(ops, request(OpKind.SCALE, pool, size=2))
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        woken = ops.request(request(OpKind.WAKE, pool))
        assert ops.runner.wait_idle(60)
        sizes = {p.name: p.desired for p in ops.status("e2e").pools}
        restore = [r for r in ops.store.restore_records("e2e") if r.pool == pool]
    assert not woken.ok
    assert woken.reply == f"{pool} is not asleep: no sizes were recorded by a scale-down"
    assert sizes == {pool: 2}
    assert restore == []


def test_phase_two_is_withdrawn_when_a_node_in_no_pool_could_run_the_pods(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """A Ready, schedulable node in no pool where the blocked pod could run: no forcing.

    The pod's nodeSelector confines it to this test's nodes, so other tests' nodes (in no pool
    either, from this test's pool label) can never run it: only the node made here counts. On the
    previous code the pod was force-deleted in phase 2.
    """
    from dataclasses import replace

    made = pools(node_pool, pool_key, unique_name, a=1)
    guarded = _guarded_pod(admin_api, namespace, made["a"][0], unique_name)
    # Made after the pod is bound, so the pod is on the pool's node; it carries no pool label.
    [spare] = node_pool(1, labels=group(unique_name))
    settings = replace(FAST, graceful_window=timedelta(seconds=5), drain_timeout=timedelta(seconds=12))
    with operations(kube, pool_key, tmp_path / "db.sqlite", settings) as ops:
        op = run(ops, request(OpKind.ZERO))
    assert op.plan.force_phase
    assert op.state is OpState.FAILED
    assert op.progress.drain.force_withdrawn == (
        f"nodes in no pool could still run 1 of the remaining Pods "
        f"({namespace}/{guarded['metadata']['name']} → {spare})"
    )
    assert op.error == "drain did not complete within 12s"
    pod = rest.get(admin_api, rest.pod_path(namespace, guarded["metadata"]["name"]))
    assert pod["metadata"]["uid"] == guarded["metadata"]["uid"]
    assert "deletionTimestamp" not in pod["metadata"], "never force-deleted"


def test_one_at_a_time_drains_non_empty_nodes_in_turn(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """The cluster's policy `drain_one_at_a_time`: a-00's pod moves while a-01's waits its turn.

    cluster-autoscaler drains one non-empty node at a time and deletes empty ones in bulk; the
    empty a-02 is done at once. The first report lists a-01's pod as waiting for its node's turn.
    """
    from engine.drain.report import QUEUED_TEXT
    from engine.operations.policy import ClusterPolicy

    made = pools(node_pool, pool_key, unique_name, a=3, b=1)
    first, second, _empty = made["a"]
    objects.create_bare_pod(admin_api, namespace, "one", node=first, grace=1)
    objects.create_bare_pod(admin_api, namespace, "two", node=second, grace=1)
    waits.wait_for_pods_running(admin_api, namespace, count=2)
    events: list[ProgressEvent] = []
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        ops.policies["e2e"] = ClusterPolicy(cluster="e2e", drain_one_at_a_time=True)
        ops.subscribe(events.append)
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))
    assert op.plan.one_at_a_time
    assert "non-empty nodes are drained one at a time; empty nodes together" in op.plan.to_text()
    assert op.state is OpState.SUCCEEDED, op.error
    assert op.summary.pods_evicted == 2
    assert op.summary.nodes_removed == 3
    [first_report, *_] = [e.condition for e in events if e.condition]
    # Cluster API's current layout: the queued line, like its "After above" lines, has no "* ".
    assert f"{QUEUED_TEXT}: {namespace}/two" in first_report.splitlines(), first_report
    assert f"{namespace}/one" not in first_report.split(QUEUED_TEXT)[1]


def test_phase_two_counts_only_the_pods_scalebot_deleted(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Phase 2 resumed after a restart: a pod that was terminating and vanished is not counted.

    The interrupted attempt wrote its intents (write-ahead) for "self" (already terminating,
    evicted in phase 1) and "ours" (not terminating); both are gone at the restart. "ours" counts
    (nothing else was deleting it), "self" is named but not counted, "left" is force-deleted now.
    On the previous code "self" was counted as force-deleted.
    """
    from engine.domain.clock import SystemClock
    from engine.domain.force_scope import FORCE_PHASE, ForceScope
    from engine.domain.operation import Operation, OperationPlan, PoolChange
    from engine.drain import passes as drain
    from engine.operations.runner import ClusterHandle, Runner
    from engine.operations.steps.force_delete import step_force
    from engine.pools.labels import LabelPoolProvider
    from engine.store.database import Store

    [node] = pools(node_pool, pool_key, unique_name, a=1)["a"]
    for name in ("self", "ours", "left"):
        objects.create_bare_pod(admin_api, namespace, name, node=node, grace=1)
    waits.wait_for_pods_running(admin_api, namespace, count=3)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rest.list_pods(admin_api, namespace)}
    store = Store(tmp_path / "db.sqlite")
    op_id = "op-restarted"
    now = SystemClock().now()
    for name, terminating in (("self", "true"), ("ours", "false")):
        store.audit(
            at=now,
            actor="scalebot",
            action="force_delete_pod",
            op_id=op_id,
            cluster="e2e",
            detail=f"{namespace}/{name} uid={uids[name]} grace=0 terminating={terminating} reason=x",
        )
    for name in ("self", "ours"):
        rest.delete(admin_api, rest.pod_path(namespace, name), grace=0)
        waits.wait_for_pod_gone(admin_api, namespace, name)
    pool = f"{unique_name}-a"
    plan = OperationPlan(
        kind=OpKind.ZERO,
        cluster="e2e",
        pools=(PoolChange(pool=pool, before=1, after=0, nodes_to_remove=(node,)),),
        nodes=(node,),
        force_phase=True,
        forcing=(FORCE_PHASE,),
        force_scope=ForceScope(units=tuple(f"Pod/{namespace}/{name}" for name in ("left", "ours", "self"))),
    )
    op = Operation(
        id=op_id,
        kind=OpKind.ZERO,
        target=Target(cluster="e2e"),
        state=OpState.RUNNING,
        requested_by="cli:e2e",
        created_at=now,
        updated_at=now,
        plan=plan,
        step="force",
        progress=OperationProgress(drain=DrainProgress(state=drain.DrainState(started_at=now))),
    )
    provider = LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    handle = ClusterHandle("e2e", kube, provider)
    runner = Runner(store, {"e2e": handle}, SystemClock(), lambda event: None)
    try:
        result = step_force(runner, op, handle)
    finally:
        runner.stop()
    assert result.progress is not None
    assert result.progress.drain.force_deleted == (f"{namespace}/left", f"{namespace}/ours")
    assert result.progress.drain.force_unconfirmed == (f"{namespace}/self",)
    [text] = [t for _, t, _ in result.events]
    assert text.startswith(f"Phase 2: force-deleted 2 Pods with grace 0: {namespace}/left, {namespace}/ours;")
    assert "not counted (already terminating" in text and f"{namespace}/self" in text
    confirmed = [r.detail for r in store.audit_rows(op_id=op_id) if r.action == "force_deleted_pod"]
    assert confirmed == [f"{namespace}/left uid={uids['left']}"]

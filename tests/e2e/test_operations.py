"""Pool operations against the real control plane, as scalebot's ServiceAccount.

Covers: a full zero-scale (every pool → 0) with a PDB that allows nothing and a do-not-disrupt pod:
phase 1 reports them, phase 2 force-deletes them after the (shortened) window, every node is gone,
and wake restores the node count and the workloads; a partial zero-scale never force-deletes;
kill -9 of the process during phase 1 and during wake, then `scalebot resume`; `wake` after the
SQLite file was deleted (sizes come from the pool records in the cluster); two operations on one
pool (refused) and on different pools (both run).

Each test uses its own pool label key, so the pools of other tests are never part of "the cluster".
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState, ProgressEvent
from engine.kube.client import KubeClient
from localcluster import objects, rest, waits
from tests.e2e.support import (
    REPO,
    budget,
    deployment,
    finish,
    group,
    journal,
    operations,
    pools,
    request,
    run,
    scalebot_args,
    wait_for_step,
    with_workloads,
)

pytestmark = pytest.mark.e2e


def test_full_zero_scale_forces_blockers_in_phase_two_and_wake_restores(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2, b=2)
    on_group = group(unique_name)
    deployment(admin_api, namespace, "web", 4, node_selector=on_group, grace=2)
    budget(admin_api, namespace, "web-pdb", app="web", min_available=4)
    opted_out = {"karpenter.sh/do-not-disrupt": "true"}
    deployment(
        admin_api, namespace, "notebook", 1, node_selector=on_group, grace=2, pod_annotations=opted_out
    )
    objects.create_daemonset(admin_api, namespace, "agent", node_selector=on_group)

    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        events: list[ProgressEvent] = []
        ops.subscribe(events.append)
        plan = ops.plan(request(OpKind.ZERO))
        assert plan.force_phase and len(plan.nodes) == 4
        assert {pod.split("/")[0] for pod, _ in plan.blockers} == {namespace}
        op = run(ops, request(OpKind.ZERO))
        assert op.state is OpState.SUCCEEDED, op.error
        conditions = [e.condition for e in events if e.condition]
        assert any("The disruption budget web-pdb needs 4 healthy pods" in c for c in conditions)
        # Cluster API's current layout: "* Pod ns/notebook-…: waiting for completion".
        waiting = re.compile(rf"^\* Pods? [^\n]*{namespace}/notebook-[^\n]*: waiting for completion$", re.M)
        assert any(waiting.search(c) for c in conditions), conditions[-3:]
        forced = op.progress.drain.force_deleted
        assert sum(p.startswith(f"{namespace}/web-") for p in forced) == 4
        assert sum(p.startswith(f"{namespace}/notebook-") for p in forced) == 1
        all_nodes = [n for names in made.values() for n in names]
        assert not [n for n in kube.list_nodes() if n.name in all_nodes], "every node of every pool is gone"
        audit = [r.detail for r in ops.store.audit_rows(op_id=op.id) if r.action == "force_delete_pod"]
        assert len(audit) == 5 and any("web-pdb" in d for d in audit)

        woken = run(ops, request(OpKind.WAKE))
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert woken.summary.nodes_ready == (4, 4)
        assert sorted(n.name for n in kube.list_nodes() if n.name in all_nodes) == sorted(all_nodes)
        web = waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=90)
        assert web["status"]["availableReplicas"] == 4


def test_partial_zero_scale_waits_for_the_pdb_and_never_force_deletes(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    pools(node_pool, pool_key, unique_name, a=1)
    deployment(admin_api, namespace, "web", 3, node_selector=group(unique_name))
    pools(node_pool, pool_key, unique_name, b=2)  # after the pods are placed: all of them are on pool a
    budget(admin_api, namespace, "web-pdb", app="web", min_available=3)
    relaxed = []

    def relax(event: ProgressEvent) -> None:
        if "web-pdb" in event.condition and not relaxed:
            relaxed.append(True)
            rest.patch(
                admin_api,
                f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/web-pdb",
                {"spec": {"minAvailable": 2}},
            )

    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        ops.subscribe(relax)
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))
    assert not op.plan.force_phase
    assert op.state is OpState.SUCCEEDED, op.error
    assert relaxed, "the PDB blocked the drain first"
    assert op.progress.drain.force_deleted == ()
    assert kube.request_counts[("delete", "pods")] == 0, "a partial zero-scale never sends a DELETE"


def cli(*args: str, kubeconfig: Path, db: Path, pool_key: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot", *args, *scalebot_args(kubeconfig, db, pool_key, graceful_window="10s")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def kill_9(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


def test_kill_9_during_phase_one_and_during_wake_then_resume(
    admin_api: Any,
    kube: KubeClient,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    deployment(admin_api, namespace, "web", 2, node_selector=group(unique_name))
    budget(admin_api, namespace, "web-pdb", app="web", min_available=2)
    db = tmp_path / "scalebot.db"

    proc = cli("zero", "--yes", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    waits.wait_until(
        lambda: db.exists() and any(step == "drain" for _, step, _ in journal(db)), 60, "phase 1 under way"
    )
    kill_9(proc)
    (op_id, _, _), *_ = journal(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT state FROM operations WHERE id=?", (op_id,)).fetchone() == ("running",)

    resumed = cli("resume", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert f"resumed: {op_id}" in out and "Phase 2: force-deleted 2 Pods" in out
    steps = [step for op, step, event in journal(db) if op == op_id]
    assert steps[:3] == ["record", "cordon", "drain"] and "force" in steps and steps[-1] == "verify"
    assert not [n for n in kube.list_nodes() if n.name in made["a"]]

    wake = cli("wake", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    waits.wait_until(lambda: len({op for op, _, _ in journal(db)}) == 2, 60, "the wake operation exists")
    kill_9(wake)
    again = cli("resume", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    with sqlite3.connect(db) as conn:
        states = dict(conn.execute("SELECT id, state FROM operations").fetchall())
    assert set(states.values()) == {"succeeded"}
    assert sorted(n.name for n in kube.list_nodes() if n.name in made["a"]) == sorted(made["a"])


def test_wake_after_losing_the_database_restores_from_pool_records(
    kube: KubeClient,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=3, b=1)
    with operations(kube, pool_key, tmp_path / "first.db") as ops:
        assert run(ops, request(OpKind.ZERO, f"{unique_name}-a")).state is OpState.SUCCEEDED
    (tmp_path / "first.db").unlink()

    with operations(kube, pool_key, tmp_path / "second.db") as fresh:
        plan = fresh.plan(request(OpKind.WAKE))
        assert [(p.pool, p.after) for p in plan.pools] == [(f"{unique_name}-a", 3)]
        assert run(fresh, request(OpKind.WAKE)).state is OpState.SUCCEEDED
    assert sorted(n.name for n in kube.list_nodes() if n.name in made["a"]) == sorted(made["a"])


def test_second_operation_on_a_busy_pool_is_refused_and_other_pools_run(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2, b=2, c=1)
    # A pod held by a finalizer on each node of pool a: whichever node the scale-down picks, its drain
    # waits for that pod until the test lets it go, so the first operation is certainly still running
    # when the second request arrives.
    held = [f"held-{i}" for i in range(len(made["a"]))]
    for pod, node in zip(held, made["a"], strict=True):
        objects.create_pod_with_finalizer(admin_api, namespace, pod, node=node, grace=1)
    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        first = ops.request(request(OpKind.SCALE, f"{unique_name}-a", size=1, requested_by="cli:a"))
        assert first.ok and first.operation is not None
        first_id = first.operation.id
        wait_for_step(ops, first_id, "drain")
        busy = ops.request(request(OpKind.ZERO, f"{unique_name}-a"))
        assert not busy.ok and first_id in busy.reply
        other = ops.request(request(OpKind.ZERO, f"{unique_name}-b"))
        assert other.ok and other.operation is not None, other.reply
        assert ops.get(first_id).state is OpState.RUNNING  # type: ignore[union-attr]
        for pod in held:
            objects.remove_finalizers(admin_api, namespace, pod)
        assert ops.runner.wait_idle(90)
        assert ops.get(first_id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
        assert ops.get(other.operation.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
        sizes = {p.name: p.desired for p in ops.status("e2e").pools}
        assert sizes == {f"{unique_name}-a": 1, f"{unique_name}-b": 0, f"{unique_name}-c": 1}


def test_workloads_only_sleep_and_wake_through_operations(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    pools(node_pool, pool_key, unique_name, a=2)
    on_group = group(unique_name)
    objects.create_deployment(admin_api, namespace, "web", 3, node_selector=on_group, grace=1)
    objects.create_statefulset(admin_api, namespace, "db", 2, node_selector=on_group, grace=1)
    objects.create_deployment(admin_api, namespace, "idle", 0, node_selector=on_group)
    waits.wait_for_deployment_available(admin_api, namespace, "web")
    handle = with_workloads(kube, pool_key, namespace)
    with operations(kube, pool_key, tmp_path / "db.sqlite", handle=handle) as ops:
        sleep = request(OpKind.ZERO, workloads_only=True)
        assert ops.plan(sleep).workloads == 2, "web and db change; idle is already at 0"
        slept = run(ops, sleep)
        assert slept.state is OpState.SUCCEEDED, slept.error
        apps = f"/apis/apps/v1/namespaces/{namespace}"
        assert rest.get(admin_api, f"{apps}/deployments/web")["spec"]["replicas"] == 0
        assert rest.get(admin_api, f"{apps}/statefulsets/db")["spec"]["replicas"] == 0
        assert len(ops.store.workload_records("e2e")) == 2
        pool_record = f"/api/v1/namespaces/scalebot/configmaps/scalebot-pool-{unique_name}-a"
        assert rest.get_or_none(admin_api, pool_record) is None, "no node pool was touched"

        woken = run(ops, request(OpKind.WAKE, workloads_only=True))
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert rest.get(admin_api, f"{apps}/deployments/web")["spec"]["replicas"] == 3
        assert rest.get(admin_api, f"{apps}/statefulsets/db")["spec"]["replicas"] == 2
        assert rest.get(admin_api, f"{apps}/deployments/idle")["spec"]["replicas"] == 0
        assert ops.store.workload_records("e2e") == []


def test_a_sleep_scales_only_the_workloads_it_was_approved_for(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A Deployment created between the approval and the workloads step is left as it is."""
    objects.create_deployment(admin_api, namespace, "web", 1, grace=1)
    no_pools = "scalebot.test/none"
    handle = with_workloads(kube, no_pools, namespace)
    with operations(kube, no_pools, tmp_path / "db.sqlite", handle=handle) as ops:
        start = ops.runner.start
        ops.runner.start = lambda op_id: None  # type: ignore[method-assign]
        out = ops.request(request(OpKind.ZERO, workloads_only=True))
        assert out.ok and out.operation is not None, out.reply
        assert out.operation.plan.workload_keys == (f"Deployment/{namespace}/web",)
        objects.create_deployment(admin_api, namespace, "late", 2, grace=1)  # after the approval
        start(out.operation.id)
        slept = finish(ops, out.operation.id, 60)
        assert slept.state is OpState.SUCCEEDED, slept.error
        apps = f"/apis/apps/v1/namespaces/{namespace}"
        assert rest.get(admin_api, f"{apps}/deployments/web")["spec"]["replicas"] == 0
        assert rest.get(admin_api, f"{apps}/deployments/late")["spec"]["replicas"] == 2
        assert [r["name"] for r in ops.store.workload_records("e2e")] == ["web"]

"""A sleep with workloads lets the pods of what it scaled to zero leave before it drains, on the
real control plane as scalebot's ServiceAccount.

Covers: a Deployment under a PodDisruptionBudget (minAvailable 1) on a pool going to zero. The
controller-manager is held (SIGSTOP) while the sleep scales the Deployment to zero, as a busy one
at 100 nodes is slow to delete the pods: the operation cordons the nodes and waits
(`workloads_leave`) instead of evicting pods their controller is about to delete (429s under the
budget). Once the controller-manager goes on, the pods leave, the drain finds nothing to evict and
the pool reaches zero nodes. The API server's own request counter shows no eviction at all.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState
from engine.kube.client import KubeClient
from engine.operations.service import Operations
from localcluster import rest, waits
from localcluster.controlplane import ControlPlane
from tests.bench.cluster import Metrics, eviction_requests
from tests.e2e.support import budget, deployment, finish, group, operations, pools, request, with_workloads

pytestmark = pytest.mark.e2e


class HeldControllerManager:
    """The controller-manager's process group stopped and continued (always continued on exit)."""

    def __init__(self, cp: ControlPlane) -> None:
        self._group = cp.pids()["kube-controller-manager"]
        self.held = False

    def hold(self) -> None:
        os.killpg(self._group, signal.SIGSTOP)
        self.held = True

    def release(self) -> None:
        if self.held:
            os.killpg(self._group, signal.SIGCONT)
            self.held = False


@pytest.fixture
def controller_manager(control_plane: ControlPlane) -> Iterator[HeldControllerManager]:
    held = HeldControllerManager(control_plane)
    try:
        yield held
    finally:
        held.release()


def metrics(admin_api: Any) -> Metrics:
    return Metrics.parse(rest.send_request(admin_api, "GET", "/metrics", timeout=60.0).data.decode())


def at_step(ops: Operations, op_id: str, step: str) -> bool:
    op = ops.get(op_id)
    return op is not None and op.state is OpState.RUNNING and op.step == step


def test_a_sleep_with_workloads_lets_their_pods_leave_instead_of_evicting_them(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
    controller_manager: HeldControllerManager,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    deployment(admin_api, namespace, "web", 2, node_selector=group(unique_name), grace=1)
    budget(admin_api, namespace, "web", app="web", min_available=1, expected_pods=2)
    handle = with_workloads(kube, pool_key, namespace)
    before = metrics(admin_api)

    def evicted() -> bool:
        return bool(eviction_requests(before, metrics(admin_api)))

    with operations(kube, pool_key, tmp_path / "db.sqlite", handle=handle) as ops:
        controller_manager.hold()
        asked = ops.request(request(OpKind.ZERO, workloads=True))
        assert asked.ok and asked.operation is not None, asked.reply
        op_id = asked.operation.id
        # Scaled to zero, its pods still running (nobody deletes them yet): the operation waits for
        # them, or (before it did) evicts them.
        waits.wait_until(
            lambda: at_step(ops, op_id, "workloads_leave") or evicted(),
            60,
            "the sleep to wait for the pods of the workload it scaled to zero, or to evict them",
        )
        controller_manager.release()
        done = finish(ops, op_id, timeout=120)
    assert eviction_requests(before, metrics(admin_api)) == {}, "no eviction for pods leaving with them"
    assert done.state is OpState.SUCCEEDED, done.error
    assert done.progress.workloads.scaled_to_zero == (f"Deployment/{namespace}/web",)
    assert done.progress.workloads.left == 2
    assert done.progress.drain.evicted == 0
    assert not {n.name for n in kube.list_nodes()} & set(made["a"]), "the pool reached zero nodes"
    web = rest.get(admin_api, f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    assert web["spec"]["replicas"] == 0

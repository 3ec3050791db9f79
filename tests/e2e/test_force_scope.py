"""The approved force scope against the real control plane, as scalebot's ServiceAccount.

A full zero-scale is approved for the workloads on its nodes when it is planned. A Pod bound to
one of those nodes after the cordon (its nodeName set, so the cordon does not keep it out), under
a PodDisruptionBudget that allows nothing, is outside that scope: phase 2 force-deletes nothing,
no node is removed, and the operation fails naming the Pod, its owner and why it blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState, ProgressEvent
from engine.kube.client import KubeClient
from localcluster import objects, rest
from tests.e2e.support import budget, deployment, group, operations, pools, request, run

pytestmark = pytest.mark.e2e


def test_a_pod_bound_after_the_cordon_outside_the_scope_is_not_force_deleted_in_phase_two(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    deployment(admin_api, namespace, "web", 2, node_selector=group(unique_name), grace=2)
    budget(admin_api, namespace, "web-pdb", app="web", min_available=2)
    bound: list[str] = []

    def after_the_cordon(event: ProgressEvent) -> None:
        if not bound and event.text.startswith("Cordoned"):
            bound.append("intruder")
            objects.create_bare_pod(
                admin_api, namespace, "intruder", node=made["a"][0], labels={"app": "intruder"}, grace=1
            )
            objects.create_pdb(
                admin_api, namespace, "intruder", match_labels={"app": "intruder"}, min_available=1
            )

    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        ops.subscribe(after_the_cordon)
        op = run(ops, request(OpKind.ZERO))

    assert bound == ["intruder"]
    assert op.state is OpState.FAILED and op.plan.force_phase
    assert f"{namespace}/intruder (owner Pod/{namespace}/intruder" in op.error
    assert f"Pod/{namespace}/intruder was not in the approved force scope" in op.error
    assert op.progress.drain.force_deleted == ()
    intruder = rest.get(admin_api, rest.pod_path(namespace, "intruder"))
    assert "deletionTimestamp" not in intruder["metadata"], "never force-deleted"
    web = [p for p in rest.list_pods(admin_api, namespace) if p["metadata"]["name"].startswith("web-")]
    assert len(web) == 2 and not any("deletionTimestamp" in p["metadata"] for p in web)
    assert {n.name for n in kube.list_nodes()} >= set(made["a"]), "no node was removed"

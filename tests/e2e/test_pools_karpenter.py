"""The Karpenter PoolProvider against the REAL Karpenter controller (its kwok cloud provider).

The `karpenter` fixture runs Karpenter v1.14.1's kwok cloud provider beside the session's control
plane, built from the pinned module with its CRDs: the real provisioning, disruption and
termination controllers, whose "cloud" creates Node objects that the kwok simulator makes Ready.
scalebot runs as its own ServiceAccount (the shipped RBAC), through the `scalebot` CLI.

Proves: pending pods make Karpenter provision nodes; `scalebot zero` caps the NodePool, drains in
two phases (a do-not-disrupt pod holds phase 1 and is listed, then is force-deleted), deletes the
NodeClaims, and Karpenter terminates every node; while asleep Karpenter refuses to provision for
the pods left pending (its own FailedScheduling event says the NodePool's limits are exhausted);
`scalebot wake` restores limits and disruption exactly, Karpenter provisions again, and the wake
report counts the nodes; `scalebot scale POOL N` is refused for N > 0 and changes nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.pools.base import RESTORE_ANNOTATION
from engine.pools.karpenter import NODEPOOL_LABEL, SAVED_ANNOTATION
from localcluster import objects, rest, waits
from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
LIMITS = {"cpu": "40", "memory": "160Gi"}
DISRUPTION = {
    "consolidationPolicy": "WhenEmpty",
    "consolidateAfter": "10m",
    "budgets": [{"nodes": "20%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}],
}


@pytest.fixture
def nodepool(karpenter: ControlPlane, admin_api: Any, namespace: str, unique_name: str) -> Iterator[str]:
    """A NodePool of one-pod nodes (c-2x: 1900m allocatable, the pods ask for 1 CPU)."""
    name = f"np-{unique_name}"[:63]
    rest.create(
        admin_api,
        NODECLASSES,
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": name},
            "spec": {},
        },
    )
    body = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "limits": LIMITS,
            "disruption": DISRUPTION,
            "template": {
                # type=kwok: the kwok simulator manages nodes with this label (makes them Ready).
                "metadata": {"labels": {"type": "kwok"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": name},
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["c-2x-amd64-linux"],
                        },
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "expireAfter": "Never",
                },
            },
        },
    }
    rest.create(admin_api, NODEPOOLS, body)
    yield name
    # The workloads go first: Karpenter's termination drain never evicts a do-not-disrupt pod.
    rest.delete(admin_api, f"/apis/apps/v1/namespaces/{namespace}/deployments")
    waits.wait_until(lambda: not rest.list_pods(admin_api, namespace), 60, f"pods of {namespace} gone")
    # Deleting the NodePool makes Karpenter terminate its nodes (owner references).
    rest.delete(admin_api, f"{NODEPOOLS}/{name}")
    waits.wait_until(lambda: not _claims(admin_api, name), 120, f"NodeClaims of {name} gone")
    rest.delete(admin_api, f"{NODECLASSES}/{name}")


def _claims(admin_api: Any, pool: str) -> list[dict[str, Any]]:
    return rest.list_items(admin_api, NODECLAIMS, label_selector=f"{NODEPOOL_LABEL}={pool}")


def _pool_nodes(admin_api: Any, pool: str) -> list[str]:
    return sorted(
        n["metadata"]["name"]
        for n in rest.list_items(admin_api, rest.node_path(), label_selector=f"{NODEPOOL_LABEL}={pool}")
    )


def _scalebot(
    control_plane: ControlPlane, db: Path, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            *args,
            "--provider",
            "karpenter",
            "--cluster",
            "e2e",
            "--kubeconfig",
            str(control_plane.scalebot_kubeconfig),
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_zero_and_wake_through_the_real_karpenter_controller(
    karpenter: ControlPlane, admin_api: Any, namespace: str, nodepool: str, tmp_path: Path
) -> None:
    selector = {NODEPOOL_LABEL: nodepool}
    objects.create_deployment(admin_api, namespace, "web", 3, node_selector=selector, grace=2, cpu="1")
    objects.create_deployment(
        admin_api,
        namespace,
        "notebook",
        1,
        node_selector=selector,
        grace=2,
        cpu="1",
        pod_annotations={"karpenter.sh/do-not-disrupt": "true"},
    )
    # Pending pods -> Karpenter launches NodeClaims -> kwok nodes -> the pods run.
    waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=120)
    waits.wait_for_deployment_available(admin_api, namespace, "notebook", timeout=120)
    # One node per pod on a quiet machine; under load the real controller can launch one more
    # NodeClaim before the first ones register (its batching window sees the pods twice). The
    # test follows what Karpenter did, and each figure below must match it exactly.
    claims = _claims(admin_api, nodepool)
    nodes = _pool_nodes(admin_api, nodepool)
    assert len(claims) == len(nodes) >= 4, (claims, nodes)
    count = len(nodes)
    db = tmp_path / "db.sqlite"

    # scale N > 0 is refused, with the reason, and changes nothing.
    # (Karpenter keeps updating the NodePool's status: compare what scalebot could write.)
    def written() -> tuple[Any, ...]:
        meta = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")["metadata"]
        return meta["generation"], meta.get("annotations")

    before = written()
    refused = _scalebot(karpenter, db, "scale", nodepool, "2", "--yes")
    assert refused.returncode != 0
    assert f"pool {nodepool} (karpenter) sizes itself from demand" in refused.stderr
    assert written() == before

    # Zero: every pool goes to 0, so two phases; the do-not-disrupt pod holds phase 1.
    zero = _scalebot(karpenter, db, "zero", "--yes", "--graceful-window", "8s")
    assert zero.returncode == 0, zero.stdout + zero.stderr
    out = zero.stdout
    assert "every pool goes to 0" in out
    # Cluster API's current layout: "* Pod ns/notebook-…: waiting for completion".
    assert re.search(rf"^\* Pods? [^\n]*{namespace}/notebook-[^\n]*: waiting for completion$", out, re.M), out
    assert f"{namespace}/notebook-" in out.split("Phase 2: force-deleted", 1)[1]
    assert f"{count} nodes removed" in out
    assert _claims(admin_api, nodepool) == []
    assert _pool_nodes(admin_api, nodepool) == []
    asleep = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")
    assert asleep["spec"]["limits"] == {"cpu": "0", "memory": "160Gi", "nodes": "0"}
    assert asleep["spec"]["disruption"]["budgets"] == [{"nodes": "0"}]
    saved = orjson.loads(asleep["metadata"]["annotations"][SAVED_ANNOTATION])
    assert saved == {"limits": LIMITS, "disruption": DISRUPTION}
    assert orjson.loads(asleep["metadata"]["annotations"][RESTORE_ANNOTATION])["desired"] == count

    # Asleep: the Deployments' pods are pending again, and Karpenter refuses them for the limits.
    def refused_for_limits() -> bool:
        events = rest.list_items(admin_api, f"/api/v1/namespaces/{namespace}/events")
        return any(
            e.get("reason") == "FailedScheduling"
            and "node limits have been exhausted for nodepool" in (e.get("message") or "")
            for e in events
        )

    waits.wait_until(refused_for_limits, 60, "Karpenter refusing the pending pods for the NodePool's limits")
    assert _claims(admin_api, nodepool) == [], "Karpenter provisioned while asleep"
    assert _pool_nodes(admin_api, nodepool) == []

    # Wake: limits and disruption exactly as they were; Karpenter provisions for the pending pods.
    wake = _scalebot(karpenter, db, "wake")
    assert wake.returncode == 0, wake.stdout + wake.stderr
    awake = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")
    assert awake["spec"]["limits"] == LIMITS
    assert awake["spec"]["disruption"] == DISRUPTION
    annotations = awake["metadata"].get("annotations") or {}
    assert SAVED_ANNOTATION not in annotations and RESTORE_ANNOTATION not in annotations
    final = re.search(r"Completed in .*", wake.stdout)
    assert final, wake.stdout
    ready = re.search(r"(\d+)/(\d+) nodes Ready", final[0])
    provisioned_line = re.search(r"(\d+) nodes provisioned", final[0])
    assert ready and provisioned_line, final[0]
    reported = int(provisioned_line[1])
    assert ready[1] == ready[2] == str(reported) and reported >= 4, wake.stdout
    provisioned = _pool_nodes(admin_api, nodepool)
    assert len(provisioned) >= reported and not set(provisioned) & set(nodes)
    assert (
        waits.wait_for_deployment_available(admin_api, namespace, "web")["status"]["availableReplicas"] == 3
    )


def test_an_idle_nodepool_is_capped_by_zero_and_restored_by_wake(
    karpenter: ControlPlane, admin_api: Any, namespace: str, nodepool: str, tmp_path: Path
) -> None:
    """A NodePool with no nodes at night still goes to sleep (pods arriving later must not
    provision), and wake finds it asleep and restores it. A pod pending for a label no node of the
    NodePool carries does not hold the wait for nodes (it would wait its 15-minute ready timeout),
    and the wake neither follows nor names its Deployment: the sleep never touched it (no pod of it
    was on a node the sleep removed, and it was not scaled down)."""
    objects.create_deployment(admin_api, namespace, "elsewhere", 1, node_selector={"disk": "ssd"}, cpu="1")
    waits.wait_until(
        lambda: [p for p in rest.list_pods(admin_api, namespace) if p["status"].get("phase") == "Pending"],
        60,
        "a pod pending for a label the NodePool never sets",
    )
    db = tmp_path / "db.sqlite"
    zero = _scalebot(karpenter, db, "zero")
    assert zero.returncode == 0, zero.stdout + zero.stderr
    asleep = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")
    assert asleep["spec"]["limits"] == {"cpu": "0", "memory": "160Gi", "nodes": "0"}
    assert asleep["spec"]["disruption"]["budgets"] == [{"nodes": "0"}]
    assert orjson.loads(asleep["metadata"]["annotations"][RESTORE_ANNOTATION])["desired"] == 0

    wake = _scalebot(karpenter, db, "wake", "--workloads-return-timeout", "15s")
    assert wake.returncode == 0, wake.stdout + wake.stderr
    awake = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")
    assert awake["spec"]["limits"] == LIMITS
    assert awake["spec"]["disruption"] == DISRUPTION
    assert "0 nodes provisioned" in wake.stdout
    assert "pending" not in wake.stdout, wake.stdout
    assert "elsewhere" not in wake.stdout and "not back" not in wake.stdout, wake.stdout
    assert _claims(admin_api, nodepool) == [], "Karpenter had nothing to provision for that pod"


def test_a_static_nodepool_is_refused_and_left_alone_by_zero(
    karpenter: ControlPlane, admin_api: Any, nodepool: str, tmp_path: Path
) -> None:
    """A static NodePool (`spec.replicas`, alpha) keeps a fixed node count: it is no pool of
    scalebot's, so naming it is refused, and zero (which caps the dynamic NodePool beside it) leaves
    it as it was (capping it with a cpu limit would not even be accepted)."""
    dynamic = rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")
    static = f"{nodepool}-static"[:63]
    body = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": static},
        "spec": {"replicas": 0, "limits": {"nodes": "5"}, "template": dynamic["spec"]["template"]},
    }
    rest.create(admin_api, NODEPOOLS, body)
    try:
        before = rest.get(admin_api, f"{NODEPOOLS}/{static}")
        assert before["spec"]["replicas"] == 0
        db = tmp_path / "db.sqlite"
        refused = _scalebot(karpenter, db, "scale", static, "0", "--yes")
        assert refused.returncode != 0
        assert f'pool "{static}" not found in e2e; pools: {nodepool}' in refused.stderr, refused.stderr
        zero = _scalebot(karpenter, db, "zero")
        assert zero.returncode == 0, zero.stdout + zero.stderr
        assert static not in zero.stdout
        after = rest.get(admin_api, f"{NODEPOOLS}/{static}")
        assert after["spec"] == before["spec"]
        # (Karpenter adds its own nodepool-hash annotations in its own time.)
        assert not [k for k in after["metadata"].get("annotations") or {} if k.startswith("scalebot.io/")]
        assert rest.get(admin_api, f"{NODEPOOLS}/{nodepool}")["spec"]["limits"]["nodes"] == "0", (
            "the dynamic one sleeps"
        )
        wake = _scalebot(karpenter, db, "wake")
        assert wake.returncode == 0, wake.stdout + wake.stderr
    finally:
        rest.delete(admin_api, f"{NODEPOOLS}/{static}")

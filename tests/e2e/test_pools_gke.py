"""GKE node pools against a local STAND-IN of the GKE and Compute Engine REST APIs (not Google
Cloud), with Nodes on the real control plane.

The stand-in (`gke_standin.py`) is an HTTP server on 127.0.0.1 written from the published API
descriptions, started and stopped by the `gke` fixture; scalebot's real SDK clients
(google-cloud-container, google-cloud-compute) reach it through `gke_endpoint_url`, with
Application Default Credentials from a service account key file made by the stand-in (every API call
must carry a token signed with that key). It keeps kwok Nodes in step with its instances, in a
thread stopped by its fixture. scalebot runs in-process through `bot.runtime.wiring` with the `gke`
provider as its own ServiceAccount (Nodes, Pods, its records in ConfigMaps of `scalebot`).

Proves: scale 4 → 2 deletes exactly the drained nodes' instances through deleteInstances (the
group, asked for a smaller size, would have deleted the oldest); zero lowers the autoscaler's
minimum to 0 (maximum kept) and empties every group; wake restores autoscaling and sizes exactly
as recorded; scale N sets N over the zones; and the error paths (403, quota, an operation holding
the cluster, a node pool deleted underneath) end with the messages a user sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.pools.cloud import record_name
from localcluster import objects, rest, waits
from tests.e2e.gke_standin import GkeStandIn
from tests.e2e.support import StandInLoop, cloud_operations, pod_uids, run_on

pytestmark = pytest.mark.e2e

PROJECT = "scalebot-e2e"
LOCATION = "europe-west1"
ZONES = ("europe-west1-b", "europe-west1-c")


@pytest.fixture
def gke(
    admin_api: Any, unique_name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[GkeStandIn]:
    standin = GkeStandIn(admin_api, PROJECT, LOCATION, f"c{unique_name[-6:]}", ZONES)
    standin.start()
    try:
        for key in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG", "GOOGLE_API_USE_CLIENT_CERTIFICATE"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(standin.credentials_file(tmp_path)))
        monkeypatch.setenv("NO_GCE_CHECK", "True")  # never probe a metadata server
        yield standin
    finally:
        standin.cleanup()
        for name in list(standin.pools):
            rest.delete(admin_api, f"/api/v1/namespaces/scalebot/configmaps/{record_name('gke', name)}")
        standin.stop()


def _connect(gke: GkeStandIn, kubeconfig: Path, pools: str) -> wiring.ClusterHandle:
    return wiring.connect_cluster(
        "gke",
        kubeconfig=str(kubeconfig),
        provider="gke",
        options={
            "gke_project": PROJECT,
            "gke_location": LOCATION,
            "gke_cluster": gke.cluster,
            "node_pools": pools,
            "gke_endpoint_url": gke.url,
        },
    )


def _bounds(gke: GkeStandIn, pool: str) -> tuple[bool, int, int]:
    """(enabled, minNodeCount, maxNodeCount) as stored; proto3 JSON leaves out zeros."""
    raw = gke.autoscaling(pool)
    return bool(raw.get("enabled")), int(raw.get("minNodeCount", 0)), int(raw.get("maxNodeCount", 0))


def test_scale_down_deletes_the_drained_instances_and_zero_wake_scale_restore_exactly(
    gke: GkeStandIn,
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    web, batch = f"web-{unique_name[-6:]}", f"batch-{unique_name[-6:]}"
    gke.create_node_pool(web, 2, {"enabled": True, "minNodeCount": 1, "maxNodeCount": 5})
    gke.create_node_pool(batch, 1)
    waits.wait_for_nodes_ready(admin_api, gke.node_names())
    launched = gke.instances(web)
    assert len(launched) == 4
    # Pods on the OLDEST instance of each zone: scalebot drains the two newer ones (fewest pods),
    # while each group, asked for one instance less, would delete its oldest.
    oldest = [launched[0], launched[2]]
    for i, node in enumerate(oldest):
        objects.create_deployment(
            admin_api, namespace, f"keeper{i}", 1, node_selector={"kubernetes.io/hostname": node}, grace=1
        )
        waits.wait_for_deployment_available(admin_api, namespace, f"keeper{i}", timeout=60)
    keepers = {**pod_uids(admin_api, namespace, "keeper0"), **pod_uids(admin_api, namespace, "keeper1")}

    handle = _connect(gke, scalebot_kubeconfig, f"{web},{batch}")
    pools = {p.name: p for p in handle.pools.list_pools()}
    assert {n: (p.min_size, p.max_size, p.desired, len(p.ready_nodes)) for n, p in pools.items()} == {
        web: (2, 10, 4, 4),
        batch: (0, None, 2, 2),
    }

    loop = StandInLoop(gke, name="gke-standin", interval=0.3).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    try:
        scaled = run_on(ops, "gke", OpKind.SCALE, web, size=2)
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        assert gke.targets(web) == [1, 1]
        assert sorted(gke.instances(web)) == sorted(oldest), "exactly the drained nodes' instances went"
        assert not [r for r in gke.requests if r[1].endswith(":setSize")], "deleteInstances, not setSize"
        assert _bounds(gke, web) == (True, 1, 5)
        waits.wait_until(
            lambda: gke.node_names(web) == sorted(oldest), 30, "the drained instances' Nodes gone"
        )
        after = {**pod_uids(admin_api, namespace, "keeper0"), **pod_uids(admin_api, namespace, "keeper1")}
        assert after == keepers, "the nodes that stay were not disturbed"

        texts.clear()
        zero = run_on(ops, "gke", OpKind.ZERO)
        assert zero.state is OpState.SUCCEEDED, zero.error
        assert _bounds(gke, web) == (True, 0, 5)
        assert gke.targets(web) == [0, 0] and gke.targets(batch) == [0, 0]
        assert gke.instances(web) == [] and gke.instances(batch) == []
        waits.wait_until(lambda: not gke.node_names(), 30, "every Node gone")
        assert "Removed 4 nodes" in texts, texts

        texts.clear()
        woken = run_on(ops, "gke", OpKind.WAKE)
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert _bounds(gke, web) == (True, 1, 5)
        assert gke.targets(web) == [1, 1], "the size recorded by zero (after the scale to 2)"
        assert gke.targets(batch) == [1, 1]
        assert woken.summary is not None and woken.summary.nodes_ready == (4, 4)
        assert not set(gke.instances(web)) & set(launched), "new instances"
        progress = [t for t in texts if t.startswith(f"pool {batch}: node pool ")]
        assert progress and progress[-1] == f"pool {batch}: node pool RUNNING; 2 of 2 instances RUNNING", (
            texts
        )
        stored = rest.get(admin_api, f"/api/v1/namespaces/scalebot/configmaps/{record_name('gke', web)}")
        assert "scalebot.io/restore" not in (stored["metadata"].get("annotations") or {}), "cleared by wake"

        grown = run_on(ops, "gke", OpKind.SCALE, batch, size=4)
        assert grown.state is OpState.SUCCEEDED, grown.error
        assert gke.targets(batch) == [2, 2]
        waits.wait_until(lambda: len(gke.node_names(batch)) == 4, 30, "four batch Nodes")
    finally:
        ops.runner.stop()
        loop.stop()
    assert not gke.errors, gke.errors


def test_errors_reach_the_user_in_one_line_and_a_busy_cluster_is_waited_for(
    gke: GkeStandIn, admin_api: Any, scalebot_kubeconfig: Path, tmp_path: Path, unique_name: str
) -> None:
    pool = f"batch-{unique_name[-6:]}"
    gke.create_node_pool(pool, 1)
    gke.quota_nodes = 6
    handle = _connect(gke, scalebot_kubeconfig, "")
    loop = StandInLoop(gke, name="gke-standin", interval=0.3).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    try:
        # Another operation (an upgrade) holds the cluster for a few rounds: setSize is refused
        # FAILED_PRECONDITION, waited on and tried again.
        gke.hold_cluster(rounds=8)
        busy = run_on(ops, "gke", OpKind.SCALE, pool, size=4)
        assert busy.state is OpState.SUCCEEDED, busy.error
        assert gke.targets(pool) == [2, 2]
        assert len([r for r in gke.requests if r[1].endswith(":setSize")]) > 1, "refused, then repeated"

        gke.denied.add("setSize")
        denied = run_on(ops, "gke", OpKind.SCALE, pool, size=6)
        assert denied.state is OpState.FAILED
        assert (
            f"nodePools.setSize denied for GKE cluster {gke.cluster}: scalebot's Google service account "
            "needs container.clusters.update (PERMISSION_DENIED:"
        ) in (denied.error or ""), denied.error
        gke.denied.clear()

        quota = run_on(ops, "gke", OpKind.SCALE, pool, size=8)
        assert quota.state is OpState.FAILED
        assert "failed: RESOURCE_EXHAUSTED: Insufficient regional quota" in (quota.error or ""), quota.error
        assert "\n" not in (quota.error or "")
        assert gke.targets(pool) == [2, 2], "nothing changed"

        gke.delete_node_pool(pool)
        gone = ops.request(
            OperationRequest(kind=OpKind.SCALE, target=Target("gke", (pool,), 2), requested_by="cli:e2e")
        )
        assert not gone.ok
        assert gone.reply == f'pool "{pool}" not found in gke; pools: none', gone.reply
    finally:
        ops.runner.stop()
        loop.stop()
    assert not gke.errors, gke.errors

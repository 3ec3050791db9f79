"""EKS managed node groups against moto in server mode, with Nodes on the real control plane.

AWS is moto's server (a real HTTP endpoint on 127.0.0.1, started and stopped by the `aws` fixture),
reached by scalebot's boto3 clients through `aws_endpoint_url` with credentials and region from the
standard chain (environment variables here). moto does not connect a node group to an Auto Scaling
group or instances to Nodes: the stand-in of `eks_standin.py` does (a stand-in for EKS's push of
scalingConfig to the group, and for the kubelets / cloud node controller), in a thread stopped by
its fixture. scalebot runs in-process through `bot.runtime.wiring` with the `eks` provider as its own
ServiceAccount (Nodes, Pods, its records in ConfigMaps of the `scalebot` namespace).

Proves: scale 3 → 1 terminates exactly the drained nodes' instances (moto's group, asked for a
lower desired capacity, would have terminated the oldest ones instead), the pods of the node that
stays are untouched and the node group is at min 1 / max 5 / desired 1; zero of both node groups
lowers minSize, terminates every instance and leaves min 0 / desired 0 (max kept); wake restores
min/max/desired exactly as recorded and the thread follows the node groups and their instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from engine.domain.operation import OpKind, OpState
from engine.pools.eks import record_name
from localcluster import objects, rest, waits
from tests.aws_endpoint import REGION, aws_environment, moto_endpoint
from tests.e2e.eks_standin import EksStandIn, standin_loop
from tests.e2e.support import cloud_operations, pod_uids, run_on

pytestmark = pytest.mark.e2e


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    aws_environment(monkeypatch, tmp_path)
    with moto_endpoint() as url:
        yield url


@pytest.fixture
def eks(admin_api: Any, aws: str, unique_name: str) -> Iterator[EksStandIn]:
    standin = EksStandIn(admin_api, aws, f"c-{unique_name}")
    yield standin
    standin.cleanup()
    for name in standin.eks.list_nodegroups(clusterName=standin.cluster)["nodegroups"]:
        rest.delete(admin_api, f"/api/v1/namespaces/scalebot/configmaps/{record_name(name)}")


def test_scale_down_terminates_the_drained_instances_and_zero_wake_restore_exactly(
    eks: EksStandIn,
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    web, batch = f"web-{unique_name}"[:40], f"batch-{unique_name}"[:40]
    eks.create_nodegroup(web, 1, 5, 3)
    eks.create_nodegroup(batch, 2, 4, 2)
    launched = eks.instances(web)
    assert len(launched) == 3
    first = eks.node_name(web, launched[0])
    # The pods sit on the node of the oldest instance: scalebot drains the two others (fewest pods),
    # while the group itself, asked for a desired capacity of 1, would terminate the two oldest.
    objects.create_deployment(
        admin_api, namespace, "keeper", 2, node_selector={"kubernetes.io/hostname": first}, grace=1
    )
    waits.wait_for_deployment_available(admin_api, namespace, "keeper", timeout=60)
    keepers = pod_uids(admin_api, namespace, "keeper")

    handle = wiring.connect_cluster(
        "eks",
        kubeconfig=str(scalebot_kubeconfig),
        provider="eks",
        options={
            "eks_cluster": eks.cluster,
            "node_groups": f"{web},{batch}",
            "aws_region": REGION,
            "aws_endpoint_url": eks.endpoint,
        },
    )
    pools = {p.name: p for p in handle.pools.list_pools()}
    assert {n: (p.min_size, p.max_size, p.desired, len(p.ready_nodes)) for n, p in pools.items()} == {
        web: (1, 5, 3, 3),
        batch: (2, 4, 2, 2),
    }

    loop = standin_loop(eks).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    try:
        scaled = run_on(ops, "eks", OpKind.SCALE, web, size=1)
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        assert eks.scaling(web) == (1, 5, 1)
        # (With the stand-in's push of a lowered desired capacity, the group would settle at one
        # instance too: wait for that, then look at which one stayed.)
        waits.wait_until(lambda: len(eks.instances(web)) == 1, 30, "the group down to one instance")
        assert eks.group(web)["DesiredCapacity"] == 1
        assert eks.instances(web) == [launched[0]], "exactly the drained nodes' instances were terminated"
        waits.wait_until(lambda: eks.node_names(web) == [first], 30, "the drained instances' Nodes gone")
        assert pod_uids(admin_api, namespace, "keeper") == keepers, "the node that stays was not disturbed"
        assert eks.scaling(batch) == (2, 4, 2)

        texts.clear()
        zero = run_on(ops, "eks", OpKind.ZERO)
        assert zero.state is OpState.SUCCEEDED, zero.error
        assert eks.scaling(web) == (0, 5, 0)
        assert eks.scaling(batch) == (0, 4, 0)
        for name in (web, batch):
            group = eks.group(name)
            assert (group["MinSize"], group["DesiredCapacity"], group["Instances"]) == (0, 0, [])
        waits.wait_until(lambda: not eks.node_names(), 30, "every Node gone")
        assert "Removed 3 nodes" in texts, texts
        assert texts[-1].endswith(f"3 nodes removed; pools {batch} 2 → 0, {web} 1 → 0"), texts

        texts.clear()
        woken = run_on(ops, "eks", OpKind.WAKE)
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert eks.scaling(web) == (1, 5, 1), "the size recorded by zero (after the scale to 1)"
        assert eks.scaling(batch) == (2, 4, 2)
        assert woken.summary is not None and woken.summary.nodes_ready == (3, 3)
        assert len(eks.node_names(web)) == 1 and len(eks.node_names(batch)) == 2
        assert not set(eks.instances(web)) & set(launched), "new instances"
        progress = [t for t in texts if t.startswith(f"pool {batch}: node group ")]
        assert progress, texts
        assert progress[-1] == f"pool {batch}: node group ACTIVE; 2 of 2 instances InService", progress
        assert "3/3 nodes Ready" in texts, texts
        for name in (web, batch):
            stored = rest.get(admin_api, f"/api/v1/namespaces/scalebot/configmaps/{record_name(name)}")
            assert "scalebot.io/restore" not in (stored["metadata"].get("annotations") or {}), (
                "cleared by wake"
            )
    finally:
        ops.runner.stop()
        loop.stop()
    assert not eks.errors, eks.errors

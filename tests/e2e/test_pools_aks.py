"""AKS agent pools against a local STAND-IN of Azure Resource Manager (not Azure), with Nodes on
the real control plane.

The stand-in (`aks_standin.py`) is an HTTPS server on 127.0.0.1 written from the published API
description of Microsoft.ContainerService, started and stopped by the `aks` fixture; scalebot's real
SDK client (azure-mgmt-containerservice) reaches it through `aks_endpoint_url` with a fake credential
in place of DefaultAzureCredential (the stand-in checks its token on every call). It keeps kwok
Nodes in step with its machines, in a thread stopped by its fixture. scalebot runs in-process
through `bot.runtime.wiring` with the `aks` provider as its own ServiceAccount.

Proves: scale 3 → 1 deletes exactly the drained nodes' machines through deleteMachines (the pool,
asked for a lower count, would have deleted the oldest); zero of the user pools turns their
autoscaler off and deletes every machine, while a zero of some pools that would empty the System
pool is refused; wake restores counts and autoscaler exactly; scale N; a zero of every pool runs
both phases (a PodDisruptionBudget holds phase 1, phase 2 deletes) and then stops the managed
cluster, whose wake starts it first, with no request to the API server while it is stopped; and the
error paths (403 on a write and on the stop, quota, an operation in progress on a pool and on the
cluster, an agent pool deleted underneath) with the messages a user sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.pools.aks import AGENT_POOL_LABEL
from engine.pools.cloud import record_name
from localcluster import objects, rest, waits
from tests.e2e.aks_standin import AksStandIn, FakeCredential
from tests.e2e.support import StandInLoop, cloud_operations, run_on

pytestmark = pytest.mark.e2e

SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
GROUP = "rg-e2e"


@pytest.fixture
def aks(
    admin_api: Any, unique_name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[AksStandIn]:
    standin = AksStandIn(admin_api, SUBSCRIPTION, GROUP, f"c{unique_name[-6:]}")
    ca = standin.start(tmp_path)
    try:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
        monkeypatch.setattr("engine.pools.aks_azure.DefaultAzureCredential", FakeCredential)
        monkeypatch.setattr("engine.pools.aks_azure.DEFAULT_POLL_SECONDS", 0.2)
        yield standin
    finally:
        standin.cleanup()
        for name in list(standin.pools):
            rest.delete(admin_api, f"/api/v1/namespaces/scalebot/configmaps/{record_name('aks', name)}")
        standin.stop()


def _connect(aks: AksStandIn, kubeconfig: Path) -> wiring.ClusterHandle:
    options = {
        "aks_subscription": SUBSCRIPTION,
        "aks_resource_group": GROUP,
        "aks_cluster": aks.cluster,
        "aks_endpoint_url": aks.url,
    }
    return wiring.connect_cluster("aks", kubeconfig=str(kubeconfig), provider="aks", options=options)


def test_scale_down_deletes_the_drained_machines_and_zero_wake_scale_restore_exactly(
    aks: AksStandIn, admin_api: Any, scalebot_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    aks.create_agent_pool("system", 1, mode="System")
    aks.create_agent_pool("web", 3, autoscale=(True, 1, 5))
    aks.create_agent_pool("batch", 2)
    waits.wait_for_nodes_ready(admin_api, aks.node_names())
    first = aks.machines("web")[0]
    # The pods sit on the OLDEST machine: scalebot drains the two others, while the pool, asked
    # for a count of 1, would delete the two oldest.
    objects.create_deployment(
        admin_api, namespace, "keeper", 2, node_selector={"kubernetes.io/hostname": first}, grace=1
    )
    waits.wait_for_deployment_available(admin_api, namespace, "keeper", timeout=60)

    handle = _connect(aks, scalebot_kubeconfig)
    pools = {
        p.name: (p.min_size, p.max_size, p.desired, len(p.ready_nodes)) for p in handle.pools.list_pools()
    }
    assert pools == {"system": (1, None, 1, 1), "web": (1, 5, 3, 3), "batch": (0, None, 2, 2)}

    loop = StandInLoop(aks, name="aks-standin", interval=0.3).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    try:
        scaled = run_on(ops, "aks", OpKind.SCALE, "web", size=1)
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        assert aks.machines("web") == [first], "exactly the drained nodes' machines went"
        assert aks.count("web") == (1, (True, 1, 5))
        waits.wait_until(lambda: aks.node_names("web") == [first], 30, "the drained machines' Nodes gone")

        refused = run_on(ops, "aks", OpKind.ZERO, "system", "web")  # batch stays up: no stop
        assert refused.state is OpState.FAILED
        assert "agent pool system is a System pool: AKS keeps at least 1 node in it" in (refused.error or "")
        assert aks.count("system")[0] == 1 and aks.count("web")[0] == 1, "nothing removed"

        zero = run_on(ops, "aks", OpKind.ZERO, "web", "batch")
        assert zero.state is OpState.SUCCEEDED, zero.error
        assert aks.count("web") == (0, (False, 0, 0)), "the autoscaler off: AKS forces 0 only so"
        assert aks.count("batch") == (0, (False, 0, 0))
        waits.wait_until(lambda: not aks.node_names("web") and not aks.node_names("batch"), 30, "Nodes gone")
        assert aks.node_names("system"), "the System pool keeps its node"

        woken = run_on(ops, "aks", OpKind.WAKE)
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert aks.count("web") == (1, (True, 1, 5)), "count and autoscaler as recorded"
        assert aks.count("batch") == (2, (False, 0, 0))
        assert woken.summary is not None and woken.summary.nodes_ready == (4, 4), (
            "with the System pool's node"
        )

        grown = run_on(ops, "aks", OpKind.SCALE, "batch", size=4)
        assert grown.state is OpState.SUCCEEDED, grown.error
        waits.wait_until(lambda: len(aks.node_names("batch")) == 4, 30, "four batch Nodes")
    finally:
        ops.runner.stop()
        loop.stop()
    assert not aks.errors, aks.errors


def test_errors_reach_the_user_in_one_line_and_an_operation_in_progress_is_waited_for(
    aks: AksStandIn, admin_api: Any, scalebot_kubeconfig: Path, tmp_path: Path
) -> None:
    aks.create_agent_pool("batch", 1)
    aks.quota_nodes = 4
    handle = _connect(aks, scalebot_kubeconfig)
    loop = StandInLoop(aks, name="aks-standin", interval=0.5).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    try:
        # Another change in progress: scalebot's PUT is refused 409 OperationNotAllowed, then repeated.
        aks.hold("batch", rounds=8)
        busy = run_on(ops, "aks", OpKind.SCALE, "batch", size=3)
        assert busy.state is OpState.SUCCEEDED, busy.error
        assert aks.count("batch")[0] == 3
        puts = [r for r in aks.requests if r[0] == "PUT"]
        assert len(puts) > 1, "refused, then repeated"

        aks.denied.add("write")
        denied = run_on(ops, "aks", OpKind.SCALE, "batch", size=4)
        assert denied.state is OpState.FAILED
        assert (
            f"agentPools.createOrUpdate denied for AKS cluster {aks.cluster}: scalebot's identity needs "
            "Microsoft.ContainerService/managedClusters/agentPools/write (AuthorizationFailed:"
        ) in (denied.error or ""), denied.error
        aks.denied.clear()

        quota = run_on(ops, "aks", OpKind.SCALE, "batch", size=6)
        assert quota.state is OpState.FAILED
        assert "the Azure operation failed: QuotaExceeded: Operation could not be completed" in (
            quota.error or ""
        ), quota.error
        assert aks.count("batch")[0] == 3, "nothing changed"

        # A zero of every pool stops the cluster: without the stop action, it fails naming it.
        aks.denied.add("stop/action")
        unstoppable = run_on(ops, "aks", OpKind.ZERO)
        assert unstoppable.state is OpState.FAILED
        assert (
            f"managedClusters.stop denied for AKS cluster {aks.cluster}: scalebot's identity needs "
            "Microsoft.ContainerService/managedClusters/stop/action (AuthorizationFailed:"
        ) in (unstoppable.error or ""), unstoppable.error
        assert aks.power == "Running" and aks.count("batch")[0] == 3
        aks.denied.clear()

        aks.delete_agent_pool("batch")
        gone = ops.request(
            OperationRequest(kind=OpKind.SCALE, target=Target("aks", ("batch",), 2), requested_by="cli:e2e")
        )
        assert not gone.ok and gone.reply == 'pool "batch" not found in aks; pools: none', gone.reply
    finally:
        ops.runner.stop()
        loop.stop()
    assert not aks.errors, aks.errors


def test_a_zero_of_every_pool_drains_in_two_phases_then_stops_the_cluster_and_the_wake_starts_it(
    aks: AksStandIn, admin_api: Any, scalebot_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    aks.create_agent_pool("system", 1, mode="System")
    aks.create_agent_pool("web", 2, autoscale=(True, 2, 4))
    waits.wait_for_nodes_ready(admin_api, aks.node_names())
    # A budget no eviction can satisfy: phase 1 evicts nothing, phase 2 deletes the pods, and only
    # then is the cluster stopped.
    objects.create_deployment(
        admin_api, namespace, "held", 2, node_selector={AGENT_POOL_LABEL: "web"}, grace=1
    )
    objects.create_pdb(admin_api, namespace, "held", match_labels={"app": "held"}, min_available=2)
    waits.wait_for_deployment_available(admin_api, namespace, "held", timeout=60)

    handle = _connect(aks, scalebot_kubeconfig)
    # Every request scalebot sends to the cluster's API server, with the cluster's power then.
    rest_client = handle.api.api_client.rest_client
    send = rest_client.request
    while_stopped: list[str] = []

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if aks.power != "Running":
            while_stopped.append(f"{method} {url}")
        return send(method, url, *args, **kwargs)

    rest_client.request = request
    loop = StandInLoop(aks, name="aks-standin", interval=0.3).start()
    ops = cloud_operations(tmp_path / "db.sqlite", handle)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    try:
        zero = run_on(ops, "aks", OpKind.ZERO)
        assert zero.state is OpState.SUCCEEDED, zero.error
        assert zero.summary is not None and zero.summary.pods_force_deleted == 2, "phase 2, before the stop"
        stopped_at = next(i for i, t in enumerate(texts) if t.startswith("Stopped the cluster"))
        assert any(t.startswith("Phase 2: force-deleted 2 Pods") for t in texts[:stopped_at]), texts
        assert aks.power == "Stopped"
        assert aks.count("system") == (1, (False, 0, 0)) and aks.count("web") == (2, (True, 2, 4)), (
            "the agent pools keep their counts and autoscaler through the stop"
        )
        assert not [r for r in aks.requests if r[1].endswith("/deleteMachines")], (
            "no machine deleted one by one"
        )
        waits.wait_until(lambda: not aks.node_names(), 30, "a stopped cluster's Nodes gone")

        # While stopped: the status and the plans come from Azure alone, and only a whole wake is taken.
        assert {p.name: (p.desired, p.nodes) for p in ops.status("aks").pools} == {
            "system": (0, ()),
            "web": (0, ()),
        }
        partial = ops.request(
            OperationRequest(kind=OpKind.WAKE, target=Target("aks", ("web",)), requested_by="cli:e2e")
        )
        assert not partial.ok
        assert f"AKS cluster {aks.cluster} is Stopped: its API server cannot be reached" in partial.reply

        # Another operation holds the cluster: the start is refused 409, then repeated.
        aks.hold(None, rounds=4)
        woken = run_on(ops, "aks", OpKind.WAKE)
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert aks.power == "Running"
        starts = [r for r in aks.requests if r == ("POST", f"{_cluster_path(aks)}/start")]
        assert len(starts) > 1, "refused while another operation ran, then repeated"
        assert woken.summary is not None and woken.summary.nodes_ready == (3, 3)
        assert aks.count("web") == (2, (True, 2, 4))
        waits.wait_for_deployment_available(admin_api, namespace, "held", timeout=60)
    finally:
        rest_client.request = send
        ops.runner.stop()
        loop.stop()
    assert not while_stopped, f"the API server was asked while the cluster was stopped: {while_stopped}"
    assert not aks.errors, aks.errors


def _cluster_path(aks: AksStandIn) -> str:
    return (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.ContainerService/"
        f"managedClusters/{aks.cluster}"
    )

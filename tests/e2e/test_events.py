"""Kubernetes Events (engine.kube.events) against the real API server, as scalebot's ServiceAccount.

Covers: an event on a Node lands in "default" with the node's name as involvedObject UID and shows
in `kubectl describe node`; a repeat is aggregated into the same Event (count 2, one object); an
event on a Pod lands in the pod's namespace; an unreachable API server costs the caller nothing
(`record` returns at once, never raises, `flush` completes); `MemoryRecorder` keeps what it was
given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client as k8s

from engine.kube import events
from localcluster import objects, rest

pytestmark = pytest.mark.e2e


@pytest.fixture
def recorder(scalebot_api: Any) -> Iterator[events.EventRecorder]:
    rec = events.EventRecorder(scalebot_api, instance="scalebot-test-pod")
    yield rec
    rec.close()


def events_about(api: Any, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return rest.list_items(api, f"/api/v1/namespaces/{namespace}/events", field_selector=selector)


def test_node_events_are_aggregated_and_shown_by_kubectl_describe(
    recorder: events.EventRecorder,
    admin_api: Any,
    control_plane: Any,
    node_pool: Callable[..., list[str]],
) -> None:
    (node,) = node_pool(1)
    ref = events.ObjectRef.node(node)
    recorder.record(ref, reason=events.CORDONED, message="Cordoned by scalebot (operation op-1)")
    recorder.record(ref, reason=events.DRAINING, message="Draining Node (operation op-1)")
    recorder.record(ref, reason=events.CORDONED, message="Cordoned by scalebot (operation op-1)")
    assert recorder.flush(10)

    # The node controller records its own events on a new Node (RegisteredNode) at its own pace:
    # only scalebot's are this test's business.
    about = events_about(admin_api, "default", "Node", node)
    found = {e["reason"]: e for e in about if e.get("reportingComponent") == "scalebot"}
    assert set(found) == {events.CORDONED, events.DRAINING}, about
    cordoned = found[events.CORDONED]
    assert cordoned["count"] == 2, "the repeat was a PATCH of the first event, not a second event"
    assert cordoned["involvedObject"]["uid"] == node
    assert cordoned["type"] == "Normal"
    assert cordoned["source"] == {"component": "scalebot", "host": "scalebot-test-pod"}
    assert cordoned["reportingComponent"] == "scalebot"
    assert recorder.dropped == 0

    described = control_plane.kubectl("describe", "node", node, check=True).stdout
    assert "Cordoned by scalebot (operation op-1)" in described
    assert "Draining Node (operation op-1)" in described


def test_pod_events_land_in_the_pods_namespace(
    recorder: events.EventRecorder, admin_api: Any, namespace: str
) -> None:
    ref = events.ObjectRef.pod(namespace, "web-1", uid="0b5f3b8e-0000-4000-8000-000000000001")
    recorder.record(
        ref, reason=events.FORCE_DELETED, message="Deleted with grace 0 in phase 2", type="Warning"
    )
    assert recorder.flush(10)
    (event,) = events_about(admin_api, namespace, "Pod", "web-1")
    assert event["type"] == "Warning" and event["reason"] == events.FORCE_DELETED
    assert event["involvedObject"]["namespace"] == namespace


def test_an_unreachable_api_server_costs_the_caller_nothing(caplog: pytest.LogCaptureFixture) -> None:
    configuration = k8s.Configuration()
    configuration.host = "https://127.0.0.1:9"  # discard port: nothing listens
    configuration.retries = False
    api = k8s.ApiClient(configuration)
    rec = events.EventRecorder(api, request_timeout_seconds=1.0)
    try:
        started = time.monotonic()
        for i in range(20):
            rec.record(events.ObjectRef.node(f"node-{i}"), reason=events.DRAINED, message="Drain completed")
        assert time.monotonic() - started < 0.5, "record() only queues"
        assert rec.flush(30), "every event was tried and dropped"
    finally:
        rec.close()
        api.close()
    assert "not recorded" in caplog.text


def test_memory_recorder_keeps_events_in_order() -> None:
    memory = events.MemoryRecorder()
    memory.record(events.ObjectRef.node("n1"), reason=events.CORDONED, message="a")
    memory.record(events.ObjectRef.node("n1"), reason=events.DRAIN_FAILED, message="b", type="Warning")
    assert [(e.reason, e.type) for e in memory.events] == [
        (events.CORDONED, "Normal"),
        (events.DRAIN_FAILED, "Warning"),
    ]
    assert memory.flush(0) and events.NullRecorder().flush(0)


@pytest.fixture(scope="module")
def cluster_b(control_plane: Any) -> Iterator[Any]:
    """A second API server (about 6 s to start): "cluster B" of a two-cluster configuration."""
    from localcluster.controlplane import ControlPlane

    plane = ControlPlane(control_plane.cache_dir, echo=lambda _: None)
    with plane:
        yield plane


def test_an_operation_on_cluster_b_records_its_events_in_cluster_b(
    cluster_b: Any,
    admin_api: Any,
    scalebot_kubeconfig: Any,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Any,
) -> None:
    from bot.runtime.run import with_events
    from engine.domain.clock import SystemClock
    from engine.domain.operation import OperationRequest, OpKind, OpState, Target
    from engine.domain.settings import RunnerSettings
    from engine.kube.client import KubeClient
    from engine.operations.runner import ClusterHandle
    from engine.operations.service import new_operations
    from engine.pools.labels import LabelPoolProvider
    from engine.store.database import Store

    node_pool(1, name=f"{unique_name}-a")  # cluster A has nodes of its own: it is the first cluster
    b_admin = cluster_b.admin_api_client(pool_size=4)
    (node,) = objects.create_node_pool(b_admin, f"{unique_name}-b", 1)
    clients = [
        KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig)),
        KubeClient.from_config(kubeconfig=str(cluster_b.scalebot_kubeconfig)),
    ]
    handles = {
        name: with_events(ClusterHandle(name, kube, LabelPoolProvider(kube, kube.api_client)))
        for name, kube in zip(("a", "b"), clients, strict=True)
    }
    settings = RunnerSettings(settle=timedelta(seconds=0), workers=1)
    ops = new_operations(Store(tmp_path / "db.sqlite"), handles, {}, SystemClock(), settings=settings)
    try:
        asked = ops.request(
            OperationRequest(
                kind=OpKind.DRAIN, target=Target(cluster="b", nodes=(node,)), requested_by="cli:e2e"
            )
        )
        assert asked.ok and asked.operation is not None, asked.reply
        assert ops.runner.wait_idle(60), "the drain did not finish"
        done = ops.get(asked.operation.id)
        assert done is not None and done.state is OpState.SUCCEEDED, done and done.error
        for handle in handles.values():
            assert handle.events.flush(10)
        in_b = {
            e["reason"]
            for e in events_about(b_admin, "default", "Node", node)
            if e.get("reportingComponent") == "scalebot"
        }
        assert in_b == {events.CORDONED, events.DRAINING, events.DRAINED}
        assert events_about(admin_api, "default", "Node", node) == [], "nothing about B's node in A"
    finally:
        ops.runner.stop()
        for handle in handles.values():
            handle.events.close()
        for kube in clients:
            kube.close()
        b_admin.close()

"""A wake in waves on the real control plane, as scalebot's ServiceAccount.

Covers: three label pools put to sleep with their workloads and woken in three waves
(`wake_waves`: system, then data, then apps). The order is read from one watch on the test's nodes
and one on its Deployments (a watch delivers an object kind's changes in the order the API server
made them): each of wave 2's nodes is created only after every node of wave 1 was Ready, and wave
3's only after wave 2 ended. Wave 2 has a node whose re-created Node no kubelet (no kwok) makes
Ready: the wave times out, the thread names what it waited for (the pool, nodes Ready 1/2), wave 3
still wakes, and the wake ends failed naming the wave. The Deployments wake by their
`scalebot.io/wake-order` annotation (db 10, api 20, web without one, last), each order only after
the one before is available, and went to sleep the other way round. A wave that waits for its
workloads (`workloads_available`) holds the next wave until the Deployments its sleep drained are
back: one that cannot come back keeps it for the wave's whole timeout and is named.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from engine.domain.operation import OpKind, OpState, ProgressEvent
from engine.domain.wake_waves import WakeWaves, WaveSpec
from engine.kube.client import KubeClient
from engine.workloads.order import WAKE_ORDER_ANNOTATION
from localcluster import objects, rest, waits
from tests.e2e.support import FAST, deployment, group, operations, pools, request, run, with_workloads

pytestmark = pytest.mark.e2e

STALLED_TYPE = "kwok-stalled"
"""A `type` label kwok does not select: a Node re-created with it is never made Ready."""
DATA_WAVE_TIMEOUT_SECONDS = 8.0


@dataclass
class Seen:
    """One object kind's changes in the order a single watch delivered them."""

    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(type, name, object) per event."""
    errors: list[Exception] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[tuple[str, str, dict[str, Any]]]:
        with self.lock:
            return list(self.events)


class Watching:
    """Watches a list call in a thread (re-watching from the last resourceVersion) until stopped."""

    def __init__(self, list_call: Callable[..., Any], **kwargs: Any) -> None:
        self.seen = Seen()
        self._list_call = list_call
        self._kwargs = kwargs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-watch", daemon=True)

    def start(self) -> Watching:
        first = self._list_call(**self._kwargs)
        self._version = first.metadata.resource_version
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    self._list_call, resource_version=self._version, timeout_seconds=2, **self._kwargs
                )
                for event in stream:
                    raw = event["raw_object"]
                    self._version = raw["metadata"]["resourceVersion"]
                    with self.seen.lock:
                        self.seen.events.append((event["type"], raw["metadata"]["name"], raw))
                    if self._stop.is_set():
                        return
            except Exception as exc:  # kept for the test to report; the watch goes on
                self.seen.errors.append(exc)
                self._stop.wait(0.5)


@pytest.fixture
def watches() -> Iterator[list[Watching]]:
    started: list[Watching] = []
    yield started
    for w in started:
        w.stop()


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _first(
    events: list[tuple[str, str, dict[str, Any]]], test: Callable[[str, str, dict[str, Any]], bool]
) -> int:
    """The position of the first event that passes `test`; fails the test when there is none."""
    found = [i for i, (kind, name, obj) in enumerate(events) if test(kind, name, obj)]
    assert found, "no such event in the watch"
    return found[0]


def test_pools_wake_in_waves_and_workloads_by_their_wake_order(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
    watches: list[Watching],
) -> None:
    made = pools(node_pool, pool_key, unique_name, system=2, data=2, apps=2)
    system, data, apps = (f"{unique_name}-{p}" for p in ("system", "data", "apps"))
    stalled = made["data"][1]
    # No pod of the test lands there, before or after the wake (its re-created Node keeps the taint).
    taint = {"key": "scalebot.test/stalled", "value": "true", "effect": "NoSchedule"}
    rest.patch(admin_api, rest.node_path(stalled), {"spec": {"taints": [taint]}})
    for name, replicas, wake_order in (("db", 2, "10"), ("api", 2, "20"), ("web", 2, None)):
        objects.create_deployment(
            admin_api, namespace, name, replicas, node_selector=group(unique_name), grace=1
        )
        if wake_order is not None:
            path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
            rest.patch(admin_api, path, {"metadata": {"annotations": {WAKE_ORDER_ANNOTATION: wake_order}}})
    for name in ("db", "api", "web"):
        waits.wait_for_deployment_available(admin_api, namespace, name)
    # Its re-created Node will not be Ready: kwok no longer selects it (no kubelet behind it either).
    rest.patch(admin_api, rest.node_path(stalled), {"metadata": {"labels": {"type": STALLED_TYPE}}})

    waves = WakeWaves(
        (
            WaveSpec((system,)),
            WaveSpec((data,), timeout_seconds=DATA_WAVE_TIMEOUT_SECONDS),
            WaveSpec((apps,)),
        )
    )
    handle = with_workloads(kube, pool_key, namespace, wake_waves=waves)
    events: list[ProgressEvent] = []
    deployments = Watching(k8s.AppsV1Api(admin_api).list_namespaced_deployment, namespace=namespace).start()
    watches.append(deployments)
    with operations(kube, pool_key, tmp_path / "db.sqlite", handle=handle) as ops:
        ops.subscribe(events.append)
        slept = run(ops, request(OpKind.ZERO, workloads=True))
        assert slept.state is OpState.SUCCEEDED, slept.error
        at_sleep = deployments.seen.snapshot()
        asleep = [n for kind, n, d in at_sleep if kind == "MODIFIED" and d["spec"]["replicas"] == 0]
        assert list(dict.fromkeys(asleep)) == ["web", "api", "db"], "sleep goes the reverse of the wake order"

        nodes = Watching(
            k8s.CoreV1Api(admin_api).list_node, label_selector=f"scalebot.test/group={unique_name}"
        ).start()
        watches.append(nodes)
        woken = run(ops, request(OpKind.WAKE, workloads=True), timeout=300)
    assert not nodes.seen.errors and not deployments.seen.errors, (nodes.seen.errors, deployments.seen.errors)

    # The pools: wave 2 only after wave 1's nodes were Ready, wave 3 only after wave 2 ended.
    seen = nodes.seen.snapshot()
    added = {
        name: _first(seen, lambda k, n, o, name=name: k == "ADDED" and n == name)
        for name in [n for names in made.values() for n in names]
    }
    ready = {
        name: _first(seen, lambda k, n, o, name=name: n == name and _ready(o))
        for name in [*made["system"], made["data"][0], *made["apps"]]
    }
    assert not any(n == stalled and _ready(o) for _, n, o in seen), "the stalled node never became Ready"
    last_system_ready = max(ready[n] for n in made["system"])
    assert min(added[n] for n in made["data"]) > last_system_ready, "wave 2 began before wave 1 was Ready"
    assert min(added[n] for n in made["apps"]) > ready[made["data"][0]], "wave 3 began before wave 2 ended"
    waves_done = woken.progress.wake.waves
    assert [w.pools for w in waves_done] == [(system,), (data,), (apps,)]
    assert [w.outcome for w in waves_done] == ["ready", "timed_out", "ready"]
    data_wave = waves_done[1]
    assert data_wave.started_at is not None and waves_done[2].started_at is not None
    assert waves_done[2].started_at >= data_wave.started_at + _seconds(DATA_WAVE_TIMEOUT_SECONDS)
    assert data_wave.waited_for and data_wave.waited_for[0].startswith(
        f"pool {data}: nodes Ready 1/2 ({stalled}"
    )
    texts = [e.text for e in events if e.operation.id == woken.id]
    timed_out = [t for t in texts if t.startswith(f"Wave 2/3 ({data}) timed out after")]
    assert timed_out and f"pool {data}: nodes Ready 1/2" in timed_out[0], texts
    assert f"waking wave 3/3 ({apps})" in timed_out[0]
    assert woken.state is OpState.FAILED
    assert woken.error.startswith(f"Wave 2/3 ({data}) timed out: pool {data}: nodes Ready 1/2"), woken.error
    assert woken.summary is not None and woken.summary.nodes_ready == (5, 6)

    # The workloads: db (10), then api (20), then web (no order), each after the one before was back.
    after_sleep = deployments.seen.snapshot()[len(at_sleep) :]
    restored = {
        name: _first(after_sleep, lambda k, n, d, name=name: n == name and d["spec"]["replicas"] == 2)
        for name in ("db", "api", "web")
    }
    available = {
        name: _first(
            after_sleep,
            lambda k, n, d, name=name: n == name and (d.get("status") or {}).get("availableReplicas") == 2,
        )
        for name in ("db", "api")
    }
    assert restored["db"] < available["db"] < restored["api"] < available["api"] < restored["web"]
    assert any(t.startswith("Workloads of wake order 10: 1/1 workloads restored") for t in texts), texts
    assert woken.progress.workloads.orders_done == ("10", "20", "last")


def _seconds(value: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=value)


def test_a_wave_waits_for_the_workloads_its_sleep_displaced(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Wave 1 (`workloads_available`) has its node Ready at once, but one of the Deployments the
    sleep drained from it (dns) cannot come back: the wave waits its whole timeout, names dns and
    not web (which came back), and only then is wave 2 resized."""
    made = pools(node_pool, pool_key, unique_name, system=1, apps=1)
    system, apps = f"{unique_name}-system", f"{unique_name}-apps"
    on_system = {pool_key: system}
    for name in ("dns", "web"):
        deployment(admin_api, namespace, name, 1, node_selector=on_system)

    waves = WakeWaves(
        (
            WaveSpec((system,), timeout_seconds=DATA_WAVE_TIMEOUT_SECONDS, workloads_available=True),
            WaveSpec((apps,)),
        )
    )
    handle = with_workloads(kube, pool_key, namespace, wake_waves=waves)
    settings = replace(FAST, workloads_return_timeout=_seconds(2))
    events: list[ProgressEvent] = []
    with operations(kube, pool_key, tmp_path / "db.sqlite", settings, handle=handle) as ops:
        ops.subscribe(events.append)
        slept = run(ops, request(OpKind.ZERO))
        assert slept.state is OpState.SUCCEEDED, slept.error
        # While asleep dns is changed so that its pods fit no node (Recreate: no pod of the old
        # template stays to make it available): it cannot come back by itself.
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/dns"
        nowhere = {
            "spec": {
                "strategy": {"type": "Recreate", "rollingUpdate": None},
                "template": {"spec": {"nodeSelector": {"scalebot.test/nowhere": "true"}}},
            }
        }
        rest.patch(admin_api, path, nowhere)
        woken = run(ops, request(OpKind.WAKE))

    first, second = woken.progress.wake.waves
    assert (first.outcome, first.ready, first.wanted) == ("timed_out", 1, 1), "its node was Ready"
    assert len(first.waited_for) == 1 and first.waited_for[0].startswith(f"Deployment/{namespace}/dns: ")
    assert first.started_at is not None and second.started_at is not None
    assert second.started_at >= first.started_at + _seconds(DATA_WAVE_TIMEOUT_SECONDS), "wave 2 waited"
    assert second.outcome == "ready"
    texts = [e.text for e in events if e.operation.id == woken.id]
    assert any(
        t.startswith(f"Wave 1/2 ({system}) timed out after") and f"Deployment/{namespace}/dns" in t
        for t in texts
    ), texts
    assert woken.state is OpState.FAILED and woken.error.startswith(f"Wave 1/2 ({system}) timed out")
    assert (
        waits.wait_for_deployment_available(admin_api, namespace, "web")["status"]["availableReplicas"] == 1
    )
    assert sorted(n.name for n in kube.list_nodes() if n.name in made["system"] + made["apps"]) == sorted(
        made["system"] + made["apps"]
    )

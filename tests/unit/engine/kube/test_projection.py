"""engine.kube.projection, the one decode of a pod: what it reads of each field, the same PodInfo by
every road (a listed page, a watch event, one pod), the values a page shares kept each pod's own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from engine.domain.model import OwnerRef, PodInfo
from engine.domain.scheduling import PodScheduling, Toleration
from engine.kube import projection

FULL_POD: dict[str, Any] = {
    "metadata": {
        "name": "web-7d9f-x2",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "123",
        "generateName": "web-7d9f-",
        "creationTimestamp": "2026-03-27T19:00:05Z",
        "deletionTimestamp": "2026-03-27T19:10:05Z",
        "deletionGracePeriodSeconds": 30,
        "labels": {"app": "web", "pod-template-hash": "7d9f"},
        "annotations": {"kubernetes.io/config.mirror": "x", "example.com/safe-to-evict": "true"},
        "finalizers": ["example.com/hold"],
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-1",
             "controller": True, "blockOwnerDeletion": True},
        ],
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {
        "nodeName": "n1",
        "priorityClassName": "system-cluster-critical",
        "terminationGracePeriodSeconds": 45,
        "containers": [
            {"name": "a", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"name": "b", "image": "y", "resources": {"limits": {"cpu": "1"}}},
            {"name": "c", "image": "z"},
        ],
        "volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "tmp", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    },
    "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
}  # fmt: skip


def one(pod: dict[str, Any]) -> PodInfo:
    """The pod decoded on its own (`decode_pod`: no values shared with other pods)."""
    return projection.decode_pod(orjson.dumps(pod))


def page(*pods: dict[str, Any], token: str | None = None) -> bytes:
    meta = {"resourceVersion": "9", **({"continue": token} if token else {})}
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": list(pods)})


ODD_PODS: list[dict[str, Any]] = [
    {"metadata": {"name": "bare", "namespace": "ns", "uid": "u"}},
    {
        "metadata": {"name": "odd", "namespace": "ns", "uid": "u"},
        "spec": {"terminationGracePeriodSeconds": None},
    },
    {
        "metadata": {"name": "nulls", "namespace": "ns", "uid": "u", "labels": None},
        "spec": {"volumes": None},
    },
    {"metadata": None, "spec": None, "status": None},
    {
        # Every kind of volume the local-storage rule reads, and the scheduler's complaint.
        "metadata": {
            "name": "vols",
            "namespace": "ns",
            "uid": "u",
            "creationTimestamp": "2026-03-27T19:00:05Z",
        },
        "spec": {
            "volumes": [
                {"name": "host", "hostPath": {"path": "/var"}},
                {"name": "mem", "emptyDir": {"medium": "Memory"}},
                {"name": "disk", "emptyDir": {"medium": ""}},
                {"name": "nul", "emptyDir": None},
                {"hostPath": None},
                {"name": "cfg", "configMap": {"name": "c"}},
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes",
                },
            ],
        },
    },
    {
        "metadata": {"name": "unsched", "namespace": "ns", "uid": "u"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]},
    },
]


SCHEDULING_POD: dict[str, Any] = {
    # Every field the scheduler model reads.
    "metadata": {"name": "db-0", "namespace": "shop", "uid": "u", "labels": {"app": "db", "rev": "3"}},
    "spec": {
        "nodeName": "n1",
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": "1"}},
             "ports": [{"containerPort": 80, "hostPort": 8080},
                       {"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]},
            {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
             "ports": [{"containerPort": 9}]},
        ],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "2"}}},
        ],
        "overhead": {"cpu": "10m"},
        "nodeSelector": {"pool": "db"},
        "tolerations": [{"key": "k", "operator": "Exists"},
                        {"key": "d", "value": "x", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}],
                 "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
            ]}},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "rack"}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}},
                {"topologyKey": "rack", "labelSelector": {"matchLabels": {"app": "db"}}},
            ]},
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "db"}}, "matchLabelKeys": ["rev"], "minDomains": 2},
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
        ],
        "resourceClaims": [{"name": "gpu"}],
    },
}  # fmt: skip


def test_the_scheduling_fields_are_read_whole() -> None:
    (pod,) = projection.decode_pod_page(page(SCHEDULING_POD)).items
    asks = pod.scheduling
    # app 250m + 1000m + sidecar 100m = 1350m < init 2000m + sidecar 100m; + 10m overhead.
    assert asks.requests == {"cpu": 2110, "nvidia.com/gpu": 1, "memory": 1024**3}
    assert asks.host_ports == (("TCP", 8080), ("UDP", 53))
    assert asks.node_selector == {"pool": "db"} and len(asks.tolerations) == 2
    assert asks.node_affinity is not None and len(asks.node_affinity[0].requirements) == 2
    assert [t.topology_key for t in asks.anti_affinity] == ["kubernetes.io/hostname"]
    assert asks.anti_affinity[0].namespaces == frozenset({"shop"})
    assert asks.spread[0].selector.match_labels == {"app": "db", "rev": "3"}
    assert asks.unmodelled == (
        "required pod affinity",
        "pod anti-affinity on rack",
        "volume data may be bound to a zone",
        "volume scratch may be bound to a zone",
        "dynamic resource claims",
    )
    # What the drain reads stays the plain sum of the app containers' requests.
    assert (pod.cpu_request_milli, pod.memory_request_bytes) == (250, 0)


def test_replicas_sharing_scheduling_fields_keep_their_own_namespace_and_labels() -> None:
    other = {
        **SCHEDULING_POD,
        "metadata": {"name": "db-1", "namespace": "blog", "labels": {"app": "db", "rev": "4"}},
    }
    first, second = projection.decode_pod_page(page(SCHEDULING_POD, other)).items
    assert second.scheduling.anti_affinity[0].namespaces == frozenset({"blog"})
    assert second.scheduling.spread[0].selector.match_labels == {"app": "db", "rev": "4"}
    assert first.scheduling.spread[0].selector.match_labels == {"app": "db", "rev": "3"}
    assert second == one(other)


@pytest.mark.parametrize("pod", [FULL_POD, SCHEDULING_POD, *ODD_PODS])
def test_a_page_a_watch_event_and_one_pod_give_the_same_pod_info(pod: dict[str, Any]) -> None:
    (item,) = projection.decode_pod_page(page(pod)).items
    _, watched, _ = projection.decode_watch_event(orjson.dumps({"type": "ADDED", "object": pod}))
    assert item == watched == one(pod)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _bare(name: str, **fields: Any) -> PodInfo:
    return PodInfo(namespace="ns", name=name, uid="u", phase="Pending", **fields)


DECODED: list[tuple[dict[str, Any], PodInfo]] = [
    (
        FULL_POD,
        PodInfo(
            namespace="shop",
            name="web-7d9f-x2",
            uid="u-1",
            node_name="n1",
            phase="Running",
            labels={"app": "web", "pod-template-hash": "7d9f"},
            annotations={"kubernetes.io/config.mirror": "x", "example.com/safe-to-evict": "true"},
            controller=OwnerRef(kind="ReplicaSet", name="web-7d9f", uid="rs-1", api_version="apps/v1"),
            has_empty_dir=True,
            priority_class="system-cluster-critical",
            termination_grace_seconds=45,
            deletion_timestamp=_at("2026-03-27T19:10:05"),
            finalizers=("example.com/hold",),
            created_at=_at("2026-03-27T19:00:05"),
            cpu_request_milli=250,
            memory_request_bytes=64 * 2**20,
            local_volumes=("tmp",),
            scheduling=PodScheduling(
                requests={"cpu": 1250, "memory": 64 * 2**20},
                tolerations=(Toleration(key="k", operator="Exists"),),
            ),
        ),
    ),
    (ODD_PODS[0], _bare("bare")),
    (ODD_PODS[1], _bare("odd")),
    (ODD_PODS[2], _bare("nulls")),
    (ODD_PODS[3], PodInfo(namespace="", name="", uid="", phase="Pending")),
    (
        ODD_PODS[4],
        _bare(
            "vols",
            has_empty_dir=True,
            created_at=_at("2026-03-27T19:00:05"),
            unscheduled_reason="Unschedulable: 0/3 nodes",
            local_volumes=("host", "disk", "nul", ""),
        ),
    ),
    (ODD_PODS[5], _bare("unsched", unscheduled_reason="not scheduled")),
]


@pytest.mark.parametrize(("pod", "expected"), DECODED)
def test_a_pod_is_decoded_into_the_fields_scalebot_reads(pod: dict[str, Any], expected: PodInfo) -> None:
    (item,) = projection.decode_pod_page(page(pod)).items
    assert item == expected


def test_a_page_keeps_its_order_its_continue_token_and_resource_version() -> None:
    pods = [FULL_POD, *ODD_PODS]
    decoded = projection.decode_pod_page(page(*pods, token="tok-2"))
    # The resourceVersion is kept too: the drain's pod watch resumes from it.
    assert (decoded.continue_token, decoded.resource_version) == ("tok-2", "9")
    assert decoded.items == [one(p) for p in pods]
    assert projection.decode_pod_page(page()).items == []
    assert projection.decode_pod_page(page()).continue_token == ""


def test_pods_sharing_quantities_and_timestamps_each_get_their_own_values() -> None:
    # Parsed strings are reused within a page: the values must still be each pod's own.
    first = {**FULL_POD, "metadata": {**FULL_POD["metadata"], "creationTimestamp": "2026-03-27T19:00:05Z"}}
    second = {**FULL_POD, "metadata": {**FULL_POD["metadata"], "creationTimestamp": "2026-03-28T07:00:00Z"}}
    a, b, c = projection.decode_pod_page(page(first, second, first)).items
    assert a.created_at is not None and b.created_at is not None and a.created_at < b.created_at
    assert a == c == one(first) and b == one(second)
    assert a.cpu_request_milli == 250 and a.memory_request_bytes == 64 * 2**20


def test_json_nulls_read_as_missing_keys() -> None:
    # A null where a string is read gives "", not None, as a missing key does.
    pod: dict[str, Any] = {
        # JSON nulls where strings are read, a controller reference with holes.
        "metadata": {
            "name": None,
            "namespace": None,
            "uid": None,
            "finalizers": None,
            "ownerReferences": [{"controller": True, "kind": None, "name": "rs", "uid": None}],
        },
        "spec": {
            "nodeName": None,
            "priorityClassName": None,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"resources": None},
                {"resources": {"requests": None}},
                {"resources": {"requests": {"cpu": 2, "memory": 1024}}},
                {"resources": {"requests": {"cpu": "1.5", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "bogus", "memory": "1e3"}}},
            ],
        },
        "status": {"phase": None, "conditions": None},
    }
    (item,) = projection.decode_pod_page(page(pod)).items
    assert item == PodInfo(
        namespace="",
        name="",
        uid="",
        phase="Pending",
        controller=OwnerRef(kind="", name="rs", uid=""),
        termination_grace_seconds=0,
        cpu_request_milli=2000 + 1500,
        memory_request_bytes=1024 + 2**30 + 1000,
        scheduling=PodScheduling(requests={"cpu": 2000 + 1500, "memory": 1024 + 2**30 + 1000}),
    )


@pytest.mark.parametrize("data", [b"", b"{", b'{"items": 3}', b"[1, 2]", b'{"items": [{"spec": []}]}'])
def test_garbled_answers_raise_a_projection_error(data: bytes) -> None:
    with pytest.raises(projection.ProjectionError):
        projection.decode_pod_page(data)


@pytest.mark.parametrize("data", [b"", b"{", b"[1, 2]", b'{"spec": []}'])
def test_a_garbled_pod_raises_a_projection_error(data: bytes) -> None:
    with pytest.raises(projection.ProjectionError):
        projection.decode_pod(data)


def test_a_watch_event_carries_its_type_the_pod_and_its_resource_version() -> None:
    line = orjson.dumps({"type": "MODIFIED", "object": FULL_POD})
    kind, pod, raw = projection.decode_watch_event(line)
    assert kind == "MODIFIED"
    assert pod == one(FULL_POD)
    assert raw == {"resourceVersion": "123"}


def test_a_watch_error_event_is_the_status_whole() -> None:
    status = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old"}
    kind, pod, raw = projection.decode_watch_event(orjson.dumps({"type": "ERROR", "object": status}))
    assert (kind, pod, raw) == ("ERROR", None, status)


@pytest.mark.parametrize("line", [b"", b"{", b'{"type": "ADDED", "object": {"spec": []}}'])
def test_a_garbled_watch_line_raises_a_projection_error(line: bytes) -> None:
    with pytest.raises(projection.ProjectionError):
        projection.decode_watch_event(line)


def test_a_page_is_decoded_with_the_garbage_collector_paused() -> None:
    """A page's pods are all kept: a collection during the decode would only scan them."""
    import gc

    items = [{**FULL_POD, "metadata": {**FULL_POD["metadata"], "name": f"p-{i}"}} for i in range(2000)]
    page = orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items})
    collections: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(phase)

    gc.collect()
    gc.callbacks.append(seen)
    try:
        decoded = projection.decode_pod_page(page)
        # At most the one the first allocation after the decode sets off, when it is back on.
        assert len(collections) <= 1 and gc.isenabled()
        gc.disable()  # a caller's own pause is kept
        projection.decode_pod_page(page)
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.remove(seen)
    assert len(decoded.items) == 2000


class _Stream:
    """The open answer of a watch request, as urllib3 hands it to `PodWatch`."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, size: int, decode_content: bool = True) -> Any:
        for start in range(0, len(self.body), size):
            yield self.body[start : start + size]

    def shutdown(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def test_a_watch_parses_the_scheduling_fields_its_pods_share_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain's watch sees the replicas of a few workloads change again and again: their
    containers, selectors and tolerations are parsed once per watch, not once per event."""
    from engine.kube.watch import PodWatch

    parsed: list[object] = []
    real = projection.scheduling_fields

    def counting(*args: Any, **kwargs: Any) -> Any:
        parsed.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(projection, "scheduling_fields", counting)
    lines = [
        orjson.dumps(
            {
                "type": kind,
                "object": {
                    **FULL_POD,
                    "metadata": {**FULL_POD["metadata"], "name": f"web-{i}", "uid": f"u-{i}"},
                },
            }
        )
        for i in range(50)
        for kind in ("MODIFIED", "DELETED")
    ]
    events = list(PodWatch(_Stream(b"\n".join(lines) + b"\n"), keep=None))
    assert len(events) == 100 and len(parsed) == 1
    assert events[-1].pod == one(
        {**FULL_POD, "metadata": {**FULL_POD["metadata"], "name": "web-49", "uid": "u-49"}}
    )


def test_closing_a_watch_the_server_already_ended_is_quiet() -> None:
    """A watch whose answer ended (the server closed it; reading it to the end gave the connection
    back to urllib3's pool) and is closed afterwards by its feed: urllib3 refuses to shut the
    socket of a released connection (RuntimeError), which must not escape `close()`."""
    import http.server
    import threading

    import urllib3

    from engine.kube.watch import PodWatch

    line = orjson.dumps({"type": "MODIFIED", "object": FULL_POD}) + b"\n"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(line)))
            self.end_headers()
            self.wfile.write(line)

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pool = urllib3.PoolManager()
    try:
        answer = pool.request("GET", f"http://127.0.0.1:{server.server_port}/watch", preload_content=False)
        watch = PodWatch(answer, keep=None)
        assert [event.type for event in watch] == ["MODIFIED"]
        assert answer.connection is None  # released to the pool by the iteration
        with pytest.raises(RuntimeError):
            answer.shutdown()  # what urllib3 does with it: the case `close()` must absorb
        watch.close()
    finally:
        pool.clear()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_watch_cache_is_bounded() -> None:
    decoder = projection.WatchDecoder()
    for i in range(projection.WatchDecoder.MAX_CACHED + 10):
        pod = {**FULL_POD, "spec": {**FULL_POD["spec"], "nodeSelector": {"n": str(i)}}}
        _, decoded, _ = decoder.decode(orjson.dumps({"type": "ADDED", "object": pod}))
        assert decoded == one(pod)
    assert decoder._build.cached <= projection.WatchDecoder.MAX_CACHED + 1

"""engine.kube.projection: a pod decoded into the projected fields gives the same PodInfo."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from engine.domain.model import PodInfo
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


def page(*pods: dict[str, Any], token: str | None = None) -> bytes:
    meta = {"resourceVersion": "9", **({"continue": token} if token else {})}
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": list(pods)})


@pytest.mark.parametrize(
    "pod",
    [
        FULL_POD,
        {"metadata": {"name": "bare", "namespace": "ns", "uid": "u"}},
        {
            "metadata": {"name": "odd", "namespace": "ns", "uid": "u"},
            "spec": {"terminationGracePeriodSeconds": None},
        },
        {
            "metadata": {"name": "nulls", "namespace": "ns", "uid": "u", "labels": None},
            "spec": {"volumes": None},
        },
    ],
)
def test_projected_and_full_decoding_give_the_same_pod_info(pod: dict[str, Any]) -> None:
    projected = projection.decode_pod_list(page(pod))
    (item,) = projected["items"]
    assert PodInfo.from_raw(item) == PodInfo.from_raw(orjson.loads(orjson.dumps(pod)))


def test_the_rest_of_the_pod_is_dropped_and_the_continue_token_kept() -> None:
    projected = projection.decode_pod_list(page(FULL_POD, token="tok-2"))
    # The resourceVersion is kept too: the drain's pod watch resumes from it.
    assert projected["metadata"] == {"continue": "tok-2", "resourceVersion": "9"}
    (item,) = projected["items"]
    assert "managedFields" not in item["metadata"] and "tolerations" not in item["spec"]
    assert item["spec"]["volumes"] == [{"name": "cfg"}, {"name": "tmp", "emptyDir": {}}]
    assert projection.decode_pod_list(page())["items"] == []


@pytest.mark.parametrize("data", [b"", b"{", b'{"items": 3}', b"[1, 2]", b'{"items": [{"spec": []}]}'])
def test_garbled_answers_raise_a_projection_error(data: bytes) -> None:
    with pytest.raises(projection.ProjectionError):
        projection.decode_pod_list(data)


def test_a_watch_event_carries_its_type_and_the_projected_pod() -> None:
    line = orjson.dumps({"type": "MODIFIED", "object": FULL_POD})
    kind, raw = projection.decode_watch_event(line)
    assert kind == "MODIFIED"
    assert PodInfo.from_raw(raw) == PodInfo.from_raw(FULL_POD)
    assert "managedFields" not in raw["metadata"]


def test_a_watch_error_event_is_the_status_whole() -> None:
    status = {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old"}
    kind, raw = projection.decode_watch_event(orjson.dumps({"type": "ERROR", "object": status}))
    assert (kind, raw) == ("ERROR", status)


@pytest.mark.parametrize("line", [b"", b"{", b'{"type": "ADDED", "object": {"spec": []}}'])
def test_a_garbled_watch_line_raises_a_projection_error(line: bytes) -> None:
    with pytest.raises(projection.ProjectionError):
        projection.decode_watch_event(line)

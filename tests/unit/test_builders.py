"""The shared test builders (tests/builders.py): the typed values unit tests use are the adapter's
view of the raw objects the local control plane is given, with the defaults the unit tests rely on."""

from __future__ import annotations

import orjson

from engine.domain.model import DEFAULT_TERMINATION_GRACE_SECONDS, LabelSelector, NodeInfo, PdbInfo
from engine.kube import projection
from localcluster import bodies
from tests import builders


def test_a_raw_pod_is_the_control_planes_pod_body_bound_to_its_node() -> None:
    raw = builders.raw_pod("web-1", node="n1", labels={"app": "web"}, grace=5)
    assert raw["spec"] == bodies.pod_spec(node="n1", grace=5, cpu="0", memory="0")
    assert raw["metadata"]["namespace"] == "shop" and raw["metadata"]["uid"] == "uid-web-1"
    assert raw["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-5d8f",
            "uid": "rs-uid",
            "controller": True,
        }
    ]
    assert "nodeName" not in builders.raw_pod("pending", node="")["spec"]


def test_a_typed_pod_is_the_adapters_view_of_the_same_raw_pod() -> None:
    raw = builders.raw_pod("web-1", node="n1", labels={"app": "web"}, grace=5, phase="Pending")
    typed = builders.pod(
        "web-1", node="n1", labels={"app": "web"}, termination_grace_seconds=5, phase="Pending"
    )
    assert projection.decode_pod(orjson.dumps(raw)) == typed


def test_the_pod_defaults_unit_tests_rely_on() -> None:
    pod = builders.pod()
    assert (pod.namespace, pod.name, pod.uid, pod.node_name) == ("shop", "web-0", "uid-web-0", "w-1")
    assert pod.controller == builders.RS and not pod.controller.is_daemonset
    assert (pod.cpu_request_milli, pod.memory_request_bytes) == (0, 0)
    assert pod.termination_grace_seconds == DEFAULT_TERMINATION_GRACE_SECONDS
    assert (pod.phase, pod.labels, pod.annotations, pod.finalizers) == ("Running", {"app": "web-0"}, {}, ())
    assert not pod.has_empty_dir and pod.local_volumes == () and pod.deletion_timestamp is None
    assert builders.pod(controller=builders.DS).controller.is_daemonset  # type: ignore[union-attr]
    assert builders.pod(controller=None).controller is None
    assert [p.name for p in builders.pods_on("n2", 2)] == ["n2-p0", "n2-p1"]


def test_a_typed_node_is_the_adapters_view_of_the_control_planes_kwok_node() -> None:
    raw = builders.raw_node("n1", pool="web", unschedulable=True, ready="False")
    kwok = bodies.node_body("n1", "web")
    assert (raw["metadata"]["labels"], raw["metadata"]["annotations"]) == (
        kwok["metadata"]["labels"],
        kwok["metadata"]["annotations"],
    )
    assert raw["status"]["allocatable"] == kwok["status"]["allocatable"] and raw["spec"]["unschedulable"]
    node = builders.node("n1", pool="web", unschedulable=True, ready="False")
    assert NodeInfo.from_raw(raw) == node
    assert node.labels["scalebot.io/pool"] == "web" and node.is_cordoned and node.ready == "False"
    assert (node.cpu_allocatable_milli, node.memory_allocatable_bytes) == (4000, 16 * 1024**3)
    assert builders.node().ready == "True" and not builders.node().is_cordoned


def test_a_typed_pdb_is_the_adapters_view_of_the_control_planes_budget() -> None:
    raw = builders.raw_pdb("web", match_labels={"app": "web"}, min_available=2)
    assert raw["spec"] == bodies.pdb_body("web", match_labels={"app": "web"}, min_available=2)["spec"]
    pdb = builders.pdb("web", match_labels={"app": "web"})
    assert PdbInfo.from_raw(builders.raw_pdb("web", match_labels={"app": "web"})) == pdb
    assert pdb.selector == LabelSelector(match_labels={"app": "web"}) and pdb.is_observed
    assert pdb.selects(builders.pod("web-0", labels={"app": "web"}))
    assert not builders.pdb("all", match_labels={}).selects(builders.pod())

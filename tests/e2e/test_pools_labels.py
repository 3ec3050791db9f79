"""The label PoolProvider against the real control plane, as scalebot's ServiceAccount.

Proves: a pool is the nodes carrying the label; removing cordoned nodes deletes exactly those Node
objects and the pool reaches 0; the ConfigMap keeps the restore record (written once, never
overwritten) and the node templates (taken before the drain changed the nodes, never replaced);
`set_size` re-creates the same nodes, which kwok makes Ready, and refuses what a label cannot do.
Plus the pure parts (template cleaning, record JSON) without the cluster.

The provider runs as the scalebot identity; fixtures run as admin.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from engine.drain.passes import cordon_nodes
from engine.kube.client import KubeClient
from engine.pools.base import POOL_LABEL, RESTORE_ANNOTATION, PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.common import NodeRemovalError, RestoreRecordError, decode_restore, encode_restore
from engine.pools.labels import (
    NODE_TEMPLATES_EXTRA,
    LabelPoolProvider,
    configmap_name,
    node_template,
)
from engine.pools.victims import choose_victims
from localcluster import rest, waits

NodePool = Callable[..., list[str]]
NOW = datetime(2026, 3, 27, 19, 0, tzinfo=UTC)
SCALEBOT_SA = {"kind": "ServiceAccount", "name": "scalebot", "namespace": "scalebot"}
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


# --- fixtures ---------------------------------------------------------------------------------------


def _can(scalebot_api: Any, verb: str, resource: str, namespace: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}},
    }
    answer = rest.create(scalebot_api, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


@pytest.fixture
def label_pool_rbac(admin_api: Any, scalebot_api: Any, namespace: str) -> Iterator[None]:
    # TODO(rbac): merge into manifests/base/rbac.yaml, then delete this fixture:
    #   ClusterRole scalebot: nodes "create" (label pools wake by re-creating removed Nodes);
    #   Role in scalebot's namespace: configmaps get, list, create, patch (the pool's restore record).
    name = f"scalebot-e2e-{namespace}"[:63]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    cluster_role = {
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["create"]}],
    }
    role = {
        "metadata": {"name": name, "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}
        ],
    }
    rest.create(admin_api, f"{rbac}/clusterroles", cluster_role)
    rest.create(
        admin_api,
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [SCALEBOT_SA],
        },
    )
    rest.create(admin_api, f"{rbac}/namespaces/{namespace}/roles", role)
    rest.create(
        admin_api,
        f"{rbac}/namespaces/{namespace}/rolebindings",
        {
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [SCALEBOT_SA],
        },
    )
    waits.wait_until(
        lambda: (
            _can(scalebot_api, "create", "nodes") and _can(scalebot_api, "patch", "configmaps", namespace)
        ),
        30,
        "the temporary RBAC to reach the authorizer",
    )
    yield
    rest.delete(admin_api, f"{rbac}/clusterrolebindings/{name}")
    rest.delete(admin_api, f"{rbac}/clusterroles/{name}")


@pytest.fixture
def provider(kube: KubeClient, scalebot_api: Any, namespace: str, label_pool_rbac: None) -> LabelPoolProvider:
    return LabelPoolProvider(kube, scalebot_api, namespace=namespace)


def _record(desired: int, operation: str) -> RestoreRecord:
    return RestoreRecord(desired=desired, min_size=0, max_size=None, recorded_at=NOW, operation_id=operation)


def _pool_of(nodes: list[str]) -> str:
    return nodes[0].rsplit("-", 1)[0]


def _configmap(admin_api: Any, namespace: str, pool: str) -> dict[str, Any]:
    return rest.get(admin_api, f"/api/v1/namespaces/{namespace}/configmaps/{configmap_name(pool)}")


def _templates(admin_api: Any, namespace: str, pool: str) -> dict[str, Any]:
    data = _configmap(admin_api, namespace, pool).get("data") or {}
    return {k.removeprefix("node."): orjson.loads(v) for k, v in data.items()}


def _wait_ready(provider: LabelPoolProvider, pool: str, count: int) -> None:
    waits.wait_until(
        lambda: len(provider.get_pool(pool).ready_nodes) == count, 60, f"{count} Ready nodes in pool {pool}"
    )


# --- end to end ---------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_shrink_to_zero_and_wake_recreates_the_same_nodes(
    provider: LabelPoolProvider, kube: KubeClient, admin_api: Any, namespace: str, node_pool: NodePool
) -> None:
    nodes = node_pool(3, labels={"tier": "gpu"}, taints=[GPU_TAINT], cpu="8", memory="32Gi")
    pool = _pool_of(nodes)
    before = provider.get_pool(pool)
    assert (before.provider, before.desired, before.min_size, before.max_size) == ("labels", 3, 0, None)
    assert before.nodes == before.ready_nodes == tuple(nodes)
    assert before.restore is None

    assert provider.record_restore(pool, _record(3, "op-night-1")) is True
    assert provider.record_restore(pool, _record(1, "op-overwrite")) is False

    # Scale 3 -> 1: the engine picks the victims, cordons (and drains) them, then removes them.
    # A node a human cordoned counts as already emptying, so it goes first.
    cordon_nodes(kube, [nodes[1]], now=NOW)
    victims = choose_victims(kube.list_nodes(label_selector=f"{POOL_LABEL}={pool}"), [], 2, policy="Newest")
    assert victims[0] == nodes[1] and len(set(victims)) == 2
    provider.prepare_removal(pool, victims)
    cordon_nodes(kube, victims, now=NOW)
    provider.remove_nodes(pool, victims)
    (survivor,) = set(nodes) - set(victims)
    assert provider.get_pool(pool).nodes == (survivor,)
    assert all(rest.get_or_none(admin_api, rest.node_path(n)) is None for n in victims)
    provider.remove_nodes(pool, victims)  # repeat after a "crash": nothing left to do, no error

    cordon_nodes(kube, [survivor], now=NOW)
    provider.remove_nodes(pool, [survivor])

    empty = provider.get_pool(pool)
    assert (empty.desired, empty.nodes) == (0, ())
    assert pool in [p.name for p in provider.list_pools()]  # found through its ConfigMap
    assert empty.restore is not None
    assert (empty.restore.desired, empty.restore.operation_id) == (3, "op-night-1")
    assert sorted(empty.restore.extra[NODE_TEMPLATES_EXTRA]) == nodes

    # The templates hold the day-time shape: no cordon, no draining taint, no controller noise.
    for name, template in _templates(admin_api, namespace, pool).items():
        assert template["name"] == name
        assert template["labels"]["tier"] == "gpu" and template["labels"][POOL_LABEL] == pool
        assert template["taints"] == [GPU_TAINT]
        assert template["capacity"]["cpu"] == "8" and template["allocatable"]["memory"] == "32Gi"
        assert "node.alpha.kubernetes.io/ttl" not in template["annotations"]

    provider.set_size(pool, 3)
    _wait_ready(provider, pool, 3)
    provider.set_size(pool, 3)  # absolute and idempotent
    woken = provider.get_pool(pool)
    assert woken.nodes == tuple(nodes) and woken.desired == 3
    for name in nodes:
        node = rest.get(admin_api, rest.node_path(name))
        assert node["metadata"]["labels"]["tier"] == "gpu"
        assert not node["spec"].get("unschedulable")
        assert [t for t in node["spec"]["taints"] if t["key"] == "dedicated"] == [GPU_TAINT]
        assert not [t for t in node["spec"]["taints"] if t["key"].startswith("scalebot.io/")]
        assert node["status"]["allocatable"]["cpu"] == "8"

    provider.clear_restore(pool)
    cleared = provider.get_pool(pool)
    assert cleared.restore is None
    assert _templates(admin_api, namespace, pool) == {}
    cm = _configmap(admin_api, namespace, pool)
    assert any(f["manager"] == "scalebot" for f in cm["metadata"]["managedFields"])


@pytest.mark.e2e
def test_growth_beyond_recorded_nodes_and_shrink_by_set_size_are_refused(
    provider: LabelPoolProvider, kube: KubeClient, admin_api: Any, node_pool: NodePool
) -> None:
    nodes = node_pool(2)
    pool = _pool_of(nodes)
    provider.record_restore(pool, _record(2, "op-1"))
    cordon_nodes(kube, nodes[:1], now=NOW)
    provider.remove_nodes(pool, nodes[:1])

    with pytest.raises(PoolSizeError, match=r"come from the cluster.s autoscaler or node group"):
        provider.set_size(pool, 3)
    with pytest.raises(PoolSizeError, match=r"shrinks only by draining chosen nodes and removing them"):
        provider.set_size(pool, 0)
    assert provider.get_pool(pool).nodes == (nodes[1],)  # nothing created, nothing deleted
    provider.set_size(pool, 2)
    _wait_ready(provider, pool, 2)


@pytest.mark.e2e
def test_templates_are_taken_before_the_drain_and_never_replaced(
    provider: LabelPoolProvider, kube: KubeClient, admin_api: Any, namespace: str, node_pool: NodePool
) -> None:
    nodes = node_pool(2)
    pool = _pool_of(nodes)
    provider.prepare_removal(pool, [nodes[0]])  # no restore record yet: templates only
    rest.patch(admin_api, rest.node_path(nodes[0]), {"metadata": {"labels": {"changed": "at-night"}}})
    cordon_nodes(kube, [nodes[0]], now=NOW)
    provider.remove_nodes(pool, [nodes[0]])
    template = _templates(admin_api, namespace, pool)[nodes[0]]
    assert "changed" not in template["labels"]
    assert RESTORE_ANNOTATION not in (
        _configmap(admin_api, namespace, pool)["metadata"].get("annotations") or {}
    )

    assert provider.record_restore(pool, _record(2, "op-late")) is True
    record = provider.get_pool(pool).restore
    assert record is not None and sorted(record.extra[NODE_TEMPLATES_EXTRA]) == nodes


@pytest.mark.e2e
def test_removal_refuses_uncordoned_and_foreign_nodes(
    provider: LabelPoolProvider, kube: KubeClient, admin_api: Any, node_pool: NodePool
) -> None:
    mine = node_pool(2)
    other = node_pool(1)
    pool = _pool_of(mine)
    with pytest.raises(NodeRemovalError, match=f"not cordoned; drain them first: {mine[0]}"):
        provider.remove_nodes(pool, [mine[0]])
    cordon_nodes(kube, other, now=NOW)
    with pytest.raises(NodeRemovalError, match=f"node {other[0]} is not in label pool {pool}"):
        provider.remove_nodes(pool, other)
    assert all(rest.get_or_none(admin_api, rest.node_path(n)) is not None for n in [*mine, *other])
    provider.remove_nodes(pool, ["no-such-node"])  # already gone: nothing to do


@pytest.mark.e2e
def test_unknown_pool_names_the_known_ones(provider: LabelPoolProvider, node_pool: NodePool) -> None:
    pool = _pool_of(node_pool(1))
    with pytest.raises(PoolNotFound) as caught:
        provider.get_pool("nope")
    assert pool in caught.value.known
    with pytest.raises(PoolNotFound):
        provider.record_restore("nope", _record(1, "op"))
    with pytest.raises(PoolNotFound):
        provider.set_size("nope", 1)


# --- pure parts -----------------------------------------------------------------------------------------


def test_restore_record_round_trips_through_json() -> None:
    record = RestoreRecord(
        desired=12, min_size=1, max_size=20, recorded_at=NOW, operation_id="op-7", extra={"k": [1, "x"]}
    )
    text = encode_restore(record)
    assert orjson.loads(text) == {
        "desired": 12,
        "minSize": 1,
        "maxSize": 20,
        "recordedAt": "2026-03-27T19:00:00Z",
        "operationId": "op-7",
        "extra": {"k": [1, "x"]},
    }
    assert decode_restore(text, where="x") == record


@pytest.mark.parametrize(
    "text", ["", "[]", "{}", '{"desired": "many", "recordedAt": "2026-01-01T00:00:00Z"}']
)
def test_a_damaged_restore_record_is_reported_not_guessed(text: str) -> None:
    expected = re.escape("annotation scalebot.io/restore on ConfigMap ns/cm is not a scalebot restore record")
    with pytest.raises(RestoreRecordError, match=expected):
        decode_restore(text, where="ConfigMap ns/cm")


def test_node_template_drops_runtime_noise() -> None:
    raw = {
        "metadata": {
            "name": "n1",
            "labels": {"tier": "gpu"},
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "cluster.x-k8s.io/delete-machine": "t",
                "team": "ml",
            },
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                GPU_TAINT,
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "t"},
                {"key": "scalebot.io/draining", "value": "1", "effect": "NoSchedule"},
                {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"},
            ],
        },
        "status": {
            "capacity": {"cpu": "4"},
            "allocatable": {"cpu": "3900m"},
            "conditions": [{"type": "Ready"}],
        },
    }
    assert node_template(raw) == {
        "name": "n1",
        "labels": {"tier": "gpu"},
        "annotations": {"kwok.x-k8s.io/node": "fake", "team": "ml"},
        "taints": [GPU_TAINT],
        "capacity": {"cpu": "4"},
        "allocatable": {"cpu": "3900m"},
    }


def test_configmap_names_are_valid_for_any_label_value() -> None:
    assert configmap_name("dev-eu") == "scalebot-pool-dev-eu"
    odd = configmap_name("GPU_pool")
    assert odd.startswith("scalebot-pool-gpu-pool-") and odd == configmap_name("GPU_pool")
    assert configmap_name("GPU_pool") != configmap_name("gpu-pool")

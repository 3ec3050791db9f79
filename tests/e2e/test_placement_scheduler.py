"""The placement simulator agrees with the real kube-scheduler on random small clusters.

For each random cluster (kwok nodes with random sizes, zones, pools, taints, a cordoned node), pods
with random requests, selectors, node affinity, tolerations, hostname anti-affinity, zone spread and
host ports are created one at a time. Before each, the simulator is asked whether the pod fits next
to the pods the scheduler really bound (read back from the API server); then the scheduler decides.
Every pod the simulator says fits must be bound (none stays Pending): that is the direction
consolidation relies on. The other direction (the simulator says no, the scheduler binds) is the
simulator being conservative; it is counted and printed, not failed.

The nodes carry a taint of this test's own that only its pods tolerate, so pods of other tests
(DaemonSets included) never land on them and the scheduler sees exactly what the simulator sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from engine.domain.model import NodeInfo
from engine.planning import placement
from localcluster import bodies, objects, rest, waits
from tests.builders import typed_pod

pytestmark = pytest.mark.e2e

ZONE = placement.ZONE_KEY
Json = dict[str, Any]


def _scheduled(api: Any, namespace: str, name: str) -> Json | None:
    """The pod once the scheduler decided: bound (nodeName set) or marked Unschedulable."""
    pod = rest.get(api, rest.pod_path(namespace, name))
    if (pod.get("spec") or {}).get("nodeName"):
        return pod
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return pod
    return None


class RandomCluster:
    def __init__(self, rng: random.Random, group: str) -> None:
        self.rng = rng
        self.group = group
        self.own_taint = {"key": "scalebot.test/placement", "value": group, "effect": "NoSchedule"}

    def nodes(self) -> list[tuple[str, Json]]:
        rng = self.rng
        out = []
        for i in range(rng.randint(2, 4)):
            taints = [self.own_taint]
            if rng.random() < 0.25:
                taints.append({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})
            body = bodies.node_body(
                f"{self.group}-{i}",
                f"{self.group}-pool",
                labels={
                    "scalebot.test/group": self.group,
                    "scalebot.test/kind": rng.choice(("web", "batch")),
                    ZONE: rng.choice(("z1", "z2")),
                },
                taints=taints,
                cpu=rng.choice(("1", "2", "4")),
                memory=rng.choice(("2Gi", "4Gi", "8Gi")),
                pods=rng.choice((3, 5, 110)),
            )
            if rng.random() < 0.15:
                body["spec"]["unschedulable"] = True
            out.append((body["metadata"]["name"], body))
        return out

    def pod(self, name: str) -> Json:
        rng = self.rng
        app = rng.choice(("web", "db", "batch"))
        selector = {"scalebot.test/group": self.group}
        if rng.random() < 0.3:
            selector["scalebot.test/kind"] = rng.choice(("web", "batch"))
        tolerations = [
            {"key": self.own_taint["key"], "operator": "Equal", "value": self.group, "effect": "NoSchedule"}
        ]
        if rng.random() < 0.3:
            tolerations.append(
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
            )
        container: Json = {
            "name": "app",
            "image": bodies.PAUSE_IMAGE,
            "resources": {
                "requests": {
                    "cpu": rng.choice(("100m", "500m", "1", "1500m")),
                    "memory": rng.choice(("128Mi", "1Gi", "3Gi")),
                }
            },
        }
        if rng.random() < 0.2:
            container["ports"] = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]
        spec: Json = {
            "containers": [container],
            "nodeSelector": selector,
            "tolerations": tolerations,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
        }
        affinity: Json = {}
        if rng.random() < 0.2:
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}
                    ]
                }
            }
        if app == "db" and rng.random() < 0.6:
            affinity["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": placement.HOSTNAME_KEY}
                ]
            }
        if affinity:
            spec["affinity"] = affinity
        if app == "web" and rng.random() < 0.6:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": spec,
        }


@pytest.fixture
def own_nodes(admin_api: Any) -> Iterator[Callable[[list[tuple[str, Json]]], list[str]]]:
    created: list[str] = []

    def make(named_bodies: list[tuple[str, Json]]) -> list[str]:
        for name, body in named_bodies:
            rest.create(admin_api, rest.node_path(), body)
            created.append(name)
        waits.wait_for_nodes_ready(admin_api, [n for n, _ in named_bodies])
        return [n for n, _ in named_bodies]

    yield make
    objects.delete_nodes(admin_api, created)


@pytest.mark.parametrize("seed", [11, 23, 37, 41])
def test_every_pod_the_simulator_places_is_bound_by_kube_scheduler(
    admin_api: Any, namespace: str, unique_name: str, own_nodes: Callable[..., list[str]], seed: int
) -> None:
    rng = random.Random(seed)
    cluster = RandomCluster(rng, unique_name)
    names = own_nodes(cluster.nodes())
    agreed = bound = 0
    conservative: list[str] = []
    wrong: list[str] = []
    for i in range(14):
        body = cluster.pod(f"p{i:02d}")
        # Read as the scheduler sees them now: the node lifecycle controller lifts not-ready taints
        # some moments after a node turns Ready.
        nodes = [NodeInfo.from_raw(rest.get(admin_api, rest.node_path(n))) for n in names]
        residents = [
            typed_pod(p)
            for p in rest.list_items(admin_api, rest.pod_path(namespace))
            if (p.get("spec") or {}).get("nodeName")
        ]
        wanted = typed_pod({**body, "metadata": {**body["metadata"], "namespace": namespace}})
        predicted = placement.place(nodes, residents, [wanted])
        rest.create(admin_api, rest.pod_path(namespace), body)
        decided = waits.wait_until(
            lambda n=body["metadata"]["name"]: _scheduled(admin_api, namespace, n), 30, "a decision"
        )
        bound_to = decided["spec"].get("nodeName")
        bound += bool(bound_to)
        if predicted.fits and not bound_to:
            where = predicted.assignments[wanted.key]
            wrong.append(f"{wanted.key}: simulator placed it on {where}, scheduler did not bind it")
        elif not predicted.fits and bound_to:
            conservative.append(f"{wanted.key} → {bound_to}; simulator: {predicted.unplaced[wanted.key]}")
        else:
            agreed += 1
        if not bound_to:
            # A pending pod could be bound later and change what the next pods see: gone at once.
            rest.delete(admin_api, rest.pod_path(namespace, body["metadata"]["name"]), grace=0)
            waits.wait_for_pod_gone(admin_api, namespace, body["metadata"]["name"])
    print(
        f"seed {seed}: {bound}/14 bound; agreed {agreed}, safe misses {len(conservative)}, wrong {len(wrong)}"
    )
    for line in conservative:
        print(f"  conservative: {line}")
    assert agreed + len(conservative) + len(wrong) == 14
    # Each seed's cluster fills up: both answers are exercised, not only "fits".
    assert 0 < bound < 14
    assert wrong == []

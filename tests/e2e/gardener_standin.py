"""Test-only stand-in for Gardener: the Shoot API as a CRD, and a small controller for its workers.

Gardener's API server and controllers cannot run here (the module is not served), so the tests use
a CustomResourceDefinition `shoots.core.gardener.cloud/v1beta1` with the documented fields scalebot
reads and writes (spec.provider.workers[] with name/minimum/maximum/maxSurge/maxUnavailable/
machine/zones/systemComponents, spec.hibernation.enabled/schedules, status.hibernated/
lastOperation/conditions/observedGeneration) and Gardener's validation messages for
minimum/maximum as CEL rules; and `projects.core.gardener.cloud/v1beta1` (cluster-scoped) with the
one field scalebot reads, spec.namespace.

`ShootStandIn.reconcile()` does the part of Gardener scalebot relies on, nothing more: each worker
gets `minimum` kwok Nodes labelled `worker.gardener.cloud/pool=<worker>` (none while
`spec.hibernation.enabled`); surplus nodes go cordoned ones first (the ones scalebot drained, as the
cluster-autoscaler would remove them); `status.lastOperation` goes Processing while nodes change and
Succeeded when they match, `status.hibernated` follows. There is no cluster-autoscaler, no rolling
update and no control plane to scale down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from localcluster import bodies, objects, rest, waits
from tests.e2e.support import StandInLoop

GROUP = "core.gardener.cloud"
VERSION = "v1beta1"
POOL_LABEL = "worker.gardener.cloud/pool"
SHOOT_LABEL = "scalebot.test/shoot"
Json = dict[str, Any]

_INT_OR_STRING = {"x-kubernetes-int-or-string": True}
_WORKER = {
    "type": "object",
    "required": ["name", "machine"],
    "properties": {
        "name": {"type": "string"},
        "minimum": {"type": "integer", "format": "int32", "minimum": 0},
        "maximum": {"type": "integer", "format": "int32", "minimum": 0},
        "maxSurge": _INT_OR_STRING,
        "maxUnavailable": _INT_OR_STRING,
        "machine": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string"},
                "image": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                },
            },
        },
        "zones": {"type": "array", "items": {"type": "string"}},
        "systemComponents": {"type": "object", "properties": {"allow": {"type": "boolean"}}},
    },
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.minimum) || !has(self.maximum) || self.maximum >= self.minimum",
            "message": "maximum value must not be less than minimum value",
        },
    ],
}
_ONE_ACTIVE_SYSTEM_WORKER = (
    "!has(self.workers) || self.workers.exists(w, has(w.maximum) && w.maximum > 0 && "
    "(!has(w.systemComponents) || w.systemComponents.allow))"
)
_ONE_ACTIVE_MESSAGE = (
    "at least one active (workers[i].maximum > 0) worker pool with systemComponents.allow=true needed"
)
_CONDITION = {
    "type": "object",
    "properties": {
        k: {"type": "string"}
        for k in ("type", "status", "reason", "message", "lastTransitionTime", "lastUpdateTime")
    },
}
CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"shoots.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "shoots", "singular": "shoot", "kind": "Shoot", "listKind": "ShootList"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "kubernetes": {
                                        "type": "object",
                                        "properties": {"version": {"type": "string"}},
                                    },
                                    "provider": {
                                        "type": "object",
                                        "properties": {
                                            "type": {"type": "string"},
                                            "workers": {"type": "array", "maxItems": 50, "items": _WORKER},
                                        },
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": _ONE_ACTIVE_SYSTEM_WORKER,
                                                "message": _ONE_ACTIVE_MESSAGE,
                                            }
                                        ],
                                    },
                                    "hibernation": {
                                        "type": "object",
                                        "properties": {
                                            "enabled": {"type": "boolean"},
                                            "schedules": {
                                                "type": "array",
                                                "items": {
                                                    "type": "object",
                                                    "properties": {
                                                        "start": {"type": "string"},
                                                        "end": {"type": "string"},
                                                        "location": {"type": "string"},
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "hibernated": {"type": "boolean"},
                                    "observedGeneration": {"type": "integer"},
                                    "lastOperation": {
                                        "type": "object",
                                        "properties": {
                                            "type": {"type": "string"},
                                            "state": {"type": "string"},
                                            "progress": {"type": "integer"},
                                            "description": {"type": "string"},
                                            "lastUpdateTime": {"type": "string"},
                                        },
                                    },
                                    "conditions": {"type": "array", "items": _CONDITION},
                                    "constraints": {"type": "array", "items": _CONDITION},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def shoots_path(namespace: str, name: str | None = None, *, sub: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/shoots"
    base = base if name is None else f"{base}/{name}"
    return f"{base}/{sub}" if sub else base


def _project_crd() -> Json:
    """Gardener's Project (cluster-scoped), with the one field scalebot reads: spec.namespace.
    The Shoot CRD's frame with another scope, names and schema."""
    crd: Json = {**CRD, "metadata": {"name": f"projects.{GROUP}"}}
    names = {"plural": "projects", "singular": "project", "kind": "Project", "listKind": "ProjectList"}
    properties = {
        "spec": {"type": "object", "properties": {"namespace": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    }
    schema = {"openAPIV3Schema": {"type": "object", "properties": properties}}
    version = {**CRD["spec"]["versions"][0], "schema": schema}
    crd["spec"] = {**CRD["spec"], "scope": "Cluster", "names": names, "versions": [version]}
    return crd


PROJECT_CRD = _project_crd()


def install_crd(api: Any) -> None:
    """The Shoot and Project CRDs, once per control plane."""
    for crd, plural in ((CRD, "shoots"), (PROJECT_CRD, "projects")):
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        if rest.get_or_none(api, f"{crds}/{plural}.{GROUP}") is None:
            rest.create(api, crds, crd)
        waits.wait_until(
            lambda plural=plural: rest.get(api, f"/apis/{GROUP}/{VERSION}/{plural}"),
            60,
            f"{plural} served",
            ignore=(ApiException,),
        )


def worker(name: str, minimum: int, maximum: int, *, system: bool = True) -> Json:
    return {
        "name": name,
        "minimum": minimum,
        "maximum": maximum,
        "maxSurge": 1,
        "maxUnavailable": 0,
        "machine": {"type": "m5.large", "image": {"name": "gardenlinux", "version": "1592.1.0"}},
        "zones": ["eu-west-1a"],
        "systemComponents": {"allow": system},
    }


@dataclass
class ShootStandIn:
    garden: Any
    """The garden cluster's API (the Shoot)."""
    nodes_api: Any
    """The shoot cluster's API (its Nodes)."""
    namespace: str
    name: str
    errors: list[BaseException] = field(default_factory=list)

    def create(self, workers: list[Json], *, schedules: list[Json] | None = None) -> None:
        shoot = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Shoot",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "provider": {"type": "aws", "workers": workers},
                "hibernation": {"enabled": False, "schedules": schedules or []},
            },
        }
        rest.create(self.garden, shoots_path(self.namespace), shoot)
        self.reconcile()
        waits.wait_for_nodes_ready(self.nodes_api, self.node_names())

    def shoot(self) -> Json:
        return rest.get(self.garden, shoots_path(self.namespace, self.name))

    def node_names(self, pool: str | None = None) -> list[str]:
        selector = f"{SHOOT_LABEL}={self.name}" + (f",{POOL_LABEL}={pool}" if pool else "")
        return sorted(
            n["metadata"]["name"]
            for n in rest.list_items(self.nodes_api, rest.node_path(), label_selector=selector)
        )

    def reconcile(self) -> None:
        shoot = self.shoot()
        spec = shoot["spec"]
        hibernating = bool((spec.get("hibernation") or {}).get("enabled"))
        changed = False
        for w in spec["provider"]["workers"]:
            want = 0 if hibernating else int(w.get("minimum") or 0)
            changed |= self._converge(w["name"], want)
        status = {
            "observedGeneration": shoot["metadata"]["generation"],
            "hibernated": hibernating and not self.node_names(),
            "lastOperation": {
                "type": "Reconcile",
                "state": "Processing" if changed else "Succeeded",
                "progress": 50 if changed else 100,
                "description": "Waiting for workers to converge"
                if changed
                else "Shoot cluster has been reconciled",
                "lastUpdateTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
        previous = shoot.get("status") or {}
        if {k: previous.get(k) for k in ("observedGeneration", "hibernated")} != {
            k: status[k] for k in ("observedGeneration", "hibernated")
        } or (previous.get("lastOperation") or {}).get("state") != status["lastOperation"]["state"]:
            rest.patch(self.garden, shoots_path(self.namespace, self.name, sub="status"), {"status": status})

    def _converge(self, pool: str, want: int) -> bool:
        selector = f"{SHOOT_LABEL}={self.name},{POOL_LABEL}={pool}"
        nodes = rest.list_items(self.nodes_api, rest.node_path(), label_selector=selector)
        if len(nodes) > want:
            surplus = sorted(nodes, key=lambda n: (not n["spec"].get("unschedulable"), n["metadata"]["name"]))
            objects.delete_nodes(
                self.nodes_api, [n["metadata"]["name"] for n in surplus[: len(nodes) - want]]
            )
            return True
        if len(nodes) < want:
            taken = {n["metadata"]["name"] for n in nodes}
            names = [
                f"{self.name}-{pool}-{i}"
                for i in range(want * 2 + 1)
                if f"{self.name}-{pool}-{i}" not in taken
            ]
            labels = {SHOOT_LABEL: self.name, POOL_LABEL: pool}
            for name in names[: want - len(nodes)]:
                rest.create(self.nodes_api, rest.node_path(), bodies.node_body(name, pool, labels=labels))
            return True
        return False

    def cleanup(self) -> None:
        objects.delete_nodes(self.nodes_api, self.node_names())


def standin_loop(standin: ShootStandIn) -> StandInLoop:
    """The stand-in reconciled in a thread, as its controller would run."""
    return StandInLoop(standin, name="gardener-standin", interval=0.5)

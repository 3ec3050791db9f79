"""Test-only stand-in for Cluster API's MachineDeployment / MachineSet / Machine controllers.

The e2e cluster has the Cluster API CRDs but none of its controllers. This module creates the
objects (Cluster, MachineDeployment, MachineSet, Machines with kwok Nodes, as admin) and runs ONE
reconcile on demand, doing the part of Cluster API that scalebot relies on:

- the MachineDeployment's spec.replicas is copied to its single MachineSet;
- fewer replicas than live Machines: Machines are deleted in the MachineSet controller's order
  (engine-semantics §5.1: deleting 100 > `cluster.x-k8s.io/delete-machine` 80 > no nodeRef 50 >
  "Random" 20 for all, ties by Machine name) together with their Nodes, as the Machine
  controller does after its drain;
- more replicas than Machines: a Machine and a kwok Node of the same name are created and the
  Machine's status.nodeRef set;
- a deleted Machine (it carries Cluster API's finalizer) waits while it has
  `pre-drain.delete.hook.machine.cluster.x-k8s.io/*` annotations, as the Machine controller does;
  once none is left its Node is deleted and the finalizer removed. The stand-in does not drain
  (scalebot's own drain is what the tests observe).

Reconciling on demand (not in a thread) lets the tests observe the state between scalebot's
writes and the controller's reaction, which is where idempotency matters; `Reconciler` runs the
same reconcile in a loop for tests that drive whole operations.

`api` is the management cluster (Cluster API objects), `node_api` the workload cluster (Nodes);
they are the same API server unless a test runs two control planes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from localcluster import bodies, rest, waits
from tests.e2e.support import StandInLoop

GROUP = "cluster.x-k8s.io"
VERSION = "v1beta2"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
SET_LABEL = "cluster.x-k8s.io/set-name"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
MACHINE_FINALIZER = "machine.cluster.x-k8s.io"
PRE_DRAIN_HOOK_PREFIX = "pre-drain.delete.hook.machine.cluster.x-k8s.io"
Json = dict[str, Any]


def path(namespace: str, plural: str, name: str | None = None, *, sub: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
    base = base if name is None else f"{base}/{name}"
    return f"{base}/{sub}" if sub else base


def _machine_spec(cluster: str, name: str) -> Json:
    return {
        "clusterName": cluster,
        "bootstrap": {"dataSecretName": f"{name}-bootstrap"},
        "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "KwokMachine",
            "name": name,
        },
    }


@dataclass
class StandIn:
    api: Any
    namespace: str
    cluster: str
    deployment: str
    node_labels: dict[str, str]
    node_api: Any = None
    """The workload cluster's API (default: `api`, a self-hosted cluster)."""
    endpoint: tuple[str, int] = ("127.0.0.1", 6443)
    """The Cluster's spec.controlPlaneEndpoint: the workload API server its kubeconfig Secret names."""

    @property
    def nodes(self) -> Any:
        return self.node_api if self.node_api is not None else self.api

    @property
    def machineset(self) -> str:
        return f"{self.deployment}-ms"

    # -- setup ------------------------------------------------------------------------------------

    def create(self, replicas: int, *, annotations: dict[str, str] | None = None) -> list[str]:
        """Cluster (once), MachineDeployment, MachineSet, then reconcile: returns the node names."""
        if rest.get_or_none(self.api, path(self.namespace, "clusters", self.cluster)) is None:
            cluster = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Cluster",
                "metadata": {"name": self.cluster, "namespace": self.namespace},
                "spec": {"controlPlaneEndpoint": {"host": self.endpoint[0], "port": self.endpoint[1]}},
            }
            rest.create(self.api, path(self.namespace, "clusters"), cluster)
        labels = {DEPLOYMENT_LABEL: self.deployment, CLUSTER_LABEL: self.cluster}
        template = {"metadata": {"labels": labels}, "spec": _machine_spec(self.cluster, self.deployment)}
        md = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "MachineDeployment",
            "metadata": {
                "name": self.deployment,
                "namespace": self.namespace,
                "labels": {CLUSTER_LABEL: self.cluster},
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "clusterName": self.cluster,
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        }
        created = rest.create(self.api, path(self.namespace, "machinedeployments"), md)
        ms_labels = {**labels, SET_LABEL: self.machineset}
        ms = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "MachineSet",
            "metadata": {
                "name": self.machineset,
                "namespace": self.namespace,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "MachineDeployment",
                        "name": self.deployment,
                        "uid": created["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "clusterName": self.cluster,
                "replicas": replicas,
                "selector": {"matchLabels": ms_labels},
                "template": {**template, "metadata": {"labels": ms_labels}},
            },
        }
        rest.create(self.api, path(self.namespace, "machinesets"), ms)
        created_nodes = self.reconcile()
        waits.wait_for_nodes_ready(self.nodes, created_nodes)
        return created_nodes

    # -- the controller -----------------------------------------------------------------------------

    def machines(self) -> list[Json]:
        return rest.list_items(
            self.api, path(self.namespace, "machines"), label_selector=f"{DEPLOYMENT_LABEL}={self.deployment}"
        )

    def replicas(self) -> int:
        md = rest.get(self.api, path(self.namespace, "machinedeployments", self.deployment))
        return int(md["spec"].get("replicas") or 0)

    def reconcile(self) -> list[str]:
        """One reconcile; returns the names of the Nodes it created."""
        want = self.replicas()
        for machine in self.machines():
            if machine["metadata"].get("deletionTimestamp"):
                self._finish(machine)
        rest.patch(
            self.api, path(self.namespace, "machinesets", self.machineset), {"spec": {"replicas": want}}
        )
        live = [m for m in self.machines() if not m["metadata"].get("deletionTimestamp")]
        if len(live) > want:
            self._delete(sorted(live, key=_deletion_priority)[: len(live) - want])
            return []
        return [self._add(name) for name in self._free_names(want - len(live))]

    def cleanup(self) -> None:
        """Delete the Nodes behind the Machines (Nodes are cluster-scoped; the namespace goes anyway)."""
        for machine in self.machines():
            self._finish(machine, force=True)

    def _delete(self, machines: list[Json]) -> None:
        for machine in machines:
            name = machine["metadata"]["name"]
            rest.delete(self.api, path(self.namespace, "machines", name))
            self._finish(machine)

    def _finish(self, machine: Json, *, force: bool = False) -> None:
        """The Machine controller's deletion: wait for pre-drain hooks, then Node and finalizer go."""
        name = machine["metadata"]["name"]
        current = rest.get_or_none(self.api, path(self.namespace, "machines", name))
        if current is None:
            return
        hooks = [
            k for k in current["metadata"].get("annotations") or {} if k.startswith(PRE_DRAIN_HOOK_PREFIX)
        ]
        if hooks and not force:
            # Cluster API v1beta2 says so on the Machine's Deleting condition.
            deleting = {
                "type": "Deleting",
                "status": "True",
                "reason": "WaitingForPreDrainHook",
                "message": f"Waiting for pre-drain hooks to succeed (hooks: {', '.join(sorted(hooks))})",
                "lastTransitionTime": "2026-03-27T19:00:00Z",
            }
            present = list((current.get("status") or {}).get("conditions") or ())
            conditions = [c for c in present if c["type"] != "Deleting"]
            if deleting not in present:
                rest.patch(
                    self.api,
                    path(self.namespace, "machines", name, sub="status"),
                    {"status": {"conditions": [*conditions, deleting]}},
                )
            return
        node = ((current.get("status") or {}).get("nodeRef") or {}).get("name")
        if node:
            rest.delete(self.nodes, rest.node_path(node))
        try:
            rest.patch(self.api, path(self.namespace, "machines", name), {"metadata": {"finalizers": None}})
        except ApiException as exc:
            if exc.status != 404:  # finished meanwhile by the other reconcile
                raise
        rest.delete(self.api, path(self.namespace, "machines", name))

    def _free_names(self, count: int) -> list[str]:
        taken = {m["metadata"]["name"] for m in self.machines()}
        names: list[str] = []
        index = 0
        while len(names) < count:
            candidate = f"{self.deployment}-{index}"
            if candidate not in taken:
                names.append(candidate)
            index += 1
        return names

    def _add(self, name: str) -> str:
        labels = {DEPLOYMENT_LABEL: self.deployment, CLUSTER_LABEL: self.cluster, SET_LABEL: self.machineset}
        machine = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "finalizers": [MACHINE_FINALIZER],
            },
            "spec": _machine_spec(self.cluster, name),
        }
        rest.create(self.api, path(self.namespace, "machines"), machine)
        node = bodies.node_body(name, self.deployment, labels=self.node_labels)
        rest.create(self.nodes, rest.node_path(), node)
        rest.patch(
            self.api,
            path(self.namespace, "machines", name, sub="status"),
            {"status": {"nodeRef": {"name": name}}},
        )
        return name


class Reconciler:
    """Reconciles stand-ins every `interval` seconds in a thread until stopped (a fixture stops it)."""

    def __init__(self, standins: list[StandIn], interval: float = 0.5) -> None:
        self.standins = standins
        self.errors: list[Exception] = []
        self._loop = StandInLoop(self, name="capi-standin", interval=interval)

    def start(self) -> Reconciler:
        self._loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop()

    def reconcile(self) -> None:
        for standin in self.standins:
            try:
                standin.reconcile()
            except Exception as exc:  # kept for the test to report; the next stand-in still runs
                self.errors.append(exc)


def _deletion_priority(machine: Json) -> tuple[bool, bool, bool, str]:
    """Sort key, most deletable first: the MachineSet controller's order with policy Random."""
    meta = machine["metadata"]
    return (
        not meta.get("deletionTimestamp"),
        DELETE_MACHINE not in (meta.get("annotations") or {}),
        bool(((machine.get("status") or {}).get("nodeRef") or {}).get("name")),
        meta["name"],
    )

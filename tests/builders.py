"""One way to make a pod, a node, a PodDisruptionBudget and a workload owner in tests.

The raw API objects are the local control plane's own bodies (`localcluster.bodies`, what the e2e
tests post), completed with what the API server adds (namespace, uid, resourceVersion, status).
The typed values the engine shares (`PodInfo`, `NodeInfo`, `PdbInfo`) are the adapter's projection
of those raw objects (a pod through `engine.kube.projection`, the one decode production lists and
watches pods with; nodes and budgets through their `from_raw`), with the fields a test sets on top:
a unit test and the control plane speak of the same pod, and a change to the shared body shows in
both.

Defaults: namespace "shop", node "w-1", uid "uid-<name>", a ReplicaSet as the pod's controller,
no resource requests (a test that packs nodes says what its pods ask for).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from engine.domain.model import NodeInfo, OwnerRef, PdbInfo, PodInfo
from engine.kube import projection
from localcluster import bodies

Json = dict[str, Any]

NAMESPACE = "shop"
NODE = "w-1"
POOL = "pool-a"
RS = OwnerRef(kind="ReplicaSet", name="web-5d8f", uid="rs-uid", api_version="apps/v1")
DS = OwnerRef(kind="DaemonSet", name="fluentd", uid="ds-uid", api_version="apps/v1")


def owner(kind: str, name: str, *, api_version: str = "apps/v1") -> OwnerRef:
    """A controller of `kind` (ReplicaSet, StatefulSet, Job, ...) whose uid is "uid-<name>"."""
    return OwnerRef(kind=kind, name=name, uid=f"uid-{name}", api_version=api_version)


# --------------------------------------------------------------------------------------------------
# Pods


def raw_pod(
    name: str = "web-0",
    *,
    namespace: str = NAMESPACE,
    node: str = NODE,
    controller: OwnerRef | None = RS,
    uid: str | None = None,
    phase: str = "Running",
    cpu: str = "0",
    memory: str = "0",
    **body: Any,
) -> Json:
    """A pod as the API server returns it: the control plane's pod body (`bodies.pod_body`, whose
    keyword arguments `body` takes) bound to `node` ("" for an unscheduled pod), with its uid,
    namespace, controller reference and phase."""
    references = []
    if (ref := controller) is not None:
        references.append(bodies.owner_reference(ref.kind, ref.name, ref.uid, api_version=ref.api_version))
    raw = bodies.pod_body(
        name,
        node=node or None,
        namespace=namespace,
        owner_references=references,
        cpu=cpu,
        memory=memory,
        **body,
    )
    raw["metadata"]["uid"] = f"uid-{name}" if uid is None else uid
    raw["status"] = {"phase": phase}
    return raw


def typed_pod(raw: Mapping[str, Any]) -> PodInfo:
    """The adapter's view of a raw pod: its JSON decoded by the projection production reads pods
    with (`engine.kube.projection`)."""
    return projection.decode_pod(orjson.dumps(raw))


def pod(name: str = "web-0", *, node: str = NODE, **fields: Any) -> PodInfo:
    """The adapter's view of `raw_pod(name, node=node)`, then `fields` (any `PodInfo` field:
    namespace, controller, uid, phase, labels, deletion_timestamp, ...) set on it."""
    return dataclasses.replace(typed_pod(raw_pod(name, node=node)), **fields)


def pods_on(node: str, count: int, **fields: Any) -> list[PodInfo]:
    """`count` pods named `<node>-p<i>` on `node`."""
    return [pod(f"{node}-p{i}", node=node, **fields) for i in range(count)]


# --------------------------------------------------------------------------------------------------
# Nodes


def raw_node(
    name: str = NODE,
    *,
    pool: str = POOL,
    uid: str | None = None,
    ready: str = "True",
    unschedulable: bool = False,
    taints: Sequence[Mapping[str, str]] = (),
    resource_version: str | None = None,
    **body: Any,
) -> Json:
    """A node as the API server returns it: the control plane's kwok node (`bodies.node_body`, whose
    keyword arguments `body` takes) in `pool`, with its uid, its Ready condition ("" for none
    yet), and cordoned when `unschedulable`."""
    raw = bodies.node_body(name, pool, taints=taints, **body)
    raw["metadata"]["uid"] = f"uid-{name}" if uid is None else uid
    if resource_version is not None:
        raw["metadata"]["resourceVersion"] = resource_version
    if unschedulable:
        raw["spec"]["unschedulable"] = True
    if ready:
        raw["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    return raw


def node(
    name: str = NODE,
    *,
    pool: str = POOL,
    ready: str = "True",
    unschedulable: bool = False,
    **fields: Any,
) -> NodeInfo:
    """The adapter's view of `raw_node` with the same arguments, then `fields` (any `NodeInfo`
    field) set on it."""
    raw = raw_node(name, pool=pool, ready=ready, unschedulable=unschedulable)
    return dataclasses.replace(NodeInfo.from_raw(raw), **fields)


# --------------------------------------------------------------------------------------------------
# Disruption budgets


def raw_pdb(
    name: str,
    *,
    namespace: str = NAMESPACE,
    match_labels: Mapping[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    disruptions_allowed: int = 0,
    observed: bool = True,
) -> Json:
    """A policy/v1 PodDisruptionBudget as the API server returns it: the control plane's body
    (`bodies.pdb_body`; maxUnavailable 1 unless a bound is given) and the disruption controller's
    status (observed or not yet)."""
    if min_available is None and max_unavailable is None:
        max_unavailable = 1
    raw = bodies.pdb_body(
        name, match_labels=match_labels, min_available=min_available, max_unavailable=max_unavailable
    )
    raw["metadata"].update({"namespace": namespace, "uid": f"uid-{name}", "generation": 1})
    raw["status"] = {"disruptionsAllowed": disruptions_allowed, "observedGeneration": 1 if observed else 0}
    return raw


def pdb(name: str, *, namespace: str = NAMESPACE, match_labels: Mapping[str, str], **fields: Any) -> PdbInfo:
    """The adapter's view of `raw_pdb` over `match_labels` ({}: the empty selector, which selects
    nothing), then `fields` (any `PdbInfo` field) set on it."""
    return dataclasses.replace(
        PdbInfo.from_raw(raw_pdb(name, namespace=namespace, match_labels=match_labels)), **fields
    )

"""The raw JSON bodies of the objects tests put into the local control plane: pure, no I/O.

One definition per kind: a kwok Node in a pool, a pause-container pod spec and pod, a mirror-like
static pod, a Namespace, the Deployment / StatefulSet / DaemonSet of pause pods, a policy/v1
PodDisruptionBudget. `objects` posts them; unit tests use them as the raw API objects the adapter
reads (tests/builders.py), so a unit test and the control plane see the same shape.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

Json = dict[str, Any]

KWOK_NODE_LABEL = "type"
KWOK_NODE_LABEL_VALUE = "kwok"
POOL_LABEL = "scalebot.io/pool"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# kwok's documented taint for fake nodes; workloads built here tolerate it in case a test sets it.
KWOK_TAINT_KEY = "kwok.x-k8s.io/node"
TEST_FINALIZER = "scalebot.test/hold"
SAFE_TO_EVICT_FALSE = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
UNREACHABLE_LABEL_VALUE = "kwok-unreachable"


# --------------------------------------------------------------------------------------------------
# Nodes


def node_body(
    name: str,
    pool: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
) -> Json:
    """A kwok Node: selected by kwok (type=kwok), in pool `pool`, with realistic allocatable.

    kwok's node-initialize stage keeps capacity/allocatable given at creation (otherwise it reports
    1k CPUs and 1M pods, which would let the scheduler pack everything onto one node).
    """
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"kwok-{cpu}cpu-{memory.lower()}",
        **(labels or {}),
        KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
        POOL_LABEL: pool,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {"capacity": resources, "allocatable": resources},
    }


# --------------------------------------------------------------------------------------------------
# Namespaces


def namespace_body(name: str, *, labels: Mapping[str, str] | None = None) -> Json:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}


# --------------------------------------------------------------------------------------------------
# Pods


def _tolerations(extra: Sequence[Mapping[str, Any]]) -> list[Json]:
    return [{"key": KWOK_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}, *(dict(t) for t in extra)]


def pod_spec(
    *,
    node: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    grace: int = 30,
    empty_dir: bool = False,
    priority_class: str | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    cpu: str = "100m",
    memory: str = "64Mi",
) -> Json:
    """A pause-container pod spec. kwok never runs the image; the requests steer the scheduler."""
    container: Json = {
        "name": "app",
        "image": PAUSE_IMAGE,
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    spec: Json = {
        "containers": [container],
        "terminationGracePeriodSeconds": grace,
        "tolerations": _tolerations(tolerations),
        # No token volume: smaller objects, and nothing here talks to the API server.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if node is not None:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if priority_class:
        spec["priorityClassName"] = priority_class
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return spec


def pod_body(
    name: str,
    *,
    node: str | None,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    finalizers: Sequence[str] = (),
    owner_references: Sequence[Mapping[str, Any]] = (),
    **spec: Any,
) -> Json:
    """A pause pod with spec.nodeName set when `node` is given (no scheduler involved), by default
    without an owner; `spec` goes to `pod_spec` (grace, empty_dir, priority_class, tolerations, cpu,
    memory). `namespace` goes into the metadata only when given (a POST takes it from the path)."""
    metadata: Json = {"name": name, "labels": dict(labels or {"app": name})}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if owner_references:
        metadata["ownerReferences"] = [dict(o) for o in owner_references]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec(node=node, **spec)}


def mirror_like_pod_body(namespace: str, name: str, *, node: str, node_uid: str, grace: int = 30) -> Json:
    """A pod that looks like a kubelet's static-pod mirror: config.mirror annotation, owned by its Node.

    The ServiceAccount admission plugin refuses mirror pods that reference a ServiceAccount, so none
    is set (and no token is mounted).
    """
    config_hash = hashlib.sha256(f"{namespace}/{name}@{node}".encode()).hexdigest()[:32]
    metadata: Json = {
        "name": name,
        "labels": {"app": name, "tier": "control-plane"},
        "annotations": {
            MIRROR_ANNOTATION: config_hash,
            "kubernetes.io/config.hash": config_hash,
            "kubernetes.io/config.source": "file",
        },
        "ownerReferences": [owner_reference("Node", node, node_uid, api_version="v1")],
    }
    spec = pod_spec(node=node, grace=grace)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def owner_reference(kind: str, name: str, uid: str, *, api_version: str = "apps/v1") -> Json:
    """A controller ownerReference, as a ReplicaSet, StatefulSet, DaemonSet or Job sets on its pods
    (and a Node on its mirror pods)."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


# --------------------------------------------------------------------------------------------------
# Workloads and budgets


def _template(
    selector: Mapping[str, str],
    labels: Mapping[str, str] | None,
    pod_annotations: Mapping[str, str] | None,
    spec: Json,
) -> Json:
    metadata: Json = {"labels": {**(labels or {}), **selector}}
    if pod_annotations:
        metadata["annotations"] = dict(pod_annotations)
    return {"metadata": metadata, "spec": spec}


def deployment_body(
    name: str,
    replicas: int,
    *,
    labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> Json:
    """A Deployment of pause pods (selector app=<name>, plus `labels` on the pods); `spec` goes to
    `pod_spec` (node_selector, grace, empty_dir, priority_class, tolerations, cpu, memory)."""
    fields = {"revisionHistoryLimit": 2}
    return _replicated(
        "Deployment", name, replicas, labels=labels, pod_annotations=pod_annotations, pod=spec, fields=fields
    )


def statefulset_body(
    name: str,
    replicas: int,
    *,
    labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    parallel: bool = True,
    **spec: Any,
) -> Json:
    """A StatefulSet of pause pods; Parallel pod management unless parallel=False (faster to create);
    `spec` goes to `pod_spec` (node_selector, grace, tolerations, cpu, memory)."""
    fields = {"serviceName": name, "podManagementPolicy": "Parallel" if parallel else "OrderedReady"}
    return _replicated(
        "StatefulSet", name, replicas, labels=labels, pod_annotations=pod_annotations, pod=spec, fields=fields
    )


def _replicated(
    kind: str,
    name: str,
    replicas: int,
    *,
    labels: Mapping[str, str] | None,
    pod_annotations: Mapping[str, str] | None,
    pod: Mapping[str, Any],
    fields: Mapping[str, Any],
) -> Json:
    """An apps/v1 controller of `replicas` pause pods selected by app=<name>: `fields` are its kind's
    own spec fields, `pod` goes to `pod_spec`."""
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {**(labels or {}), **selector}},
        "spec": {
            "replicas": replicas,
            **fields,
            "selector": {"matchLabels": selector},
            "template": _template(selector, labels, pod_annotations, pod_spec(**pod)),
        },
    }


def daemonset_body(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    cpu: str = "10m",
    memory: str = "16Mi",
    **spec: Any,
) -> Json:
    """A DaemonSet that tolerates every taint (as node agents do); scope it with node_selector. `spec`
    goes to `pod_spec` (node_selector, grace)."""
    selector = {"app": name}
    pod = pod_spec(cpu=cpu, memory=memory, **spec)
    pod["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": {**(labels or {}), **selector}},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": _template(selector, labels, None, pod),
        },
    }


def pdb_body(
    name: str,
    *,
    match_labels: Mapping[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> Json:
    """A policy/v1 PodDisruptionBudget; give exactly one of min_available / max_unavailable."""
    if (min_available is None) == (max_unavailable is None):
        raise ValueError("give exactly one of min_available and max_unavailable")
    spec: Json = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    else:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }

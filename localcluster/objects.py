"""Creating and removing the test cluster's objects, as the admin: node pools, cordons, namespaces,
bare and special pods (held by a finalizer, marked safe-to-evict=false or do-not-disrupt, mirror-like),
workloads of pause pods and PDBs.

The bodies come from `bodies`; this module only posts them (bulk creation through a bounded thread
pool) and waits where its callers always need it (nodes Ready, the namespace's ServiceAccount).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from localcluster.bodies import (
    DO_NOT_DISRUPT,
    SAFE_TO_EVICT_FALSE,
    TEST_FINALIZER,
    daemonset_body,
    deployment_body,
    mirror_like_pod_body,
    namespace_body,
    node_body,
    pdb_body,
    pod_body,
    statefulset_body,
)
from localcluster.rest import (
    DEFAULT_WORKERS,
    Json,
    create,
    delete,
    get,
    node_path,
    patch,
    pod_path,
    quoted,
    run_parallel,
)
from localcluster.waits import wait_for_default_serviceaccount, wait_for_nodes_ready

# --------------------------------------------------------------------------------------------------
# Nodes


def create_node_pool(
    api: Any,
    name: str,
    count: int,
    *,
    wait_ready: bool = True,
    timeout: float = 120.0,
    workers: int = DEFAULT_WORKERS,
    **node: Any,
) -> list[str]:
    """Create `count` kwok nodes named `<name>-<i>` in pool `name`; return their names.

    Nodes carry `type=kwok` (kwok manages them), `scalebot.io/pool=<name>` and the annotation
    `kwok.x-k8s.io/node: fake`; `node` is `bodies.node_body`'s (labels, taints, cpu, memory, pods).
    Waits for kwok to make them Ready unless wait_ready=False.
    """
    width = max(2, len(str(count - 1)))
    names = [f"{name}-{i:0{width}d}" for i in range(count)]
    bodies = [node_body(n, name, **node) for n in names]
    run_parallel(lambda body: create(api, node_path(), body), bodies, workers=workers)
    if wait_ready:
        wait_for_nodes_ready(api, names, timeout=timeout)
    return names


def delete_nodes(api: Any, names: Iterable[str], *, workers: int = DEFAULT_WORKERS) -> None:
    run_parallel(lambda n: delete(api, node_path(n)), list(names), workers=workers)


def cordon(api: Any, node: str, *, unschedulable: bool = True) -> Json:
    return patch(api, node_path(node), {"spec": {"unschedulable": unschedulable}})


def uncordon(api: Any, node: str) -> Json:
    return cordon(api, node, unschedulable=False)


# --------------------------------------------------------------------------------------------------
# Namespaces


def create_namespace(
    api: Any,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    wait_for_serviceaccount: bool = True,
    timeout: float = 30.0,
) -> Json:
    ns = create(api, "/api/v1/namespaces", namespace_body(name, labels=labels))
    if wait_for_serviceaccount:
        wait_for_default_serviceaccount(api, name, timeout=timeout)
    return ns


def delete_namespace(api: Any, name: str) -> None:
    delete(api, f"/api/v1/namespaces/{quoted(name)}", propagation="Background")


# --------------------------------------------------------------------------------------------------
# Pods


def create_bare_pod(api: Any, namespace: str, name: str, *, node: str, **options: Any) -> Json:
    """A pod with spec.nodeName set (no scheduler involved) and, by default, no owner; `options` are
    `bodies.pod_body`'s (labels, annotations, finalizers, owner_references, grace, empty_dir,
    priority_class, tolerations)."""
    return create(api, pod_path(namespace), pod_body(name, node=node, **options))


def create_pod_with_finalizer(
    api: Any, namespace: str, name: str, *, node: str, finalizer: str = TEST_FINALIZER, **kwargs: Any
) -> Json:
    """A bare pod that, once deleted, stays Terminating until `remove_finalizers` is called."""
    return create_bare_pod(api, namespace, name, node=node, finalizers=[finalizer], **kwargs)


def create_pod_safe_to_evict_false(api: Any, namespace: str, name: str, *, node: str, **kwargs: Any) -> Json:
    """A bare pod annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false."""
    return create_bare_pod(api, namespace, name, node=node, annotations=SAFE_TO_EVICT_FALSE, **kwargs)


def create_pod_do_not_disrupt(api: Any, namespace: str, name: str, *, node: str, **kwargs: Any) -> Json:
    """A bare pod annotated karpenter.sh/do-not-disrupt=true."""
    return create_bare_pod(api, namespace, name, node=node, annotations=DO_NOT_DISRUPT, **kwargs)


def create_mirror_like_pod(api: Any, namespace: str, name: str, *, node: str, grace: int = 30) -> Json:
    """A pod that looks like a kubelet's static-pod mirror, owned by its Node (see `mirror_like_pod_body`)."""
    node_obj = get(api, node_path(node))
    body = mirror_like_pod_body(namespace, name, node=node, node_uid=node_obj["metadata"]["uid"], grace=grace)
    return create(api, pod_path(namespace), body)


def remove_finalizers(api: Any, namespace: str, name: str) -> Json | None:
    """Drop all finalizers from a pod (lets kwok's delete stage remove a Terminating pod)."""
    try:
        return patch(api, pod_path(namespace, name), {"metadata": {"finalizers": None}})
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


# --------------------------------------------------------------------------------------------------
# Workloads and budgets


def create_deployment(api: Any, namespace: str, name: str, replicas: int, **options: Any) -> Json:
    """A Deployment of pause pods (selector app=<name>); `options` are `bodies.deployment_body`'s
    (node_selector, labels, pod_annotations, grace, empty_dir, priority_class, tolerations, cpu,
    memory)."""
    body = deployment_body(name, replicas, **options)
    return create(api, f"/apis/apps/v1/namespaces/{quoted(namespace)}/deployments", body)


def create_statefulset(api: Any, namespace: str, name: str, replicas: int, **options: Any) -> Json:
    """A StatefulSet of pause pods, Parallel unless parallel=False; `options` are
    `bodies.statefulset_body`'s (node_selector, labels, pod_annotations, grace, tolerations,
    parallel, cpu, memory)."""
    body = statefulset_body(name, replicas, **options)
    return create(api, f"/apis/apps/v1/namespaces/{quoted(namespace)}/statefulsets", body)


def create_daemonset(api: Any, namespace: str, name: str, **options: Any) -> Json:
    """A DaemonSet that tolerates every taint (as node agents do); `options` are
    `bodies.daemonset_body`'s (node_selector, labels, grace, cpu, memory)."""
    body = daemonset_body(name, **options)
    return create(api, f"/apis/apps/v1/namespaces/{quoted(namespace)}/daemonsets", body)


def create_pdb(api: Any, namespace: str, name: str, **options: Any) -> Json:
    """A policy/v1 PodDisruptionBudget; `options` are `bodies.pdb_body`'s (match_labels and exactly
    one of min_available / max_unavailable)."""
    body = pdb_body(name, **options)
    return create(api, f"/apis/policy/v1/namespaces/{quoted(namespace)}/poddisruptionbudgets", body)

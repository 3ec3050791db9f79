"""Fault injection on the local control plane: a node whose kubelet vanished (and its return), and a
namespace held in Terminating.

Each fault is made the way the real components would leave the cluster (the node lifecycle
controller's conditions, the namespace controller's ordered deletion) and each has its undo
(`restore_node`, `release_namespace`) that waits until the cluster is whole again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from localcluster.bodies import (
    KWOK_NODE_LABEL,
    KWOK_NODE_LABEL_VALUE,
    TEST_FINALIZER,
    UNREACHABLE_LABEL_VALUE,
)
from localcluster.objects import remove_finalizers
from localcluster.rest import (
    Json,
    create,
    delete,
    get,
    get_or_none,
    list_pods,
    node_path,
    patch,
    pod_path,
    pods_on_node,
    quoted,
    run_parallel,
)
from localcluster.waits import pod_is_running, wait_for_nodes_ready, wait_until

_ORIGINAL_TYPE_ANNOTATION = "scalebot.test/original-type"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------------
# Unreachable nodes


def _set_node_type(api: Any, node: str, node_type: str, *, original: str | None) -> None:
    """Set which kwok stages drive `node` (its type label), remembering the type to restore
    (`original`; None forgets it)."""
    patch(
        api,
        node_path(node),
        {
            "metadata": {
                "labels": {KWOK_NODE_LABEL: node_type},
                "annotations": {_ORIGINAL_TYPE_ANNOTATION: original},
            }
        },
    )


def make_node_unreachable(api: Any, node: str, *, mark_pods_not_ready: bool = True) -> Json:
    """Make a node look like its kubelet vanished: Ready=Unknown, and nobody puts it back.

    kwok would re-initialise any managed node whose Ready is not True (its node-initialize stage), so
    the node is first relabelled out of kwok's selector (type=kwok-unreachable; the original value
    is kept in an annotation). kwok watches nodes *with* that label selector, so the relabel reaches
    it as a deletion and later status writes never reach it at all; it also stops renewing the node's
    Lease and stops acting on the node's pods. Then the node conditions are set to Unknown through the
    status subresource, as the node lifecycle controller does once the grace period (50 s) has passed
    without a heartbeat, and (mark_pods_not_ready) the pods on it get Ready=False, as that controller's
    MarkPodsNotReady does; it does not do so itself here, because it only acts on a True->Unknown
    transition it made. The controller then taints the node node.kubernetes.io/unreachable. Deleted
    pods on the node stay Terminating (nothing runs kwok's delete stage for them), as on a lost node.
    """
    current = get(api, node_path(node))
    original = current["metadata"].get("labels", {}).get(KWOK_NODE_LABEL, KWOK_NODE_LABEL_VALUE)
    _set_node_type(api, node, UNREACHABLE_LABEL_VALUE, original=original)
    now = _now()
    unknown = {
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }
    conditions = [
        {
            "type": cond["type"],
            **unknown,
            "lastHeartbeatTime": cond.get("lastHeartbeatTime", now),
            "lastTransitionTime": now,
        }
        for cond in (current.get("status") or {}).get("conditions") or []
    ]
    if not any(c["type"] == "Ready" for c in conditions):
        conditions.append({"type": "Ready", **unknown, "lastHeartbeatTime": now, "lastTransitionTime": now})
    result = patch(api, node_path(node) + "/status", {"status": {"conditions": conditions}}, kind="strategic")
    if mark_pods_not_ready:
        not_ready = {
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}]}
        }
        run_parallel(
            lambda pod: patch(
                api,
                pod_path(pod["metadata"]["namespace"], pod["metadata"]["name"]) + "/status",
                not_ready,
                kind="strategic",
            ),
            [p for p in pods_on_node(api, node) if not p["metadata"].get("deletionTimestamp")],
        )
    return result


def restore_node(api: Any, node: str, *, timeout: float = 30.0) -> None:
    """Undo make_node_unreachable: hand the node back to kwok; wait until it and its pods are Ready.

    kwok re-initialises the node, but it only acts on pods when they change, so each pod on the
    node gets an annotation (`scalebot.test/node-restored`): the event a returning kubelet's status
    sync would be. Then kwok's stages run for them: Running pods become Ready again (the
    scalebot-pod-ready-again stage) and pods deleted meanwhile are removed at their deadline.
    """
    current = get(api, node_path(node))
    original = (
        current["metadata"].get("annotations", {}).get(_ORIGINAL_TYPE_ANNOTATION, KWOK_NODE_LABEL_VALUE)
    )
    _set_node_type(api, node, original, original=None)
    wait_for_nodes_ready(api, [node], timeout=timeout)
    nudge = {"metadata": {"annotations": {"scalebot.test/node-restored": _now()}}}
    pods = pods_on_node(api, node)
    run_parallel(
        lambda pod: patch(api, pod_path(pod["metadata"]["namespace"], pod["metadata"]["name"]), nudge), pods
    )
    live = {
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }

    def all_ready() -> bool:
        current_pods = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods_on_node(api, node)
        }
        return all(key not in current_pods or pod_is_running(current_pods[key]) for key in live)

    wait_until(all_ready, timeout, f"the pods on {node} to be Ready again")


# --------------------------------------------------------------------------------------------------
# Terminating namespaces


def make_namespace_terminating(
    api: Any, namespace: str, *, wait_for_controller: bool = True, timeout: float = 30.0
) -> Json:
    """Delete `namespace` and keep it Terminating until `release_namespace` is called.

    A ConfigMap carrying the finalizer `scalebot.test/hold` is created first. The namespace is in
    phase Terminating as soon as the DELETE returns, and from then on evictions in it are refused
    with 403 and cause NamespaceTerminating (the NamespaceLifecycle admission plugin). The real
    namespace controller then deletes the content, pods first and gracefully (ordered namespace
    deletion: pods carry a deletionTimestamp and linger for their grace period, or for ever if they
    hold a finalizer), the rest once the pods are gone; it cannot finish while the ConfigMap waits
    for its finalizer, so the namespace stays Terminating, as one stuck on a finalizer does in
    production. With wait_for_controller (the default) this returns only after the controller's first
    pass (its status conditions appear; about 5 s here), so pods in it are already being deleted.
    For a Terminating namespace whose pods are *not* being deleted, start a ControlPlane with
    disabled_controllers=["namespace"] and pass wait_for_controller=False.
    """
    path = f"/api/v1/namespaces/{quoted(namespace)}"
    create(
        api,
        f"{path}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "scalebot-terminating-holder", "finalizers": [TEST_FINALIZER]},
        },
    )
    delete(api, path, missing_ok=False)
    if wait_for_controller:
        wait_until(
            lambda: (get(api, path).get("status") or {}).get("conditions"),
            timeout,
            f"the namespace controller's first pass over {namespace}",
        )
    ns = get(api, path)
    if ns["status"].get("phase") != "Terminating":
        raise AssertionError(f"namespace {namespace} is not Terminating: {ns['status']}")
    return ns


def release_namespace(api: Any, namespace: str) -> None:
    """Remove the test finalizer from everything in `namespace` so that its deletion completes."""
    holder = f"/api/v1/namespaces/{quoted(namespace)}/configmaps/scalebot-terminating-holder"
    if get_or_none(api, holder) is not None:
        patch(api, holder, {"metadata": {"finalizers": None}})
    for pod in list_pods(api, namespace):
        if TEST_FINALIZER in (pod["metadata"].get("finalizers") or []):
            remove_finalizers(api, namespace, pod["metadata"]["name"])

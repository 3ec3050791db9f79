"""Cluster shapes for tests and the sandbox, created as the admin through raw JSON.

This module owns everything that *puts things into* the local control plane: kwok node pools,
namespaces, workloads, PDBs, special pods (bare, mirror-like, held by a finalizer, marked
do-not-evict), terminating namespaces, unreachable nodes, the bulk benchmark shape (`populate`), and
the deadline-bound waiters tests synchronise on.

Bodies are plain dicts posted through the Python client's connection pool (`raw_request`), never
the generated model classes, which are far too slow on the bulk paths; bulk creation uses a bounded
thread pool. Every waiter polls with a deadline; none sleeps to synchronise.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

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
_ORIGINAL_TYPE_ANNOTATION = "scalebot.test/original-type"

DEFAULT_WORKERS = 16


# --------------------------------------------------------------------------------------------------
# Raw JSON access through the Python client's connection pool


def api_client_from_kubeconfig(path: Path | str, *, pool_size: int = 32) -> Any:
    """An ApiClient for a kubeconfig, with a connection pool big enough for the bulk thread pools.

    The client's default pool is cpu_count() * 5 connections; more threads than that would queue.
    """
    configuration = k8s_client.Configuration()
    load_kube_config: Any = k8s_config.load_kube_config  # untyped in the client
    load_kube_config(config_file=str(path), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(configuration)


def send_request(
    api: Any,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: Mapping[str, str | int | bool] | None = None,
    content_type: str = "application/json",
    timeout: float = 30.0,
) -> Any:
    """One HTTP request with the client's auth and TLS settings; returns the urllib3 response as is

    (any status; `.status`, `.headers`, `.data`), for tests that look at the raw answer.
    """
    configuration = api.configuration
    url = configuration.host + path
    if query:
        url += "?" + urlencode(
            {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in query.items()}
        )
    headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "scalebot-localcluster"}
    for setting in configuration.auth_settings().values():
        headers[setting["key"]] = setting["value"]
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        headers["Content-Type"] = content_type
    return api.rest_client.pool_manager.request(
        method,
        url,
        body=data,
        headers=headers,
        timeout=urllib3.Timeout(total=timeout),
        retries=False,
        preload_content=True,
    )


def raw_request(
    api: Any,
    method: str,
    path: str,
    *,
    body: Any = None,
    query: Mapping[str, str | int | bool] | None = None,
    content_type: str = "application/json",
    timeout: float = 30.0,
) -> Any:
    """Send one request and return the decoded JSON (None for an empty body).

    Raises the client's `ApiException` for non-2xx answers, with `.status` and `.body` (the server's
    Status object as text) set, exactly as the generated API methods do.
    """
    response = send_request(
        api, method, path, body=body, query=query, content_type=content_type, timeout=timeout
    )
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    return orjson.loads(response.data) if response.data else None


def status_of(exc: BaseException) -> Json:
    """The Kubernetes Status object inside an ApiException (empty dict if the body is not JSON)."""
    body = getattr(exc, "body", None)
    if not body:
        return {}
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def create(api: Any, path: str, body: Json) -> Json:
    result: Json = raw_request(api, "POST", path, body=body)
    return result


def get(api: Any, path: str) -> Json:
    result: Json = raw_request(api, "GET", path)
    return result


def get_or_none(api: Any, path: str) -> Json | None:
    try:
        return get(api, path)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def delete(
    api: Any, path: str, *, grace: int | None = None, propagation: str | None = None, missing_ok: bool = True
) -> Json | None:
    options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if propagation is not None:
        options["propagationPolicy"] = propagation
    try:
        result: Json | None = raw_request(api, "DELETE", path, body=options)
        return result
    except ApiException as exc:
        if missing_ok and exc.status == 404:
            return None
        raise


def patch(api: Any, path: str, body: Any, *, kind: str = "merge") -> Json:
    """PATCH with a merge ("merge"), strategic merge ("strategic") or JSON ("json") patch."""
    content_type = {
        "merge": "application/merge-patch+json",
        "strategic": "application/strategic-merge-patch+json",
        "json": "application/json-patch+json",
    }[kind]
    result: Json = raw_request(api, "PATCH", path, body=body, content_type=content_type)
    return result


def list_items(
    api: Any,
    path: str,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    page_size: int = 2000,
    timeout: float = 120.0,
) -> list[Json]:
    """All items of a list endpoint, paginated (large clusters would otherwise time out); `timeout`
    bounds each page's request."""
    items: list[Json] = []
    query: dict[str, str | int | bool] = {"limit": page_size}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    while True:
        page = raw_request(api, "GET", path, query=query, timeout=timeout)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query["continue"] = token


def _q(name: str) -> str:
    return quote(name, safe="")


def pod_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{_q(namespace)}/pods"
    return base if name is None else f"{base}/{_q(name)}"


def node_path(name: str | None = None) -> str:
    return "/api/v1/nodes" if name is None else f"/api/v1/nodes/{_q(name)}"


def list_pods(
    api: Any,
    namespace: str | None = None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> list[Json]:
    path = "/api/v1/pods" if namespace is None else pod_path(namespace)
    return list_items(api, path, label_selector=label_selector, field_selector=field_selector)


def pods_on_node(api: Any, node: str, *, namespace: str | None = None) -> list[Json]:
    return list_pods(api, namespace, field_selector=f"spec.nodeName={node}")


@dataclass(frozen=True)
class EvictionResult:
    """The server's answer to an eviction: HTTP status, decoded body, and the Status' causes."""

    status: int
    body: Json

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))

    @property
    def causes(self) -> list[Json]:
        return list((self.body.get("details") or {}).get("causes") or [])

    def has_cause(self, cause_type: str) -> bool:
        # StatusCause.Type is serialised as "reason".
        return any(cause.get("reason") == cause_type for cause in self.causes)


def evict(api: Any, namespace: str, name: str, *, grace: int | None = None) -> EvictionResult:
    """POST an Eviction (policy/v1) for one pod and return the answer without raising on 4xx/5xx."""
    body: Json = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if grace is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": grace}
    response = send_request(api, "POST", pod_path(namespace, name) + "/eviction", body=body)
    decoded = orjson.loads(response.data) if response.data else {}
    return EvictionResult(status=response.status, body=decoded if isinstance(decoded, dict) else {})


def run_parallel(fn: Callable[[T], Any], items: Iterable[T], *, workers: int = DEFAULT_WORKERS) -> list[Any]:
    """Apply fn to every item from a bounded thread pool; re-raise the first failure."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="localcluster") as pool:
        return list(pool.map(fn, items))


# --------------------------------------------------------------------------------------------------
# Waiters


class WaitTimeout(AssertionError):
    """A deadline passed before the awaited condition held (an assertion failure in tests)."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    max_interval: float = 0.5,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll predicate until it returns something truthy, and return that; fail after `timeout` s.

    The poll interval grows from `interval` to `max_interval`. Exceptions listed in `ignore` (for
    example ApiException while an API server restarts) count as "not yet"; the last one is reported.
    """
    deadline = time.monotonic() + timeout
    delay = interval
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout:.1f} s waiting for {what} (last: {last!r})"[:2000])
        # Polling with a deadline, not synchronising: the predicate decides when we are done.
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, max_interval)


def assert_stays(
    predicate: Callable[[], object], duration: float, what: str, *, interval: float = 0.2
) -> None:
    """Check that predicate holds throughout the next `duration` seconds (an observation window).

    For "still there after N seconds" assertions: it polls for the whole window and fails at the
    first poll where the predicate is false.
    """
    deadline = time.monotonic() + duration
    while True:
        if not predicate():
            raise AssertionError(f"{what} stopped holding before {duration:.1f} s had passed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(interval, remaining))


def pod_is_running(pod: Json) -> bool:
    status = pod.get("status") or {}
    if pod.get("metadata", {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def wait_for_pods_running(
    api: Any,
    namespace: str,
    *,
    label_selector: str | None = None,
    count: int | None = None,
    timeout: float = 60.0,
) -> list[Json]:
    """Wait until `count` (or, without count, all and at least one) non-terminating pods are Running+Ready."""

    def check() -> list[Json] | None:
        pods = [
            p
            for p in list_pods(api, namespace, label_selector=label_selector)
            if not p["metadata"].get("deletionTimestamp")
        ]
        running = [p for p in pods if pod_is_running(p)]
        if count is not None:
            return running if len(running) == count and len(pods) == count else None
        return running if running and len(running) == len(pods) else None

    selector = f" ({label_selector})" if label_selector else ""
    return wait_until(
        check, timeout, f"{count if count is not None else 'all'} pods Running in {namespace}{selector}"
    )


def wait_for_pod_gone(
    api: Any, namespace: str, name: str, *, uid: str | None = None, timeout: float = 60.0
) -> None:
    """Wait until the pod is deleted (or, with uid, until no pod with that UID exists under the name)."""

    def gone() -> bool:
        pod = get_or_none(api, pod_path(namespace, name))
        return pod is None or (uid is not None and pod["metadata"]["uid"] != uid)

    wait_until(gone, timeout, f"pod {namespace}/{name} to be gone")


def wait_for_pdb_observed(
    api: Any,
    namespace: str,
    name: str,
    *,
    expected_pods: int | None = None,
    disruptions_allowed: int | None = None,
    timeout: float = 30.0,
) -> Json:
    """Wait until the disruption controller has observed the PDB (and, optionally, counted its pods,
    or allows at least `disruptions_allowed` evictions).

    Until then every eviction of a covered pod is refused with 429, whatever the budget says. A pod
    is counted as expected before it is counted as healthy (Ready), so a budget can be observed with
    all its pods and still allow nothing for a moment.
    """
    path = f"/apis/policy/v1/namespaces/{_q(namespace)}/poddisruptionbudgets/{_q(name)}"

    def observed() -> Json | None:
        pdb = get(api, path)
        status = pdb.get("status") or {}
        if status.get("observedGeneration") != pdb["metadata"].get("generation"):
            return None
        if expected_pods is not None and status.get("expectedPods") != expected_pods:
            return None
        if disruptions_allowed is not None and (status.get("disruptionsAllowed") or 0) < disruptions_allowed:
            return None
        return pdb

    return wait_until(observed, timeout, f"PDB {namespace}/{name} observed by the disruption controller")


def node_is_ready(node: Json) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def wait_for_nodes_ready(api: Any, names: Sequence[str], *, timeout: float = 60.0) -> None:
    wanted = set(names)

    def all_ready() -> bool:
        if len(wanted) <= 20:
            nodes = [n for name in wanted if (n := get_or_none(api, node_path(name))) is not None]
        else:
            nodes = [n for n in list_items(api, node_path()) if n["metadata"]["name"] in wanted]
        return sum(1 for n in nodes if node_is_ready(n)) == len(wanted)

    wait_until(all_ready, timeout, f"{len(wanted)} kwok nodes Ready", max_interval=1.0)


def wait_for_default_serviceaccount(api: Any, namespace: str, *, timeout: float = 30.0) -> None:
    """Wait for the serviceaccount controller to create `default`; pods are rejected until it exists."""
    path = f"/api/v1/namespaces/{_q(namespace)}/serviceaccounts/default"
    wait_until(lambda: get_or_none(api, path) is not None, timeout, f"ServiceAccount {namespace}/default")


def wait_for_deployment_available(api: Any, namespace: str, name: str, *, timeout: float = 60.0) -> Json:
    path = f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments/{_q(name)}"

    def available() -> Json | None:
        dep = get(api, path)
        status = dep.get("status") or {}
        want = dep["spec"].get("replicas", 1)
        ok = (
            status.get("observedGeneration") == dep["metadata"]["generation"]
            and status.get("availableReplicas", 0) == want
            and status.get("updatedReplicas", 0) == want
            and status.get("replicas", 0) == want
        )
        return dep if ok else None

    return wait_until(available, timeout, f"Deployment {namespace}/{name} available")


# --------------------------------------------------------------------------------------------------
# Nodes


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def create_node_pool(
    api: Any,
    name: str,
    count: int,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    cpu: str = "4",
    memory: str = "16Gi",
    pods: int = 110,
    wait_ready: bool = True,
    timeout: float = 120.0,
    workers: int = DEFAULT_WORKERS,
) -> list[str]:
    """Create `count` kwok nodes named `<name>-<i>` in pool `name`; return their names.

    Nodes carry `type=kwok` (kwok manages them), `scalebot.io/pool=<name>` and the annotation
    `kwok.x-k8s.io/node: fake`. Waits for kwok to make them Ready unless wait_ready=False.
    """
    width = max(2, len(str(count - 1)))
    names = [f"{name}-{i:0{width}d}" for i in range(count)]
    bodies = [
        node_body(n, name, labels=labels, taints=taints, cpu=cpu, memory=memory, pods=pods) for n in names
    ]
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
    patch(
        api,
        node_path(node),
        {
            "metadata": {
                "labels": {KWOK_NODE_LABEL: UNREACHABLE_LABEL_VALUE},
                "annotations": {_ORIGINAL_TYPE_ANNOTATION: original},
            }
        },
    )
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
    patch(
        api,
        node_path(node),
        {
            "metadata": {
                "labels": {KWOK_NODE_LABEL: original},
                "annotations": {_ORIGINAL_TYPE_ANNOTATION: None},
            }
        },
    )
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
# Namespaces


def create_namespace(
    api: Any,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    wait_for_serviceaccount: bool = True,
    timeout: float = 30.0,
) -> Json:
    ns = create(
        api,
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}},
    )
    if wait_for_serviceaccount:
        wait_for_default_serviceaccount(api, name, timeout=timeout)
    return ns


def delete_namespace(api: Any, name: str) -> None:
    delete(api, f"/api/v1/namespaces/{_q(name)}", propagation="Background")


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
    path = f"/api/v1/namespaces/{_q(namespace)}"
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
    holder = f"/api/v1/namespaces/{_q(namespace)}/configmaps/scalebot-terminating-holder"
    if get_or_none(api, holder) is not None:
        patch(api, holder, {"metadata": {"finalizers": None}})
    for pod in list_pods(api, namespace):
        if TEST_FINALIZER in (pod["metadata"].get("finalizers") or []):
            remove_finalizers(api, namespace, pod["metadata"]["name"])


# --------------------------------------------------------------------------------------------------
# Pods and workloads


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


def create_bare_pod(
    api: Any,
    namespace: str,
    name: str,
    *,
    node: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    finalizers: Sequence[str] = (),
    grace: int = 30,
    empty_dir: bool = False,
    priority_class: str | None = None,
    owner_references: Sequence[Mapping[str, Any]] = (),
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> Json:
    """A pod with spec.nodeName set (no scheduler involved) and, by default, no owner."""
    metadata: Json = {"name": name, "labels": dict(labels or {"app": name})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if owner_references:
        metadata["ownerReferences"] = [dict(o) for o in owner_references]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": pod_spec(
            node=node,
            grace=grace,
            empty_dir=empty_dir,
            priority_class=priority_class,
            tolerations=tolerations,
        ),
    }
    return create(api, pod_path(namespace), body)


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
    """A pod that looks like a kubelet's static-pod mirror: config.mirror annotation, owned by its Node.

    The ServiceAccount admission plugin refuses mirror pods that reference a ServiceAccount, so none
    is set (and no token is mounted).
    """
    node_obj = get(api, node_path(node))
    config_hash = hashlib.sha256(f"{namespace}/{name}@{node}".encode()).hexdigest()[:32]
    metadata: Json = {
        "name": name,
        "labels": {"app": name, "tier": "control-plane"},
        "annotations": {
            MIRROR_ANNOTATION: config_hash,
            "kubernetes.io/config.hash": config_hash,
            "kubernetes.io/config.source": "file",
        },
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node,
                "uid": node_obj["metadata"]["uid"],
                "controller": True,
            }
        ],
    }
    spec = pod_spec(node=node, grace=grace)
    return create(
        api, pod_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    )


def remove_finalizers(api: Any, namespace: str, name: str) -> Json | None:
    """Drop all finalizers from a pod (lets kwok's delete stage remove a Terminating pod)."""
    try:
        return patch(api, pod_path(namespace, name), {"metadata": {"finalizers": None}})
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


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


def create_deployment(
    api: Any,
    namespace: str,
    name: str,
    replicas: int,
    *,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    grace: int = 30,
    empty_dir: bool = False,
    priority_class: str | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    cpu: str = "100m",
    memory: str = "64Mi",
) -> Json:
    """A Deployment of pause pods (selector app=<name>, plus `labels` on the pods)."""
    selector = {"app": name}
    spec = pod_spec(
        node_selector=node_selector,
        grace=grace,
        empty_dir=empty_dir,
        priority_class=priority_class,
        tolerations=tolerations,
        cpu=cpu,
        memory=memory,
    )
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {**(labels or {}), **selector}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "revisionHistoryLimit": 2,
            "template": _template(selector, labels, pod_annotations, spec),
        },
    }
    return create(api, f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments", body)


def create_statefulset(
    api: Any,
    namespace: str,
    name: str,
    replicas: int,
    *,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    grace: int = 30,
    tolerations: Sequence[Mapping[str, Any]] = (),
    parallel: bool = True,
    cpu: str = "100m",
    memory: str = "64Mi",
) -> Json:
    """A StatefulSet of pause pods; Parallel pod management unless parallel=False (faster to create)."""
    selector = {"app": name}
    spec = pod_spec(node_selector=node_selector, grace=grace, tolerations=tolerations, cpu=cpu, memory=memory)
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {**(labels or {}), **selector}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
            "selector": {"matchLabels": selector},
            "template": _template(selector, labels, pod_annotations, spec),
        },
    }
    return create(api, f"/apis/apps/v1/namespaces/{_q(namespace)}/statefulsets", body)


def create_daemonset(
    api: Any,
    namespace: str,
    name: str,
    *,
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    grace: int = 30,
    cpu: str = "10m",
    memory: str = "16Mi",
) -> Json:
    """A DaemonSet that tolerates every taint (as node agents do); scope it with node_selector."""
    selector = {"app": name}
    spec = pod_spec(node_selector=node_selector, grace=grace, cpu=cpu, memory=memory)
    spec["tolerations"] = [{"operator": "Exists"}]
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": {**(labels or {}), **selector}},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": _template(selector, labels, None, spec),
        },
    }
    return create(api, f"/apis/apps/v1/namespaces/{_q(namespace)}/daemonsets", body)


def create_pdb(
    api: Any,
    namespace: str,
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
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }
    return create(api, f"/apis/policy/v1/namespaces/{_q(namespace)}/poddisruptionbudgets", body)


# --------------------------------------------------------------------------------------------------
# The benchmark shape


@dataclass
class PopulateReport:
    """What `populate` built and how fast (pods/s is measured from the first workload to all Ready)."""

    nodes: int
    pools: list[str]
    namespaces: list[str]
    deployments: int
    statefulsets: int
    pdbs: int
    pods: int
    node_seconds: float
    pod_seconds: float
    total_seconds: float

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.pod_seconds if self.pod_seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"populate: {self.nodes} nodes in {len(self.pools)} pools ({self.node_seconds:.1f} s), "
            f"{self.pods} pods from {self.deployments} Deployments, {self.statefulsets} StatefulSets and a "
            f"DaemonSet, {self.pdbs} PDBs in {self.pod_seconds:.1f} s = {self.pods_per_second:.0f} pods/s; "
            f"total {self.total_seconds:.1f} s"
        )


@dataclass(frozen=True)
class _Workload:
    namespace: str
    name: str
    replicas: int
    pool: str
    statefulset: bool
    pdb: bool


def _plan_workloads(
    pools: Sequence[str],
    sizes: Sequence[int],
    namespaces: Sequence[str],
    *,
    pods_per_node: int,
    replicas_per_workload: int,
    pdb_every: int,
    statefulset_every: int,
) -> list[_Workload]:
    """Split each pool's pods (all but the DaemonSet's one per node) into workloads."""
    plan: list[_Workload] = []
    for pool, size, ns in zip(pools, sizes, namespaces, strict=True):
        remaining = size * (pods_per_node - 1)
        while remaining > 0:
            replicas = min(replicas_per_workload, remaining)
            remaining -= replicas
            index = len(plan) + 1
            plan.append(
                _Workload(
                    namespace=ns,
                    name=f"w{index:05d}",
                    replicas=replicas,
                    pool=pool,
                    statefulset=index % statefulset_every == 0,
                    pdb=index % pdb_every == 0,
                )
            )
    return plan


def _post_workload(
    api: Any, w: _Workload, labels: Mapping[str, str], *, grace: int = 30, pdb_max_unavailable: int | str = 1
) -> None:
    selector = {POOL_LABEL: w.pool}
    if w.statefulset:
        create_statefulset(
            api, w.namespace, w.name, w.replicas, node_selector=selector, labels=labels, grace=grace
        )
    else:
        create_deployment(
            api, w.namespace, w.name, w.replicas, node_selector=selector, labels=labels, grace=grace
        )
    if w.pdb:
        create_pdb(
            api,
            w.namespace,
            f"{w.name}-pdb",
            match_labels={"app": w.name},
            max_unavailable=pdb_max_unavailable,
        )


def _ready_pod_count(api: Any, workload_namespaces: Sequence[str], daemonset_namespace: str) -> int:
    """Ready pods according to the controllers' status fields: a few small lists, not 30k pods."""
    total = 0
    for ns in workload_namespaces:
        for kind in ("deployments", "statefulsets"):
            page = raw_request(api, "GET", f"/apis/apps/v1/namespaces/{_q(ns)}/{kind}")
            total += sum(
                int((i.get("status") or {}).get("readyReplicas", 0)) for i in page.get("items") or []
            )
    ds = raw_request(api, "GET", f"/apis/apps/v1/namespaces/{_q(daemonset_namespace)}/daemonsets")
    total += sum(int((i.get("status") or {}).get("numberReady", 0)) for i in ds.get("items") or [])
    return total


def populate(
    api: Any,
    *,
    nodes: int,
    pods_per_node: int,
    prefix: str = "bench",
    nodes_per_pool: int = 100,
    replicas_per_workload: int = 30,
    pdb_every: int = 5,
    statefulset_every: int = 20,
    workers: int = 32,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    grace: int = 30,
    pdb_max_unavailable: int | str = 1,
) -> PopulateReport:
    """Build the benchmark shape: `nodes` kwok nodes carrying about `pods_per_node` pods each.

    Pools of `nodes_per_pool` nodes (`<prefix>-pool-<i>`), one namespace per pool, Deployments of
    `replicas_per_workload` pinned to their pool, every `statefulset_every`-th workload a StatefulSet,
    every `pdb_every`-th (20 % by default) under a PDB allowing one disruption, and one DaemonSet on
    every node (one of the `pods_per_node`). Pods are created by the real controllers and bound by the
    real scheduler, as in a cluster; the report gives pods/s. `grace` is every pod's
    terminationGracePeriodSeconds; `pdb_max_unavailable` the PDBs' maxUnavailable (a benchmark that
    empties every pool needs "100%": evicted pods cannot come back anywhere, so a budget of 1 would
    stop each covered workload after its first eviction).
    """
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    pool_count = max(1, -(-nodes // nodes_per_pool))
    pools = [f"{prefix}-pool-{i}" for i in range(pool_count)]
    sizes = [nodes // pool_count + (1 if i < nodes % pool_count else 0) for i in range(pool_count)]
    label = {"scalebot.test/populate": prefix}

    # Nodes, with pod capacity above the target so spread skew never starves the scheduler.
    bodies = [
        node_body(f"{pool}-{i:04d}", pool, labels=label, pods=max(110, pods_per_node + 20))
        for pool, size in zip(pools, sizes, strict=True)
        for i in range(size)
    ]
    node_names = [body["metadata"]["name"] for body in bodies]
    run_parallel(lambda body: create(api, node_path(), body), bodies, workers=workers)
    say(f"populate: {len(bodies)} nodes created in {time.monotonic() - started:.1f} s")
    wait_for_nodes_ready(api, node_names, timeout=timeout)
    node_seconds = time.monotonic() - started
    say(f"populate: nodes Ready after {node_seconds:.1f} s")

    system_ns = f"{prefix}-system"
    workload_ns = [f"{prefix}-{i}" for i in range(pool_count)]
    run_parallel(
        lambda ns: create_namespace(api, ns, labels=label), [system_ns, *workload_ns], workers=workers
    )

    plan = _plan_workloads(
        pools,
        sizes,
        workload_ns,
        pods_per_node=pods_per_node,
        replicas_per_workload=replicas_per_workload,
        pdb_every=pdb_every,
        statefulset_every=statefulset_every,
    )
    t_pods = time.monotonic()
    # The node agent first, as in a real cluster: created together with the workloads, a DaemonSet pod
    # can find its node already filled by the scheduler's uneven spread and stay Pending for good.
    create_daemonset(api, system_ns, f"{prefix}-agent", node_selector=label, labels=label, grace=grace)
    ds_path = f"/apis/apps/v1/namespaces/{_q(system_ns)}/daemonsets/{_q(prefix)}-agent"
    wait_until(
        lambda: (get(api, ds_path).get("status") or {}).get("numberReady", 0) >= len(node_names),
        timeout,
        f"DaemonSet {prefix}-agent Ready on all {len(node_names)} nodes",
        interval=0.5,
        max_interval=2.0,
    )
    say(f"populate: DaemonSet Ready on {len(node_names)} nodes after {time.monotonic() - t_pods:.1f} s")
    run_parallel(
        lambda w: _post_workload(api, w, label, grace=grace, pdb_max_unavailable=pdb_max_unavailable),
        plan,
        workers=workers,
    )
    expected = nodes * pods_per_node
    posted = time.monotonic() - t_pods
    say(f"populate: {len(plan)} workloads posted in {posted:.1f} s; awaiting {expected} pods")

    last_said = [t_pods]

    def all_ready() -> bool:
        count = _ready_pod_count(api, workload_ns, system_ns)
        now = time.monotonic()
        if now - last_said[0] > 15:
            last_said[0] = now
            say(f"populate: {count}/{expected} pods Ready, {count / (now - t_pods):.0f} pods/s")
        return count >= expected

    try:
        wait_until(all_ready, timeout, f"{expected} pods Ready", interval=1.0, max_interval=2.0)
    except WaitTimeout as exc:
        stuck = list_pods(
            api, label_selector=f"scalebot.test/populate={prefix}", field_selector="status.phase!=Running"
        )
        sample = ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} (node {p['spec'].get('nodeName')})"
            for p in stuck[:10]
        )
        raise WaitTimeout(f"{exc}; {len(stuck)} pods not Running, e.g. {sample}") from exc
    pod_seconds = time.monotonic() - t_pods
    report = PopulateReport(
        nodes=len(node_names),
        pools=pools,
        namespaces=[system_ns, *workload_ns],
        deployments=sum(1 for w in plan if not w.statefulset),
        statefulsets=sum(1 for w in plan if w.statefulset),
        pdbs=sum(1 for w in plan if w.pdb),
        pods=expected,
        node_seconds=node_seconds,
        pod_seconds=pod_seconds,
        total_seconds=time.monotonic() - started,
    )
    say(str(report))
    return report

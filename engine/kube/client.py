"""The real KubeApi adapter (`KubeClient`), over the official `kubernetes` client.

Reads every answer as raw JSON (`_preload_content=False` + orjson): the generated models are never
built, since they cost several times the parse on large lists (kubernetes-client/python#1921);
lists are paginated with `limit`/`continue`. Writes are the patches and evictions kubectl sends.

Its neighbours own the rest: `engine.kube.config` loads a configuration (kubeconfig or in-cluster)
into a private `ApiClient`; `engine.kube.transport` is the one path of every request to that
cluster (this client's, the pool providers', Lease, Events, /readyz: rate limit, counts, retries,
error translation); `engine.kube.watch` reads watch streams.

One module over 600 lines on purpose: `KubeClient` is one method per call of the `KubeApi` port,
and its module functions are the request bodies those methods send.
"""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
from kubernetes import client as k8s

from engine.domain.model import CordonResult, NodeInfo, PdbInfo, PodInfo, RawObject
from engine.kube import errors, projection, ratelimit
from engine.kube.api import PodListing
from engine.kube.config import configuration_from_inline, load_configuration
from engine.kube.inline_kubeconfig import InlineKubeconfig
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from engine.kube.transport import (
    DEFAULT_POOL_MAXSIZE,
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    Transport,
    parse_answer,
    tuned_configuration,
)
from engine.kube.watch import WATCH_READ_TIMEOUT_SECONDS, WATCH_SECONDS, PodWatch

__all__ = [
    "JSON_MERGE_PATCH",
    "PAGE_SIZE",
    "STRATEGIC_MERGE_PATCH",
    "USER_AGENT",
    "KubeClient",
]

T = TypeVar("T")

R = TypeVar("R")

PAGE_SIZE = 5000
"""Items per list page. Measured on a 1,000-node / 30,000-pod cluster (docs/benchmarks.md,
"Planning on a quiet machine"): the listing took 4.2 s in pages of 500 (kubectl's default
--chunk-size), 3.7 s in pages of 2,000, 3.5 s in pages of 5,000 and 3.4 s unpaginated. Pages of
5,000 keep memory bounded: at most two raw pages are held (about 19 MB each at 30,000 pods)
against the 112 MB of one unpaginated answer, and the API server answers each page from one
bounded read as well."""

TAINT_CONFLICT_ATTEMPTS = 5

USER_AGENT = "scalebot"

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

JSON_MERGE_PATCH = "application/merge-patch+json"


class KubeClient:
    """KubeApi over one API server. Thread-safe: evictions call it from a worker pool."""

    def __init__(
        self,
        api_client: Any,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        rate_limiter: ratelimit.TokenBucket | None = None,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        page_size: int = PAGE_SIZE,
        reload_credentials: Callable[[], Any] | None = None,
    ) -> None:
        """`api_client` is a `kubernetes.client.ApiClient`; `qps <= 0` turns the rate limit off.

        `reload_credentials`: returns a fresh `Configuration` when the server answers 401 (the
        credentials were rotated or expired, e.g. a Cluster API kubeconfig Secret); the request is
        then sent once more with them. Without it a 401 is an error like any other."""
        self._api_client = api_client
        self._core = k8s.CoreV1Api(api_client)
        self._apps = k8s.AppsV1Api(api_client)
        self._policy = k8s.PolicyV1Api(api_client)
        if rate_limiter is None and qps > 0:
            rate_limiter = ratelimit.TokenBucket(rate=qps, burst=burst)
        self._page_size = page_size
        self.transport = Transport(
            api_client,
            limiter=rate_limiter,
            timeout=request_timeout_seconds,
            reload_credentials=reload_credentials,
        )
        """Every request of this cluster's ApiClient goes through it, this client's and the pool
        providers', Lease's, Event recorder's and readiness probe's (`Transport.of`)."""
        self._timeout = request_timeout_seconds

    @property
    def request_counts(self) -> collections.Counter[tuple[str, str]]:
        """Requests sent per (verb, resource), by everything that shares this cluster's transport."""
        return self.transport.request_counts

    @property
    def burst(self) -> int | None:
        """The rate limiter's burst (None without a limit): adaptive concurrency stays below it."""
        return self.transport.burst

    def last_wait_seconds(self) -> float:
        """How long this thread's last request waited for the client-side rate limiter."""
        return self.transport.last_wait_seconds()

    @property
    def api_client(self) -> Any:
        """The underlying `kubernetes.client.ApiClient`, for pool providers that need other APIs."""
        return self._api_client

    @classmethod
    def from_config(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        connection_pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> KubeClient:
        """Connect as kubectl would: `kubeconfig`, else $KUBECONFIG, else ~/.kube/config, else in-cluster."""
        configuration = load_configuration(kubeconfig=kubeconfig, context=context)
        return cls._from_configuration(
            configuration,
            connection_pool_maxsize=connection_pool_maxsize,
            qps=qps,
            burst=burst,
            request_timeout_seconds=request_timeout_seconds,
        )

    @classmethod
    def from_inline_kubeconfig(
        cls,
        kubeconfig: InlineKubeconfig,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        reread: Callable[[], InlineKubeconfig] | None = None,
    ) -> KubeClient:
        """Connect with an allow-listed kubeconfig read from the cluster (a Cluster API
        `<cluster>-kubeconfig` Secret, validated by `engine.kube.inline_kubeconfig`).

        `reread`: the kubeconfig read and validated again from its origin, called on a 401 (rotated
        or expired credentials): the client switches to it and retries once."""

        def reload() -> Any:
            assert reread is not None
            return tuned_configuration(configuration_from_inline(reread()), DEFAULT_POOL_MAXSIZE)

        return cls._from_configuration(
            configuration_from_inline(kubeconfig),
            connection_pool_maxsize=DEFAULT_POOL_MAXSIZE,
            qps=qps,
            burst=burst,
            request_timeout_seconds=request_timeout_seconds,
            reload_credentials=reload if reread is not None else None,
        )

    @classmethod
    def _from_configuration(
        cls,
        configuration: Any,
        *,
        connection_pool_maxsize: int,
        qps: float,
        burst: int,
        request_timeout_seconds: float,
        reload_credentials: Callable[[], Any] | None = None,
    ) -> KubeClient:
        api_client = k8s.ApiClient(tuned_configuration(configuration, connection_pool_maxsize))
        api_client.user_agent = USER_AGENT
        return cls(
            api_client,
            qps=qps,
            burst=burst,
            request_timeout_seconds=request_timeout_seconds,
            reload_credentials=reload_credentials,
        )

    def close(self) -> None:
        self._api_client.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        return self.list_raw("nodes", self._core.list_node, NodeInfo.from_raw, label_selector=label_selector)

    def get_node(self, name: str) -> NodeInfo:
        return NodeInfo.from_raw(self.read_json("get", "nodes", self._core.read_node, name))

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        if node_names is not None and not node_names:
            return []
        return self.list_pods_at(node_names=node_names).pods

    def list_pods_at(self, *, node_names: Collection[str] | None) -> PodListing:
        if node_names is None:
            call = self._core.list_pod_for_all_namespaces
            # Pods are the one big list: decoded straight into PodInfo (engine.kube.projection).
            pods, version = self._list_pages("pods", call, _same, decode=_pod_page)
            return PodListing(pods=pods, resource_version=version)
        selector, keep = _bound_to(node_names)
        pods, resource_version = self._list_pages(
            "pods",
            self._core.list_pod_for_all_namespaces,
            _same,
            keep=keep,
            decode=_pod_page,
            field_selector=selector,
        )
        return PodListing(pods=pods, resource_version=resource_version)

    def watch_pods(self, *, node_names: Collection[str], resource_version: str) -> PodWatch:
        """One watch request on the pods bound to `node_names`, from `resource_version` on.

        The same selector as the listing (see `_bound_to`), so one request follows every node of
        a drain; bookmarks keep the resourceVersion fresh while nothing on those nodes changes.
        """
        selector, keep = _bound_to(node_names)
        response = self.transport.open(
            "watch",
            "pods",
            self._core.list_pod_for_all_namespaces,
            field_selector=selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _request_timeout=(self._timeout, WATCH_READ_TIMEOUT_SECONDS),
        )
        return PodWatch(response, keep)

    def list_bound_pods(self) -> list[PodInfo]:
        """Every pod bound to a node, with what the scheduler reads (affinity, tolerations, ports)."""
        return self._pods_where("spec.nodeName!=")

    def list_unbound_pods(self) -> list[PodInfo]:
        """Every pod bound to no node yet: the pending pods scale-up advice is about."""
        return self._pods_where("spec.nodeName=")

    def _pods_where(self, field_selector: str) -> list[PodInfo]:
        call = self._core.list_pod_for_all_namespaces
        return self._list_pages("pods", call, _same, decode=_pod_page, field_selector=field_selector)[0]

    def list_deployment_names(self) -> list[tuple[str, str]]:
        """(namespace, name) of every Deployment: enough to tell which autoscalers run here."""

        def name_of(raw: RawObject) -> tuple[str, str]:
            meta = raw.get("metadata") or {}
            return meta.get("namespace", ""), meta.get("name", "")

        return self.list_raw("deployments", self._apps.list_deployment_for_all_namespaces, name_of)

    def list_pdbs(self) -> list[PdbInfo]:
        call = self._policy.list_pod_disruption_budget_for_all_namespaces
        return self.list_raw("poddisruptionbudgets", call, PdbInfo.from_raw)

    def list_daemonset_keys(self) -> frozenset[str]:
        call = self._apps.list_daemon_set_for_all_namespaces
        return frozenset(self.list_raw("daemonsets", call, _object_key))

    def list_terminating_namespaces(self) -> frozenset[str]:
        def is_terminating(raw: RawObject) -> bool:
            return (raw.get("status") or {}).get("phase") == "Terminating"

        return frozenset(
            self.list_raw("namespaces", self._core.list_namespace, _object_name, keep=is_terminating)
        )

    # -- writes --------------------------------------------------------------------------------

    def set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        raw = self.read_json("get", "nodes", self._core.read_node, node)
        if bool((raw.get("spec") or {}).get("unschedulable")) == unschedulable:
            return False
        # The strategic-merge patch kubectl's cordon sends; no resourceVersion needed for one field.
        patch = {"spec": {"unschedulable": unschedulable}}
        self._request(
            "patch", "nodes", self._core.patch_node, node, patch, _content_type=STRATEGIC_MERGE_PATCH
        )
        return True

    def set_taint(self, node: str, key: str, *, value: str, effect: str, present: bool) -> bool:
        """Add (`present`) or remove one taint; an existing key+effect counts as present whatever its value.

        Keeping the old value matters for the draining taint, whose value records when the drain
        first started.
        """

        def change(spec: Mapping[str, Any]) -> tuple[bool, dict[str, Any] | None]:
            taints: list[dict[str, Any]] = list(spec.get("taints") or ())
            updated = _taints_with(taints, key, value, effect) if present else _taints_without(taints, key)
            return updated is not None, None if updated is None else {"taints": updated}

        return self._update_node_spec(node, change)

    def cordon(self, node: str, *, taint_key: str, taint_value: str, taint_effect: str) -> CordonResult:
        return self._update_node_spec(node, _cordon_change(taint_key, taint_value, taint_effect))

    def cordon_many(
        self,
        nodes: Collection[str],
        *,
        taint_key: str,
        taint_value: str,
        taint_effect: str,
        executor: Executor | None = None,
    ) -> dict[str, CordonResult]:
        """`cordon` of every node, from ONE node listing: each guarded patch carries the
        resourceVersion listed, and a node is read again (GET) only when its patch meets a 409.

        Which listing: a field selector names one node (`metadata.name=`), never a set. One node
        is listed by name; many come from the listing of every node, paged, filtered here. A
        cluster of 1,000 nodes is 2 pages, where the same cordon by name costs a GET per node;
        each drain pass lists every node anyway (`engine.drain.passes.run_pass`), so this is one pass's
        reads more, not a new order of cost. A label selector would list fewer nodes, but a
        drain's nodes share none (they span pools, or are named by a person).
        """
        wanted = frozenset(nodes)
        if not wanted:
            return {}
        by_name = f"metadata.name={next(iter(wanted))}" if len(wanted) == 1 else None
        listed = self.list_raw(
            "nodes",
            self._core.list_node,
            _as_is,
            keep=lambda raw: _object_name(raw) in wanted,
            field_selector=by_name,
        )
        change = _cordon_change(taint_key, taint_value, taint_effect)

        def one(raw: RawObject) -> tuple[str, CordonResult | None]:
            name = _object_name(raw)
            try:
                return name, self._update_node_spec(name, change, listed=raw)
            except errors.NotFound:
                return name, None  # deleted since the listing

        results = executor.map(one, listed) if executor is not None else map(one, listed)
        return {name: result for name, result in results if result is not None}

    def _update_node_spec(
        self,
        node: str,
        change: Callable[[Mapping[str, Any]], tuple[R, dict[str, Any] | None]],
        *,
        listed: RawObject | None = None,
    ) -> R:
        """Read the node (or take it as `listed`), let `change` decide (its answer, and the spec
        fields to write or None), write them in one JSON merge patch guarded by the resourceVersion
        read, re-read on a 409.

        `spec.taints` is a list, so a merge patch replaces it whole: the guard is what keeps a
        concurrent writer's taint from being lost.
        """
        for attempt in range(1, TAINT_CONFLICT_ATTEMPTS + 1):
            if attempt == 1 and listed is not None:
                raw = listed
            else:
                raw = self.read_json("get", "nodes", self._core.read_node, node)
            answer, fields = change(raw.get("spec") or {})
            if fields is None:
                return answer
            resource_version = (raw.get("metadata") or {}).get("resourceVersion")
            patch = {"metadata": {"resourceVersion": resource_version}, "spec": fields}
            try:
                self._request(
                    "patch", "nodes", self._core.patch_node, node, patch, _content_type=JSON_MERGE_PATCH
                )
            except errors.Conflict:
                if attempt == TAINT_CONFLICT_ATTEMPTS:
                    raise
                continue
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    # Evictions and pod deletions are the drain's hot path (thousands a night, each a request of
    # its own): they go straight to the connection pool (`Transport.send_json`), not through the
    # generated client's layers.

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        body = _eviction_body(pod, grace_seconds)
        self.transport.send_json(
            "POST", _pod_path(pod, "/eviction"), body, verb="create", resource="pods/eviction"
        )

    def dry_run_remove(self, pod: PodInfo, *, evict: bool, grace_seconds: int | None = None) -> None:
        """The eviction (or DELETE) with dryRun=All, as `kubectl drain --dry-run=server` sends it: the
        server runs admission and the PodDisruptionBudget check and changes nothing."""
        if not evict:
            body = _delete_options(pod, grace_seconds, dry_run=True)
            self.transport.send_json(
                "DELETE", _pod_path(pod), body, verb="delete", resource="pods", query="dryRun=All"
            )
            return
        body = _eviction_body(pod, grace_seconds, dry_run=True)
        self.transport.send_json(
            "POST",
            _pod_path(pod, "/eviction"),
            body,
            verb="create",
            resource="pods/eviction",
            query="dryRun=All",
        )

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        body = _delete_options(pod, grace_seconds)
        self.transport.send_json("DELETE", _pod_path(pod), body, verb="delete", resource="pods")

    def delete_node(self, name: str) -> None:
        self._request("delete", "nodes", self._core.delete_node, name)

    # -- plumbing ------------------------------------------------------------------------------

    def _request(
        self, verb: str, resource: str, call: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> bytes:
        return self.transport.read(verb, resource, call, *args, **kwargs)

    def read_json(
        self,
        verb: str,
        resource: str,
        call: Callable[..., Any],
        *args: Any,
        _decode: Callable[[bytes], Any] = orjson.loads,
        **kwargs: Any,
    ) -> RawObject:
        """One request's answer as a JSON object; `_decode` may project it (see list_pods)."""
        return parse_answer(verb, resource, self._request(verb, resource, call, *args, **kwargs), _decode)

    def list_raw(
        self,
        resource: str,
        call: Callable[..., Any],
        parse: Callable[[RawObject], T],
        *,
        keep: Callable[[RawObject], bool] | None = None,
        decode: Callable[[bytes], Any] = orjson.loads,
        **params: Any,
    ) -> list[T]:
        """Every item of a paginated list, parsed page by page so raw pages can be freed."""
        return self._list_pages(resource, call, parse, keep=keep, decode=decode, **params)[0]

    def _list_pages(
        self,
        resource: str,
        call: Callable[..., Any],
        parse: Callable[[Any], T],
        *,
        keep: Callable[[Any], bool] | None = None,
        decode: Callable[[bytes], Any] = orjson.loads,
        **params: Any,
    ) -> tuple[list[T], str]:
        """`list_raw`, with the list's resourceVersion (every page of one list carries the same).

        Page N+1 is requested as soon as page N's continue token is read from the head of its
        answer, and page N is decoded while N+1 is on its way: the server's time and ours
        overlap, with at most two raw pages in memory.
        """
        results: list[T] = []
        resource_version = ""

        def fetch(token: str | None) -> bytes:
            page_params: dict[str, Any] = {**params, "limit": self._page_size}
            if token:
                page_params["_continue"] = token
            return self._request("list", resource, call, **page_params)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-ahead") as ahead:
            data = fetch(None)
            while True:
                early = _continue_token_in_head(data)
                upcoming = ahead.submit(fetch, early) if early else None
                page = parse_answer("list", resource, data, decode)
                del data
                token = (page.get("metadata") or {}).get("continue") or None
                resource_version = str((page.get("metadata") or {}).get("resourceVersion") or "")
                results.extend(parse(raw) for raw in page.get("items") or () if keep is None or keep(raw))
                del page
                if upcoming is not None and early != token:
                    # The head said otherwise than the whole page: drop the early request.
                    with contextlib.suppress(errors.KubeError):
                        upcoming.result()
                    upcoming = None
                if not token:
                    return results, resource_version
                try:
                    data = upcoming.result() if upcoming is not None else fetch(token)
                except errors.KubeError as exc:
                    if exc.status != 410:
                        raise
                    # The continue token expired (etcd compacted past it). client-go's pager
                    # falls back to one unpaginated list; so do we, rather than fail the pass.
                    page = self.read_json("list", resource, call, _decode=decode, **params)
                    results = [parse(raw) for raw in page.get("items") or () if keep is None or keep(raw)]
                    version = str((page.get("metadata") or {}).get("resourceVersion") or "")
                    return results, version


_HEAD_BYTES = 4096

_CONTINUE_IN_HEAD = re.compile(rb'"metadata"\s*:\s*\{[^{}]*?"continue"\s*:\s*"([^"\\]*)"')


def _continue_token_in_head(data: bytes) -> str | None:
    """The continue token of a list page, read from the first bytes of its JSON (the API server
    writes the list's metadata before its items); None when it is not there to be read."""
    found = _CONTINUE_IN_HEAD.search(data, 0, _HEAD_BYTES)
    return found.group(1).decode("ascii", "replace") if found else None


def _bound_to(node_names: Collection[str]) -> tuple[str, Callable[[PodInfo], bool] | None]:
    """The field selector for the pods bound to `node_names`, and the filter the server cannot do.

    Pod field selectors take only `=`, `==` and `!=` (no set of values): one node is selected by
    the server. Many nodes: one cluster-wide request filtered in memory costs one pass over the
    pods, where a request per node would cost the API server one full scan per node. Pods bound
    to no node are left out by the server: during a zero-scale every evicted pod's replacement
    waits unscheduled, and encoding tens of thousands of those is the largest share of a
    listing's cost.
    """
    wanted = frozenset(node_names)
    if len(wanted) == 1:
        (node,) = wanted
        return f"spec.nodeName={node}", None
    return "spec.nodeName!=", lambda pod: pod.node_name in wanted


def _pod_page(data: bytes) -> RawObject:
    """A pod list page in the shape `_list_pages` reads, its items already PodInfo."""
    page = projection.decode_pod_page(data)
    meta = {"continue": page.continue_token, "resourceVersion": page.resource_version}
    return {"metadata": meta, "items": page.items}


def _same(pod: PodInfo) -> PodInfo:
    return pod


def _pod_path(pod: PodInfo, subresource: str = "") -> str:
    """A pod's URL path; its namespace and name quoted as the generated client quotes path parameters."""
    return f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/{quote(pod.name, safe='')}{subresource}"


def _delete_options(pod: PodInfo, grace_seconds: int | None, *, dry_run: bool = False) -> dict[str, Any]:
    """A DeleteOptions body as plain JSON: the same bytes the generated `V1DeleteOptions` would
    serialise to (its fields in its order, unset ones left out), without building a model per
    eviction, since a drain sends thousands."""
    if not pod.uid:
        raise ValueError(f"pod {pod.key} has no UID; refusing to write without a UID precondition")
    options: dict[str, Any] = {"dryRun": ["All"]} if dry_run else {}
    if grace_seconds is not None:
        options["gracePeriodSeconds"] = grace_seconds
    options["preconditions"] = {"uid": pod.uid}
    return options


def _eviction_body(pod: PodInfo, grace_seconds: int | None, *, dry_run: bool = False) -> dict[str, Any]:
    """A policy/v1 Eviction as plain JSON, in the field order of the generated `V1Eviction`."""
    return {
        "apiVersion": "policy/v1",
        "deleteOptions": _delete_options(pod, grace_seconds, dry_run=dry_run),
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
    }


def _cordon_change(
    taint_key: str, taint_value: str, taint_effect: str
) -> Callable[[Mapping[str, Any]], tuple[CordonResult, dict[str, Any] | None]]:
    """What cordoning a node with this spec changes: the taint added (an existing key+effect is
    kept as it is) and `unschedulable`, or nothing when both are there."""

    def change(spec: Mapping[str, Any]) -> tuple[CordonResult, dict[str, Any] | None]:
        taints: list[dict[str, Any]] = list(spec.get("taints") or ())
        updated = _taints_with(taints, taint_key, taint_value, taint_effect)
        result = CordonResult(had_taint=updated is None, was_unschedulable=bool(spec.get("unschedulable")))
        if updated is None and result.was_unschedulable:
            return result, None
        return result, {"taints": taints if updated is None else updated, "unschedulable": True}

    return change


def _taints_with(
    taints: list[dict[str, Any]], key: str, value: str, effect: str
) -> list[dict[str, Any]] | None:
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return None
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return [*taints, taint]


def _taints_without(taints: list[dict[str, Any]], key: str) -> list[dict[str, Any]] | None:
    kept = [t for t in taints if t.get("key") != key]
    return None if len(kept) == len(taints) else kept


def _object_name(raw: RawObject) -> str:
    return str((raw.get("metadata") or {}).get("name", ""))


def _object_key(raw: RawObject) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _as_is(raw: RawObject) -> RawObject:
    return raw

"""The real KubeApi adapter, over the official `kubernetes` client.

Owns four things and nothing else:
- loading a configuration (kubeconfig or in-cluster) into a private `ApiClient`, never the
  library's global default, with actionable `KubeConfigError`s;
- the client-side rate limit (`engine.kube.ratelimit.TokenBucket`) and per-(verb, resource) request
  counts that benchmarks report as API cost, in `Transport`: one per ApiClient, the one path of
  every request to that cluster (this client's, the pool providers', Lease, Events, /readyz);
- reading every answer as raw JSON (`_preload_content=False` + orjson): the generated models are
  never built, since they cost several times the parse on large lists
  (kubernetes-client/python#1921); lists are paginated with `limit`/`continue`;
- translating errors, once (architecture rule 5): `ApiException` becomes the
  `engine.kube.errors` subclass for its status and Status body, and any failure without an HTTP
  answer becomes `TransportError`, so a dropped connection is never mistaken for NotFound.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import os
import re
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import orjson
import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from engine.domain.errors import Category, ScalebotError
from engine.domain.model import CordonResult, NodeInfo, PdbInfo, PodInfo, RawObject
from engine.domain.settings import MAX_EVICTIONS_IN_FLIGHT
from engine.kube import errors, projection, ratelimit
from engine.kube.api import PodEvent, PodEventType, PodListing
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS

T = TypeVar("T")
R = TypeVar("R")

PAGE_SIZE = 500
"""Items per list page: kubectl's default --chunk-size."""
PRIORITY_QPS = 5.0
PRIORITY_BURST = 10
"""The separate budget of the requests that keep this instance alive (see `Transport`): client-go's
defaults, ten times what Lease renewals every 2 s and a readiness probe every few seconds need."""
OTHER_REQUESTS_IN_FLIGHT = 16
"""Requests that run next to a drain's evictions: the pod watches of the operations running at
once, the listing fetched ahead, the Lease, Events, the readiness probe, the pool providers."""
DEFAULT_POOL_MAXSIZE = MAX_EVICTIONS_IN_FLIGHT + OTHER_REQUESTS_IN_FLIGHT
"""Connections kept per host. urllib3 opens a connection for every request beyond the pool and
closes it after the answer (a TCP connect and a TLS handshake per eviction once more are in
flight than the pool keeps), so the pool holds every request a drain can have in flight."""
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0
TAINT_CONFLICT_ATTEMPTS = 5
USER_AGENT = "scalebot"
WATCH_SECONDS = 240
"""How long the server keeps one watch request open (client-go's reflectors ask for 5-10 min);
the drain's pod feed resumes from the last resourceVersion when it ends."""
WATCH_READ_TIMEOUT_SECONDS = WATCH_SECONDS + 30.0
"""A watch that stays silent past its own end has lost its connection."""
WATCH_CHUNK_BYTES = 64 * 1024
MAX_WATCH_EVENT_BYTES = 8 * 1024 * 1024
"""One event is one object: a line longer than this is not a pod, and memory stays bounded."""

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_MERGE_PATCH = "application/merge-patch+json"
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"

# Failures that mean no HTTP answer arrived (or it was cut off). urllib3's HTTPError is the base
# of MaxRetryError, ProtocolError, its TimeoutErrors and SSLError; OSError covers socket and ssl.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)


class KubeConfigError(ScalebotError, ValueError):
    """No usable cluster configuration; the message says what to change."""

    category = Category.CONFIGURATION


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
    def from_kubeconfig_text(
        cls,
        text: str,
        *,
        where: str,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        reread: Callable[[], str] | None = None,
    ) -> KubeClient:
        """Connect with a kubeconfig held in memory (a Cluster API `<cluster>-kubeconfig` Secret),
        its current context; `where` names its origin in errors. Nothing is written to disk.

        `reread`: the kubeconfig's text read again from its origin, called on a 401 (rotated or
        expired credentials): the client switches to it and retries once."""

        def reload() -> Any:
            assert reread is not None
            return _tuned(configuration_from_text(reread(), where=where), DEFAULT_POOL_MAXSIZE)

        return cls._from_configuration(
            configuration_from_text(text, where=where),
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
        api_client = k8s.ApiClient(_tuned(configuration, connection_pool_maxsize))
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

    def list_nodes_json(self) -> list[RawObject]:
        """Every node as the API returns it: the scheduling model reads fields NodeInfo leaves out."""
        return self.list_raw("nodes", self._core.list_node, _as_is)

    def list_bound_pods_json(self) -> list[RawObject]:
        """Every pod bound to a node, whole (affinity, tolerations, ports: what the scheduler reads)."""
        return self.list_raw(
            "pods", self._core.list_pod_for_all_namespaces, _as_is, field_selector="spec.nodeName!="
        )

    def list_unbound_pods_json(self) -> list[RawObject]:
        """Every pod bound to no node yet, whole: the pending pods scale-up advice is about."""
        return self.list_raw(
            "pods", self._core.list_pod_for_all_namespaces, _as_is, field_selector="spec.nodeName="
        )

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

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        body = _eviction_body(pod, grace_seconds)
        call = self._core.create_namespaced_pod_eviction
        self._request("create", "pods/eviction", call, pod.name, pod.namespace, body)

    def dry_run_remove(self, pod: PodInfo, *, evict: bool, grace_seconds: int | None = None) -> None:
        """The eviction (or DELETE) with dryRun=All, as `kubectl drain --dry-run=server` sends it: the
        server runs admission and the PodDisruptionBudget check and changes nothing."""
        if not evict:
            call = self._core.delete_namespaced_pod
            body = _delete_options(pod, grace_seconds, dry_run=True)
            self._request("delete", "pods", call, pod.name, pod.namespace, body=body, dry_run="All")
            return
        body = _eviction_body(pod, grace_seconds, dry_run=True)
        call = self._core.create_namespaced_pod_eviction
        self._request("create", "pods/eviction", call, pod.name, pod.namespace, body, dry_run="All")

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        body = _delete_options(pod, grace_seconds)
        self._request("delete", "pods", self._core.delete_namespaced_pod, pod.name, pod.namespace, body=body)

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
        return _parse(verb, resource, self._request(verb, resource, call, *args, **kwargs), _decode)

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
                page = _parse("list", resource, data, decode)
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


_TRANSPORTS: weakref.WeakKeyDictionary[Any, Transport] = weakref.WeakKeyDictionary()
_TRANSPORTS_LOCK = threading.Lock()


class Transport:
    """The one way a request reaches one cluster's API server: rate limit, count, send, read the
    raw answer, translate any failure once, and on a 401 reload the credentials and send once more.

    One per `kubernetes.client.ApiClient`, hence per cluster: `KubeClient` builds it, and everything
    else handed the same ApiClient (the pool providers' calls, the Lease, the Event recorder, the
    readiness probe) finds it with `Transport.of`, so `api_qps`/`api_burst` bound all of them.

    `priority=True` requests (Lease reads and renewals, the /readyz probe) take their tokens from
    a separate small bucket instead: a drain that saturates the main bucket queues its callers for
    seconds, and a leader whose renewal waits past `renew_deadline` loses its Lease (and a probe
    that waits fails the pod). client-go controllers give leader election its own client for that
    reason, and the API server's priority and fairness puts leases in their own level.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        limiter: ratelimit.TokenBucket | None,
        priority_limiter: ratelimit.TokenBucket | None = None,
        timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        reload_credentials: Callable[[], Any] | None = None,
    ) -> None:
        # Weakly: the registry maps the ApiClient to this transport, and a strong reference back
        # would keep both (and their connection pools) alive forever.
        self._api_client_ref = weakref.ref(api_client)
        self._limiter = limiter
        self._priority_limiter = priority_limiter or ratelimit.TokenBucket(
            rate=PRIORITY_QPS, burst=PRIORITY_BURST
        )
        self._timeout = timeout
        self._reload_credentials = reload_credentials
        self._reload_lock = threading.Lock()
        self._credentials_generation = 0
        self._counts_lock = threading.Lock()
        self._waits = threading.local()
        self.request_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        with _TRANSPORTS_LOCK:
            _TRANSPORTS[api_client] = self

    @classmethod
    def of(cls, api_client: Any) -> Transport:
        """The transport of `api_client`'s cluster; one with the default limit for an ApiClient
        no `KubeClient` was built on (a test's second identity), kept for its later requests."""
        with _TRANSPORTS_LOCK:
            found = _TRANSPORTS.get(api_client)
        if found is not None:
            return found
        return cls(api_client, limiter=ratelimit.TokenBucket(rate=DEFAULT_QPS, burst=DEFAULT_BURST))

    def _api_client(self) -> Any:
        """The ApiClient, alive while anyone who sends through this transport holds it."""
        api_client = self._api_client_ref()
        if api_client is None:
            raise errors.TransportError(message="the cluster's API client was closed")
        return api_client

    @property
    def burst(self) -> int | None:
        return self._limiter.burst if self._limiter is not None else None

    def last_wait_seconds(self) -> float:
        return float(getattr(self._waits, "seconds", 0.0))

    def read(
        self,
        verb: str,
        resource: str,
        call: Callable[..., Any],
        *args: Any,
        priority: bool = False,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> bytes:
        """One request's raw answer; on a 401 with a way to reload the credentials, reload and
        send once more (a 401 with the fresh credentials too is the caller's error)."""
        generation = self._credentials_generation
        try:
            return self._read(verb, resource, call, *args, priority=priority, timeout=timeout, **kwargs)
        except errors.KubeError as exc:
            if exc.status != 401 or self._reload_credentials is None:
                raise
            try:
                self._switch_credentials(generation)
            except (KubeConfigError, ValueError, errors.KubeError) as failed:
                message = f"{verb} {resource}: {exc}; reloading the credentials failed: {failed}"
                raise errors.InvalidRequest(status=401, message=message) from failed
        return self._read(verb, resource, call, *args, priority=priority, timeout=timeout, **kwargs)

    def request_json(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        resource: str,
        body: Any = None,
        timeout: float | None = None,
        content_type: str = "application/json",
        priority: bool = False,
    ) -> RawObject:
        """A request by path, for APIs without a generated method scalebot uses (Leases, Events):
        the body is sent as given (no generated model in between), the answer parsed with orjson."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        call = partial(self._call_path, path, method, headers, body)
        data = self.read(verb, resource, call, priority=priority, timeout=timeout)
        return _parse(verb, resource, data, orjson.loads) if data else {}

    def probe(self, *, timeout: float) -> None:
        """GET /readyz, on the priority budget; raises KubeError unless the server answers ready."""
        call = partial(self._call_path, "/readyz", "GET", {"Accept": "text/plain"}, None)
        self.read("get", "/readyz", call, priority=True, timeout=timeout)

    def open(
        self,
        verb: str,
        resource: str,
        call: Callable[..., Any],
        *args: Any,
        priority: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Send one request and return the answer unread (urllib3's response): rate limit, count,
        translate a failure to send or a non-2xx answer."""
        limiter = self._priority_limiter if priority else self._limiter
        self._waits.seconds = limiter.acquire() if limiter is not None else 0.0
        with self._counts_lock:
            self.request_counts[(verb, resource)] += 1
        try:
            return call(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise error_from_api_exception(exc, verb, resource) from exc
        except TRANSPORT_ERRORS as exc:
            raise errors.TransportError(message=f"{verb} {resource}: {_one_line(exc)}") from exc

    def _read(
        self,
        verb: str,
        resource: str,
        call: Callable[..., Any],
        *args: Any,
        priority: bool,
        timeout: float | None,
        **kwargs: Any,
    ) -> bytes:
        request_timeout = self._timeout if timeout is None else timeout
        response = self.open(
            verb, resource, call, *args, priority=priority, _request_timeout=request_timeout, **kwargs
        )
        try:
            return bytes(response.data or b"")
        except TRANSPORT_ERRORS as exc:
            raise errors.TransportError(message=f"{verb} {resource}: {_one_line(exc)}") from exc
        finally:
            response.release_conn()

    def _call_path(self, path: str, method: str, headers: dict[str, str], body: Any, **kwargs: Any) -> Any:
        """`ApiClient.call_api` by path (kubernetes client 36: no `param_serialize`), with its
        auth, TLS and connection pool; its REST layer raises ApiException for a non-2xx status."""
        response = self._api_client().call_api(
            path, method, header_params=headers, body=body, auth_settings=["BearerToken"], **kwargs
        )
        if not 200 <= response.status <= 299:
            response.release_conn()
            raise ApiException(http_resp=response)
        return response

    def _switch_credentials(self, seen: int) -> None:
        """Load fresh credentials into the shared ApiClient, once for all the requests that got a
        401 with the generation `seen` (evictions run in parallel: one re-read, not sixteen)."""
        assert self._reload_credentials is not None
        with self._reload_lock:
            if self._credentials_generation != seen:
                return  # another request already switched
            fresh = self._reload_credentials()
            api_client = self._api_client()
            old = api_client.rest_client
            # Every generated API object over this ApiClient (the pool providers' too) sends
            # through these two attributes: tokens and client certificates alike.
            api_client.configuration = fresh
            api_client.rest_client = k8s_rest.RESTClientObject(fresh)
            self._credentials_generation += 1
            old.pool_manager.clear()


_HEAD_BYTES = 4096
_CONTINUE_IN_HEAD = re.compile(rb'"metadata"\s*:\s*\{[^{}]*?"continue"\s*:\s*"([^"\\]*)"')


def _continue_token_in_head(data: bytes) -> str | None:
    """The continue token of a list page, read from the first bytes of its JSON (the API server
    writes the list's metadata before its items); None when it is not there to be read."""
    found = _CONTINUE_IN_HEAD.search(data, 0, _HEAD_BYTES)
    return found.group(1).decode("ascii", "replace") if found else None


def _parse(verb: str, resource: str, data: bytes, decode: Callable[[bytes], Any]) -> RawObject:
    try:
        parsed = decode(data)
    except (orjson.JSONDecodeError, projection.ProjectionError) as exc:
        # A 2xx whose body is not JSON was garbled on the way (proxy, truncation): no answer.
        raise errors.TransportError(message=f"{verb} {resource}: unreadable response: {exc}") from exc
    if not isinstance(parsed, dict):
        raise errors.TransportError(message=f"{verb} {resource}: response is not a JSON object")
    return parsed


class PodWatch:
    """The events of one pod watch, read as raw JSON lines from the open answer, one at a time.

    Memory stays bounded by one event (plus one read chunk): a line longer than
    MAX_WATCH_EVENT_BYTES ends the watch as a transport error. Pods the selector lets through but
    that are bound elsewhere (see `_bound_to`) come out as bookmarks: they only move the
    resourceVersion on.
    """

    def __init__(self, response: Any, keep: Callable[[PodInfo], bool] | None) -> None:
        self._response = response
        self._keep = keep
        self._closed = threading.Event()

    def close(self) -> None:
        """Ends the iteration, also from another thread (it shuts the socket a read blocks on)."""
        self._closed.set()
        with contextlib.suppress(*TRANSPORT_ERRORS):
            self._response.shutdown()
        self._response.release_conn()

    def __iter__(self) -> Iterator[PodEvent]:
        pending = bytearray()
        try:
            for chunk in self._response.stream(WATCH_CHUNK_BYTES, decode_content=True):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    if line.strip():
                        yield self._event(line)
                if len(pending) > MAX_WATCH_EVENT_BYTES:
                    raise errors.TransportError(message="watch pods: an event longer than the limit")
        except TRANSPORT_ERRORS as exc:
            if self._closed.is_set():
                return
            raise errors.TransportError(message=f"watch pods: {_one_line(exc)}") from exc
        finally:
            self._response.release_conn()
        if pending.strip() and not self._closed.is_set():
            raise errors.TransportError(message="watch pods: the stream ended inside an event")

    def _event(self, line: bytes) -> PodEvent:
        try:
            kind, pod, raw = projection.decode_watch_event(line)
        except projection.ProjectionError as exc:
            raise errors.TransportError(message=f"watch pods: unreadable event: {exc}") from exc
        if pod is None:
            # 410 Gone: the resourceVersion was compacted away; the caller lists afresh.
            raise errors.error_from_status(int(raw.get("code") or 500), raw)
        version = str(raw.get("resourceVersion") or "")
        event_type = _POD_EVENT_TYPES.get(kind)
        if event_type is None or (self._keep is not None and not self._keep(pod)):
            return PodEvent(type="BOOKMARK", pod=None, resource_version=version)
        return PodEvent(type=event_type, pod=pod, resource_version=version)


_POD_EVENT_TYPES: dict[str, PodEventType] = {"ADDED": "ADDED", "MODIFIED": "MODIFIED", "DELETED": "DELETED"}


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


def configuration_from_text(text: str, *, where: str) -> Any:
    """A `Configuration` from kubeconfig text (its current context); raises KubeConfigError."""
    configuration = k8s.Configuration()
    try:
        document = yaml.safe_load(text)
        if not isinstance(document, dict):
            raise ValueError("not a kubeconfig document")
        k8s_config.load_kube_config_from_dict(
            config_dict=document, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, KeyError, ValueError, TypeError) as exc:
        raise KubeConfigError(f"cannot use the kubeconfig in {where}: {_one_line(exc)}") from exc
    return configuration


def _tuned(configuration: Any, connection_pool_maxsize: int) -> Any:
    configuration.connection_pool_maxsize = connection_pool_maxsize
    # One retry policy, the runner's: urllib3 would otherwise sleep on Retry-After and retry
    # 429/503 itself, invisibly to our counters and backoff. Connection failures are retried
    # (nothing was sent); a read failure only for idempotent methods (urllib3's rule).
    configuration.retries = urllib3.Retry(
        total=2, connect=2, read=1, status=0, other=0, redirect=0, respect_retry_after_header=False
    )
    configuration.client_go_retries = False
    return configuration


def load_configuration(*, kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A fresh `kubernetes.client.Configuration`, found in kubectl's order; raises KubeConfigError."""
    configuration = k8s.Configuration()
    path = _kubeconfig_path(kubeconfig)
    if path is None:
        if context:
            raise KubeConfigError(
                f"context {context!r} was requested but no kubeconfig was found; "
                "pass --kubeconfig, set KUBECONFIG or create ~/.kube/config"
            )
        if os.environ.get(IN_CLUSTER_HOST_ENV):
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except ConfigException as exc:
                raise KubeConfigError(f"in-cluster configuration failed: {_one_line(exc)}") from exc
            return configuration
        raise KubeConfigError(
            "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, "
            "create ~/.kube/config, or run in a pod with a service account"
        )
    chosen = _check_context(path, context)
    try:
        # persist_config=False: never rewrite the user's kubeconfig (token refresh writes back).
        k8s_config.load_kube_config(
            config_file=path, context=chosen, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, OSError, yaml.YAMLError, KeyError, ValueError) as exc:
        raise KubeConfigError(f"cannot use context {chosen!r} from {path}: {_one_line(exc)}") from exc
    return configuration


def _kubeconfig_path(explicit: str | None) -> str | None:
    """The kubeconfig to read (several joined by os.pathsep, as KUBECONFIG allows), or None."""
    if explicit:
        path = os.path.expanduser(explicit)
        if not os.path.isfile(path):
            raise KubeConfigError(f"kubeconfig file {path} does not exist; check the --kubeconfig path")
        return path
    env = os.environ.get("KUBECONFIG", "")
    if env:
        paths = [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
        existing = [p for p in paths if os.path.isfile(p)]
        if not existing:
            raise KubeConfigError(f"KUBECONFIG={env} names no existing file; fix it or unset it")
        return os.pathsep.join(existing)
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.isfile(default) else None


def _check_context(path: str, context: str | None) -> str:
    """The context to use: `context` or the current-context, checked to exist in the file(s)."""
    names: list[str] = []
    current: str | None = None
    for one in path.split(os.pathsep):
        try:
            with open(one, encoding="utf-8") as f:
                document = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"cannot read kubeconfig {one}: {_one_line(exc)}") from exc
        if not isinstance(document, dict):
            raise KubeConfigError(f"kubeconfig {one} is empty or not a mapping")
        names.extend(str(c.get("name")) for c in document.get("contexts") or () if isinstance(c, dict))
        current = current or document.get("current-context") or None  # first file wins, as in kubectl
    available = ", ".join(sorted(set(names))) or "(none)"
    chosen = context or current
    if not chosen:
        raise KubeConfigError(f"{path} sets no current-context; pass --context, one of: {available}")
    if chosen not in names:
        raise KubeConfigError(f"context {chosen!r} not found in {path}; available contexts: {available}")
    return chosen


def error_from_api_exception(exc: ApiException, verb: str, resource: str) -> errors.KubeError:
    status = int(exc.status or 0)
    if status == 0:
        # The client's own wrapper for an SSL failure: no HTTP answer arrived.
        return errors.TransportError(message=f"{verb} {resource}: {_one_line(exc.reason or exc)}")
    err = errors.error_from_status(status, _status_body(exc.body, status, exc.reason))
    if err.retry_after_seconds is None:
        err.retry_after_seconds = _retry_after_header(exc.headers)
    return err


def _status_body(body: str | bytes | None, status: int, http_reason: str | None) -> Mapping[str, Any]:
    """The Status object of an error answer; a proxy's HTML or an empty body gets a short message."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and (parsed.get("kind") == "Status" or "message" in parsed):
        return parsed
    summary = f"HTTP {status} {http_reason or ''}".strip()
    snippet = " ".join(text.split())[:200]
    return {"message": f"{summary}: {snippet}" if snippet else summary}


def _retry_after_header(headers: Mapping[str, str] | None) -> int | None:
    value = (headers or {}).get("Retry-After")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # an HTTP-date; the API server only sends seconds


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


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _as_is(raw: RawObject) -> RawObject:
    return raw

"""Raw JSON access to the local control plane through the Python client's connection pool.

This module owns the HTTP side of the test cluster: an ApiClient for a kubeconfig, one request with
the client's auth and TLS (`send_request`, `raw_request`), the verbs (`create`, `get`, `delete`,
`patch`, paginated `list_items`), the paths of pods and nodes, evictions, and the bounded thread
pool the bulk paths use. Bodies are plain dicts, never the generated model classes, which are far
too slow on the bulk paths. It knows nothing of what the objects are (see `bodies`, `objects`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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

DEFAULT_WORKERS = 16


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

    def send() -> Any:
        return api.rest_client.pool_manager.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(total=timeout),
            retries=False,
            preload_content=True,
        )

    try:
        return send()
    except (urllib3.exceptions.SSLError, urllib3.exceptions.ProtocolError):
        # A pooled keep-alive connection the API server closed just as it was reused (its idle
        # close, or a restart by an earlier test): the request did not get through. Once more on a
        # new connection, as Go's HTTP transport does for a reused connection; a second failure
        # is the server's answer.
        return send()


def raw_request(api: Any, method: str, path: str, **request: Any) -> Any:
    """Send one request (`request`: `send_request`'s body, query, content_type, timeout) and return
    the decoded JSON (None for an empty body).

    Raises the client's `ApiException` for non-2xx answers, with `.status` and `.body` (the server's
    Status object as text) set, exactly as the generated API methods do.
    """
    response = send_request(api, method, path, **request)
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


def quoted(name: str) -> str:
    """`name` as one URL path segment (a name from a test is data, not a path)."""
    return quote(name, safe="")


def pod_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{quoted(namespace)}/pods"
    return base if name is None else f"{base}/{quoted(name)}"


def node_path(name: str | None = None) -> str:
    return "/api/v1/nodes" if name is None else f"/api/v1/nodes/{quoted(name)}"


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

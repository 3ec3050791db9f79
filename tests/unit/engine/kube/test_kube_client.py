"""KubeClient against a scripted local HTTP server that answers like the API server.

Covers: error translation (429 budget/transient/rate-limit, 500 multi-PDB, 403 terminating
namespace, 404, 409, non-JSON 502, empty 503, dropped and refused connections), Retry-After,
eviction and delete request bodies, pagination with `continue` (and the 410 fallback) without
building client models, the one-listing rule for many nodes, cordon and taint writes (409 retry),
request counting, the injected rate limiter (shared with the pool providers' raw calls, the
Lease, the readiness probe and the Event recorder, the first two on their own budget), and
KubeConfigError messages.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes.client
import pytest
import urllib3

from engine.domain.model import PodInfo
from engine.domain.settings import RunnerSettings
from engine.kube import errors, offload, offload_worker
from engine.kube.api import KubeApi
from engine.kube.client import PAGE_SIZE, USER_AGENT, KubeClient
from engine.kube.config import KubeConfigError, load_configuration
from engine.kube.events import EventRecorder, ObjectRef
from engine.kube.inline_kubeconfig import InlineKubeconfig
from engine.kube.lease import LeaseElector, probe_api_server
from engine.kube.ratelimit import TokenBucket
from engine.pools.common import NodeRemovalError
from engine.pools.labels import LabelPoolProvider
from tests import builders
from tests.builders import raw_pod

PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
POD = PodInfo(namespace="shop", name="web-1", uid="uid-1", node_name="n1")
EVICTION_PATH = "/api/v1/namespaces/shop/pods/web-1/eviction"

PAGE = str(PAGE_SIZE)
"""The `limit` of every list request (engine.kube.client.PAGE_SIZE)."""


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str
    authorization: str = ""
    user_agent: str = ""
    raw: bytes = b""
    """The body as it came over the wire."""


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    """A dict/list is sent as JSON, bytes as they are."""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    """Close the connection without answering."""


Route = Callable[[Seen], Answer]


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    """socketserver's default backlog (5) drops the SYNs of a burst of connections: the client
    retries them after a second or more, as a loaded API server never would."""


class FakeApiServer:
    """Routes (method, path) to scripted answers and records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.seen: list[Seen] = []
        self.connections = 0
        """TCP connections accepted (a kept-alive connection serves many requests)."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.connections += 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                seen = Seen(
                    method=self.command,
                    path=url.path,
                    query={k: v[0] for k, v in parse_qs(url.query).items()},
                    body=json.loads(raw) if raw else None,
                    content_type=self.headers.get("Content-Type", ""),
                    authorization=self.headers.get("Authorization", ""),
                    user_agent=self.headers.get("User-Agent", ""),
                    raw=raw,
                )
                with server._lock:
                    server.seen.append(seen)
                route = server.routes.get((self.command, url.path))
                answer = route(seen) if route else Answer(404, status_body(404, "NotFound", "no route"))
                if answer.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
                if answer.body is None:
                    payload = b""
                self.send_response(answer.status)
                content_type = "application/json" if not isinstance(answer.body, bytes) else "text/html"
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def do_PATCH(self) -> None:
                self._serve()

            def do_DELETE(self) -> None:
                self._serve()

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval only makes shutdown() quick; requests are served at once anyway.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def on(self, method: str, path: str, *answers: Answer | Route) -> None:
        """Answer in order; the last answer repeats. A callable decides from the request."""
        queue = list(answers)

        def route(seen: Seen) -> Answer:
            item = queue.pop(0) if len(queue) > 1 else queue[0]
            return item(seen) if callable(item) else item

        self.routes[(method, path)] = route

    def requests(self, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if method is None or s.method == method]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def raw_node(
    name: str, *, unschedulable: bool = False, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The shared raw node at resourceVersion 41 (what the taint patches are guarded by)."""
    return builders.raw_node(name, unschedulable=unschedulable, taints=taints or (), resource_version="41")


def write_kubeconfig(path: Path, server_url: str, *, contexts: tuple[str, ...] = ("alpha", "beta")) -> Path:
    lines = [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: local",
        "  cluster:",
        f"    server: {server_url}",
        "    insecure-skip-tls-verify: true",
        "users:",
        "- name: tester",
        "  user:",
        "    token: t0ken",
        "contexts:",
    ]
    for name in contexts:
        lines += [f"- name: {name}", "  context:", "    cluster: local", "    user: tester"]
    lines.append(f"current-context: {contexts[0]}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.close()


@pytest.fixture
def kubeconfig(tmp_path: Path, server: FakeApiServer) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", server.url)


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[KubeClient]:
    c = KubeClient.from_config(kubeconfig=str(kubeconfig))
    yield c
    c.close()


def test_kube_client_satisfies_the_kube_api_port(client: KubeClient) -> None:
    api: KubeApi = client
    assert api is client


@pytest.fixture(scope="module")
def offload_workers() -> Iterator[offload.Offload]:
    with offload.Offload(1) as workers:
        yield workers


@pytest.fixture(params=["in-process", "worker process"])
def send_route(request: pytest.FixtureRequest) -> Iterator[str]:
    """Evictions and pod deletions sent by this process, or by a worker process
    (`runner.eviction_processes`): the same requests on the wire, the same errors."""
    if request.param == "worker process":
        offload.install(request.getfixturevalue("offload_workers"))
    try:
        yield request.param
    finally:
        offload.install(None)


# -- evictions and error translation -----------------------------------------------------------


def test_eviction_posts_policy_v1_with_uid_precondition_and_grace(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    server.on("POST", EVICTION_PATH, Answer(201, {"kind": "Status", "status": "Success"}))
    client.evict_pod(POD, grace_seconds=5)
    (seen,) = server.requests("POST")
    assert seen.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "deleteOptions": {"gracePeriodSeconds": 5, "preconditions": {"uid": "uid-1"}},
    }
    assert client.request_counts == {("create", "pods/eviction"): 1}


@pytest.mark.parametrize("grace", [None, 0, 30])
@pytest.mark.parametrize("dry_run", [False, True])
def test_the_eviction_goes_out_as_the_generated_model_would_send_it(
    server: FakeApiServer, client: KubeClient, grace: int | None, dry_run: bool, send_route: str
) -> None:
    """The body is built as plain JSON (no model per eviction): what the generated V1Eviction
    serialised to, field order included (compact: no spaces after separators), and the dry run
    as the generated method sends it, in the query."""
    server.on("POST", EVICTION_PATH, Answer(201, {"kind": "Status", "status": "Success"}))
    if dry_run:
        client.dry_run_remove(POD, evict=True, grace_seconds=grace)
    else:
        client.evict_pod(POD, grace_seconds=grace)
    model = kubernetes.client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=kubernetes.client.V1ObjectMeta(name=POD.name, namespace=POD.namespace),
        delete_options=kubernetes.client.V1DeleteOptions(
            dry_run=["All"] if dry_run else None,
            preconditions=kubernetes.client.V1Preconditions(uid=POD.uid),
            grace_period_seconds=grace,
        ),
    )
    wire = _compact(kubernetes.client.ApiClient().sanitize_for_serialization(model))
    (seen,) = server.requests("POST")
    assert seen.raw == wire
    assert seen.query == ({"dryRun": "All"} if dry_run else {})
    assert seen.content_type == "application/json"


def test_delete_options_go_out_as_the_generated_model_would_send_them(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    server.on("DELETE", "/api/v1/namespaces/shop/pods/web-1", Answer(200, {"kind": "Status"}))
    client.delete_pod(POD, grace_seconds=0)
    client.dry_run_remove(POD, evict=False)
    models = [
        kubernetes.client.V1DeleteOptions(
            preconditions=kubernetes.client.V1Preconditions(uid=POD.uid), grace_period_seconds=0
        ),
        kubernetes.client.V1DeleteOptions(
            dry_run=["All"], preconditions=kubernetes.client.V1Preconditions(uid=POD.uid)
        ),
    ]
    sanitize = kubernetes.client.ApiClient().sanitize_for_serialization
    deletes = server.requests("DELETE")
    assert [s.raw for s in deletes] == [_compact(sanitize(m)) for m in models]
    assert [s.query for s in deletes] == [{}, {"dryRun": "All"}]


def _compact(body: Any) -> bytes:
    """JSON as scalebot sends it: the generated model's field order, no spaces after separators."""
    return json.dumps(body, separators=(",", ":")).encode()


def test_the_connections_of_a_drains_evictions_in_flight_are_kept_and_reused(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    """As many evictions as a drain keeps in flight, twice: the second round opens no connection
    (a pool smaller than the evictions in flight closes the extra connections after each answer,
    and every later eviction beyond the pool pays a TCP connect and a TLS handshake again)."""
    in_flight = RunnerSettings().max_parallel_evictions
    all_in = threading.Barrier(in_flight, timeout=10)

    def answer_when_all_are_in(seen: Seen) -> Answer:
        all_in.wait()
        return Answer(201, {"kind": "Status", "status": "Success"})

    server.on("POST", EVICTION_PATH, answer_when_all_are_in)
    with ThreadPoolExecutor(max_workers=in_flight) as workers:
        list(workers.map(lambda _: client.evict_pod(POD), range(in_flight)))
        assert server.connections == in_flight
        list(workers.map(lambda _: client.evict_pod(POD), range(in_flight)))
    assert len(server.requests("POST")) == 2 * in_flight
    assert server.connections == in_flight, "connections were opened again for the second round"


def test_pdb_429_maps_to_too_many_requests_with_the_cluster_api_key(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    cause = "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    body = status_body(
        429, "TooManyRequests", PDB_MESSAGE, {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    )
    server.on("POST", EVICTION_PATH, Answer(429, body))
    with pytest.raises(errors.TooManyRequests) as caught:
        client.evict_pod(POD)
    err = caught.value
    assert err.is_pdb_violation and err.has_details
    assert err.eviction_key == f"{PDB_MESSAGE} {cause}"
    assert err.retry_after_seconds is None
    assert isinstance(err.__cause__, kubernetes.client.ApiException)


def test_transient_pdb_429_keeps_retry_after_seconds(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    cause = {
        "reason": "DisruptionBudget",
        "message": "The disruption budget web-pdb is still being processed by the server.",
    }
    body = status_body(429, "TooManyRequests", PDB_MESSAGE, {"causes": [cause], "retryAfterSeconds": 10})
    server.on("POST", EVICTION_PATH, Answer(429, body, headers={"Retry-After": "10"}))
    with pytest.raises(errors.TooManyRequests) as caught:
        client.evict_pod(POD)
    assert caught.value.is_pdb_transient
    assert caught.value.retry_after_seconds == 10


def test_rate_limit_429_reads_the_retry_after_header_and_is_not_retried_by_urllib3(
    server: FakeApiServer, client: KubeClient
) -> None:
    body = status_body(429, "TooManyRequests", "Too many requests, please try again later.")
    server.on("GET", "/api/v1/nodes/n1", Answer(429, body, headers={"Retry-After": "3"}))
    with pytest.raises(errors.TooManyRequests) as caught:
        client.get_node("n1")
    err = caught.value
    assert err.retry_after_seconds == 3
    assert not err.is_pdb_violation and not err.has_details
    assert err.eviction_key == "Too many requests, please try again later."
    assert len(server.requests("GET")) == 1


def test_two_budgets_500_maps_to_server_error(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": errors.MULTIPLE_PDBS_MESSAGE, "code": 500}  # fmt: skip
    server.on("POST", EVICTION_PATH, Answer(500, body))
    with pytest.raises(errors.ServerError) as caught:
        client.evict_pod(POD)
    assert caught.value.is_multiple_pdbs
    assert caught.value.eviction_key == errors.MULTIPLE_PDBS_MESSAGE


def test_terminating_namespace_403_keeps_its_cause(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    details = {
        "name": "web-1",
        "kind": "pods",
        "causes": [{"reason": "NamespaceTerminating", "message": "namespace shop is being terminated",
                    "field": "metadata.namespace"}],
    }  # fmt: skip
    message = (
        'pods "web-1" is forbidden: '
        "unable to create new content in namespace shop because it is being terminated"
    )
    server.on("POST", EVICTION_PATH, Answer(403, status_body(403, "Forbidden", message, details)))
    with pytest.raises(errors.Forbidden) as caught:
        client.evict_pod(POD)
    assert caught.value.is_namespace_terminating
    assert caught.value.eviction_key == errors.TERMINATING_NAMESPACE_KEY


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (404, "NotFound", errors.NotFound),
        (409, "Conflict", errors.Conflict),
        (422, "Invalid", errors.InvalidRequest),
    ],
)
def test_status_codes_map_to_their_classes(
    server: FakeApiServer,
    client: KubeClient,
    status: int,
    reason: str,
    expected: type[errors.KubeError],
    send_route: str,
) -> None:
    # The API server's 404 for a pod names it in its details (a 404 without is an API it lacks).
    details = {"name": "web-1", "kind": "pods"} if status == 404 else None
    server.on("POST", EVICTION_PATH, Answer(status, status_body(status, reason, f"answer {status}", details)))
    with pytest.raises(expected) as caught:
        client.evict_pod(POD)
    assert caught.value.status == status
    assert caught.value.eviction_key == f"answer {status}"


def test_non_json_502_is_a_server_error_with_a_readable_message(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    server.on("POST", EVICTION_PATH, Answer(502, b"<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>"))
    with pytest.raises(errors.ServerError) as caught:
        client.evict_pod(POD)
    err = caught.value
    assert err.status == 502
    assert str(err).startswith(f"HTTP 502 Bad Gateway (create pods/eviction at {server.url}): <html>")
    assert "\n" not in str(err)


def test_empty_503_is_a_server_error(server: FakeApiServer, client: KubeClient) -> None:
    server.on("GET", "/api/v1/nodes/n1", Answer(503, None))
    with pytest.raises(errors.ServerError) as caught:
        client.get_node("n1")
    assert str(caught.value) == f"HTTP 503 Service Unavailable (get nodes at {server.url})", "which server"


def test_a_404_without_details_names_the_request_and_the_server(
    server: FakeApiServer, client: KubeClient
) -> None:
    """An API the server does not serve answers a bare Status ("the server could not find the
    requested resource"): the error says what was asked of which server, as kubectl's `(get nodes)`."""
    server.on("GET", "/api/v1/nodes/n1", Answer(404, status_body(404, "NotFound", NOT_SERVED)))
    with pytest.raises(errors.NotFound) as caught:
        client.get_node("n1")
    assert str(caught.value) == f"{NOT_SERVED} (get nodes at {server.url})"


NOT_SERVED = "the server could not find the requested resource"


def test_an_unreachable_server_is_named_by_its_url_in_one_line(
    client: KubeClient, server: FakeApiServer
) -> None:
    """Not urllib3's `HTTPSConnectionPool(host=…, port=…): Max retries exceeded with url: …`."""
    server.close()  # nothing listens on its port any more
    with pytest.raises(errors.TransportError) as caught:
        client.get_node("n1")
    assert str(caught.value).startswith(f"get nodes: {server.url}/api/v1/nodes/n1: "), str(caught.value)
    assert "ConnectionPool" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_dropped_connection_is_a_transport_error_never_not_found(
    server: FakeApiServer, client: KubeClient, send_route: str
) -> None:
    server.on("GET", "/api/v1/nodes/n1", Answer(drop=True))
    server.on("POST", EVICTION_PATH, Answer(drop=True))
    with pytest.raises(errors.TransportError) as read:
        client.get_node("n1")
    assert not isinstance(read.value, errors.NotFound)
    assert read.value.status == 0
    assert isinstance(read.value.__cause__, urllib3.exceptions.HTTPError)
    with pytest.raises(errors.TransportError) as write:
        client.evict_pod(POD)
    assert write.value.eviction_key.startswith("create pods/eviction: ")
    assert len(server.requests("POST")) == 1  # an eviction is never resent blindly


def test_a_refused_connection_is_a_transport_error(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    with KubeClient.from_config(kubeconfig=str(path)) as c, pytest.raises(errors.TransportError):
        c.list_nodes()


# -- lists -------------------------------------------------------------------------------------


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the client library builds a model from any answer."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a V1 model was deserialised")

    monkeypatch.setattr(kubernetes.client.ApiClient, "deserialize", refuse)
    # kubernetes 37's generator adds response_deserialize; older clients only have deserialize.
    monkeypatch.setattr(kubernetes.client.ApiClient, "response_deserialize", refuse, raising=False)


def test_list_pods_paginates_with_continue_as_raw_json(
    server: FakeApiServer, client: KubeClient, no_models: None
) -> None:
    def pages(seen: Seen) -> Answer:
        if seen.query.get("continue") == "tok-1":
            return Answer(200, {"metadata": {}, "items": [raw_pod("web-3", node="n2")]})
        return Answer(
            200,
            {
                "metadata": {"continue": "tok-1"},
                "items": [raw_pod("web-1", node="n1"), raw_pod("web-2", node="n1")],
            },
        )

    server.on("GET", "/api/v1/pods", pages)
    pods = client.list_pods()
    assert [(p.name, p.node_name, p.uid) for p in pods] == [
        ("web-1", "n1", "uid-web-1"),
        ("web-2", "n1", "uid-web-2"),
        ("web-3", "n2", "uid-web-3"),
    ]
    first, second = server.requests("GET")
    assert first.query == {"limit": PAGE}
    assert second.query == {"limit": PAGE, "continue": "tok-1"}
    assert client.request_counts == {("list", "pods"): 2}


def test_one_node_uses_a_field_selector_and_many_nodes_one_listing(
    server: FakeApiServer, client: KubeClient
) -> None:
    items = [
        raw_pod("a", node="n1"),
        raw_pod("b", node="n2"),
        raw_pod("c", node="n3"),
        raw_pod("pending", node=""),
    ]
    server.on("GET", "/api/v1/pods", Answer(200, {"metadata": {}, "items": items}))
    client.list_pods(node_names=["n1"])
    assert server.requests("GET")[0].query == {"limit": PAGE, "fieldSelector": "spec.nodeName=n1"}
    pods = client.list_pods(node_names={"n1", "n3"})
    assert [p.name for p in pods] == ["a", "c"]
    # Many nodes: one listing of the pods bound to any node (the unscheduled are never sent).
    assert server.requests("GET")[1].query == {"limit": PAGE, "fieldSelector": "spec.nodeName!="}
    assert client.list_pods(node_names=[]) == []
    assert len(server.requests()) == 2


def test_an_expired_continue_token_falls_back_to_one_full_list(
    server: FakeApiServer, client: KubeClient
) -> None:
    def pages(seen: Seen) -> Answer:
        if "continue" in seen.query:
            return Answer(410, status_body(410, "Expired", "The provided continue parameter is too old"))
        if "limit" in seen.query:
            return Answer(200, {"metadata": {"continue": "old"}, "items": [raw_pod("a", node="n1")]})
        return Answer(200, {"metadata": {}, "items": [raw_pod("a", node="n1"), raw_pod("b", node="n1")]})

    server.on("GET", "/api/v1/pods", pages)
    assert [p.name for p in client.list_pods()] == ["a", "b"]
    assert [s.query for s in server.requests()] == [{"limit": PAGE}, {"limit": PAGE, "continue": "old"}, {}]


def test_cluster_wide_lists_parse_raw_items(
    server: FakeApiServer, client: KubeClient, no_models: None
) -> None:
    pdb = {
        "metadata": {"name": "web-pdb", "namespace": "shop", "generation": 2},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {
            "disruptionsAllowed": 1,
            "currentHealthy": 3,
            "desiredHealthy": 2,
            "observedGeneration": 2,
        },
    }
    server.on("GET", "/apis/policy/v1/poddisruptionbudgets", Answer(200, {"metadata": {}, "items": [pdb]}))
    server.on(
        "GET",
        "/apis/apps/v1/daemonsets",
        Answer(200, {"metadata": {}, "items": [{"metadata": {"name": "fluentd", "namespace": "logging"}}]}),
    )
    namespaces = [{"metadata": {"name": "old"}, "status": {"phase": "Terminating"}},
                  {"metadata": {"name": "shop"}, "status": {"phase": "Active"}}]  # fmt: skip
    server.on("GET", "/api/v1/namespaces", Answer(200, {"metadata": {}, "items": namespaces}))
    server.on("GET", "/api/v1/nodes", Answer(200, {"metadata": {}, "items": [raw_node("n1")]}))
    (parsed,) = client.list_pdbs()
    assert (parsed.key, parsed.disruptions_allowed, parsed.is_observed) == ("shop/web-pdb", 1, True)
    assert client.list_daemonset_keys() == frozenset({"logging/fluentd"})
    assert client.list_terminating_namespaces() == frozenset({"old"})
    assert [n.name for n in client.list_nodes(label_selector="pool=a")] == ["n1"]
    assert server.requests()[-1].query == {"limit": PAGE, "labelSelector": "pool=a"}


# -- writes ------------------------------------------------------------------------------------


def test_cordon_reads_first_and_patches_only_when_needed(server: FakeApiServer, client: KubeClient) -> None:
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1", unschedulable=True)))
    server.on("GET", "/api/v1/nodes/n2", Answer(200, raw_node("n2")))
    server.on("PATCH", "/api/v1/nodes/n2", Answer(200, raw_node("n2", unschedulable=True)))
    assert client.set_unschedulable("n1", True) is False
    assert client.set_unschedulable("n2", True) is True
    (patch,) = server.requests("PATCH")
    assert patch.body == {"spec": {"unschedulable": True}}
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert client.request_counts == {("get", "nodes"): 2, ("patch", "nodes"): 1}


def test_taint_patch_is_guarded_by_resource_version_and_retried_on_conflict(
    server: FakeApiServer, client: KubeClient
) -> None:
    other = {"key": "team", "value": "x", "effect": "NoSchedule"}
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1", taints=[other])))
    conflict = status_body(
        409, "Conflict", 'Operation cannot be fulfilled on nodes "n1": the object has been modified'
    )
    server.on("PATCH", "/api/v1/nodes/n1", Answer(409, conflict), Answer(200, raw_node("n1")))
    assert client.set_taint(
        "n1", "scalebot.io/draining", value="1700000000", effect="NoSchedule", present=True
    )
    patches = server.requests("PATCH")
    assert len(patches) == 2 and len(server.requests("GET")) == 2
    assert patches[-1].content_type == "application/merge-patch+json"
    assert patches[-1].body == {
        "metadata": {"resourceVersion": "41"},
        "spec": {
            "taints": [other, {"key": "scalebot.io/draining", "effect": "NoSchedule", "value": "1700000000"}]
        },
    }


def test_taint_already_present_or_absent_writes_nothing(server: FakeApiServer, client: KubeClient) -> None:
    draining = {"key": "scalebot.io/draining", "value": "1", "effect": "NoSchedule"}
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1", taints=[draining])))
    assert not client.set_taint("n1", "scalebot.io/draining", value="2", effect="NoSchedule", present=True)
    assert not client.set_taint("n1", "other", value="", effect="NoSchedule", present=False)
    assert server.requests("PATCH") == []


def test_cordon_with_taint_is_one_read_and_one_guarded_write(
    server: FakeApiServer, client: KubeClient
) -> None:
    other = {"key": "team", "value": "x", "effect": "NoSchedule"}
    draining = {"key": "scalebot.io/draining", "value": "1", "effect": "NoSchedule"}
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1", taints=[other])))
    server.on("GET", "/api/v1/nodes/n2", Answer(200, raw_node("n2", unschedulable=True, taints=[draining])))
    server.on("GET", "/api/v1/nodes/n3", Answer(200, raw_node("n3", unschedulable=True)))
    conflict = status_body(409, "Conflict", "the object has been modified")
    server.on("PATCH", "/api/v1/nodes/n1", Answer(409, conflict), Answer(200, raw_node("n1")))
    server.on("PATCH", "/api/v1/nodes/n3", Answer(200, raw_node("n3")))
    kwargs = {"taint_key": "scalebot.io/draining", "taint_value": "7", "taint_effect": "NoSchedule"}

    fresh = client.cordon("n1", **kwargs)
    assert (fresh.had_taint, fresh.was_unschedulable, fresh.cordoned_by_someone_else) == (False, False, False)
    # A conflict re-reads and retries; the write carries both changes and the resourceVersion read.
    patches = server.requests("PATCH")
    assert len(patches) == 2 and patches[-1].content_type == "application/merge-patch+json"
    assert patches[-1].body == {
        "metadata": {"resourceVersion": "41"},
        "spec": {
            "taints": [other, {"key": "scalebot.io/draining", "effect": "NoSchedule", "value": "7"}],
            "unschedulable": True,
        },
    }
    # Ours already (a repeat after a crash): nothing to write, and not someone else's cordon.
    ours = client.cordon("n2", **kwargs)
    assert (ours.had_taint, ours.cordoned_by_someone_else) == (True, False)
    assert len(server.requests("PATCH")) == 2
    # A human's cordon: we add the taint and remember that the cordon was theirs.
    theirs = client.cordon("n3", **kwargs)
    assert theirs.cordoned_by_someone_else
    assert server.requests("PATCH")[-1].body["spec"]["unschedulable"] is True


def test_cordon_many_reads_the_nodes_in_one_listing_and_a_node_again_only_on_a_conflict(
    server: FakeApiServer, client: KubeClient
) -> None:
    other = {"key": "team", "value": "x", "effect": "NoSchedule"}
    theirs = {"key": "someone/else", "value": "y", "effect": "NoSchedule"}
    draining = {"key": "scalebot.io/draining", "value": "1", "effect": "NoSchedule"}
    listing = {
        "metadata": {"resourceVersion": "50"},
        "items": [
            raw_node("n1", taints=[other]),
            raw_node("n2", unschedulable=True, taints=[draining]),
            raw_node("n3", unschedulable=True),
            raw_node("elsewhere"),
        ],
    }
    server.on("GET", "/api/v1/nodes", Answer(200, listing))
    # n1 was written by someone else after the listing: its patch meets 409, the GET shows their taint.
    fresh_n1 = raw_node("n1", taints=[other, theirs])
    fresh_n1["metadata"]["resourceVersion"] = "60"
    server.on("GET", "/api/v1/nodes/n1", Answer(200, fresh_n1))
    conflict = status_body(409, "Conflict", "the object has been modified")
    server.on("PATCH", "/api/v1/nodes/n1", Answer(409, conflict), Answer(200, raw_node("n1")))
    server.on("PATCH", "/api/v1/nodes/n3", Answer(200, raw_node("n3")))
    kwargs = {"taint_key": "scalebot.io/draining", "taint_value": "7", "taint_effect": "NoSchedule"}

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = client.cordon_many(["n1", "n2", "n3", "gone"], executor=pool, **kwargs)

    assert sorted(results) == ["n1", "n2", "n3"], "a node that does not exist is absent"
    assert (results["n1"].had_taint, results["n1"].cordoned_by_someone_else) == (False, False)
    assert (results["n2"].had_taint, results["n2"].cordoned_by_someone_else) == (True, False)
    assert results["n3"].cordoned_by_someone_else
    gets = server.requests("GET")
    assert [g.path for g in gets].count("/api/v1/nodes") == 1
    assert "fieldSelector" not in gets[0].query, "many nodes: the listing of every node"
    assert [g.path for g in gets if g.path.startswith("/api/v1/nodes/")] == ["/api/v1/nodes/n1"]
    n1_patches = [p for p in server.requests("PATCH") if p.path == "/api/v1/nodes/n1"]
    # The first write carries the listed resourceVersion; the retry the re-read one and their taint.
    assert [p.body["metadata"]["resourceVersion"] for p in n1_patches] == ["41", "60"]
    assert n1_patches[-1].body["spec"]["taints"] == [
        other,
        theirs,
        {"key": "scalebot.io/draining", "effect": "NoSchedule", "value": "7"},
    ]
    assert [p.path for p in server.requests("PATCH")].count("/api/v1/nodes/n2") == 0
    assert client.request_counts[("get", "nodes")] == 1


def test_cordon_many_of_one_node_lists_it_by_name(server: FakeApiServer, client: KubeClient) -> None:
    server.on("GET", "/api/v1/nodes", Answer(200, {"metadata": {}, "items": [raw_node("n1")]}))
    server.on("PATCH", "/api/v1/nodes/n1", Answer(200, raw_node("n1")))
    kwargs = {"taint_key": "scalebot.io/draining", "taint_value": "7", "taint_effect": "NoSchedule"}
    assert list(client.cordon_many(["n1"], **kwargs)) == ["n1"]
    (listing,) = server.requests("GET")
    assert listing.query["fieldSelector"] == "metadata.name=n1"
    assert client.cordon_many([], **kwargs) == {}
    assert client.request_counts == {("list", "nodes"): 1, ("patch", "nodes"): 1}


def test_label_pool_reads_named_nodes_from_its_listing_and_gets_only_the_missing_ones(
    server: FakeApiServer, client: KubeClient
) -> None:
    """Node removal reads the pool in one listing; a named node not in it is read on its own, to
    tell a node that is gone (skipped) from one in another pool (refused)."""
    cordoned = {"key": "scalebot.io/draining", "value": "1", "effect": "NoSchedule"}

    def pool_node(name: str, pool: str) -> dict[str, Any]:
        raw = raw_node(name, unschedulable=True, taints=[cordoned])
        raw["metadata"]["labels"] = {"scalebot.io/pool": pool}
        raw["metadata"]["annotations"] = {"kwok.x-k8s.io/node": "fake"}
        return raw

    listing = {"metadata": {}, "items": [pool_node("a-1", "a"), pool_node("a-2", "a"), pool_node("a-3", "a")]}
    server.on("GET", "/api/v1/nodes", Answer(200, listing))
    server.on("GET", "/api/v1/nodes/b-1", Answer(200, pool_node("b-1", "b")))
    cm = "/api/v1/namespaces/scalebot/configmaps/scalebot-pool-a"
    server.on("GET", cm, Answer(200, {"metadata": {"name": "scalebot-pool-a", "resourceVersion": "3"}}))
    server.on("PATCH", cm, Answer(200, {}))
    server.on("DELETE", "/api/v1/nodes/a-1", Answer(200, {}))
    server.on("DELETE", "/api/v1/nodes/a-2", Answer(200, {}))
    # Each node is marked as being removed just before its deletion (the admission policy asks for it).
    server.on("PATCH", "/api/v1/nodes/a-1", Answer(200, pool_node("a-1", "a")))
    server.on("PATCH", "/api/v1/nodes/a-2", Answer(200, pool_node("a-2", "a")))
    provider = LabelPoolProvider(client, client.api_client, namespace="scalebot")

    provider.prepare_removal("a", ["a-1", "a-2", "gone"])
    provider.remove_nodes("a", ["a-1", "a-2", "gone"])
    assert [d.path for d in server.requests("DELETE")] == ["/api/v1/nodes/a-1", "/api/v1/nodes/a-2"]
    node_gets = [g.path for g in server.requests("GET") if g.path.startswith("/api/v1/nodes/")]
    assert node_gets == ["/api/v1/nodes/gone", "/api/v1/nodes/gone"], "only the one not listed"
    listings = [g for g in server.requests("GET") if g.path == "/api/v1/nodes"]
    assert len(listings) == 2 and {g.query["labelSelector"] for g in listings} == {"scalebot.io/pool=a"}

    with pytest.raises(NodeRemovalError, match="node b-1 is not in label pool a"):
        provider.remove_nodes("a", ["a-3", "b-1"])
    assert len(server.requests("DELETE")) == 2, "nothing deleted on a refusal"


def test_delete_pod_sends_uid_precondition_and_grace(server: FakeApiServer, client: KubeClient) -> None:
    server.on("DELETE", "/api/v1/namespaces/shop/pods/web-1", Answer(200, raw_pod("web-1", node="n1")))
    server.on("DELETE", "/api/v1/nodes/n1", Answer(200, {"kind": "Status", "status": "Success"}))
    client.delete_pod(POD, grace_seconds=0)
    client.delete_node("n1")
    pod_delete, node_delete = server.requests("DELETE")
    assert pod_delete.body == {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-1"}}
    assert node_delete.path == "/api/v1/nodes/n1"
    assert client.request_counts == {("delete", "pods"): 1, ("delete", "nodes"): 1}
    with pytest.raises(ValueError, match="UID"):
        client.delete_pod(PodInfo(namespace="shop", name="x", uid=""))


def test_every_request_takes_a_token_from_the_rate_limiter(server: FakeApiServer, kubeconfig: Path) -> None:
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1")))
    slept: list[float] = []
    limiter = TokenBucket(rate=2.0, burst=1, clock=lambda: 0.0, sleep=slept.append)
    api_client = kubernetes.client.ApiClient(load_configuration(kubeconfig=str(kubeconfig)))
    waits: list[float] = []
    with KubeClient(api_client, rate_limiter=limiter) as c:
        for _ in range(3):
            c.get_node("n1")
            waits.append(c.last_wait_seconds())
    assert slept == [0.5, 1.0]
    # What adaptive concurrency takes out of each answer time: the wait in the client's own limiter.
    assert waits == [0.0, 0.5, 1.0]


def test_pool_provider_calls_share_the_clusters_rate_limiter_and_counts(
    server: FakeApiServer, kubeconfig: Path
) -> None:
    """The providers' raw calls over the cluster's ApiClient take tokens from the same bucket as
    KubeClient's own requests (api_qps/api_burst bound everything scalebot sends)."""
    server.on("GET", "/api/v1/nodes", Answer(200, {"items": [], "metadata": {}}))
    server.on("GET", "/api/v1/namespaces/scalebot/configmaps", Answer(200, {"items": [], "metadata": {}}))
    slept: list[float] = []
    limiter = TokenBucket(rate=1.0, burst=1, clock=lambda: 0.0, sleep=slept.append)
    api_client = kubernetes.client.ApiClient(load_configuration(kubeconfig=str(kubeconfig)))
    with KubeClient(api_client, rate_limiter=limiter) as kube:
        provider = LabelPoolProvider(kube, kube.api_client, namespace="scalebot")
        assert provider.list_pools() == []
        assert kube.request_counts == {("list", "nodes"): 1, ("list", "configmaps"): 1}
    assert slept == [1.0], "the second request waited for the one token the first one took"


def test_lease_and_readiness_probe_do_not_wait_behind_a_saturated_limiter_but_events_do(
    server: FakeApiServer, kubeconfig: Path
) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/scalebot/leases"
    server.on("POST", leases, lambda seen: Answer(201, {**seen.body, "metadata": {"resourceVersion": "1"}}))
    server.on("GET", "/readyz", Answer(200, b"ok"))
    server.on("POST", "/api/v1/namespaces/default/events", Answer(201, {}))
    slept: list[float] = []
    # A frozen clock: once the one token is taken, every main-budget request waits (and says so).
    limiter = TokenBucket(rate=1.0, burst=1, clock=lambda: 0.0, sleep=slept.append)
    api_client = kubernetes.client.ApiClient(load_configuration(kubeconfig=str(kubeconfig)))
    with KubeClient(api_client, rate_limiter=limiter) as kube:
        assert limiter.try_acquire(), "the drain took the bucket's last token"
        elector = LeaseElector(kube.api_client, namespace="scalebot", identity="me")
        assert elector.try_acquire_or_renew()
        probe_api_server(kube.api_client)
        assert slept == [], "the Lease and the probe have their own budget"
        recorder = EventRecorder(kube.api_client)
        try:
            recorder.record(ObjectRef.node("n1"), reason="Cordoned", message="by scalebot")
            assert recorder.flush(10.0)
        finally:
            recorder.close()
        assert slept == [1.0], "events wait their turn on the main budget"
        assert kube.request_counts == {
            ("get", "leases"): 1,
            ("create", "leases"): 1,
            ("get", "/readyz"): 1,
            ("create", "events"): 1,
        }


# -- configuration -----------------------------------------------------------------------------


def test_unknown_context_names_it_and_lists_the_valid_ones(kubeconfig: Path) -> None:
    with pytest.raises(KubeConfigError) as caught:
        KubeClient.from_config(kubeconfig=str(kubeconfig), context="gamma")
    message = str(caught.value)
    assert "'gamma'" in message and "alpha, beta" in message
    assert "\n" not in message


def test_an_explicit_context_is_used(server: FakeApiServer, kubeconfig: Path) -> None:
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1")))
    with KubeClient.from_config(kubeconfig=str(kubeconfig), context="beta") as c:
        assert c.get_node("n1").name == "n1"


def test_a_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="does not exist"):
        KubeClient.from_config(kubeconfig=str(tmp_path / "nope"))


def test_kubeconfig_env_is_used_when_no_path_is_given(
    server: FakeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    server.on("GET", "/api/v1/nodes/n1", Answer(200, raw_node("n1")))
    with KubeClient.from_config() as c:
        assert c.get_node("n1").name == "n1"


def test_no_configuration_at_all_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="no Kubernetes configuration found"):
        KubeClient.from_config()
    with pytest.raises(KubeConfigError, match="no kubeconfig was found"):
        KubeClient.from_config(context="prod")


def test_the_next_page_is_on_its_way_while_this_one_is_decoded(
    server: FakeApiServer, client: KubeClient
) -> None:
    second_requested = threading.Event()

    def pages(seen: Seen) -> Answer:
        if seen.query.get("continue") == "tok-1":
            second_requested.set()
            return Answer(200, {"metadata": {"resourceVersion": "7"}, "items": [raw_pod("c", node="n2")]})
        return Answer(
            200,
            {"metadata": {"resourceVersion": "7", "continue": "tok-1"}, "items": [raw_pod("a", node="n1")]},
        )

    overlapped: list[bool] = []

    def decode(data: bytes) -> Any:
        if b"tok-1" in data:
            # Page 1 is being decoded: page 2 must already have been asked for.
            overlapped.append(second_requested.wait(5))
        return json.loads(data)

    server.on("GET", "/api/v1/pods", pages)
    call = client._core.list_pod_for_all_namespaces
    names = client.list_raw("pods", call, lambda raw: raw["metadata"]["name"], decode=decode)
    assert names == ["a", "c"]
    assert overlapped == [True]
    assert client.request_counts == {("list", "pods"): 2}


def test_a_pod_watch_reads_events_line_by_line_and_stops_on_410(
    server: FakeApiServer, client: KubeClient
) -> None:
    def event(kind: str, obj: dict[str, Any]) -> bytes:
        return json.dumps({"type": kind, "object": obj}).encode() + b"\n"

    def versioned(pod: dict[str, Any], version: str) -> dict[str, Any]:
        return {**pod, "metadata": {**pod["metadata"], "resourceVersion": version}}

    stream = (
        event("ADDED", versioned(raw_pod("a", node="n1"), "11"))
        + event("MODIFIED", versioned(raw_pod("elsewhere", node="n9"), "12"))
        + event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "13"}})
        + event("DELETED", versioned(raw_pod("a", node="n1"), "14"))
        + event("ERROR", status_body(410, "Expired", "too old resource version: 10 (14)"))
    )
    server.on("GET", "/api/v1/pods", Answer(200, stream))
    watch = client.watch_pods(node_names={"n1", "n2"}, resource_version="10")
    seen: list[tuple[str, str | None, str]] = []
    with pytest.raises(errors.KubeError) as gone:
        for e in watch:
            seen.append((e.type, e.pod.name if e.pod else None, e.resource_version))
    assert gone.value.status == 410
    assert seen == [
        ("ADDED", "a", "11"),
        ("BOOKMARK", None, "12"),
        ("BOOKMARK", None, "13"),
        ("DELETED", "a", "14"),
    ]
    query = server.requests("GET")[0].query
    assert query["watch"].lower() == "true" and query["resourceVersion"] == "10"
    assert query["allowWatchBookmarks"].lower() == "true" and query["fieldSelector"] == "spec.nodeName!="
    assert client.request_counts[("watch", "pods")] == 1


def test_a_watch_cut_inside_an_event_is_a_transport_error(server: FakeApiServer, client: KubeClient) -> None:
    server.on("GET", "/api/v1/pods", Answer(200, b'{"type": "ADDED", "object": {"metadata": {'))
    with pytest.raises(errors.TransportError):
        list(client.watch_pods(node_names={"n1"}, resource_version="1"))


def test_a_401_reads_the_kubeconfig_again_once_for_all_parallel_requests_and_retries_once(
    server: FakeApiServer, tmp_path: Path
) -> None:
    """Rotated credentials (a Cluster API kubeconfig Secret): the requests refused with the old token
    cause one re-read between them and are each sent once more with the new token; when the new
    token is refused too, the 401 is the caller's after that one retry (no loop)."""
    # Built directly: the fake server speaks plain http, which the Secret's parser refuses.
    old = InlineKubeconfig(server=server.url, token="t0ken")
    new = InlineKubeconfig(server=server.url, token="rotated")
    accepted = {"Bearer rotated"}
    server.on(
        "GET",
        "/api/v1/nodes",
        lambda seen: (
            Answer(200, {"items": [raw_node("n1")], "metadata": {}})
            if seen.authorization in accepted
            else Answer(401, status_body(401, "Unauthorized", "Unauthorized"))
        ),
    )
    rereads: list[InlineKubeconfig] = []

    def reread() -> InlineKubeconfig:
        rereads.append(new)
        return new

    client = KubeClient.from_inline_kubeconfig(old, reread=reread)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            listed = list(pool.map(lambda _: client.list_nodes(), range(8)))
        assert [[n.name for n in nodes] for nodes in listed] == [["n1"]] * 8
        assert len(rereads) == 1, "one re-read for every request refused with the same credentials"
        assert {s.authorization for s in server.requests()} == {"Bearer t0ken", "Bearer rotated"}

        accepted.clear()  # the Secret's credentials are dead as well
        before = len(server.requests())
        with pytest.raises(errors.KubeError) as refused:
            client.list_nodes()
        assert refused.value.status == 401
        assert len(rereads) == 2 and len(server.requests()) - before == 2, "one retry, no loop"
    finally:
        client.close()


def test_evictions_and_deletions_carry_the_clients_credentials_and_rotate_them_on_a_401(
    server: FakeApiServer,
    send_route: str,
) -> None:
    """The drain's hot path (`Transport.send_json`, straight to the connection pool) sends what
    every generated request sends: the bearer token as the configuration gives it now (rotated on a
    401 and sent once more), scalebot's User-Agent, and a JSON content type."""
    old = InlineKubeconfig(server=server.url, token="t0ken")
    new = InlineKubeconfig(server=server.url, token="rotated")
    for method, path in (("POST", EVICTION_PATH), ("DELETE", "/api/v1/namespaces/shop/pods/web-1")):
        server.on(
            method,
            path,
            lambda seen: (
                Answer(201, {"kind": "Status", "status": "Success"})
                if seen.authorization == "Bearer rotated"
                else Answer(401, status_body(401, "Unauthorized", "Unauthorized"))
            ),
        )
    rereads: list[InlineKubeconfig] = []
    client = KubeClient.from_inline_kubeconfig(old, reread=lambda: rereads.append(new) or new)
    try:
        client.evict_pod(POD)
        client.delete_pod(POD, grace_seconds=0)
    finally:
        client.close()
    seen = server.requests()
    assert [(s.method, s.authorization) for s in seen] == [
        ("POST", "Bearer t0ken"),
        ("POST", "Bearer rotated"),
        ("DELETE", "Bearer rotated"),
    ]
    assert len(rereads) == 1
    assert {s.user_agent for s in seen} == {USER_AGENT}
    assert {s.content_type for s in seen} == {"application/json"}
    assert client.request_counts == {("create", "pods/eviction"): 2, ("delete", "pods"): 1}


def test_without_a_way_to_reread_a_401_is_an_error_at_once(server: FakeApiServer, kubeconfig: Path) -> None:
    server.on("GET", "/api/v1/nodes", Answer(401, status_body(401, "Unauthorized", "Unauthorized")))
    client = KubeClient.from_config(kubeconfig=str(kubeconfig))
    try:
        with pytest.raises(errors.KubeError, match="Unauthorized"):
            client.list_nodes()
        assert len(server.requests()) == 1
    finally:
        client.close()


# -- evictions sent by worker processes (runner.eviction_processes) ----------------------------


def test_a_worker_process_that_dies_fails_the_requests_in_its_hands_and_another_takes_over(
    server: FakeApiServer, client: KubeClient
) -> None:
    """A worker killed with an eviction in hand: that eviction is a transport error (the drain's
    next pass looks at the pod again, as after a dropped connection), never lost or left waiting;
    the next eviction starts a new worker and succeeds."""
    arrived, release = threading.Event(), threading.Event()

    def held(_: Seen) -> Answer:
        arrived.set()
        release.wait(timeout=30)
        return Answer(201, {"kind": "Status", "status": "Success"})

    server.on("POST", EVICTION_PATH, held)
    with offload.Offload(1) as workers:
        offload.install(workers)
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                eviction = pool.submit(client.evict_pod, POD)
                assert arrived.wait(timeout=30)
                (first,) = workers.worker_pids()
                os.kill(first, signal.SIGKILL)
                with pytest.raises(errors.TransportError, match="worker process exited"):
                    eviction.result(timeout=30)
            release.set()
            client.evict_pod(POD)
            (second,) = workers.worker_pids()
        finally:
            offload.install(None)
    assert second != first
    assert len(server.requests("POST")) == 2
    assert not Path(f"/proc/{second}").exists(), "close ends its workers"


@pytest.mark.parametrize("proxy", [None, "http://proxy.example:3128"])
def test_a_worker_builds_its_connection_pool_as_the_clients_own(proxy: str | None, tmp_path: Path) -> None:
    """TLS verification, CA and client certificate files, SNI name, retry policy, pool size and
    proxy: copied from the ApiClient's pool, through the pipe (pickled) as a worker receives them."""
    configuration = kubernetes.client.Configuration()
    configuration.host = "https://api.example:6443"
    configuration.verify_ssl = True
    configuration.ssl_ca_cert = str(tmp_path / "ca.crt")
    configuration.cert_file = str(tmp_path / "client.crt")
    configuration.key_file = str(tmp_path / "client.key")
    configuration.tls_server_name = "kubernetes.default"
    configuration.proxy = proxy
    configuration.connection_pool_maxsize = 144
    configuration.retries = urllib3.Retry(total=2, connect=2, read=1, status=0, other=0, redirect=0)
    theirs = kubernetes.client.rest.RESTClientObject(configuration).pool_manager
    ours = offload_worker.build_pool(pickle.loads(pickle.dumps(offload_worker.pool_settings(theirs))))
    assert type(ours) is type(theirs)

    def comparable(kw: dict[str, Any]) -> dict[str, Any]:
        return {k: repr(v) if k in ("retries", "_proxy", "_proxy_config") else v for k, v in kw.items()}

    assert comparable(ours.connection_pool_kw) == comparable(theirs.connection_pool_kw)
    assert ours.connection_pool_kw["ca_certs"] == configuration.ssl_ca_cert
    assert ours.connection_pool_kw["server_hostname"] == "kubernetes.default"
    if proxy is not None:
        assert isinstance(ours, urllib3.ProxyManager) and str(ours.proxy) == proxy

"""The one way a request reaches one cluster's API server (`Transport`): the connection pool and the
retry policy of the `ApiClient` (`tuned_configuration`), the client-side rate limit
(`engine.kube.ratelimit.TokenBucket`, with a separate budget for the requests that keep this
instance alive), per-(verb, resource) request counts that benchmarks report as API cost, the raw
answer (`_preload_content=False`: the generated models are never built), the reload of rotated
credentials on a 401, and the translation of errors, once (architecture rule 5): `ApiException`
becomes the `engine.kube.errors` subclass for its status and Status body, and any failure without
an HTTP answer becomes `TransportError`, so a dropped connection is never mistaken for NotFound.
"""

from __future__ import annotations

import collections
import http.client
import threading
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import orjson
import urllib3
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException

from engine.domain.model import RawObject
from engine.domain.settings import MAX_EVICTIONS_IN_FLIGHT
from engine.kube import errors, offload, projection, ratelimit
from engine.kube.config import KubeConfigError, one_line
from engine.kube.offload_worker import transport_line
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS

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

# Failures that mean no HTTP answer arrived (or it was cut off). urllib3's HTTPError is the base
# of MaxRetryError, ProtocolError, its TimeoutErrors and SSLError; OSError covers socket and ssl.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)


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
        return parse_answer(verb, resource, data, orjson.loads) if data else {}

    def send_json(
        self,
        method: str,
        path: str,
        body: Any,
        *,
        verb: str,
        resource: str,
        query: str = "",
        timeout: float | None = None,
    ) -> bytes:
        """A request of the drain's hot path (an eviction, a pod's DELETE; `body` plain JSON, sent
        compact) straight to the ApiClient's connection pool, its answer raw. The same pool, retry
        policy, TLS, proxy, User-Agent and credentials (refreshed as the generated client refreshes
        them, rotated on a 401 by `read`) as every other request; not the generated client's layers
        (parameter checks, model serialisation, header sanitising), which evictions by the thousand
        need not pay. A non-2xx answer and a failure to send are translated as for any request."""
        path_and_query = path + (f"?{query}" if query else "")
        workers = offload.current()
        if workers is not None:
            call = partial(self._offloaded, workers, method, path_and_query, orjson.dumps(body))
        else:
            call = partial(self._urlopen, method, path_and_query, orjson.dumps(body))
        return self.read(verb, resource, call, timeout=timeout)

    def _headers(self, api_client: Any) -> dict[str, str]:
        """What every request of this ApiClient carries: its default headers (the User-Agent) and
        its credentials as they are now (an exec plugin's token is refreshed here when it expires)."""
        headers = {
            **api_client.default_headers,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        api_client.update_params_for_auth(headers, None, ["BearerToken"])
        return headers

    def _urlopen(
        self,
        method: str,
        path_and_query: str,
        body: bytes,
        *,
        _preload_content: bool,
        _request_timeout: float,
    ) -> Any:
        api_client = self._api_client()
        response = api_client.rest_client.pool_manager.urlopen(
            method,
            api_client.configuration.host + path_and_query,
            body=body,
            headers=self._headers(api_client),
            preload_content=_preload_content,
            timeout=urllib3.Timeout(total=_request_timeout),
        )
        if not 200 <= response.status <= 299:
            response.data  # noqa: B018 -- read (and kept) here: ApiException takes the Status body from it
            response.release_conn()
            raise ApiException(http_resp=response)
        return response

    def _offloaded(
        self,
        workers: offload.Offload,
        method: str,
        path_and_query: str,
        body: bytes,
        *,
        _preload_content: bool,
        _request_timeout: float,
    ) -> _Answered:
        """`_urlopen` sent by a worker process (`engine.kube.offload`) with this ApiClient's pool
        settings and headers; a non-2xx answer raised as the generated client raises it."""
        api_client = self._api_client()
        answer = workers.request(
            api_client.rest_client.pool_manager,
            method=method,
            url=api_client.configuration.host + path_and_query,
            headers=self._headers(api_client),
            body=body,
            timeout=_request_timeout,
        )
        if not 200 <= answer.status <= 299:
            exc = ApiException(status=answer.status, reason=answer.reason)
            exc.body = answer.body
            exc.headers = {"Retry-After": answer.retry_after} if answer.retry_after is not None else {}
            raise exc
        return _Answered(answer.body)

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
            raise error_from_api_exception(exc, verb, resource, server=self._server()) from exc
        except TRANSPORT_ERRORS as exc:
            raise errors.TransportError(message=f"{verb} {resource}: {transport_line(exc)}") from exc

    def _server(self) -> str:
        """The API server's URL (the kubeconfig's `server`), named in errors without a Status."""
        api_client = self._api_client_ref()
        return str(getattr(getattr(api_client, "configuration", None), "host", "") or "")

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
            raise errors.TransportError(message=f"{verb} {resource}: {one_line(exc)}") from exc
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


class _Answered:
    """A worker's 2xx answer where `Transport._read` expects urllib3's response: its body, read."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        """The worker's connection went back to its pool when it read the answer."""


def parse_answer(verb: str, resource: str, data: bytes, decode: Callable[[bytes], Any]) -> RawObject:
    try:
        parsed = decode(data)
    except (orjson.JSONDecodeError, projection.ProjectionError) as exc:
        # A 2xx whose body is not JSON was garbled on the way (proxy, truncation): no answer.
        raise errors.TransportError(message=f"{verb} {resource}: unreadable response: {exc}") from exc
    if not isinstance(parsed, dict):
        raise errors.TransportError(message=f"{verb} {resource}: response is not a JSON object")
    return parsed


def tuned_configuration(configuration: Any, connection_pool_maxsize: int) -> Any:
    configuration.connection_pool_maxsize = connection_pool_maxsize
    # One retry policy, the runner's: urllib3 would otherwise sleep on Retry-After and retry
    # 429/503 itself, invisibly to our counters and backoff. Connection failures are retried
    # (nothing was sent); a read failure only for idempotent methods (urllib3's rule).
    configuration.retries = urllib3.Retry(
        total=2, connect=2, read=1, status=0, other=0, redirect=0, respect_retry_after_header=False
    )
    configuration.client_go_retries = False
    return configuration


def error_from_api_exception(
    exc: ApiException, verb: str, resource: str, *, server: str = ""
) -> errors.KubeError:
    """The error of an HTTP answer. An answer that is not the API server's Status (a proxy's HTML
    page, an empty body) or a 404 without details (an API the server does not serve: "the server
    could not find the requested resource") says which server answered and to what, as kubectl
    does (`(get nodes)`); other Status messages stay the server's own (callers match on them)."""
    status = int(exc.status or 0)
    if status == 0:
        # The client's own wrapper for an SSL failure: no HTTP answer arrived.
        where = f" ({server})" if server else ""
        return errors.TransportError(message=f"{verb} {resource}{where}: {one_line(exc.reason or exc)}")
    body = _status_body(exc.body, status, exc.reason, where=_where(verb, resource, server))
    err = errors.error_from_status(status, body)
    if err.retry_after_seconds is None:
        err.retry_after_seconds = _retry_after_header(exc.headers)
    return err


def _where(verb: str, resource: str, server: str) -> str:
    return f"{verb} {resource} at {server}" if server else f"{verb} {resource}"


def _status_body(
    body: str | bytes | None, status: int, http_reason: str | None, *, where: str = ""
) -> Mapping[str, Any]:
    """The Status object of an error answer; a proxy's HTML or an empty body gets a short message.
    `where` (the request and the server) is added where the message would not say what failed."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and (parsed.get("kind") == "Status" or "message" in parsed):
        if where and status == 404 and not parsed.get("details") and parsed.get("message"):
            return {**parsed, "message": f"{parsed['message']} ({where})"}
        return parsed
    summary = f"HTTP {status} {http_reason or ''}".strip() + (f" ({where})" if where else "")
    snippet = " ".join(text.split())[:200]
    return {"message": f"{summary}: {snippet}" if snippet else summary}


def _retry_after_header(headers: Mapping[str, str] | None) -> int | None:
    value = (headers or {}).get("Retry-After")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # an HTTP-date; the API server only sends seconds

"""The health port: `/healthz`, `/readyz` and `/metrics` on a small stdlib HTTP server.

- `/healthz`: the process is alive and can do its work (the liveness probe): 200 "ok", or 503
  with the failing liveness checks in the same `[-]name failed: why` format. These are in-memory
  checks that only a restart can clear, such as `runner_healthy`: an operation stopped because
  the database could not be written (disk full); a restart resumes it once there is space.
- `/readyz`: every readiness check passes (the readiness probe); 200, or 503 with the failing
  checks listed, in the API server's own `[+]name ok` / `[-]name failed: why` format.
- `/metrics`: the Prometheus exposition of one `CollectorRegistry` (bot.runtime.metrics), in the format
  the scraper asks for (text or OpenMetrics).

A readiness check is a callable that returns (anything but False) when healthy and raises or
returns False when not; a healthy check that returns text has it shown on its line
(`[+]field_policy/<cluster> ok: absent: ...`); the standard ones are built here: `database_writable(store)`,
`kubernetes_reachable(api_client)` and `slack_connected(is_connected)`. Checks run in parallel,
each bounded by `check_timeout`, so one hung dependency (a locked database) turns /readyz into a
prompt 503 instead of a probe timeout; a check still running from an earlier probe is not started
again, so a hung dependency never piles up threads.

The port is bounded, because anything that can reach it can hold it open: every connection gets
`read_timeout` seconds per read (an idle or trickling client is closed, and its thread ends), and at
most `max_connections` are open at once. When the bound is reached, a new connection takes the slot
of the oldest one that has not yet sent its request (that one is closed at once), so idle connections
never stand between the kubelet's probe and its answer; only when every slot is busy answering is the
newcomer closed unanswered. The shipped NetworkPolicy narrows who can connect at all.

The server runs on daemon threads and needs no Slack or Kubernetes imports of its own.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from bot.config.logs import redact
from engine.kube import lease
from engine.store.database import Store

log = logging.getLogger(__name__)

Check = Callable[[], object]
"""Healthy unless it raises or returns False."""
CHECK_TIMEOUT_SECONDS = 3.0
"""Below the readiness probe's timeoutSeconds in manifests/ (5 s), so the answer is always ours."""
KUBERNETES_TIMEOUT_SECONDS = 2.0
MAX_DETAIL_CHARS = 300
READ_TIMEOUT_SECONDS = 5.0
"""Per read on a connection: the probes send their request at once; the same as their timeoutSeconds."""
MAX_CONNECTIONS = 16
"""Open connections at once: the kubelet's two probes and a scraper need a handful."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        if self.ok:
            return f"[+]{self.name} ok: {self.detail}" if self.detail else f"[+]{self.name} ok"
        return f"[-]{self.name} failed: {self.detail}"


class HealthServer:
    """Serves the health port on a daemon thread; `start()` binds, `close()` stops."""

    def __init__(
        self,
        port: int,
        *,
        host: str = "0.0.0.0",
        checks: Mapping[str, Check] | None = None,
        registry: CollectorRegistry | None = None,
        check_timeout: float = CHECK_TIMEOUT_SECONDS,
        liveness: Mapping[str, Check] | None = None,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """`port` 0 picks a free one (read it from `.port` after `start()`).

        `liveness` checks must answer at once (they read memory): /healthz calls them inline.
        """
        self._address = (host, port)
        self.checks = dict(checks or {})
        self.liveness = dict(liveness or {})
        self.registry = registry if registry is not None else CollectorRegistry()
        self.check_timeout = check_timeout
        self._executor = ThreadPoolExecutor(max_workers=max(1, len(self.checks)), thread_name_prefix="readyz")
        self._running: dict[str, Future[object]] = {}
        self._running_lock = threading.Lock()
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._server: _BoundedServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("health server not started")
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        server = _BoundedServer(self._address, _handler_for(self), max_connections=self.max_connections)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="scalebot-health", daemon=True
        )
        self._thread.start()
        log.info("health server on %s:%d (/healthz, /readyz, /metrics)", self._address[0], self.port)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def readiness(self) -> list[CheckResult]:
        """Run every check (in parallel, each bounded by `check_timeout`); results sorted by name."""
        futures = {name: self._submit(name, check) for name, check in self.checks.items()}
        deadline = time.monotonic() + self.check_timeout
        results = []
        for name, future in sorted(futures.items()):
            if future is None:
                results.append(CheckResult(name, False, "still running since an earlier probe"))
                continue
            try:
                value = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                results.append(CheckResult(name, False, f"no answer within {self.check_timeout:g} s"))
            except Exception as exc:  # a check reports its failure by raising: any exception is "not ready"
                results.append(CheckResult(name, False, _one_line(exc)))
            else:
                # A passing check may say more than "ok" by returning text (field_policy: absent).
                detail = value if isinstance(value, str) else ("" if value is not False else "not ready")
                shown = redact(" ".join(detail.split()))[:MAX_DETAIL_CHARS]
                results.append(CheckResult(name, value is not False, shown))
        return results

    def live(self) -> list[CheckResult]:
        """The liveness checks, inline; results sorted by name."""
        results = []
        for name, check in sorted(self.liveness.items()):
            try:
                ok = check() is not False
            except Exception as exc:  # a check reports its failure by raising
                results.append(CheckResult(name, False, _one_line(exc)))
            else:
                results.append(CheckResult(name, ok, "" if ok else "not live"))
        return results

    def _submit(self, name: str, check: Check) -> Future[object] | None:
        with self._running_lock:
            previous = self._running.get(name)
            if previous is not None and not previous.done():
                return None
            future = self._executor.submit(check)
            self._running[name] = future
            return future


class _BoundedServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer with at most `max_connections` open connections (see the module doc).

    Connections still waiting for their request are kept oldest first; one of them gives its slot
    to a newcomer when the bound is reached: its socket is shut down, which ends its handler's read
    at once, so its thread finishes without waiting for the read timeout."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, max_connections: int
    ) -> None:
        self.max_connections = max(1, max_connections)
        # Reentrant: refusing a connection under the lock goes through shutdown_request, which takes it.
        self._lock = threading.RLock()
        self._open: set[socket.socket] = set()
        self._waiting: dict[socket.socket, None] = {}  # insertion order: oldest first
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        connection = cast("socket.socket", request)
        with self._lock:
            if len(self._open) >= self.max_connections:
                oldest = next(iter(self._waiting), None)
                if oldest is None:  # every slot is busy answering: this one waits for nobody
                    log.debug("health port: %d connections busy, closing a new one", len(self._open))
                    self.shutdown_request(connection)
                    return
                self._release(oldest)
                _shut(oldest)
            self._open.add(connection)
            self._waiting[connection] = None
        super().process_request(request, client_address)

    def request_started(self, connection: socket.socket) -> None:
        """Its request line and headers are read: no longer a connection that may be closed early."""
        with self._lock:
            self._waiting.pop(connection, None)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._release(cast("socket.socket", request))
        super().shutdown_request(request)

    def _release(self, connection: socket.socket) -> None:
        self._open.discard(connection)
        self._waiting.pop(connection, None)


def _shut(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by its client
        connection.shutdown(socket.SHUT_RDWR)


def _handler_for(health: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "scalebot-health"
        # StreamRequestHandler sets it on the socket: a read that waits longer ends the connection.
        timeout = health.read_timeout

        def parse_request(self) -> bool:
            parsed = super().parse_request()
            cast("_BoundedServer", self.server).request_started(self.connection)
            return parsed

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                failed = [r.line() for r in health.live() if not r.ok]
                if failed:
                    self._reply(503, ("\n".join([*failed, "healthz check failed"]) + "\n").encode())
                else:
                    self._reply(200, b"ok\n")
            elif path == "/readyz":
                results = health.readiness()
                ok = all(r.ok for r in results)
                lines = [r.line() for r in results]
                lines.append("readyz check passed" if ok else "readyz check failed")
                self._reply(200 if ok else 503, ("\n".join(lines) + "\n").encode())
            elif path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._reply(200, encoder(health.registry), content_type)
            else:
                self._reply(404, b"not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_POST(self) -> None:
            self._reply(405, b"GET only\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("health %s", format % args)  # probes every few seconds: not worth an info line

    return Handler


# -- the standard checks ----------------------------------------------------------------------------


def database_writable(store: Store) -> Check:
    """A real write transaction (BEGIN IMMEDIATE, one upsert, COMMIT): a read-only or full volume,
    a lost file or a lock held for too long all fail it, where a read would still pass."""

    def check() -> None:
        with store.transaction():
            store.db.table("meta").upsert({"key": "readyz_checked_at", "value": str(time.time())}, pk="key")

    return check


def kubernetes_reachable(api_client: Any, *, timeout_seconds: float = KUBERNETES_TIMEOUT_SECONDS) -> Check:
    """GET /readyz of the API server with a short timeout (`api_client`: a kubernetes ApiClient)."""

    def check() -> None:
        lease.probe_api_server(api_client, timeout_seconds=timeout_seconds)

    return check


def runner_healthy(faults: Callable[[], Mapping[str, str]]) -> Check:
    """Fails while an operation's runner has stopped on a database it could not write (disk full)."""

    def check() -> None:
        problems = faults()
        if problems:
            raise RuntimeError("; ".join(problems[k] for k in sorted(problems)))

    return check


def slack_connected(is_connected: Callable[[], bool]) -> Check:
    """Socket Mode: the WebSocket is open now (`Bot.connected`); HTTP mode: the bot is serving."""

    def check() -> None:
        if not is_connected():
            raise ConnectionError("not connected to Slack")

    return check


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text)[:MAX_DETAIL_CHARS]

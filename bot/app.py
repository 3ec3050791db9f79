"""Composition root of the Slack side: Web API clients, the Bolt App, HTTP or Socket Mode, and
the sender / progress workers, around an `OperationsPort` built elsewhere (bot.cli).

Start order (`Bot.start`): sender (delivers what the outbox still owes Slack), progress
(subscribes to the engine, adopts the messages of active operations), then intake (HTTP server
or Socket Mode). Stop order is the reverse, so no accepted request loses its answer.

HTTP mode serves Bolt through a real threaded WSGI server (wsgiref with ThreadingMixIn) at
`/slack/events`, plus `GET /healthz`. Before Bolt sees a request this layer refuses, changing
nothing: bodies over 4 MiB (413), bad or stale signatures (401, checked on the raw bytes), and
bodies that are not valid UTF-8 form or JSON payloads (400), which Bolt would answer with a 500.

In both modes a Bolt middleware then refuses requests from another workspace, enterprise or app
(`bot.origin`): a signed request from a Slack Connect channel may carry another organisation's
user. The refusal is audited and logged; the person is told, nothing else happens.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt import App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)

from bot import listeners, origin
from bot.channels import SlackChannels
from bot.dispatch import ClickHandler, GroupResolver, SubcommandHandler, no_groups
from bot.groups import SlackGroups
from bot.outbox import Outbox
from bot.ports import OperationsPort
from bot.progress import Progress
from bot.sender import Sender, SenderMetrics
from bot.settings import Settings

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
MAX_BODY_BYTES = 4 * 1024 * 1024
REPLAY_WINDOW_SECONDS = 300
_KNOWN_KEYS = frozenset({"command", "type", "ssl_check"})
Route = Callable[[], tuple[int, str]]
"""A GET endpoint: returns (HTTP status, plain-text body)."""


def healthz() -> tuple[int, str]:
    return 200, "ok\n"


# -- clients and the App -------------------------------------------------------------------------


def web_client(settings: Settings, *, for_sender: bool = False, timeout: int = 15) -> WebClient:
    """A WebClient at SLACK_API_URL. The sender handles 429 and 5xx itself (it must keep
    coalescing while it waits), so its client only retries broken connections; the App's client
    (auth.test, apps.connections.open, usergroups.list) also retries rate limits and 5xx.
    `timeout` (seconds) bounds one HTTP call, so a hanging Slack cannot hold the sender forever."""
    handlers: list[Any] = [ConnectionErrorRetryHandler(max_retry_count=2)]
    if not for_sender:
        handlers += [
            RateLimitErrorRetryHandler(max_retry_count=2),
            ServerErrorRetryHandler(max_retry_count=2),
        ]
    kwargs: dict[str, Any] = {
        "token": settings.slack.bot_token.reveal(),
        "retry_handlers": handlers,
        "timeout": timeout,
    }
    if settings.slack.api_url:
        kwargs["base_url"] = settings.slack.api_url
    return WebClient(**kwargs)


def build_app(
    settings: Settings,
    ops: OperationsPort,
    *,
    sender: Sender,
    progress: Progress,
    executor: ThreadPoolExecutor,
    client: WebClient | None = None,
    groups: GroupResolver | None = None,
    subcommands: Mapping[str, SubcommandHandler] | None = None,
    clicks: Mapping[str, ClickHandler] | None = None,
) -> App:
    """The Bolt App with every listener. Calls `auth.test` once, here (token verification)."""
    client = client or web_client(settings)
    secret = settings.slack.signing_secret
    app = App(
        client=client,
        signing_secret=secret.reveal() if secret else "",
        request_verification_enabled=secret is not None,
        token_verification_enabled=True,
        name="scalebot",
        logger=logging.getLogger("scalebot.bolt"),
    )
    app.use(_origin_guard(settings, ops))
    if groups is None:
        uses_groups = any(c.policy.groups for c in settings.clusters.values())
        groups = SlackGroups(client) if uses_groups else no_groups
    listeners.register(
        app,
        ops,
        sender,
        settings,
        progress=progress,
        executor=executor,
        groups=groups,
        subcommands=subcommands,
        clicks=clicks,
        can_post=SlackChannels(client).can_post,
    )
    return app


def _origin_guard(settings: Settings, ops: OperationsPort) -> Callable[..., BoltResponse]:
    """Bolt middleware: refuse (ack, tell, audit) a request from a workspace, enterprise or app that is
    not ours. Without configured teams, ours is the bot token's workspace: Bolt's own authorization
    (its cached `auth.test`) has put it in the context before this runs; no extra call is made."""
    slack = settings.slack

    def guard(body: dict[str, Any], context: BoltContext, next: Callable[[], BoltResponse]) -> BoltResponse:
        if not isinstance(body, dict) or "ssl_check" in body or body.get("type") == "url_verification":
            return next()
        home = context.authorize_result
        teams = frozenset(slack.allowed_team_ids) or frozenset(
            {home.team_id} if home is not None and home.team_id else ()
        )
        enterprises = frozenset(slack.allowed_enterprise_ids) or frozenset(
            {home.enterprise_id} if home is not None and home.enterprise_id else ()
        )
        found = origin.origin_of(body)
        reason = origin.refusal(
            found, origin.AllowedOrigins(teams, enterprises, frozenset(slack.allowed_app_ids))
        )
        if not reason:
            return next()
        log.warning("Slack request refused: %s", reason, extra={"user": found.user, "channel": found.channel})
        try:
            ops.refuse(found.user or "unknown", "slack_request", "", f"{reason} (channel {found.channel})")
        except Exception:  # an audit failure must not turn a refusal into a 500
            log.exception("could not audit a refused Slack request")
        text = f"⚠️ Refused: {reason}."
        if "command" in body:
            return BoltResponse(status=200, body={"response_type": "ephemeral", "text": text})
        return BoltResponse(status=200, body="")

    return guard


# -- HTTP mode -----------------------------------------------------------------------------------


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # 200 people clicking at once must not meet a 5-connection listen backlog (SYN retries cost 1 s).
    request_queue_size = 256


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)


class SlackWsgi:
    """WSGI application: Bolt at /slack/events, plain GET routes (/healthz) beside it."""

    def __init__(self, app: App | None, *, signing_secret: str | None, routes: Mapping[str, Route]) -> None:
        self.app = app
        self.secret = signing_secret.encode() if signing_secret else None
        self.routes = dict(routes)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = self._handle(environ)
        start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
        return [body]

    def _handle(self, environ: WSGIEnvironment) -> tuple[int, list[tuple[str, str]], bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        if method == "GET" and path in self.routes:
            status, text = self.routes[path]()
            return _plain(status, text)
        if path != EVENTS_PATH or self.app is None:
            return _plain(404, "not found\n")
        if method != "POST":
            return _plain(405, "POST only\n")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _plain(400, "bad Content-Length\n")
        if length > MAX_BODY_BYTES or length < 0:
            _discard(environ["wsgi.input"], length)
            return _plain(413, "body too large\n")
        raw: bytes = environ["wsgi.input"].read(length)
        headers = _headers(environ)
        if self.secret is not None and not is_signed(self.secret, raw, headers, now=time.time()):
            return _plain(401, "invalid request signature\n")
        request = _bolt_request(raw, headers, environ.get("QUERY_STRING", ""))
        if request is None:
            return _plain(400, "malformed body\n")
        response = self.app.dispatch(request)
        out = [(name, value) for name, values in response.headers.items() for value in values]
        return response.status, out, (response.body or "").encode("utf-8")


def is_signed(secret: bytes, raw: bytes, headers: Mapping[str, str], *, now: float) -> bool:
    """Slack's v0 signature over the raw bytes as received, within the 5-minute replay window.
    Checked here so that bodies Bolt cannot even parse are still told apart: 401 vs 400."""
    timestamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not timestamp.isdigit() or abs(now - int(timestamp)) > REPLAY_WINDOW_SECONDS:
        return False
    digest = hmac.new(secret, b"v0:" + timestamp.encode() + b":" + raw, hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"v0={digest}", signature)


def _bolt_request(raw: bytes, headers: Mapping[str, str], query: str) -> BoltRequest | None:
    try:
        request = BoltRequest(body=raw.decode("utf-8"), query=query, headers=dict(headers))
    except Exception:  # Bolt parses as it constructs; any failure means the body is malformed
        log.info("malformed Slack request body refused (%d bytes)", len(raw))
        return None
    body = request.body
    # Slack only sends slash commands, typed payloads (interactivity, events) and ssl_check.
    return request if isinstance(body, dict) and _KNOWN_KEYS.intersection(body) else None


def _discard(stream: Any, length: int) -> None:
    """Read (and drop) a refused body, so the client sees the 413 instead of a broken pipe."""
    remaining = min(length, 4 * MAX_BODY_BYTES)
    while remaining > 0:
        chunk = stream.read(min(remaining, 65536))
        if not chunk:
            return
        remaining -= len(chunk)


def _headers(environ: WSGIEnvironment) -> dict[str, str]:
    headers = {
        key[5:].lower().replace("_", "-"): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if environ.get("CONTENT_TYPE"):
        headers["content-type"] = str(environ["CONTENT_TYPE"])
    return headers


def _plain(status: int, text: str) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", "text/plain; charset=utf-8")], text.encode("utf-8")


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}


@dataclass
class HttpServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_http(
    app: App | None,
    port: int,
    *,
    host: str = "0.0.0.0",
    signing_secret: str | None = None,
    routes: Mapping[str, Route] | None = None,
) -> HttpServer:
    """Serve `app` at /slack/events (plus GET routes, /healthz by default) on a background thread.
    `signing_secret` is checked before Bolt sees a body; Bolt checks it again. Port 0 picks one."""
    wsgi = SlackWsgi(app, signing_secret=signing_secret, routes={"/healthz": healthz, **(routes or {})})
    server = make_server(host, port, wsgi, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name=f"scalebot-http-{port}"
    )
    thread.start()
    return HttpServer(server, thread)


# -- Socket Mode ---------------------------------------------------------------------------------


def start_socket_mode(app: App, app_token: str) -> SocketModeHandler:
    """Connect over Socket Mode; `apps.connections.open` goes through app.client, so it follows
    SLACK_API_URL. Reconnects (Slack's refresh `disconnect`) are the built-in client's job."""
    handler = SocketModeHandler(app, app_token=app_token, web_client=app.client)
    handler.connect()  # type: ignore[no-untyped-call]
    return handler


def stop_socket_mode(handler: SocketModeHandler) -> None:
    """Close the Socket Mode client. slack_sdk's Connection.disconnect checks `sock` before taking
    its locks, so it can race with its own reader closing the socket (AttributeError on None);
    a second close() then finds the socket gone and shuts the client's threads down."""
    try:
        handler.close()  # type: ignore[no-untyped-call]
    except AttributeError:
        handler.close()  # type: ignore[no-untyped-call]


# -- the whole bot -------------------------------------------------------------------------------


@dataclass
class Bot:
    settings: Settings
    ops: OperationsPort
    app: App
    sender: Sender
    progress: Progress
    executor: ThreadPoolExecutor
    routes: Mapping[str, Route] = field(default_factory=dict)
    http: HttpServer | None = None
    health: HttpServer | None = None
    socket: SocketModeHandler | None = None
    serve_health: bool = True
    """False when the caller runs the health server itself (`scalebot run` serves /readyz, /metrics)."""

    def start(self) -> None:
        self.sender.start()
        self.progress.start()
        self.progress.resume(self.ops.list_operations(active_only=True, limit=1000))
        server = self.settings.server
        secret = self.settings.slack.signing_secret
        if self.settings.slack.socket_mode:
            app_token = self.settings.slack.app_token
            assert app_token is not None
            self.socket = start_socket_mode(self.app, app_token.reveal())
        else:
            self.http = serve_http(
                self.app,
                server.http_port,
                host=server.host,
                signing_secret=secret.reveal() if secret else None,
                routes=self.routes,
            )
        if self.serve_health and (self.settings.slack.socket_mode or server.health_port != server.http_port):
            self.health = serve_http(None, server.health_port, host=server.host, routes=self.routes)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop intake, let accepted work finish, deliver what Slack is still owed."""
        if self.socket is not None:
            stop_socket_mode(self.socket)
        if self.http is not None:
            self.http.close()
        self.executor.shutdown(wait=True)
        self.progress.stop(timeout=timeout / 2)
        self.sender.stop(timeout=timeout / 2)
        if self.health is not None:
            self.health.close()


def build_bot(
    settings: Settings,
    ops: OperationsPort,
    *,
    outbox: Outbox,
    metrics: SenderMetrics | None = None,
    routes: Mapping[str, Route] | None = None,
    subcommands: Mapping[str, SubcommandHandler] | None = None,
    clicks: Mapping[str, ClickHandler] | None = None,
) -> Bot:
    """Everything wired and nothing started; `bot.start()` then serves until `bot.stop()`."""
    sender = Sender(web_client(settings, for_sender=True), outbox, settings=settings.sender, metrics=metrics)
    progress = Progress(ops, sender, channel_for=lambda op: settings.channel_for(op.target.cluster))
    executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="scalebot-work")
    app = build_app(
        settings,
        ops,
        sender=sender,
        progress=progress,
        executor=executor,
        subcommands=subcommands,
        clicks=clicks,
    )
    return Bot(settings, ops, app, sender, progress, executor, routes=dict(routes or {}))

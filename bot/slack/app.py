"""Composition root of the Slack side: Web API clients, the Bolt App, HTTP or Socket Mode, and
the sender / progress workers, around an `OperationsPort` built elsewhere (bot.cli.main).

Start order (`Bot.start`): sender (delivers what the outbox still owes Slack), progress
(subscribes to the engine, adopts the messages of active operations), then intake (HTTP server
or Socket Mode). Stop order is the reverse, so no accepted request loses its answer.

HTTP mode serves Bolt's own WSGI adapter (`slack_bolt.adapter.wsgi`, which verifies Slack's
signature and replay window: 401) under waitress, a production WSGI server: a bounded pool of
worker threads, idle or stuck connections closed after `IDLE_TIMEOUT_SECONDS`, bodies over 4 MiB
refused (413) before they reach Python. `GET /healthz` sits beside `/slack/events`; bodies that
are not valid UTF-8 form or JSON payloads get a 400 (Bolt would raise on them: a 500).

In both modes a Bolt middleware then refuses requests from another workspace, enterprise or app
(`bot.slack.origin`): a signed request from a Slack Connect channel may carry another organisation's
user. The refusal is audited and logged; the person is told, nothing else happens.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from slack_bolt import App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from waitress.server import create_server

from bot.config.settings import Settings
from bot.ports import OperationsPort
from bot.slack import listeners, origin
from bot.slack.acks_first import AckCountingApp, AcksFirstExecutor, AckWindow
from bot.slack.channels import SlackChannels
from bot.slack.delivery.digest import fleet_digest
from bot.slack.delivery.outbox import Outbox
from bot.slack.delivery.post_lookup import may_have_landed
from bot.slack.delivery.progress import Progress
from bot.slack.delivery.sender import Sender, SenderMetrics
from bot.slack.directory import PeopleNames
from bot.slack.dispatch import ClickHandler, GroupResolver, SubcommandHandler, no_groups
from bot.slack.groups import SlackGroups
from bot.slack.home import HomeTab
from bot.slack.home_charts import HomeCharts
from bot.text import mrkdwn

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
MAX_BODY_BYTES = 4 * 1024 * 1024
_KNOWN_KEYS = frozenset({"command", "type", "ssl_check"})
Route = Callable[[], tuple[int, str]]
"""A GET endpoint: returns (HTTP status, plain-text body)."""


def healthz() -> tuple[int, str]:
    return 200, "ok\n"


# -- clients and the App -------------------------------------------------------------------------


class UnsentRetryHandler(ConnectionErrorRetryHandler):
    """Retries a connection error only when the request never left (refused, no DNS answer): after
    a timeout or a reset Slack may have posted it, and posting again here would show it twice."""

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if error is None or may_have_landed(error):
            return False
        return super()._can_retry(state=state, request=request, response=response, error=error)


def web_client(
    settings: Settings, *, for_sender: bool = False, timeout: int = 15, logger: logging.Logger | None = None
) -> WebClient:
    """A WebClient at SLACK_API_URL. The sender handles 429 and 5xx itself (it must keep
    coalescing while it waits), so its client only retries connections that never reached Slack
    (the sender looks for a post that may have landed before posting again); the App's client
    (auth.test, apps.connections.open, usergroups.list) also retries rate limits and 5xx.
    `timeout` (seconds) bounds one HTTP call, so a hanging Slack cannot hold the sender forever."""
    retry_connections = UnsentRetryHandler if for_sender else ConnectionErrorRetryHandler
    handlers: list[Any] = [retry_connections(max_retry_count=2)]
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
    if logger is not None:
        kwargs["logger"] = logger
    if settings.slack.api_url:
        kwargs["base_url"] = settings.slack.api_url
    return WebClient(**kwargs)


def group_resolver(settings: Settings) -> GroupResolver:
    """Slack user groups when a policy grants roles to groups (cached, failing closed), else none."""
    uses_groups = any(c.policy.groups for c in settings.clusters.values())
    return SlackGroups(web_client(settings)) if uses_groups else no_groups


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
    listener_executor: Executor | None = None,
) -> App:
    """The Bolt App with every listener. Calls `auth.test` once, here (token verification).

    `listener_executor` runs Bolt's listeners (Bolt's own pool when None). Slack's request is
    answered at the listener's ack, before the listener hands its work to `executor`: whoever
    must know that hand-off happened (a test settling the bot) waits on this executor first.
    Handed-off work starts once no other request waits for its ack (`bot.slack.acks_first`)."""
    client = client or web_client(settings)
    secret = settings.slack.signing_secret
    window = AckWindow()
    app = AckCountingApp(
        ack_window=window,
        client=client,
        signing_secret=secret.reveal() if secret else "",
        request_verification_enabled=secret is not None,
        token_verification_enabled=True,
        name="scalebot",
        logger=logging.getLogger("scalebot.bolt"),
        listener_executor=listener_executor,
    )
    app.use(_origin_guard(settings, ops))
    work = AcksFirstExecutor(executor, window)
    if groups is None:
        uses_groups = any(c.policy.groups for c in settings.clusters.values())
        groups = SlackGroups(client) if uses_groups else no_groups
    listeners.register(
        app,
        ops,
        sender,
        settings,
        progress=progress,
        executor=work,
        groups=groups,
        subcommands=subcommands,
        clicks=clicks,
        can_post=SlackChannels(client).can_post,
        names=PeopleNames(client),
    )
    charts = HomeCharts(client, prices=settings.node_hour_prices(), currency=settings.currency)
    home = HomeTab(ops, client, work, groups=groups, charts=charts)
    ops.subscribe(home.on_event)
    listeners.register_home(app, home)
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
        text = f"⚠️ Refused: {mrkdwn.escape(reason)}."
        if "command" in body:
            return BoltResponse(status=200, body={"response_type": "ephemeral", "text": text})
        return BoltResponse(status=200, body="")

    return guard


# -- HTTP mode -----------------------------------------------------------------------------------

HTTP_THREADS = 16
"""waitress worker threads: requests being answered at once (idle connections cost none)."""
CONNECTION_LIMIT = 1000
"""Open connections before waitress stops accepting more (slow clients cannot exhaust it early)."""
IDLE_TIMEOUT_SECONDS = 30
"""A connection with no complete request for this long is closed (a slow or stuck client)."""
_CLEANUP_INTERVAL_SECONDS = 5


def slack_wsgi(app: App | None, routes: Mapping[str, Route]) -> WSGIApplication:
    """Bolt's own WSGI adapter at /slack/events (it verifies Slack's signature and dispatches),
    plain GET routes beside it, and 400 for a body Bolt cannot even parse (it would raise: a 500)."""
    bolt = SlackRequestHandler(app, path=EVENTS_PATH) if app is not None else None

    def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        if method == "GET" and path in routes:
            return _plain(start_response, *routes[path]())
        if bolt is None or path != EVENTS_PATH:
            return _plain(start_response, 404, "not found\n")
        if method != "POST":
            return _plain(start_response, 405, "POST only\n")
        if not str(environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")).isdigit():
            # Bolt's verifier raises on a timestamp that is not a number (its error path would
            # answer 200); such a request cannot be signed, so it is refused like a bad signature.
            return _plain(start_response, 401, "invalid request signature\n")
        raw: bytes = environ["wsgi.input"].read()  # waitress has buffered it, within the size limit
        if not _well_formed(raw):
            log.info("malformed Slack request body refused (%d bytes)", len(raw))
            return _plain(start_response, 400, "malformed body\n")
        environ["wsgi.input"] = io.BytesIO(raw)
        answered: Iterable[bytes] = bolt(environ, start_response)
        return answered

    return application


def _well_formed(raw: bytes) -> bool:
    """Slack only sends slash commands, typed payloads (interactivity, events) and ssl_check."""
    try:
        body = BoltRequest(body=raw.decode("utf-8")).body
    except Exception:  # Bolt parses as it constructs; any failure means the body is malformed
        return False
    return isinstance(body, dict) and bool(_KNOWN_KEYS.intersection(body))


def _plain(start_response: StartResponse, status: int, text: str) -> list[bytes]:
    body = text.encode("utf-8")
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    start_response(f"{status} {HTTPStatus(status).phrase}", headers)
    return [body]


@dataclass
class HttpServer:
    """waitress serving one WSGI application on a background thread."""

    server: Any
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.effective_port)

    def close(self) -> None:
        """Stop listening, close every connection (in the server's own loop thread, which then
        ends), and let the worker threads finish what they answer."""
        server = self.server

        def close_all() -> None:
            for dispatcher in list(server._map.values()):
                dispatcher.close()

        try:
            server.trigger.pull_trigger(close_all)
        except OSError:  # its wake-up pipe is already gone: the loop ends within its 1 s poll
            close_all()
        self.thread.join(timeout=5)
        server.task_dispatcher.shutdown(timeout=5)


def serve_http(
    app: App | None,
    port: int,
    *,
    host: str = "0.0.0.0",
    routes: Mapping[str, Route] | None = None,
    threads: int = HTTP_THREADS,
    idle_timeout: float = IDLE_TIMEOUT_SECONDS,
) -> HttpServer:
    """Serve `app` at /slack/events (plus GET routes, /healthz by default) with waitress on a
    background thread: bounded worker threads, idle connections closed after `idle_timeout`,
    bodies over MAX_BODY_BYTES refused (413). Port 0 picks one."""
    application = slack_wsgi(app, {"/healthz": healthz, **(routes or {})})
    server = create_server(
        application,
        host=host,
        port=port,
        threads=threads,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=idle_timeout,
        cleanup_interval=min(_CLEANUP_INTERVAL_SECONDS, idle_timeout),
        max_request_body_size=MAX_BODY_BYTES,
        backlog=1024,
        ident="scalebot",
        expose_tracebacks=False,
        clear_untrusted_proxy_headers=True,
    )
    thread = threading.Thread(target=server.run, daemon=True, name=f"scalebot-http-{port}")
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
        if self.settings.slack.socket_mode:
            app_token = self.settings.slack.app_token
            assert app_token is not None
            self.socket = start_socket_mode(self.app, app_token.reveal())
        else:
            self.http = serve_http(self.app, server.http_port, host=server.host, routes=self.routes)
        if self.serve_health and (self.settings.slack.socket_mode or server.health_port != server.http_port):
            self.health = serve_http(None, server.health_port, host=server.host, routes=self.routes)

    def connected(self) -> bool:
        """Readiness: in Socket Mode, whether the WebSocket to Slack is open right now (it drops
        and reconnects); in HTTP mode, whether the server is serving (auth.test passed at build)."""
        if self.settings.slack.socket_mode:
            return self.socket is not None and bool(self.socket.client.is_connected())
        return self.http is not None

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
    groups: GroupResolver | None = None,
) -> Bot:
    """Everything wired and nothing started; `bot.start()` then serves until `bot.stop()`.
    `groups`: the user-group resolver shared with the engine and the schedules (default: one of
    its own when a policy names groups)."""
    client = web_client(settings, for_sender=True)
    sender = Sender(
        client, outbox, settings=settings.sender, metrics=metrics, call_timeout=float(client.timeout)
    )
    progress = Progress(
        ops,
        sender,
        channel_for=lambda op: settings.channel_for(op.target.cluster),
        digest=fleet_digest(settings, sender, client),
    )
    executor = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="scalebot-work")
    app = build_app(
        settings,
        ops,
        sender=sender,
        progress=progress,
        executor=executor,
        subcommands=subcommands,
        clicks=clicks,
        groups=groups,
    )
    return Bot(settings, ops, app, sender, progress, executor, routes=dict(routes or {}))

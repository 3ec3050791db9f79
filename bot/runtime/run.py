"""`scalebot run`: the composition root that wires every adapter and serves until SIGTERM.

Order at start (architecture §5.4): settings → clusters (Kubernetes clients, pool providers,
workloads) → SQLite → Operations (with metrics and Kubernetes Events) → health server → leader
election → once leading: resume running operations, re-arm schedules, start the Slack bot.
A standby serves /healthz and /readyz only; it takes over when the leader's Lease expires and
resumes the operations from the database.

SIGTERM: stop Slack intake, let the current steps persist, stop the timers, release the Lease
(a standby takes over at once), exit 0. Running operations resume wherever scalebot runs next.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import FrameType
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError

from bot.config import settings as settings_module
from bot.config.settings import Settings
from bot.runtime import wiring
from bot.runtime.apscheduler_timer import APSchedulerTimer
from bot.runtime.health import (
    HealthServer,
    database_writable,
    kubernetes_reachable,
    runner_healthy,
    slack_connected,
)
from bot.runtime.metrics import DEFAULT as METRICS
from bot.runtime.metrics import OperationsState
from bot.slack.app import Bot, build_bot, group_resolver, web_client
from bot.slack.blocks import views
from bot.slack.delivery.outbox import StoreOutbox
from bot.slack.directory import ChannelDirectory
from bot.slack.schedule_ui import ScheduleUi
from bot.slack.weekly_post import WeeklySavingsPoster
from engine.domain.announcement import NextEvent
from engine.domain.clock import SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.kube import admission, offload
from engine.kube.events import EventRecorder, ObjectRef, Recorder
from engine.kube.offload import Offload
from engine.operations.observers import ProgressListeners
from engine.operations.runner import ClusterHandle, Runner
from engine.operations.service import Operations
from engine.operations.unattended import CleanupReport, Cycling, EmptyNodeCleaner, Evictor, PolicyLoop
from engine.schedules.calendars import Calendars
from engine.schedules.service import Schedules
from engine.store.base import StoreError
from engine.store.database import Store

log = logging.getLogger(__name__)

EXPIRY_SWEEP_SECONDS = 30.0
"""How often unanswered approval requests are checked for expiry (their cards then say so)."""

# Shutdown fits in the Deployment's terminationGracePeriodSeconds (30 s) with room to spare: the
# runner finishes its step, then the bot renders the events and delivers what Slack is owed. Posts
# are paced to one per second per channel, so the final summary of an operation that ended during
# the shutdown may queue behind several thread replies: the sender gets 8 s (half of the bot's).
RUNNER_STOP_SECONDS = 10.0
BOT_STOP_SECONDS = 16.0
KUBERNETES_START_TIMEOUT_SECONDS = 5.0
"""How long the start-up probe of each API server waits before warning that it does not answer."""


class RunError(ScalebotError, RuntimeError):
    """scalebot cannot start; the message is one line naming the problem and the fix."""

    category = Category.CONFIGURATION


@dataclass
class Service:
    settings: Settings
    store: Store
    ops: Operations
    schedules: Schedules
    health: HealthServer
    bot_factory: Callable[[], Bot]
    scheduler_factory: Callable[[], APSchedulerTimer]
    leader_election: bool
    lease_api: Any = None
    policies_factory: Callable[[], PolicyLoop] | None = None
    """The unattended policies (empty-node clean-up), started only while leading."""
    policies: PolicyLoop | None = None
    eviction_workers: Offload | None = None
    """The worker processes sending evictions (`runner.eviction_processes`), ended at shutdown."""
    stop_event: threading.Event = field(default_factory=threading.Event)
    warnings: list[str] = field(default_factory=list)
    """One line each, for the operator at start (an API server that does not answer yet)."""
    bot: Bot | None = None
    scheduler: APSchedulerTimer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start_leading(self) -> None:
        """Become the one active instance: resume, re-arm timers, take Slack traffic."""
        with self._lock:
            if self.bot is not None:
                return
            METRICS.set_leader(True)
            # The bot first, so that it hears every event of the resumed operations (one may end
            # within milliseconds, and its final message must still reach Slack).
            self.bot = self.bot_factory()
            self.bot.start()
            # A new leader waits for the claims of the instance it replaces to lapse.
            resumed = self.ops.resume(wait_for_claims=True)
            log.info("leading: resumed %d operation(s)", len(resumed))
            self.scheduler = self.scheduler_factory()
            self.scheduler.start()
            if self.policies_factory is not None:
                self.policies = self.policies_factory()
                self.policies.start()

    def stop_leading(self) -> None:
        """Lost the Lease: another instance may act now, so this one stops acting at once."""
        log.error("lost leadership; stopping so that two instances never act at once")
        METRICS.set_leader(False)
        self.stop_event.set()

    def serve(self, on_started: Callable[[], None] = lambda: None) -> int:
        """Serve until SIGTERM. `on_started` runs once the health port is bound and, without
        leader election, Slack intake is up. A failure before that stops what was started and
        raises RunError (one line naming the fix)."""
        try:
            self.health.start()
        except OSError as exc:
            self.shutdown()
            raise _listen_error(exc, "health_port", self.settings.server.health_port) from exc
        elector = None
        if self.leader_election:
            from engine.kube.lease import LeaseElector, default_identity

            elector = LeaseElector(
                self.lease_api,
                namespace=os.environ.get("POD_NAMESPACE", "scalebot"),
                identity=default_identity(),
            )
            # Fencing: a runner stops at its next step boundary once the Lease is no longer ours
            # (and stops renewing its claims, so the new leader's runner can take them).
            self.ops.runner.may_act = lambda: elector.is_leader
            thread = elector.start(self.start_leading, self.stop_leading, self.stop_event)
        else:
            try:
                self.start_leading()
            except Exception as exc:
                self.shutdown()
                raise _start_error(exc, self.settings) from exc
            thread = None
        on_started()
        while not self.stop_event.wait(EXPIRY_SWEEP_SECONDS):
            if self.bot is not None:
                self.ops.expire_stale()
        self.shutdown()
        if thread is not None:
            thread.join(timeout=5)
        if elector is not None:
            elector.release()
        return 0

    def shutdown(self) -> None:
        # The runner first: the steps under way finish and emit their events (an operation may end
        # here) while the bot still renders and sends them; its stop then flushes them to Slack.
        if self.policies is not None:
            self.policies.stop()
        self.ops.runner.stop(timeout=RUNNER_STOP_SECONDS)
        if self.eviction_workers is not None:  # after the runner: its last passes send through them
            offload.install(None)
            self.eviction_workers.close()
        if self.bot is not None:
            self.bot.stop(timeout=BOT_STOP_SECONDS)
        if self.scheduler is not None:
            self.scheduler.stop()
        self.health.close()


def weekly_poster(settings: Settings, store: Store) -> WeeklySavingsPoster | None:
    """The weekly savings posts of the clusters whose config asks for them (None: no cluster does)."""
    specs = {name: c.savings_report for name, c in settings.clusters.items() if c.savings_report}
    if not specs:
        return None
    client = web_client(settings)
    return WeeklySavingsPoster(specs, store, lambda: client, settings.node_hour_prices(), settings.currency)


def _open_store(settings: Settings) -> Store:
    try:
        store = Store(settings.db_path)
    except StoreError as exc:  # its message names the file and what to do (damaged, locked, full)
        raise RunError(str(exc)) from exc
    except Exception as exc:
        raise RunError(
            f"cannot use the database {settings.db_path}: {exc} (set SCALEBOT_DB to a writable path)"
        ) from exc
    return store


def build_service(settings: Settings, *, leader_election: bool | None = None) -> Service:
    handles = {name: with_events(handle) for name, handle in _connect(settings).items()}
    store = _open_store(settings)
    # The first cluster holds the Lease; its recorder publishes the heads (a NullRecorder: nothing).
    home_events = next(iter(handles.values())).events
    publish_audit_heads(store, home_events, os.environ.get("POD_NAMESPACE", "scalebot"))
    # The first cluster's API server holds the Lease and answers the readiness check.
    api_client = getattr(next(iter(handles.values())).api, "api_client", None)
    clock = SystemClock()
    holder: dict[str, APSchedulerTimer] = {}

    def next_event(cluster: str) -> NextEvent | None:
        return holder["s"].next_event(cluster) if "s" in holder else None

    # One user-group resolver for the clicks, the schedule commands and the pre-approvers' re-check.
    groups = group_resolver(settings)
    listeners = ProgressListeners()
    ops = Operations(
        store,
        Runner(
            store,
            handles,
            clock,
            listeners.emit,
            settings.runner,
        ),
        settings.policies(),
        clock,
        listeners,
        next_event=next_event,
        groups_of=groups,
    )
    ops.subscribe(METRICS.observe_event)
    METRICS.watch(OperationsState(ops, next_event))
    schedules = Schedules(store, ops, clock, calendars=Calendars(settings.calendars))
    for problem in schedules.days_off_problems():
        log.warning("%s", problem)
    outbox = StoreOutbox(store)
    # Announcements that fire before the bot is attached are held and posted at attach(sender=…).
    ui = ScheduleUi(
        schedules, ops, None, None, clock=clock, groups=groups, default_cluster=settings.default_cluster
    )

    def make_bot() -> Bot:
        bot = build_bot(
            settings,
            ops,
            outbox=outbox,
            metrics=METRICS.sender_hooks(),
            subcommands=ui.subcommands(),
            clicks=ui.clicks(),
            groups=groups,
        )
        bot.serve_health = False  # the service's HealthServer owns the health port
        ui.attach(sender=bot.sender, app=bot.app)
        return bot

    def make_scheduler() -> APSchedulerTimer:
        holder["s"] = APSchedulerTimer(
            schedules, clock, ui.on_announce, ui.on_fired, weekly=weekly_poster(settings, store)
        )
        ui.attach(runner=holder["s"])
        return holder["s"]

    def make_policies() -> PolicyLoop:
        def say(cluster: str, text: str) -> None:
            channel = settings.channel_for(cluster)
            if service.bot is None or channel is None:
                log.info("%s", text)
                return
            key = f"policy-{cluster}-{clock.now().isoformat()}"
            service.bot.sender.show(key, views.text_message(text, emoji="🧹"), channel=channel, final=True)

        def report(result: CleanupReport) -> None:
            say(result.cluster, result.text(policies[result.cluster].consolidation))

        policies = {name: pol for name, pol in settings.policies().items() if name in handles}
        cycling: list[Cycling] = [
            EmptyNodeCleaner(handles[name], pol.consolidation, store, clock, report)
            for name, pol in policies.items()
            if pol.consolidation.empty_nodes
        ]
        cycling += [
            Evictor(ops, name, settings.channel_for(name) or "", say)
            for name, pol in policies.items()
            if pol.consolidation.evictor
        ]
        enabled = [
            p.consolidation.interval
            for p in policies.values()
            if p.consolidation.empty_nodes or p.consolidation.evictor
        ]
        return PolicyLoop(cycling, clock, min(enabled, default=timedelta(seconds=60)).total_seconds())

    checks = {"database": database_writable(store)}
    if api_client is not None:
        checks["kubernetes"] = kubernetes_reachable(api_client)
    # A KubeClient's transport answers requests by path; an in-memory cluster has none.
    policy_checks, policy_lines = field_policy_checks(
        {name: getattr(h.api, "transport", None) for name, h in handles.items()}
    )
    checks.update(policy_checks)
    service = Service(
        settings=settings,
        store=store,
        ops=ops,
        schedules=schedules,
        health=HealthServer(
            settings.server.health_port,
            host=settings.server.host,
            checks=checks,
            registry=METRICS.registry,
            liveness={"runner": runner_healthy(lambda: dict(ops.runner.faults))},
        ),
        bot_factory=make_bot,
        scheduler_factory=make_scheduler,
        policies_factory=make_policies,
        leader_election=_in_cluster() if leader_election is None else leader_election,
        lease_api=api_client,
    )
    if settings.runner.eviction_processes:
        service.eviction_workers = Offload(settings.runner.eviction_processes)
        offload.install(service.eviction_workers)
    service.warnings.extend(unreachable_clusters(handles))
    service.warnings.extend(policy_lines)
    service.health.checks["slack"] = slack_connected(
        lambda: service.bot is not None and service.bot.connected()
    )
    return service


SLACK_TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "not_allowed_token_type",
    }
)


def check_slack(settings: Settings) -> None:
    """Ask Slack about the tokens before anything is served: `auth.test` with the bot token and,
    in Socket Mode, `apps.connections.open` with the app-level token (it only hands out a URL).
    A refused token or an unreachable Slack is a RunError naming the fix, not a traceback from
    inside Bolt; no port is bound yet and no operation resumed."""
    # Each retried attempt would log an error of its own; the RunError already says it all.
    quiet = logging.getLogger("scalebot.slack_start_check")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    client = web_client(settings, logger=quiet)
    app_token = settings.slack.app_token
    calls: list[tuple[str, str, Callable[[], object]]] = [
        (
            "SLACK_BOT_TOKEN",
            "the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page",
            client.auth_test,
        ),
    ]
    if app_token is not None:
        calls.append(
            (
                "SLACK_APP_TOKEN",
                "an app-level token (xapp-…) with connections:write from the app's Basic Information page",
                lambda: client.apps_connections_open(app_token=app_token.reveal()),
            ),
        )
    for variable, where, call in calls:
        try:
            call()
        except SlackApiError as exc:
            # Slack's error code, kept to the characters such codes use: the answer is not ours.
            error = re.sub(r"[^A-Za-z0-9_.-]", "?", str(exc.response.get("error") or ""))[:80]
            error = error or f"HTTP {exc.response.status_code}"
            if error in SLACK_TOKEN_ERRORS:
                raise RunError(f"{variable}: Slack refused the token ({error}); set it to {where}") from exc
            raise RunError(
                f"Slack answered {error} at start ({client.base_url}); check the app's settings "
                "or SLACK_API_URL"
            ) from exc
        except (OSError, SlackClientError) as exc:  # URLError, refused, reset, timed out, bad URL
            reason = getattr(exc, "reason", None) or exc
            raise RunError(
                f"cannot reach Slack at {client.base_url} ({reason}); check the network, the proxy "
                "(HTTPS_PROXY) or SLACK_API_URL"
            ) from exc


def resolve_channel_names(loaded: Settings) -> Settings:
    """The config's `#name` channels as IDs, from Slack's channel list (`conversations.list`, the
    channels:read and groups:read scopes); a name Slack does not list stops the start."""
    if not settings_module.channel_names(loaded):
        return loaded
    directory = ChannelDirectory(web_client(loaded))
    try:
        return settings_module.with_channel_ids(loaded, directory.resolve)
    except settings_module.SettingsError as exc:
        raise RunError(str(exc)) from exc


def unreachable_clusters(handles: Mapping[str, ClusterHandle]) -> list[str]:
    """One warning line per cluster whose API server does not answer now. Not fatal: it may be
    starting too (a control-plane upgrade, a cluster restored with scalebot); /readyz says so."""
    from engine.kube import lease

    warnings = []
    for name, handle in handles.items():
        api_client = getattr(handle.api, "api_client", None)
        if api_client is None:
            continue
        try:
            lease.probe_api_server(api_client, timeout_seconds=KUBERNETES_START_TIMEOUT_SECONDS)
        except Exception as exc:  # any failure of the probe is "not reachable now"
            host = getattr(getattr(api_client, "configuration", None), "host", "?")
            text = " ".join(str(exc).split())
            # urllib3 nests the cause in its retry report; the OS's own words are the useful part.
            cause = re.search(r"\[Errno -?\d+\] [^\"')]+", text)
            reason = cause.group(0) if cause else text[:200]
            warnings.append(
                f"warning: clusters.{name}: the Kubernetes API server at {host} does not answer ({reason}); "
                "scalebot starts and reports not ready on /readyz until it does"
            )
    return warnings


def _listen_error(exc: OSError, key: str, port: int) -> RunError:
    what = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return RunError(f"server.{key}: cannot listen on port {port} ({what}); free it or choose another port")


def _start_error(exc: Exception, settings: Settings) -> RunError:
    """A failure of Slack intake at start, in one line (the tokens were checked a moment ago)."""
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EACCES):
        return _listen_error(exc, "http_port", settings.server.http_port)
    detail = " ".join(str(exc).split())[:300]
    return RunError(f"cannot start the Slack side ({type(exc).__name__}: {detail}); run with -v for details")


def field_policy_checks(apis: Mapping[str, object]) -> tuple[dict[str, Callable[[], object]], list[str]]:
    """Per cluster with an API server: is scalebot's field-level admission policy in force? Read
    once now (one warning line at start where it is not) and shown on /readyz, which passes
    either way."""
    checks: dict[str, Callable[[], object]] = {}
    lines: list[str] = []
    for name, api in apis.items():
        if not hasattr(api, "request_json"):
            continue  # an in-memory cluster: no API server, no admission

        def read(api: Any = api) -> admission.PolicyStatus:
            return admission.read_status(api, timeout=KUBERNETES_START_TIMEOUT_SECONDS)

        status = read()
        line = admission.start_line(name, status)
        if line is not None:
            lines.append(line)
        checks[f"field_policy/{name}"] = admission.StatusCache(read, first=status)
    return checks, lines


AUDIT_HEAD_REASON = "AuditHead"


def publish_audit_heads(store: Store, recorder: Recorder, namespace: str, lease: str = "scalebot") -> None:
    """Each committed audit row's head as a Kubernetes Event on scalebot's Lease in the home
    cluster (reason AuditHead), beside the log line: a place someone with write access to the
    database cannot reach. Events expire (the API server's --event-ttl, 1 h by default): an event
    exporter or the log pipeline keeps them; `verify-audit --expect-head` checks one."""
    ref = ObjectRef(kind="Lease", name=lease, namespace=namespace, api_version="coordination.k8s.io/v1")

    def publish(row: int, head: str) -> None:
        recorder.record(ref, reason=AUDIT_HEAD_REASON, message=f"audit head {head} (row {row})")

    store.on_audit_head(publish)


def with_events(handle: ClusterHandle) -> ClusterHandle:
    """The handle with a Kubernetes Event recorder writing through its own cluster's API server
    (an in-memory cluster has none and keeps recording nothing)."""
    api_client = getattr(handle.api, "api_client", None)
    return replace(handle, events=EventRecorder(api_client)) if api_client is not None else handle


def _connect(settings: Settings) -> dict[str, ClusterHandle]:
    if not settings.clusters:
        # No config file: the current kubeconfig context is the one cluster (nobody has a role
        # until a config grants one, so Slack requests are refused; the CLI still works).
        try:
            return {"default": wiring.connect_cluster("default")}
        except wiring.WiringError as exc:
            raise RunError(str(exc)) from exc
    handles = {}
    for name, c in settings.clusters.items():
        try:
            handle = wiring.connect_cluster(
                name,
                kubeconfig=str(c.kubeconfig) if c.kubeconfig else None,
                context=c.context or None,
                provider=c.provider,
                options=c.options,
                qps=c.api_qps,
                burst=c.api_burst,
                gitops=c.gitops,
            )
            handles[name] = replace(handle, drain_report=c.drain_report, wake_waves=c.wake_waves)
        except wiring.WiringError as exc:
            raise RunError(f"clusters.{name}: {exc}") from exc
    return handles


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(os.environ.get("POD_NAME"))


def install_signal_handlers(service: Service) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the current steps and stopping", signum)
        service.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

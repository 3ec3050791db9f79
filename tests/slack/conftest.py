"""Fixtures: a local Slack (Web API + Socket Mode), the real engine, and the real bot.

The engine is `engine.operations.service.Operations` over a SQLite file in tmp_path and an in-memory
cluster (`engine.kube.fake.FakeCluster`, as `scalebot console` uses): two clusters, dev-eu (pools
web and batch, a PodDisruptionBudget that allows no disruption of shop/db-0; its channel C0DEV) and
the protected prod (its channel C0PROD). The policies are the configuration's, with the channels
`scalebot run` gives them: each cluster is operated from its own channel. `ControlledCluster` adds
test controls on the Kubernetes side only: `gate` (close it and every listing blocks until the test
opens it), `delay` (every listing takes that long), `fail_next` (the next listing raises) and
`unreachable` (every request fails with no answer, as with the API server down).

The runner is held by default (`make_bot(run=False)`): an operation moves to running in SQLite,
its locks are taken, but no step executes; the test plays the runner's progress events with
`running.play(...)`, exactly as the runner would emit them. `make_bot(run=True)` lets the real
runner drain and scale the in-memory cluster.

`bot` is the product's own wiring (build_app, serve_http on 127.0.0.1:0, Sender, Progress) with
a WebClient pointed at the local Web API; `make_bot(sender=SenderSettings(...))` builds one with
other sender limits. `running.settle()` waits, with deadlines, until the bot's executor, the
progress worker and the sender are idle, so "nothing else happened" can be asserted without
sleeping. Slack's request is answered at Bolt's ack, before the listener hands its work to the
executor, so `settle()` first waits for Bolt's listeners (run on a second tracking executor).
`running.wait_finished()` waits for the only operation to reach a final state and its runner to
let go of it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_bolt import App

from bot.config.cluster_settings import ClusterSettings
from bot.config.settings import Secret, SenderSettings, Settings, SlackSettings, cluster_policies
from bot.slack.app import HttpServer, build_app, serve_http, start_socket_mode, stop_socket_mode, web_client
from bot.slack.blocks import operations as blocks
from bot.slack.delivery.digest import fleet_digest
from bot.slack.delivery.outbox import MemoryOutbox
from bot.slack.delivery.progress import Progress
from bot.slack.delivery.sender import Sender
from engine.domain.clock import SystemClock
from engine.domain.model import NodeInfo
from engine.domain.operation import Operation, ProgressEvent, ProgressKind
from engine.domain.settings import RunnerSettings
from engine.kube import errors
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.base import POOL_LABEL
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store
from tests.slack.harness import Call, HttpResult, Signer, SlackApiServer, SocketModeServer, post, wait_until

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0DEV"
PROD_CHANNEL = "C0PROD"
FAST_SENDER = SenderSettings(update_interval=0.2, updates_per_minute=6000, posts_per_second=100)

OPERATOR, APPROVER, APPROVER_2, VIEWER, ADMIN = "U0OPS", "U0APP", "U0APP2", "U0VIEW", "U0ADMIN"

WRITTEN = {
    "dev-eu": policy.ClusterPolicy(
        cluster="dev-eu",
        users={
            OPERATOR: policy.Role.OPERATOR,
            APPROVER: policy.Role.APPROVER,
            APPROVER_2: policy.Role.APPROVER,
            VIEWER: policy.Role.VIEWER,
            ADMIN: policy.Role.ADMIN,
        },
    ),
    "prod": policy.ClusterPolicy(
        cluster="prod",
        users={
            OPERATOR: policy.Role.OPERATOR,
            APPROVER: policy.Role.APPROVER,
            APPROVER_2: policy.Role.APPROVER,
        },
        protected=True,
    ),
}
"""The clusters' policies as the configuration writes them (no `allowed_channels`)."""
CHANNELS = {CHANNEL: "dev-eu", PROD_CHANNEL: "prod"}
"""Each cluster's own channel (`channels:` / `default_channels`)."""
CLUSTERS = {
    name: ClusterSettings(name=name, context=name, default_channels=(channel,), policy=WRITTEN[name])
    for channel, name in CHANNELS.items()
}
POLICIES = cluster_policies(CLUSTERS, CHANNELS)
"""The policies as `scalebot run` hands them to the engine: channels separate the clusters."""
POOLS = {"dev-eu": {"web": 3, "batch": 2}, "prod": {"api": 2}}
"""Pool -> node count; nodes are named <pool>-1 … <pool>-N."""
FAST_RUNNER = RunnerSettings(
    graceful_window=timedelta(seconds=1),
    drain_timeout=timedelta(seconds=30),
    pass_interval=timedelta(seconds=0.2),
    settle=timedelta(seconds=0),
    workers=2,
    parallel_evictions=4,
)


class ControlledCluster(FakeCluster):
    """The in-memory cluster with a slow or stuck API server, for ack-first and failure tests."""

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        super().__init__(now=now or SystemClock().now)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        """Set when a listing reached the gate (so a test knows the engine is inside it)."""
        self.delay = 0.0
        self.error: Exception | None = None
        self.unreachable = False
        """Every request fails as the HTTP adapter fails when the API server gives no answer."""

    def _request_locked(self, verb: str, resource: str) -> None:
        if self.unreachable:
            raise errors.TransportError(message=f"{verb} {resource}: Connection refused")
        super()._request_locked(verb, resource)

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        self.entered.set()
        if not self.gate.wait(timeout=30):
            raise TimeoutError("the test never opened the cluster gate")
        if self.delay:
            threading.Event().wait(self.delay)  # the API server answering slowly
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return super().list_nodes(label_selector=label_selector)

    def reads(self) -> int:
        return sum(n for (verb, _), n in self.request_counts.items() if verb in ("list", "get"))

    def writes(self) -> int:
        return sum(n for (verb, _), n in self.request_counts.items() if verb not in ("list", "get"))


def populate(cluster: FakeCluster, pools: dict[str, int]) -> None:
    for pool, count in pools.items():
        for i in range(1, count + 1):
            cluster.add_node(f"{pool}-{i}", labels={POOL_LABEL: pool})
    if "web" in pools:
        # A database no eviction may disrupt: the zero-scale plan lists it as a blocker.
        cluster.add_pod(
            "shop",
            "db-0",
            node="web-1",
            controller_kind="StatefulSet",
            controller_name="db",
            labels={"app": "db"},
        )
        cluster.add_pdb("shop", "db", match_labels={"app": "db"}, disruptions_allowed=0)


@dataclass
class Engine:
    """The real operations service with its clusters, and whether its runner is held."""

    ops: Operations
    clusters: dict[str, ControlledCluster]
    held: list[str] = field(default_factory=list)
    """Operations the held runner was asked to start (none execute)."""

    def close(self) -> None:
        self.ops.runner.stop(timeout=5)


def make_engine(db: Path, *, run: bool = False, settings: RunnerSettings = FAST_RUNNER) -> Engine:
    clusters = {name: ControlledCluster() for name in POOLS}
    for name, cluster in clusters.items():
        populate(cluster, POOLS[name])
    ops = new_operations(
        Store(db),
        {name: ClusterHandle(name, c, SimulatedPoolProvider(c)) for name, c in clusters.items()},
        POLICIES,
        SystemClock(),
        settings=settings,
    )
    engine = Engine(ops, clusters)
    if not run:
        ops.runner.start = engine.held.append  # type: ignore[method-assign]
    return engine


class TrackingExecutor(ThreadPoolExecutor):
    """The bot's executor, able to say when every submitted task has finished."""

    def __init__(self, workers: int = 8) -> None:
        super().__init__(max_workers=workers, thread_name_prefix="test-work")
        self._cond = threading.Condition()
        self._running = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._cond:
            self._running += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[Any]) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float = 5.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._running == 0, timeout=timeout):
                raise AssertionError("the bot's executor did not finish its work in time")


def make_settings(
    api: SlackApiServer, *, sender: SenderSettings = FAST_SENDER, app_token: str | None = None
) -> Settings:
    return Settings(
        slack=SlackSettings(
            bot_token=Secret("xoxb-test-token"),
            signing_secret=None if app_token else Secret(SECRET),
            app_token=Secret(app_token) if app_token else None,
            api_url=api.url,
        ),
        clusters=CLUSTERS,
        channels=CHANNELS,
        sender=sender,
    )


@dataclass
class RunningBot:
    api: SlackApiServer
    engine: Engine
    settings: Settings
    app: App
    sender: Sender
    progress: Progress
    executor: TrackingExecutor
    outbox: MemoryOutbox
    listeners: TrackingExecutor
    """Bolt's listener threads: a click's HTTP answer comes back before its listener returns."""
    signer: Signer = field(default_factory=lambda: Signer(SECRET))
    http: HttpServer | None = None

    @property
    def ops(self) -> Operations:
        return self.engine.ops

    @property
    def cluster(self) -> ControlledCluster:
        return self.engine.clusters["dev-eu"]

    def only_op(self) -> Operation:
        ops = self.ops.list_operations(limit=100)
        assert len(ops) == 1, ops
        return ops[0]

    def audit_actions(self, op_id: str | None = None) -> list[str]:
        return [r.action for r in self.ops.store.audit_rows(op_id=op_id)]

    def assert_unchanged(self, *, no_reads: bool = False) -> None:
        """Nothing was requested, decided or audited, nothing changed in the cluster; with
        `no_reads`, the cluster was not even listed."""
        assert self.ops.list_operations(limit=100) == []
        assert self.audit_actions() == []
        for cluster in self.engine.clusters.values():
            assert cluster.writes() == 0
            assert not no_reads or cluster.reads() == 0

    def play(
        self, op_id: str, kind: ProgressKind, text: str, *, condition: str = "", **changes: Any
    ) -> Operation:
        """What the runner does at a step: save the operation's new state, emit the event."""
        current = self.ops.get(op_id)
        assert current is not None
        op = replace(current, **changes)
        self.ops.store.save_operation(op)
        final = kind == "final"
        self.ops.runner.emit(
            ProgressEvent(operation=op, kind=kind, text=text, condition=condition, final=final)
        )
        return op

    @property
    def events_url(self) -> str:
        assert self.http is not None
        return f"http://127.0.0.1:{self.http.port}/slack/events"

    def command(
        self, text: str, *, user: str = OPERATOR, channel: str = CHANNEL, timeout: float = 10.0
    ) -> tuple[HttpResult, str]:
        response_url = self.api.response_url()
        body = self.signer.slash_command(text, user_id=user, channel_id=channel, response_url=response_url)
        return post(self.events_url, body, self.signer.headers(body), timeout=timeout), response_url

    def click(
        self,
        action_id: str,
        value: str,
        *,
        user: str,
        message_ts: str = "1700000000.000001",
        channel: str = CHANNEL,
    ) -> tuple[HttpResult, str]:
        """A signed block_actions click; `channel`: where the message clicked on is."""
        response_url = self.api.response_url()
        body = self.signer.block_actions(
            action_id,
            value,
            user_id=user,
            channel_id=channel,
            message_ts=message_ts,
            response_url=response_url,
        )
        return post(self.events_url, body, self.signer.headers(body)), response_url

    def submit_view(self, view: dict[str, Any], values: dict[str, Any], *, user: str) -> HttpResult:
        body = self.signer.view_submission(view, values, user_id=user)
        return post(self.events_url, body, self.signer.headers(body))

    def reject(self, approval_id: str, *, user: str, reason: str = "") -> HttpResult:
        """Click Reject, then submit the dialog it opened (with `reason`, or empty)."""
        opened = len(self.api.calls_to("views.open"))
        self.click(blocks.ACTION_REJECT, approval_id, user=user)
        self.api.wait_for(lambda cs: sum(c.method == "views.open" for c in cs) > opened, what="Reject dialog")
        dialog = self.api.calls_to("views.open")[opened]
        view = dialog.body["view"]
        view = json.loads(view) if isinstance(view, str) else view
        field = {"type": "plain_text_input", "value": reason or None}
        return self.submit_view(view, {blocks.REJECT_REASON: {blocks.REJECT_REASON: field}}, user=user)

    def settle(self, timeout: float = 5.0) -> None:
        self.listeners.wait_idle(timeout)  # every request's work is now on the executor
        self.executor.wait_idle(timeout)
        assert self.progress.flush(timeout), "progress worker still busy"
        assert self.sender.flush(timeout), "sender still has work queued"

    def wait_finished(self, timeout: float = 30.0) -> Operation:
        """Wait until the only operation is in a final state and the runner has let go of it (its
        final event emitted). Neither an idle executor nor an idle runner says so on its own: right
        after a click both may still be idle because the approval has not reached them yet."""
        wait_until(lambda: self.only_op().state.is_terminal, timeout, "the operation to reach a final state")
        assert self.ops.runner.wait_idle(timeout), "the runner did not let go of the finished operation"
        return self.only_op()

    def replies_to(self, response_url: str) -> list[Call]:
        path = response_url.split("127.0.0.1", 1)[1].split("/", 1)[1]
        return [c for c in self.api.calls_to("response_url") if c.path == "/" + path]

    def wait_reply(self, response_url: str, timeout: float = 5.0) -> Call:
        path = "/" + response_url.split("127.0.0.1", 1)[1].split("/", 1)[1]
        return self.api.wait_for_call("response_url", lambda c: c.path == path, timeout)

    def card(self, timeout: float = 5.0) -> Call:
        return self.api.wait_for_call("chat.postMessage", lambda c: not c.body.get("thread_ts"), timeout)

    def card_in_thread(self, thread_ts: str, timeout: float = 5.0) -> Call:
        return self.api.wait_for_call(
            "chat.postMessage", lambda c: c.body.get("thread_ts") == thread_ts, timeout
        )

    def approve_button(self, timeout: float = 5.0) -> dict[str, Any]:
        from tests.slack.harness import buttons_of

        card = self.card(timeout)
        return next(b for b in buttons_of(card) if b["action_id"] == blocks.ACTION_APPROVE)

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        self.listeners.shutdown(wait=True)
        self.executor.shutdown(wait=True)
        self.progress.stop(timeout=2)
        self.sender.stop(timeout=2)


@pytest.fixture
def slack_api() -> Iterator[SlackApiServer]:
    api = SlackApiServer().start()
    yield api
    api.close()


@pytest.fixture
def socket_server(slack_api: SlackApiServer) -> Iterator[SocketModeServer]:
    server = SocketModeServer().start()
    slack_api.ws_url = server.url
    yield server
    server.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = make_engine(tmp_path / "scalebot.db")
    yield made
    made.close()


def assemble(
    api: SlackApiServer, engine: Engine, settings: Settings, outbox: MemoryOutbox | None = None, **extra: Any
) -> RunningBot:
    """The production wiring around the real engine; `extra` goes to build_app (subcommands, clicks)."""
    outbox = outbox or MemoryOutbox()
    client = web_client(settings, for_sender=True)
    sender = Sender(client, outbox, settings=settings.sender)
    progress = Progress(
        engine.ops, sender, blocker_interval=0.0, digest=fleet_digest(settings, sender, client)
    )
    executor, listeners = TrackingExecutor(), TrackingExecutor()
    app = build_app(
        settings,
        engine.ops,
        sender=sender,
        progress=progress,
        executor=executor,
        listener_executor=listeners,
        **extra,
    )
    sender.start()
    progress.start()
    return RunningBot(api, engine, settings, app, sender, progress, executor, outbox, listeners)


@pytest.fixture
def make_bot(slack_api: SlackApiServer, tmp_path: Path) -> Iterator[Callable[..., RunningBot]]:
    started: list[RunningBot] = []
    engines: dict[bool, Engine] = {}

    def make(
        *,
        sender: SenderSettings = FAST_SENDER,
        outbox: MemoryOutbox | None = None,
        run: bool = False,
        digest_channel: str | None = None,
        **extra: Any,
    ) -> RunningBot:
        """A bot; a second one with the same `run` shares the first's engine (a restart).
        `digest_channel`: the settings' `fleet_digest_channel`."""
        if run not in engines:
            engines[run] = make_engine(tmp_path / f"scalebot-{'run' if run else 'held'}.db", run=run)
        engine = engines[run]
        settings = replace(make_settings(slack_api, sender=sender), fleet_digest_channel=digest_channel)
        running = assemble(slack_api, engine, settings, outbox, **extra)
        running.http = serve_http(running.app, 0, host="127.0.0.1")
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()
    for made in engines.values():
        made.close()


@pytest.fixture
def bot(make_bot: Callable[..., RunningBot]) -> RunningBot:
    return make_bot()


@pytest.fixture
def socket_bot(
    slack_api: SlackApiServer, socket_server: SocketModeServer, engine: Engine
) -> Iterator[RunningBot]:
    running = assemble(slack_api, engine, make_settings(slack_api, app_token="xapp-test-token"))
    handler = start_socket_mode(running.app, "xapp-test-token")
    yield running
    # Close the server end first: the client's close() otherwise waits seconds on its read loop.
    handler.client.auto_reconnect_enabled = False
    socket_server.close()
    stop_socket_mode(handler)
    running.stop()

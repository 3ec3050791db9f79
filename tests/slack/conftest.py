"""Fixtures: a local Slack (Web API + Socket Mode), the fake operations port, and the real bot.

`bot` is the product's own wiring (build_app, serve_http on 127.0.0.1:0, Sender, Progress) with
a WebClient pointed at the local Web API; `make_bot(sender=SenderSettings(...))` builds one with
other sender limits. `running.settle()` waits, with deadlines, until the bot's executor, the
progress worker and the sender are idle, so "nothing else happened" can be asserted without
sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from slack_bolt import App

from bot import blocks
from bot.app import HttpServer, build_app, serve_http, start_socket_mode, stop_socket_mode, web_client
from bot.outbox import MemoryOutbox
from bot.progress import Progress
from bot.sender import Sender
from bot.settings import ClusterSettings, Secret, SenderSettings, Settings, SlackSettings
from tests.slack.fake_ops import OPERATOR, POLICIES, FakeOps
from tests.slack.harness import Call, HttpResult, Signer, SlackApiServer, SocketModeServer, post

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0DEV"
FAST_SENDER = SenderSettings(update_interval=0.2, updates_per_minute=6000, posts_per_second=100)


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
    clusters = {
        name: ClusterSettings(
            name=name, context=name, default_channels=(CHANNEL,) if name == "dev-eu" else (), policy=policy
        )
        for name, policy in POLICIES.items()
    }
    return Settings(
        slack=SlackSettings(
            bot_token=Secret("xoxb-test-token"),
            signing_secret=None if app_token else Secret(SECRET),
            app_token=Secret(app_token) if app_token else None,
            api_url=api.url,
        ),
        clusters=clusters,
        channels={CHANNEL: "dev-eu"},
        sender=sender,
    )


@dataclass
class RunningBot:
    api: SlackApiServer
    ops: FakeOps
    settings: Settings
    app: App
    sender: Sender
    progress: Progress
    executor: TrackingExecutor
    outbox: MemoryOutbox
    signer: Signer = field(default_factory=lambda: Signer(SECRET))
    http: HttpServer | None = None

    @property
    def events_url(self) -> str:
        assert self.http is not None
        return f"http://127.0.0.1:{self.http.port}/slack/events"

    def command(self, text: str, *, user: str = OPERATOR, channel: str = CHANNEL) -> tuple[HttpResult, str]:
        response_url = self.api.response_url()
        body = self.signer.slash_command(text, user_id=user, channel_id=channel, response_url=response_url)
        return post(self.events_url, body, self.signer.headers(body)), response_url

    def click(
        self, action_id: str, value: str, *, user: str, message_ts: str = "1700000000.000001"
    ) -> tuple[HttpResult, str]:
        response_url = self.api.response_url()
        body = self.signer.block_actions(
            action_id,
            value,
            user_id=user,
            channel_id=CHANNEL,
            message_ts=message_ts,
            response_url=response_url,
        )
        return post(self.events_url, body, self.signer.headers(body)), response_url

    def settle(self, timeout: float = 5.0) -> None:
        self.executor.wait_idle(timeout)
        assert self.progress.flush(timeout), "progress worker still busy"
        assert self.sender.flush(timeout), "sender still has work queued"

    def replies_to(self, response_url: str) -> list[Call]:
        path = response_url.split("127.0.0.1", 1)[1].split("/", 1)[1]
        return [c for c in self.api.calls_to("response_url") if c.path == "/" + path]

    def wait_reply(self, response_url: str, timeout: float = 5.0) -> Call:
        path = "/" + response_url.split("127.0.0.1", 1)[1].split("/", 1)[1]
        return self.api.wait_for_call("response_url", lambda c: c.path == path, timeout)

    def card(self, timeout: float = 5.0) -> Call:
        return self.api.wait_for_call("chat.postMessage", lambda c: not c.body.get("thread_ts"), timeout)

    def approve_button(self, timeout: float = 5.0) -> dict[str, Any]:
        from tests.slack.harness import buttons_of

        card = self.card(timeout)
        return next(b for b in buttons_of(card) if b["action_id"] == blocks.ACTION_APPROVE)

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
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
def fake_ops() -> FakeOps:
    return FakeOps()


def assemble(
    api: SlackApiServer, ops: FakeOps, settings: Settings, outbox: MemoryOutbox | None = None, **extra: Any
) -> RunningBot:
    """The production wiring around the fake ops; `extra` goes to build_app (subcommands, clicks)."""
    outbox = outbox or MemoryOutbox()
    sender = Sender(web_client(settings, for_sender=True), outbox, settings=settings.sender)
    progress = Progress(ops, sender, blocker_interval=0.0)
    executor = TrackingExecutor()
    app = build_app(settings, ops, sender=sender, progress=progress, executor=executor, **extra)
    sender.start()
    progress.start()
    return RunningBot(api, ops, settings, app, sender, progress, executor, outbox)


@pytest.fixture
def make_bot(slack_api: SlackApiServer, fake_ops: FakeOps) -> Iterator[Callable[..., RunningBot]]:
    started: list[RunningBot] = []

    def make(
        *, sender: SenderSettings = FAST_SENDER, outbox: MemoryOutbox | None = None, **extra: Any
    ) -> RunningBot:
        running = assemble(slack_api, fake_ops, make_settings(slack_api, sender=sender), outbox, **extra)
        running.http = serve_http(running.app, 0, host="127.0.0.1", signing_secret=SECRET)
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()


@pytest.fixture
def bot(make_bot: Callable[..., RunningBot]) -> RunningBot:
    return make_bot()


@pytest.fixture
def socket_bot(
    slack_api: SlackApiServer, socket_server: SocketModeServer, fake_ops: FakeOps
) -> Iterator[RunningBot]:
    running = assemble(slack_api, fake_ops, make_settings(slack_api, app_token="xapp-test-token"))
    handler = start_socket_mode(running.app, "xapp-test-token")
    yield running
    # Close the server end first: the client's close() otherwise waits seconds on its read loop.
    handler.client.auto_reconnect_enabled = False
    socket_server.close()
    stop_socket_mode(handler)
    running.stop()

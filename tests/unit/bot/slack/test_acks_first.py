"""Acks first: handed-off work waits while another Slack request still waits for its ack.

The window is counted by a real Bolt App dispatching real slash-command bodies (Bolt's default
mode, the one scalebot runs): a request must be open exactly until its listener acks, not until
the listener returns."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest
from slack_bolt import Ack, App, BoltRequest, BoltResponse
from slack_sdk import WebClient

from bot.slack.acks_first import AckCountingApp, AcksFirstExecutor, AckWindow
from tests.slack.harness import SlackApiServer

WAIT = 5.0
"""Seconds a test waits for something that must happen (a deadline, never the synchronisation)."""
STILL = 0.3
"""Seconds a test watches for something that must not happen."""


@pytest.fixture
def api() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-work")
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def _app(api: SlackApiServer, window: AckWindow) -> App:
    return AckCountingApp(
        ack_window=window,
        client=WebClient(token="xoxb-test", base_url=api.url),
        signing_secret="",
        request_verification_enabled=False,
        token_verification_enabled=False,
    )


def _command(name: str) -> BoltRequest:
    body = urlencode({"command": name, "text": "", "user_id": "U1", "channel_id": "C1", "team_id": "T1"})
    return BoltRequest(body=body, headers={"content-type": ["application/x-www-form-urlencoded"]})


def _dispatch_in_thread(app: App, request: BoltRequest, answers: list[BoltResponse]) -> threading.Thread:
    thread = threading.Thread(target=lambda: answers.append(app.dispatch(request)), daemon=True)
    thread.start()
    return thread


def test_a_request_is_open_until_its_ack_not_until_its_listener_returns(api: SlackApiServer) -> None:
    window = AckWindow()
    app = _app(api, window)
    entered, before_ack, after_ack = threading.Event(), threading.Event(), threading.Event()
    acked_and_working = threading.Event()

    @app.command("/before")
    def before(ack: Ack) -> None:
        entered.set()
        before_ack.wait(WAIT)
        ack()

    @app.command("/after")
    def after(ack: Ack) -> None:
        ack()
        acked_and_working.set()
        after_ack.wait(WAIT)  # work right behind the ack, on Bolt's listener thread

    answers: list[BoltResponse] = []
    try:
        holding = _dispatch_in_thread(app, _command("/before"), answers)
        assert entered.wait(WAIT)
        assert not window.wait_quiet(STILL), "a request not yet acked must hold the window open"
        assert window.open == 1
        before_ack.set()
        holding.join(WAIT)
        assert window.wait_quiet(WAIT) and window.open == 0

        answer = app.dispatch(_command("/after"))  # returns at the ack, while the listener still works
        assert answer.status == 200 and acked_and_working.is_set()
        assert window.open == 0, "a listener working after its ack must not hold the window"
    finally:
        before_ack.set()
        after_ack.set()
    assert [a.status for a in answers] == [200]


def test_handed_off_work_starts_only_once_every_request_has_its_ack(
    api: SlackApiServer, pool: ThreadPoolExecutor
) -> None:
    window = AckWindow()
    app = _app(api, window)
    work = AcksFirstExecutor(pool, window, max_defer=60.0)
    entered, release, ran = threading.Event(), threading.Event(), threading.Event()
    seen_open: list[int] = []

    def plan() -> None:
        seen_open.append(window.open)
        ran.set()

    @app.command("/slow")
    def slow(ack: Ack) -> None:
        entered.set()
        release.wait(WAIT)
        ack()

    @app.command("/go")
    def go(ack: Ack) -> None:
        ack()
        work.submit(plan)

    answers: list[BoltResponse] = []
    try:
        slow_request = _dispatch_in_thread(app, _command("/slow"), answers)
        assert entered.wait(WAIT) and window.open == 1
        assert app.dispatch(_command("/go")).status == 200  # acked at once
        assert not ran.wait(STILL), "the work started while another request was waiting for its ack"
        release.set()
        slow_request.join(WAIT)
        assert ran.wait(WAIT), "the work did not start once every request had its ack"
    finally:
        release.set()
    assert seen_open == [0]
    assert [a.status for a in answers] == [200]


def test_work_waits_no_longer_than_max_defer(pool: ThreadPoolExecutor) -> None:
    window = AckWindow()
    work = AcksFirstExecutor(pool, window, max_defer=0.2)
    entered, stuck, ran = threading.Event(), threading.Event(), threading.Event()
    holding = threading.Thread(target=_hold_open, args=(window, entered, stuck), daemon=True)
    holding.start()
    try:
        assert entered.wait(WAIT) and window.open == 1
        result = work.submit(lambda: (ran.set(), window.open)[1])
        assert result.result(WAIT) == 1, "steady traffic must delay the work, never starve it"
    finally:
        stuck.set()
        holding.join(WAIT)
    assert window.open == 0


def test_without_requests_work_starts_at_once_with_its_result_and_errors(pool: ThreadPoolExecutor) -> None:
    work = AcksFirstExecutor(pool, AckWindow(), max_defer=60.0)
    assert work.submit(lambda a, b: a + b, 2, b=3).result(WAIT) == 5

    def fail() -> None:
        raise ValueError("planning failed")

    with pytest.raises(ValueError, match="planning failed"):
        work.submit(fail).result(WAIT)


def _hold_open(window: AckWindow, entered: threading.Event, release: threading.Event) -> None:
    with window.answering():
        entered.set()
        release.wait(WAIT)

"""The production HTTP server (waitress under Bolt's WSGI adapter) against slow and idle clients.

Covers: 100 connections that opened and sent half a request (or nothing) do not stop a signed
slash command from being answered while they stay open; a connection that stays idle is closed
by the server after the idle timeout; the worker pool is bounded (the server's thread count does
not grow with connections).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from bot.slack.app import HTTP_THREADS, IDLE_TIMEOUT_SECONDS, serve_http
from tests.slack.conftest import RunningBot
from tests.slack.harness import get

SLOW_CLIENTS = 100


@pytest.fixture
def slow_clients(bot: RunningBot) -> Iterator[list[socket.socket]]:
    assert bot.http is not None
    conns = []
    for i in range(SLOW_CLIENTS):
        conn = socket.create_connection(("127.0.0.1", bot.http.port), timeout=5)
        if i % 2:  # half send the start of a request and stall, half send nothing at all
            conn.sendall(
                b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 900\r\n\r\ntoken="
            )
        conns.append(conn)
    yield conns
    for conn in conns:
        conn.close()


def test_idle_slow_clients_do_not_stop_other_requests(
    bot: RunningBot, slow_clients: list[socket.socket]
) -> None:
    result, _ = bot.command("status", timeout=IDLE_TIMEOUT_SECONDS / 3)

    # Served while all the stalled connections stay open: a server that gave each connection a
    # worker would answer only once they are closed at the idle timeout, after this deadline.
    assert result.status == 200 and result.elapsed < IDLE_TIMEOUT_SECONDS / 3
    assert bot.http is not None
    assert get(f"http://127.0.0.1:{bot.http.port}/healthz").status == 200
    workers = [t for t in threading.enumerate() if t.name.startswith("waitress")]
    assert 0 < len(workers) <= HTTP_THREADS, "the worker pool must not grow with connections"
    assert len(slow_clients) == SLOW_CLIENTS


def test_an_idle_connection_is_closed_after_the_timeout(bot: RunningBot) -> None:
    server = serve_http(bot.app, 0, host="127.0.0.1", idle_timeout=1)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
            conn.sendall(b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never more

            assert conn.recv(1024) == b"", "the server should have closed the stalled connection"
    finally:
        server.close()

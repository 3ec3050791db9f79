"""The drain's requests sent from worker processes (`Offload`), so one scalebot process carries
more clusters' sleeps at once.

Why: an eviction costs about 1 ms of client CPU in the sending process (TLS, http.client, urllib3;
docs/benchmarks.md, "Client CPU at fleet scale"), in one interpreter whose lock lets it use one
core. A 200-pod sleep spent 0.5 s of CPU, half of it on its evictions, so about 75 such sleeps
firing in the same minute filled that core. With `runner.eviction_processes: N`, the evictions
and pod deletions (`Transport.send_json`) are sent by N worker processes instead
(`engine.kube.offload_worker`): scalebot's process only builds each request and waits for its
answer, and the workers' HTTP runs on the other cores.

What stays in scalebot's process: the decision to send (fencing, the per-cluster and process-wide
limits, the client-side rate limit, the request counts), the credentials (each request carries the
bearer token the configuration gives at that moment; a 401 reloads them here, as for any request),
and the translation of every answer and failure (`engine.kube.transport`). A worker holds only
connection pools, built from copies of the ApiClient's own pool settings.

A worker that dies fails the requests it had in hand as transport errors (the drain's next pass
looks at those pods again, as after any dropped connection) and is started again at the next
request. `close` ends them: each finishes what it has in hand and exits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import pickle
import subprocess
import sys
import threading
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from engine.domain.errors import Category, ScalebotError
from engine.kube.offload_worker import frame, pool_settings, read_frame

log = logging.getLogger(__name__)

WORKER_THREADS = 256
"""Requests one worker sends at once: above anything the process-wide eviction limit lets through
(`runner.max_evictions_in_flight`, at most 1,024 over every worker), so the limits stay scalebot's."""

ANSWER_GRACE_SECONDS = 10.0
"""How much longer than the request's own timeout to wait for a worker's answer before giving up on
it (the worker enforces the timeout itself; this covers a worker that stopped reading)."""


class OffloadError(ScalebotError, OSError):
    """No answer came through the worker: the request is a transport failure (an OSError, one of
    `TRANSPORT_ERRORS`, so `Transport` translates it as a dropped connection)."""

    category = Category.TRANSIENT


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    retry_after: str | None
    body: bytes


@dataclass
class _Process:
    popen: subprocess.Popen[bytes]
    reader: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[int, Future[Answer]] = field(default_factory=dict)
    pools: set[int] = field(default_factory=set)
    alive: bool = True


class Offload:
    """N worker processes that send HTTP requests for this process; each request goes to the one
    with the fewest in hand. Workers start at their first request."""

    def __init__(self, processes: int, *, python: str = sys.executable) -> None:
        if processes < 1:
            raise ValueError("an offload needs at least one worker process")
        self._size = processes
        self._python = python
        self._lock = threading.Lock()
        self._processes: list[_Process] = []
        self._ids = itertools.count(1)
        self._pool_keys: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._next_pool_key = itertools.count(1)
        self._closed = False

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [p.popen.pid for p in self._processes if p.alive]

    def request(
        self,
        pool_manager: Any,
        *,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: float,
    ) -> Answer:
        """Send one request through a worker, with the connection settings of `pool_manager` (the
        ApiClient's); raises OffloadError when no answer came."""
        key = self._pool_key(pool_manager)
        worker = self._pick()
        answer: Future[Answer] = Future()
        with worker.lock:
            if not worker.alive:
                raise OffloadError("the eviction worker process had exited")
            request_id = next(self._ids)
            settings = None if key in worker.pools else pool_settings(pool_manager)
            payload = pickle.dumps(
                (request_id, key, settings, method, url, headers, body, timeout),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            worker.pending[request_id] = answer
            try:
                stdin = worker.popen.stdin
                assert stdin is not None
                stdin.write(frame(payload))
                stdin.flush()
            except OSError as exc:
                worker.pending.pop(request_id, None)
                raise OffloadError(f"the eviction worker process took no request: {exc}") from exc
            worker.pools.add(key)
        try:
            return answer.result(timeout=timeout + ANSWER_GRACE_SECONDS)
        except FutureTimeout:
            with worker.lock:
                worker.pending.pop(request_id, None)
            raise OffloadError(f"no answer from the eviction worker process within {timeout:.0f} s") from None

    def close(self) -> None:
        """Each worker finishes the requests in hand and exits (killed after 10 s)."""
        with self._lock:
            self._closed = True
            processes, self._processes = self._processes, []
        for worker in processes:
            stdin = worker.popen.stdin
            if stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()
        for worker in processes:
            try:
                worker.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.popen.kill()
                worker.popen.wait()
            if worker.reader is not None:
                worker.reader.join()

    def __enter__(self) -> Offload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _pool_key(self, pool_manager: Any) -> int:
        """One key per pool manager (per cluster and credentials: a 401's reload builds a new one),
        so a worker builds each pool once and never mixes two clusters' connections."""
        with self._lock:
            key = self._pool_keys.get(pool_manager)
            if key is None:
                key = self._pool_keys[pool_manager] = next(self._next_pool_key)
            return key

    def _pick(self) -> _Process:
        with self._lock:
            if self._closed:
                raise OffloadError("scalebot is stopping: no more requests through its workers")
            self._processes = [p for p in self._processes if p.alive]
            while len(self._processes) < self._size:
                self._processes.append(self._start())
            return min(self._processes, key=lambda p: len(p.pending))

    def _start(self) -> _Process:
        try:
            popen = subprocess.Popen(
                [self._python, "-m", "engine.kube.offload_worker", str(WORKER_THREADS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        except OSError as exc:
            raise OffloadError(f"could not start an eviction worker process: {exc}") from exc
        worker = _Process(popen)
        worker.reader = threading.Thread(
            target=self._read, args=(worker,), name=f"offload-{popen.pid}", daemon=True
        )
        worker.reader.start()
        return worker

    def _read(self, worker: _Process) -> None:
        """Hand each answer to its request; when the worker's output ends, fail what it still had."""
        stdout = worker.popen.stdout
        assert stdout is not None
        at_end = False
        try:
            while (payload := read_frame(stdout)) is not None:
                request_id, status, *rest = pickle.loads(payload)
                with worker.lock:
                    answer = worker.pending.pop(request_id, None)
                if answer is None:
                    continue  # given up on (timed out)
                if status is None:
                    answer.set_exception(OffloadError(rest[0]))
                else:
                    reason, retry_after, body = rest
                    answer.set_result(Answer(int(status), str(reason or ""), retry_after, bytes(body)))
            at_end = True
        finally:
            with worker.lock:
                worker.alive = False
                orphans, worker.pending = worker.pending, {}
                with contextlib.suppress(OSError):
                    if worker.popen.stdin is not None:
                        worker.popen.stdin.close()
            if not at_end:  # an unreadable answer: nobody reads this worker any more
                worker.popen.kill()
            code = worker.popen.wait()
            stdout.close()
            if orphans or code != 0:
                log.warning(
                    "an eviction worker process exited (code %s) with %d requests in hand", code, len(orphans)
                )
            for answer in orphans.values():
                answer.set_exception(OffloadError(f"the eviction worker process exited (code {code})"))


class _Installed:
    offload: Offload | None = None


def install(offload: Offload | None) -> None:
    """Make `offload` the one the drain's requests of this process go through (None: none)."""
    _Installed.offload = offload


def current() -> Offload | None:
    return _Installed.offload

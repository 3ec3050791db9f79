"""A TCP fault proxy for the tests: 127.0.0.1 only, threads, bounded in time.

It sits between scalebot and the kube-apiserver and forwards bytes both ways (TLS passes through
untouched: the API server's certificate is for 127.0.0.1, so a client pointed at the proxy's port
still verifies it). Faults, each with its own probability per forwarded chunk, decided by a
seeded `random.Random` so a run can be repeated:

- `latency`: seconds added before each chunk is forwarded (either direction);
- `answer_latency`: seconds added before each chunk towards the client once the client has sent
  two chunks on that connection (its TLS handshake is done): requests reach the server at once,
  their answers come late, so a client's writes land while it waits, none is held half-sent;
- `drop`: both sides are closed cleanly (FIN) — the request may or may not have reached the
  server, and its answer is lost;
- `reset`: both sides are reset (SO_LINGER 0 → RST) — "connection reset by peer";
- `drop_after_forward`: the chunk IS forwarded to the server, then the connection is cut before
  any answer comes back: the request took effect, the client cannot know — the case that must
  never be read as "the pod is gone" (or as "it failed, so nothing happened");
- `every=N`: in addition, every N-th chunk towards the server gets the next of these three faults
  in turn, so a short test is sure to meet each of them;
- `reset_open_connections()`: at once, every open connection is reset, also an idle one such as
  a watch waiting for its next event.

`close()` stops accepting, closes every connection and joins every thread with a deadline; the
proxy also closes itself after `lifetime` seconds, so a failed test cannot leave it running.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass

FAULTS = ("drop", "reset", "drop_after_forward")


@dataclass
class Faults:
    latency: float = 0.0
    answer_latency: float = 0.0
    drop: float = 0.0
    reset: float = 0.0
    drop_after_forward: float = 0.0
    every: int = 0
    """Besides the probabilities: every `every`-th request chunk gets the next fault of FAULTS in turn."""


class FaultProxy:
    def __init__(self, upstream_port: int, *, seed: int = 9, lifetime: float = 300.0) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.faults = Faults()
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._deadline = time.monotonic() + lifetime
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def set(
        self,
        *,
        latency: float = 0.0,
        answer_latency: float = 0.0,
        drop: float = 0.0,
        reset: float = 0.0,
        drop_after_forward: float = 0.0,
        every: int = 0,
    ) -> None:
        """Replace the fault settings (unnamed ones go back to 0)."""
        with self._lock:
            self.faults = Faults(latency, answer_latency, drop, reset, drop_after_forward, every)

    def reset_open_connections(self) -> int:
        """Reset (RST) every connection open now, idle or not, such as a long-lived watch: the
        connection breaks between two chunks, where the per-chunk faults cannot reach it.
        Returns how many connections were cut."""
        with self._lock:
            sockets = list(self._sockets)
            self.counts["cut"] += len(sockets) // 2
        for sock in sockets:
            _reset(sock)
        return len(sockets) // 2

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in [self._acceptor, *self._threads]:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            if time.monotonic() > self._deadline:
                self.close()
                return
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                self.counts["upstream_refused"] += 1
                _reset(client)
                continue
            with self._lock:
                self._sockets.update((client, server))
                self.counts["connections"] += 1
            thread = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _decide(self, upstream: bool, handshaken: bool) -> tuple[float, str]:
        with self._lock:
            f = self.faults
            self.counts["chunks_up" if upstream else "chunks_down"] += 1
            roll = self._rng.random()
            fault = ""
            if upstream and f.every and self.counts["chunks_up"] % f.every == 0:
                fault = FAULTS[self.counts["scheduled"] % len(FAULTS)]
                self.counts["scheduled"] += 1
            elif upstream and roll < f.drop:
                fault = "drop"
            elif upstream and roll < f.drop + f.reset:
                fault = "reset"
            elif upstream and roll < f.drop + f.reset + f.drop_after_forward:
                fault = "drop_after_forward"
            if fault:
                self.counts[fault] += 1
            held = f.answer_latency if handshaken and not upstream else 0.0
            return f.latency + held, fault

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        sent = 0  # chunks from the client on this connection
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    sent += int(sock is client)
                    latency, fault = self._decide(upstream=sock is client, handshaken=sent >= 2)
                    if latency and self._closed.wait(latency):
                        return
                    if fault == "drop":
                        return
                    if fault == "reset":
                        _reset(client)
                        _reset(server)
                        return
                    peers[sock].sendall(data)
                    if fault == "drop_after_forward":
                        return
        except (OSError, ValueError):
            # ValueError: another thread (a cut of every connection, the proxy's close) closed one
            # of the two sockets while select() was handed it (its descriptor is then -1).
            return
        finally:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()
                with self._lock:
                    self._sockets.discard(sock)


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST ("connection reset by peer")."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

"""The drain's client cost per eviction, against a local TLS stub of the eviction endpoint.

Run from the repository root, the code before a change beside the code after it, in one sitting:

    mkdir -p /tmp/before && git archive BEFORE_COMMIT engine | tar -x -C /tmp/before
    .venv/bin/python tests/bench/drain_client.py --before /tmp/before

Why a stub and not the local control plane: on this machine the control plane (etcd, the API
server, kwok's simulated kubelets) shares the two cores with scalebot, so its CPU and its own
latency swings drown the client's part, which is what is measured here. The stub is a separate
process (its CPU is not counted) that answers `POST .../pods/NAME/eviction` like the API server:
over TLS (a real handshake per new connection), 201 with a Status body, after a latency that
models a server that has room for CAPACITY requests at once (beyond it requests queue) and that
gets busier for reasons of its own after the first quarter of the run (the kubelets deleting the
evicted pods): IDLE ms per answer, then BUSY ms. It counts the TCP connections it accepts.

The measured side is the drain's own path: `KubeClient.evict_pod` (the real client, no client-side
rate limit so that the gate, not the token bucket, sets the level) called from a pool of 64
workers through the `AdaptiveGate` as `engine.operations.runner` builds it (start 16, ceiling 64),
the pool mapped over the pods in order as `engine.drain.passes.run_pass` does, in PASSES passes
with the workers idle between them (the gate, like the runner's per cluster, lives across them).
Client CPU is this process's CPU time over the run divided by the evictions. The in-flight level
is the time-weighted mean of evictions inside the gate while the server is busy (the last three
quarters).

A second figure is the pod feed's settling: N DELETED events of awaited pods through
`engine.drain.pod_feed.PodFeed` (a scripted watch), CPU per event at two sizes.

With `--eviction-processes N`, a third side runs this tree with its evictions sent by N worker
processes (`runner.eviction_processes`, `engine.kube.offload`): its client CPU is then this
process's part, and the workers' CPU per eviction is given beside it.

Each side runs in a child process with its tree first on the import path (this file imports
only `engine`, so the same file measures both trees); the sides alternate, `--rounds` times.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EVICTIONS = 4000
CAPACITY = 60
IDLE_MS = 50.0
BUSY_MS = 200.0
WORKERS = 64
PASSES = 4
FEED_SIZES = (2900, 29000)
EVICTION_PROCESSES_ENV = "SCALEBOT_BENCH_EVICTION_PROCESSES"


# -- the stub server (its own process) -------------------------------------------------------------


def serve(port_file: Path, cert: Path, key: Path, evictions: int) -> None:
    slots = threading.BoundedSemaphore(CAPACITY)
    lock = threading.Lock()
    counts = {"connections": 0, "evictions": 0}
    busy_after = evictions // 4
    answer = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.request.do_handshake()  # here, in the connection's thread, not the accepting one
            super().setup()
            with lock:
                counts["connections"] += 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                counts["evictions"] += 1
                seen = counts["evictions"]
            latency = (IDLE_MS if seen <= busy_after else BUSY_MS) / 1000
            with slots:  # beyond CAPACITY at once, requests queue here
                time.sleep(latency)
            self._send(201, answer)

        def do_GET(self) -> None:
            with lock:
                body = json.dumps(counts).encode()
            self._send(200, body)

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # a burst of connections is not dropped at the SYN (the default is 5)
        daemon_threads = True

    httpd = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    port_file.write_text(str(httpd.server_address[1]))
    httpd.serve_forever()


# -- the measured side (a child process per tree) --------------------------------------------------


@dataclass
class InFlight:
    """Evictions inside the gate over time: the time-weighted mean from the answer `busy_from` on."""

    busy_from: int
    inside: int = 0
    answered: int = 0
    since: float = 0.0
    area: float = 0.0
    start: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def change(self, delta: int) -> None:
        with self.lock:
            now = time.monotonic()
            if self.start is not None:
                self.area += self.inside * (now - self.since)
            self.since = now
            self.inside += delta
            if delta < 0:
                self.answered += 1
                if self.answered == self.busy_from:
                    self.start = now

    def mean(self) -> float:
        with self.lock:
            now = time.monotonic()
            assert self.start is not None
            return (self.area + self.inside * (now - self.since)) / max(1e-9, now - self.start)


def measure_evictions(server: str, evictions: int) -> dict[str, Any]:
    from engine.domain.model import PodInfo
    from engine.domain.settings import AimdSettings
    from engine.drain.concurrency import AdaptiveGate, AimdController
    from engine.kube.client import KubeClient

    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: stub\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: stub\n  context:\n    cluster: stub\n    user: u\ncurrent-context: stub\n"
    )
    pods = [
        PodInfo(namespace="shop", name=f"web-{i}", uid=f"uid-{i}", node_name=f"n{i % 100}")
        for i in range(evictions)
    ]
    level = InFlight(busy_from=evictions // 4)
    processes = int(os.environ.get(EVICTION_PROCESSES_ENV, "0"))
    offloaded = None
    if processes:  # the offload exists in the trees that have it only
        from engine.kube import offload

        offloaded = offload.Offload(processes)
        offload.install(offloaded)
    with KubeClient.from_config(kubeconfig=str(kubeconfig), qps=0) as kube:
        gate = AdaptiveGate(
            AimdController(AimdSettings(initial=16, minimum=2, maximum=64)),
            time.monotonic,
            kube.last_wait_seconds,
        )

        def evict(pod: PodInfo) -> None:
            level.change(+1)
            try:
                kube.evict_pod(pod)
            finally:
                level.change(-1)

        def act(pod: PodInfo) -> bool:
            return gate.run(lambda: evict(pod) is None, lambda _: False)

        if offloaded is not None:  # started before the clock: their start is not an eviction's cost
            kube.evict_pod(pods[0])
        cpu = time.process_time()
        workers_cpu = children_cpu()
        wall = time.monotonic()
        done = 0
        with ThreadPoolExecutor(max_workers=WORKERS) as workers:
            for first in range(0, evictions, -(-evictions // PASSES)):
                # One drain pass each (the workers idle between them, as between a drain's passes).
                done += sum(1 for _ in workers.map(act, pods[first : first + -(-evictions // PASSES)]))
        wall = time.monotonic() - wall
        cpu = time.process_time() - cpu
        workers_cpu = children_cpu() - workers_cpu
        if offloaded is not None:
            offloaded.close()
        busy_level = level.mean()
        limits = [limit for _, limit in gate.controller.history]
    return {
        "evictions": done,
        "wall_s": wall,
        "cpu_ms_per_eviction": cpu * 1000 / done,
        "eviction_processes": processes,
        "workers_cpu_ms_per_eviction": workers_cpu * 1000 / done,
        "evictions_per_s": done / wall,
        "in_flight_busy_mean": busy_level,
        "peak_in_flight": gate.peak_in_flight,
        "final_limit": gate.controller.limit,
        "limit_changes": len(limits),
        "history": [f"{why}: {limit}" for why, limit in gate.controller.history],
    }


def children_cpu() -> float:
    """CPU seconds of this process's live children (the eviction worker processes), from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for children in Path("/proc/self/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:  # a thread that ended meanwhile
            continue
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def measure_feed(size: int) -> dict[str, Any]:
    from engine.domain.model import PodInfo
    from engine.drain.pod_feed import PodFeed
    from engine.kube.api import PodEvent, PodListing

    pods = [PodInfo(namespace="shop", name=f"p{i}", uid=f"uid-{i}", node_name="w-1") for i in range(size)]
    streams: queue.Queue[Iterator[PodEvent]] = queue.Queue()

    class Watch:
        def __init__(self, events: list[PodEvent]) -> None:
            self.events = events

        def __iter__(self) -> Iterator[PodEvent]:
            started.wait()
            yield from self.events
            stop.wait()

        def close(self) -> None:
            stop.set()

    class Api:
        def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
            return pods

        def list_pods_at(self, *, node_names: Collection[str] | None) -> PodListing:
            return PodListing(pods=pods, resource_version="1")

        def watch_pods(self, *, node_names: Collection[str], resource_version: str) -> Watch:
            watch = Watch(
                [PodEvent(type="DELETED", pod=p, resource_version=str(2 + i)) for i, p in enumerate(pods)]
            )
            streams.put(iter(watch))
            return watch

    started, stop, cue = threading.Event(), threading.Event(), threading.Event()
    feed = PodFeed(Api(), ["w-1"], on_change=cue.set)  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        streams.get(timeout=10)
        feed.await_gone({p.uid for p in pods})
        # The watch thread does the work; this thread only waits: the process's CPU is the feed's.
        before = time.process_time()
        started.set()
        if not cue.wait(600):
            raise RuntimeError("the feed never saw the last awaited pod go")
        spent = time.process_time() - before
    finally:
        feed.close()
    return {"events": size, "cpu_s": spent, "cpu_us_per_event": spent * 1e6 / size}


def child(server: str, evictions: int, feed_sizes: list[int]) -> None:
    import engine

    result: dict[str, Any] = {"engine": str(Path(engine.__file__).parent)}
    result["drain"] = measure_evictions(server, evictions)
    result["feed"] = [measure_feed(size) for size in feed_sizes]
    print(json.dumps(result))


# -- the comparison ----------------------------------------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def run_side(
    tree: Path, evictions: int, feed_sizes: list[int], work: Path, eviction_processes: int = 0
) -> dict[str, Any]:
    cert, key = (
        self_signed(work) if not (work / "cert.pem").exists() else (work / "cert.pem", work / "key.pem")
    )
    port_file = work / f"port-{time.monotonic_ns()}"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), str(cert), str(key), str(evictions)],
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline:
                raise RuntimeError("the stub server did not start")
            threading.Event().wait(0.05)
        url = f"https://127.0.0.1:{port_file.read_text()}"
        out = subprocess.run(
            [sys.executable, __file__, "--child", url, str(evictions), ",".join(map(str, feed_sizes))],
            env={**os.environ, "PYTHONPATH": str(tree), EVICTION_PROCESSES_ENV: str(eviction_processes)},
            check=False,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the measured side failed:\n{out.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        import urllib.request

        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(url + "/stats", context=context, timeout=10) as answer:
            result["server"] = json.loads(answer.read())
        return result
    finally:
        server.terminate()
        server.wait(10)


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    head = (
        "| code | evictions/s | client CPU per eviction (worker processes') | in flight (mean, busy server) "
        "| peak | final limit "
        "| TCP+TLS connections opened | feed CPU per delete event at "
        + " / ".join(f"{s:,}" for s in FEED_SIZES)
        + " pods |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for name, r in rows:
        d = r["drain"]
        feed = " / ".join(f"{f['cpu_us_per_event']:,.0f} µs" for f in r["feed"])
        lines.append(
            f"| {name} | {d['evictions_per_s']:.0f} | {d['cpu_ms_per_eviction']:.2f} ms "
            f"({d.get('workers_cpu_ms_per_eviction', 0.0):.2f} ms) "
            f"| {d['in_flight_busy_mean']:.1f} | {d['peak_in_flight']} | {d['final_limit']} "
            f"| {r['server']['connections']:,} | {feed} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--serve":
        serve(Path(args[1]), Path(args[2]), Path(args[3]), int(args[4]))
        return 0
    if args and args[0] == "--child":
        child(args[1], int(args[2]), [int(s) for s in args[3].split(",") if s])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", type=Path, help="a tree holding the engine package to compare with")
    parser.add_argument("--evictions", type=int, default=EVICTIONS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--feed-sizes", default=",".join(map(str, FEED_SIZES)))
    parser.add_argument(
        "--eviction-processes",
        type=int,
        default=0,
        help="a third side: this tree, its evictions sent by N worker processes (runner.eviction_processes)",
    )
    options = parser.parse_args(args)
    here = Path(__file__).resolve().parents[2]
    sides: list[tuple[str, Path, int]] = [("before", options.before, 0)] if options.before else []
    sides.append(("after", here, 0))
    if options.eviction_processes:
        sides.append(
            (f"after, {options.eviction_processes} eviction processes", here, options.eviction_processes)
        )
    sizes = [int(s) for s in options.feed_sizes.split(",") if s]
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(options.rounds):
            for name, tree, processes in sides:
                result = run_side(tree, options.evictions, sizes, Path(work), processes)
                rows.append((f"{name} ({round_ + 1})", result))
                print(f"{name} round {round_ + 1}: {json.dumps(result)}", file=sys.stderr)
    print(table(rows))
    for name, _, _ in sides:
        cpu = [r["drain"]["cpu_ms_per_eviction"] for n, r in rows if n.rsplit(" (", 1)[0] == name]
        print(f"{name}: client CPU per eviction, median of {len(cpu)}: {statistics.median(cpu):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

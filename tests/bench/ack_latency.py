"""Ack latency of /scale under load: concurrent signed slash commands against `scalebot run` in HTTP mode.

Not a test (pytest does not collect this file): it prints figures. Run from the repository root:

    .venv/bin/python -m tests.bench.ack_latency [--requests 200] [--slow-cluster]

What runs is `bot.runtime.run.build_service(...).serve()`, the service `scalebot run` starts: the real
`Operations` and `Schedules` on a SQLite file in a temporary directory, the SQLite outbox, the
health server, and the bot in HTTP mode (Bolt's WSGI adapter under waitress) on a loopback port.
The one stand-in is the cluster connection: the built-in simulated cluster (bot.runtime.wiring), since a
benchmark of acks must not depend on an API server. Slack is the local Web API of
tests/slack/harness.py. Latency is the time from sending a signed request to receiving the HTTP
response, what Slack's 3 s deadline measures. A mix of requests (scale, zero, status), usage
errors and refused names is sent. `--slow-cluster` makes every listing of the cluster take 2 s,
which shows that planning never sits between a person and their ack.

The requests are sent by a process of their own (`--client`), and the local Web API answers from a
process of its own (`--slack-api`), as Slack sends and answers from its own machines: 200 sending
threads, or the Web API's handlers, inside the service's process would take the interpreter lock from
the service they measure. On a machine of two or more cores the service is pinned to the first core
and both harness processes to the others (as scalebot runs in a pod of one CPU while Slack's machines
are elsewhere), so the harness's own work does not take the service's core; `--shared-cores` lets
all three share every core instead.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bot.cli.console import console_policy
from bot.config.cluster_settings import ClusterSettings
from bot.config.settings import Secret, ServerSettings, Settings, SlackSettings
from bot.runtime import run, wiring
from engine.domain.model import NodeInfo
from engine.kube.fake import FakeCluster
from tests.bench.cores import core_split
from tests.slack.harness import HttpResult, Signer, SlackApiServer, get, post

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0BENCH"
OPERATOR = "U0ALICE"


class _SlowListing(FakeCluster):
    delay = 0.0

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        threading.Event().wait(self.delay)
        return super().list_nodes(label_selector=label_selector)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serving(url: str) -> bool:
    try:
        return get(url).status == 200
    except OSError:
        return False


def send_burst(base: str, slack_api: str, requests: int) -> dict[str, object]:
    """Sign `requests` slash commands, release them at once, and return what each answer took."""
    signer = Signer(SECRET)
    texts = ["scale web 1", "status", "zero", "stauts", "drain web-1;rm", "scale batch 2", "zero web"]
    bodies = [
        signer.slash_command(
            texts[i % len(texts)],
            user_id=OPERATOR,
            channel_id=CHANNEL,
            response_url=f"{slack_api}/response/bench{i}",
        )
        for i in range(requests)
    ]
    barrier = threading.Barrier(requests)

    def send(body: bytes) -> HttpResult:
        barrier.wait()  # all at once
        return post(f"{base}/slack/events", body, signer.headers(body), timeout=30)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=requests) as pool:
        results = list(pool.map(send, bodies))
    return {
        "wall": time.monotonic() - started,
        "latencies_ms": sorted(r.elapsed * 1000 for r in results),
        "failures": sum(r.status != 200 for r in results),
    }


def serve_slack_api() -> None:
    """Be the local Web API: print its base URL, answer until standard input closes, then print
    how many calls it answered (the service's follow-ups: response_url answers and cards)."""
    api = SlackApiServer().start()
    print(json.dumps({"base": api.base, "url": api.url}), flush=True)
    sys.stdin.read()
    calls = api.calls
    api.close()
    print(json.dumps({"calls": len(calls)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--slow-cluster", action="store_true", help="every cluster listing takes 2 s")
    parser.add_argument(
        "--client", nargs=2, metavar=("SCALEBOT_URL", "SLACK_API_URL"), help="be the sending process"
    )
    parser.add_argument("--slack-api", action="store_true", help="be the local Web API's process")
    parser.add_argument(
        "--shared-cores",
        action="store_true",
        help="do not pin the service to one core and the sender and Web API to the others",
    )
    args = parser.parse_args()
    if args.client:
        print(json.dumps(send_burst(args.client[0], args.client[1], args.requests)))
        return
    if args.slack_api:
        serve_slack_api()
        return

    split = None if args.shared_cores else core_split()
    me = [sys.executable, "-m", "tests.bench.ack_latency"]
    api = subprocess.Popen([*me, "--slack-api"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if split is not None:
            os.sched_setaffinity(0, split[0])  # this thread, and every service thread started after it
            os.sched_setaffinity(api.pid, split[1])
        measure(args, api, split)
    finally:
        if api.poll() is None:
            api.kill()
            api.wait(timeout=30)


def measure(
    args: argparse.Namespace, api: subprocess.Popen[str], split: tuple[set[int], set[int]] | None
) -> None:
    """Serve, send the burst from another process, print the figures, and settle the service."""
    assert api.stdin is not None and api.stdout is not None
    api_addr = json.loads(api.stdout.readline())
    tmp = tempfile.TemporaryDirectory()
    handle, fake = wiring.simulated_cluster("simulated")
    fake.__class__ = _SlowListing  # the same in-memory cluster, with slow listings on demand
    _SlowListing.delay = 2.0 if args.slow_cluster else 0.0
    http_port, health_port = _free_port(), _free_port()
    settings = Settings(
        slack=SlackSettings(
            bot_token=Secret("xoxb-bench"), signing_secret=Secret(SECRET), api_url=api_addr["url"]
        ),
        clusters={
            "simulated": ClusterSettings(
                name="simulated", context="", default_channels=(CHANNEL,), policy=console_policy("simulated")
            )
        },
        channels={CHANNEL: "simulated"},
        server=ServerSettings(host="127.0.0.1", http_port=http_port, health_port=health_port),
        db_path=Path(tmp.name) / "scalebot.db",
    )
    original = run._connect
    run._connect = lambda _settings: {"simulated": handle}  # the simulated cluster stands in
    try:
        service = run.build_service(settings, leader_election=False)
    finally:
        run._connect = original
    serving = threading.Thread(target=service.serve, name="scalebot-run")
    serving.start()
    base = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 30
    while not _serving(f"{base}/healthz"):
        assert time.monotonic() < deadline, "scalebot run did not start serving"
        time.sleep(0.05)

    client = [sys.executable, "-m", "tests.bench.ack_latency", "--requests", str(args.requests)]
    sender = subprocess.Popen(
        [*client, "--client", base, api_addr["base"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if split is not None:
            os.sched_setaffinity(sender.pid, split[1])  # before its interpreter has started its threads
        out, err = sender.communicate(timeout=300)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait(timeout=30)
        service.stop_event.set()
    if sender.returncode != 0:
        raise SystemExit(f"the sending process failed:\n{err}")
    burst = json.loads(out.strip().splitlines()[-1])
    latencies: list[float] = burst["latencies_ms"]
    failures, wall = int(burst["failures"]), float(burst["wall"])
    p99 = latencies[max(0, round(0.99 * len(latencies)) - 1)]
    print(f"requests        {len(latencies)} concurrent ({'slow' if args.slow_cluster else 'fast'} cluster)")
    cores = (
        f"service on CPU {sorted(split[0])}, sender and Web API on CPUs {sorted(split[1])}"
        if split is not None
        else f"service, sender and Web API share CPUs {sorted(os.sched_getaffinity(0))}"
    )
    print(f"cores           {cores}")
    print(f"non-200         {failures}")
    print(f"ack p50         {statistics.median(latencies):.1f} ms")
    print(f"ack p99         {p99:.1f} ms")
    print(f"ack max         {latencies[-1]:.1f} ms   (Slack's deadline: 3000 ms)")
    print(f"burst wall time {wall * 1000:.0f} ms (the sending process's own count)")
    serving.join(timeout=300)  # accepted requests finish planning and answering first
    api.stdin.close()
    answered = json.loads(api.stdout.readline())["calls"]
    api.wait(timeout=30)
    print(f"Web API calls   {answered} (follow-ups and cards the service sent after its acks)")
    tmp.cleanup()


if __name__ == "__main__":
    main()

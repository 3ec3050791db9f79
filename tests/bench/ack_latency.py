"""Ack latency of /scale under load: 200 concurrent slash commands against the real HTTP server.

Not a test (pytest does not collect this file): it prints figures. Run from the repository root:

    .venv/bin/python -m tests.bench.ack_latency [--requests 200] [--slow-ops]

The bot is the production wiring (build_app + serve_http + Sender + Progress) against the local
Slack Web API from tests/slack/harness.py and the real operations service (SQLite in a temporary
directory, the in-memory clusters of tests/slack/conftest.py, runner held). Latency is the time
from sending a signed request to receiving the HTTP response, i.e. what Slack's 3 s ack deadline
measures. `--slow-ops` blocks every listing of the cluster until all acks are in, which shows that planning
never sits between a person and their ack. A mix of valid requests and usage errors is sent.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bot.app import serve_http
from tests.slack.conftest import CHANNEL, OPERATOR, SECRET, assemble, make_engine, make_settings
from tests.slack.harness import HttpResult, Signer, SlackApiServer, post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--slow-ops", action="store_true", help="block the operations service during the burst"
    )
    args = parser.parse_args()

    api = SlackApiServer().start()
    tmp = tempfile.TemporaryDirectory()
    engine = make_engine(Path(tmp.name) / "scalebot.db")
    cluster = engine.clusters["dev-eu"]
    bot = assemble(api, engine, make_settings(api))
    http = serve_http(bot.app, 0, host="127.0.0.1")
    url = f"http://127.0.0.1:{http.port}/slack/events"
    signer = Signer(SECRET)
    texts = ["scale web 1", "status", "zero dev-eu", "stauts", "drain web-1;rm"]
    bodies = [
        signer.slash_command(
            texts[i % len(texts)], user_id=OPERATOR, channel_id=CHANNEL, response_url=api.response_url()
        )
        for i in range(args.requests)
    ]
    if args.slow_ops:
        cluster.gate.clear()

    def send(body: bytes) -> HttpResult:
        return post(url, body, signer.headers(body), timeout=30)

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=args.requests) as pool:
            results = list(pool.map(send, bodies))
        wall = time.monotonic() - started
    finally:
        cluster.gate.set()
    latencies = sorted(r.elapsed * 1000 for r in results)
    failures = sum(r.status != 200 for r in results)
    p99 = latencies[max(0, round(0.99 * len(latencies)) - 1)]
    print(f"requests        {len(results)} concurrent ({'slow ops' if args.slow_ops else 'fast ops'})")
    print(f"non-200         {failures}")
    print(f"ack p50         {statistics.median(latencies):.1f} ms")
    print(f"ack p99         {p99:.1f} ms")
    print(f"ack max         {latencies[-1]:.1f} ms   (Slack's deadline: 3000 ms)")
    print(f"burst wall time {wall * 1000:.0f} ms")
    bot.executor.wait_idle(60)
    http.close()
    bot.executor.shutdown(wait=True)
    bot.progress.stop(timeout=1)
    bot.sender.stop(timeout=0.5)  # 200 cards to one channel at ~1/s would take minutes; not measured here
    engine.close()
    api.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()

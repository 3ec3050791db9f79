"""`python -m tests.bench.fleet_soak`: a fleet soak of `scalebot run` as a separate process.

    python -m tests.bench.fleet_soak [--clusters 10] [--minutes 15] [--pods 4] [--seed 1] [--work-dir DIR]
    python -m tests.bench.fleet_soak --cpu --clusters 5 --pods 200     # the client's CPU per sleep

A benchmark-tier run, not part of the test suite. It starts its own local control plane
(`localcluster`) and builds N clusters on it, each a pair of kwok label pools (2 + 1 nodes) under
a pool label of its own, carrying a Deployment of `--pods` pods (grace 1 s) in a namespace of its
own. `scalebot run` (the real command: `python -m bot run`, its own process group, HTTP mode, the
production runner and sender settings) serves all N clusters from one SQLite file, as scalebot's
ServiceAccount, against the harness's local Slack Web API (`tests.reliability.support.InFlightSlack`,
Slack's limits enforced). A zero-scale needs one approval.

Until the time is up, seeded random steps:
- `/scale zero cN` in the cluster's channel, approved by a click on its card (sometimes clicked
  twice, sometimes by two approvers at once), `/scale wake cN`, and a storm (every idle cluster's
  zero or wake at once, each approved);
- SIGKILL of the scalebot process, restarted by the harness as Kubernetes would (SIGTERM at the end);
- kube-apiserver killed and started again a few seconds later;
- Slack 429 storms (the next calls of chat.postMessage and chat.update refused with Retry-After)
  and stalls (calls held `--stall` seconds, 10-20 by default, before Slack processes and answers
  them: beyond the client's 15 s timeout the sender has retried meanwhile).

After every step the invariants are checked (from the database as a second reader, the Slack
calls the local Web API recorded, and the cluster):
- no operation lost: every command that got a 200 ack created an operation (or was answered
  with a refusal), and every operation once stored is still stored;
- no double approval: at most one `approve` in the audit log per operation, no operation
  started twice or ended twice (one `started` and at most one final row in its journal);
- no double post: Slack never accepted two posts of the same text in the same channel and thread;
- every operation is terminal, or resumable: a running one is claimed by the live process
  (within 60 s of its start);
- the audit chain verifies (keyed, as a deployment's).
At the end the faults stop, pending approvals are given, every operation must end (terminal
within 10 minutes), the outbox must be empty and the process must exit 0 on SIGTERM.

It samples the scalebot process's threads, RSS and CPU time (from /proc) every second. It prints
the figures and exits 1 on a violation. The results are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bot.slack.blocks.operations import ACTION_APPROVE
from engine.store.audit import AuditKey
from engine.store.readonly import verify_audit_file
from localcluster import objects, rest, waits
from tests.reliability.support import (
    InFlightSlack,
    Proc,
    Processes,
    free_port,
    wait_healthy,
)
from tests.slack.harness import Signer, all_text, buttons_of, post

OPERATOR, APPROVER, APPROVER2 = "U0SOAKOPERATOR", "U0SOAKAPPROVER", "U0SOAKAPPROVER2"
BOT_TOKEN = "xoxb-7357-fleet-soak-bottoken"
SIGNING_SECRET = "fleet-soak-signing-secret-7357"
AUDIT_KEY = "fleet-soak-audit-key-0123456789abcdef0123456789"
POOLS = {"a": 2, "b": 1}
TERMINAL = {"succeeded", "failed", "rejected", "expired", "superseded", "cancelled"}


def cluster_name(i: int) -> str:
    return f"c{i}"


def channel_of(i: int) -> str:
    return f"C0SOAK{i}"


def pool_key(i: int) -> str:
    return f"c{i}.soak.scalebot.test/pool"


@dataclass
class Figures:
    clusters: int
    minutes: float
    pods: int
    seed: int
    steps: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    threads_peak: int = 0
    rss_peak_mib: float = 0.0
    cpu_s: float = 0.0
    storms: list[dict[str, Any]] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)
    slack_429: int = 0
    post_lookups: int = 0
    """conversations.history / conversations.replies calls: a post that may have landed, looked for."""
    attempts_left: int = 0
    """Posts still recorded as in flight in the outbox at the end (none expected)."""
    elapsed_s: float = 0.0

    def report(self) -> str:
        lines = [
            f"fleet soak: {self.clusters} clusters x {self.pods} pods, {self.elapsed_s / 60:.1f} min, "
            f"seed {self.seed}",
            "steps: " + ", ".join(f"{k} {n}" for k, n in sorted(self.steps.items())),
            "faults: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())),
            "commands: " + ", ".join(f"{k} {n}" for k, n in sorted(self.commands.items())),
            "answers without an operation: " + json.dumps(dict(self.refusals)),
            "operations: " + ", ".join(f"{k} {n}" for k, n in sorted(self.operations.items())),
            f"invariant checks: {self.checks}, violations: {len(self.violations)}",
            f"Slack 429 answers (injected storms and limits): {self.slack_429}",
            f"posts looked for before posting again: {self.post_lookups}; "
            f"post attempts left in the outbox: {self.attempts_left}",
            f"scalebot process: threads peak {self.threads_peak}, RSS peak {self.rss_peak_mib:.0f} MiB, "
            f"CPU {self.cpu_s:.1f} s over all its lives",
        ]
        lines += [f"storm: {json.dumps(s)}" for s in self.storms]
        lines += [f"VIOLATION: {v}" for v in self.violations]
        return "\n".join(lines)


def _proc_stat(pid: int) -> tuple[int, float, float] | None:
    """(threads, RSS MiB, CPU seconds) of a live process, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15 of proc(5))
    rss = values.get("VmRSS", "0 kB")  # absent once the process has exited (a zombie)
    return int(values["Threads"]), int(rss.split()[0]) / 1024, ticks / 100


def children_cpu(pid: int) -> float:
    """CPU seconds of the process's live children (its eviction workers, `runner.eviction_processes`)."""
    total = 0.0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:
            continue
        for child in pids:
            got = _proc_stat(int(child))
            total += got[2] if got is not None else 0.0
    return total


def thread_names(pid: int) -> Counter[str]:
    """The process's Python threads by name (digits dropped), from `py-spy dump` (empty without it)."""
    spy = Path(sys.executable).parent / "py-spy"
    try:
        out = subprocess.run(
            [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return Counter()
    found = re.findall(r'^Thread \S+ \((?:idle|active)[^)]*\): "([^"]*)"', out, re.MULTILINE)
    return Counter(re.sub(r"[-_]?\d+(?:_\d+)?$", "", name) or name for name in found)


class Sampler:
    """The scalebot process's threads, RSS and CPU, once a second (summing CPU over restarts)."""

    def __init__(self, figures: Figures) -> None:
        self.figures = figures
        self.pid: int | None = None
        self.cpu_done = 0.0
        self.cpu_now = 0.0
        self.threads_now = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def switch(self, pid: int | None) -> None:
        self.cpu_done += self.cpu_now
        self.cpu_now = 0.0
        self.pid = pid

    def cpu_total(self) -> float:
        self.sample()
        return self.cpu_done + self.cpu_now

    def sample(self) -> None:
        pid = self.pid
        if pid is None:
            return
        got = _proc_stat(pid)
        if got is None:
            return
        threads, rss, cpu = got
        self.threads_now = threads
        self.cpu_now = cpu
        self.figures.threads_peak = max(self.figures.threads_peak, threads)
        self.figures.rss_peak_mib = max(self.figures.rss_peak_mib, rss)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()


class FleetSoak:
    def __init__(
        self,
        cp: Any,
        work: Path,
        figures: Figures,
        rng: random.Random,
        stall: tuple[float, float] = (10, 20),
        eviction_processes: int = 0,
    ) -> None:
        self.eviction_processes = eviction_processes
        self.cp = cp
        self.work = work
        self.figures = figures
        self.rng = rng
        self.admin = cp.admin_api_client(pool_size=8)
        self.n = figures.clusters
        self.db = work / "scalebot.db"
        self.procs = Processes(work)
        self.slack = InFlightSlack()
        self.slack.start()
        self.signer = Signer(SIGNING_SECRET)
        self.sampler = Sampler(figures).start()
        self.proc: Proc | None = None
        self.lives = 0
        self.started_at = 0.0
        self.seen_ops: set[str] = set()
        self.clicked: Counter[str] = Counter()
        self.key = AuditKey(AUDIT_KEY.encode())
        self.stall = stall
        self.sent = 0
        self.config, self.url, self.env = self._write_config()

    # -- set-up ------------------------------------------------------------------------------------

    def build(self) -> None:
        for i in range(self.n):
            namespace = f"soak-{cluster_name(i)}"
            group = {"scalebot.test/group": f"soak-{cluster_name(i)}"}
            objects.create_namespace(self.admin, namespace)
            for pool, size in POOLS.items():
                full = f"{cluster_name(i)}-{pool}"
                objects.create_node_pool(self.admin, full, size, labels={pool_key(i): full, **group})
            # Small requests, so that hundreds of pods fit on three nodes (110 pods each).
            objects.create_deployment(
                self.admin,
                namespace,
                "web",
                self.figures.pods,
                node_selector=group,
                grace=1,
                cpu="10m",
                memory="16Mi",
            )
        for i in range(self.n):
            waits.wait_for_deployment_available(self.admin, f"soak-{cluster_name(i)}", "web", timeout=300)

    def _write_config(self) -> tuple[Path, str, dict[str, str]]:
        http_port, health_port = free_port(), free_port()
        users = {OPERATOR: "operator", APPROVER: "approver", APPROVER2: "approver"}
        config: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "http_port": http_port, "health_port": health_port},
            "runner": {"eviction_processes": self.eviction_processes},
            "channels": {channel_of(i): cluster_name(i) for i in range(self.n)},
            "clusters": {
                cluster_name(i): {
                    "kubeconfig": str(self.cp.scalebot_kubeconfig),
                    "context": "",
                    "provider": "labels",
                    "pool_label": pool_key(i),
                    "default_channels": [channel_of(i)],
                    "policy": {"users": users, "approval_required_for": ["zero"], "approvals_required": 1},
                }
                for i in range(self.n)
            },
        }
        path = self.work / "scalebot.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.slack.url,
            "SCALEBOT_DB": str(self.db),
            "SLACK_APP_TOKEN": "",
            "SCALEBOT_AUDIT_KEY": AUDIT_KEY,
        }
        return path, f"http://127.0.0.1:{http_port}", env

    def start(self) -> None:
        self.lives += 1
        argv = ["-v", "run", "--config", str(self.config), "--no-leader-election"]
        self.proc = self.procs.scalebot(*argv, name=f"run-{self.lives}", env=self.env)
        wait_healthy(self.url, self.proc, timeout=120)
        self.sampler.switch(self.proc.pid)
        self.started_at = time.monotonic()

    def close(self) -> None:
        self.sampler.stop()
        self.procs.cleanup()
        self.slack.close()
        self.admin.close()

    # -- reading the database, as an operator would -----------------------------------------------

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.db.exists():
            return []
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            conn.close()

    def ops(self) -> dict[str, tuple[str, str, str, str]]:
        """id → (cluster, kind, state, approval_id)."""
        rows = self._rows("SELECT id, cluster, kind, state, approval_id FROM operations")
        return {r[0]: (r[1], r[2], r[3], r[4] or "") for r in rows}

    def _unsent(self) -> int:
        rows = self._rows("SELECT COUNT(*) FROM outbox WHERE sent = 0")
        return int(rows[0][0]) if rows else 0

    def busy(self) -> set[str]:
        return {c for c, _, state, _ in self.ops().values() if state not in TERMINAL}

    def nodes_of(self, i: int) -> int:
        return len(rest.list_items(self.admin, rest.node_path(), label_selector=pool_key(i)))

    # -- steps -------------------------------------------------------------------------------------

    def command(self, text: str, i: int) -> bool:
        """A signed slash command in cluster i's channel; True when a new operation was stored."""
        assert self.proc is not None
        before = set(self.ops())
        self.sent += 1
        reply = f"cmd-{self.sent}"
        body = self.signer.slash_command(
            text, user_id=OPERATOR, channel_id=channel_of(i), response_url=self.slack.response_url(reply)
        )
        kind = text.split(maxsplit=1)[0]
        try:
            answer = post(f"{self.url}/slack/events", body, self.signer.headers(body), timeout=10)
        except OSError as exc:
            self.figures.violations.append(f"{text}: no ack ({exc})")
            return False
        if answer.status != 200:
            self.figures.violations.append(f"{text}: ack {answer.status}")
            return False
        deadline, answered = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            new = [op for op, (c, _, _, _) in self.ops().items() if op not in before and c == cluster_name(i)]
            if new:
                self.figures.commands[f"{kind} stored"] += 1
                return True
            replies = [c for c in self.slack.calls if c.path.endswith(f"/response/{reply}")]
            if replies and answered is None:  # a reply: an operation follows within seconds, or none
                answered = time.monotonic()
            if answered is not None and time.monotonic() - answered > 5:
                self.figures.commands[f"{kind} answered without an operation"] += 1
                self.figures.refusals[all_text(replies[-1])[:120]] += 1
                return False
            time.sleep(0.2)  # polling the database with a deadline
        self.figures.violations.append(f"{text}: acked, but no operation and no answer within 60 s (lost)")
        return False

    def approve_pending(self, *, double: bool = False) -> int:
        """Click Approve on the card of every operation awaiting approval; the number clicked."""
        clicked = 0
        pending = {a: op for op, (_, _, s, a) in self.ops().items() if s == "awaiting_approval" and a}
        if not pending:
            return 0
        for call in self.slack.calls_to("chat.postMessage", ok_only=True):
            if ACTION_APPROVE not in str(call.body):
                continue
            for button in buttons_of(call):
                if button.get("action_id") != ACTION_APPROVE:
                    continue
                value = str(button.get("value"))
                approval = value if value in pending else None
                if approval is None:
                    continue
                voters = [APPROVER, APPROVER] if double else [APPROVER]
                if double and self.rng.random() < 0.5:
                    voters = [APPROVER, APPROVER2]
                threads = [
                    threading.Thread(target=self._click, args=(call, value, voter), daemon=True)
                    for voter in voters
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(15)
                self.clicked[pending.pop(approval)] += len(voters)
                clicked += 1
        return clicked

    def approve_twice(self) -> None:
        self.approve_pending(double=True)

    def _click(self, card: Any, value: str, voter: str) -> None:
        payload = self.signer.block_actions(
            ACTION_APPROVE,
            value,
            user_id=voter,
            channel_id=str(card.body["channel"]),
            message_ts=str(card.response["ts"]),
            response_url=self.slack.response_url(f"click-{voter}"),
        )
        with contextlib.suppress(OSError):  # the process was killed meanwhile: lost, as a user's click
            post(f"{self.url}/slack/events", payload, self.signer.headers(payload), timeout=10)

    def zero_or_wake(self, i: int) -> None:
        text = f"zero {cluster_name(i)}" if self.nodes_of(i) else f"wake {cluster_name(i)}"
        if self.command(text, i):
            self.settle_card()
            self.approve_pending(double=self.rng.random() < 0.4)

    def settle_card(self) -> None:
        """Give the card a moment to be posted (Slack may be stalled: approvals are retried later)."""
        time.sleep(1.0)  # the harness's pace between a request and its approval, not synchronisation

    def storm(self, only: list[int] | None = None) -> None:
        """Every idle cluster's zero (or wake) at once (or only those of `only`), approved; the time
        to the last one's end, the process's CPU over it, its threads before and at the peak."""
        busy = self.busy()
        idle = [i for i in (range(self.n) if only is None else only) if cluster_name(i) not in busy]
        if not idle:
            return
        cpu0, t0 = self.sampler.cpu_total(), time.monotonic()
        workers0 = children_cpu(self.proc.pid) if self.proc is not None else 0.0
        threads0 = self.sampler.threads_now
        stored = []
        for i in idle:
            before = set(self.ops())
            if self.command(f"zero {cluster_name(i)}" if self.nodes_of(i) else f"wake {cluster_name(i)}", i):
                stored += [op for op in self.ops() if op not in before]
        peak, names = threads0, Counter[str]()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            self.approve_pending()
            states = self.ops()
            if self.sampler.threads_now > peak and self.proc is not None:
                peak, names = self.sampler.threads_now, thread_names(self.proc.pid)
            if all(states[op][2] in TERMINAL for op in stored if op in states):
                break
            time.sleep(0.5)  # polling with a deadline
        nodes = [self.nodes_of(i) for i in idle]
        self.figures.storms.append(
            {
                "clusters": len(idle),
                "nodes_after": sum(nodes),
                "operations": len(stored),
                "done_s": round(time.monotonic() - t0, 1),
                "cpu_s": round(self.sampler.cpu_total() - cpu0, 2),
                "workers_cpu_s": round(children_cpu(self.proc.pid) - workers0, 2)
                if self.proc is not None
                else 0.0,
                "threads_before": threads0,
                "threads_peak": peak,
                "threads_at_peak_by_name": dict(names.most_common()),
                "states": dict(Counter(self.ops()[op][2] for op in stored)),
            }
        )

    def kill9(self) -> None:
        assert self.proc is not None
        time.sleep(self.rng.uniform(0, 3))  # a random instant, not synchronisation
        self.proc.kill9()
        self.sampler.switch(None)
        self.figures.faults["scalebot SIGKILL"] += 1
        self.start()

    def apiserver(self) -> None:
        self.cp.stop_apiserver()
        self.figures.faults["kube-apiserver kill"] += 1
        time.sleep(self.rng.uniform(2, 8))  # the outage's length
        self.cp.start_apiserver()

    def slack_429(self) -> None:
        retry = self.rng.choice([1, 2, 5])
        for method in ("chat.postMessage", "chat.update"):
            self.slack.fail(method, times=self.rng.randint(3, 12), status=429, retry_after=retry)
        self.figures.faults["Slack 429 storm"] += 1

    def slack_stall(self) -> None:
        seconds = self.rng.uniform(*self.stall)
        for _ in range(self.rng.randint(1, 4)):
            self.slack.hold(lambda method, _: method.startswith("chat."), seconds)
        self.figures.faults["Slack stall"] += 1

    # -- invariants --------------------------------------------------------------------------------

    def check(self, *, final: bool = False) -> None:
        self.figures.checks += 1
        found = self.ops()
        lost = self.seen_ops - set(found)
        if lost:
            self.figures.violations.append(f"operations gone from the store: {sorted(lost)}")
        self.seen_ops |= set(found)
        for op_id, count in Counter(
            r[0] for r in self._rows("SELECT op_id FROM audit WHERE action = 'approve'")
        ).items():
            if count > 1:
                self.figures.violations.append(f"{op_id}: approved {count} times")
        for op_id, count in Counter(
            r[0] for r in self._rows("SELECT op_id FROM journal WHERE event = 'started'")
        ).items():
            if count > 1:
                self.figures.violations.append(f"{op_id}: started {count} times")
        ended = "SELECT op_id FROM journal WHERE event IN ({})".format(",".join("?" * len(TERMINAL)))
        for op_id, count in Counter(r[0] for r in self._rows(ended, tuple(sorted(TERMINAL)))).items():
            if count > 1:
                self.figures.violations.append(f"{op_id}: ended {count} times")
        posts = Counter(
            (str(c.body.get("channel")), str(c.body.get("thread_ts") or ""), all_text(c))
            for c in self.slack.calls_to("chat.postMessage", ok_only=True)
        )
        for (channel, thread, text), count in posts.items():
            if count > 1:
                self.figures.violations.append(
                    f"the same post {count} times in {channel} thread {thread or '-'}: {text[:100]!r}"
                )
        if self.proc is not None and time.monotonic() - self.started_at > 60:
            claims = {r[0]: r[1] for r in self._rows("SELECT op_id, pid FROM runner_claims")}
            for op_id, (_, _, state, _) in found.items():
                if state == "running" and claims.get(op_id) != self.proc.pid:
                    self.figures.violations.append(
                        f"{op_id} running, not claimed by the live process (claim {claims.get(op_id)})"
                    )
        if final:
            deadline = time.monotonic() + 180  # what Slack is still owed goes out (Retry-After honoured)
            while self._unsent() and time.monotonic() < deadline:
                time.sleep(1)  # polling with a deadline
            left = {op: s for op, (_, _, s, _) in found.items() if s not in TERMINAL}
            if left:
                self.figures.violations.append(f"operations not ended: {left}")
            if self._unsent():
                self.figures.violations.append(f"{self._unsent()} outbox items not sent within 180 s")
        audit = verify_audit_file(str(self.db), key=self.key)
        if audit.problems or audit.altered:
            self.figures.violations.append(f"audit chain: {audit.problems[:3]} {audit.altered}")
        # Dedupe repeated reports of one problem across checks.
        self.figures.violations = list(dict.fromkeys(self.figures.violations))

    # -- the run -----------------------------------------------------------------------------------

    def cpu(self, echo: Callable[[str], None]) -> None:
        """The client's cost of real sleeps: cluster c0's zero-scale alone, its wake, then every
        cluster's zero-scale at once, each with the process's CPU time and threads; no faults."""
        began = time.monotonic()
        self.start()
        self.storm(only=[0])
        echo(f"alone: {self.figures.storms[-1]}")
        self.storm(only=[0])  # the wake
        waits.wait_for_deployment_available(self.admin, f"soak-{cluster_name(0)}", "web", timeout=300)
        self.storm()
        echo(f"together: {self.figures.storms[-1]}")
        self.check(final=True)
        self.finish(began)

    def finish(self, began: float) -> None:
        """SIGTERM the process (exit 0 expected) and take the figures."""
        assert self.proc is not None
        self.figures.cpu_s = self.sampler.cpu_total()
        self.proc.popen.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        if code != 0:
            self.figures.violations.append(f"scalebot exited {code} on SIGTERM")
        self.sampler.switch(None)
        self.figures.operations = dict(Counter(f"{k} {s}" for _, k, s, _ in self.ops().values()))
        self.figures.slack_429 = sum(1 for c in self.slack.calls if c.status == 429)
        lookups = ("conversations.history", "conversations.replies")
        self.figures.post_lookups = sum(1 for c in self.slack.calls if c.method in lookups)
        left = self._rows("SELECT COUNT(*) FROM post_attempts")
        self.figures.attempts_left = int(left[0][0]) if left else 0
        self.figures.elapsed_s = time.monotonic() - began
        for proc in self.procs.started:
            if "Traceback" in proc.output():
                self.figures.violations.append(f"a Traceback in {proc.log_path.name}")

    def run(self, minutes: float, echo: Callable[[str], None]) -> None:
        steps: dict[str, tuple[float, Callable[[], None]]] = {
            "zero or wake": (4.0, lambda: self.zero_or_wake(self.rng.randrange(self.n))),
            "storm": (0.6, self.storm),
            "approve": (1.0, self.approve_twice),
            "scalebot SIGKILL": (1.0, self.kill9),
            "kube-apiserver kill": (0.5, self.apiserver),
            "Slack 429 storm": (0.8, self.slack_429),
            "Slack stall": (0.8, self.slack_stall),
            "pause": (1.0, lambda: time.sleep(self.rng.uniform(3, 10))),
        }
        names = list(steps)
        weights = [steps[n][0] for n in names]
        began = time.monotonic()
        self.start()
        self.storm()  # the whole fleet first: every cluster's zero-scale at once
        self.figures.steps["storm"] += 1
        self.check()
        while time.monotonic() - began < minutes * 60:
            name = self.rng.choices(names, weights)[0]
            if name == "zero or wake" and len(self.busy()) >= self.n:
                name = "pause"
            steps[name][1]()
            self.figures.steps[name] += 1
            self.check()
            echo(
                f"{time.monotonic() - began:7.0f}s {name}; ops {len(self.seen_ops)}, "
                f"violations {len(self.figures.violations)}, threads {self.sampler.threads_now}"
            )
        # The end: no more faults; approvals given; every operation must end.
        self.slack.clear_faults()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            self.approve_pending()
            if not self.busy():
                break
            time.sleep(1)  # polling with a deadline
        self.check(final=True)
        self.finish(began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--pods", type=int, default=4, help="pods per cluster")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument(
        "--stall",
        default="10-20",
        help="seconds a Slack stall holds calls before Slack processes them, MIN-MAX (the client waits 15)",
    )
    parser.add_argument(
        "--eviction-processes",
        type=int,
        default=0,
        help="scalebot's runner.eviction_processes (worker processes sending the evictions)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="no soak: one cluster's zero-scale alone, then all N at once (the client's CPU and threads)",
    )
    args = parser.parse_args(argv)

    from localcluster.binaries import ensure_binaries
    from localcluster.controlplane import ControlPlane

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="scalebot-fleet-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    figures = Figures(args.clusters, args.minutes, args.pods, args.seed)

    def echo(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with ControlPlane(ensure_binaries(), echo=lambda _: None) as cp:
        low, _, high = args.stall.partition("-")
        stall = (float(low), float(high or low))
        soak = FleetSoak(cp, work, figures, random.Random(args.seed), stall, args.eviction_processes)
        try:
            soak.build()
            echo(f"built {args.clusters} clusters; soaking for {args.minutes} min in {work}")
            if args.cpu:
                soak.cpu(echo)
            else:
                soak.run(args.minutes, echo)
        finally:
            soak.close()
    print(figures.report(), flush=True)
    return 1 if figures.violations else 0


if __name__ == "__main__":
    sys.exit(main())

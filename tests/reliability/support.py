"""Shared helpers of the reliability tests: scalebot processes, the database, Slack, kubeconfigs.

- `Processes` starts `python -m bot …` (and helper) processes with their output in a log file and
  kills whatever is still running at teardown, also when the test failed (no stray processes).
- `journal()` / `operations()` read the SQLite file the way an operator would (a second reader;
  WAL mode lets it read while scalebot writes).
- `InFlightSlack` is the harness's `SlackApiServer` that also notes each request when it ARRIVES
  (the harness records a call only once it has been answered), so a test can act while a delayed
  chat.postMessage is still in flight.
- `proxied_kubeconfig()` rewrites a kubeconfig to go through the fault proxy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, Any

import yaml

from localcluster import objects, rest, waits
from tests.slack.harness import SlackApiServer, get

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    popen: subprocess.Popen[str]
    log_path: Path
    log: IO[str]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        """SIGKILL: no handler, no flush, no goodbye — a crash, an OOM kill, a lost node."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(15)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)


class Processes:
    """Every process a test started; `cleanup()` kills those still alive and closes their logs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Proc] = []

    def start(
        self, argv: Sequence[str], *, name: str, env: dict[str, str] | None = None, stdin: Any = None
    ) -> Proc:
        log_path = self.directory / f"{name}-{len(self.started)}.log"
        log = log_path.open("w")
        popen = subprocess.Popen(
            list(argv),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            text=True,
            start_new_session=True,  # its own process group: kill9() reaches anything it started
        )
        proc = Proc(popen, log_path, log)
        self.started.append(proc)
        return proc

    def scalebot(self, *args: str, name: str, env: dict[str, str] | None = None) -> Proc:
        return self.start([PYTHON, "-m", "bot", *args], name=name, env=env)

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.alive():
                proc.kill9()
            proc.log.close()
            if proc.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.popen.stdin.close()


# -- the database, read as an operator would ---------------------------------------------------------


def _read(db: Path, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql, tuple(args)).fetchall()
    except sqlite3.OperationalError as exc:  # the schema is not there yet (the process just started)
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


def journal(db: Path, op_id: str | None = None) -> list[tuple[str, str, str, str]]:
    """(op_id, step, event, detail) rows in the order they were written."""
    where, args = ("WHERE op_id = ?", [op_id]) if op_id else ("", [])
    rows = _read(db, f"SELECT op_id, step, event, detail FROM journal {where} ORDER BY id", args)
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]


def runners(db: Path, op_id: str) -> list[str]:
    """The runner that wrote each journal row of the operation, in order."""
    return [str(r) for (r,) in _read(db, "SELECT runner FROM journal WHERE op_id = ? ORDER BY id", [op_id])]


def last_step(db: Path) -> str | None:
    rows = journal(db)
    return rows[-1][1] if rows else None


def operations(db: Path) -> dict[str, tuple[str, str]]:
    """op id -> (state, step)."""
    return {str(i): (str(s), str(p)) for i, s, p in _read(db, "SELECT id, state, step FROM operations")}


def steps_in_order(rows: Sequence[tuple[str, str, str, str]]) -> list[str]:
    """The steps an operation went through, repeats collapsed: a continuous journal has no gap."""
    out: list[str] = []
    for _, step, _, _ in rows:
        if not out or out[-1] != step:
            out.append(step)
    return out


# -- scenarios -----------------------------------------------------------------------------------------


def pool_and_spare(
    node_pool: Callable[..., list[str]], pool_key: str, unique_name: str
) -> tuple[str, list[str]]:
    """Pool `<name>-a` (one node), the one a test acts on, and pool `<name>-b` (one node) beside it
    for what leaves `-a`. Returns pool `-a` and its nodes."""
    pool = f"{unique_name}-a"
    nodes = node_pool(1, name=pool, labels={pool_key: pool})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b"})
    return pool, nodes


def pool_held_by_a_pdb(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], pool_key: str, unique_name: str
) -> tuple[str, list[str]]:
    """`pool_and_spare`, with one `web` pod on `-a` that a PDB (minAvailable 1) keeps in place: a
    zero-scale of `-a` drains as long as the test wants (until it deletes the PDB)."""
    pool, nodes = pool_and_spare(node_pool, pool_key, unique_name)
    objects.create_deployment(admin_api, namespace, "web", 1, node_selector={pool_key: pool}, grace=1)
    waits.wait_for_deployment_available(admin_api, namespace, "web")
    objects.create_pdb(admin_api, namespace, "web-pdb", match_labels={"app": "web"}, min_available=1)
    waits.wait_for_pdb_observed(admin_api, namespace, "web-pdb")
    return pool, nodes


def release_pdb(admin_api: Any, namespace: str) -> None:
    """Delete the PDB of `pool_held_by_a_pdb`: the drain completes."""
    rest.delete(admin_api, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/web-pdb")


# -- kubeconfigs ---------------------------------------------------------------------------------------


def proxied_kubeconfig(source: Path, port: int, target: Path) -> Path:
    """The same identity and CA, through 127.0.0.1:<port> (the certificate is for 127.0.0.1)."""
    config = yaml.safe_load(source.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


# -- Slack -------------------------------------------------------------------------------------------


class InFlightSlack(SlackApiServer):
    """The harness's Web API, plus slow answers chosen by content, seen the moment they arrive.

    `hold(predicate, seconds)` makes the next call whose (method, body) matches wait `seconds`
    before Slack "processes" it (it is then recorded and answered like any other, even if the
    client has gone: what Slack does with a request whose sender died). With `processed=False`
    the call is dropped after the wait instead, never recorded (Slack down: the client times out
    and nothing was posted). `held` counts the calls currently waiting, so a test can act while
    one is in flight.
    """

    def __init__(self) -> None:
        super().__init__()
        self._holds: list[tuple[Callable[[str, dict[str, Any]], bool], float, bool]] = []
        self.held = 0
        self.held_bodies: list[dict[str, Any]] = []

    def hold(
        self, predicate: Callable[[str, dict[str, Any]], bool], seconds: float, *, processed: bool = True
    ) -> None:
        with self._cond:
            self._holds.append((predicate, seconds, processed))

    def _answer(self, method: str, body: dict[str, Any], fault: Any) -> tuple[int, dict[str, str], Any]:
        with self._cond:
            rule = next((r for r in self._holds if r[0](method, body)), None)
            if rule is not None:
                self._holds.remove(rule)
                self.held += 1
                self.held_bodies.append(body)
                self._cond.notify_all()
        if rule is not None:
            self._closing.wait(rule[1])
            with self._cond:
                self.held -= 1
                self._cond.notify_all()
            if not rule[2]:
                raise ConnectionAbortedError("dropped without processing")  # never recorded
        return super()._answer(method, body, fault)

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        with contextlib.suppress(OSError):  # a client killed while its call was held (BrokenPipe)
            super()._serve(request)

    def wait_held(self, timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.held > 0, timeout=timeout):
                raise AssertionError(f"no held Slack call within {timeout}s")


@contextlib.contextmanager
def slack_server() -> Iterator[InFlightSlack]:
    server = InFlightSlack().start()
    assert isinstance(server, InFlightSlack)
    try:
        yield server
    finally:
        server.close()


def wait_healthy(url: str, proc: Proc, timeout: float = 60.0) -> None:
    def ready() -> bool:
        if not proc.alive():
            raise AssertionError(f"scalebot exited with {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        try:
            return get(f"{url}/healthz").status == 200
        except OSError:
            return False

    waits.wait_until(ready, timeout, f"{url}/healthz")


def poll(predicate: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.02) -> Any:
    """A fast poll with a deadline (kills must land inside short windows)."""
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        event.wait(interval)


# -- `scalebot run` -------------------------------------------------------------------------------

CHANNEL = "C0RELIABLE"
OPERATOR, APPROVER, APPROVER2 = "U0OPERATOR", "U0APPROVER", "U0APPROVER2"
BOT_TOKEN = "xoxb-7357-reliability-bottoken"
SIGNING_SECRET = "reliability-signing-secret-7357"


@dataclass
class RunSetup:
    """One `scalebot run` configuration: the config file, its ports, its environment."""

    config: Path
    db: Path
    http_port: int
    health_port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"


def run_setup(
    directory: Path,
    *,
    name: str,
    kubeconfig: Path,
    pool_key: str,
    slack_url: str,
    db: Path,
    approval_required_for: Sequence[str] = (),
    protected: bool = False,
    bot_token: str = BOT_TOKEN,
    signing_secret: str = SIGNING_SECRET,
    app_token: str | None = None,
    env: dict[str, str] | None = None,
) -> RunSetup:
    http_port, health_port = free_port(), free_port()
    policy: dict[str, Any] = {
        "users": {OPERATOR: "operator", APPROVER: "approver", APPROVER2: "approver"},
        "approval_required_for": list(approval_required_for),
        "approvals_required": 1,
    }
    if protected:
        policy["protected_approvals"] = 2
    config = {
        "server": {"host": "127.0.0.1", "http_port": http_port, "health_port": health_port},
        "sender": {"update_interval": "1s", "posts_per_second": 5},
        "channels": {CHANNEL: "dev"},
        "clusters": {
            "dev": {
                "kubeconfig": str(kubeconfig),
                "context": "",
                "provider": "labels",
                "pool_label": pool_key,
                "default_channels": [CHANNEL],
                "protected": protected,
                "policy": policy,
            }
        },
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    run_env = {
        "SLACK_BOT_TOKEN": bot_token,
        "SLACK_SIGNING_SECRET": signing_secret,
        "SLACK_API_URL": slack_url,
        "SCALEBOT_DB": str(db),
        "SLACK_APP_TOKEN": app_token or "",
        **(env or {}),
    }
    return RunSetup(path, db, http_port, health_port, run_env)


def start_run(procs: Processes, setup: RunSetup, *, name: str, leader_election: bool = False) -> Proc:
    flag = "--leader-election" if leader_election else "--no-leader-election"
    return procs.scalebot("-v", "run", "--config", str(setup.config), flag, name=name, env=setup.env)

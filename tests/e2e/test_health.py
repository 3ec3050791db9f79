"""The health port (bot.runtime.health) with real dependencies.

Covers: `/healthz` is 200 "ok"; `/readyz` lists every check in the API server's `[+]`/`[-]` format,
answers 503 naming the failing check, bounds a hung check by its timeout and never stacks a second
run of it; `/readyz` goes 503 when a real API server is stopped and 200 again when it is back (on
a control plane of this module's own, so the session's shared one is never disturbed); after a
real drain (a PDB that first allows nothing, then is relaxed) whose events fed `observe_event`,
`/metrics` exposes the operation, eviction and duration series with those values; unknown paths
are 404 and non-GET methods 405; a cluster without scalebot's admission policy gets one start-up
line and a passing `field_policy/<cluster>` check whose line says it is absent.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bot.runtime import health, metrics, run
from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.client import KubeClient
from engine.kube.errors import NotFound
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.labels import LabelPoolProvider
from engine.store.database import Store
from localcluster import rest, waits
from tests.e2e import support

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane


def get(server: health.HealthServer, path: str, *, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Content-Type", "")


@pytest.fixture
def serve() -> Iterator[Callable[..., health.HealthServer]]:
    started: list[health.HealthServer] = []

    def start(**kwargs: Any) -> health.HealthServer:
        server = health.HealthServer(0, host="127.0.0.1", **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


# -- the server itself (no cluster) -----------------------------------------------------------------


def test_healthz_and_unknown_paths(serve: Callable[..., health.HealthServer]) -> None:
    server = serve()
    assert get(server, "/healthz")[:2] == (200, "ok\n")
    assert get(server, "/nope")[0] == 404
    assert get(server, "/healthz", method="POST")[0] == 405


def test_readyz_names_the_failing_check(serve: Callable[..., health.HealthServer], tmp_path: Path) -> None:
    def broken() -> None:
        raise ConnectionError("connection refused (token xoxb-123-456-secret)")

    store = Store(tmp_path / "db.sqlite")
    server = serve(
        checks={"database": health.database_writable(store), "slack": broken, "flag": lambda: False}
    )
    status, body, _ = get(server, "/readyz")
    assert status == 503
    assert body.splitlines() == [
        "[+]database ok",
        "[-]flag failed: not ready",
        "[-]slack failed: connection refused (token xoxb-***)",
        "readyz check failed",
    ]
    store.close()


class _NoPolicyCluster:
    """An API server without scalebot's admission policy (older than 1.30, or installed without it)."""

    def request_json(self, method: str, path: str, *, verb: str, resource: str, timeout: float | None) -> Any:
        raise NotFound(status=404, message=f"{resource} not found")


def test_readyz_and_the_start_line_say_the_field_policy_is_absent(
    serve: Callable[..., health.HealthServer],
) -> None:
    checks, lines = run.field_policy_checks({"prod": _NoPolicyCluster(), "console": None})
    assert sorted(checks) == ["field_policy/prod"], "only clusters with an API server"
    (line,) = lines
    assert line.startswith(
        "warning: clusters.prod: field-level admission policy not in force (ValidatingAdmissionPolicy"
    )
    server = serve(checks=checks)
    status, body, _ = get(server, "/readyz")
    assert status == 200, "scalebot works without it: ready, and says so"
    assert body.splitlines() == [
        "[+]field_policy/prod ok: absent: ValidatingAdmissionPolicy scalebot-fields is not installed",
        "readyz check passed",
    ]


def test_a_hung_check_is_bounded_and_not_stacked(serve: Callable[..., health.HealthServer]) -> None:
    release = threading.Event()
    runs: list[int] = []

    def hung() -> None:
        runs.append(1)
        release.wait(30)

    server = serve(checks={"kubernetes": hung, "slack": lambda: True}, check_timeout=0.5)
    try:
        status, body, _ = get(server, "/readyz")
        assert (
            status == 503 and "[-]kubernetes failed: no answer within 0.5 s" in body and "[+]slack ok" in body
        )
        status, body, _ = get(server, "/readyz")
        assert "[-]kubernetes failed: still running since an earlier probe" in body
        assert len(runs) == 1
    finally:
        release.set()
    waits.wait_until(lambda: get(server, "/readyz")[0] == 200, 10, "/readyz to recover")


def test_an_unwritable_database_is_not_ready(
    serve: Callable[..., health.HealthServer], tmp_path: Path
) -> None:
    store = Store(tmp_path / "db.sqlite")
    server = serve(checks={"database": health.database_writable(store)})
    assert get(server, "/readyz")[0] == 200
    store.close()  # what a lost volume looks like to the process: every write fails
    status, body, _ = get(server, "/readyz")
    assert status == 503 and "[-]database failed:" in body


# -- the port bounded: read timeout and connection limit -------------------------------------------


@pytest.fixture
def idle() -> Iterator[Callable[[int], socket.socket]]:
    """Open TCP connections that send nothing (as any pod could); all closed at the end."""
    opened: list[socket.socket] = []

    def connect(port: int) -> socket.socket:
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


def _closed_by_server(conn: socket.socket, within: float) -> bool:
    """The server closed it: a read returns end-of-file (or a reset) before `within` seconds."""
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_connections_do_not_keep_healthz_from_answering(
    serve: Callable[..., health.HealthServer], idle: Callable[[int], socket.socket]
) -> None:
    """Twice the bound in idle connections, with a read timeout far longer than the test: the
    newest ones take the slots of the oldest (closed at once), and a probe still gets its answer."""
    server = serve(read_timeout=60, max_connections=4)
    conns = [idle(server.port) for _ in range(8)]
    assert get(server, "/healthz")[:2] == (200, "ok\n")
    # The probe took a slot too: every idle connection but the 3 newest was closed to make room.
    assert [_closed_by_server(c, 5) for c in conns[:5]] == [True] * 5
    assert not any(_closed_by_server(c, 0.2) for c in conns[5:]), "the newest are left alone"


def test_an_idle_connection_is_closed_after_the_read_timeout(
    serve: Callable[..., health.HealthServer], idle: Callable[[int], socket.socket]
) -> None:
    server = serve(read_timeout=0.5)
    quiet, partial = idle(server.port), idle(server.port)
    partial.sendall(b"GET /healthz HTTP/1.1\r\n")  # headers never finished
    started = time.monotonic()
    assert _closed_by_server(quiet, 10) and _closed_by_server(partial, 10)
    assert time.monotonic() - started >= 0.4, "closed by the timeout, not at once"
    assert get(server, "/healthz")[0] == 200


# -- against a real API server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[ControlPlane]:
    """A control plane for this module alone: stopping its API server disturbs no other test."""
    from localcluster.binaries import ensure_binaries
    from localcluster.controlplane import ControlPlane

    with ControlPlane(ensure_binaries()) as cp:
        yield cp


@pytest.mark.e2e
def test_readyz_follows_the_api_server(
    own_control_plane: ControlPlane, serve: Callable[..., health.HealthServer], tmp_path: Path
) -> None:
    api = own_control_plane.scalebot_api_client(pool_size=4)
    store = Store(tmp_path / "db.sqlite")
    server = serve(
        checks={
            "database": health.database_writable(store),
            "kubernetes": health.kubernetes_reachable(api, timeout_seconds=1.0),
            "slack": health.slack_connected(lambda: True),
        }
    )
    try:
        assert get(server, "/readyz")[:2] == (
            200,
            "[+]database ok\n[+]kubernetes ok\n[+]slack ok\nreadyz check passed\n",
        )
        own_control_plane.stop_apiserver()

        def not_ready_body() -> str | None:
            status, body, _ = get(server, "/readyz")
            return body if status == 503 else None

        body = waits.wait_until(not_ready_body, 30, "/readyz to report the outage")
        assert "[-]kubernetes failed: get /readyz:" in body
        assert "[+]database ok" in body and "[+]slack ok" in body
        assert get(server, "/healthz")[0] == 200, "liveness does not depend on the API server"
        own_control_plane.start_apiserver()
        waits.wait_until(lambda: get(server, "/readyz")[0] == 200, 60, "/readyz to recover")
    finally:
        own_control_plane.start_apiserver()  # no-op when it runs; leaves the module's plane usable
        store.close()
        api.close()


@pytest.mark.e2e
def test_metrics_show_a_real_drain(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    serve: Callable[..., health.HealthServer],
    tmp_path: Path,
) -> None:
    group = support.group(unique_name)
    nodes = node_pool(2, labels=group)
    support.deployment(admin_api, namespace, "web", 3, node_selector=group, grace=1)
    support.budget(admin_api, namespace, "web-pdb", app="web", min_available=3)

    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    provider = LabelPoolProvider(
        kube, kube.api_client, label=f"{unique_name}.scalebot.test/pool", namespace="scalebot"
    )
    settings = RunnerSettings(pass_interval=timedelta(seconds=2), settle=timedelta(seconds=1), workers=1)
    ops = new_operations(
        Store(tmp_path / "db.sqlite"),
        {"e2e": ClusterHandle("e2e", kube, provider)},
        {},
        SystemClock(),
        settings=settings,
    )
    observed = metrics.Metrics()
    observed.prime(ops.clusters())
    ops.subscribe(observed.observe_event)

    def relax_once_blocked(event: ProgressEvent) -> None:
        # The PDB refuses every eviction first (429s), then allows them.
        if "web-pdb" in event.condition:
            rest.patch(
                admin_api,
                f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/web-pdb",
                {"spec": {"minAvailable": 0}},
            )

    ops.subscribe(relax_once_blocked)
    server = serve(registry=observed.registry)
    try:
        out = ops.request(
            OperationRequest(
                kind=OpKind.DRAIN, target=Target(cluster="e2e", nodes=tuple(nodes)), requested_by="cli:e2e"
            )
        )
        assert out.ok, out.reply
        assert ops.runner.wait_idle(120), "the drain did not finish"
        assert out.operation is not None
        op = ops.get(out.operation.id)
        assert op is not None and op.state is OpState.SUCCEEDED, op
    finally:
        ops.runner.stop()
        kube.close()

    status, text, content_type = get(server, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['scalebot_operations_total{cluster="e2e",kind="drain",state="running"}'] == 1
    assert samples['scalebot_operations_total{cluster="e2e",kind="drain",state="succeeded"}'] == 1
    assert samples['scalebot_evictions_total{cluster="e2e",result="evicted"}'] == 3
    assert samples['scalebot_evictions_total{cluster="e2e",result="pdb_blocked"}'] >= 1
    assert samples['scalebot_drain_duration_seconds_count{cluster="e2e"}'] == 1
    assert samples['scalebot_drain_duration_seconds_sum{cluster="e2e"}'] > 0
    assert samples['scalebot_operation_duration_seconds_count{cluster="e2e",kind="drain"}'] == 1
    assert samples['scalebot_force_deleted_pods_total{cluster="e2e"}'] == 0
    # OpenMetrics, for scrapers that ask for it.
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.read().decode().rstrip().endswith("# EOF")

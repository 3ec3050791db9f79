"""The CLI's exit code comes from the failure's category alone (`bot.cli.main.EXIT_CODES`), as
kubectl's: 2 for usage and configuration (nothing was changed), 1 when the cluster refused or the
run could not go on, the traceback of an internal error. One test per category, each through a real
command and the error the layer below raises: no layer re-wraps another's error into `CliError`."""

from __future__ import annotations

import argparse
import http.server
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.common import EXIT_INCOMPLETE, EXIT_USAGE
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import Operation, OperationPlan, OpKind, OpState, Target
from engine.store.claims import RunnerId
from engine.store.database import Store
from tests.kubeconfigs import token_kubeconfig


def test_every_category_has_one_exit_code_and_internal_errors_keep_their_traceback() -> None:
    assert cli.EXIT_CODES == {
        Category.USAGE: EXIT_USAGE,
        Category.CONFIGURATION: EXIT_USAGE,
        Category.CLUSTER: EXIT_INCOMPLETE,
        Category.TRANSIENT: EXIT_INCOMPLETE,
    }
    assert Category.INTERNAL not in cli.EXIT_CODES


def test_usage_a_refused_request_exits_2_with_the_services_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["ops", "cancel", "op-nope", "--simulated", "--db", str(tmp_path / "s.db")])

    assert code == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: no operation op-nope; `scalebot operations list` shows the recent ones"
    )


def test_configuration_a_missing_kubeconfig_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = tmp_path / "absent.yaml"

    code = cli.main(["zero", "--kubeconfig", str(absent), "--db", str(tmp_path / "s.db"), "--yes"])

    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"error: kubeconfig file {absent} does not exist; check the --kubeconfig path"
    )


class _Forbidding(http.server.BaseHTTPRequestHandler):
    """An API server that refuses everything as RBAC does: 403 with a Status body."""

    def do_GET(self) -> None:
        body = (
            b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,'
            b'"message":"nodes is forbidden: User \\"system:serviceaccount:x:y\\" cannot list nodes"}'
        )
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def forbidding_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forbidding)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = token_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_cluster_a_call_the_api_server_forbids_exits_1(
    forbidding_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["cordon", "node-1", "--kubeconfig", str(forbidding_kubeconfig), "--db", str(tmp_path / "s.db")]
    )

    assert code == EXIT_INCOMPLETE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "forbidden" in line.lower(), line


def test_transient_an_operation_another_live_runner_holds_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`resume` while another scalebot runs the operation: the claim is held (transient, try later),
    exit 1 naming it, as kubectl's conflicts do; it was re-wrapped into a usage error (exit 2)."""
    db = tmp_path / "s.db"
    store = Store(db)
    now = datetime.now(UTC)
    store.insert_operation(
        Operation(
            id="op-held",
            kind=OpKind.ZERO,
            target=Target(cluster="simulated"),
            state=OpState.RUNNING,
            requested_by="cli:alice",
            created_at=now,
            updated_at=now,
            plan=OperationPlan(kind=OpKind.ZERO, cluster="simulated"),
        )
    )
    other = RunnerId(owner="scalebot-other", host="elsewhere", pid=4242, nonce="n")
    store.claim_operation("op-held", other, now=now, ttl_seconds=3600, gone=lambda _: False)
    store.close()

    code = cli.main(["resume", "--simulated", "--db", str(db)])

    assert code == EXIT_INCOMPLETE
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "scalebot-other" in line, line


class _Broken(ScalebotError):
    category = Category.INTERNAL


def test_internal_an_error_of_scalebots_own_state_is_raised_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise _Broken("the journal is not what was written")

    monkeypatch.setattr("bot.cli.serve.cmd_demo", broken)  # the handler is looked up when it runs
    with pytest.raises(_Broken):
        cli.main(["demo"])

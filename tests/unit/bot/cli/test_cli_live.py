"""The CLI's progress: a live display on a terminal, plain lines everywhere else.

Covers: the live panels of a real zero-scale (the real `Operations`, runner and SQLite on the
in-memory cluster) show nodes drained of total, pods evicted / remaining / total, rate, ETA and
the blocking pods, and the final summary table carries the operation's summary figures;
`scalebot zero --simulated` on a pseudo-terminal draws them; in a pipe, and with
`--log-format json` on a terminal, the output stays plain lines, one per change; text from the
cluster is never read as rich markup.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from bot.cli.live import LiveDisplay, operation_panel, summary_table
from engine.domain.drain_state import DrainState
from engine.domain.operation import DrainProgress, Operation, OperationPlan, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from tests.unit.bot.cli.test_cli_simulated import FAST, REPO, scalebot
from tests.unit.engine.operations.test_operations import finish, make_ops, zero

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# One plain line per change: an ISO 8601 time with its zone, the operation, the text.
PLAIN_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d op-[0-9a-f]+: ")


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=160, color_system=None, legacy_windows=False), out


def _cluster(blocked: bool, now: Callable[[], datetime] | None = None) -> FakeCluster:
    cluster = FakeCluster(now=now)
    for i in range(2):
        cluster.add_node(f"web-{i}", labels={"scalebot.io/pool": "web"})
        cluster.add_node(f"spare-{i}", labels={"scalebot.io/pool": "spare"})
    for j in range(3):
        cluster.add_pod(
            "shop", f"cart-{j}", node="web-0", controller_kind="ReplicaSet", controller_name="cart", grace=10
        )
    if blocked:
        cluster.add_pod(
            "shop",
            "db-0",
            node="web-1",
            controller_kind="StatefulSet",
            controller_name="db",
            labels={"app": "db"},
        )
        cluster.add_pdb("shop", "db", match_labels={"app": "db"}, disruptions_allowed=0)
    return cluster


def _zero_pool_web_live(cluster: FakeCluster, tmp_path: Path) -> tuple[Operation, str]:
    """A real zero-scale of pool web followed by a live display on a terminal: the operation as it
    ended, and what the terminal showed (control sequences removed)."""
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    ops.runner.settings = RunnerSettings(drain_timeout=timedelta(minutes=10), workers=1)
    console, out = _terminal()
    display = LiveDisplay(console)
    ops.subscribe(display)
    display.go_live()
    request = ops.request(zero(("web",)))
    assert request.operation is not None
    finish(ops, request.operation.id)
    op = ops.get(request.operation.id)
    ops.runner.stop()
    assert op is not None
    display.finish([op])
    return op, ANSI.sub("", out.getvalue())


def test_live_panels_show_the_figures_and_the_blocking_pods(tmp_path: Path) -> None:
    op, text = _zero_pool_web_live(_cluster(blocked=True), tmp_path)

    assert op.state is OpState.FAILED
    assert "1/2 drained" in text
    assert "3 evicted · 1 remaining · 4 total" in text
    assert "shop/db-0: cannot evict pod as it would violate the pod's disruption budget" in text
    assert "rate      0 pods/min" in text and "ETA       time left unknown" in text
    [row] = [line for line in text.splitlines() if line.startswith("│ " + op.id)]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[3] == "failed" and cells[5:7] == ["1/2", "3"], cells


def test_the_summary_table_carries_the_operations_summary(tmp_path: Path) -> None:
    op, text = _zero_pool_web_live(_cluster(blocked=False), tmp_path)

    assert op.summary is not None and op.state is OpState.SUCCEEDED
    [row] = [line for line in text.splitlines() if line.startswith("│ " + op.id)]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[3:] == ["succeeded", cells[4], "2/2", str(op.summary.pods_evicted), "0", "2"], cells
    assert op.summary.pods_evicted == 3 and op.summary.nodes_removed == 2


def _on_a_terminal_stdout(db: Path, *args: str) -> tuple[int, str]:
    """`scalebot ARGS` with a pseudo-terminal as stdout (read as it is written, or the child blocks)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB")}
    return on_a_terminal_stdout([*args, "--db", str(db)], env)


def on_a_terminal_stdout(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`python -m bot ARGS` with a pseudo-terminal as stdout and stderr: its exit code and output."""
    leader, follower = os.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bot", *args],
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
            cwd=REPO,
            env={**env, "COLUMNS": "160"},
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    return done.returncode, b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_the_cli_draws_live_panels_and_a_summary_table(tmp_path: Path) -> None:
    code, out = _on_a_terminal_stdout(tmp_path / "scalebot.db", "zero", "--simulated", *FAST, "--yes")

    assert code == 0, out
    text = ANSI.sub("", out)
    assert "nodes" in text and re.search(r"\d+/\d+ drained", text), text
    assert "Summary" in text and "succeeded" in text
    assert not any(PLAIN_LINE.match(line) for line in text.splitlines())


def _assert_plain(out: str) -> None:
    assert "\x1b[" not in out and "▰" not in out and "▱" not in out and "Summary" not in out
    events = [line for line in out.splitlines() if PLAIN_LINE.match(line)]
    assert any(": Completed in " in line for line in events), out


def test_in_a_pipe_the_output_stays_plain_lines(tmp_path: Path) -> None:
    done = scalebot(tmp_path / "scalebot.db", "zero", "--simulated", *FAST, "--yes")

    assert done.returncode == 0, done.stderr
    _assert_plain(done.stdout)


def test_json_logs_on_a_terminal_keep_plain_lines(tmp_path: Path) -> None:
    code, out = _on_a_terminal_stdout(
        tmp_path / "scalebot.db", "--log-format", "json", "zero", "--simulated", *FAST, "--yes"
    )

    assert code == 0, out
    _assert_plain(out.replace("\r\n", "\n"))


def test_text_from_the_cluster_is_shown_literally_never_as_markup(tmp_path: Path) -> None:
    """An admission webhook's refusal is free text: rich markup in it (an unbalanced closing tag
    would raise, a [link=…] would make a link) must reach the terminal as the characters it is."""
    cluster = _cluster(blocked=False)
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    op = ops.request(zero(("web",), by="cli:alice")).operation
    ops.runner.stop()
    assert op is not None
    hostile = "shop/cart-0: denied by webhook [/] [link=https://evil.example]renew your token[/link]"
    drain = DrainProgress(
        state=DrainState(started_at=op.created_at),
        nodes_total=1,
        busy_nodes=("web-0",),
        pods_remaining=1,
        blocking=(hostile,),
    )
    op = replace(op, progress=replace(op.progress, drain=drain))
    console, out = _terminal()

    console.print(operation_panel(op, "Drain not completed yet [bold]x[/]"))

    text = ANSI.sub("", out.getvalue())
    assert "denied by webhook [/] [link=https://evil.example]renew your token[/link]" in text
    assert "Drain not completed yet [bold]x[/]" in text
    assert "\x1b]8;" not in out.getvalue(), "no terminal hyperlink was made"


def test_the_summary_is_readable_at_80_columns() -> None:
    """kubectl drops columns rather than cut them: at 80 columns kind and cluster go (each panel's
    title names them), and the ID, the state and every figure's header stay whole."""
    at = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
    op = Operation(
        id="op-65a1b2c3",
        kind=OpKind.CONSOLIDATE,
        target=Target(cluster="production-eu-west-1"),
        state=OpState.AWAITING_APPROVAL,
        requested_by="cli:alice",
        created_at=at,
        updated_at=at,
        plan=OperationPlan(kind=OpKind.CONSOLIDATE, cluster="production-eu-west-1"),
    )
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=80, color_system=None).print(summary_table([op], 80))
    narrow = out.getvalue()

    assert "…" not in narrow and max(len(line) for line in narrow.splitlines()) <= 80
    assert "op-65a1b2c3" in narrow and "awaiting_approval" in narrow
    for header in ("duration", "drained", "evicted", "deleted", "removed"):
        assert header in narrow
    assert "production-eu-west-1" not in narrow

    out = io.StringIO()
    Console(file=out, force_terminal=True, width=160, color_system=None).print(summary_table([op], 160))
    assert "production-eu-west-1" in out.getvalue() and "consolidate" in out.getvalue()

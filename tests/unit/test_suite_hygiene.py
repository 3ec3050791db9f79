"""The suite always exits: a failing test that leaves an operation running still ends pytest at once.

Each case runs a small test file in a pytest child process with this suite's conftest loaded as a
plugin, and measures how long the child takes to exit.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from tests.child_pytest import run_child_pytest

# An operation whose API server stops answering once it is draining: the runner retries the failed
# step with backoff for as long as the server is away (forever, here), unless it is stopped. Retries
# wait on the runner's cancel event in a worker thread, so nothing ends them at interpreter exit.
BLOCKED_OPERATION = """
    from datetime import UTC, datetime, timedelta

    from engine.domain.clock import SystemClock
    from engine.kube import errors
    from engine.kube.fake import FakeCluster
    from engine.domain.operation import OperationRequest, OpKind, Target
    from engine.operations.service import Operations, new_operations
    from engine.pools.simulated import SimulatedPoolProvider
    from engine.operations.runner import ClusterHandle
    from engine.domain.settings import RunnerSettings
    from engine.store.database import Store


    class UnreachableOnceDraining(FakeCluster):
        down = False

        def list_pods(self, **kwargs):
            if self.down:
                raise errors.TransportError(message="connection refused")
            return super().list_pods(**kwargs)


    def start_blocked_operation(db):
        cluster = UnreachableOnceDraining(now=lambda: datetime.now(UTC))
        for pool in ("a", "b"):
            cluster.add_node(f"{pool}-0", labels={"scalebot.io/pool": pool})
        cluster.add_pod("shop", "web-0", node="a-0", controller_kind="ReplicaSet", controller_name="web",
                        labels={"app": "web"})
        cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=0)
        handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
        ops = new_operations(Store(db), {"dev": handle}, {}, SystemClock(),
                         settings=RunnerSettings(pass_interval=timedelta(seconds=1), workers=1))
        out = ops.request(OperationRequest(kind=OpKind.ZERO, target=Target(cluster="dev", pools=("a",)),
                                           requested_by="cli:test"))
        assert out.ok and out.operation is not None
        deadline = time.monotonic() + 30
        while ops.get(out.operation.id).step != "drain":
            assert time.monotonic() < deadline
            ops.runner.wait_idle(0.05)
        cluster.down = True
        while ops.get(out.operation.id).progress.step_failures == 0:
            assert time.monotonic() < deadline
            ops.runner.wait_idle(0.05)
        return ops
"""


def _run_child(tmp_path: Path, body: str, *, env: dict[str, str] | None = None) -> tuple[int, float, str]:
    test_file = tmp_path / "test_child.py"
    test_file.write_text(
        "import threading\nimport time\n" + textwrap.dedent(BLOCKED_OPERATION) + textwrap.dedent(body)
    )
    started = time.monotonic()
    code, output = run_child_pytest(test_file, env=env)
    return code, time.monotonic() - started, output


def test_a_failing_test_with_a_running_operation_exits_at_once(tmp_path: Path) -> None:
    code, took, output = _run_child(
        tmp_path,
        """
        def test_fails_while_an_operation_runs(tmp_path):
            ops = start_blocked_operation(tmp_path / "db.sqlite")
            assert ops.runner.is_running(ops.list_operations()[0].id)
            assert False, "deliberate failure; the runner is never stopped by this test"
        """,
    )
    assert code == 1, output
    assert "1 failed" in output
    assert "deliberate failure" in output
    assert took < 30, f"pytest took {took:.0f} s to exit after a failing test:\n{output}"


def test_a_thread_that_outlives_the_tests_fails_the_run_by_name(tmp_path: Path) -> None:
    code, _took, output = _run_child(
        tmp_path,
        """
        def test_passes_but_leaves_a_thread():
            stop = threading.Event()
            threading.Thread(target=stop.wait, name="left-behind").start()
        """,
        env={"SCALEBOT_TEST_THREAD_GRACE_SECONDS": "1"},
    )
    assert "1 passed" in output
    assert code == 3, output
    assert "non-daemon thread(s) still alive after the tests: left-behind" in output

"""API semantics under stress, on the real control plane as scalebot's ServiceAccount.

Covers (beyond tests/e2e/test_operations.py, whose partial zero-scale sees its PDB relaxed and
whose full zero-scale checks what phase 2 deleted):
- a PodDisruptionBudget that never allows an eviction: a partial zero-scale (another pool stays
  up) gives up at its drain timeout — FAILED with the server's reason — having sent no DELETE at
  all, the pods still running and the nodes still there; then a full zero-scale of the same
  cluster sends its first DELETE (grace 0) only after the phase-1 window, and only in phase 2;
- two `scalebot zero` processes racing for one pool on one database: exactly one operation
  exists and runs; the other process exits 2 with one line naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.client import KubeClient
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.pools.labels import LabelPoolProvider
from engine.store.database import Store
from localcluster import rest, waits
from tests.e2e import support
from tests.reliability.support import Processes, journal, operations, poll

pytestmark = pytest.mark.e2e

WINDOW = timedelta(seconds=4)
SETTINGS = RunnerSettings(
    graceful_window=WINDOW,
    pass_interval=timedelta(seconds=2),
    settle=timedelta(seconds=1),
    drain_timeout=timedelta(seconds=6),
    workers=2,
)


def _request(*pools: str) -> OperationRequest:
    return OperationRequest(
        kind=OpKind.ZERO, target=Target(cluster="e2e", pools=pools), requested_by="cli:rel"
    )


def test_a_pdb_that_never_allows_eviction(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    group = support.group(unique_name)
    pool_a, pool_b = f"{unique_name}-a", f"{unique_name}-b"
    nodes_a = node_pool(1, name=pool_a, labels={pool_key: pool_a, **group})
    support.deployment(admin_api, namespace, "web", 2, node_selector=group, grace=1)
    nodes_b = node_pool(1, name=pool_b, labels={pool_key: pool_b, **group})
    support.budget(admin_api, namespace, "web-pdb", app="web", min_available="100%")
    web = sorted(p["metadata"]["name"] for p in rest.list_pods(admin_api, namespace))

    provider = LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    ops = new_operations(
        Store(tmp_path / "db.sqlite"),
        {"e2e": ClusterHandle("e2e", kube, provider)},
        {},
        SystemClock(),
        settings=SETTINGS,
    )
    deletes_when_phase_1_ended: list[int] = []

    def watch(event: ProgressEvent) -> None:
        if event.text.startswith("Phase 1 ended"):  # emitted (and saved) before phase 2 starts
            deletes_when_phase_1_ended.append(kube.request_counts[("delete", "pods")])

    ops.subscribe(watch)
    try:
        # 1. Pool a alone: the standard drain applies; it times out and never forces anything.
        partial = ops.request(_request(pool_a))
        assert partial.ok and partial.operation is not None, partial.reply
        assert not partial.operation.plan.force_phase
        assert ops.runner.wait_idle(60)
        failed = ops.get(partial.operation.id)
        assert failed is not None and failed.state is OpState.FAILED
        assert failed.error == "drain did not complete within 6s"
        assert kube.request_counts[("delete", "pods")] == 0, "no DELETE, with or without grace"
        assert "force" not in [r.step for r in ops.store.journal_rows(failed.id)]
        assert sorted(p["metadata"]["name"] for p in rest.list_pods(admin_api, namespace)) == web
        assert all(waits.pod_is_running(p) for p in rest.list_pods(admin_api, namespace))
        names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
        assert set(nodes_a) <= names, "a failed partial zero-scale removes no node"

        # 2. Every pool: phase 1 honours the PDB for the whole window, then phase 2 deletes.
        full = ops.request(_request())
        assert full.ok and full.operation is not None, full.reply
        assert full.operation.plan.force_phase
        assert ops.runner.wait_idle(90)
        done = ops.get(full.operation.id)
        assert done is not None and done.state is OpState.SUCCEEDED, done and done.error
    finally:
        ops.runner.stop()

    assert deletes_when_phase_1_ended == [0], "nothing was deleted during phase 1"
    assert kube.request_counts[("delete", "pods")] == len(web)
    assert sorted(done.progress.drain.force_deleted) == [f"{namespace}/{name}" for name in web]
    phase1 = done.progress.drain.phase1_started_at
    forced = [r for r in ops.store.audit_rows(op_id=done.id) if r.action == "force_delete_pod"]
    assert len(forced) == len(web)
    assert phase1 is not None and all(r.at >= phase1 + WINDOW for r in forced), "only after the window"
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & {*nodes_a, *nodes_b}


def test_two_processes_racing_for_one_pool(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    group = support.group(unique_name)
    pool = f"{unique_name}-a"
    node_pool(1, name=pool, labels={pool_key: pool, **group})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b", **group})
    # A pod that cannot leave: whoever wins holds the pool for the whole (long) drain timeout.
    support.deployment(admin_api, namespace, "web", 1, node_selector={pool_key: pool}, grace=1)
    support.budget(admin_api, namespace, "web-pdb", app="web", min_available=1)
    db = tmp_path / "scalebot.db"
    args = [
        "zero",
        "--yes",
        pool,
        "--kubeconfig",
        str(scalebot_kubeconfig),
        "--db",
        str(db),
        "--pool-label",
        pool_key,
        "--cluster",
        "e2e",
        "--drain-timeout",
        "2m",
    ]
    first = procs.scalebot(*args, name="zero-a")
    second = procs.scalebot(*args, name="zero-b")

    loser = poll(lambda: next((p for p in (first, second) if not p.alive()), None), 60, "one to be refused")
    winner = second if loser is first else first
    assert loser.wait(5) == 2, loser.output()
    [op_id] = operations(db)
    assert operations(db)[op_id][0] == "running"
    assert winner.alive(), winner.output()
    lines = [line for line in loser.output().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and op_id in lines[0] and "is busy" in lines[0], loser.output()
    assert {o for o, _, _, _ in journal(db)} == {op_id}

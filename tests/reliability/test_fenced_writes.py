"""A runner whose claim moved makes no further Kubernetes write, even in the middle of a step.

`scalebot zero` (runner A) talks to the control plane through the TCP fault proxy, which holds
every answer for 2 s (its requests reach the server at once): its drain of 40 pods goes out in
waves, the evictions beyond its in-flight limit (16 at first) queued behind the first ones, which
wait for their answers. Once the first wave has landed, A stalls (SIGSTOP: no heartbeat, no
request; none of its evictions is then between its claim check and the wire), its claim
lapses, and another runner claims the operation through the same SQLite file (`claim_operation`,
as `scalebot resume` does, so no second writer reaches the cluster and every change seen there
after the takeover can only be A's). A is let go (SIGCONT) in the middle of its eviction pass: each
queued eviction checks the claim first (engine.operations.fence) and A stops, says why, exits 1.
Without that check A evicts every pod still running (checked by disabling it).

Counted on the objects, behind the proxy's back, once A has exited: no pod that was running at the
takeover was evicted afterwards, and the nodes A cordoned are still cordoned and still there (a
fenced runner does not give them back either: the operation is the new runner's).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.domain.settings import RunnerSettings
from engine.operations.runner import CLAIM_TTL_SECONDS
from engine.store.claims import ClaimHeld, RunnerId
from engine.store.database import Store
from localcluster import objects, rest, waits
from tests.e2e.support import scalebot_args
from tests.reliability.faultproxy import FaultProxy
from tests.reliability.support import Processes, last_step, operations, poll, proxied_kubeconfig

pytestmark = pytest.mark.e2e

FIRST_WAVE = RunnerSettings().parallel_evictions
PODS = FIRST_WAVE + 24
"""Enough that a pass's evictions (the first wave in flight) leave some queued when A stalls."""
ANSWER_SECONDS = 2.0
"""How long the proxy holds each answer: the first wave's evictions have landed and wait for
their answers this long, while the rest wait for a free slot, before their claim check."""


def _running(admin_api: Any, namespace: str) -> set[str]:
    """UIDs of the namespace's pods that are not being deleted."""
    return {
        p["metadata"]["uid"]
        for p in rest.list_pods(admin_api, namespace)
        if not p["metadata"].get("deletionTimestamp")
    }


def _take_over(db: Path, op_id: str) -> int:
    """Claim the operation as another runner once A's claim has lapsed; the new fencing token."""
    store = Store(db)
    try:
        me = RunnerId("runner-b", socket.gethostname(), os.getpid(), "takeover-nonce")
        return store.claim_operation(
            op_id, me, now=datetime.now(UTC), ttl_seconds=CLAIM_TTL_SECONDS, gone=lambda _: False
        )
    finally:
        store.close()


def test_a_runner_that_lost_its_claim_stops_before_its_next_kubernetes_write(
    control_plane: Any,
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-a"
    # 8 CPUs a node: room for the 88 pods of 100m (4 CPUs hold 40).
    nodes = node_pool(2, name=pool, labels={pool_key: pool}, cpu="8")
    # Its replacements stay Pending on the cordoned nodes: no pod but A's evictions changes state.
    objects.create_deployment(admin_api, namespace, "web", PODS, node_selector={pool_key: pool}, grace=1)
    waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=120)
    db = tmp_path / "scalebot.db"

    with FaultProxy(control_plane.api_port, seed=5, lifetime=600) as proxy:
        proxy.set(answer_latency=ANSWER_SECONDS)
        kubeconfig = proxied_kubeconfig(scalebot_kubeconfig, proxy.port, tmp_path / "kubeconfig")
        runner_a = procs.scalebot(
            "zero",
            "--yes",
            pool,
            *scalebot_args(kubeconfig, db, pool_key),
            name="zero",
            env={"POD_NAME": "runner-a"},
        )
        originals = _running(admin_api, namespace)
        assert len(originals) == PODS
        poll(lambda: last_step(db) == "drain", 120, "runner A to be draining")
        poll(
            lambda: len(originals - _running(admin_api, namespace)) >= FIRST_WAVE,
            120,
            "A's first wave of evictions to land",
            interval=0.005,
        )
        runner_a.popen.send_signal(signal.SIGSTOP)
        [op_id] = operations(db)

        def taken_over() -> int | None:
            try:
                return _take_over(db, op_id)
            except ClaimHeld:
                return None  # A's last heartbeat is still within the TTL

        token = poll(
            taken_over, CLAIM_TTL_SECONDS + 30, "A's claim to lapse and runner B to claim", interval=0.5
        )
        assert token >= 2, "the takeover bumped the fencing token"
        # What A's stalled pass left: evictions it sent before it stalled have landed (the proxy
        # forwarded them meanwhile); the pods still running are those A had not yet asked to leave.
        at_takeover = originals & _running(admin_api, namespace)
        assert at_takeover, "A stalled with evictions still to send (raise PODS if not)"

        runner_a.popen.send_signal(signal.SIGCONT)
        code = runner_a.wait(120)

    # A has exited: nothing can write for it any more. Count what it changed after the takeover.
    evicted_after = at_takeover - _running(admin_api, namespace)
    assert not evicted_after, (
        f"{len(evicted_after)} of the {len(at_takeover)} pods running at the takeover were evicted "
        "by A after its claim moved"
    )
    out = runner_a.output()
    assert code == 1, out[-3000:]
    assert "was claimed by another runner: this runner stopped without writing anything more" in out, out
    for node in nodes:
        live = rest.get(admin_api, rest.node_path(node))
        assert live["spec"].get("unschedulable") is True, f"{node} was uncordoned by the fenced runner"
    assert operations(db)[op_id] == ("running", "drain"), "the operation is the new runner's to go on with"

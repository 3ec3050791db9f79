"""A runner whose claim is taken over in the middle of a step makes no further Kubernetes write.

Real `Operations`, runner and SQLite; the in-memory cluster counts every request. The takeover
happens right after the runner's first eviction of a pass (from the cluster's change hook, i.e.
between two writes of one batch), written by a second `Store` on the same file as another
process would. The same property with a partitioned API server on the real control plane is in
tests/reliability/test_runner_claims.py.
"""

from __future__ import annotations

import collections
from datetime import timedelta
from pathlib import Path

import pytest

from engine.domain.operation import OperationRequest, OpKind, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations.runner import CLAIM_TTL_SECONDS, ClusterHandle
from engine.operations.service import new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.claims import RunnerId
from engine.store.database import Store

A = RunnerId(owner="scalebot-a", host="host-a", pid=101, nonce="a")
B = RunnerId(owner="scalebot-b", host="host-b", pid=202, nonce="b")
WRITE_VERBS = frozenset({"create", "patch", "update", "delete"})


def _writes(cluster: FakeCluster) -> collections.Counter[tuple[str, str]]:
    return collections.Counter({k: n for k, n in cluster.request_counts.items() if k[0] in WRITE_VERBS})


def test_a_runner_whose_claim_is_taken_over_mid_step_makes_no_further_kubernetes_write(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    assert cluster.clock is not None
    for i in range(2):
        cluster.add_node(f"web-{i}", labels={"scalebot.io/pool": "web"})
        for j in range(4):
            cluster.add_pod(
                "shop",
                f"web-{i}-{j}",
                node=f"web-{i}",
                controller_kind="ReplicaSet",
                controller_name="web",
                grace=10,
            )
    db = tmp_path / "scalebot.db"
    handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
    # One eviction at a time: the takeover lands between two writes of the same batch.
    settings = RunnerSettings(workers=1, parallel_evictions=1, adaptive_evictions=False)
    a = new_operations(Store(db), {"dev": handle}, {}, cluster.clock, settings=settings)
    a.runner.identity = A
    other_process = Store(db)
    taken: dict[str, object] = {}

    def take_over_after_the_first_eviction() -> None:
        if taken or cluster.request_counts[("create", "pods/eviction")] != 1:
            return
        (op,) = a.list_operations()
        assert cluster.clock is not None
        later = cluster.clock.now() + timedelta(seconds=CLAIM_TTL_SECONDS + 1)
        other_process.claim_operation(
            op.id, B, now=later, ttl_seconds=CLAIM_TTL_SECONDS, gone=lambda _: False
        )
        taken["writes"] = _writes(cluster)
        taken["nodes"] = cluster.list_nodes()

    cluster.on_change = take_over_after_the_first_eviction
    try:
        outcome = a.request(
            OperationRequest(
                kind=OpKind.ZERO, target=Target(cluster="dev", pools=("web",)), requested_by="cli:x"
            )
        )
        assert outcome.ok and outcome.operation is not None, outcome.reply
        assert a.runner.wait_idle(10)
    finally:
        a.runner.stop()
        other_process.close()
    assert taken, "the takeover happened during the drain"
    assert "claimed by another runner" in a.runner.handed_over[outcome.operation.id]
    assert _writes(cluster) == taken["writes"], "no Kubernetes write after the claim was taken over"
    assert cluster.list_nodes() == taken["nodes"]
    assert cluster.request_counts[("create", "pods/eviction")] == 1, "one eviction, before the takeover"


def test_the_fenced_ports_refuse_every_write_and_pass_reads_and_optional_ports_through() -> None:
    from engine.kube.api import PodWatchApi
    from engine.operations.fence import FencedKubeApi, FencedPools
    from engine.pools.base import TakesBackRemoval
    from engine.store.claims import Fenced

    cluster = FakeCluster()
    cluster.add_node("web-0", labels={"scalebot.io/pool": "web"})
    pod = cluster.add_pod("shop", "web-0-a", node="web-0")

    def refuse() -> None:
        raise Fenced("taken over")

    api = FencedKubeApi(cluster, refuse)
    pools = FencedPools(SimulatedPoolProvider(cluster), refuse)
    writes = [
        lambda: api.set_unschedulable("web-0", True),
        lambda: api.set_taint("web-0", "k", value="v", effect="NoSchedule", present=True),
        lambda: api.cordon("web-0", taint_key="k", taint_value="v", taint_effect="NoSchedule"),
        lambda: api.cordon_many(["web-0"], taint_key="k", taint_value="v", taint_effect="NoSchedule"),
        lambda: api.evict_pod(pod),
        lambda: api.delete_pod(pod, grace_seconds=0),
        lambda: api.delete_node("web-0"),
        lambda: pools.set_size("web", 3),
        lambda: pools.remove_nodes("web", ["web-0"]),
        lambda: pools.prepare_removal("web", ["web-0"]),
        lambda: pools.clear_restore("web"),
    ]
    for write in writes:
        with pytest.raises(Fenced):
            write()
    assert _writes(cluster) == collections.Counter()
    assert [n.name for n in api.list_nodes()] == ["web-0"] and pools.get_pool("web").size == 1
    assert not isinstance(api, PodWatchApi), "the in-memory cluster has no watch, and its fence says so"
    assert isinstance(pools, TakesBackRemoval) == isinstance(SimulatedPoolProvider(cluster), TakesBackRemoval)

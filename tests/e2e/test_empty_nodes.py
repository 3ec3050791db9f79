"""The unattended policies (empty-node clean-up, Evictor mode) against the real control plane,
as scalebot's ServiceAccount.

Time is a FakeClock the test moves: each `cycle()` lists the real cluster, so "empty for 5 minutes"
is decided on real Nodes and Pods without sleeping. A node that runs only a mirror pod counts as
empty; a node with a real pod does not, and its TTL starts only once that pod is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from engine.domain.clock import FakeClock, SystemClock
from engine.domain.model import DRAINING_TAINT_KEY
from engine.domain.operation import OpKind, OpState
from engine.domain.settings import ConsolidationPolicy
from engine.kube.client import KubeClient
from engine.operations.policy import ClusterPolicy, Role
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.operations.unattended import CleanupReport, EmptyNodeCleaner, Evictor
from engine.store.database import Store
from localcluster import objects, rest, waits
from tests.e2e import support

pytestmark = pytest.mark.e2e


@pytest.fixture
def handle(scalebot_kubeconfig: Path, unique_name: str) -> Iterator[ClusterHandle]:
    handle = wiring.connect_cluster(
        "dev",
        kubeconfig=str(scalebot_kubeconfig),
        context="",
        provider="labels",
        options={"pool_label": f"{unique_name}.scalebot.test/pool"},
    )
    yield handle
    if isinstance(handle.api, KubeClient):
        handle.api.close()


def exists(admin_api: Any, node: str) -> bool:
    return rest.get_or_none(admin_api, rest.node_path(node)) is not None


def test_a_node_empty_past_its_ttl_is_removed_and_one_empty_for_less_is_not(
    admin_api: Any,
    handle: ClusterHandle,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-e"
    busy, mirror_only, later = node_pool(3, name=pool, labels={f"{unique_name}.scalebot.test/pool": pool})
    objects.create_bare_pod(admin_api, namespace, "keeps-busy", node=busy, grace=0)
    objects.create_bare_pod(admin_api, namespace, "leaves", node=later, grace=0)
    objects.create_mirror_like_pod(admin_api, namespace, "static", node=mirror_only, grace=0)
    clock = FakeClock(datetime.now(UTC))
    reports: list[CleanupReport] = []
    policy = ConsolidationPolicy(
        empty_nodes=True,
        node_grace=timedelta(0),
        unneeded_time=timedelta(minutes=5),
        delay_after_add=timedelta(0),  # the test's nodes are new
    )
    cleaner = EmptyNodeCleaner(handle, policy, Store(str(tmp_path / "db.sqlite")), clock, reports.append)

    assert cleaner.cycle() is None  # t=0: mirror_only is empty from now on
    assert set(cleaner.since) == {mirror_only}
    rest.delete(admin_api, rest.pod_path(namespace, "leaves"), grace=0)
    waits.wait_for_pod_gone(admin_api, namespace, "leaves")

    clock.advance(180)
    assert cleaner.cycle() is None  # t=3 min: `later` is empty from now on; nothing has had 5 min
    assert set(cleaner.since) == {mirror_only, later}

    clock.advance(120)
    first = cleaner.cycle()  # t=5 min: mirror_only has been empty for 5 min, `later` for 2
    assert first is not None and first.removed == ((mirror_only, pool),)
    assert not exists(admin_api, mirror_only)
    assert exists(admin_api, later) and exists(admin_api, busy)
    assert not rest.get(admin_api, rest.node_path(later))["spec"].get("unschedulable")

    clock.advance(120)
    assert cleaner.cycle() is None  # t=7 min: `later` at 4 min
    assert exists(admin_api, later)

    clock.advance(60)
    second = cleaner.cycle()  # t=8 min: `later` at 5 min
    assert second is not None and second.removed == ((later, pool),)
    assert not exists(admin_api, later) and exists(admin_api, busy)
    # One report per batch, naming the nodes and the rule.
    assert reports == [first, second]
    assert first.text(policy) == (
        "Removed 1 empty node on dev (only DaemonSet or mirror pods for 5 min or more): "
        f"{mirror_only} (pool {pool})"
    )


def test_a_batch_cut_short_after_its_cordon_is_settled_by_the_next_process_and_a_human_cordon_stays(
    admin_api: Any,
    handle: ClusterHandle,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = f"{unique_name}-c"
    still_empty, got_pod, by_human, busy = node_pool(
        4, name=pool, labels={f"{unique_name}.scalebot.test/pool": pool}
    )
    objects.create_bare_pod(admin_api, namespace, "keeps-busy", node=busy, grace=0)
    objects.cordon(admin_api, by_human)  # empty, but a person cordoned it: never ours to touch
    policy = ConsolidationPolicy(
        empty_nodes=True,
        node_grace=timedelta(0),
        unneeded_time=timedelta(minutes=5),
        delay_after_add=timedelta(0),  # the test's nodes are new
    )
    db = str(tmp_path / "db.sqlite")
    clock = FakeClock(datetime.now(UTC))
    first = EmptyNodeCleaner(handle, policy, Store(db), clock, lambda report: None)
    assert first.cycle() is None
    assert set(first.since) == {still_empty, got_pod}

    def killed(pool: str, nodes: Any) -> None:
        raise KeyboardInterrupt("process killed between the cordon and the removal")

    # The crash: the batch is cordoned and tainted, and the process dies before the removal.
    monkeypatch.setattr(handle.pools, "remove_nodes", killed)
    clock.advance(300)
    with pytest.raises(KeyboardInterrupt):
        first.cycle()
    monkeypatch.undo()
    for node in (still_empty, got_pod):
        spec = rest.get(admin_api, rest.node_path(node))["spec"]
        assert spec.get("unschedulable") and any(t["key"] == DRAINING_TAINT_KEY for t in spec["taints"])
    objects.create_bare_pod(admin_api, namespace, "arrives", node=got_pod, grace=0)

    # The next process: a fresh policy on the same database, with no memory of "empty since".
    reports: list[CleanupReport] = []
    second = EmptyNodeCleaner(handle, policy, Store(db), FakeClock(clock.now()), reports.append)
    result = second.cycle()
    assert result is not None and reports == [result]
    assert result.removed == ((still_empty, pool),) and result.released == (got_pod,)
    assert not exists(admin_api, still_empty)
    got_pod_spec = rest.get(admin_api, rest.node_path(got_pod))["spec"]
    assert not got_pod_spec.get("unschedulable")
    assert not any(t["key"] == DRAINING_TAINT_KEY for t in got_pod_spec.get("taints") or ())
    human_spec = rest.get(admin_api, rest.node_path(by_human))["spec"]
    assert human_spec.get("unschedulable") and exists(admin_api, busy)
    # The interrupted batch's locks are gone: operations on the pool are free again.
    assert Store(db).lock_holder([f"pool:dev/{pool}", f"node:dev/{got_pod}"]) is None
    assert "Uncordoned, left cordoned by an interrupted clean-up" in result.text(policy)
    assert second.cycle() is None  # settled: nothing more to do
    assert rest.get(admin_api, rest.node_path(by_human))["spec"].get("unschedulable")


def test_evictor_mode_proposes_once_per_change_and_refuses_beside_another_autoscaler(
    admin_api: Any,
    handle: ClusterHandle,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool_key = f"{unique_name}.scalebot.test/pool"
    pool = f"{unique_name}-v"
    node_pool(3, name=pool, labels={pool_key: pool})
    support.deployment(admin_api, namespace, "web", 2, node_selector={pool_key: pool}, cpu="1", grace=1)
    rules = ClusterPolicy(
        cluster="dev",
        users={"U0APPROVER": Role.APPROVER},
        consolidation=ConsolidationPolicy(
            evictor=True, node_grace=timedelta(0), unneeded_time=timedelta(0), delay_after_add=timedelta(0)
        ),
    )
    ops = new_operations(Store(str(tmp_path / "db.sqlite")), {"dev": handle}, {"dev": rules}, SystemClock())
    said: list[str] = []
    evictor = Evictor(ops, "dev", "C0PLATFORM", lambda cluster, text: said.append(text))
    try:
        first = evictor.cycle()
        assert first is not None and first.ok and first.operation is not None
        proposal = first.operation
        # A proposal, not an action: the default policy asks an approver for a scale-down.
        assert proposal.state is OpState.AWAITING_APPROVAL and proposal.requested_by == "policy:evictor"
        assert proposal.kind is OpKind.CONSOLIDATE and proposal.plan.nodes
        assert evictor.cycle() is None  # one card at a time
        assert ops.reject(proposal.approval_id, by="U0APPROVER").ok
        assert evictor.cycle() is None  # rejected, and nothing changed: no second card
        node_pool(1, name=f"{pool}-new", labels={pool_key: pool})
        second = evictor.cycle()  # the cluster changed: a new proposal
        assert second is not None and second.operation is not None and second.operation.id != proposal.id
        assert ops.reject(second.operation.approval_id, by="U0APPROVER").ok
        objects.create_deployment(admin_api, namespace, "cluster-autoscaler", 0)
        assert evictor.cycle() is None and evictor.cycle() is None
        assert len(said) == 1  # the refusal is said once, not every cycle
        assert "cluster-autoscaler removes underused nodes by itself" in said[0]
        assert f"{namespace}/cluster-autoscaler" in said[0] and "allow_alongside_autoscaler" in said[0]
        assert [op.id for op in ops.list_operations(cluster="dev")] == [second.operation.id, proposal.id]
    finally:
        ops.runner.stop(timeout=10)
        # The stand-in autoscaler is seen cluster-wide: gone before the next test, not only once
        # its namespace finishes terminating, or that test's Evictor refuses beside it too.
        autoscaler = f"/apis/apps/v1/namespaces/{namespace}/deployments/cluster-autoscaler"
        rest.delete(admin_api, autoscaler, propagation="Foreground")
        waits.wait_until(
            lambda: rest.get_or_none(admin_api, autoscaler) is None, 60, "the stand-in autoscaler gone"
        )


def test_the_empty_node_policy_removes_nothing_within_the_delay_after_a_node_joined(
    admin_api: Any,
    handle: ClusterHandle,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-d"
    first, second = node_pool(2, name=pool, labels={f"{unique_name}.scalebot.test/pool": pool})
    clock = FakeClock(datetime.now(UTC))  # the nodes joined just now
    policy = ConsolidationPolicy(
        empty_nodes=True, node_grace=timedelta(0), unneeded_time=timedelta(minutes=1)
    )
    assert policy.delay_after_add == timedelta(minutes=10)  # cluster-autoscaler's default
    cleaner = EmptyNodeCleaner(handle, policy, Store(str(tmp_path / "db.sqlite")), clock, lambda report: None)

    assert cleaner.cycle() is None
    clock.advance(120)
    # Empty for 2 minutes, past its unneeded time, but a node joined 2 minutes ago: nothing goes.
    assert cleaner.cycle() is None
    assert exists(admin_api, first) and exists(admin_api, second)
    clock.advance(8 * 60 + 5)
    removed = cleaner.cycle()  # 10 minutes after the nodes joined
    assert removed is not None and {node for node, _ in removed.removed} == {first, second}


def test_evictor_mode_proposes_a_node_only_once_it_has_been_unneeded_for_the_unneeded_time(
    admin_api: Any,
    handle: ClusterHandle,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool_key = f"{unique_name}.scalebot.test/pool"
    pool = f"{unique_name}-u"
    node_pool(3, name=pool, labels={pool_key: pool})
    support.deployment(admin_api, namespace, "web", 2, node_selector={pool_key: pool}, cpu="1", grace=1)
    rules = ClusterPolicy(
        cluster="dev",
        users={"U0APPROVER": Role.APPROVER},
        consolidation=ConsolidationPolicy(
            evictor=True,
            node_grace=timedelta(0),
            unneeded_time=timedelta(minutes=5),
            delay_after_add=timedelta(0),
        ),
    )
    clock = FakeClock(datetime.now(UTC))
    ops = new_operations(Store(str(tmp_path / "db.sqlite")), {"dev": handle}, {"dev": rules}, clock)
    said: list[str] = []
    evictor = Evictor(ops, "dev", "C0PLATFORM", lambda cluster, text: said.append(text))
    try:
        assert evictor.cycle() is None  # removable from now on, not yet for 5 minutes
        assert said == [] and evictor.unneeded_since
        clock.advance(4 * 60)
        assert evictor.cycle() is None
        assert ops.list_operations(cluster="dev") == []
        clock.advance(60)
        proposed = evictor.cycle()
        assert proposed is not None and proposed.ok and proposed.operation is not None, (proposed, said)
        assert proposed.operation.kind is OpKind.CONSOLIDATE and proposed.operation.plan.nodes
    finally:
        ops.runner.stop(timeout=10)

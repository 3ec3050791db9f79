"""The Cluster API PoolProvider against the real control plane and the Cluster API CRDs.

The CRDs come from the `sigs.k8s.io/cluster-api` module of the cached build (installed by the
session's control plane); Cluster API's controllers are replaced by the small test-only stand-in in
`capi_standin.py`, reconciled on demand so each step can be observed. The provider runs as
scalebot's ServiceAccount (only the shipped RBAC); fixtures and the stand-in run as admin.

Proves: the served version is discovered (v1beta2); scaling down by k removes exactly the chosen
(annotated) Machines, also when they are not the ones the controller would pick by itself;
`remove_nodes` repeated before or after the controller acted never subtracts twice; going to zero
with min-size 1 writes min-size 0 and wake restores it; the restore record is written once and
never overwritten; sizes outside the autoscaler bounds are refused with nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.domain.clock import FakeClock
from engine.kube.client import KubeClient
from engine.pools.base import RESTORE_ANNOTATION, PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.capi import (
    DELETE_MACHINE_ANNOTATION,
    MAX_SIZE_ANNOTATION,
    MIN_SIZE_ANNOTATION,
    OWN_MARK_ANNOTATION,
    REMOVED_MACHINES_ANNOTATION,
    ClusterApiPoolProvider,
    MachineInfo,
)
from engine.pools.common import NodeRemovalError
from engine.pools.victims import choose_victims
from localcluster import rest, waits
from tests.e2e.capi_standin import StandIn, path

NOW = datetime(2026, 3, 27, 19, 0, tzinfo=UTC)
BOUNDS = {MIN_SIZE_ANNOTATION: "1", MAX_SIZE_ANNOTATION: "5"}


@pytest.fixture(scope="module")
def capi_served(admin_api: Any) -> None:
    """Wait until the Cluster API resources answer lists.

    Right after the CRDs are Established, the API server's watch cache for them may still be
    starting and answers 429 "storage is (re)initializing" (client-go would retry it on its own).
    """
    from kubernetes.client.exceptions import ApiException

    def listable(plural: str) -> Callable[[], dict[str, Any]]:
        return lambda: rest.get(admin_api, f"/apis/cluster.x-k8s.io/v1beta2/{plural}")

    for plural in ("clusters", "machinedeployments", "machinesets", "machines"):
        waits.wait_until(listable(plural), 60, f"{plural} served", ignore=(ApiException,))


@pytest.fixture
def standins(admin_api: Any, namespace: str, capi_served: None) -> Iterator[list[StandIn]]:
    made: list[StandIn] = []
    yield made
    for standin in made:
        standin.cleanup()


def _standin(admin_api: Any, namespace: str, made: list[StandIn], name: str) -> StandIn:
    standin = StandIn(admin_api, namespace, "dev-eu", name, node_labels={"capi-test": namespace})
    made.append(standin)
    return standin


@pytest.fixture
def provider(scalebot_api: Any, kube: KubeClient, namespace: str) -> ClusterApiPoolProvider:
    return ClusterApiPoolProvider(scalebot_api, namespace=namespace, node_api=kube, clock=FakeClock(NOW))


def _record(desired: int, operation: str) -> RestoreRecord:
    return RestoreRecord(desired=desired, min_size=1, max_size=5, recorded_at=NOW, operation_id=operation)


def _md(admin_api: Any, namespace: str, name: str) -> dict[str, Any]:
    return rest.get(admin_api, path(namespace, "machinedeployments", name))


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def _machine_names(standin: StandIn) -> list[str]:
    return sorted(m["metadata"]["name"] for m in standin.machines())


@pytest.mark.e2e
def test_scale_down_removes_exactly_the_chosen_machines_then_zero_and_wake(
    provider: ClusterApiPoolProvider, admin_api: Any, namespace: str, standins: list[StandIn]
) -> None:
    md = _standin(admin_api, namespace, standins, f"md-{namespace[-6:]}")
    nodes = md.create(4, annotations=BOUNDS)
    pool = md.deployment

    assert provider.version == "v1beta2"
    before = provider.get_pool(pool)
    assert (before.provider, before.desired, before.min_size, before.max_size) == ("capi", 4, 1, 5)
    assert before.nodes == before.ready_nodes == tuple(nodes)
    assert [p.name for p in provider.list_pools()] == [pool]
    assert provider.deletion_order(pool) == "Random"

    # Restore record: written once, with the autoscaler annotations' originals; never overwritten.
    assert provider.record_restore(pool, _record(4, "op-night-1")) is True
    assert provider.record_restore(pool, _record(2, "op-overwrite")) is False
    stored = orjson.loads(_annotations(_md(admin_api, namespace, pool))[RESTORE_ANNOTATION])
    assert (stored["desired"], stored["operationId"]) == (4, "op-night-1")
    assert stored["extra"] == {"autoscalerMinSize": "1", "autoscalerMaxSize": "5"}

    # 4 -> 2, choosing machines 1 and 3: by itself the controller ("Random" = by name) would take 0 and 1.
    chosen = [nodes[1], nodes[3]]
    provider.prepare_removal(pool, chosen)
    marks = {m["metadata"]["name"]: _annotations(m).get(DELETE_MACHINE_ANNOTATION) for m in md.machines()}
    assert marks == {
        nodes[0]: None,
        nodes[1]: "2026-03-27T19:00:00Z",
        nodes[2]: None,
        nodes[3]: "2026-03-27T19:00:00Z",
    }
    assert provider.victim_hints(pool).marked == frozenset(chosen)
    provider.prepare_removal(pool, chosen)  # repeat keeps the first stamp

    provider.remove_nodes(pool, chosen)
    provider.remove_nodes(pool, chosen)  # a retry before the controller acted: no second decrement
    assert md.replicas() == 2
    assert orjson.loads(_annotations(_md(admin_api, namespace, pool))[REMOVED_MACHINES_ANNOTATION]) == chosen
    md.reconcile()
    assert _machine_names(md) == [nodes[0], nodes[2]]
    assert all(rest.get_or_none(admin_api, rest.node_path(n)) is None for n in chosen)
    provider.remove_nodes(pool, chosen)  # and after it acted
    assert md.replicas() == 2
    assert provider.get_pool(pool).nodes == (nodes[0], nodes[2])

    # To zero: min-size 1 would undo it, so it becomes 0 in the same write as the replicas.
    kept = [nodes[0], nodes[2]]
    provider.prepare_removal(pool, kept)
    provider.remove_nodes(pool, kept)
    zero = _md(admin_api, namespace, pool)
    assert zero["spec"]["replicas"] == 0
    assert _annotations(zero)[MIN_SIZE_ANNOTATION] == "0"
    assert _annotations(zero)[MAX_SIZE_ANNOTATION] == "5"
    md.reconcile()
    asleep = provider.get_pool(pool)
    assert (asleep.desired, asleep.min_size, asleep.nodes) == (0, 0, ())
    assert asleep.restore is not None and asleep.restore.desired == 4
    assert provider.record_restore(pool, _record(0, "op-night-2")) is False  # the second night

    # Wake: the recorded size through the scale subresource, min-size put back.
    provider.set_size(pool, asleep.restore.desired)
    awake = _md(admin_api, namespace, pool)
    assert awake["spec"]["replicas"] == 4
    assert _annotations(awake)[MIN_SIZE_ANNOTATION] == "1"
    assert REMOVED_MACHINES_ANNOTATION not in _annotations(awake)
    created = md.reconcile()
    assert len(created) == 4
    waits.wait_until(lambda: len(provider.get_pool(pool).ready_nodes) == 4, 60, "4 Ready nodes after wake")
    provider.set_size(pool, 4)  # idempotent
    assert md.replicas() == 4

    provider.clear_restore(pool)
    assert RESTORE_ANNOTATION not in _annotations(_md(admin_api, namespace, pool))
    managers = {f["manager"] for f in _md(admin_api, namespace, pool)["metadata"]["managedFields"]}
    assert "scalebot" in managers


@pytest.mark.e2e
def test_victim_choice_follows_a_hand_placed_delete_machine_annotation(
    provider: ClusterApiPoolProvider,
    kube: KubeClient,
    admin_api: Any,
    namespace: str,
    standins: list[StandIn],
) -> None:
    md = _standin(admin_api, namespace, standins, f"hand-{namespace[-6:]}")
    nodes = md.create(3)
    machine = path(namespace, "machines", nodes[2])
    rest.patch(admin_api, machine, {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "yes"}}})
    hints = provider.victim_hints(md.deployment)
    assert hints.marked == {nodes[2]} and not hints.deleting and not hints.unhealthy
    pool_nodes = [n for n in kube.list_nodes() if n.name in nodes]
    policy = provider.deletion_order(md.deployment)
    victims = choose_victims(pool_nodes, [], 1, policy=policy, marked=hints.marked)
    assert victims == [nodes[2]]


@pytest.mark.e2e
def test_sizes_outside_the_autoscaler_bounds_are_refused_and_nothing_changes(
    provider: ClusterApiPoolProvider, admin_api: Any, namespace: str, standins: list[StandIn]
) -> None:
    md = _standin(admin_api, namespace, standins, f"bounds-{namespace[-6:]}")
    nodes = md.create(3, annotations={MIN_SIZE_ANNOTATION: "2", MAX_SIZE_ANNOTATION: "4"})
    pool = md.deployment
    before = _md(admin_api, namespace, pool)["metadata"]["resourceVersion"]

    with pytest.raises(PoolSizeError, match="max size reached: 5 is above the max-size 4"):
        provider.set_size(pool, 5)
    with pytest.raises(PoolSizeError, match="min size reached, nodes will not be deleted"):
        provider.set_size(pool, 1)
    with pytest.raises(PoolSizeError, match="min size reached"):
        provider.remove_nodes(pool, nodes[:2])
    with pytest.raises(PoolSizeError, match=r"record the restore state first \(record_restore\)"):
        provider.set_size(pool, 0)  # would lose the min-size for ever
    assert _md(admin_api, namespace, pool)["metadata"]["resourceVersion"] == before

    provider.remove_nodes(pool, nodes[:1])  # 3 -> 2 is within bounds
    assert md.replicas() == 2


@pytest.mark.e2e
def test_nodes_of_another_pool_and_unknown_pools_are_refused(
    provider: ClusterApiPoolProvider, admin_api: Any, namespace: str, standins: list[StandIn]
) -> None:
    first = _standin(admin_api, namespace, standins, f"a-{namespace[-6:]}")
    second = _standin(admin_api, namespace, standins, f"b-{namespace[-6:]}")
    first.create(1)
    (foreign,) = second.create(1)
    with pytest.raises(
        NodeRemovalError, match=f"nodes not in MachineDeployment {first.deployment}: {foreign}"
    ):
        provider.prepare_removal(first.deployment, [foreign])
    with pytest.raises(NodeRemovalError):
        provider.remove_nodes(first.deployment, [foreign])
    provider.remove_nodes(first.deployment, ["gone-already"])  # no Machine anywhere: nothing to do
    assert (first.replicas(), second.replicas()) == (1, 1)
    with pytest.raises(PoolNotFound) as caught:
        provider.get_pool("nope")
    assert set(caught.value.known) == {first.deployment, second.deployment}


# --- pure parts -----------------------------------------------------------------------------------------


def _machine(status: dict[str, Any], **meta: Any) -> MachineInfo:
    return MachineInfo.from_raw(
        {"metadata": {"name": "m", "namespace": "ns", **meta}, "status": status}, "pool"
    )


def test_machine_state_from_v1beta2_and_v1beta1_conditions() -> None:
    ready = {"nodeRef": {"name": "n"}, "conditions": [{"type": "NodeReady", "status": "True"}]}
    assert _machine(ready) == MachineInfo("ns", "m", "pool", "n", node_ready=True)
    v1beta1 = {
        "nodeRef": {"kind": "Node", "name": "n"},
        "conditions": [{"type": "NodeHealthy", "status": "True"}],
    }
    assert _machine(v1beta1).node_ready and not _machine(v1beta1).unhealthy
    for failed in ("NodeHealthy", "HealthCheckSucceeded", "MachineHealthCheckSucceeded"):
        sick = {"nodeRef": {"name": "n"}, "conditions": [{"type": failed, "status": "False"}]}
        assert _machine(sick).unhealthy, failed
    assert _machine({}).unhealthy and _machine({}).node == ""  # no nodeRef yet: Cluster API's "unhealthy"
    marked = _machine(
        ready, annotations={DELETE_MACHINE_ANNOTATION: ""}, deletionTimestamp="2026-03-27T19:00:00Z"
    )
    assert marked.marked and marked.deleting


@pytest.mark.e2e
def test_removal_sets_the_target_size_when_the_pool_grew_meanwhile(
    provider: ClusterApiPoolProvider,
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    standins: list[StandIn],
    tmp_path: Path,
) -> None:
    """Planned 3 → 1; the MachineDeployment grew to 4 (an autoscaler) before the removal step.

    Removal sets replicas to 1 (not 4 - 2 = 2) and reports the change; the controller deletes the
    two drained (marked) Machines first, then one more, which Cluster API drains itself. On the
    previous code replicas went to 2 and verify waited for 1 for ever.
    """
    from engine.domain.clock import SystemClock
    from engine.domain.operation import (
        DrainProgress,
        Operation,
        OperationPlan,
        OperationProgress,
        OpKind,
        OpState,
        PoolChange,
        Target,
    )
    from engine.drain import passes as drain
    from engine.operations.runner import ClusterHandle, Runner
    from engine.operations.steps.removal import step_remove
    from engine.store.database import Store

    md = _standin(admin_api, namespace, standins, f"md-{namespace[-6:]}")
    nodes = md.create(3)
    pool = md.deployment
    victims = [nodes[1], nodes[2]]
    provider.prepare_removal(pool, victims)
    rest.patch(admin_api, path(namespace, "machinedeployments", pool), {"spec": {"replicas": 4}})
    md.reconcile()
    assert len(md.machines()) == 4
    now = SystemClock().now()
    plan = OperationPlan(
        kind=OpKind.SCALE,
        cluster="e2e",
        pools=(PoolChange(pool=pool, before=3, after=1, nodes_to_remove=tuple(victims)),),
        nodes=tuple(victims),
    )
    op = Operation(
        id="op-grown",
        kind=OpKind.SCALE,
        target=Target(cluster="e2e", pools=(pool,), size=1),
        state=OpState.RUNNING,
        requested_by="cli:e2e",
        created_at=now,
        updated_at=now,
        plan=plan,
        step="remove",
        progress=OperationProgress(drain=DrainProgress(state=drain.DrainState(started_at=now))),
    )
    handle = ClusterHandle("e2e", kube, provider)
    runner = Runner(Store(tmp_path / "db.sqlite"), {"e2e": handle}, SystemClock(), lambda event: None)
    try:
        result = step_remove(runner, op, handle)
    finally:
        runner.stop()
    assert md.replicas() == 1
    assert result.progress is not None
    assert result.progress.removal.pool_changes == (
        f"pool {pool} changed during the operation: planned 3 → 1, at 2 after removing the drained nodes",
    )
    assert result.progress.removal.target_refused == {}
    md.reconcile()
    left = _machine_names(md)
    assert len(left) == 1 and not set(left) & set(victims), "the drained Machines went first"


@pytest.mark.e2e
def test_cancel_removal_takes_back_only_scalebots_marks_of_machines_not_yet_counted(
    provider: ClusterApiPoolProvider, admin_api: Any, namespace: str, standins: list[StandIn]
) -> None:
    md = _standin(admin_api, namespace, standins, f"md-{namespace[-6:]}")
    by_hand, ours, counted = md.create(3)
    pool = md.deployment
    rest.patch(
        admin_api,
        path(namespace, "machines", by_hand),
        {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "yes"}}},
    )
    provider.prepare_removal(pool, [by_hand, ours, counted])
    provider.remove_nodes(pool, [counted])  # its removal is in replicas already: it is going

    assert provider.cancel_removal(pool, [by_hand, ours, counted]) == (ours,)
    marks = {m["metadata"]["name"]: _annotations(m).get(DELETE_MACHINE_ANNOTATION) for m in md.machines()}
    assert marks == {by_hand: "yes", ours: None, counted: "2026-03-27T19:00:00Z"}
    assert all(
        OWN_MARK_ANNOTATION not in _annotations(m) for m in md.machines() if m["metadata"]["name"] != counted
    )
    assert provider.cancel_removal(pool, [by_hand, ours, counted]) == ()  # repeat-safe

"""FakeCluster: the eviction answers of engine-semantics.md §1, graceful deletion and finalizers
on virtual time, cordon/taint idempotence, controller recreation, request counting and fault
injection.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from engine.domain.clock import FakeClock
from engine.domain.model import DRAINING_TAINT_KEY, UNSCHEDULABLE_TAINT_KEY, PodInfo, Taint
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.kube.fake import DEFAULT_START, FakeCluster

PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    c.add_node("n1", labels={"pool": "a"})
    c.add_node("n2", labels={"pool": "a"})
    c.add_node("n3", labels={"pool": "b"})
    return c


def web_pod(c: FakeCluster, name: str = "web-1", *, node: str = "n1", **kwargs: object) -> PodInfo:
    return c.add_pod(
        "shop",
        name,
        node=node,
        controller_kind="ReplicaSet",
        controller_name="web-7d9f",
        labels={"app": "web"},
        **kwargs,  # type: ignore[arg-type]
    )


def test_fake_cluster_satisfies_the_kube_api_port() -> None:
    api: KubeApi = FakeCluster()
    assert api.list_pods() == []


# -- eviction outcomes -------------------------------------------------------------------------


def test_eviction_without_budget_sets_deletion_timestamp_and_the_pod_goes_after_its_grace(
    cluster: FakeCluster,
) -> None:
    pod = web_pod(cluster, grace=30)
    cluster.evict_pod(pod)
    live = cluster.get_pod("shop", "web-1")
    assert live is not None
    assert live.deletion_timestamp == DEFAULT_START + timedelta(seconds=30)
    cluster.advance(29)
    assert cluster.get_pod("shop", "web-1") is not None
    cluster.advance(1)
    assert cluster.get_pod("shop", "web-1") is None


def test_eviction_grace_argument_overrides_the_pod_grace(cluster: FakeCluster) -> None:
    pod = web_pod(cluster, grace=600)
    cluster.evict_pod(pod, grace_seconds=1)
    live = cluster.get_pod("shop", "web-1")
    assert live is not None and live.deletion_timestamp == DEFAULT_START + timedelta(seconds=1)


def test_eviction_allowed_by_budget_consumes_one_disruption(cluster: FakeCluster) -> None:
    first, second = web_pod(cluster, "web-1"), web_pod(cluster, "web-2")
    web_pod(cluster, "web-3")
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=1)
    cluster.evict_pod(first)
    (pdb,) = cluster.list_pdbs()
    assert pdb.disruptions_allowed == 0
    with pytest.raises(errors.TooManyRequests) as caught:
        cluster.evict_pod(second)
    err = caught.value
    assert err.status == 429
    assert err.message == PDB_MESSAGE
    assert err.has_details and err.is_pdb_violation and not err.is_pdb_transient
    cause = "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    assert err.eviction_key == f"{PDB_MESSAGE} {cause}"
    assert err.retry_after_seconds is None
    untouched = cluster.get_pod("shop", "web-2")
    assert untouched is not None and not untouched.is_terminating


def test_two_budgets_give_the_exact_500_whatever_they_allow(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.add_pdb("shop", "a", match_labels={"app": "web"}, disruptions_allowed=5)
    cluster.add_pdb("shop", "b", match_labels={"app": "web"}, disruptions_allowed=5)
    with pytest.raises(errors.ServerError) as caught:
        cluster.evict_pod(pod)
    err = caught.value
    assert err.status == 500
    assert err.message == errors.MULTIPLE_PDBS_MESSAGE
    assert err.is_multiple_pdbs and not err.has_details
    assert err.eviction_key == errors.MULTIPLE_PDBS_MESSAGE


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Pending"])
def test_finished_and_pending_pods_are_evicted_without_consulting_budgets(
    cluster: FakeCluster, phase: str
) -> None:
    pod = web_pod(cluster, phase=phase)
    cluster.add_pdb("shop", "a", match_labels={"app": "web"}, disruptions_allowed=0)
    cluster.add_pdb("shop", "b", match_labels={"app": "web"}, disruptions_allowed=0)
    cluster.evict_pod(pod)
    if phase == "Pending":
        assert cluster.get_pod("shop", "web-1").is_terminating  # type: ignore[union-attr]
    else:
        assert cluster.get_pod("shop", "web-1") is None  # a finished pod is deleted at once


def test_a_pod_already_terminating_is_evicted_again_without_budget_check(cluster: FakeCluster) -> None:
    pod = web_pod(cluster, grace=60)
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=1)
    cluster.evict_pod(pod)
    cluster.evict_pod(pod, grace_seconds=5)  # allowance is 0 now, yet no 429; shorter grace wins
    live = cluster.get_pod("shop", "web-1")
    assert live is not None and live.deletion_timestamp == DEFAULT_START + timedelta(seconds=5)


def test_unobserved_budget_gives_the_transient_429(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=3, observed=False)
    with pytest.raises(errors.TooManyRequests) as caught:
        cluster.evict_pod(pod)
    err = caught.value
    assert err.is_pdb_transient and not err.is_pdb_violation
    assert err.retry_after_seconds == 10
    assert err.causes[0].message == "The disruption budget web-pdb is still being processed by the server."


def test_negative_allowance_is_forbidden(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    cluster.set_pdb_allowance("shop", "web-pdb", -1)
    with pytest.raises(errors.Forbidden) as caught:
        cluster.evict_pod(pod)
    assert caught.value.message.endswith("pdb disruptions allowed is negative")
    assert not caught.value.is_namespace_terminating


def test_terminating_namespace_is_forbidden_with_its_cause(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.set_namespace_terminating("shop")
    with pytest.raises(errors.Forbidden) as caught:
        cluster.evict_pod(pod)
    err = caught.value
    assert err.is_namespace_terminating
    assert err.eviction_key == errors.TERMINATING_NAMESPACE_KEY
    assert cluster.list_terminating_namespaces() == frozenset({"shop"})


def test_uid_mismatch_is_a_conflict_and_a_missing_pod_is_not_found(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    stale = PodInfo(namespace="shop", name="web-1", uid="another-uid", node_name="n1")
    with pytest.raises(errors.Conflict) as conflict:
        cluster.evict_pod(stale)
    assert "Precondition failed: UID in precondition: another-uid" in conflict.value.message
    with pytest.raises(errors.Conflict):
        cluster.delete_pod(stale)
    cluster.delete_pod(pod, grace_seconds=0)
    with pytest.raises(errors.NotFound) as missing:
        cluster.evict_pod(pod)
    assert missing.value.message == 'pods "web-1" not found'


def test_an_empty_selector_budget_selects_nothing(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.add_pdb("shop", "everything", match_labels={}, disruptions_allowed=0)
    cluster.evict_pod(pod)
    assert cluster.get_pod("shop", "web-1").is_terminating  # type: ignore[union-attr]


def test_min_available_budget_recomputes_its_allowance(cluster: FakeCluster) -> None:
    pods = [web_pod(cluster, f"web-{i}", grace=10) for i in range(3)]
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, min_available=2)
    cluster.evict_pod(pods[0])
    with pytest.raises(errors.TooManyRequests) as caught:
        cluster.evict_pod(pods[1])
    assert (
        caught.value.causes[0].message
        == "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
    )
    cluster.add_pod("shop", "web-9", node="n2", labels={"app": "web"})  # a replacement became healthy
    cluster.evict_pod(pods[1])


def test_concurrent_evictions_never_exceed_the_allowance(cluster: FakeCluster) -> None:
    pods = [web_pod(cluster, f"web-{i}") for i in range(20)]
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=5)

    def evict(pod: PodInfo) -> bool:
        try:
            cluster.evict_pod(pod)
        except errors.TooManyRequests:
            return False
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(evict, pods))
    assert outcomes.count(True) == 5


# -- deletion, finalizers, time ----------------------------------------------------------------


def test_finalizers_keep_a_terminating_pod_until_removed(cluster: FakeCluster) -> None:
    pod = web_pod(cluster, grace=5, finalizers=("scalebot.test/hold",))
    cluster.evict_pod(pod)
    cluster.advance(3600)
    assert cluster.get_pod("shop", "web-1").is_terminating  # type: ignore[union-attr]
    cluster.remove_finalizers("shop", "web-1")
    assert cluster.get_pod("shop", "web-1") is None


def test_force_delete_removes_at_once_and_shortens_a_running_termination(cluster: FakeCluster) -> None:
    slow = web_pod(cluster, "web-1", grace=600)
    cluster.delete_pod(slow)
    assert cluster.get_pod("shop", "web-1").is_terminating  # type: ignore[union-attr]
    cluster.delete_pod(slow, grace_seconds=0)
    assert cluster.get_pod("shop", "web-1") is None


def test_expired_pods_disappear_on_the_next_call_with_an_external_clock() -> None:
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    c = FakeCluster(now=clock.now)
    c.add_node("n1")
    pod = c.add_pod("default", "p", node="n1", grace=10)
    c.evict_pod(pod)
    clock.advance(10)
    assert c.list_pods() == []
    with pytest.raises(RuntimeError, match="own clock"):
        c.advance(1)


def test_delete_node_removes_its_pods(cluster: FakeCluster) -> None:
    web_pod(cluster, node="n1")
    web_pod(cluster, "web-2", node="n2")
    cluster.delete_node("n1")
    assert [p.name for p in cluster.all_pods()] == ["web-2"]
    with pytest.raises(errors.NotFound):
        cluster.get_node("n1")


# -- controller recreation ---------------------------------------------------------------------


def test_evicted_replicaset_pod_is_replaced_on_a_schedulable_node(cluster: FakeCluster) -> None:
    cluster.set_unschedulable("n2", True)
    pod = web_pod(cluster, node="n1", recreate_on=["n1", "n2", "n3"])
    cluster.set_unschedulable("n1", True)
    cluster.evict_pod(pod)
    replacements = [p for p in cluster.all_pods() if p.name != "web-1"]
    assert len(replacements) == 1
    new = replacements[0]
    assert new.name.startswith("web-7d9f-") and new.uid != pod.uid
    assert new.node_name == "n3" and new.phase == "Running"


def test_replacement_stays_pending_until_a_node_is_schedulable(cluster: FakeCluster) -> None:
    pod = web_pod(cluster, node="n1", recreate_on=["n1"])
    cluster.set_unschedulable("n1", True)
    cluster.evict_pod(pod)
    (pending,) = [p for p in cluster.all_pods() if p.name != "web-1"]
    assert pending.node_name == "" and pending.phase == "Pending"
    cluster.set_unschedulable("n1", False)
    cluster.tick()
    placed = cluster.get_pod("shop", pending.name)
    assert placed is not None and placed.node_name == "n1"


def test_statefulset_replacement_reuses_the_name_after_the_old_pod_is_gone(cluster: FakeCluster) -> None:
    pod = cluster.add_pod(
        "db",
        "pg-0",
        node="n1",
        controller_kind="StatefulSet",
        controller_name="pg",
        grace=10,
        recreate_on=["n2"],
    )
    cluster.evict_pod(pod)
    assert cluster.get_pod("db", "pg-0").uid == pod.uid  # type: ignore[union-attr]
    cluster.advance(10)
    reborn = cluster.get_pod("db", "pg-0")
    assert reborn is not None and reborn.uid != pod.uid and reborn.node_name == "n2"
    with pytest.raises(errors.Conflict):
        cluster.evict_pod(pod)  # the UID precondition protects the new pod


# -- nodes -------------------------------------------------------------------------------------


def test_cordon_with_taint_writes_once_and_reports_what_was_there(cluster: FakeCluster) -> None:
    kwargs = {"taint_key": "scalebot.io/draining", "taint_value": "7", "taint_effect": "NoSchedule"}
    first = cluster.cordon("n1", **kwargs)
    assert (first.had_taint, first.was_unschedulable) == (False, False)
    node = cluster.get_node("n1")
    assert node.unschedulable
    assert {t.key for t in node.taints} == {UNSCHEDULABLE_TAINT_KEY, "scalebot.io/draining"}
    again = cluster.cordon("n1", **kwargs)
    assert (again.had_taint, again.was_unschedulable, again.cordoned_by_someone_else) == (True, True, False)
    assert cluster.request_counts[("patch", "nodes")] == 1
    cluster.set_unschedulable("n2", True)  # a human's cordon
    assert cluster.cordon("n2", **kwargs).cordoned_by_someone_else


def test_cordon_is_idempotent_and_writes_only_when_needed(cluster: FakeCluster) -> None:
    assert cluster.set_unschedulable("n1", True) is True
    assert cluster.set_unschedulable("n1", True) is False
    node = cluster.get_node("n1")
    assert node.unschedulable and node.is_cordoned
    assert any(t.key == UNSCHEDULABLE_TAINT_KEY for t in node.taints)
    assert cluster.request_counts[("patch", "nodes")] == 1
    assert cluster.request_counts[("get", "nodes")] == 3
    assert cluster.set_unschedulable("n1", False) is True
    assert cluster.get_node("n1").taints == ()


def test_taint_is_added_once_by_key_and_effect_and_removed_by_key(cluster: FakeCluster) -> None:
    assert cluster.set_taint("n1", DRAINING_TAINT_KEY, value="100", effect="NoSchedule", present=True)
    assert not cluster.set_taint("n1", DRAINING_TAINT_KEY, value="200", effect="NoSchedule", present=True)
    assert cluster.get_node("n1").taints == (Taint(key=DRAINING_TAINT_KEY, effect="NoSchedule", value="100"),)
    assert cluster.set_taint("n1", DRAINING_TAINT_KEY, value="", effect="NoSchedule", present=False)
    assert not cluster.set_taint("n1", DRAINING_TAINT_KEY, value="", effect="NoSchedule", present=False)
    assert cluster.get_node("n1").taints == ()


def test_list_nodes_filters_by_label_selector(cluster: FakeCluster) -> None:
    assert [n.name for n in cluster.list_nodes(label_selector="pool=a")] == ["n1", "n2"]
    assert [n.name for n in cluster.list_nodes(label_selector="pool in (b, c)")] == ["n3"]
    assert [n.name for n in cluster.list_nodes(label_selector="pool!=a")] == ["n3"]
    assert [n.name for n in cluster.list_nodes(label_selector="!pool")] == []
    assert len(cluster.list_nodes()) == 3
    with pytest.raises(errors.InvalidRequest):
        cluster.list_nodes(label_selector="pool in a b")


# -- counting and faults -----------------------------------------------------------------------


def test_pods_of_many_nodes_cost_one_listing(cluster: FakeCluster) -> None:
    web_pod(cluster, "web-1", node="n1")
    web_pod(cluster, "web-2", node="n2")
    web_pod(cluster, "web-3", node="n3")
    cluster.add_pod("shop", "unscheduled", node="", phase="Pending")
    pods = cluster.list_pods(node_names=["n1", "n2"])
    assert [p.name for p in pods] == ["web-1", "web-2"]
    assert cluster.list_pods(node_names=[]) == []
    assert cluster.request_counts == {("list", "pods"): 1}


def test_fail_next_raises_once_for_the_matching_verb(cluster: FakeCluster) -> None:
    pod = web_pod(cluster)
    cluster.fail_next("create", errors.TransportError(message="connection reset"), resource="pods/eviction")
    cluster.list_pods()  # other verbs are untouched
    with pytest.raises(errors.TransportError):
        cluster.evict_pod(pod)
    assert not cluster.get_pod("shop", "web-1").is_terminating  # type: ignore[union-attr]
    cluster.evict_pod(pod)
    assert cluster.request_counts[("create", "pods/eviction")] == 2


def test_fail_next_on_patch_leaves_the_node_uncordoned(cluster: FakeCluster) -> None:
    cluster.fail_next("patch", errors.ServerError(status=503, message="etcd unavailable"))
    with pytest.raises(errors.ServerError):
        cluster.set_unschedulable("n1", True)
    assert not cluster.get_node("n1").unschedulable


def test_writes_refuse_a_pod_without_uid(cluster: FakeCluster) -> None:
    with pytest.raises(ValueError, match="UID"):
        cluster.evict_pod(PodInfo(namespace="shop", name="x", uid=""))

"""Victim choice for pool scale-down (engine.pools.victims).

Covers: each rule of the order on its own and against the next one (deleting > marked > unhealthy >
cordoned > fewest evictable pods > least utilised > policy > name), which pods count as evictable,
the utilisation figure, Oldest / Newest / Random (pinned, seeded, input-order independent),
provider hints (Machine state), the engine-semantics case #25, and bad arguments.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.domain.model import NodeInfo as Node
from engine.domain.model import OwnerRef, PodInfo, Taint
from engine.pools.victims import (
    VictimHints,
    choose_victims,
    evictable_count,
    is_emptying,
    is_evictable,
    utilisation,
    victim_key,
)
from tests import builders
from tests.builders import DS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GI = 1024**3


def node(name: str, age_days: float = 10, **kwargs: Any) -> Node:
    """The shared node (4 CPUs, 16 GiB, Ready), its age counted back from this file's T0."""
    return builders.node(name, created_at=T0 - timedelta(days=age_days), **kwargs)


def all_orders(nodes: list[Node], pods: list[PodInfo], **kwargs: Any) -> set[tuple[str, ...]]:
    """The full ranking for every permutation of the input: must always be a single result."""
    return {tuple(choose_victims(list(p), pods, len(nodes), **kwargs)) for p in itertools.permutations(nodes)}


# --- each rule, and its rank against the next one -------------------------------------------------


def test_already_deleting_comes_first_even_if_busy_young_and_healthy() -> None:
    nodes = [
        node("a", age_days=100),
        node("b", age_days=1, deletion_timestamp=T0),
        node("c", annotations={"cluster.x-k8s.io/delete-machine": "yes"}),
    ]
    pods = builders.pods_on("b", 5)
    assert choose_victims(nodes, pods, 3) == ["b", "c", "a"]


def test_delete_machine_annotation_beats_unhealthy() -> None:
    nodes = [
        node("a", ready="False"),
        node("b", annotations={"cluster.x-k8s.io/delete-machine": ""}),  # any value counts
        node("c"),
    ]
    assert choose_victims(nodes, [], 3) == ["b", "a", "c"]


@pytest.mark.parametrize("ready", ["False", "Unknown", ""])
def test_unhealthy_beats_cordoned(ready: str) -> None:
    nodes = [node("a", unschedulable=True), node("b", ready=ready), node("c")]
    assert choose_victims(nodes, [], 3) == ["b", "a", "c"]


def test_cordoned_beats_fewer_evictable_pods() -> None:
    nodes = [node("a"), node("b", unschedulable=True)]
    pods = builders.pods_on("b", 3)
    assert choose_victims(nodes, pods, 2) == ["b", "a"]


@pytest.mark.parametrize(
    "taint",
    [
        "scalebot.io/draining",
        "node.kubernetes.io/unschedulable",
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
    ],
)
def test_drain_taints_count_as_cordoned(taint: str) -> None:
    tainted = node("b", taints=(Taint(key=taint, effect="NoSchedule"),))
    assert is_emptying(tainted)
    assert choose_victims([node("a"), tainted], builders.pods_on("b", 2), 1) == ["b"]


def test_an_unrelated_taint_is_not_cordoned() -> None:
    tainted = node("b", taints=(Taint(key="dedicated", value="gpu", effect="NoSchedule"),))
    assert not is_emptying(tainted)
    assert choose_victims([node("a"), tainted], builders.pods_on("b", 1), 2) == ["a", "b"]


def test_fewest_evictable_pods_beats_utilisation() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [
        *builders.pods_on("a", 2, cpu_request_milli=10),  # 2 pods, nearly idle
        builders.pod("b-big", node="b", cpu_request_milli=3900),  # 1 pod, nearly full
        *builders.pods_on("c", 3),
    ]
    assert choose_victims(nodes, pods, 3) == ["b", "a", "c"]


def test_least_utilised_beats_policy() -> None:
    nodes = [node("old", age_days=100), node("young", age_days=1)]
    pods = [
        builders.pod("x", node="old", cpu_request_milli=2000),
        builders.pod("y", node="young", cpu_request_milli=1000),
    ]
    assert choose_victims(nodes, pods, 2, policy="Oldest") == ["young", "old"]
    assert choose_victims(nodes, pods, 2, policy="Newest") == ["young", "old"]


def test_utilisation_uses_the_larger_of_cpu_and_memory() -> None:
    nodes = [node("cpu-heavy"), node("mem-heavy")]
    pods = [
        builders.pod(
            "x", node="cpu-heavy", cpu_request_milli=2000, memory_request_bytes=1 * GI
        ),  # max(0.5, 1/16)
        builders.pod(
            "y", node="mem-heavy", cpu_request_milli=100, memory_request_bytes=12 * GI
        ),  # max(1/40, 0.75)
    ]
    assert choose_victims(nodes, pods, 2) == ["cpu-heavy", "mem-heavy"]


def test_oldest_policy_then_name() -> None:
    nodes = [node("n3", age_days=5), node("n1", age_days=30), node("n2", age_days=30), node("n0", age_days=1)]
    assert choose_victims(nodes, [], 4, policy="Oldest") == ["n1", "n2", "n3", "n0"]


def test_newest_policy_then_name() -> None:
    nodes = [node("n3", age_days=5), node("n1", age_days=30), node("n2", age_days=1), node("n0", age_days=1)]
    assert choose_victims(nodes, [], 4, policy="Newest") == ["n0", "n2", "n3", "n1"]


def test_unknown_creation_time_sorts_last_for_both_age_policies() -> None:
    unknown = Node(name="a-unknown", ready="True")
    nodes = [unknown, node("b", age_days=1), node("c", age_days=9)]
    assert choose_victims(nodes, [], 3, policy="Oldest") == ["c", "b", "a-unknown"]
    assert choose_victims(nodes, [], 3, policy="Newest") == ["b", "c", "a-unknown"]


def test_name_is_the_last_tie_break_in_byte_order() -> None:
    nodes = [node(n) for n in ("web-10", "web-2", "Web-3", "web-1")]
    assert choose_victims(nodes, [], 4) == ["Web-3", "web-1", "web-10", "web-2"]


# --- Random -------------------------------------------------------------------------------------


RANDOM_NODES = [node(f"n{i}", age_days=i) for i in range(6)]


def test_random_is_pinned_for_a_seed() -> None:
    # Pinned: a change here changes which nodes users lose; it must be deliberate.
    seed_0 = ["n5", "n2", "n0", "n3", "n4", "n1"]
    seed_42 = ["n3", "n5", "n1", "n2", "n0", "n4"]
    assert choose_victims(RANDOM_NODES, [], 6, policy="Random", seed=0) == seed_0
    assert choose_victims(RANDOM_NODES, [], 6, policy="Random", seed=42) == seed_42


def test_random_does_not_depend_on_input_order_and_differs_by_seed() -> None:
    small = RANDOM_NODES[:4]
    assert len(all_orders(small, [], policy="Random", seed=7)) == 1
    draws = {tuple(choose_victims(RANDOM_NODES, [], 6, policy="Random", seed=s)) for s in range(20)}
    assert len(draws) > 10


def test_random_only_orders_within_a_tier() -> None:
    nodes = [*RANDOM_NODES, node("zz-down", ready="False")]
    for seed in range(10):
        assert choose_victims(nodes, [], 1, policy="Random", seed=seed) == ["zz-down"]


def test_random_rank_of_a_node_survives_other_nodes_joining() -> None:
    before = choose_victims(RANDOM_NODES[:3], [], 3, policy="Random", seed=3)
    after = choose_victims(RANDOM_NODES, [], 6, policy="Random", seed=3)
    assert [n for n in after if n in before] == before


# --- what counts ----------------------------------------------------------------------------------


def test_daemonset_mirror_finished_and_terminating_pods_are_not_evictable() -> None:
    counted = [
        builders.pod("rs", node="a"),
        builders.pod("bare", node="a", controller=None),
        builders.pod(
            "orphan-like-sts", node="a", controller=OwnerRef(kind="StatefulSet", name="db", uid="u")
        ),
    ]
    ignored = [
        builders.pod("ds", node="a", controller=DS),
        builders.pod("mirror", node="a", controller=None, annotations={"kubernetes.io/config.mirror": "x"}),
        builders.pod("done", node="a", phase="Succeeded"),
        builders.pod("failed", node="a", phase="Failed"),
        builders.pod("leaving", node="a", deletion_timestamp=T0),
    ]
    assert [p.name for p in counted + ignored if is_evictable(p)] == ["rs", "bare", "orphan-like-sts"]
    assert evictable_count(counted + ignored) == 3


def test_a_node_with_only_daemonset_and_mirror_pods_is_empty() -> None:
    nodes = [node("a"), node("b")]
    pods = [
        builders.pod("ds-b", node="b", controller=DS),
        builders.pod("mirror-b", node="b", controller=None, annotations={"kubernetes.io/config.mirror": "x"}),
        builders.pod("web", node="a"),
    ]
    assert choose_victims(nodes, pods, 1) == ["b"]


def test_utilisation_figures() -> None:
    n = node("a", cpu_allocatable_milli=4000, memory_allocatable_bytes=8 * GI)
    pods = [
        builders.pod("x", node="a", cpu_request_milli=1000, memory_request_bytes=1 * GI),
        builders.pod("ds", node="a", controller=DS, cpu_request_milli=1000),  # DaemonSet pods hold resources
        builders.pod("done", node="a", phase="Succeeded", cpu_request_milli=4000),  # finished ones do not
        builders.pod("elsewhere", node="b", cpu_request_milli=4000),  # not on this node
    ]
    assert utilisation(n, pods) == 0.5
    assert utilisation(n, [builders.pod("m", node="a", memory_request_bytes=6 * GI)]) == 0.75
    assert utilisation(n, []) == 0.0


def test_unknown_allocatable_is_left_out_of_utilisation() -> None:
    n = node("a", cpu_allocatable_milli=0, memory_allocatable_bytes=10 * GI)
    assert (
        utilisation(n, [builders.pod("x", node="a", cpu_request_milli=500, memory_request_bytes=GI)]) == 0.1
    )


def test_pods_without_a_node_are_ignored() -> None:
    nodes = [node("a"), node("b")]
    pods = [*builders.pods_on("b", 1), *[builders.pod(f"pending-{i}", node="") for i in range(5)]]
    assert choose_victims(nodes, pods, 2) == ["a", "b"]


# --- provider hints -------------------------------------------------------------------------------


def test_machine_hints_rank_like_the_node_signals() -> None:
    nodes = [node(n) for n in ("a", "b", "c", "d")]
    order = choose_victims(nodes, [], 4, marked={"c"}, deleting={"d"}, unhealthy={"b"})
    assert order == ["d", "c", "b", "a"]


def test_victim_key_layout() -> None:
    n = node("a", age_days=0, annotations={"cluster.x-k8s.io/delete-machine": "t"})
    key = victim_key(n, builders.pods_on("a", 2, cpu_request_milli=400), policy="Oldest", seed=0)
    assert key == (True, False, True, True, 2, 0.2, T0.timestamp(), "a")
    hinted = victim_key(n, [], policy="Newest", seed=0, hints=VictimHints(deleting=frozenset({"a"})))
    assert hinted[:5] == (False, False, True, True, 0)
    assert hinted[6] == -T0.timestamp()


# --- the whole order at once ------------------------------------------------------------------------


def test_full_order_is_deterministic_for_every_input_permutation() -> None:
    nodes = [
        node("busy-old", age_days=50),
        node("busy-young", age_days=2),
        node("idle", age_days=20),
        node("cordoned", unschedulable=True),
        node("not-ready", ready="False"),
        node("marked", annotations={"cluster.x-k8s.io/delete-machine": "2026-03-01T00:00:00Z"}),
        node("deleting", deletion_timestamp=T0),
    ]
    pods = [
        *builders.pods_on("busy-old", 2),
        *builders.pods_on("busy-young", 2),
        *builders.pods_on("cordoned", 4),
    ]
    expected = ("deleting", "marked", "not-ready", "cordoned", "idle", "busy-old", "busy-young")
    assert all_orders(nodes, pods) == {expected}
    assert all_orders(nodes, pods, policy="Newest") == {(*expected[:5], "busy-young", "busy-old")}


def test_semantics_case_25_pool_of_5_to_2() -> None:
    # engine-semantics §9 #25: one annotated, one Ready=False, policy Oldest; ties by name.
    nodes = [
        node("w-a", age_days=3),
        node("w-b", age_days=9),
        node("w-c", age_days=1, annotations={"cluster.x-k8s.io/delete-machine": "true"}),
        node("w-d", age_days=2, ready="False"),
        node("w-e", age_days=9),
    ]
    assert choose_victims(nodes, [], 3, policy="Oldest") == ["w-c", "w-d", "w-b"]
    assert choose_victims(list(reversed(nodes)), [], 3, policy="Oldest") == ["w-c", "w-d", "w-b"]


def test_count_zero_and_all() -> None:
    nodes = [node("a"), node("b")]
    assert choose_victims(nodes, [], 0) == []
    assert choose_victims(nodes, [], 2) == ["a", "b"]
    assert choose_victims([], [], 0) == []


# --- bad arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [-1, 3])
def test_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match=f"cannot choose {count} nodes from a pool of 2"):
        choose_victims([node("a"), node("b")], [], count)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(
        ValueError, match="unknown deletion policy 'Cheapest'; use one of Oldest, Newest, Random"
    ):
        choose_victims([node("a")], [], 1, policy="Cheapest")  # type: ignore[arg-type]


def test_duplicate_node_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate node names"):
        choose_victims([node("a"), node("a")], [], 1)

"""Consolidation planning: which nodes can go because their pods fit on the rest, and why others stay."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.domain.model import LabelSelector, NodeInfo, PdbInfo
from engine.domain.operation import OpKind
from engine.domain.settings import ConsolidationPolicy, ConsolidationSettings, ScaleDownRules
from engine.operations.policy import EVICTOR, ClusterPolicy, approvals_needed
from engine.planning.consolidation import (
    NodeView,
    SchedulingSnapshot,
    due_empty,
    empty_nodes,
    operation_plan,
    other_consolidators,
    plan_consolidation,
    recheck,
    track_since,
)
from engine.pools.base import Pool
from tests.builders import typed_pod

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
OLD = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
POOL = "scalebot.io/pool"


# Own raw objects, not tests/builders.py's: the planners read every label, toleration and request, and the
# shared kwok node and pause pod carry kwok's labels, annotation and toleration; each scenario here
# states exactly what its nodes offer and its pods ask.
def raw_node(
    name: str, pool: str = "web", *, cpu: str = "4", created: str = OLD, **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {POOL: pool, **meta.pop("labels", {})},
            "creationTimestamp": created,
            **meta,
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def raw_pod(
    name: str, node: str, cpu: str = "1", *, owner: str = "ReplicaSet", owner_name: str = "rs", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "shop", "name": name, "labels": {"app": name.rsplit("-", 1)[0]}}
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner, "name": owner_name, "uid": "u", "controller": True, "apiVersion": "apps/v1"}
        ]
    meta.update(extra.pop("meta", {}))
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **extra}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def plan(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], pdbs: tuple[PdbInfo, ...] = (), **kw: Any
) -> Any:
    return plan_consolidation(
        [NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"][POOL]) for n in nodes],
        [typed_pod(p) for p in pods],
        pdbs,
        pool_minimums=kw.pop("pool_minimums", {"web": 0}),
        daemonset_keys=frozenset({"kube-system/node-exporter"}),
        now=NOW,
        **kw,
    )


def half_full_cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [raw_node(f"n{i}") for i in range(4)]
    pods = [raw_pod(f"web-{i}0", f"n{i}", cpu="1") for i in range(4)]
    pods += [raw_pod(f"api-{i}", f"n{i}", cpu="500m") for i in range(4)]
    pods += [
        raw_pod(
            f"node-exporter-{i}",
            f"n{i}",
            cpu="100m",
            owner="DaemonSet",
            owner_name="node-exporter",
            meta={"namespace": "kube-system"},
        )
        for i in range(4)
    ]
    return nodes, pods


def test_four_half_empty_nodes_consolidate_to_two() -> None:
    nodes, pods = half_full_cluster()
    result = plan(nodes, pods)
    assert [r.node for r in result.remove] == ["n0", "n2"]
    # DaemonSet pods go with their node; the web and api pods move to nodes that stay.
    moves = {pod: dest for r in result.remove for pod, dest in r.moves}
    assert moves == {"shop/api-0": "n1", "shop/web-00": "n1", "shop/api-2": "n1", "shop/web-20": "n3"}
    assert [(k.node, k.reason) for k in result.keep] == [
        ("n1", "takes pods moved off n0 in this plan"),
        ("n3", "takes pods moved off n2 in this plan"),
    ]


def test_a_pool_at_its_minimum_keeps_its_nodes() -> None:
    nodes, pods = half_full_cluster()
    result = plan(nodes, pods, pool_minimums={"web": 3})
    assert [r.node for r in result.remove] == ["n0"]
    assert "pool web is at its minimum size (3)" in {k.reason for k in result.keep}


def test_blockers_keep_a_node_with_the_reason() -> None:
    nodes = [
        raw_node("bare"),
        raw_node("pdb"),
        raw_node("optout"),
        raw_node("young", created=(NOW - timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")),
        raw_node("disabled", annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}),
        raw_node("big", cpu="64"),
    ]
    pods = [
        raw_pod("lonely-0", "bare", owner=""),
        raw_pod("db-0", "pdb"),
        raw_pod("batch-0", "optout", meta={"annotations": {"karpenter.sh/do-not-disrupt": "true"}}),
        raw_pod("x-0", "young"),
        raw_pod("y-0", "disabled"),
    ]
    pdb = PdbInfo(namespace="shop", name="db", selector=LabelSelector(match_labels={"app": "db"}))
    reasons = {k.node: k.reason for k in plan(nodes, pods, (pdb,)).keep}
    assert reasons["bare"].startswith("shop/lonely-0: Pods that declare no controller")
    assert reasons["pdb"] == "shop/db-0: PodDisruptionBudget shop/db allows 0 disruptions now"
    assert reasons["optout"].startswith("shop/batch-0:")
    assert reasons["young"] == "younger than 5 min"
    assert reasons["disabled"] == "annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true"
    assert "big" not in reasons  # empty and old: removable


def test_pods_that_fit_nowhere_keep_their_node_and_say_why() -> None:
    nodes = [raw_node("a", cpu="2"), raw_node("b", cpu="2")]
    pods = [raw_pod("web-0", "a", cpu="1500m"), raw_pod("web-1", "b", cpu="1500m")]
    # 75 % requested: only a threshold above cluster-autoscaler's default lets the fit decide.
    result = plan(
        nodes, pods, settings=ConsolidationSettings(rules=ScaleDownRules(utilization_threshold=0.8))
    )
    assert result.remove == ()
    assert {k.reason for k in result.keep} == {
        "shop/web-1 fits on no other node: 0/1 nodes are available: 1 Insufficient cpu.",
        "shop/web-0 fits on no other node: 0/1 nodes are available: 1 Insufficient cpu.",
    }


def test_the_plan_is_capped_and_renders() -> None:
    nodes = [raw_node(f"e{i}") for i in range(5)]
    result = plan(nodes, [], settings=ConsolidationSettings(max_nodes=2))
    assert [r.node for r in result.remove] == ["e0", "e1"]
    assert [k.reason for k in result.keep] == ["this plan removes at most 2 nodes"] * 3
    text = result.to_text()
    assert text.startswith("Plan: consolidate: 2 node(s) can be removed, 3 kept")
    assert result.to_json()["remove"][0] == {"node": "e0", "pool": "web", "moves": []}


def test_other_autoscalers_are_named_so_the_plan_does_not_fight_them() -> None:
    notes = other_consolidators(
        [
            ("kube-system", "aws-cluster-autoscaler"),
            ("karpenter", "karpenter"),
            ("shop", "web"),
            ("kube-system", "coredns"),
        ]
    )
    assert notes == (
        "cluster-autoscaler removes underused nodes by itself (kube-system/aws-cluster-autoscaler): "
        "scalebot's plan is advice, not a second autoscaler",
        "Karpenter consolidates its NodePools by itself (spec.disruption) (karpenter/karpenter): "
        "scalebot's plan is advice, not a second autoscaler",
    )
    assert other_consolidators([("shop", "web")]) == ()


def snapshot(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingSnapshot:
    return SchedulingSnapshot(
        nodes=tuple(NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"][POOL]) for n in nodes),
        pods=tuple(typed_pod(p) for p in pods),
    )


def test_recheck_finds_the_moves_when_the_pods_still_fit() -> None:
    snap = snapshot(
        [raw_node("a"), raw_node("b"), raw_node("c")],
        [raw_pod("web-1", "a"), raw_pod("web-2", "b", cpu="2")],
    )
    moves, reason = recheck(
        "a", snap, (), not_destinations=frozenset({"c"}), daemonset_keys=frozenset(), now=NOW
    )
    assert (moves, reason) == ((("shop/web-1", "b"),), "")


def test_recheck_skips_a_node_whose_pods_no_longer_fit_outside_the_nodes_still_to_go() -> None:
    # Since the plan, b filled up; c is removed later in the same operation, so it takes nothing.
    snap = snapshot(
        [raw_node("a"), raw_node("b"), raw_node("c")],
        [raw_pod("web-1", "a"), raw_pod("big-1", "b", cpu="3500m")],
    )
    moves, reason = recheck(
        "a", snap, (), not_destinations=frozenset({"c"}), daemonset_keys=frozenset(), now=NOW
    )
    assert moves == ()
    assert (
        reason
        == "shop/web-1 no longer fits on the nodes that stay: 0/1 nodes are available: 1 Insufficient cpu."
    )


def test_recheck_skips_a_node_cordoned_or_blocked_since_the_plan() -> None:
    cordoned = raw_node("a")
    cordoned["spec"]["unschedulable"] = True
    snap = snapshot([cordoned, raw_node("b")], [raw_pod("web-1", "a")])
    _, reason = recheck("a", snap, (), not_destinations=frozenset(), daemonset_keys=frozenset(), now=NOW)
    assert reason.startswith("cordoned since the plan")
    snap = snapshot([raw_node("a"), raw_node("b")], [raw_pod("lonely", "a", owner="")])
    _, reason = recheck("a", snap, (), not_destinations=frozenset(), daemonset_keys=frozenset(), now=NOW)
    assert reason.startswith("shop/lonely: Pods that declare no controller")
    _, reason = recheck("gone", snap, (), not_destinations=frozenset(), daemonset_keys=frozenset(), now=NOW)
    assert reason == "the node is gone"


def test_operation_plan_shrinks_each_pool_by_its_removed_nodes_and_hashes_the_moves() -> None:
    nodes = [raw_node("a"), raw_node("b"), raw_node("c")]
    result = plan(nodes, [raw_pod("web-1", "a"), raw_pod("web-2", "b")])
    pools = [Pool(name="web", provider="labels", nodes=("a", "b", "c"), desired=3, min_size=1)]
    op_plan = operation_plan("dev", result, pools)
    assert op_plan.kind is OpKind.CONSOLIDATE
    [change] = op_plan.pools
    assert (change.before, change.after) == (3, 3 - len(result.remove))
    assert op_plan.nodes == tuple(r.node for r in result.remove)
    assert {m[1] for m in op_plan.moves} == {p for r in result.remove for p, _ in r.moves}
    moved = replace(op_plan, moves=tuple((n, p, "elsewhere") for n, p, _ in op_plan.moves))
    assert moved.plan_hash != op_plan.plan_hash
    assert replace(op_plan, blockers=(("node x", "why"),)).plan_hash == op_plan.plan_hash


def test_empty_nodes_are_due_after_the_ttl_longest_first_within_the_batch_and_pool_minimums() -> None:
    t0 = NOW - timedelta(minutes=10)
    since = track_since({"a": t0, "gone": t0}, ["a", "b", "c", "d"], NOW - timedelta(minutes=6))
    assert since == {
        "a": t0,
        "b": NOW - timedelta(minutes=6),
        "c": NOW - timedelta(minutes=6),
        "d": since["d"],
    }
    pools = [
        Pool(name="web", provider="labels", nodes=("a", "b", "x"), desired=3, min_size=1),
        Pool(name="db", provider="labels", nodes=("c", "d"), desired=2, min_size=2),
    ]
    ttl = timedelta(minutes=5)
    # web may lose two nodes (3 → 1), db none (at its minimum); the batch caps the rest.
    assert due_empty(since, pools=pools, ttl=ttl, batch=10, now=NOW) == ("a", "b")
    assert due_empty(since, pools=pools, ttl=ttl, batch=1, now=NOW) == ("a",)
    assert due_empty(since, pools=pools, ttl=ttl, batch=10, now=NOW - timedelta(minutes=2)) == ("a",)


def test_a_node_with_only_daemonset_mirror_or_finished_pods_is_empty() -> None:
    nodes = [raw_node("a"), raw_node("b"), raw_node("c")]
    ds = raw_pod("agent-1", "a", owner="DaemonSet", owner_name="agent")
    mirror = raw_pod("etcd-a", "a", owner="", meta={"annotations": {"kubernetes.io/config.mirror": "x"}})
    done = raw_pod("job-1", "b", owner="Job")
    done["status"]["phase"] = "Succeeded"
    busy = raw_pod("web-1", "c")
    snap = snapshot(nodes, [ds, mirror, done, busy])
    pools = [Pool(name="web", provider="labels", nodes=("a", "b", "c"), desired=3)]
    assert empty_nodes(snap, pools=pools, now=NOW) == ("a", "b")
    assert empty_nodes(snap, pools=[], now=NOW) == ()  # a node in no pool cannot be removed


def test_evictor_proposals_need_approval_unless_auto_approved_and_always_on_a_protected_cluster() -> None:
    nodes = [raw_node("a"), raw_node("b")]
    op_plan = operation_plan(
        "dev",
        plan(nodes, [raw_pod("web-1", "a")]),
        [Pool(name="web", provider="labels", nodes=("a", "b"), desired=2)],
    )
    asks = ClusterPolicy(cluster="dev", approval_required_for=frozenset())
    auto = replace(asks, consolidation=ConsolidationPolicy(evictor=True, evictor_auto_approve=True))
    assert approvals_needed(asks, op_plan, requested_by=EVICTOR) == 1  # even where nothing else asks
    assert approvals_needed(auto, op_plan, requested_by=EVICTOR) == 0
    assert approvals_needed(replace(auto, protected=True), op_plan, requested_by=EVICTOR) == 2
    # A person's consolidation is a scale-down for the policy.
    assert approvals_needed(ClusterPolicy(cluster="dev"), op_plan, requested_by="U1") == 1

"""cluster-autoscaler's scale-down rules in the pure planner: one test per rule, then a table of
cluster-autoscaler's own scale-down cases (its simulator and eligibility tests) with scalebot's
verdict, the same or a difference that docs/cluster-autoscaler.md explains.

Every scenario has a spare node in another pool with room for everything: only the candidate
node's own rules decide, never the fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.domain.model import LabelSelector, NodeInfo, PdbInfo
from engine.domain.settings import ConsolidationPolicy, ConsolidationSettings
from engine.planning import consolidation
from engine.planning.consolidation import (
    NodeView,
    SchedulingSnapshot,
    empty_nodes,
    plan_consolidation,
    recheck,
    underused,
)
from engine.pools.base import Pool
from tests.builders import typed_pod

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POOL = "scalebot.io/pool"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


# Own raw objects, not tests/builders.py's: the planners read every label, toleration and request, and the
# shared kwok node and pause pod carry kwok's labels, annotation and toleration; each scenario here
# states exactly what its nodes offer and its pods ask.
def node(
    name: str = "node",
    pool: str = "web",
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    taints: tuple[tuple[str, str], ...] = (),
    ready: str = "True",
    extra: dict[str, str] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {POOL: pool},
            "creationTimestamp": stamp(NOW - timedelta(hours=3)),
            **meta,
        },
        # cluster-autoscaler's taints carry the unix time they were set at.
        "spec": {"taints": [{"key": k, "value": str(int(NOW.timestamp())), "effect": e} for k, e in taints]},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(
    name: str,
    on: str = "node",
    *,
    namespace: str = "shop",
    owner: str = "ReplicaSet",
    cpu: str = "100m",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    created: datetime | None = None,
    deleted: datetime | None = None,
    grace: int | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "labels": labels or {"app": name},
        "annotations": annotations or {},
    }
    if owner:
        group = {"Job": "batch/v1", "ReplicationController": "v1"}.get(owner, "apps/v1")
        meta["ownerReferences"] = [
            {"kind": owner, "name": f"{name}-owner", "uid": "u", "controller": True, "apiVersion": group}
        ]
    if created is not None:
        meta["creationTimestamp"] = stamp(created)
    if deleted is not None:
        meta["deletionTimestamp"] = stamp(deleted)
    spec: dict[str, Any] = {
        "nodeName": on,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, **(extra or {})}}}],
        "volumes": volumes or [],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def budget(namespace: str, labels: dict[str, str], allowed: int = 1) -> PdbInfo:
    return PdbInfo(
        namespace=namespace,
        name="pdb",
        selector=LabelSelector(match_labels=labels),
        disruptions_allowed=allowed,
    )


DEFAULTS = ConsolidationSettings()
LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
NOT_READY = "scalebot never removes a node that is not Ready (it cannot tell a drain from a failure)"
SPARE = node("spare", pool="spare", cpu="64", memory="256Gi", extra={"nvidia.com/gpu": "8"})


def verdict(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    pdbs: tuple[PdbInfo, ...] = (),
    settings: ConsolidationSettings = DEFAULTS,
    daemonsets: frozenset[str] = frozenset({"shop/ds-owner", "kube-system/ds-owner"}),
) -> str:
    """ "" when the candidate `node` is removed, else why it stays."""
    result = plan_consolidation(
        [NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"][POOL]) for n in [*nodes, SPARE]],
        [typed_pod(p) for p in pods],
        pdbs,
        pool_minimums={"web": 0, "spare": 1},
        daemonset_keys=daemonsets,
        now=NOW,
        settings=settings,
        removable_pools=frozenset({"web"}),
    )
    if "node" in {r.node for r in result.remove}:
        return ""
    return next(k.reason for k in result.keep if k.node == "node")


def snapshot(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingSnapshot:
    return SchedulingSnapshot(
        nodes=tuple(NodeView(NodeInfo.from_raw(n), pool=n["metadata"]["labels"][POOL]) for n in nodes),
        pods=tuple(typed_pod(p) for p in pods),
    )


# -- nodes another autoscaler is removing -----------------------------------------------------------


@pytest.mark.parametrize(
    ("taint", "effect", "why"),
    [
        ("ToBeDeletedByClusterAutoscaler", "NoSchedule", "cluster-autoscaler is deleting it"),
        ("karpenter.sh/disrupted", "NoSchedule", "Karpenter is deleting it"),
        (
            "DeletionCandidateOfClusterAutoscaler",
            "PreferNoSchedule",
            "cluster-autoscaler found it unneeded and will delete it itself",
        ),
    ],
)
def test_a_ready_uncordoned_node_another_autoscaler_is_removing_is_never_planned(
    taint: str, effect: str, why: str
) -> None:
    claimed = node(taints=((taint, effect),))
    reason = f"{why} (taint {taint})"
    # Consolidation keeps it and says why, even with room for its pods elsewhere ...
    assert verdict([claimed], [pod("web-0")]) == reason
    # ... the empty-node policy does not count it empty ...
    snap = snapshot([claimed, SPARE], [])
    web = Pool(name="web", provider="labels", nodes=("node",), desired=1, min_size=0)
    assert empty_nodes(snap, pools=[web], now=NOW) == ()
    # ... advice shows it as staying, with the same reason ...
    plan = plan_consolidation(
        snap.nodes, snap.pods, (), pool_minimums={"web": 0}, daemonset_keys=frozenset(), now=NOW
    )
    rows = {u.node: u.movable for u in underused(snap, plan, now=NOW)}
    assert rows["node"] == reason
    # ... and a node tainted after its plan was approved is skipped when its turn comes.
    moves, skipped = recheck(
        "node", snap, (), not_destinations=frozenset(), daemonset_keys=frozenset(), now=NOW
    )
    assert (moves, skipped) == ((), f"since the plan, {reason}")


def test_a_node_another_autoscaler_deletes_no_longer_counts_towards_its_pools_minimum() -> None:
    leaving = node("leaving", taints=(("ToBeDeletedByClusterAutoscaler", "NoSchedule"),))
    result = plan_consolidation(
        [NodeView(NodeInfo.from_raw(n), pool="web") for n in (leaving, node())],
        [],
        (),
        pool_minimums={"web": 1},
        daemonset_keys=frozenset(),
        now=NOW,
    )
    assert result.remove == ()
    assert {k.node: k.reason for k in result.keep}["node"] == "pool web is at its minimum size (1)"


def test_the_victim_chooser_and_the_planner_read_one_list_of_autoscaler_taints() -> None:
    from engine.pools import victims

    assert set(victims.DELETING_TAINTS) <= victims.CORDON_TAINT_KEYS
    assert set(victims.AUTOSCALER_TAINTS) == {
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
        "DeletionCandidateOfClusterAutoscaler",
    }


# -- kube-system pods ---------------------------------------------------------------------------------

SYSTEM = "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: coredns"


def test_a_young_kube_system_pod_without_a_budget_keeps_its_node() -> None:
    young = pod("coredns", namespace="kube-system", created=NOW - timedelta(minutes=30))
    assert verdict([node()], [young]) == f"kube-system/coredns: {SYSTEM}"


def test_a_kube_system_pod_is_movable_with_a_budget_once_old_or_when_the_rule_is_off() -> None:
    from engine.domain.settings import ScaleDownRules

    young = pod("coredns", namespace="kube-system", created=NOW - timedelta(minutes=30))
    assert verdict([node()], [young], (budget("kube-system", {"app": "coredns"}),)) == ""
    # A budget in another namespace covers nothing.
    assert (
        verdict([node()], [young], (budget("shop", {"app": "coredns"}),)) == f"kube-system/coredns: {SYSTEM}"
    )
    old = pod("coredns", namespace="kube-system", created=NOW - timedelta(minutes=61))
    assert verdict([node()], [old]) == ""  # --blocking-system-pod-distruption-timeout 1h
    off = ConsolidationSettings(rules=ScaleDownRules(skip_nodes_with_system_pods=False))
    assert verdict([node()], [young], settings=off) == ""
    shorter = ConsolidationSettings(rules=ScaleDownRules(system_pod_disruption_timeout=timedelta(minutes=20)))
    assert verdict([node()], [young], settings=shorter) == ""


# -- utilisation --------------------------------------------------------------------------------------


def test_a_node_above_the_utilization_threshold_stays_even_when_its_pods_fit_elsewhere() -> None:
    assert verdict([node(cpu="1")], [pod("web-0", cpu="600m")]) == (
        "cpu requested is 60% of allocatable, above the scale-down utilization threshold (50%)"
    )
    # At the threshold is underused (cluster-autoscaler compares with >).
    assert verdict([node(cpu="1")], [pod("web-0", cpu="500m")]) == ""


def test_the_threshold_is_configurable_and_daemonset_pods_count_unless_told_otherwise() -> None:
    from engine.domain.settings import ScaleDownRules

    busy = [pod("web-0", cpu="600m")]
    assert verdict([node(cpu="1")], busy, settings=ConsolidationSettings(rules=ScaleDownRules(0.7))) == ""
    with_ds = [pod("web-0", cpu="100m"), pod("ds", owner="DaemonSet", cpu="500m")]
    assert verdict([node(cpu="1")], with_ds).startswith("cpu requested is 60% of allocatable")
    ignore = ConsolidationSettings(rules=ScaleDownRules(ignore_daemonsets_utilization=True))
    # 100m of the 500m left once the DaemonSet's requests leave allocatable too: 20 %.
    assert verdict([node(cpu="1")], with_ds, settings=ignore) == ""


def test_a_gpu_node_is_judged_on_its_gpus_alone_against_the_gpu_threshold() -> None:
    from engine.domain.settings import ScaleDownRules

    gpu_node = node(cpu="1", extra={"nvidia.com/gpu": "4"})
    cpu_heavy = [pod("train-0", cpu="900m", extra={"nvidia.com/gpu": "2"})]
    assert verdict([gpu_node], cpu_heavy) == ""  # 90 % cpu, but 50 % of its GPUs
    strict = ConsolidationSettings(rules=ScaleDownRules(gpu_utilization_threshold=0.25))
    assert verdict([gpu_node], cpu_heavy, settings=strict) == (
        "nvidia.com/gpu requested is 50% of allocatable, above the scale-down utilization threshold (25%)"
    )


def test_a_node_without_allocatable_memory_has_no_utilisation_and_stays() -> None:
    bare = node()
    del bare["status"]["allocatable"]["memory"]
    assert verdict([bare], []) == "its allocatable memory is unknown, so its utilisation cannot be computed"


def test_advice_lists_nodes_at_or_under_the_same_threshold_as_consolidation() -> None:
    from engine.domain.settings import ScaleDownRules

    nodes = [node("half", cpu="1"), node("most", cpu="1"), SPARE]
    pods = [pod("a", "half", cpu="500m"), pod("b", "most", cpu="600m")]
    snap = snapshot(nodes, pods)
    plan = plan_consolidation(
        snap.nodes, snap.pods, (), pool_minimums={"web": 0}, daemonset_keys=frozenset(), now=NOW
    )
    listed = {u.node: u for u in underused(snap, plan, now=NOW)}
    assert "half" in listed and "most" not in listed
    assert listed["half"].figure == consolidation.Utilisation("cpu", 0.5)
    loose = underused(snap, plan, now=NOW, rules=ScaleDownRules(utilization_threshold=0.6))
    assert "most" in {u.node for u in loose}


# -- local storage and safe-to-evict -----------------------------------------------------------------

SCRATCH = {"name": "scratch", "emptyDir": {}}
CACHE = {"name": "cache", "emptyDir": {}}


def test_local_storage_follows_cluster_autoscalers_rule() -> None:
    from engine.domain.settings import ScaleDownRules

    blocked = "shop/web-0: pod with local storage present: web-0 (volumes scratch;"
    assert verdict([node()], [pod("web-0", volumes=[SCRATCH])]).startswith(blocked)
    host = {"name": "logs", "hostPath": {"path": "/var/log"}}
    assert "pod with local storage present: web-0 (volumes logs;" in verdict(
        [node()], [pod("web-0", volumes=[host])]
    )
    memory = {"name": "shm", "emptyDir": {"medium": "Memory"}}
    assert verdict([node()], [pod("web-0", volumes=[memory])]) == ""
    listed = {"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "scratch,cache"}
    assert verdict([node()], [pod("web-0", volumes=[SCRATCH, CACHE], annotations=listed)]) == ""
    partly = {"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "scratch"}
    assert "(volumes cache;" in verdict(
        [node()], [pod("web-0", volumes=[SCRATCH, CACHE], annotations=partly)]
    )
    safe = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
    assert verdict([node()], [pod("web-0", volumes=[SCRATCH], annotations=safe)]) == ""
    off = ConsolidationSettings(rules=ScaleDownRules(skip_nodes_with_local_storage=False))
    assert verdict([node()], [pod("web-0", volumes=[SCRATCH])], settings=off) == ""


def test_safe_to_evict_false_blocks_and_on_completion_waits() -> None:
    no = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert verdict([node()], [pod("web-0", annotations=no)]).startswith(
        "shop/web-0: Pods annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false"
    )
    later = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "on-completion"}
    assert verdict([node()], [pod("job-0", owner="Job", annotations=later)]) == (
        "shop/job-0: annotated cluster-autoscaler.kubernetes.io/safe-to-evict=on-completion: "
        "it is waited for until it completes"
    )


def test_a_pod_of_a_custom_controller_keeps_its_node_unless_the_rule_is_off() -> None:
    from engine.domain.settings import ScaleDownRules

    assert verdict([node()], [pod("kafka-0", owner="StrimziPodSet")]) == (
        "shop/kafka-0: shop/kafka-0 is not replicated: its controller is a StrimziPodSet "
        "(not a ReplicaSet, StatefulSet, Job or ReplicationController)"
    )
    off = ConsolidationSettings(rules=ScaleDownRules(skip_nodes_with_custom_controller_pods=False))
    assert verdict([node()], [pod("kafka-0", owner="StrimziPodSet")], settings=off) == ""


# -- the unattended policies' timing ------------------------------------------------------------------


def test_the_unattended_policies_wait_as_cluster_autoscaler_does_by_default() -> None:
    policy = ConsolidationPolicy()
    assert (policy.unneeded_time, policy.delay_after_add) == (timedelta(minutes=10), timedelta(minutes=10))
    # A node empty for 9 minutes is not due yet; at 10 it is.
    pools = [Pool(name="web", provider="labels", nodes=("a", "b"), desired=2, min_size=0)]
    since = {"a": NOW - timedelta(minutes=9), "b": NOW - timedelta(minutes=10)}
    assert consolidation.due_empty(since, pools=pools, ttl=policy.unneeded_time, batch=10, now=NOW) == ("b",)


def test_nothing_is_removed_unattended_within_the_delay_after_a_node_joined() -> None:
    from engine.planning.consolidation import scale_up_hold

    fresh = node("fresh", creationTimestamp=stamp(NOW - timedelta(minutes=3)))
    views = [NodeView(NodeInfo.from_raw(n), pool="web") for n in (node(), fresh)]
    assert scale_up_hold(views, NOW, timedelta(minutes=10)) == (
        "node fresh joined 3 min ago; nothing is removed until 10 min after a scale-up (delay_after_add)"
    )
    assert scale_up_hold(views, NOW + timedelta(minutes=7), timedelta(minutes=10)) == ""
    assert scale_up_hold(views, NOW, timedelta(0)) == ""


# -- cluster-autoscaler's own cases -------------------------------------------------------------------

HOUR = timedelta(hours=1)
SAFE = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
BARE_RULE = "Pods that declare no controller"


@dataclass(frozen=True)
class Case:
    """One of cluster-autoscaler's scale-down test cases, in scalebot's words."""

    name: str
    """cluster-autoscaler's own description of the case."""
    pods: list[dict[str, Any]]
    want: str
    """"" when the node goes, else a fragment of why it stays (scalebot's verdict)."""
    pdbs: tuple[PdbInfo, ...] = ()
    nodes: list[dict[str, Any]] = field(default_factory=lambda: [node()])
    settings: ConsolidationSettings = DEFAULTS
    difference: str = ""
    """Why scalebot's verdict is not cluster-autoscaler's (docs/cluster-autoscaler.md), if it is not."""


def _cases() -> list[Case]:
    from engine.domain.settings import ScaleDownRules

    ignore_ds = ConsolidationSettings(rules=ScaleDownRules(ignore_daemonsets_utilization=True))
    kube_rs = pod("systempod", namespace="kube-system")
    system_rc = pod("bar", namespace="kube-system", owner="ReplicationController", labels={"k8s-app": "bar"})
    return [
        # simulator/drain_test.go TestGetPodsToMove
        Case("Unreplicated pod", [pod("unreplicated", owner="")], BARE_RULE),
        Case("Replicated pod", [pod("rs")], ""),
        Case(
            "Manifest pod",
            [
                pod(
                    "manifest",
                    namespace="kube-system",
                    owner="",
                    annotations={"kubernetes.io/config.mirror": "x"},
                )
            ],
            "",
        ),
        Case("DaemonSet pod", [pod("rs"), pod("ds", owner="DaemonSet")], ""),
        Case("Kube-system", [kube_rs], "non-pdb-assigned kube-system pod present: systempod"),
        Case(
            "Kube-system no pdb system pods blocking",
            [pod("systempod", namespace="kube-system", created=NOW - HOUR + timedelta(minutes=1))],
            "non-pdb-assigned kube-system pod present: systempod",
        ),
        Case(
            "Kube-system no pdb system pods allowing",
            [pod("systempod", namespace="kube-system", created=NOW - HOUR - timedelta(minutes=1))],
            "",
        ),
        Case(
            "Local storage", [pod("local", volumes=[{"name": "empty-vol", "emptyDir": {}}])], "local storage"
        ),
        Case(
            "Non-local storage",
            [pod("gitrepo", volumes=[{"name": "my-repo", "gitRepo": {"repository": "r"}}])],
            "",
        ),
        Case(
            "Pdb blocking",
            [pod("pdbpod", labels={"critical": "true"})],
            "allows 0 disruptions now",
            pdbs=(budget("shop", {"critical": "true"}, allowed=0),),
        ),
        Case(
            "Pdb allowing",
            [pod("pdbpod", labels={"critical": "true"})],
            "",
            pdbs=(budget("shop", {"critical": "true"}),),
        ),
        Case(
            "Pod termination",
            [
                pod("rs"),
                pod("terminated", deleted=NOW - timedelta(seconds=90)),
                pod("terminating", deleted=NOW - timedelta(seconds=10)),
            ],
            "",
        ),
        Case("RC-managed pod", [pod("rc", owner="ReplicationController")], ""),
        Case(
            "DS-managed pod by a custom Daemonset",
            [
                pod(
                    "cds",
                    owner="CustomDaemonSet",
                    annotations={"cluster-autoscaler.kubernetes.io/daemonset-pod": "true"},
                )
            ],
            "its controller is a CustomDaemonSet",
            difference="scalebot knows DaemonSets by their kind, not by the daemonset-pod annotation",
        ),
        Case("Job-managed pod", [pod("job", owner="Job")], ""),
        Case("SS-managed pod", [pod("ss", owner="StatefulSet")], ""),
        Case("RS-managed pod that is being deleted", [pod("rs", deleted=NOW - HOUR)], ""),
        Case(
            "pod with EmptyDir and SafeToEvictLocalVolumesKey annotation with matching values",
            [
                pod(
                    "rc",
                    owner="ReplicationController",
                    annotations={LOCAL_VOLUMES: "scratch-1,scratch-2,scratch-3"},
                    volumes=[{"name": f"scratch-{i}", "emptyDir": {}} for i in (1, 2, 3)],
                )
            ],
            "",
        ),
        Case("failed pod", [pod("failed", owner="", phase="Failed")], ""),
        Case(
            "long terminating pod with 0 grace period",
            [pod("rc", owner="ReplicationController", deleted=NOW - timedelta(minutes=1), grace=0)],
            "",
        ),
        Case(
            "long terminating pod with extended grace period",
            [pod("rc", owner="ReplicationController", deleted=NOW - timedelta(minutes=3), grace=360)],
            "",
        ),
        Case("evicted pod", [pod("evicted", owner="", phase="Failed")], ""),
        Case("pod in terminal state", [pod("terminal", owner="", phase="Succeeded")], ""),
        Case(
            "pod with PodSafeToEvict annotation",
            [pod("safe", owner="", annotations=SAFE)],
            BARE_RULE,
            difference="scalebot keeps kubectl's rule for pods without a controller, safe-to-evict or not",
        ),
        Case(
            "kube-system pod with PodSafeToEvict annotation",
            [pod("safe", namespace="kube-system", owner="", annotations=SAFE)],
            BARE_RULE,
            difference="scalebot keeps kubectl's rule for pods without a controller, safe-to-evict or not",
        ),
        Case(
            "kube-system pod with PodSafeToEvict annotation, replicated",
            [pod("safe", namespace="kube-system", annotations=SAFE)],
            "",
        ),
        Case(
            "pod with EmptyDir and PodSafeToEvict annotation",
            [pod("safe", owner="", annotations=SAFE, volumes=[{"name": "scratch", "emptyDir": {}}])],
            BARE_RULE,
            difference="scalebot keeps kubectl's rule for pods without a controller, safe-to-evict or not",
        ),
        Case(
            "pod with EmptyDir and PodSafeToEvict annotation, replicated",
            [pod("safe", annotations=SAFE, volumes=[{"name": "scratch", "emptyDir": {}}])],
            "",
        ),
        Case(
            "empty PDB with RC-managed pod",
            [pod("rc", owner="ReplicationController")],
            "",
            pdbs=(PdbInfo(namespace="shop", name="empty", selector=LabelSelector()),),
        ),
        Case(
            "kube-system PDB with matching kube-system pod",
            [system_rc],
            "",
            pdbs=(budget("kube-system", {"k8s-app": "bar"}),),
        ),
        Case(
            "kube-system PDB with non-matching kube-system pod",
            [system_rc],
            "non-pdb-assigned kube-system pod present: bar",
            pdbs=(budget("kube-system", {"k8s-app": "foo"}),),
        ),
        Case(
            "kube-system PDB with default namespace pod",
            [pod("rc", owner="ReplicationController", labels={"k8s-app": "bar"})],
            "",
            pdbs=(budget("kube-system", {"k8s-app": "bar"}),),
        ),
        Case(
            "default namespace PDB with matching labels kube-system pod",
            [system_rc],
            "non-pdb-assigned kube-system pod present: bar",
            pdbs=(budget("shop", {"k8s-app": "bar"}),),
        ),
        Case(
            "pod with safe-to-evict=on-completion annotation",
            [
                pod(
                    "job",
                    owner="Job",
                    annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "on-completion"},
                )
            ],
            "waited for until it completes",
        ),
        # core/scaledown/eligibility/eligibility_test.go TestFilterOutUnremovable
        Case("regular node stays", [], "", nodes=[node(cpu="1", memory="10")]),
        Case(
            "recently deleted node is filtered out",
            [],
            "cluster-autoscaler is deleting it (taint ToBeDeletedByClusterAutoscaler)",
            nodes=[node(cpu="1", memory="10", taints=(("ToBeDeletedByClusterAutoscaler", "NoSchedule"),))],
        ),
        Case(
            "marked no scale down is filtered out",
            [],
            "annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true",
            nodes=[
                node(
                    cpu="1",
                    memory="10",
                    annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"},
                )
            ],
        ),
        Case(
            "highly utilized node is filtered out",
            [pod("bigpod", cpu="600m")],
            "cpu requested is 60%",
            nodes=[node(cpu="1", memory="10")],
        ),
        Case(
            "underutilized node stays", [pod("smallpod", cpu="100m")], "", nodes=[node(cpu="1", memory="10")]
        ),
        Case(
            "node is filtered out if utilization can't be calculated",
            [pod("smallpod", cpu="100m")],
            "utilisation cannot be computed",
            nodes=[node(cpu="0", memory="0")],
        ),
        Case(
            "unready node stays",
            [],
            "not Ready",
            nodes=[node(cpu="1", memory="10", ready="False")],
            difference=NOT_READY,
        ),
        Case(
            "high utilization daemonsets node is filtered out, when IgnoreDaemonSets is disabled",
            [pod("smallpod", cpu="100m"), pod("ds", owner="DaemonSet", cpu="500m")],
            "cpu requested is 60%",
            nodes=[node(cpu="1", memory="10")],
        ),
        Case(
            "high utilization daemonsets node stays",
            [pod("smallpod", cpu="100m"), pod("ds", owner="DaemonSet", cpu="500m")],
            "",
            nodes=[node(cpu="1", memory="10")],
            settings=ignore_ds,
        ),
        Case(
            "only daemonsets pods on this node (threshold=0)",
            [pod("ds", owner="DaemonSet", cpu="500m")],
            "",
            nodes=[node(cpu="1", memory="10")],
            settings=ConsolidationSettings(
                rules=ScaleDownRules(utilization_threshold=0, ignore_daemonsets_utilization=True)
            ),
        ),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_cluster_autoscalers_scale_down_cases(case: Case) -> None:
    got = verdict(case.nodes, case.pods, case.pdbs, case.settings)
    if case.want:
        assert case.want in got, got
    else:
        assert got == ""


def test_every_difference_from_cluster_autoscaler_is_in_the_documented_table() -> None:
    from pathlib import Path

    table = (Path(__file__).parents[4] / "docs" / "cluster-autoscaler.md").read_text()
    differences = {c.difference for c in _cases() if c.difference}
    assert differences  # the table has some, and each is written down
    for difference in differences:
        assert difference in table, difference

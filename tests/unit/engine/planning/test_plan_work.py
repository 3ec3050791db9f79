"""How much work a plan does at scale: every pod classified once, victims ranked only when a pool
keeps some of its nodes, and the plain drain's rules asked only about the pods they can refuse.

Pure: plans over built snapshots, with the classifier and the victim ranking counted.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from engine.domain import model
from engine.domain.model import PodInfo
from engine.domain.operation import OpKind, Target
from engine.drain import filters
from engine.planning import preflight
from engine.planning.preflight import ClusterSnapshot, plan_operation
from engine.pools import victims
from engine.pools.base import Pool
from tests import builders

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
NODES = tuple(f"w-{i}" for i in range(4))


def snapshot(pods: list[PodInfo]) -> ClusterSnapshot:
    pools = (
        Pool(name="a", provider="labels", desired=2, nodes=NODES[:2]),
        Pool(name="b", provider="labels", desired=2, nodes=NODES[2:]),
    )
    return ClusterSnapshot(
        cluster="dev",
        pools=pools,
        nodes=tuple(builders.node(n, pool="a" if n in NODES[:2] else "b") for n in NODES),
        pods=tuple(pods),
        pdbs=(),
        daemonset_keys=frozenset({f"{builders.NAMESPACE}/{builders.DS.name}"}),
    )


def mixed_pods() -> list[PodInfo]:
    """Per node: replicas, a bare pod, a DaemonSet pod, an orphaned DaemonSet pod, an opted-out
    pod, one with emptyDir data and a finished one."""
    pods = []
    for n in NODES:
        pods += builders.pods_on(n, 5)
        pods.append(builders.pod(f"{n}-bare", node=n, controller=None))
        pods.append(builders.pod(f"{n}-agent", node=n, controller=builders.DS))
        pods.append(builders.pod(f"{n}-orphan", node=n, controller=builders.owner("DaemonSet", "gone")))
        pods.append(builders.pod(f"{n}-keep", node=n, annotations={model.SAFE_TO_EVICT_ANNOTATION: "false"}))
        pods.append(builders.pod(f"{n}-cache", node=n, has_empty_dir=True))
        pods.append(builders.pod(f"{n}-done", node=n, phase="Succeeded"))
    return pods


@pytest.fixture
def classified(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods `filters.classify` is asked about, in order (the plan's and the force scope's calls)."""
    seen: list[str] = []
    real = filters.classify

    def counting(pod: PodInfo, ctx: filters.DrainContext, chain: object = None) -> filters.Verdict:
        seen.append(pod.key)
        return real(pod, ctx, chain)  # type: ignore[arg-type]

    monkeypatch.setattr(filters, "classify", counting)
    return seen


def test_a_zero_scale_classifies_each_ordinary_pod_once(classified: list[str]) -> None:
    pods = [p for n in NODES for p in builders.pods_on(n, 25)]
    plan = plan_operation(OpKind.ZERO, Target(cluster="dev"), snapshot(pods), now=NOW)
    assert plan.force_phase and plan.force_scope is not None
    assert sorted(classified) == sorted(p.key for p in pods)


def test_a_forced_zero_scale_classifies_again_only_the_pods_a_plain_drain_may_refuse(
    classified: list[str],
) -> None:
    pods = mixed_pods()
    plan = plan_operation(OpKind.ZERO, Target(cluster="dev"), snapshot(pods), now=NOW)
    again = [key for key, n in itertools.groupby(sorted(classified)) if len(list(n)) > 1]
    assert again == sorted(p.key for p in pods if filters.may_refuse(p))
    assert plan.force_scope is not None
    forced = {p.pod for p in plan.force_scope.pods}
    assert {f"{builders.NAMESPACE}/{n}-bare" for n in NODES} <= forced
    assert {f"{builders.NAMESPACE}/{n}-orphan" for n in NODES} <= forced
    assert not any(key.endswith(("-cache", "-agent", "-done")) for key in forced)


def test_victims_are_not_ranked_when_every_node_of_the_pool_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    ranked: list[int] = []
    real = victims.choose_victims

    def counting(*args: object, **kwargs: object) -> list[str]:
        ranked.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(victims, "choose_victims", counting)
    snap = snapshot(mixed_pods())
    plan = plan_operation(OpKind.ZERO, Target(cluster="dev"), snap, now=NOW)
    assert plan.nodes == NODES and ranked == []
    plan = plan_operation(OpKind.SCALE, Target(cluster="dev", pools=("a",), size=1), snap, now=NOW)
    assert len(plan.nodes) == 1 and ranked == [1]


def test_a_pod_no_plain_drain_rule_can_refuse_is_never_refused_by_it() -> None:
    """`may_refuse` is a necessary condition of the plain drain's refusals, whatever the phase."""
    pods = [
        *mixed_pods(),
        builders.pod("gone-long-ago", deletion_timestamp=NOW - timedelta(hours=1)),
        builders.pod("mirror", annotations={model.MIRROR_ANNOTATION: "x"}, controller=None),
        builders.pod("skip", labels={model.CAPI_DRAIN_LABEL: "skip"}),
        builders.pod("critical", priority_class="system-node-critical"),
    ]
    for opt_outs_wait in (False, True):
        ctx = filters.DrainContext(
            options=filters.plain_drain(opt_outs_wait=opt_outs_wait),
            now=NOW,
            daemonset_keys=snapshot([]).daemonset_keys,
        )
        refused = {p.key for p in pods if filters.classify(p, ctx).action is filters.Action.BLOCK}
        assert refused and all(filters.may_refuse(p) for p in pods if p.key in refused)
        assert {p.key for p in pods if not filters.may_refuse(p)}.isdisjoint(refused)


def test_the_plan_matches_each_pod_against_the_budgets_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = model.PdbIndex.for_pod

    def counting(self: model.PdbIndex, pod: PodInfo) -> list[model.PdbInfo]:
        asked.append(pod.key)
        return real(self, pod)

    monkeypatch.setattr(preflight.PdbIndex, "for_pod", counting)
    pods = [p for n in NODES for p in builders.pods_on(n, 3, labels={"app": "web"})]
    snap = snapshot(pods)
    snap = ClusterSnapshot(
        cluster=snap.cluster,
        pools=snap.pools,
        nodes=snap.nodes,
        pods=snap.pods,
        pdbs=(builders.pdb("web", match_labels={"app": "web"}),),
    )
    plan = plan_operation(OpKind.ZERO, Target(cluster="dev"), snap, now=NOW)
    assert plan.force_scope is not None and plan.force_scope.pdbs == (f"{builders.NAMESPACE}/web",)
    assert sorted(asked) == sorted(p.key for p in pods)

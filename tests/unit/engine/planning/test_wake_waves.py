"""The pure decisions of a wake in waves (engine.planning.wake_waves) and of the workloads' wake
order (engine.workloads.order).

Covers: which pools each wave wakes (configured waves, pools no wave names last, waves with no pool
in this wake dropped); the share of Ready nodes a wave needs; a wave done, waiting or timed out, and
what a timed-out wave names; which wave comes next; the thread's words; the wake-order annotation
(lower first, unannotated last, text that is no number ignored and named, its value cut), read
from a real sleep plan's live objects, and the sleep's reverse order.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from engine.domain.wake_waves import WakeWaves, WaveProgress, WaveSpec
from engine.planning import wake_waves as ww
from engine.workloads import (
    Decision,
    Outcome,
    WorkloadConfig,
    WorkloadPlan,
    WorkloadSnapshot,
    order,
    plan_sleep,
)
from engine.workloads.model import Kind, NamespaceInfo, WorkloadInfo

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
DEFAULT = timedelta(minutes=15)


def test_pools_wake_in_the_configured_waves_and_the_others_last() -> None:
    config = WakeWaves((WaveSpec(("system",)), WaveSpec(("data", "cache"), 0.5, 60.0)))
    waves = ww.plan_waves(["apps", "cache", "data", "system", "batch"], config, default_timeout=DEFAULT)
    assert [w.pools for w in waves] == [("system",), ("data", "cache"), ("apps", "batch")]
    assert [(w.ready_share, w.timeout_seconds) for w in waves] == [(1.0, 900.0), (0.5, 60.0), (1.0, 900.0)]


def test_a_wave_with_none_of_the_woken_pools_is_left_out() -> None:
    config = WakeWaves((WaveSpec(("system",)), WaveSpec(("data",))))
    waves = ww.plan_waves(["data", "apps"], config, default_timeout=DEFAULT)
    assert [w.pools for w in waves] == [("data",), ("apps",)]
    assert [w.pools for w in ww.plan_waves(["data"], config, default_timeout=DEFAULT)] == [("data",)]


def test_without_waves_every_pool_is_one_wave() -> None:
    waves = ww.plan_waves(["b", "a"], WakeWaves(), default_timeout=DEFAULT)
    assert waves == (WaveProgress(pools=("b", "a"), timeout_seconds=900.0),)


@pytest.mark.parametrize(
    ("share", "wanted", "needed"),
    [(1.0, 4, 4), (0.5, 4, 2), (0.5, 3, 2), (0.1, 3, 1), (0.01, 1, 1), (1.0, 0, 0), (0.75, 4, 3)],
)
def test_the_share_of_ready_nodes_a_wave_needs(share: float, wanted: int, needed: int) -> None:
    assert ww.needed(share, wanted) == needed


def wave(
    *pools: str, share: float = 1.0, timeout: float = 60.0, started: datetime | None = T0
) -> WaveProgress:
    return WaveProgress(pools=pools, ready_share=share, timeout_seconds=timeout, started_at=started)


def test_a_wave_is_done_once_its_share_is_ready() -> None:
    pools = {"data": ww.PoolReadiness(1, 2, ("data-01: KubeletNotReady",)), "apps": ww.PoolReadiness(0, 3)}
    assert ww.look(wave("data"), pools, now=T0).outcome == ""
    seen = ww.look(wave("data", share=0.5), pools, now=T0)
    assert (seen.outcome, seen.ready, seen.wanted) == ("ready", 1, 2)


def test_a_wave_waits_for_pending_pods_of_a_demand_sized_pool() -> None:
    pools = {"gpu": ww.PoolReadiness(1, 1, (), pending_pods=2)}
    assert ww.look(wave("gpu"), pools, now=T0).outcome == ""


def test_a_wave_out_of_time_names_what_it_waited_for() -> None:
    pools = {
        "data": ww.PoolReadiness(0, 2, ("data-00: no Ready condition", "data: 1 node(s) not registered yet")),
        "cache": ww.PoolReadiness(1, 1),
    }
    waiting = ww.look(wave("data", "cache", timeout=60), pools, now=T0 + timedelta(seconds=59))
    assert waiting.outcome == ""
    seen = ww.look(wave("data", "cache", timeout=60), pools, now=T0 + timedelta(seconds=60))
    assert seen.outcome == "timed_out"
    assert seen.waited_for == (
        "pool data: nodes Ready 0/2 (data-00: no Ready condition; data: 1 node(s) not registered yet)",
    )


def test_a_wave_not_started_does_not_time_out() -> None:
    seen = ww.look(wave("data", started=None), {"data": ww.PoolReadiness(0, 1)}, now=T0 + timedelta(days=1))
    assert seen.outcome == ""


def test_the_next_wave_and_the_last() -> None:
    waves = (wave("a"), wave("b"), wave("c"))
    assert ww.next_wave(waves, 0) == 1
    assert ww.next_wave(waves, 1) == 2
    assert ww.next_wave(waves, 2) is None


def test_the_thread_says_how_each_wave_ended_and_what_comes_next() -> None:
    seen = ww.WaveLook(0, 1, 0, "timed_out", ("pool data: nodes Ready 0/1 (data-00: no Ready condition)",))
    first = ww.ended(wave("system"), ww.WaveLook(2, 2, 0, "ready"), now=T0 + timedelta(seconds=4))
    second = ww.ended(wave("data"), seen, now=T0 + timedelta(seconds=60))
    waves = (first, second, wave("apps", started=None))
    assert ww.ended_text(waves, 0, now=T0 + timedelta(seconds=4)) == (
        "Wave 1/3 (system): 2/2 nodes Ready after 4s; waking wave 2/3 (data)"
    )
    assert ww.ended_text(waves, 1, now=T0 + timedelta(seconds=60)) == (
        "Wave 2/3 (data) timed out after 1m00s waiting for pool data: nodes Ready 0/1 "
        "(data-00: no Ready condition); waking wave 3/3 (apps)"
    )
    assert ww.timed_out(waves) == (
        "Wave 2/3 (data) timed out: pool data: nodes Ready 0/1 (data-00: no Ready condition)",
    )
    assert ww.summary_text(waves[:2]).startswith(
        "waves: 1 (system) 2/2 Ready in 4s; 2 (data) timed out after 1m"
    )


def test_workloads_wake_lowest_order_first_and_unannotated_last() -> None:
    pairs = [
        ("Deployment/shop/web", 20),
        ("StatefulSet/shop/db", 10),
        ("Deployment/shop/worker", None),
        ("Deployment/shop/api", 20),
        ("Deployment/kube/dns", -5),
    ]
    groups = order.wake_groups(pairs)
    assert [(g.label, g.keys) for g in groups] == [
        ("-5", ("Deployment/kube/dns",)),
        ("10", ("StatefulSet/shop/db",)),
        ("20", ("Deployment/shop/api", "Deployment/shop/web")),
        ("last", ("Deployment/shop/worker",)),
    ]
    assert order.next_group(groups, ["-5", "10"]) == groups[2]
    assert order.next_group(groups, [g.label for g in groups]) is None
    assert order.sleep_sequence(pairs) == (
        "Deployment/shop/worker",
        "Deployment/shop/api",
        "Deployment/shop/web",
        "StatefulSet/shop/db",
        "Deployment/kube/dns",
    )


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("10", 10), (" 7 ", 7), ("-3", -3), ("1e3", None), ("ten", None), ("", None), ("1234567890", None)],
)
def test_the_wake_order_annotation_is_a_whole_number_or_ignored(value: str, parsed: int | None) -> None:
    annotations = {order.WAKE_ORDER_ANNOTATION: value}
    assert order.wake_order(annotations) == parsed
    assert bool(order.invalid_order(annotations)) is (parsed is None)


def test_without_any_order_a_wake_restores_everything_at_once() -> None:
    assert not order.is_ordered(order.wake_groups([("a", None), ("b", None)]))
    assert order.is_ordered(order.wake_groups([("a", None), ("b", 1)]))


def _sleep_plan(*annotated: tuple[str, str | None]) -> WorkloadPlan:
    """The real sleep plan of Deployments in namespace shop, each with its wake-order annotation."""
    workloads = tuple(
        WorkloadInfo(
            Kind.DEPLOYMENT,
            "shop",
            name,
            2,
            annotations={order.WAKE_ORDER_ANNOTATION: value} if value is not None else {},
        )
        for name, value in annotated
    )
    snapshot = WorkloadSnapshot(namespaces=(NamespaceInfo("shop"),), workloads=workloads)
    return plan_sleep(snapshot, now=T0, config=WorkloadConfig(namespaces=("shop",)))


def test_a_plan_is_grouped_by_its_live_objects_and_slept_in_reverse() -> None:
    plan = _sleep_plan(("api", "20"), ("db", "10"), ("web", None), ("odd", "1.5"), ("big", "9" * 400))
    assert [(g.label, g.keys) for g in order.plan_groups(plan)] == [
        ("10", ("Deployment/shop/db",)),
        ("20", ("Deployment/shop/api",)),
        ("last", ("Deployment/shop/big", "Deployment/shop/odd", "Deployment/shop/web")),
    ]
    slept = [d.key for d in order.in_sleep_order(plan).decisions if d.key.startswith("Deployment/")]
    assert slept == [
        "Deployment/shop/big",
        "Deployment/shop/odd",
        "Deployment/shop/web",
        "Deployment/shop/api",
        "Deployment/shop/db",
    ]
    notes = {n.key: n.reason for n in order.invalid_orders(plan)}
    assert set(notes) == {"Deployment/shop/big", "Deployment/shop/odd"}
    assert notes["Deployment/shop/odd"] == (
        "scalebot.io/wake-order is not a whole number ('1.5'); wakes with the unordered, last"
    )
    assert "9" * 40 in notes["Deployment/shop/big"] and "9" * 41 not in notes["Deployment/shop/big"]


def test_gitops_owners_pause_first_and_resume_last() -> None:
    plan = _sleep_plan(("api", "20"), ("db", "10"))
    owner = Decision("change", Outcome("Kustomization/flux-system/shop", "paused for the sleep"))
    with_owner = replace(plan, decisions=(owner, *plan.decisions))
    slept = [d.key for d in order.in_sleep_order(with_owner).decisions]
    assert slept[0] == "Kustomization/flux-system/shop", "paused before the workloads it applies"
    assert slept.index("Deployment/shop/api") < slept.index("Deployment/shop/db")
    groups = order.plan_groups(with_owner)
    assert groups[-1] == order.OrderGroup("last", ("Kustomization/flux-system/shop",))


def test_a_wave_that_waits_for_its_workloads_is_done_only_once_they_are_back() -> None:
    pools = {"system": ww.PoolReadiness(2, 2)}
    missing = (("Deployment/kube-dns/coredns", "0/2 replicas available"),)
    waiting = replace(wave("system"), workloads_available=True)
    assert ww.look(waiting, pools, now=T0, workloads_not_back=missing).outcome == ""
    assert ww.look(waiting, pools, now=T0).outcome == "ready"
    assert ww.look(wave("system"), pools, now=T0, workloads_not_back=missing).outcome == "ready", (
        "a wave that does not wait for its workloads ignores them"
    )
    late = ww.look(waiting, pools, now=T0 + timedelta(seconds=60), workloads_not_back=missing)
    assert (late.outcome, late.waited_for) == (
        "timed_out",
        ("Deployment/kube-dns/coredns: 0/2 replicas available",),
    )
    seen = ww.look(waiting, pools, now=T0, workloads_not_back=missing)
    assert ww.status_text((waiting, wave("apps")), 0, seen, missing) == (
        "Wave 1/2 (system): 2/2 nodes Ready; waiting for its workloads: Deployment/kube-dns/coredns"
    )

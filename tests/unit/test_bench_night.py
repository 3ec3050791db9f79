"""The realistic night's pure parts: the cluster-autoscaler / kube-downscaler model
(tests/bench/night_model.py) and the downscaler's per-object changes (tests/bench/downscaler.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.bench import downscaler, night_model
from tests.bench.night import Sample, workload_asleep, workload_available

M = night_model.Measured
CA = night_model.AutoscalerDefaults()
CLOUD = night_model.CloudAssumptions()


def test_the_model_uses_the_documented_defaults() -> None:
    # cluster-autoscaler 1.35+ config/flags/flags.go and config/const.go; Karpenter v1.14.1;
    # py-kube-downscaler v26.4.0 kube_downscaler/cmd.py --interval.
    assert (CA.scan_interval, CA.scale_down_unneeded_time, CA.scale_down_delay_after_add) == (10, 600, 600)
    assert CA.scale_down_delay_after_delete == 0  # flags.go: 0 (the FAQ's "scan-interval" is stale)
    assert CA.max_scale_down_parallelism == 10 and CA.node_delete_delay_after_taint == 5
    assert CA.max_node_provision_time == 900 and CA.parallel_scale_up is False
    assert CA.frequent_loops is True  # the default since 1.35
    assert (
        night_model.TUNED_CA.scale_down_unneeded_time,
        night_model.TUNED_CA.max_scale_down_parallelism,
    ) == (
        60,
        100,
    )
    k = night_model.KarpenterDefaults()
    assert (k.consolidate_after, k.budget_percent, k.polling_period, k.validation_delay) == (0, 10, 10, 15)
    assert night_model.DownscalerDefaults().interval_seconds == 30


@pytest.mark.parametrize(("nodes", "batches"), [(1, 1), (10, 1), (11, 2), (100, 10), (1000, 100)])
def test_empty_nodes_go_in_batches_of_the_parallelism(nodes: int, batches: int) -> None:
    assert night_model.deletion_batches(nodes, CA) == batches


def test_a_batch_waits_until_the_one_in_flight_frees_its_places() -> None:
    # The loop after a productive one (2 s) finds the batch still in flight (taint 5 s + call 2 s):
    # it deletes nothing, so the next waits the scan interval: 2 + 2 + 10.
    assert night_model.batch_period(CA, CLOUD) == 14.0
    slow = replace(CLOUD, delete_call_seconds=30.0)
    assert night_model.batch_period(CA, slow) == 38.0  # 35 s in flight: two idle loops more
    assert night_model.batch_period(replace(CA, scale_down_delay_after_delete=60.0), CLOUD) == 62.0
    quick = replace(CA, node_delete_delay_after_taint=0.0)
    assert night_model.batch_period(quick, CLOUD) == 2.0  # free again by the next loop: back to back
    # Before 1.35 (no frequent loops) a ticker: one batch per scan interval.
    assert night_model.batch_period(replace(CA, frequent_loops=False), CLOUD) == 10.0


def test_the_night_is_the_measured_parts_plus_the_flags_plus_the_cloud() -> None:
    t = night_model.night(nodes=100, measured=M(4.0, 20.0))
    assert t.of("measured") == 24.0
    # half a downscaler interval + half a scan + unneeded time + 9 batch gaps + taint + delete call
    assert t.of("flag") == pytest.approx(15 + 5 + 600 + 9 * 14 + 5 + 2)
    assert t.of("assumption") == CLOUD.node_gone_seconds
    assert t.total == pytest.approx(24 + 753 + 60)


def test_at_worst_each_loop_is_just_missed() -> None:
    typical = night_model.night(nodes=100, measured=M(4.0, 20.0))
    worst = night_model.night(nodes=100, measured=M(4.0, 20.0), anchor=night_model.Anchor(worst=True))
    assert worst.total - typical.total == pytest.approx(15 + 5)


def test_a_thousand_nodes_take_ninety_more_batches() -> None:
    small = night_model.night(nodes=100, measured=M(0.0, 0.0))
    full = night_model.night(nodes=1000, measured=M(0.0, 0.0))
    assert full.total - small.total == pytest.approx(90 * 14)


def test_tuned_cluster_autoscaler_waits_a_minute_and_deletes_a_hundred_at_a_time() -> None:
    tuned = night_model.Anchor(ca=night_model.TUNED_CA)
    t = night_model.night(nodes=1000, measured=M(0.0, 0.0), anchor=tuned)
    default = night_model.night(nodes=1000, measured=M(0.0, 0.0))
    assert t.of("flag") == pytest.approx(15 + 5 + 60 + 9 * 14 + 5 + 2)
    assert default.total - t.total == pytest.approx(540 + 90 * 14)


def test_karpenter_removes_a_tenth_of_each_pool_per_round() -> None:
    k = night_model.KarpenterDefaults()
    assert night_model.karpenter_rounds(1000, 10, k) == 10  # 100 a pool, 10 % = 10 a round
    assert night_model.karpenter_rounds(2, 1, k) == 2  # 10 % of 2 rounds up to 1
    assert night_model.karpenter_rounds(5, 1, replace(k, budget_percent=100.0)) == 1
    # validation 15 s, then the terminating nodes (2 s call + 60 s gone) hold the budget: 7 polls
    assert night_model.karpenter_round_period(k, CLOUD) == 15 + 70
    t = night_model.karpenter_night(nodes=1000, pools=10, measured=M(4.0, 20.0))
    assert t.of("measured") == 24.0
    assert t.of("flag") == pytest.approx(15 + 5 + 9 * 85 + 15 + 2)
    assert t.of("assumption") == CLOUD.node_gone_seconds


def test_karpenter_provisions_every_pool_in_one_batch() -> None:
    t = night_model.karpenter_morning(measured=M(3.0, 30.0))
    assert t.of("measured") == 33.0
    assert t.of("flag") == pytest.approx(15 + 1)
    assert t.of("assumption") == CLOUD.provision_seconds


def test_the_morning_grows_one_node_group_per_loop_then_waits_for_the_cloud() -> None:
    t = night_model.morning(pools=4, measured=M(3.0, 30.0))
    assert t.of("measured") == 33.0
    # half a downscaler interval + half a loop (an unschedulable pod starts one) + 3 productive loops
    assert t.of("flag") == pytest.approx(15 + 1 + 3 * 2)
    assert t.of("assumption") == CLOUD.provision_seconds
    parallel = night_model.morning(
        pools=4, measured=M(3.0, 30.0), anchor=night_model.Anchor(ca=replace(CA, parallel_scale_up=True))
    )
    assert t.total - parallel.total == pytest.approx(6.0)
    ticker = night_model.morning(
        pools=4, measured=M(3.0, 30.0), anchor=night_model.Anchor(ca=replace(CA, frequent_loops=False))
    )
    assert ticker.of("flag") == pytest.approx(15 + 5 + 3 * 10)


def test_provisioning_is_capped_by_the_max_node_provision_time() -> None:
    slow = replace(CLOUD, provision_seconds=3600.0)
    t = night_model.morning(pools=1, measured=M(0.0, 0.0), anchor=night_model.Anchor(cloud=slow))
    assert t.of("assumption") == CA.max_node_provision_time


def test_scalebot_gets_the_same_cloud_times_added() -> None:
    assert night_model.scalebot_in_the_cloud(zero_nodes_seconds=50.0, available_seconds=40.0) == (
        50.0 + CLOUD.node_gone_seconds,
        40.0 + CLOUD.provision_seconds,
    )


def test_every_phase_is_finite_and_not_negative() -> None:
    for t in (
        night_model.night(nodes=1, measured=M(0.0, 0.0), anchor=night_model.Anchor(worst=True)),
        night_model.morning(pools=0, measured=M(0.0, 0.0)),
        night_model.karpenter_night(
            nodes=1, pools=1, measured=M(0.0, 0.0), anchor=night_model.Anchor(worst=True)
        ),
        night_model.karpenter_morning(measured=M(0.0, 0.0)),
    ):
        assert t.phases and all(math.isfinite(p.seconds) and p.seconds >= 0 for p in t.phases)


# -- the downscaler's changes ----------------------------------------------------------------------------


def _deployment(replicas: int, annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "metadata": {
            "name": "w1",
            "namespace": "ns",
            "annotations": annotations or {},
            "resourceVersion": "7",
        },
        "spec": {"replicas": replicas, "template": {}},
    }


def test_sleep_keeps_the_original_replicas_in_the_annotation_and_sets_zero() -> None:
    changed = downscaler.sleep_change(_deployment(30), "deployments")
    assert changed is not None
    assert changed["spec"]["replicas"] == 0
    assert changed["metadata"]["annotations"][downscaler.ORIGINAL_REPLICAS_ANNOTATION] == "30"
    assert changed["metadata"]["resourceVersion"] == "7"  # the whole object, as pykube's update sends it
    assert downscaler.sleep_change(_deployment(0), "deployments") is None


def test_wake_restores_the_annotation_and_removes_it() -> None:
    asleep = downscaler.sleep_change(_deployment(30), "deployments")
    assert asleep is not None
    woken = downscaler.wake_change(asleep, "deployments")
    assert woken is not None
    assert woken["spec"]["replicas"] == 30
    assert woken["metadata"]["annotations"][downscaler.ORIGINAL_REPLICAS_ANNOTATION] is None
    assert downscaler.wake_change(_deployment(30), "deployments") is None  # never put to sleep


def test_cronjobs_are_suspended_and_unsuspended() -> None:
    cron = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"schedule": "0 0 1 1 *", "suspend": False}}
    asleep = downscaler.sleep_change(cron, "cronjobs")
    assert asleep is not None and asleep["spec"]["suspend"] is True
    assert asleep["metadata"]["annotations"][downscaler.ORIGINAL_REPLICAS_ANNOTATION] == "1"
    woken = downscaler.wake_change(asleep, "cronjobs")
    assert woken is not None and woken["spec"]["suspend"] is False
    assert downscaler.sleep_change(asleep, "cronjobs") is None


# -- what the observer counts ---------------------------------------------------------------------------


def test_available_means_the_original_replicas_all_ready_and_observed() -> None:
    obj = {
        "metadata": {"generation": 3},
        "spec": {"replicas": 30},
        "status": {"observedGeneration": 3, "replicas": 30, "readyReplicas": 30, "availableReplicas": 30},
    }
    assert workload_available(obj, 30)
    assert not workload_available(obj, 29)  # not its original size
    assert not workload_available({**obj, "status": {**obj["status"], "observedGeneration": 2}}, 30)
    assert not workload_available({**obj, "status": {**obj["status"], "availableReplicas": 29}}, 30)
    assert not workload_asleep(obj)
    assert workload_asleep({"spec": {"replicas": 0}, "status": {"replicas": 0}})
    assert not workload_asleep({"spec": {"replicas": 0}, "status": {"replicas": 3}})


def test_all_back_needs_every_node_workload_cronjob_and_the_daemonset() -> None:
    back = Sample(0.0, 4, 4, 10, 0, 10, 2, 2, True, {})
    assert back.all_back(4)
    assert not back.all_back(5)
    assert not replace(back, available=9).all_back(4)
    assert not replace(back, unsuspended=1).all_back(4)
    assert not replace(back, daemonset_ready=False).all_back(4)
    assert not back.all_asleep()
    assert Sample(0.0, 4, 4, 0, 10, 10, 0, 2, True, {}).all_asleep()


def test_each_retry_cycle_waits_for_the_next_tick() -> None:
    once = night_model.morning(pools=1, measured=M(2.0, 0.0))
    thrice = night_model.morning(pools=1, measured=M(2.0, 0.0, cycles=3))
    assert thrice.total - once.total == pytest.approx(2 * 30.0)

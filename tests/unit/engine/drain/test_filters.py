"""Pod classification (engine.drain.filters).

Covers: each filter's verdict and reason text (kubectl's for refusals, Cluster API's for warnings),
the presets, which filter wins for a pod matching several rules, the skip-deleted window (option and
the 1 s rule for unreachable nodes), drain order, custom filter chains, sorting and blocked_nodes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.domain import model
from engine.domain.model import PodInfo
from engine.drain import filters
from engine.drain.filters import Action, DrainContext, DrainOptions, Verdict
from tests import builders
from tests.builders import DS, typed_pod
from tests.builders import pod as make_pod

NOW = datetime(2026, 3, 27, 19, 0, 5, tzinfo=UTC)
KUBECTL = DrainOptions.kubectl()
KUBECTL_ALL = DrainOptions.kubectl(force=True, ignore_daemonsets=True, delete_emptydir_data=True)
MACHINE = DrainOptions.machine()


def make_ctx(
    options: DrainOptions = MACHINE,
    *,
    daemonsets: frozenset[str] = frozenset({"kube-system/fluentd"}),
    unreachable: frozenset[str] = frozenset(),
) -> DrainContext:
    return DrainContext(options=options, now=NOW, daemonset_keys=daemonsets, unreachable_nodes=unreachable)


def verdict(pod: PodInfo, options: DrainOptions = MACHINE, **ctx_kwargs: Any) -> Verdict:
    return filters.classify(pod, make_ctx(options, **ctx_kwargs))


def ds_pod(**kwargs: Any) -> PodInfo:
    return make_pod("fluentd-x7k2p", namespace="kube-system", controller=DS, **kwargs)


def bare_pod(**kwargs: Any) -> PodInfo:
    return make_pod("debug", namespace="ops", controller=None, **kwargs)


# --- presets -------------------------------------------------------------------------------------


def test_kubectl_preset_has_kubectl_defaults_with_every_override_off() -> None:
    assert DrainOptions.kubectl() == DrainOptions(
        force=False, ignore_daemonsets=False, delete_emptydir_data=False
    )


def test_kubectl_preset_exposes_flags_with_kubectl_names() -> None:
    options = DrainOptions.kubectl(
        force=True,
        ignore_daemonsets=True,
        delete_emptydir_data=True,
        grace_period_seconds=10,
        skip_wait_for_delete_timeout_seconds=60,
    )
    assert (options.force, options.ignore_daemonsets, options.delete_emptydir_data) == (True, True, True)
    assert (options.grace_period_seconds, options.skip_wait_for_delete_timeout_seconds) == (10, 60)
    assert not options.opt_outs_wait


def test_machine_preset_turns_force_daemonsets_and_emptydir_on() -> None:
    options = DrainOptions.machine()
    assert (options.force, options.ignore_daemonsets, options.delete_emptydir_data) == (True, True, True)
    assert not options.opt_outs_wait
    assert options.skip_wait_for_delete_timeout_seconds == 0
    assert DrainOptions.machine(opt_outs_wait=True).opt_outs_wait


def test_dataclass_defaults_match_the_brief() -> None:
    options = DrainOptions()
    assert (options.force, options.ignore_daemonsets, options.delete_emptydir_data) == (False, True, True)
    assert (options.opt_outs_wait, options.grace_period_seconds) == (False, None)


def test_action_values_are_stable_strings() -> None:
    assert [a.value for a in Action] == ["evict", "delete", "skip", "block", "wait"]


# --- default eviction and drain order ------------------------------------------------------------


def test_replicated_pod_is_evicted_with_order_zero_and_no_warning() -> None:
    assert verdict(make_pod()) == Verdict(Action.EVICT, "", 0)
    assert verdict(make_pod(), KUBECTL) == Verdict(Action.EVICT, "", 0)


@pytest.mark.parametrize("priority_class", ["system-cluster-critical", "system-node-critical"])
def test_system_critical_pod_is_evicted_after_the_others(priority_class: str) -> None:
    assert verdict(make_pod(priority_class=priority_class)) == Verdict(Action.EVICT, "", 1)


def test_other_priority_class_keeps_order_zero() -> None:
    assert verdict(make_pod(priority_class="high-priority")).order == 0


# --- skip-deleted --------------------------------------------------------------------------------


def test_terminating_pod_is_evicted_again_never_skipped_when_skip_wait_is_off() -> None:
    pod = make_pod(deletion_timestamp=NOW - timedelta(hours=5))
    assert verdict(pod).action is Action.EVICT


def test_pod_deleted_longer_than_skip_wait_timeout_is_skipped_with_kubectl_text() -> None:
    options = DrainOptions.kubectl(skip_wait_for_delete_timeout_seconds=60)
    pod = make_pod(deletion_timestamp=NOW - timedelta(seconds=61))
    assert verdict(pod, options) == Verdict(
        Action.SKIP, 'pod "web-0" has DeletionTimestamp older than 60 seconds, skipping'
    )


@pytest.mark.parametrize("age", [timedelta(seconds=60), timedelta(seconds=60.9), timedelta(seconds=1)])
def test_skip_wait_needs_strictly_more_whole_seconds_than_the_timeout(age: timedelta) -> None:
    # Upstream: int(time.Since(ts).Seconds()) > N, so 60.9 s is still 60 and not skipped.
    options = DrainOptions.kubectl(skip_wait_for_delete_timeout_seconds=60)
    assert verdict(make_pod(deletion_timestamp=NOW - age), options).action is Action.EVICT


def test_unreachable_node_skips_pods_deleted_more_than_one_second_ago() -> None:
    pod = make_pod(deletion_timestamp=NOW - timedelta(seconds=2))
    got = verdict(pod, unreachable=frozenset({"w-1"}))
    assert got == Verdict(Action.SKIP, 'pod "web-0" has DeletionTimestamp older than 1 seconds, skipping')


def test_unreachable_node_rule_overrides_a_longer_skip_wait_option() -> None:
    options = DrainOptions.kubectl(skip_wait_for_delete_timeout_seconds=300)
    pod = make_pod(deletion_timestamp=NOW - timedelta(seconds=5))
    assert verdict(pod, options, unreachable=frozenset({"w-1"})).action is Action.SKIP


def test_unreachable_node_still_waits_for_a_pod_deleted_just_now() -> None:
    pod = make_pod(deletion_timestamp=NOW - timedelta(milliseconds=1500))
    assert verdict(pod, unreachable=frozenset({"w-1"})).action is Action.EVICT


def test_unreachable_rule_applies_only_to_pods_on_the_unreachable_node() -> None:
    pod = make_pod(deletion_timestamp=NOW - timedelta(seconds=30), node_name="w-2")
    assert verdict(pod, unreachable=frozenset({"w-1"})).action is Action.EVICT


def test_skip_deleted_wins_over_a_refusal() -> None:
    # kubectl runs skip-deleted first: a long-terminating bare pod no longer refuses the node.
    options = DrainOptions.kubectl(skip_wait_for_delete_timeout_seconds=10)
    pod = bare_pod(deletion_timestamp=NOW - timedelta(minutes=5))
    assert verdict(pod, options).action is Action.SKIP


def test_pod_without_deletion_timestamp_is_not_skipped_on_unreachable_node() -> None:
    assert verdict(make_pod(), unreachable=frozenset({"w-1"})).action is Action.EVICT


# --- DaemonSet pods ------------------------------------------------------------------------------


def test_live_daemonset_pod_is_skipped_with_capi_text() -> None:
    assert verdict(ds_pod()) == Verdict(Action.SKIP, "ignoring DaemonSet-managed Pod")


def test_live_daemonset_pod_blocks_without_ignore_daemonsets() -> None:
    assert verdict(ds_pod(), KUBECTL) == Verdict(
        Action.BLOCK, "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
    )


def test_live_daemonset_pod_blocks_without_ignore_daemonsets_even_with_force() -> None:
    assert verdict(ds_pod(), DrainOptions.kubectl(force=True)).action is Action.BLOCK


def test_orphaned_daemonset_pod_blocks_without_force_with_the_api_not_found_text() -> None:
    got = verdict(ds_pod(), DrainOptions.kubectl(ignore_daemonsets=True), daemonsets=frozenset())
    assert got == Verdict(Action.BLOCK, 'daemonsets.apps "fluentd" not found')


def test_orphaned_daemonset_pod_is_evicted_by_machine_preset_with_capi_warning() -> None:
    got = verdict(ds_pod(), daemonsets=frozenset())
    assert got == Verdict(Action.EVICT, "evicting orphaned DaemonSet-managed Pod", 0)


def test_orphaned_daemonset_pod_is_evicted_with_force_in_kubectl_preset() -> None:
    got = verdict(ds_pod(), DrainOptions.kubectl(force=True), daemonsets=frozenset())
    assert got.action is Action.EVICT


def test_daemonset_is_matched_in_the_pods_namespace() -> None:
    # A DaemonSet of the same name in another namespace does not own this pod.
    got = verdict(ds_pod(), daemonsets=frozenset({"default/fluentd"}))
    assert got.reason == "evicting orphaned DaemonSet-managed Pod"


def test_orphaned_daemonset_pod_with_force_still_needs_delete_emptydir_data() -> None:
    # kubectl keeps filtering after the orphan warning, so the local-storage refusal still applies.
    got = verdict(ds_pod(has_empty_dir=True), DrainOptions.kubectl(force=True), daemonsets=frozenset())
    assert got == Verdict(Action.BLOCK, "Pods with local storage (use --delete-emptydir-data to override)")


def test_finished_daemonset_pod_is_deleted_even_without_ignore_daemonsets() -> None:
    assert verdict(ds_pod(phase="Succeeded"), KUBECTL).action is Action.DELETE


# --- mirror pods ---------------------------------------------------------------------------------


def test_mirror_pod_is_skipped() -> None:
    pod = make_pod(
        "kube-apiserver-w-1", namespace="kube-system", annotations={model.MIRROR_ANNOTATION: "abc"}
    )
    assert verdict(pod, KUBECTL) == Verdict(Action.SKIP, filters.MIRROR_REASON)


def test_mirror_pod_is_skipped_even_without_controller_or_when_finished() -> None:
    annotations = {model.MIRROR_ANNOTATION: "abc"}
    assert verdict(bare_pod(annotations=annotations), KUBECTL).action is Action.SKIP
    assert verdict(bare_pod(annotations=annotations, phase="Failed"), KUBECTL).action is Action.SKIP


# --- local storage -------------------------------------------------------------------------------


def test_emptydir_pod_blocks_without_delete_emptydir_data() -> None:
    assert verdict(make_pod(has_empty_dir=True), KUBECTL) == Verdict(
        Action.BLOCK, "Pods with local storage (use --delete-emptydir-data to override)"
    )


def test_emptydir_pod_is_evicted_with_capi_warning_when_delete_emptydir_data() -> None:
    got = verdict(make_pod(has_empty_dir=True))
    assert got == Verdict(Action.EVICT, "evicting Pod with local storage", 0)


def test_memory_emptydir_counts_as_local_storage() -> None:
    raw = {
        "metadata": {"name": "cache-0", "namespace": "shop", "ownerReferences": [_rs_ref()]},
        "spec": {"nodeName": "w-1", "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]},
        "status": {"phase": "Running"},
    }
    assert verdict(typed_pod(raw), KUBECTL).action is Action.BLOCK


# --- unreplicated --------------------------------------------------------------------------------


def test_unreplicated_pod_blocks_without_force() -> None:
    assert verdict(bare_pod(), KUBECTL) == Verdict(
        Action.BLOCK, "Pods that declare no controller (use --force to override)"
    )


def test_unreplicated_pod_is_evicted_with_force_and_capi_warning() -> None:
    assert verdict(bare_pod()) == Verdict(Action.EVICT, "evicting Pod that has no controller", 0)
    assert verdict(bare_pod(), DrainOptions.kubectl(force=True)).action is Action.EVICT


def test_non_controller_owner_reference_does_not_count_as_controller() -> None:
    raw = {
        "metadata": {
            "name": "debug",
            "namespace": "ops",
            "ownerReferences": [{"kind": "ConfigMap", "name": "x", "uid": "u", "controller": False}],
        },
        "spec": {"nodeName": "w-1"},
        "status": {"phase": "Running"},
    }
    assert verdict(typed_pod(raw), KUBECTL).reason == filters.UNMANAGED_FATAL


def test_local_storage_refusal_wins_over_unreplicated_refusal() -> None:
    # kubectl: the local-storage filter runs first and its error stops the chain.
    assert verdict(bare_pod(has_empty_dir=True), KUBECTL).reason == filters.LOCAL_STORAGE_FATAL


def test_bare_pod_with_emptydir_under_force_only_still_blocks_on_local_storage() -> None:
    assert verdict(bare_pod(has_empty_dir=True), DrainOptions.kubectl(force=True)).reason == (
        filters.LOCAL_STORAGE_FATAL
    )


def test_capi_warnings_are_joined_in_filter_order() -> None:
    got = verdict(bare_pod(has_empty_dir=True))
    assert got.reason == "evicting Pod with local storage, evicting Pod that has no controller"


# --- finished pods -------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pod_is_deleted_without_eviction(phase: str) -> None:
    assert verdict(make_pod(phase=phase)) == Verdict(Action.DELETE, filters.FINISHED_REASON)


def test_finished_job_pod_with_emptydir_and_no_controller_is_deletable_with_no_flags() -> None:
    # engine-semantics §9 #13: deletable in every preset.
    pod = bare_pod(phase="Succeeded", has_empty_dir=True)
    for options in (KUBECTL, KUBECTL_ALL, MACHINE, DrainOptions.machine(opt_outs_wait=True)):
        assert verdict(pod, options).action is Action.DELETE


def test_finished_pod_ignores_opt_out_annotations() -> None:
    pod = make_pod(phase="Succeeded", annotations={model.SAFE_TO_EVICT_ANNOTATION: "false"})
    assert verdict(pod, KUBECTL).action is Action.DELETE
    assert verdict(pod, DrainOptions.machine(opt_outs_wait=True)).action is Action.DELETE


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown"])
def test_unfinished_phases_are_not_deleted(phase: str) -> None:
    assert verdict(make_pod(phase=phase)).action is Action.EVICT


# --- Cluster API drain label ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["skip", "Skip", "SKIP"])
def test_drain_label_skip_is_case_insensitive(value: str) -> None:
    got = verdict(make_pod(labels={model.CAPI_DRAIN_LABEL: value}), KUBECTL)
    assert got == Verdict(
        Action.SKIP, f"Skip evicting Pod, because Pod has cluster.x-k8s.io/drain label with {value} value"
    )


@pytest.mark.parametrize("value", ["wait-completed", "Wait-Completed", "WaitCompleted", "waitcompleted"])
def test_drain_label_wait_completed_waits(value: str) -> None:
    got = verdict(make_pod(labels={model.CAPI_DRAIN_LABEL: value}))
    assert got.action is Action.WAIT
    assert got.reason == f"Skip evicting Pod, because Pod has cluster.x-k8s.io/drain label with {value} value"


@pytest.mark.parametrize("value", ["wait--completed", "wait-complet-ed", "drain", "", "skip "])
def test_drain_label_other_values_are_ignored(value: str) -> None:
    # Only the first '-' is optional (strings.Replace(v, "-", "", 1) upstream).
    assert verdict(make_pod(labels={model.CAPI_DRAIN_LABEL: value})).action is Action.EVICT


def test_drain_label_skip_overrides_capi_warnings_in_machine_preset() -> None:
    pod = bare_pod(has_empty_dir=True, labels={model.CAPI_DRAIN_LABEL: "skip"})
    assert verdict(pod).action is Action.SKIP


def test_kubectl_refusal_wins_over_drain_label() -> None:
    # In kubectl an error stops the chain before any additional filter, so the label is never read.
    pod = bare_pod(labels={model.CAPI_DRAIN_LABEL: "skip"})
    assert verdict(pod, KUBECTL).action is Action.BLOCK


def test_daemonset_and_mirror_rules_win_over_drain_label() -> None:
    labels = {model.CAPI_DRAIN_LABEL: "wait-completed"}
    assert verdict(ds_pod(labels=labels)).reason == filters.DAEMONSET_WARNING
    mirror = make_pod(labels=labels, annotations={model.MIRROR_ANNOTATION: "x"})
    assert verdict(mirror).reason == filters.MIRROR_REASON


def test_finished_pod_labelled_skip_is_skipped_as_in_capi() -> None:
    pod = make_pod(phase="Succeeded", labels={model.CAPI_DRAIN_LABEL: "skip"})
    assert verdict(pod).action is Action.SKIP


def test_finished_pod_labelled_wait_completed_is_deleted_since_it_already_completed() -> None:
    pod = make_pod(phase="Succeeded", labels={model.CAPI_DRAIN_LABEL: "wait-completed"})
    assert verdict(pod).action is Action.DELETE


def test_drain_label_wins_over_opt_out_annotation() -> None:
    pod = make_pod(
        labels={model.CAPI_DRAIN_LABEL: "skip"},
        annotations={model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"},
    )
    assert verdict(pod, KUBECTL).action is Action.SKIP


# --- ecosystem opt-outs --------------------------------------------------------------------------

OPT_OUTS = [
    (model.SAFE_TO_EVICT_ANNOTATION, "false"),
    (model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (model.SCALEBOT_DO_NOT_DISRUPT_ANNOTATION, "true"),
]


@pytest.mark.parametrize(("key", "value"), OPT_OUTS)
def test_opt_out_annotation_blocks_without_force_naming_the_annotation(key: str, value: str) -> None:
    got = verdict(make_pod(annotations={key: value}), DrainOptions.kubectl(ignore_daemonsets=True))
    assert got == Verdict(Action.BLOCK, f"Pods annotated {key}={value} (use --force to override)")


@pytest.mark.parametrize(("key", "value"), OPT_OUTS)
def test_opt_out_annotation_waits_in_phase_one_of_a_zero_scale(key: str, value: str) -> None:
    got = verdict(make_pod(annotations={key: value}), DrainOptions.machine(opt_outs_wait=True))
    assert got == Verdict(Action.WAIT, f"waiting for completion: Pod annotated {key}={value}")


def test_opt_outs_wait_wins_over_the_refusal_without_force() -> None:
    options = DrainOptions(force=False, opt_outs_wait=True)
    pod = make_pod(annotations={model.SCALEBOT_DO_NOT_DISRUPT_ANNOTATION: "true"})
    assert verdict(pod, options).action is Action.WAIT


@pytest.mark.parametrize(("key", "value"), OPT_OUTS)
def test_opt_out_annotation_is_evicted_with_force_and_a_warning(key: str, value: str) -> None:
    got = verdict(make_pod(annotations={key: value}), DrainOptions.kubectl(force=True))
    assert got == Verdict(Action.EVICT, f"evicting Pod annotated {key}={value}", 0)
    forced = verdict(make_pod(annotations={key: value}), DrainOptions.machine(evict_opt_outs=True))
    assert forced == Verdict(Action.EVICT, f"evicting Pod annotated {key}={value}", 0)


@pytest.mark.parametrize(("key", "value"), OPT_OUTS)
def test_opt_out_annotation_blocks_a_machine_drain_without_an_explicit_force(key: str, value: str) -> None:
    got = verdict(make_pod(annotations={key: value}))
    assert got == Verdict(Action.BLOCK, f"Pods annotated {key}={value} (use --force to override)")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (model.SAFE_TO_EVICT_ANNOTATION, "true"),
        (model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "false"),
        (model.SCALEBOT_DO_NOT_DISRUPT_ANNOTATION, "no"),
    ],
)
def test_annotation_values_that_do_not_opt_out_are_ignored(key: str, value: str) -> None:
    assert verdict(make_pod(annotations={key: value}), KUBECTL).action is Action.EVICT


def test_first_opt_out_annotation_is_named_when_several_are_set() -> None:
    annotations = {model.SCALEBOT_DO_NOT_DISRUPT_ANNOTATION: "true", model.SAFE_TO_EVICT_ANNOTATION: "false"}
    got = verdict(make_pod(annotations=annotations), KUBECTL)
    assert (
        got.reason
        == "Pods annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false (use --force to override)"
    )


def test_unreplicated_refusal_wins_over_opt_out_refusal() -> None:
    pod = bare_pod(annotations={model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"})
    assert verdict(pod, KUBECTL).reason == filters.UNMANAGED_FATAL


def test_opt_out_wait_wins_over_forced_eviction_of_a_bare_pod() -> None:
    # Warnings never stop the chain, so the opt-out still turns the forced bare pod into a wait.
    pod = bare_pod(annotations={model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"})
    assert verdict(pod, DrainOptions.machine(opt_outs_wait=True)).action is Action.WAIT


def test_live_daemonset_pod_with_opt_out_is_still_just_skipped() -> None:
    pod = ds_pod(annotations={model.SAFE_TO_EVICT_ANNOTATION: "false"})
    assert verdict(pod, DrainOptions.machine(opt_outs_wait=True)).action is Action.SKIP


# --- chain mechanics -----------------------------------------------------------------------------


def test_default_filters_are_in_documented_order() -> None:
    assert filters.default_filters() == (
        filters.skip_deleted,
        filters.daemonset_pods,
        filters.mirror_pods,
        filters.local_storage_pods,
        filters.unreplicated_pods,
        filters.drain_label,
        filters.finished_pods,
        filters.opt_out_pods,
        filters.evict_in_order,
    )


def test_every_default_filter_has_a_docstring() -> None:
    assert all(f.__doc__ for f in filters.default_filters())


def test_every_rule_that_refuses_a_pod_says_how_force_lifts_it() -> None:
    """A rule is registered once (`filters.RULES`): one that BLOCKs a pod under any flags carries its
    `Override`, whose refusal phrase is what a forced run shows for that pod, whose `may_refuse`
    holds for it, and whose warning is what Cluster API logs when the pod is evicted anyway."""
    pods = [
        make_pod("web-0"),
        bare_pod(),
        ds_pod(),
        make_pod("orphan", controller=builders.owner("DaemonSet", "gone")),
        make_pod("cache", has_empty_dir=True),
        make_pod("keep", annotations={model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"}),
        bare_pod(has_empty_dir=True, annotations={model.SAFE_TO_EVICT_ANNOTATION: "false"}),
    ]
    blocked_by: set[str] = set()
    # Live DaemonSet pods left alone (--ignore-daemonsets), as every drain measured against force.
    kubectl = DrainOptions.kubectl(ignore_daemonsets=True)
    for options in (kubectl, filters.plain_drain(), filters.plain_drain(opt_outs_wait=True)):
        ctx = make_ctx(options)
        for pod in pods:
            for rule in filters.RULES:
                got = rule.check(pod, ctx)
                if got is None or got.action is not Action.BLOCK:
                    continue
                assert rule.override is not None, f"{rule.check.__name__} refuses {pod.key} with no Override"
                assert rule.override.refusal(pod) in filters.refusals(pod, ctx)
                assert rule.override.may_refuse(pod, options)
                assert rule.override.warning(pod, ctx), f"no warning when {pod.key} is evicted anyway"
                blocked_by.add(rule.check.__name__)
    assert blocked_by == {"daemonset_pods", "local_storage_pods", "unreplicated_pods", "opt_out_pods"}


def test_custom_filter_chain_is_used_and_first_opinion_wins() -> None:
    def never(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
        return None

    def skip_all(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
        return Verdict(Action.SKIP, "custom")

    ctx = make_ctx(KUBECTL)
    assert filters.classify(bare_pod(), ctx, [never, skip_all, filters.unreplicated_pods]).reason == "custom"


def test_chain_without_an_opinion_defaults_to_evict_with_order() -> None:
    ctx = make_ctx(KUBECTL)
    assert filters.classify(make_pod(priority_class="system-node-critical"), ctx, []) == Verdict(
        Action.EVICT, "", 1
    )


def test_caller_can_append_a_filter_to_the_defaults() -> None:
    def skip_ops(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
        return Verdict(Action.SKIP, "ops namespace") if pod.namespace == "ops" else None

    chain = (*filters.default_filters()[:-1], skip_ops, filters.evict_in_order)
    ctx = make_ctx(MACHINE)
    assert filters.classify(bare_pod(), ctx, chain).reason == "ops namespace"
    assert filters.classify(make_pod(), ctx, chain).action is Action.EVICT


def test_classify_pods_sorts_by_key_in_plain_string_order() -> None:
    pods = [
        make_pod("web-2"),
        make_pod("web-10"),
        make_pod("Zeta", namespace="shop"),
        make_pod("a", namespace="default"),
    ]
    keys = [pod.key for pod, _ in filters.classify_pods(pods, make_ctx())]
    assert keys == ["default/a", "shop/Zeta", "shop/web-10", "shop/web-2"]


def test_classify_pods_pairs_each_pod_with_its_verdict() -> None:
    pods = [bare_pod(), make_pod()]
    got = filters.classify_pods(pods, make_ctx(KUBECTL))
    assert [(p.key, v.action) for p, v in got] == [("ops/debug", Action.BLOCK), ("shop/web-0", Action.EVICT)]


def test_blocked_nodes_lists_nodes_with_a_refused_pod() -> None:
    pods = [
        bare_pod(node_name="w-1"),
        make_pod("web-1", node_name="w-1"),
        make_pod("web-2", node_name="w-2"),
        ds_pod(node_name="w-3"),
        make_pod("web-4", node_name="w-4", has_empty_dir=True),
    ]
    classified = filters.classify_pods(pods, make_ctx(KUBECTL))
    assert filters.blocked_nodes(classified) == frozenset({"w-1", "w-3", "w-4"})


def test_blocked_nodes_is_empty_when_nothing_is_refused() -> None:
    classified = filters.classify_pods([bare_pod(), ds_pod()], make_ctx(MACHINE))
    assert filters.blocked_nodes(classified) == frozenset()


def test_classification_of_a_pod_decoded_from_its_json() -> None:
    raw = {
        "metadata": {
            "name": "fluentd-abc",
            "namespace": "kube-system",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "fluentd",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "w-1", "priorityClassName": "system-node-critical"},
        "status": {"phase": "Running"},
    }
    assert verdict(typed_pod(raw), KUBECTL).reason == filters.DAEMONSET_FATAL
    assert verdict(typed_pod(raw)).action is Action.SKIP


def test_verdict_and_options_are_immutable_values() -> None:
    v = Verdict(Action.EVICT)
    with pytest.raises(AttributeError):
        v.order = 3  # type: ignore[misc]
    assert Verdict(Action.EVICT) == v
    assert hash(DrainOptions.machine()) == hash(DrainOptions.machine())


def _rs_ref() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "cache", "uid": "u", "controller": True}

"""Drain reports and their condition messages (engine.drain.report).

Covers: normalisation (byte-order sort, de-duplication, identical state → identical value and text),
completeness and counts, truncated lists, both condition-message styles against the worked example
(engine-semantics §4.4) and the overflow example (§4.5, Cluster API's "...with more skipped errors"
test), singular/plural forms, the current style's failure-text rule, and the JSON form.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.drain.report import DrainReport, truncated_list

STARTED = datetime(2026, 3, 27, 19, 0, 5, tzinfo=UTC)
PDB_KEY = (
    "Cannot evict pod as it would violate the pod's disruption budget. "
    "The disruption budget web-pdb needs 10 healthy pods and has 10 currently"
)
NS_KEY = (
    "Cannot evict pod from terminating namespace: "
    "unable to create eviction (kube-controller-manager should set deletionTimestamp)"
)
MULTI_PDB_KEY = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def worked_example(*, current_only: bool) -> DrainReport:
    """engine-semantics §4.4: node w-1, Friday shutdown."""
    return DrainReport.build(
        started_at=STARTED,
        nodes=["w-1"],
        terminating=[f"shop/cart-{i}" for i in range(6)],
        failed={
            PDB_KEY: [f"shop/web-{i}" for i in range(10)],
            NS_KEY: ["ops/debug-shell"],
            MULTI_PDB_KEY: ["billing/ledger-0"],
        },
        waiting=["batch/report-1"] if current_only else [],
        later=["data/db-0"] if current_only else [],
    )


def overflow_example(pods_in_key_6: int = 3) -> DrainReport:
    """engine-semantics §4.5: seven keys, one pod each except key 6."""
    failed = {f"some other error {i}": [f"ns/pod-{i}"] for i in range(1, 8)}
    failed["some other error 6"] = [f"ns/pod-6-{j}" for j in range(1, pods_in_key_6 + 1)]
    return DrainReport.build(started_at=STARTED, failed=failed)


FIVE_SHOWN_LEGACY = "\n".join(f"  * some other error {i}: ns/pod-{i}" for i in range(1, 6))
FIVE_SHOWN_CURRENT = "\n".join(
    f"* Pod ns/pod-{i}: failed to evict Pod, some other error {i}" for i in range(1, 6)
)


# --- truncated_list ------------------------------------------------------------------------------


def test_truncated_list_shows_first_n_then_hidden_count() -> None:
    items = [f"p{i}" for i in range(10)]
    assert truncated_list(items, 3) == "p0, p1, p2, ... (7 more)"


@pytest.mark.parametrize(("items", "want"), [([], ""), (["a"], "a"), (["a", "b", "c"], "a, b, c")])
def test_truncated_list_without_overflow_has_no_tail(items: list[str], want: str) -> None:
    assert truncated_list(items, 3) == want


def test_truncated_list_with_one_hidden_item() -> None:
    assert truncated_list(["a", "b", "c", "d"], 3) == "a, b, c, ... (1 more)"


# --- normalisation -------------------------------------------------------------------------------


def test_lists_are_sorted_in_byte_order_so_web_10_comes_before_web_2() -> None:
    report = DrainReport.build(terminating=[f"ns/web-{i}" for i in range(12)])
    assert report.terminating[:4] == ("ns/web-0", "ns/web-1", "ns/web-10", "ns/web-11")
    assert report.condition_message("current").splitlines()[1] == (
        "* Pods ns/web-0, ns/web-1, ns/web-10, ... (9 more): "
        "deletionTimestamp set, but still not removed from the Node"
    )


def test_failure_keys_sort_uppercase_before_lowercase() -> None:
    report = DrainReport.build(failed={"eviction timeout": ["a/x"], "This pod": ["a/y"], "Cannot": ["a/z"]})
    assert list(report.failed) == ["Cannot", "This pod", "eviction timeout"]


def test_every_list_is_deduplicated_and_sorted() -> None:
    report = DrainReport.build(
        nodes=["w-2", "w-1", "w-2"],
        terminating=["b/x", "a/x", "b/x"],
        failed={"k": ["b/y", "a/y", "b/y"]},
        waiting=["z/1", "z/1"],
        later=["c/2", "c/1"],
        skipped=["s/2", "s/1", "s/1"],
        evicted=["e/2", "e/1"],
        deleted=["d/2", "d/1", "d/2"],
        force_deleted=["f/2", "f/1"],
        waiting_later=["w/2", "w/1"],
    )
    assert report.nodes == ("w-1", "w-2")
    assert report.terminating == ("a/x", "b/x")
    assert report.failed == {"k": ("a/y", "b/y")}
    assert report.waiting == ("z/1",)
    assert report.later == ("c/1", "c/2")
    assert report.skipped == ("s/1", "s/2")
    assert (report.evicted, report.deleted) == (("e/1", "e/2"), ("d/1", "d/2"))
    assert (report.force_deleted, report.waiting_later) == (("f/1", "f/2"), ("w/1", "w/2"))


def test_plain_constructor_normalises_too() -> None:
    direct = DrainReport(terminating=("b/x", "a/x", "a/x"), failed={"k": ("b/y", "a/y")})
    assert direct == DrainReport.build(terminating=["a/x", "b/x"], failed={"k": ["a/y", "b/y"]})


def test_failure_groups_without_pods_are_dropped() -> None:
    report = DrainReport.build(failed={"empty": [], "k": ["a/b"]})
    assert list(report.failed) == ["k"]
    assert DrainReport.build(failed={"empty": []}).completed


def test_identical_state_gives_identical_value_hash_and_message() -> None:
    one = DrainReport.build(
        started_at=STARTED, terminating=["b/1", "a/1"], failed={NS_KEY: ["x/2", "x/1"], PDB_KEY: ["y/1"]}
    )
    two = DrainReport.build(
        started_at=STARTED,
        terminating={"a/1", "b/1"},
        failed={PDB_KEY: ("y/1",), NS_KEY: ["x/1", "x/2", "x/1"]},
    )
    assert one == two
    assert hash(one) == hash(two)
    assert one.condition_message() == two.condition_message()
    assert one.condition_message("current") == two.condition_message("current")
    assert json.dumps(one.to_json()) == json.dumps(two.to_json())


@given(
    pods=st.lists(st.text(alphabet="abAB-_/019", min_size=1, max_size=6), max_size=12),
    seed=st.randoms(use_true_random=False),
)
def test_message_does_not_depend_on_input_order(pods: list[str], seed: random.Random) -> None:
    shuffled = list(pods)
    seed.shuffle(shuffled)
    half = len(pods) // 2
    one = DrainReport.build(terminating=pods[:half], failed={"k": pods[half:], "K": pods})
    two = DrainReport.build(terminating=pods[:half][::-1], failed={"K": shuffled, "k": pods[half:][::-1]})
    assert one.condition_message() == two.condition_message()
    assert one.condition_message("current") == two.condition_message("current")


# --- completeness and counts ---------------------------------------------------------------------


def test_report_with_only_skipped_evicted_and_deleted_pods_is_completed() -> None:
    report = DrainReport.build(
        started_at=STARTED,
        skipped=["kube-system/fluentd-x"],
        evicted=["a/b"],
        deleted=["c/d"],
        force_deleted=["e/f"],
    )
    assert report.completed
    assert report.blocking_pods == 0
    assert report.condition_message() == ""
    assert report.condition_message("current") == ""
    assert report.summary_line() == "Drain completed"


@pytest.mark.parametrize("field", ["terminating", "waiting", "waiting_later", "later"])
def test_any_pending_list_keeps_the_drain_incomplete(field: str) -> None:
    report = DrainReport.build(**{field: ["ns/p"]})  # type: ignore[arg-type]
    assert not report.completed
    assert report.condition_message() != ""
    assert report.condition_message("current") != ""


def test_a_failure_keeps_the_drain_incomplete() -> None:
    assert not DrainReport.build(failed={"x": ["ns/p"]}).completed


def test_blocking_pods_counts_distinct_pods_across_pending_lists() -> None:
    report = worked_example(current_only=True)
    assert report.blocking_pods == 6 + 10 + 1 + 1 + 1 + 1
    overlapping = DrainReport.build(terminating=["a/1"], failed={"k": ["a/1", "a/2"]}, skipped=["a/3"])
    assert overlapping.blocking_pods == 2


def test_summary_line_counts_remaining_pods_with_singular() -> None:
    assert DrainReport.build(later=["a/1"]).summary_line() == "Drain not completed yet: 1 Pod remaining"
    assert (
        DrainReport.build(later=["a/1", "a/2"]).summary_line() == "Drain not completed yet: 2 Pods remaining"
    )


# --- legacy style --------------------------------------------------------------------------------


def test_worked_example_legacy_style_verbatim() -> None:
    assert worked_example(current_only=False).condition_message("legacy") == (
        "Drain not completed yet (started at 2026-03-27T19:00:05Z):\n"
        "* Pods with deletionTimestamp that still exist: shop/cart-0, shop/cart-1, shop/cart-2, ... (3 more)\n"  # noqa: E501
        "* Pods with eviction failed:\n"
        "  * Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web-pdb needs 10 healthy pods and has 10 currently: shop/web-0, shop/web-1, shop/web-2, ... (7 more)\n"  # noqa: E501
        "  * Cannot evict pod from terminating namespace: unable to create eviction (kube-controller-manager should set deletionTimestamp): ops/debug-shell\n"  # noqa: E501
        "  * This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.: billing/ledger-0"  # noqa: E501
    )


def test_current_is_the_default_style() -> None:
    report = worked_example(current_only=False)
    assert report.condition_message() == report.condition_message("current")
    assert report.condition_message() != report.condition_message("legacy")


def test_legacy_style_appends_l1_later_line_then_scalebot_waiting_line() -> None:
    lines = worked_example(current_only=True).condition_message("legacy").splitlines()
    assert lines[-2:] == [
        "* After above Pods have been removed from the Node, the following Pods will be evicted: data/db-0",
        "* Pods waiting for completion: batch/report-1",
    ]


def test_legacy_lists_later_and_waiting_with_three_names() -> None:
    pods = [f"ns/p-{i}" for i in range(5)]
    assert DrainReport.build(later=pods, waiting=pods).condition_message("legacy") == (
        "Drain not completed yet:\n"
        "* After above Pods have been removed from the Node, the following Pods will be evicted: "
        "ns/p-0, ns/p-1, ns/p-2, ... (2 more)\n"
        "* Pods waiting for completion: ns/p-0, ns/p-1, ns/p-2, ... (2 more)"
    )


def test_legacy_waiting_line_includes_pods_waiting_in_a_later_order() -> None:
    report = DrainReport.build(waiting=["b/1"], waiting_later=["a/1"])
    assert (
        report.condition_message("legacy")
        == "Drain not completed yet:\n* Pods waiting for completion: a/1, b/1"
    )


def test_legacy_header_shows_the_start_time_as_its_only_release_did() -> None:
    # Cluster API v1.9.0-beta.0, the one tag with the grouped layout, has "(started at ...)".
    assert (
        worked_example(current_only=False).condition_message("legacy").splitlines()[0]
        == "Drain not completed yet (started at 2026-03-27T19:00:05Z):"
    )
    assert DrainReport.build(later=["a/1"]).condition_message("legacy").splitlines()[0] == (
        "Drain not completed yet:"  # no start time known: none is invented
    )


def test_legacy_keeps_plural_section_headers_for_a_single_pod() -> None:
    report = DrainReport.build(terminating=["a/1"], failed={"boom": ["a/2"]})
    assert report.condition_message("legacy") == (
        "Drain not completed yet:\n"
        "* Pods with deletionTimestamp that still exist: a/1\n"
        "* Pods with eviction failed:\n"
        "  * boom: a/2"
    )


def test_overflow_example_legacy_style() -> None:
    assert overflow_example().condition_message("legacy") == (
        "Drain not completed yet (started at 2026-03-27T19:00:05Z):\n* Pods with eviction failed:\n"
        + FIVE_SHOWN_LEGACY
        + "\n  * ... (2 more errors applying to 4 Pods)"
    )


def test_overflow_with_one_hidden_pod_uses_singular_forms_legacy() -> None:
    failed = {f"some other error {i}": [f"ns/pod-{i}"] for i in range(1, 7)}
    message = DrainReport.build(failed=failed).condition_message("legacy")
    assert message.splitlines()[-1] == "  * ... (1 more error applying to 1 Pod)"


@pytest.mark.parametrize(
    ("hidden", "want"),
    [
        ({"k6": ["a/1", "a/2", "a/3"]}, "  * ... (1 more error applying to 3 Pods)"),
        ({"k6": ["a/1"], "k7": ["a/2"]}, "  * ... (2 more errors applying to 2 Pods)"),
    ],
)
def test_overflow_line_singular_and_plural_are_independent(hidden: dict[str, list[str]], want: str) -> None:
    failed = {f"k{i}": [f"ns/p{i}"] for i in range(1, 6)} | hidden
    assert DrainReport.build(failed=failed).condition_message("legacy").splitlines()[-1] == want


def test_exactly_five_failure_keys_have_no_overflow_line() -> None:
    failed = {f"k{i}": [f"ns/p{i}"] for i in range(1, 6)}
    lines = DrainReport.build(failed=failed).condition_message("legacy").splitlines()
    assert lines[-1] == "  * k5: ns/p5"
    lines = DrainReport.build(failed=failed).condition_message("current").splitlines()
    assert lines[-1] == "* Pod ns/p5: failed to evict Pod, k5"


# --- current style -------------------------------------------------------------------------------


def test_worked_example_current_style_verbatim() -> None:
    assert worked_example(current_only=True).condition_message("current") == (
        "Drain not completed yet (started at 2026-03-27T19:00:05Z):\n"
        "* Pods shop/cart-0, shop/cart-1, shop/cart-2, ... (3 more): deletionTimestamp set, but still not removed from the Node\n"  # noqa: E501
        "* Pods shop/web-0, shop/web-1, shop/web-2, ... (7 more): cannot evict pod as it would violate the pod's disruption budget. The disruption budget web-pdb needs 10 healthy pods and has 10 currently\n"  # noqa: E501
        "* Pod ops/debug-shell: failed to evict Pod, Cannot evict pod from terminating namespace: unable to create eviction (kube-controller-manager should set deletionTimestamp)\n"  # noqa: E501
        "* Pod billing/ledger-0: failed to evict Pod, This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.\n"  # noqa: E501
        "* Pod batch/report-1: waiting for completion\n"
        "After above Pods have been removed from the Node, the following Pods will be evicted: data/db-0"
    )


def test_overflow_example_current_style() -> None:
    assert overflow_example().condition_message("current") == (
        "Drain not completed yet (started at 2026-03-27T19:00:05Z):\n"
        + FIVE_SHOWN_CURRENT
        + "\n* 4 Pods with other issues"
    )


def test_overflow_with_one_hidden_pod_uses_singular_form_current() -> None:
    failed = {f"some other error {i}": [f"ns/pod-{i}"] for i in range(1, 7)}
    message = DrainReport.build(started_at=STARTED, failed=failed).condition_message("current")
    assert message.splitlines()[-1] == "* 1 Pod with other issues"


def test_current_style_uses_singular_pod_only_for_exactly_one() -> None:
    one = DrainReport.build(started_at=STARTED, terminating=["a/1"], waiting=["w/1"])
    assert one.condition_message("current").splitlines()[1:] == [
        "* Pod a/1: deletionTimestamp set, but still not removed from the Node",
        "* Pod w/1: waiting for completion",
    ]
    two = DrainReport.build(started_at=STARTED, terminating=["a/1", "a/2"], waiting=["w/1", "w/2"])
    assert two.condition_message("current").splitlines()[1:] == [
        "* Pods a/1, a/2: deletionTimestamp set, but still not removed from the Node",
        "* Pods w/1, w/2: waiting for completion",
    ]


def test_current_style_pdb_key_sorts_first_and_is_lowercased_without_prefix() -> None:
    timeout = "eviction timeout of 10s reached, eviction will be retried"
    report = DrainReport.build(started_at=STARTED, failed={timeout: ["a/1"], PDB_KEY: ["a/2"]})
    assert report.condition_message("current").splitlines()[1:] == [
        "* Pod a/2: cannot evict pod as it would violate the pod's disruption budget. "
        "The disruption budget web-pdb needs 10 healthy pods and has 10 currently",
        "* Pod a/1: failed to evict Pod, eviction timeout of 10s reached, eviction will be retried",
    ]


def test_current_style_prefixes_kubectl_refusals_like_any_other_failure() -> None:
    key = "cannot delete Pods that declare no controller (use --force to override)"
    report = DrainReport.build(started_at=STARTED, failed={key: ["ops/debug"]})
    assert report.condition_message("current").splitlines()[1] == (
        "* Pod ops/debug: failed to evict Pod, cannot delete Pods that declare no controller "
        "(use --force to override)"
    )


def test_current_style_pdb_key_with_details_but_no_causes_keeps_trailing_space() -> None:
    key = "Cannot evict pod as it would violate the pod's disruption budget. "
    report = DrainReport.build(started_at=STARTED, failed={key: ["a/1"]})
    assert report.condition_message("current").splitlines()[1] == (
        "* Pod a/1: cannot evict pod as it would violate the pod's disruption budget. "
    )


def test_current_style_renders_both_after_above_lines_without_bullet() -> None:
    report = DrainReport.build(
        started_at=STARTED, terminating=["a/0"], later=[f"b/{i}" for i in range(4)], waiting_later=["c/1"]
    )
    assert report.condition_message("current").splitlines()[-2:] == [
        "After above Pods have been removed from the Node, the following Pods will be evicted: "
        "b/0, b/1, b/2, ... (1 more)",
        "After above Pods have been removed from the Node, waiting for the following Pods to complete "
        "without eviction: c/1",
    ]


def test_current_style_header_is_rfc3339_utc_whatever_the_input_zone() -> None:
    cet = timezone(timedelta(hours=1))
    report = DrainReport.build(started_at=datetime(2026, 3, 27, 20, 0, 5, tzinfo=cet), later=["a/1"])
    assert report.condition_message("current").startswith(
        "Drain not completed yet (started at 2026-03-27T19:00:05Z):"
    )


def test_current_style_without_start_time_falls_back_to_plain_header() -> None:
    report = DrainReport.build(later=["a/1"])
    assert report.condition_message("current").splitlines()[0] == "Drain not completed yet:"


def test_skipped_evicted_and_deleted_pods_never_appear_in_the_message() -> None:
    report = DrainReport.build(
        started_at=STARTED,
        later=["a/1"],
        skipped=["s/x"],
        evicted=["e/x"],
        deleted=["d/x"],
        force_deleted=["f/x"],
    )
    for style in ("legacy", "current"):
        message = report.condition_message(style)
        assert not any(pod in message for pod in ("s/x", "e/x", "d/x", "f/x"))
        assert not message.endswith("\n")


# --- JSON ----------------------------------------------------------------------------------------


def test_to_json_round_trips_through_json_dumps() -> None:
    report = worked_example(current_only=True)
    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert DrainReport.from_json(json.loads(json.dumps(data))) == report


def test_to_json_has_stable_keys_counts_and_message() -> None:
    data = worked_example(current_only=True).to_json()
    assert list(data) == [
        "completed",
        "started_at",
        "summary",
        "message",
        "counts",
        "failed",
        "nodes",
        "terminating",
        "waiting",
        "waiting_later",
        "later",
        "skipped",
        "evicted",
        "deleted",
        "force_deleted",
        "left_unreachable",
        "queued",
    ]
    assert data["completed"] is False
    assert data["started_at"] == "2026-03-27T19:00:05Z"
    assert data["message"] == worked_example(current_only=True).condition_message()
    assert data["counts"] == {
        "blocking": 20,
        "terminating": 6,
        "failed": 12,
        "failure_keys": 3,
        "waiting": 1,
        "waiting_later": 0,
        "later": 1,
        "skipped": 0,
        "evicted": 0,
        "deleted": 0,
        "force_deleted": 0,
        "left_unreachable": 0,
        "queued": 0,
    }
    assert list(data["failed"]) == [PDB_KEY, NS_KEY, MULTI_PDB_KEY]
    assert data["nodes"] == ["w-1"]


def test_to_json_renders_the_requested_style() -> None:
    report = worked_example(current_only=True)
    assert report.to_json("current")["message"] == report.condition_message("current")


def test_to_json_of_a_completed_report() -> None:
    data = DrainReport.build(evicted=["a/1"]).to_json()
    assert (data["completed"], data["message"], data["summary"], data["started_at"]) == (
        True,
        "",
        "Drain completed",
        None,
    )
    assert DrainReport.from_json(data) == DrainReport.build(evicted=["a/1"])


def test_report_is_immutable() -> None:
    report = DrainReport.build(later=["a/1"])
    with pytest.raises(AttributeError):
        report.later = ()  # type: ignore[misc]

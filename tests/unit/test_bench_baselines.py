"""The benchmark's parallel kubectl baselines and the hand-written tail of docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

from tests.bench import report, scenarios

POOLS = {"b": ["b-0", "b-1"], "a": ["a-0", "a-1", "a-2"]}


def test_one_command_per_pool_selects_the_pool_by_label() -> None:
    assert scenarios.kubectl_commands("pool", POOLS, None) == [
        ["-l", "scalebot.io/pool=a"],
        ["-l", "scalebot.io/pool=b"],
    ]


def test_one_command_per_node() -> None:
    assert scenarios.kubectl_commands("node", POOLS, 16) == [["a-0"], ["a-1"], ["a-2"], ["b-0"], ["b-1"]]


def test_the_nodes_split_in_equal_groups_for_the_aggregate_rate() -> None:
    groups = scenarios.kubectl_commands("pool-split", POOLS, 2)
    assert groups == [["a-0", "a-2", "b-1"], ["a-1", "b-0"]]
    assert sorted(n for g in groups for n in g) == sorted(n for nodes in POOLS.values() for n in nodes)


def test_regenerating_the_file_keeps_the_sections_written_after_the_results(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n<!-- bench-results:small\nAAAA\n-->\n\n## Written by hand\n\ntext\n")
    assert report.hand_written_tail(doc) == "\n## Written by hand\n\ntext\n"
    doc.write_text("# Benchmarks\n\n<!-- bench-results:small\nAAAA\n-->\n")
    assert report.hand_written_tail(doc) == ""


def test_a_watch_is_counted_as_a_watch_whatever_the_case_of_its_parameter() -> None:
    from tests.bench import child

    # The Python client sends watch=True; kubectl and client-go send watch=true.
    assert child.classify("GET", "https://h/api/v1/pods?fieldSelector=x&watch=True") == ("watch", "pods")
    assert child.classify("GET", "https://h/api/v1/pods?watch=true") == ("watch", "pods")
    assert child.classify("GET", "https://h/api/v1/pods?limit=500") == ("list", "pods")


def _zero(evictions_per_second: float, *, statuses: list[list[object]] | None = None) -> dict[str, object]:
    """A zero-scale result of 100 evictions at this rate, drained 10 s after the request."""
    return {
        "requested": 0.0,
        "started": 0.0,
        "ended": 20.0,
        "plan": {"nodes": 10},
        "events": [
            {"at": 10.0, "kind": "info", "text": "Drain completed", "step": "drain", "state": "running"}
        ],
        "requests": {
            "counts": [["create", "pods/eviction", 100]],
            "statuses": statuses or [],
            "evictions": {
                "accepted": 100,
                "first_start": 0.0,
                "last_end": 100 / evictions_per_second,
                "last_accepted_end": 100 / evictions_per_second,
            },
        },
    }


def _sweep(workers: int, evictions_per_second: float) -> dict[str, object]:
    return {
        "workers": workers,
        "started": 0.0,
        "ended": 1.0,
        "requests": {
            "counts": [],
            "statuses": [["create", "pods/eviction", 429, 3]],
            "evictions": {
                "accepted": 100,
                "first_start": 0.0,
                "last_end": 100 / evictions_per_second,
                "last_accepted_end": 100 / evictions_per_second,
            },
        },
    }


def test_each_client_limit_measured_is_a_row_with_its_share_of_the_sweeps_best_point() -> None:
    runs = {
        "scalebot": {"api_limit": [200.0, 300], "zero": _zero(80.0)},
        "scalebot_qps50": {
            "api_limit": [50.0, 100],
            "zero": _zero(40.0, statuses=[["create", "pods/eviction", 429, 7], ["get", "nodes", 200, 9]]),
        },
        "sweep_8": _sweep(8, 50.0),
        "sweep_64": _sweep(64, 100.0),
    }
    rows = report._api_qps_rows(runs)
    assert [r.figure.split(":")[0] for r in rows] == [
        "scalebot at api_qps 50 / api_burst 100",
        "scalebot at api_qps 200 / api_burst 300",
    ]
    assert "40.0 (40 % of the sweep's best)" in rows[0].value and rows[0].value.split("; ")[3] == "7"
    assert "80.0 (80 % of the sweep's best)" in rows[1].value and rows[1].value.split("; ")[3] == "0"
    assert report._api_qps_rows({"scalebot": runs["scalebot"]}) == []  # one limit: no trade-off to show


def test_reduced_load_runs_get_their_own_rows_and_never_mix_with_the_others() -> None:
    results = {
        "size": "small",
        "scenarios": ["baselines"],
        "runs": {
            "scalebot": {"api_limit": [200.0, 300], "zero": _zero(80.0)},
            "sweep_64": _sweep(64, 100.0),
            "scalebot_reduced": {"api_limit": [200.0, 300], "zero": _zero(90.0)},
            "sweep_64_reduced": _sweep(64, 95.0),
        },
    }
    figures = {r.figure: r.value for r in report.rows(results)}
    assert figures["scalebot's evictions/s as a share of the sweep's best point (64 workers)"] == "80 %"
    reduced = (
        "reduced synthetic load: scalebot's evictions/s as a share of the sweep's best point (64 workers)"
    )
    assert figures[reduced] == "95 %"


def test_lengthened_node_leases_lengthen_the_node_monitor_grace_period() -> None:
    import pytest

    from localcluster.controlplane import ControlPlane

    assert ControlPlane()._node_monitor_flags() == []  # the controller manager's own default
    assert ControlPlane(node_lease_seconds=240)._node_monitor_flags() == ["--node-monitor-grace-period=300s"]
    with pytest.raises(ValueError, match="at least 40"):
        ControlPlane(node_lease_seconds=10)


def test_a_kubectl_stopped_while_still_cordoning_says_so() -> None:
    cordoning = {"seconds": 240.0, "cordon_seconds": 239.9, "throttled_requests": 1197}
    assert report.no_node_drained(cordoning) == (
        "no node drained in 4 min 00 s: it was still cordoning when stopped (a GET and a PATCH per "
        "node; 1,197 of its requests waited for its client-side limit)"
    )
    draining = {"seconds": 240.0, "cordon_seconds": 41.0, "throttled_requests": 80}
    assert report.no_node_drained(draining) == "no node drained in 4 min 00 s"

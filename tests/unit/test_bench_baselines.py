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

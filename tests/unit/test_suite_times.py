"""The suite's own timing tools: the tiers of scripts/test and the table of where the time goes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.child_pytest import run_child_pytest
from tests.suite_times import group_of, read_results, render_table, totals_line

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
  <testcase classname="tests.unit.engine.test_model" name="test_a" time="0.5"/>
  <testcase classname="tests.e2e.test_drain" name="test_slow" time="95.0"/>
  <testcase classname="tests.e2e.test_chart.TestInstall" name="test_install" time="30.0">
    <failure message="boom"/>
  </testcase>
  <testcase classname="tests.slack.test_gate" name="test_skip" time="0.0"><skipped message="x"/></testcase>
  <testcase classname="tests.reliability.test_process_faults" name="test_err" time="2.0">
    <error message="e"/>
  </testcase>
</testsuite></testsuites>
"""


def test_tests_are_grouped_by_what_they_need() -> None:
    assert group_of("tests.unit.bot.test_parser") == "unit"
    assert group_of("tests.e2e.test_image") == "image"
    assert group_of("tests.e2e.test_chart") == "chart"
    assert group_of("tests.e2e.test_drain") == "e2e"
    assert group_of("tests.reliability.test_security") == "reliability"
    assert group_of("somewhere.else") == "other"


def test_the_closing_line_counts_failures_and_errors_as_failed(tmp_path: Path) -> None:
    (tmp_path / "tier.xml").write_text(_JUNIT)
    times = read_results([tmp_path / "tier.xml"])
    assert totals_line(times) == "suite: 2 passed, 2 failed, 1 skipped"


def test_the_table_ranks_modules_and_tests_by_time_within_their_group(tmp_path: Path) -> None:
    (tmp_path / "tier.xml").write_text(_JUNIT)
    table = render_table(read_results([tmp_path / "tier.xml"]))
    assert "| e2e | 1 | 1 min 35.0 s |" in table
    assert "| chart | 1 | 30.0 s |" in table  # a method's class name is not taken for its module
    assert "`e2e.test_drain::test_slow`" in table
    assert "| all | 5 | 2 min 07.5 s |" in table


def test_a_test_that_starts_the_control_plane_without_the_e2e_marker_is_refused(tmp_path: Path) -> None:
    # scripts/test runs the unmarked tests while the control plane builds: such a test would build it twice.
    test_file = tmp_path / "test_child.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def control_plane():
                return object()

            def test_unmarked(control_plane):
                pass

            @pytest.mark.e2e
            def test_marked(control_plane):
                pass
            """
        )
    )
    code, output = run_child_pytest(test_file)
    assert code != 0, output
    assert "not marked e2e" in output and "test_unmarked" in output, output
    assert "test_marked" not in output.split("not marked e2e", 1)[1], output

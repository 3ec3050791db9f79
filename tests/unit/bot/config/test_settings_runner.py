"""`runner:`: how many operations one instance runs at once and how many evictions it sends,
read into the `RunnerSettings` that `scalebot run` hands its runner; bad values name the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.config.settings import SettingsError, load
from engine.domain.settings import RunnerSettings

ENV = {"SLACK_BOT_TOKEN": "xoxb-1-secret", "SLACK_SIGNING_SECRET": "s3cr3t-signing"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scalebot.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_runner_keys_reach_the_runner_settings(tmp_path: Path) -> None:
    text = """
workloads_return_timeout: 7m
runner:
  max_operations: 150
  max_operations_per_cluster: 3
  step_workers: 12
  max_evictions_in_flight: 96
  max_evictions_per_cluster: 32
  eviction_processes: 2
"""
    runner = load(write(tmp_path, text), ENV).runner
    assert (runner.max_operations, runner.max_operations_per_cluster, runner.workers) == (150, 3, 12)
    assert (runner.max_evictions_in_flight, runner.max_parallel_evictions) == (96, 32)
    assert runner.eviction_processes == 2
    assert runner.workloads_return_timeout == timedelta(minutes=7)


def test_without_a_runner_section_the_defaults_let_a_hundred_clusters_proceed_together(
    tmp_path: Path,
) -> None:
    runner = load(write(tmp_path, "workers: 4\n"), ENV).runner
    assert runner == RunnerSettings()
    assert runner.max_operations >= 100
    assert runner.max_parallel_evictions < runner.max_evictions_in_flight
    assert runner.eviction_processes == 0, "evictions are sent by scalebot's own process unless asked"


def test_a_low_process_wide_cap_lowers_the_per_cluster_ceiling_under_it(tmp_path: Path) -> None:
    runner = load(write(tmp_path, "runner: {max_evictions_in_flight: 16}\n"), ENV).runner
    assert (runner.max_evictions_in_flight, runner.max_parallel_evictions) == (16, 15)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("runner: {max_operations: 0}", "runner.max_operations: expected a whole number from 1"),
        ("runner: {step_workers: many}", "runner.step_workers: expected a whole number"),
        ("runner: {workers: 4}", "runner.workers: unknown setting"),
        (
            "runner: {max_operations: 10, max_operations_per_cluster: 20}",
            "runner.max_operations_per_cluster: 20 is more than max_operations (10)",
        ),
        (
            "runner: {max_evictions_in_flight: 64, max_evictions_per_cluster: 64}",
            "runner.max_evictions_per_cluster: 64 must be below max_evictions_in_flight (64)",
        ),
        (
            "runner: {max_evictions_per_cluster: 1}",
            "runner.max_evictions_per_cluster: expected a whole number from 2",
        ),
        ("runner: {eviction_processes: -1}", "runner.eviction_processes: expected a whole number from 0"),
        (
            "runner: {eviction_processes: 64}",
            "runner.eviction_processes: expected a whole number from 0 to 32",
        ),
    ],
)
def test_bad_runner_values_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load(write(tmp_path, text + "\n"), ENV)
    assert message in str(caught.value)

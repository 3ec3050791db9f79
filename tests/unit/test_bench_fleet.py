"""tests.bench.fleet's baseline: the fleet's sleeps against the slowest single sleep of the same sitting;
tests.bench.fleet_soak's reading of a process from /proc."""

from __future__ import annotations

import os
import threading

from tests.bench.fleet import with_baseline
from tests.bench.fleet_soak import _proc_stat


def test_the_fleet_is_measured_against_the_slowest_single_sleep_of_the_sitting() -> None:
    fleet = {"clusters": 100, "sleeps_done_s": 15.0}
    solos = [{"sleeps_done_s": 6.3}, {"sleeps_done_s": 5.7}, {"failed": 1}, {"sleeps_done_s": 8.0}]
    result = with_baseline(fleet, solos)
    assert result["baseline_s"] == 8.0 and result["solo_sleeps_done_s"] == [6.3, 5.7, 8.0]
    assert result["goal_s"] == 39.6  # 1.2 x 8.0 + 30
    assert result["ratio_to_baseline"] == 1.88 and result["within_goal"] is True
    assert with_baseline({"sleeps_done_s": 40.0}, solos)["within_goal"] is False


def test_without_a_single_sleep_or_a_fleet_result_there_is_no_ratio() -> None:
    failed = {"clusters": 10, "failed": 1}
    assert with_baseline(failed, [{"sleeps_done_s": 6.0}]) == failed
    assert with_baseline({"sleeps_done_s": 9.0}, [{"failed": 2}]) == {"sleeps_done_s": 9.0}


def test_a_process_is_read_as_threads_rss_and_cpu() -> None:
    stop = threading.Event()
    extra = threading.Thread(target=stop.wait, daemon=True)
    got = _proc_stat(os.getpid())
    assert got is not None
    extra.start()
    try:
        again = _proc_stat(os.getpid())
    finally:
        stop.set()
        extra.join(5)
    assert again is not None and again[0] == got[0] + 1
    assert got[1] > 10 and got[2] >= 0
    assert _proc_stat(2**22 + 12345) is None  # no such process

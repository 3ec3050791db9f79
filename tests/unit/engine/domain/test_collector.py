"""The garbage collector's pause around bulk allocations (engine.domain.collector)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from engine.domain.collector import collector_paused
from tests import builders


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_is_on_again_after_an_exception() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_callers_own_pause_is_kept() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_spans_in_two_threads_keep_it_off_until_the_last_ends() -> None:
    first_in, second_done, first_may_leave = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            first_may_leave.wait(10)
            seen.append(gc.isenabled())

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert first_in.wait(10)
        with collector_paused():
            pass
        second_done.set()
        assert not gc.isenabled(), "the first span is still open"
    finally:
        first_may_leave.set()
        thread.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_a_plan_over_many_pods_triggers_no_collection() -> None:
    """Thousands of verdicts, keys and warnings: with the collector running, their allocations
    set off generation-0 collections again and again (its threshold is 700 allocations; 8 of
    them in this plan without the pause)."""
    from datetime import UTC, datetime

    from engine.domain.operation import OpKind, Target
    from engine.planning.preflight import plan_operation
    from tests.unit.engine.planning.test_plan_work import NODES, snapshot

    snap = snapshot([p for n in NODES for p in builders.pods_on(n, 500)])
    collections: list[str] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(f"generation {info['generation']}")

    gc.collect()
    gc.callbacks.append(record)
    try:
        plan = plan_operation(OpKind.ZERO, Target(cluster="dev"), snap, now=datetime.now(UTC))
    finally:
        gc.callbacks.remove(record)
    assert len(plan.nodes) == len(NODES)
    # At most the one that the first allocation after the plan sets off, when it is back on.
    assert len(collections) <= 1, collections
    assert gc.isenabled()

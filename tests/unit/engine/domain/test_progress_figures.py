"""Progress figures: nodes drained of total, pods evicted / remaining / total, rate and ETA.

Covers: the pure figures and their status line from a drain's state (exact values); the rate
over about the last minute, not since the start; a real zero-scale on the in-memory cluster
(through `Operations`, the runner and SQLite) reports figures whose totals match the plan and
whose final figures equal the operation's summary (evicted and force-deleted named apart); a first
pass that evicts most pods still gives a rate and an ETA.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine.domain.drain_state import DrainState
from engine.domain.operation import DrainProgress, Operation, ProgressEvent
from engine.domain.progress_figures import (
    add_sample,
    bar,
    drain_figures,
    figures,
    rate_per_minute,
    status_line,
    time_left,
)
from engine.drain.progress import after_pass
from engine.drain.report import DrainReport
from engine.kube.fake import FakeCluster
from tests.unit.engine.operations.test_operations import finish, make_ops, zero

T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def _requested_zero(tmp_path: Path) -> Operation:
    """A real zero-scale request (awaiting approval, so nothing runs): its progress is set by hand."""
    cluster = FakeCluster()
    cluster.add_node("web-0", labels={"scalebot.io/pool": "web"})
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    op = ops.request(zero(("web",), by="cli:alice")).operation
    assert op is not None
    ops.runner.stop()
    return op


def test_figures_of_a_drain_half_way(tmp_path: Path) -> None:
    op = _requested_zero(tmp_path)
    drain = DrainProgress(
        state=DrainState(started_at=T0, evicted_total=330, deleted_total=10),
        nodes_total=20,
        busy_nodes=tuple(f"web-{i}" for i in range(8)),
        pods_remaining=172,
        pods_terminating=12,
        blocking=("shop/db-0: the disruption budget db needs 1 healthy pods",),
        samples=((T0, 100), (T0 + timedelta(seconds=30), 220), (T0 + timedelta(seconds=60), 340)),
    )
    op = replace(op, progress=replace(op.progress, drain=drain))

    f = figures(op)

    assert f is not None
    assert (f.nodes_drained, f.nodes_total) == (12, 20)
    assert (f.pods_done, f.pods_remaining, f.pods_total, f.pods_terminating) == (340, 172, 512, 12)
    assert (f.pods_evicted, f.pods_deleted, f.pods_force_deleted) == (330, 10, 0)
    assert f.rate_per_minute == 240.0
    assert f.eta_seconds == 43  # 172 pods at 240 a minute
    assert f.blocking == ("shop/db-0: the disruption budget db needs 1 healthy pods",)
    assert status_line(f) == "▰▰▰▰▱▱▱▱ 12/20 nodes · 340/512 pods · under a minute left"
    slower = replace(drain, samples=((T0, 300), (T0 + timedelta(seconds=60), 340)))
    f = figures(replace(op, progress=replace(op.progress, drain=slower)))
    assert f is not None and f.eta_seconds == 258
    assert status_line(f) == "▰▰▰▰▱▱▱▱ 12/20 nodes · 340/512 pods · about 5 min left"


def test_no_figures_before_the_first_pass_and_no_eta_without_a_rate(tmp_path: Path) -> None:
    op = _requested_zero(tmp_path)
    assert figures(replace(op, progress=replace(op.progress, drain=DrainProgress()))) is None
    one_pass = DrainProgress(
        state=DrainState(started_at=T0, evicted_total=3),
        nodes_total=2,
        busy_nodes=("web-0",),
        pods_remaining=4,
        samples=((T0, 3),),
    )
    f = figures(replace(op, progress=replace(op.progress, drain=one_pass)))
    assert f is not None and f.rate_per_minute is None and f.eta_seconds is None
    assert status_line(f) == "▰▰▰▱▱▱▱▱ 1/2 nodes · 3/7 pods · time left unknown"


def test_the_rate_is_the_last_minutes_not_the_whole_drains() -> None:
    samples: tuple[tuple[datetime, int], ...] = ()
    for second, done in ((0, 0), (20, 400), (40, 800), (60, 810), (80, 820), (100, 830)):
        samples = add_sample(samples, T0 + timedelta(seconds=second), done)
    # kept: the passes of the last minute and the one before them (40 s: 800 → 100 s: 830)
    assert samples[0] == (T0 + timedelta(seconds=40), 800)
    assert rate_per_minute(samples) == 30.0


def test_bar_and_time_left_wording() -> None:
    assert bar(0.0) == "▱" * 8 and bar(1.0) == "▰" * 8 and bar(0.6) == "▰▰▰▰▱▱▱▱"
    assert time_left(0) == "nothing left to evict"
    assert time_left(180) == "about 3 min left"
    assert time_left(3 * 3600 + 60) == "about 3 h 1 min left"


def test_a_real_zero_scale_reports_figures_that_match_its_plan_and_summary(tmp_path: Path) -> None:
    cluster = FakeCluster()
    for i in range(4):
        cluster.add_node(f"web-{i}", labels={"scalebot.io/pool": "web"})
        for j in range(3):
            cluster.add_pod(
                "shop",
                f"web-{i}-{j}",
                node=f"web-{i}",
                controller_kind="ReplicaSet",
                controller_name="web",
                labels={"app": "web"},
                grace=10,
            )
    cluster.add_node("spare-0", labels={"scalebot.io/pool": "spare"})
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    seen: list[ProgressEvent] = []
    ops.subscribe(seen.append)
    out = ops.request(zero(("web",)))
    assert out.ok and out.operation is not None
    finish(ops, out.operation.id)
    op = ops.get(out.operation.id)
    ops.runner.stop()
    assert op is not None and op.summary is not None, op

    during = [f for f in (figures(e.operation) for e in seen if e.kind == "report") if f is not None]
    assert during, [e.text for e in seen]
    assert {f.nodes_total for f in during} == {len(op.plan.nodes)} == {4}
    assert during[0].pods_total == 12
    last = figures(op)
    assert last is not None
    assert (last.nodes_drained, last.pods_evicted, last.pods_remaining) == (4, op.summary.pods_evicted, 0)
    assert last.pods_total == op.summary.pods_evicted == 12
    assert last.eta_seconds == 0


def test_after_phase_2_every_pod_counts_once_and_nothing_remains(tmp_path: Path) -> None:
    cluster = FakeCluster()
    for i in range(2):
        cluster.add_node(f"web-{i}", labels={"scalebot.io/pool": "web"})
        cluster.add_pod(
            "shop",
            f"db-{i}",
            node=f"web-{i}",
            controller_kind="StatefulSet",
            controller_name="db",
            labels={"app": "db"},
        )
        cluster.add_pod(
            "shop",
            f"cart-{i}",
            node=f"web-{i}",
            controller_kind="ReplicaSet",
            controller_name="cart",
            grace=10,
        )
    cluster.add_pdb("shop", "db", match_labels={"app": "db"}, disruptions_allowed=0)
    ops = make_ops(cluster, tmp_path / "db.sqlite")
    seen: list[ProgressEvent] = []
    ops.subscribe(seen.append)
    out = ops.request(zero())
    assert out.ok and out.operation is not None and out.operation.plan.force_phase
    finish(ops, out.operation.id)
    op = ops.get(out.operation.id)
    ops.runner.stop()
    assert op is not None and op.summary is not None and op.summary.pods_force_deleted >= 2

    blocked = [f for f in (figures(e.operation) for e in seen if e.kind == "report") if f is not None]
    assert any(f.pods_remaining == 2 and f.nodes_drained == 0 for f in blocked), blocked
    last = figures(op)
    assert last is not None
    assert (last.nodes_drained, last.nodes_total, last.pods_remaining) == (2, 2, 0)
    assert (last.pods_done, last.pods_total) == (op.summary.pods_evicted + 2, 4)
    # The panel and the summary count the same things, evicted and force-deleted named apart.
    assert (last.pods_evicted, last.pods_force_deleted) == (
        op.summary.pods_evicted,
        op.summary.pods_force_deleted,
    )


def test_a_first_pass_that_evicts_most_pods_still_gives_a_rate_and_an_eta() -> None:
    """13 pods evicted by the first pass, then passes that wait on the rest: the rate counts the
    first pass's evictions (from the drain's start), so the ETA is known."""
    state = DrainState(started_at=T0)
    report = DrainReport()
    progress = DrainProgress()
    for second, evicted, remaining in ((10, 13, 3), (30, 13, 3), (50, 14, 2)):
        state = replace(state, evicted_total=evicted)
        progress = after_pass(
            progress,
            nodes=("web-0",),
            state=state,
            report=report,
            busy_nodes=("web-0",),
            now=T0 + timedelta(seconds=second),
        )
        progress = replace(progress, pods_remaining=remaining)
    f = drain_figures(progress)
    assert f is not None
    assert f.rate_per_minute == pytest.approx(16.8)  # 14 pods in the 50 s since the drain started
    assert f.eta_seconds == 8  # 2 pods left at 16.8 a minute


def test_many_quick_passes_keep_the_whole_minute() -> None:
    """13 pods in the first 2 s, then a pass a second with nothing more: 10 s later the rate is
    still the minute's (13 pods over 12 s), not the last 8 passes' 0."""
    samples = add_sample((), T0, 0)
    samples = add_sample(samples, T0 + timedelta(seconds=2), 13)
    for second in range(3, 13):
        samples = add_sample(samples, T0 + timedelta(seconds=second), 13)
    assert len(samples) <= 8
    assert samples[0] == (T0, 0)
    assert rate_per_minute(samples) == 65.0


def test_a_burst_just_after_the_start_is_not_read_as_thousands_a_minute() -> None:
    samples = add_sample(add_sample((), T0, 0), T0 + timedelta(milliseconds=20), 6)
    assert rate_per_minute(samples) == 36.0  # 6 pods over the shortest span measured, 10 s

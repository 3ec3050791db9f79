"""A drain pass folded into the inputs of the progress figures (`DrainProgress`).

Pure. The operation runner and `scalebot drain` both fold their passes with `after_pass`, so the
figures (`engine.domain.progress_figures`) of a drain are the same whichever of them runs it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from datetime import datetime

from engine.domain import progress_figures
from engine.domain.drain_state import DrainState
from engine.domain.operation import DrainProgress
from engine.drain.report import DrainReport

BLOCKERS_SHOWN = 5
"""Blocking pods kept for the figures: a status line and a panel show a short list."""


def after_pass(
    previous: DrainProgress,
    *,
    nodes: Collection[str],
    state: DrainState,
    report: DrainReport,
    busy_nodes: Iterable[str],
    now: datetime,
) -> DrainProgress:
    """`previous` after a pass over `nodes` at `now` that left `state` and `report`. A node whose
    drain ended with a refusal is not drained: it counts as busy, though later passes skip it."""
    refused = set(state.failed_nodes) & set(nodes)
    drained = replace(
        previous,
        state=state,
        evicted=state.evicted_total,
        nodes_total=len(nodes),
        busy_nodes=tuple(sorted(set(busy_nodes) | refused)),
        pods_remaining=len(report.blocking_keys - set(report.terminating)),
        pods_terminating=len(report.terminating),
        blocking=report.blockers(BLOCKERS_SHOWN),
    )
    samples = previous.samples or progress_figures.first_samples(
        state.started_at, progress_figures.pods_done(previous)
    )
    return replace(
        drained,
        samples=progress_figures.add_sample(samples, now, progress_figures.pods_done(drained)),
    )

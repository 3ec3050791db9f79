"""The savings chart: nodes asleep over the last week (sleeps shaded) and node-hours saved per
week, drawn headless (matplotlib's Agg canvas, no display, no pyplot state) from a `SavingsReport`,
so its line and bars are the report's figures."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import BinaryIO

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import DateFormatter
from matplotlib.figure import Figure

from engine.savings.figures import SavingsReport, asleep_series

WIDTH_PX, HEIGHT_PX, DPI = 800, 400, 100


def weekly_chart(report: SavingsReport) -> Figure:
    """Two panels: the nodes asleep over the report's last week, sleep periods shaded; one bar per
    week with the node-hours saved that week over every cluster and pool."""
    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    week, axes = figure.subplots(1, 2, width_ratios=(3, 2))
    start = report.until - timedelta(days=7)
    steps = asleep_series(report, start, report.until)
    week.step([at for at, _ in steps], [n for _, n in steps], where="post", color="#1565c0")
    for p in report.periods:
        if p.end > start:
            week.axvspan(max(p.start, start), p.end, color="#90caf9", alpha=0.3, linewidth=0)
    week.set_title("Nodes asleep, last 7 days")
    week.set_ylabel("nodes")
    week.xaxis.set_major_formatter(DateFormatter("%a %d"))  # type: ignore[no-untyped-call]
    week.tick_params(axis="x", labelrotation=30)
    weeks = report.weekly_totals()
    labels = [week.isoformat() for week, _ in weeks]
    axes.bar(labels, [hours for _, hours in weeks], color="#2e7d32")
    axes.set_title("Node-hours saved per week")
    axes.set_xlabel(f"week starting (total {report.node_hours:,.0f} node-hours)")
    axes.set_ylabel("node-hours")
    axes.tick_params(axis="x", labelrotation=30)
    figure.tight_layout()
    return figure


def write_png(report: SavingsReport, path: Path | BinaryIO) -> None:
    """The chart as a PNG of WIDTH_PX by HEIGHT_PX pixels."""
    weekly_chart(report).savefig(path, format="png", dpi=DPI)


def png_bytes(report: SavingsReport) -> bytes:
    out = io.BytesIO()
    write_png(report, out)
    return out.getvalue()

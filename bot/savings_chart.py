"""The savings chart: node-hours saved per week, drawn headless (matplotlib's Agg canvas, no
display, no pyplot state) from a `SavingsReport`, so its bars are the report's weekly totals."""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from engine.savings import SavingsReport

WIDTH_PX, HEIGHT_PX, DPI = 800, 400, 100


def weekly_chart(report: SavingsReport) -> Figure:
    """One bar per week: the node-hours saved that week over every cluster and pool."""
    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    weeks = report.weekly_totals()
    labels = [week.isoformat() for week, _ in weeks]
    axes.bar(labels, [hours for _, hours in weeks], color="#2e7d32")
    axes.set_title(f"Node-hours saved per week (total {report.node_hours:,.1f})")
    axes.set_xlabel("week starting")
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

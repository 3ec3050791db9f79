"""The savings chart, drawn headless (matplotlib's Agg canvas, no display, no pyplot state) from a
`SavingsReport`, so its bars, lines and sums are the report's figures.

Made to be read by someone who was not there: one colour per cluster in both panels, a legend
naming each cluster with its node-hours and money (in the configured currency), the total in the
title, the time zone the weeks start in, and the current week marked as partial (hatched, "to Wed
14:00") so a half week is never read as a bad one. Top: node-hours saved per week, stacked by
cluster; bottom: the nodes asleep over the last 7 days, one line per cluster.

Week labels are thinned to what fits the axis (`LABEL_SLOT_PX` each), so they stay apart at any
number of weeks; more than `MAX_SERIES` clusters draw the smaller ones as one "other clusters"
series, so the colours stay tellable apart.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import BinaryIO

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import DateFormatter, date2num
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from engine.savings.figures import ClusterTotal, SavingsReport, WeekSpan, asleep_series

WIDTH_PX, HEIGHT_PX, DPI = 1000, 600, 100
MAX_SERIES = 8
"""Clusters drawn as their own series; the rest are summed as "other clusters"."""
LABEL_SLOT_PX = 64
"""Horizontal room one week label needs ("12 Oct" at 9 pt is about 40 px) plus a gap."""
COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#c62828", "#6a1b9a", "#00838f", "#8d6e63", "#ad1457")
OTHERS_COLOUR = "#9e9e9e"
PARTIAL_HATCH = "///"
BAR_WIDTH = 0.7


@dataclass(frozen=True, slots=True)
class Series:
    """One coloured series: a cluster, or the clusters beyond `MAX_SERIES` summed."""

    label: str
    clusters: tuple[str, ...]
    colour: str
    node_hours: float
    money: float | None
    unpriced_node_hours: float


def money_text(amount: float, currency: str | None) -> str:
    return f"{amount:,.2f} {currency}" if currency else f"{amount:,.2f} (no currency configured)"


def series_of(report: SavingsReport) -> list[Series]:
    """The chart's series, biggest saving first."""
    totals = report.cluster_totals()
    shown = totals if len(totals) <= MAX_SERIES else totals[: MAX_SERIES - 1]
    series = [
        Series(
            _legend(t.cluster, [t], report.currency),
            (t.cluster,),
            COLOURS[i % len(COLOURS)],
            t.node_hours,
            t.money,
            t.unpriced_node_hours,
        )
        for i, t in enumerate(shown)
    ]
    rest = totals[len(shown) :]
    if rest:
        priced = [t.money for t in rest if t.money is not None]
        series.append(
            Series(
                _legend(f"{len(rest)} other clusters", rest, report.currency),
                tuple(t.cluster for t in rest),
                OTHERS_COLOUR,
                sum(t.node_hours for t in rest),
                sum(priced) if priced else None,
                sum(t.unpriced_node_hours for t in rest),
            )
        )
    return series


def title_lines(report: SavingsReport) -> tuple[str, str]:
    first = report.since or min((p.start for p in report.periods), default=report.until)
    clusters = report.clusters()
    who = clusters[0] if len(clusters) == 1 else f"{len(clusters)} clusters"
    money = report.money
    total = f"{report.node_hours:,.1f} node-hours" + (
        f", {money_text(money, report.currency)}" if money is not None else ", no prices configured"
    )
    return (
        f"Saved by sleeps on {who}: {total}",
        f"{first.astimezone(report.tz):%d %b %Y %H:%M} to {report.until.astimezone(report.tz):%d %b %Y %H:%M}"
        f" · weeks start Monday "
        f"00:00 {report.zone_name}",
    )


def legend_title(report: SavingsReport) -> str:
    if report.money is None:
        return "Saved per cluster: node-hours (no prices configured)"
    unit = report.currency or "the prices (no currency configured)"
    return f"Saved per cluster: node-hours, money in {unit}"


def week_label(span: WeekSpan) -> str:
    return f"{span.week.day} {span.week:%b}"


def partial_label(span: WeekSpan) -> str:
    """The marker over a partial week's bar: how far the report covers it."""
    if span.start > _week_begin(span):
        return f"partial\nfrom {span.start:%a %H:%M}"
    return f"partial\nto {span.end:%a %H:%M}"


def weekly_chart(report: SavingsReport) -> Figure:
    figure = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    weeks_axes, days_axes = figure.subplots(2, 1, height_ratios=(3, 2))
    head, span_line = title_lines(report)
    figure.suptitle(f"{head}\n{span_line}", fontsize=11)
    series = series_of(report)
    spans = report.week_spans()
    _draw_weeks(weeks_axes, report, series, spans)
    _draw_last_days(days_axes, report, series)
    if series:
        figure.legend(
            handles=[Patch(facecolor=s.colour, label=s.label) for s in series],
            loc="outside lower center",
            ncols=min(len(series), 3),
            fontsize=8,
            title=legend_title(report),
            title_fontsize=8,
        )
    else:
        weeks_axes.text(
            0.5, 0.5, "no sleeps recorded in this span", ha="center", transform=weeks_axes.transAxes
        )
    figure.canvas.draw()  # the axis width is known only once laid out: thin the labels to fit it
    _thin_week_labels(weeks_axes, len(spans))
    return figure


def _draw_weeks(
    axes: Axes, report: SavingsReport, series: Sequence[Series], spans: Sequence[WeekSpan]
) -> None:
    by_cluster = report.weekly_by_cluster()
    x = list(range(len(spans)))
    bottoms = [0.0] * len(spans)
    partial = [s.partial for s in spans]
    for s in series:
        heights = [sum(by_cluster.get(c, {}).get(span.week, 0.0) for c in s.clusters) for span in spans]
        bars = axes.bar(x, heights, bottom=bottoms, color=s.colour, label=s.label, width=BAR_WIDTH)
        for bar, is_partial in zip(bars.patches, partial, strict=True):
            if is_partial:
                bar.set_hatch(PARTIAL_HATCH)
                bar.set_alpha(0.55)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    top = max(bottoms, default=0.0)
    for i, span in enumerate(spans):
        if span.partial:
            # Over the bar, kept inside the picture: the outermost bars' marks lean inwards.
            edge, align = (
                (i + BAR_WIDTH / 2, "right")
                if i == len(spans) - 1 and i > 0
                else (i - BAR_WIDTH / 2, "left")
                if i == 0 and len(spans) > 1
                else (i, "center")
            )
            axes.annotate(
                partial_label(span),
                (edge, bottoms[i]),
                xytext=(0, 3),
                textcoords="offset points",
                ha=align,
                va="bottom",
                fontsize=7,
                gid="partial-week",
            )
    axes.set_ylim(0, top * 1.18 if top > 0 else 1)
    axes.set_xticks(x, [week_label(s) for s in spans])
    axes.set_xlim(-0.6, max(len(spans) - 0.4, 0.6))
    axes.tick_params(axis="x", labelsize=9)
    axes.set_title("Node-hours saved per week", fontsize=10)
    axes.set_xlabel(f"week starting Monday ({report.zone_name})", fontsize=9)
    axes.set_ylabel("node-hours")


def _draw_last_days(axes: Axes, report: SavingsReport, series: Sequence[Series]) -> None:
    """Stacked bands, one per series: each band's height is its clusters' nodes asleep, the top
    line the total (lines of clusters sleeping at the same hours would hide each other)."""
    start = report.until - timedelta(days=7)
    steps = [asleep_series(report, start, report.until, s.clusters) for s in series]
    instants = sorted({at for one in steps for at, _ in one} | {start, report.until})
    x = date2num(instants)  # type: ignore[no-untyped-call]
    below = [0] * len(instants)
    for s, one in zip(series, steps, strict=True):
        counts = _sample(one, instants)
        above = [b + c for b, c in zip(below, counts, strict=True)]
        axes.fill_between(x, below, above, step="post", color=s.colour, linewidth=0, label=s.label)
        below = above
    axes.set_title("Nodes asleep, last 7 days (stacked by cluster)", fontsize=10)
    axes.set_ylabel("nodes")
    axes.set_xlabel(f"time ({report.zone_name})", fontsize=9)
    axes.set_xlim(x[0], x[-1])
    axes.set_ylim(0, max(max(below, default=0) * 1.1, 1))
    axes.xaxis.set_major_formatter(DateFormatter("%a %d", tz=report.tz))  # type: ignore[no-untyped-call]
    axes.tick_params(axis="x", labelsize=9)


def _sample(steps: Sequence[tuple[datetime, int]], instants: Sequence[datetime]) -> list[int]:
    """The step function `steps` (count from each instant on) read at each of `instants`."""
    out, i, count = [], 0, 0
    for at in instants:
        while i < len(steps) and steps[i][0] <= at:
            count = steps[i][1]
            i += 1
        out.append(count)
    return out


def _thin_week_labels(axes: Axes, weeks: int) -> None:
    """Keep every n-th week label, n chosen so that each label has `LABEL_SLOT_PX` of the axis."""
    if weeks == 0:
        return
    width_px = axes.get_window_extent().width
    fits = max(1, int(width_px // LABEL_SLOT_PX))
    step = math.ceil(weeks / fits)
    # The newest week is always labelled: count back from it.
    for i, label in enumerate(axes.get_xticklabels()):
        label.set_visible((weeks - 1 - i) % step == 0)


def _legend(name: str, totals: Sequence[ClusterTotal], currency: str | None) -> str:
    hours = sum(t.node_hours for t in totals)
    priced = [t.money for t in totals if t.money is not None]
    text = f"{name}: {hours:,.1f} node-h"
    if priced:
        text += f", {sum(priced):,.2f}" + (f" {currency}" if currency else "")
        unpriced = sum(t.unpriced_node_hours for t in totals)
        if unpriced:
            text += f" ({unpriced:,.1f} node-h unpriced)"
    return text


def _week_begin(span: WeekSpan) -> datetime:
    return datetime.combine(span.week, time(), tzinfo=span.start.tzinfo)


def write_png(report: SavingsReport, path: Path | BinaryIO) -> None:
    """The chart as a PNG of WIDTH_PX by HEIGHT_PX pixels."""
    weekly_chart(report).savefig(path, format="png", dpi=DPI)


def png_bytes(report: SavingsReport) -> bytes:
    out = io.BytesIO()
    write_png(report, out)
    return out.getvalue()

"""The savings chart as a manager reads it, checked on the drawn figure (matplotlib's Agg canvas):
one series per cluster with a legend, money per cluster and in total with the currency, the time
zone the weeks start in, the partial current week marked, and week labels that do not overlap,
measured from the rendered labels' extents at 1, 8, 12, 26 and 52 weeks. The history is several
clusters' nightly sleeps saved in a real SQLite file and read back read-only, as the CLI reads it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from matplotlib.collections import FillBetweenPolyCollection, PolyCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.text import Annotation

from bot.cli.report import text_lines
from bot.text.savings_chart import PARTIAL_HATCH, weekly_chart
from engine.domain.operation import Operation, OpKind
from engine.savings.figures import SavingsReport, savings
from engine.store.database import Store
from engine.store.readonly import read_operations_file
from tests.unit.engine.savings.test_savings import recorded_op

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 25, 14, 0, tzinfo=UTC)
"""A Wednesday, 15:00 in Berlin: the current week is partial."""
SIZES = {"prod-eu": 10, "prod-us": 6, "staging": 3}


def nights(weeks: int, clusters: dict[str, int]) -> list[Operation]:
    """Each cluster's web pool asleep every night 19:00-06:00 UTC for `weeks` weeks before NOW."""
    ops, n = [], 0
    for cluster, size in clusters.items():
        night = (NOW - timedelta(weeks=weeks)).replace(hour=19)
        while night < NOW:
            for kind, at, sizes in (
                (OpKind.ZERO, night, (size, 0)),
                (OpKind.WAKE, night + timedelta(hours=11), (0, size)),
            ):
                if at < NOW:
                    n += 1
                    op = recorded_op(n, kind, at, {"web": sizes})
                    ops.append(replace(op, target=replace(op.target, cluster=cluster), created_at=at))
            night += timedelta(days=1)
    return ops


def report_of(
    tmp_path: Path,
    weeks: int,
    clusters: dict[str, int] = SIZES,
    *,
    prices: dict[tuple[str, str], float] | None = None,
    currency: str | None = None,
) -> SavingsReport:
    db = tmp_path / f"history-{len(list(tmp_path.glob('*.db')))}.db"
    store = Store(db)
    for op in nights(weeks, clusters):
        store.insert_operation(op)
    store.close()
    ops = read_operations_file(str(db))
    return savings(
        ops, now=NOW, tz=BERLIN, since=NOW - timedelta(weeks=weeks), prices=prices, currency=currency
    )


def legend_texts(figure: Figure) -> list[str]:
    [legend] = figure.legends
    return [t.get_text() for t in legend.get_texts()]


def title(figure: Figure) -> str:
    suptitle = figure.get_suptitle()
    assert isinstance(suptitle, str)
    return suptitle


def test_one_series_per_cluster_in_both_panels_with_a_legend(tmp_path: Path) -> None:
    report = report_of(tmp_path, 8)
    figure = weekly_chart(report)
    weeks_axes, days_axes = figure.axes

    bars = [c for c in weeks_axes.containers if isinstance(c, BarContainer)]
    assert [b.get_label() for b in bars] == legend_texts(figure)
    assert [b.get_label().split(":")[0] for b in bars] == ["prod-eu", "prod-us", "staging"], "biggest first"
    by_cluster = report.weekly_by_cluster()
    spans = report.week_spans()
    for cluster, container in zip(("prod-eu", "prod-us", "staging"), bars, strict=True):
        heights = [patch.get_height() for patch in container.patches]
        assert heights == pytest.approx([by_cluster[cluster].get(s.week, 0.0) for s in spans])
    bands = [c for c in days_axes.collections if isinstance(c, FillBetweenPolyCollection | PolyCollection)]
    assert [b.get_label() for b in bands] == [b.get_label() for b in bars], "the same series below"
    top = bands[-1].get_paths()[0].vertices[:, 1].max()
    assert top == sum(SIZES.values()), "stacked: the top band ends at every cluster's nodes asleep"


def test_many_clusters_keep_tellable_colours_the_rest_summed(tmp_path: Path) -> None:
    clusters = {f"c{i:02d}": i + 1 for i in range(11)}
    report = report_of(tmp_path, 1, clusters)
    labels = legend_texts(weekly_chart(report))
    assert len(labels) == 8 and labels[-1].startswith("4 other clusters: ")
    assert [label.split(":")[0] for label in labels[:7]] == [f"c{i:02d}" for i in range(10, 3, -1)]


def test_money_per_cluster_and_in_total_with_the_currency(tmp_path: Path) -> None:
    prices = {("prod-eu", "web"): 0.5, ("prod-us", "web"): 0.25}  # staging has no price
    report = report_of(tmp_path, 2, prices=prices, currency="EUR")
    figure = weekly_chart(report)
    totals = {t.cluster: t for t in report.cluster_totals()}
    eu, us, staging = totals["prod-eu"], totals["prod-us"], totals["staging"]
    assert eu.money == pytest.approx(eu.node_hours * 0.5) and staging.money is None

    assert legend_texts(figure) == [
        f"prod-eu: {eu.node_hours:,.1f} node-h, {eu.money:,.2f} EUR",
        f"prod-us: {us.node_hours:,.1f} node-h, {us.money:,.2f} EUR",
        f"staging: {staging.node_hours:,.1f} node-h",
    ]
    assert report.money == pytest.approx((eu.money or 0) + (us.money or 0))
    assert f"{report.node_hours:,.1f} node-hours, {report.money:,.2f} EUR" in title(figure)
    assert "money in EUR" in figure.legends[0].get_title().get_text()

    lines = text_lines(report)
    assert any(line.startswith("prod-eu total") and line.endswith(f"{eu.money:,.2f} EUR") for line in lines)
    assert any(line.startswith("total ") and line.endswith(f"{report.money:,.2f} EUR") for line in lines)
    assert all(len(line) <= 80 for line in lines[:-3]), "the table fits 80 columns"
    data = report.to_json()
    assert data["currency"] == "EUR" and data["money"] == round(report.money or 0, 2)
    clusters = data["clusters"]
    assert isinstance(clusters, list)
    assert {c["cluster"]: c["money"] for c in clusters} == {
        "prod-eu": round(eu.money or 0, 2),
        "prod-us": round(us.money or 0, 2),
        "staging": None,
    }


def test_without_prices_or_currency_the_chart_says_so(tmp_path: Path) -> None:
    unpriced = weekly_chart(report_of(tmp_path, 1))
    assert "no prices configured" in title(unpriced)
    priced = report_of(tmp_path, 1, prices={("prod-eu", "web"): 0.5})
    assert "(no currency configured)" in title(weekly_chart(priced))


def test_the_time_zone_the_weeks_start_in_is_named(tmp_path: Path) -> None:
    report = report_of(tmp_path, 8)
    figure = weekly_chart(report)
    weeks_axes, days_axes = figure.axes
    assert "weeks start Monday 00:00 Europe/Berlin" in title(figure)
    assert weeks_axes.get_xlabel() == "week starting Monday (Europe/Berlin)"
    assert days_axes.get_xlabel() == "time (Europe/Berlin)"
    assert report.to_json()["time_zone"] == "Europe/Berlin"
    assert "Weeks start Monday 00:00 Europe/Berlin" in "\n".join(text_lines(report))
    # The bottom panel's day ticks are Berlin's days: a tick at Berlin midnight reads that day.
    formatter = days_axes.xaxis.get_major_formatter()
    from matplotlib.dates import date2num

    midnight = datetime(2026, 11, 24, 0, 0, tzinfo=BERLIN)  # 23:00 UTC the day before
    assert formatter(date2num(midnight)) == "Tue 24"  # type: ignore[no-untyped-call]


def test_the_partial_current_week_is_marked(tmp_path: Path) -> None:
    report = report_of(tmp_path, 8)
    spans = report.week_spans()
    assert [s.partial for s in spans] == [True] + [False] * 7 + [True], "since and now fall mid-week"
    assert spans[-1].end == NOW and spans[-1].week.isoformat() == "2026-11-23"

    figure = weekly_chart(report)
    weeks_axes = figure.axes[0]
    for container in weeks_axes.containers:
        assert isinstance(container, BarContainer)
        hatched = [patch.get_hatch() == PARTIAL_HATCH for patch in container.patches]
        assert hatched == [s.partial for s in spans]
    marks = [t for t in weeks_axes.texts if isinstance(t, Annotation) and t.get_gid() == "partial-week"]
    # `since` is 8 weeks back, still summer time in Berlin: 14:00 UTC is 16:00 there, 15:00 now.
    assert [m.get_text() for m in marks] == ["partial\nfrom Wed 16:00", "partial\nto Wed 15:00"]
    assert [round(m.xy[0]) for m in marks] == [0, len(spans) - 1], "over the partial weeks' bars"
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    for mark in marks:
        box = mark.get_window_extent(renderer)
        assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1, "the mark is inside the picture"
    assert "2026-11-23*" in "\n".join(text_lines(report))
    assert report.to_json()["partial_weeks"][-1] == {  # type: ignore[index]
        "week": "2026-11-23",
        "from": "2026-11-23T00:00:00+01:00",
        "to": "2026-11-25T15:00:00+01:00",
    }


@pytest.mark.parametrize("weeks", [1, 8, 12, 26, 52])
def test_week_labels_do_not_overlap(tmp_path: Path, weeks: int) -> None:
    report = report_of(tmp_path, weeks, {"prod-eu": 4, "staging": 2})
    figure = weekly_chart(report)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    weeks_axes = figure.axes[0]
    labels = [label for label in weeks_axes.get_xticklabels() if label.get_visible() and label.get_text()]
    boxes = [label.get_window_extent(renderer) for label in labels]
    assert all(box.width > 0 for box in boxes)
    for left, right in pairwise(boxes):
        assert left.x1 + 4 <= right.x0, f"labels {left} and {right} overlap or touch at {weeks} weeks"
    figure_box = figure.bbox
    assert boxes[0].x0 >= figure_box.x0 and boxes[-1].x1 <= figure_box.x1, "inside the picture"
    assert labels[-1].get_text() == f"{report.week_spans()[-1].week.day} Nov", "the current week is labelled"
    if weeks <= 12:
        assert len(labels) == len(report.week_spans()), "every week labelled up to 12 weeks"


def test_the_weekly_post_gives_the_money_in_the_currency(tmp_path: Path) -> None:
    from bot.slack.weekly_post import weekly_text

    report = report_of(tmp_path, 1, {"prod-eu": 10}, prices={("prod-eu", "web"): 0.5}, currency="EUR")
    last_week = [r for r in report.rows if r.week == report.weekly_totals()[-1][0]]
    money = sum(r.money or 0 for r in last_week)
    assert f"({money:,.2f} EUR)" in weekly_text("prod-eu", report)

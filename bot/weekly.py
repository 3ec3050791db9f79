"""The weekly savings post: a cluster's week in one message with the chart as an image.

The chart is uploaded with Slack's external upload flow (`files_upload_v2`:
files.getUploadURLExternal, the bytes to the URL it gives, files.completeUploadExternal sharing
the file in the channel with the message as its comment). Needs the `files:write` scope.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from bot.mrkdwn import escape
from engine.savings import SavingsReport, week_start

FILENAME = "scalebot-savings.png"


def weekly_text(cluster: str, report: SavingsReport) -> str:
    """The message: node-hours (and money) saved in the report's last week, and what it cannot know
    (escaped for mrkdwn: cluster and pool names are text from the configuration)."""
    weeks = report.weekly_totals()
    last_week, hours = weeks[-1] if weeks else (None, 0.0)
    money = sum(r.money for r in report.rows if r.week == last_week and r.money is not None)
    priced = any(r.money is not None for r in report.rows if r.week == last_week)
    lines = [
        f"Savings on {cluster}"
        + (f", week of {last_week.isoformat()}" if last_week else "")
        + f": {hours:,.1f} node-hours"
        + (f" ({money:,.2f} at the configured prices)" if priced else ""),
        f"Since {report.since.date().isoformat() if report.since else 'the first record'}: "
        f"{report.node_hours:,.1f} node-hours over {len(weeks)} week(s).",
    ]
    lines.extend(f"• {note}" for note in report.unknowns[1:])  # the first is the method, in the README
    return escape("\n".join(lines))


def home_line(report: SavingsReport) -> str:
    """The App Home's latest figures: node-hours saved this week and over the report's span."""
    weeks = dict(report.weekly_totals())
    this_week = week_start(report.until, UTC)
    return (
        f"Saved by sleeps: {weeks.get(this_week, 0.0):,.1f} node-hours this week, "
        f"{report.node_hours:,.1f} over the last {(report.until - (report.since or report.until)).days} days "
        "(`scalebot report savings` for pools, weeks and money)"
    )


def post_weekly(client: Any, channel: str, cluster: str, report: SavingsReport) -> dict[str, Any]:
    """Upload the chart into `channel` with the week's message as its comment; Slack's answer."""
    from bot.savings_chart import png_bytes  # matplotlib only where a chart is drawn

    response = client.files_upload_v2(
        channel=channel,
        file=png_bytes(report),
        filename=FILENAME,
        title=f"Node-hours saved per week on {cluster}",
        alt_txt=f"Bar chart: node-hours saved per week on {cluster}",
        initial_comment=weekly_text(cluster, report),
    )
    return dict(response.data)

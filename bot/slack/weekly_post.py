"""The weekly savings post: a cluster's week in one message with the chart as an image.

Sent by `scalebot report savings --post` and, for each cluster with `savings_report` in its
config, by `scalebot run`'s timer (`WeeklySavingsPoster`, armed by bot.runtime.apscheduler_timer): both
build the report with `cluster_report` and send it with `post_weekly`.

The chart is uploaded with Slack's external upload flow (`files_upload_v2`:
files.getUploadURLExternal, the bytes to the URL it gives, files.completeUploadExternal sharing
the file in the channel with the message as its comment). Needs the `files:write` scope.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from typing import Any

from bot.text.mrkdwn import escape
from engine.domain.operation import Operation
from engine.savings.figures import PoolKey, SavingsReport, savings, week_start
from engine.savings.weekly_post import SavingsPostSpec, due_week, next_post_at, report_span
from engine.schedules.core.spec import parse_zone
from engine.store.database import Store

log = logging.getLogger(__name__)

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
        + (f" ({money:,.2f} {report.currency or 'at the configured prices'})" if priced else ""),
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
    from bot.text.savings_chart import png_bytes  # matplotlib only where a chart is drawn

    response = client.files_upload_v2(
        channel=channel,
        file=png_bytes(report),
        filename=FILENAME,
        title=f"Node-hours saved per week on {cluster}",
        alt_txt=f"Bar chart: node-hours saved per week on {cluster}",
        initial_comment=weekly_text(cluster, report),
    )
    return dict(response.data)


def cluster_report(
    ops: Iterable[Operation],
    cluster: str,
    *,
    now: datetime,
    tz: tzinfo,
    since: datetime | None,
    prices: Mapping[PoolKey, float],
    currency: str | None = None,
) -> SavingsReport:
    """One cluster's report up to `now` (operations recorded later are not part of it)."""
    mine = [op for op in ops if op.target.cluster == cluster and op.created_at < now]
    return savings(mine, now=now, tz=tz, since=since, prices=prices, currency=currency)


HISTORY_READ = 5000
"""Operations of one cluster read for a post: months of nightly sleeps and wakes."""


@dataclass(frozen=True, slots=True)
class PostedWeek:
    cluster: str
    week: date
    channel: str


class WeeklySavingsPoster:
    """`scalebot run`'s weekly savings posts: when each is due (engine.savings.weekly_post) and sending it.

    A post is claimed in the store before it is sent, so a second tick or a restart in the same
    week finds it claimed and sends nothing; a post Slack refuses gives its claim back (the next
    start tries again) and is not retried by this process before the next week, so a refusal
    never turns into a loop."""

    def __init__(
        self,
        specs: Mapping[str, SavingsPostSpec],
        store: Store,
        client: Callable[[], Any],
        prices: Mapping[PoolKey, float],
        currency: str | None = None,
    ) -> None:
        self.specs = dict(specs)
        self.store = store
        self._client = client
        self._prices = dict(prices)
        self._currency = currency
        self._refused: dict[str, date] = {}

    def next_wakeups(self, now: datetime) -> list[datetime]:
        """One instant per cluster: its owed post (past instants are due at once), else next week's."""
        return sorted(
            next_post_at(spec, now, max(self._last(cluster), self._refused.get(cluster), key=_order))
            for cluster, spec in self.specs.items()
        )

    def run_due(self, now: datetime) -> list[PostedWeek]:
        """Send every post due at `now`; the weeks posted."""
        posted: list[PostedWeek] = []
        for cluster, spec in sorted(self.specs.items()):
            previous = self._last(cluster)
            week = due_week(spec, now, max(previous, self._refused.get(cluster), key=_order))
            if week is None or not self.store.claim_savings_week(cluster, week, at=now):
                continue
            if self._send(cluster, spec, week):
                posted.append(PostedWeek(cluster, week, spec.channel))
            else:
                self.store.release_savings_week(cluster, week, previous)
                self._refused[cluster] = week
        return posted

    def _last(self, cluster: str) -> date | None:
        return self.store.savings_post_week(cluster)

    def _send(self, cluster: str, spec: SavingsPostSpec, week: date) -> bool:
        from slack_sdk.errors import SlackClientError

        since, until = report_span(spec, week)
        ops = self.store.list_operations(cluster=cluster, limit=HISTORY_READ)
        report = cluster_report(
            ops,
            cluster,
            now=until,
            tz=parse_zone(spec.tz),
            since=since,
            prices=self._prices,
            currency=self._currency,
        )
        try:
            post_weekly(self._client(), spec.channel, cluster, report)
        except SlackClientError as exc:
            log.error("the weekly savings post of %s in %s failed: %s", cluster, spec.channel, exc)
            return False
        log.info("posted the savings of %s for the week before %s in %s", cluster, week, spec.channel)
        return True


def _order(week: date | None) -> date:
    return week or date.min

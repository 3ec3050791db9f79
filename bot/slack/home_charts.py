"""The savings chart of each cluster on the App Home tab: drawn and uploaded once a week, shown in
an image block that references the uploaded file (`slack_file: {"id": F…}`).

A Home chart covers the whole (UTC) weeks before the current one, so the file uploaded at the first
Home build of a week is true for the rest of that week: one upload per cluster per week, however
often Homes are opened or republished. The upload uses Slack's external flow (`files_upload_v2`:
files.getUploadURLExternal, the bytes, files.completeUploadExternal) without a channel: the file
stays private to scalebot, which publishes the views, and no channel gets a post. The file IDs are
kept in memory for the current week only (one entry per cluster; a restart uploads once more).

When there is no chart to show (no `files:write` scope, Slack refusing or unreachable, no sleeps in
those weeks) the Home keeps the figures as text and says why. A refused upload is not tried again
for `RETRY_AFTER`, so Homes built meanwhile neither wait on Slack nor spend its rate limits.
Slack finishes an upload asynchronously, and refuses (`invalid_blocks`) a view whose image names a
file it has not processed yet: `HomeTab` then publishes the view without the images (`unshown`)
and tells this cache (`refused`), which waits `PROCESSING_GRACE` before counting that as a refusal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

from bot.slack.blocks.views import HomeChart
from bot.slack.weekly_post import cluster_report
from engine.domain.clock import SystemClock
from engine.domain.operation import Operation
from engine.savings.figures import PoolKey, week_start

log = logging.getLogger(__name__)

CHART_WEEKS = 4
"""Whole weeks a Home chart covers (the figures line beside it counts the days up to now)."""
RETRY_AFTER = timedelta(minutes=30)
PROCESSING_GRACE = timedelta(minutes=2)
"""How long after its upload a refused image counts as Slack still processing the file."""
FILENAME = "scalebot-home-savings.png"
_ERROR_CHARS = 60
PROCESSING_NOTE = "The chart is still being processed by Slack; it shows at the next refresh."


class FilesApi(Protocol):
    def files_upload_v2(self, *, file: bytes, filename: str, title: str, alt_txt: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Entry:
    week: date
    chart: HomeChart
    uploaded_at: datetime | None = None
    retry_at: datetime | None = None
    """For a chart not shown: when to try again (None: not before next week)."""


def chart_span(now: datetime) -> tuple[date, datetime, datetime]:
    """(the current UTC week's Monday, since, until) of the chart shown during that week."""
    week = week_start(now, UTC)
    until = datetime.combine(week, time(), tzinfo=UTC)
    return week, until - timedelta(weeks=CHART_WEEKS), until


def refusal_note(error: str, retry_at: datetime) -> str:
    """Why the chart is not shown, and when it is tried again (`error`: Slack's error code)."""
    again = f"tried again after {retry_at:%H:%M} UTC"
    if error == "missing_scope":
        return (
            "Chart not shown: scalebot's Slack app lacks the files:write scope it uploads charts "
            f"with (add it to the app and reinstall it); {again}."
        )
    if error:
        return f"Chart not shown: Slack refused its upload ({error[:_ERROR_CHARS]}); {again}."
    return f"Chart not shown: Slack could not be reached for its upload; {again}."


class HomeCharts:
    def __init__(
        self,
        client: FilesApi,
        *,
        clock: Callable[[], datetime] | None = None,
        retry_after: timedelta = RETRY_AFTER,
        prices: Mapping[PoolKey, float] | None = None,
        currency: str | None = None,
    ) -> None:
        self._client, self._clock, self._retry_after = client, clock or SystemClock().now, retry_after
        self._prices, self._currency = dict(prices or {}), currency
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        """Cluster -> its chart of the current week (entries of past weeks are dropped)."""
        self._uploading: dict[str, threading.Lock] = {}
        """Cluster -> held while its chart is drawn and uploaded: two Homes built at once upload once."""

    def chart(self, cluster: str, history: Iterable[Operation]) -> HomeChart:
        """The cluster's chart of this week: uploaded at the first call of the week, then cached."""
        with self._lock:
            uploading = self._uploading.setdefault(cluster, threading.Lock())
        with uploading:
            now = self._clock()
            week, since, until = chart_span(now)
            with self._lock:
                entry = self._entries.get(cluster)
            if entry is not None and entry.week == week and (entry.retry_at is None or now < entry.retry_at):
                return entry.chart
            entry = self._make(cluster, history, week=week, since=since, until=until, now=now)
            with self._lock:
                self._entries = {c: e for c, e in self._entries.items() if e.week == week}
                self._entries[cluster] = entry
            return entry.chart

    def refused(self, file_ids: Iterable[str]) -> tuple[dict[str, HomeChart], bool]:
        """Slack refused a view showing these files: what to show in their place (file ID -> note),
        and whether a later publish may show them. Within `PROCESSING_GRACE` of its upload a file
        is taken to be still in Slack's processing; past it, the chart turns into a note and is
        uploaded again after `retry_after`."""
        ids, now = set(file_ids), self._clock()
        shown: dict[str, HomeChart] = {}
        with self._lock:
            for cluster, entry in list(self._entries.items()):
                file_id = entry.chart.file_id
                if file_id not in ids or entry.uploaded_at is None:
                    continue
                if now - entry.uploaded_at < PROCESSING_GRACE:
                    shown[file_id] = HomeChart(note=PROCESSING_NOTE)
                    continue
                retry_at = now + self._retry_after
                note = (
                    "Chart not shown: Slack refused to show the uploaded file; "
                    f"uploaded again after {retry_at:%H:%M} UTC."
                )
                self._entries[cluster] = replace(entry, chart=HomeChart(note=note), retry_at=retry_at)
                shown[file_id] = HomeChart(note=note)
        return shown, any(c.note == PROCESSING_NOTE for c in shown.values())

    def _make(
        self,
        cluster: str,
        history: Iterable[Operation],
        *,
        week: date,
        since: datetime,
        until: datetime,
        now: datetime,
    ) -> _Entry:
        from slack_sdk.errors import SlackApiError

        from bot.text.savings_chart import png_bytes  # matplotlib only where a chart is drawn

        report = cluster_report(
            history, cluster, now=until, tz=UTC, since=since, prices=self._prices, currency=self._currency
        )
        if not report.periods:
            note = f"No chart: no sleeps recorded in the {CHART_WEEKS} weeks before {week.isoformat()}."
            return _Entry(week, HomeChart(note=note))
        title = f"{cluster}: node-hours saved per week, {CHART_WEEKS} weeks to {week.isoformat()}"
        money = report.money
        alt = (
            f"Chart of {cluster}: nodes asleep over the week before {week.isoformat()} (sleeps "
            f"shaded) and node-hours saved per week (weeks from Monday 00:00 UTC), "
            f"{report.node_hours:,.1f} in all"
            + ("" if money is None else f", {money:,.2f} {report.currency or 'at the configured prices'}")
        )
        retry_at = now + self._retry_after
        try:
            response = self._client.files_upload_v2(
                file=png_bytes(report), filename=FILENAME, title=title, alt_txt=alt
            )
            file_id = str(response["file"]["id"])
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            log.warning("the Home chart of %s was not uploaded: %s", cluster, error or exc)
            return _Entry(week, HomeChart(note=refusal_note(error or "error", retry_at)), retry_at=retry_at)
        except Exception:  # unreachable, timed out, an answer without a file: the Home goes on
            log.warning("the Home chart of %s was not uploaded", cluster, exc_info=True)
            return _Entry(week, HomeChart(note=refusal_note("", retry_at)), retry_at=retry_at)
        log.info("uploaded the Home chart of %s for the week of %s: %s", cluster, week, file_id)
        return _Entry(week, HomeChart(file_id=file_id, title=title, alt_text=alt), uploaded_at=now)

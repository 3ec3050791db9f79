"""The App Home tab: for the person looking, each cluster they have a role on.

Published with `views.publish` when someone opens the tab (`app_home_opened`) and again when an
operation changes state, for the people who opened it in the last day. Building a view lists each
cluster's pools (seconds on a large cluster), so it runs on the bot's executor, never on a Bolt
listener thread; a person's tab is published at most once every `min_interval` seconds (changes in
between are folded into the next publish), which keeps views.publish (Tier 4) far from its limit.
Each cluster also shows what its sleeps saved: the figures of this week and of the last 28 days,
and the chart of the whole weeks before this one, an image uploaded once a week
(`bot.slack.home_charts`); without it, the figures stay as text and the Home says why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import UTC, timedelta
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError

from bot.ports import OperationsPort
from bot.slack import weekly_post as weekly
from bot.slack.blocks import views
from bot.slack.blocks.views import ClusterView, HomeChart
from bot.slack.dispatch import GroupResolver
from bot.slack.home_charts import PROCESSING_NOTE, HomeCharts
from engine.domain.clock import SystemClock
from engine.domain.operation import ProgressEvent
from engine.operations.policy import Role
from engine.savings.figures import savings

log = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 10.0
HOME_SAVINGS_SPAN = timedelta(days=28)
"""The Home tab's savings line covers the last four weeks (`scalebot report savings` goes further)."""
HISTORY_READ = 1000
"""Operations read per cluster for that line: four weeks of nightly sleeps and wakes, many times over."""
WATCH_SECONDS = 24 * 3600.0
"""After opening the tab, a person's Home is kept current this long."""


class HomeApi(Protocol):
    def views_publish(self, *, user_id: str, view: dict[str, Any]) -> Any: ...

    def chat_getPermalink(self, *, channel: str, message_ts: str) -> Any: ...  # noqa: N802 (Slack's name)

    def files_upload_v2(self, *, file: bytes, filename: str, title: str, alt_txt: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class _HomeContents:
    """What one person's Home shows, read once and rendered once (or twice, when Slack refuses
    the images of a first rendering)."""

    clusters: tuple[tuple[ClusterView, Role], ...]
    links: dict[str, str]
    saved: dict[str, str]
    charts: dict[str, HomeChart]


class HomeTab:
    def __init__(
        self,
        ops: OperationsPort,
        client: HomeApi,
        executor: Executor,
        *,
        groups: GroupResolver,
        min_interval: float = MIN_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        charts: HomeCharts | None = None,
    ) -> None:
        self._ops, self._client, self._executor, self._groups = ops, client, executor, groups
        self._charts = charts or HomeCharts(client)
        self._min_interval, self._clock = min_interval, clock
        self._lock = threading.Lock()
        self._watchers: dict[str, float] = {}
        """User -> when they last opened the tab."""
        self._published: dict[str, float] = {}
        self._scheduled: set[str] = set()
        """Users whose publish is queued or in flight."""
        self._dirty: set[str] = set()
        """Users whose Home changed while their publish was in flight."""
        self._links: dict[str, str] = {}

    def opened(self, user: str) -> None:
        with self._lock:
            self._watchers[user] = self._clock()
        self._schedule(user)

    def on_event(self, event: ProgressEvent) -> None:
        """The engine's listener: only state changes refresh Homes (never blocks, never raises)."""
        if event.kind not in ("state", "final"):
            return
        now = self._clock()
        with self._lock:
            users = [u for u, at in self._watchers.items() if now - at < WATCH_SECONDS]
        for user in users:
            self._schedule(user)

    def _schedule(self, user: str) -> None:
        with self._lock:
            if user in self._scheduled:
                self._dirty.add(user)  # queued or in flight: publish again after it, if in flight
                return
            self._scheduled.add(user)
            wait = max(0.0, self._published.get(user, float("-inf")) + self._min_interval - self._clock())
        if wait:
            timer = threading.Timer(wait, self._submit, args=(user,))
            timer.daemon = True
            timer.start()
        else:
            self._submit(user)

    def _submit(self, user: str) -> None:
        try:
            self._executor.submit(self._publish, user)
        except RuntimeError:  # the bot is stopping: its executor takes no more work
            log.debug("not publishing %s's Home tab: shutting down", user)

    def _publish(self, user: str) -> None:
        with self._lock:
            self._dirty.discard(user)  # changes from now on are either in this view or redone
        retry = False
        try:
            contents = self._contents(user)
            try:
                self._client.views_publish(user_id=user, view=self._render(user, contents))
            except SlackApiError as exc:
                shown = [c.file_id for c in contents.charts.values() if c.file_id]
                if not shown or _error(exc) != "invalid_blocks":
                    raise
                # Slack has not finished processing a chart it was given (or lost it): the Home
                # goes out without the images now; while Slack is still processing, it is
                # published again after the interval.
                instead, retry = self._charts.refused(shown)
                charts = {
                    cluster: instead.get(chart.file_id, HomeChart(note=PROCESSING_NOTE))
                    if chart.file_id
                    else chart
                    for cluster, chart in contents.charts.items()
                }
                without = self._render(user, replace(contents, charts=charts))
                self._client.views_publish(user_id=user, view=without)
        except Exception:
            log.exception("could not publish the Home tab", extra={"user": user})
        finally:
            # The interval counts from the end of this call, so two publishes are never closer.
            with self._lock:
                self._published[user] = self._clock()
                self._scheduled.discard(user)
                if retry:
                    self._dirty.add(user)
                again = user in self._dirty
            if again:
                self._schedule(user)

    def view(self, user: str) -> dict[str, Any]:
        return self._render(user, self._contents(user))

    def _contents(self, user: str) -> _HomeContents:
        groups = self._groups(user)
        mine = []
        for cluster in self._ops.clusters():
            role = self._ops.role(cluster, user, groups)
            if role is not None:
                mine.append((self._ops.status(cluster), role))
        links = {op.id: self._link(op.channel, op.message_ts) for s, _ in mine for op in s.running}
        now = SystemClock().now()
        saved: dict[str, str] = {}
        charts: dict[str, HomeChart] = {}
        for status, _ in mine:
            history = self._ops.list_operations(cluster=status.cluster, limit=HISTORY_READ)
            report = savings(history, now=now, tz=UTC, since=now - HOME_SAVINGS_SPAN)
            saved[status.cluster] = weekly.home_line(report)
            charts[status.cluster] = self._charts.chart(status.cluster, history)
        return _HomeContents(tuple(mine), {k: v for k, v in links.items() if v}, saved, charts)

    def _render(self, user: str, contents: _HomeContents) -> dict[str, Any]:
        message = views.home_view(user, contents.clusters, contents.links, contents.saved, contents.charts)
        return {"type": "home", "blocks": message.block_dicts()}

    def _link(self, channel: str, ts: str) -> str:
        if not channel or not ts:
            return ""
        key = f"{channel}/{ts}"
        with self._lock:
            known = self._links.get(key)
        if known is not None:
            return known
        try:
            url = str(self._client.chat_getPermalink(channel=channel, message_ts=ts)["permalink"])
        except Exception:
            log.info("no permalink for %s", key, exc_info=True)
            return ""
        with self._lock:
            self._links[key] = url
        return url


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error", "")) if exc.response is not None else ""

"""The savings chart on the App Home tab, through the product's own Bolt app and WebClient.

Covers: a Home opened for a cluster with sleeps in the weeks before this one carries the week's
figures and an image block referencing the file uploaded with Slack's upload flow (not shared in
any channel); the uploaded PNG is the chart of that span's report; a second Home (another person's,
the same cluster) does not upload again; a cluster without sleeps says so instead; without the
`files:write` scope the figures stay as text, the Home says why and Homes opened meanwhile do not
ask Slack again; a view Slack refuses because it has not processed the file yet goes out without
the image at once and with it at the next publish; the next week uploads that week's chart, and a
refused upload is tried again only after the retry interval.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from matplotlib.image import imread

from bot.slack.app import web_client
from bot.slack.dispatch import no_groups
from bot.slack.home import HomeTab
from bot.slack.home_charts import PROCESSING_NOTE, RETRY_AFTER, HomeCharts, chart_span
from bot.slack.weekly_post import cluster_report
from bot.text.savings_chart import HEIGHT_PX, WIDTH_PX, png_bytes
from engine.domain.clock import SystemClock
from engine.domain.operation import Operation, OpKind
from tests.slack.conftest import APPROVER, VIEWER, RunningBot, make_settings
from tests.slack.harness import Call, SlackApiServer, post
from tests.slack.test_conversation import home_text
from tests.unit.engine.savings.test_savings import recorded_op

UPLOAD_STEPS = ("files.getUploadURLExternal", "upload", "files.completeUploadExternal")


def dev_eu_slept(at: datetime) -> list[Operation]:
    """Two nodes of dev-eu asleep for 24 hours from `at`."""
    ops = [
        recorded_op(1, OpKind.ZERO, at, {"web": (2, 0)}),
        recorded_op(2, OpKind.WAKE, at + timedelta(days=1), {"web": (0, 2)}),
    ]
    return [replace(op, target=replace(op.target, cluster="dev-eu")) for op in ops]


def record(bot: RunningBot, ops: list[Operation]) -> None:
    for op in ops:
        bot.ops.store.insert_operation(op)


def open_home(bot: RunningBot, user: str) -> None:
    body = bot.signer.event({"type": "app_home_opened", "user": user, "channel": "D0APP", "tab": "home"})
    headers = {**bot.signer.headers(body), "Content-Type": "application/json"}
    assert post(bot.events_url, body, headers).status == 200


def publishes(api: SlackApiServer, user: str, count: int) -> list[Call]:
    api.wait_for(
        lambda cs: len([c for c in cs if c.method == "views.publish" and c.body["user_id"] == user]) >= count,
        timeout=20,
        what=f"{count} views.publish for {user}",
    )
    return [c for c in api.calls_to("views.publish") if c.body["user_id"] == user]


def images(call: Call) -> list[dict[str, Any]]:
    view = call.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    return [b for b in view["blocks"] if b["type"] == "image"]


def upload_calls(api: SlackApiServer) -> list[Call]:
    return [c for c in api.calls if c.method in UPLOAD_STEPS]


def test_the_home_shows_the_weeks_chart_uploaded_once_for_every_home(bot: RunningBot) -> None:
    history = dev_eu_slept(SystemClock().now() - timedelta(days=10))  # in the whole weeks before this one
    record(bot, history)

    open_home(bot, APPROVER)
    [first] = publishes(bot.api, APPROVER, 1)
    open_home(bot, VIEWER)  # another person, the same cluster
    [second] = publishes(bot.api, VIEWER, 1)

    assert [c.method for c in upload_calls(bot.api)] == list(UPLOAD_STEPS), "one upload in all"
    asked, upload, complete = upload_calls(bot.api)
    assert json.loads(complete.body["files"])[0]["id"] == upload.body["file_id"]
    assert "channel_id" not in complete.body and "channels" not in complete.body, "shared in no channel"
    assert bot.api.calls_to("chat.postMessage") == []
    for published in (first, second):
        [image] = images(published)
        assert image["slack_file"] == {"id": upload.body["file_id"]}
        assert image["title"]["text"].startswith("dev-eu: node-hours saved per week")
        assert "48.0 in all" in image["alt_text"]
        assert "Saved by sleeps: 0.0 node-hours this week, 48.0 over the last 28 days" in home_text(published)
    assert "No chart: no sleeps recorded in the 4 weeks before" in home_text(first), "prod has none"

    _, since, until = chart_span(SystemClock().now())
    report = cluster_report(history, "dev-eu", now=until, tz=UTC, since=since, prices={})
    assert report.node_hours == 48.0
    assert upload.body["data"] == png_bytes(report), "the chart of the weeks before this one"
    assert imread(io.BytesIO(upload.body["data"]), format="png").shape[:2] == (HEIGHT_PX, WIDTH_PX)
    assert int(asked.body["length"]) == len(upload.body["data"])


def test_without_the_files_write_scope_the_home_keeps_the_figures_and_says_why(bot: RunningBot) -> None:
    record(bot, dev_eu_slept(SystemClock().now() - timedelta(days=10)))
    bot.api.fail("files.getUploadURLExternal", status=200, error="missing_scope")

    open_home(bot, APPROVER)
    [published] = publishes(bot.api, APPROVER, 1)
    open_home(bot, VIEWER)
    [other] = publishes(bot.api, VIEWER, 1)

    for call in (published, other):
        text = home_text(call)
        assert images(call) == []
        assert "Saved by sleeps: 0.0 node-hours this week, 48.0 over the last 28 days" in text
        assert "Chart not shown: scalebot's Slack app lacks the files:write scope" in text, text
    assert len(bot.api.calls_to("files.getUploadURLExternal")) == 1, "not asked again meanwhile"
    assert bot.api.calls_to("upload") == [] and bot.api.calls_to("files.completeUploadExternal") == []


def test_a_chart_slack_has_not_processed_yet_shows_at_the_next_publish(bot: RunningBot) -> None:
    record(bot, dev_eu_slept(SystemClock().now() - timedelta(days=10)))
    home = HomeTab(bot.ops, bot.app.client, bot.executor, groups=no_groups, min_interval=0.2)
    bot.api.fail("views.publish", status=200, error="invalid_blocks")

    home.opened(VIEWER)
    refused, without, shown = publishes(bot.api, VIEWER, 3)

    assert refused.response == {"ok": False, "error": "invalid_blocks"} and len(images(refused)) == 1
    assert images(without) == [] and PROCESSING_NOTE in home_text(without)
    assert "Saved by sleeps:" in home_text(without)
    [image] = images(shown)
    assert image["slack_file"] == images(refused)[0]["slack_file"]
    assert len(bot.api.calls_to("files.getUploadURLExternal")) == 1


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def test_the_next_week_uploads_its_chart_and_a_refusal_waits_for_the_retry_interval(
    slack_api: SlackApiServer,
) -> None:
    monday = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    clock = Clock(monday)
    charts = HomeCharts(web_client(make_settings(slack_api)), clock=clock)
    history = dev_eu_slept(monday - timedelta(days=6))

    first = charts.chart("dev-eu", history)
    clock.at += timedelta(days=4)
    assert charts.chart("dev-eu", history) == first, "the same week: the same file"
    assert len(slack_api.calls_to("files.getUploadURLExternal")) == 1

    clock.at = monday + timedelta(days=7)
    slack_api.fail("files.getUploadURLExternal", status=200, error="ratelimited")
    refused = charts.chart("dev-eu", history)
    assert refused.file_id == "" and "Slack refused its upload (ratelimited)" in refused.note
    clock.at += RETRY_AFTER - timedelta(seconds=1)
    assert charts.chart("dev-eu", history) == refused
    assert len(slack_api.calls_to("files.getUploadURLExternal")) == 2

    clock.at += timedelta(seconds=1)
    second = charts.chart("dev-eu", history)
    assert second.file_id and second.file_id != first.file_id, "next week's chart, uploaded anew"
    assert len(slack_api.calls_to("files.getUploadURLExternal")) == 3


def test_the_home_chart_shows_money_with_the_configured_prices_and_currency(
    slack_api: SlackApiServer,
) -> None:
    monday = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    charts = HomeCharts(
        web_client(make_settings(slack_api)),
        clock=Clock(monday),
        prices={("dev-eu", "web"): 0.5},
        currency="EUR",
    )
    history = dev_eu_slept(monday - timedelta(days=6))

    chart = charts.chart("dev-eu", history)

    assert chart.file_id and chart.alt_text.endswith("48.0 in all, 24.00 EUR"), chart.alt_text
    _, since, until = chart_span(monday)
    priced = cluster_report(
        history, "dev-eu", now=until, tz=UTC, since=since, prices={("dev-eu", "web"): 0.5}, currency="EUR"
    )
    [upload] = slack_api.calls_to("upload")
    assert upload.body["data"] == png_bytes(priced), "the chart drawn with the prices (money in its legend)"

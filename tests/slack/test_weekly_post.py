"""The weekly savings post reaches the local Slack Web API through Slack's file-upload flow.

`files_upload_v2` of the product's own WebClient: files.getUploadURLExternal (with the PNG's
length), the bytes POSTed to the URL it answered, files.completeUploadExternal sharing the file in
the cluster's channel with the week's message; the uploaded bytes are the report's chart.
`report savings --post` does it per cluster; the App Home shows the latest figures.

`scalebot run`'s timer posts by itself for each cluster whose config has `savings_report`: the
job body called at the due time (a FakeClock) sends the week's post once, a second tick and a
restart in the same week send nothing, the next week posts again; an overdue post is armed in the
past and runs as soon as the timer starts; a post Slack refuses is not retried in a loop; without
the setting no job is armed.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from matplotlib.image import imread

from bot.config import settings as bot_settings
from bot.runtime.apscheduler_timer import SAVINGS_JOB_PREFIX, APSchedulerTimer
from bot.runtime.run import weekly_poster
from bot.slack.app import web_client
from bot.slack.weekly_post import FILENAME, post_weekly
from bot.text.savings_chart import HEIGHT_PX, WIDTH_PX, png_bytes
from engine.domain.clock import FakeClock, SystemClock
from engine.domain.operation import OpKind
from engine.savings.figures import savings
from engine.store.database import Store
from engine.store.readonly import read_operations_file
from tests.slack.conftest import APPROVER, CHANNEL, RunningBot, make_settings
from tests.slack.harness import SlackApiServer, post
from tests.slack.test_conversation import home_text
from tests.unit.bot.runtime.test_scheduler import build
from tests.unit.engine.savings.test_savings import BERLIN, NOW, REPO, record_history, recorded_op


def test_the_weekly_post_uploads_the_chart_with_slacks_three_steps(
    slack_api: SlackApiServer, tmp_path: Path
) -> None:
    db = record_history(tmp_path / "history.db")
    report = savings(read_operations_file(str(db)), now=NOW, tz=BERLIN, prices={("prod", "web"): 0.5})
    client = web_client(make_settings(slack_api))

    answer = post_weekly(client, CHANNEL, "prod", report)

    steps = [c for c in slack_api.calls if c.method.startswith("files.") or c.method == "upload"]
    assert [c.method for c in steps] == [
        "files.getUploadURLExternal",
        "upload",
        "files.completeUploadExternal",
    ]
    asked, upload, complete = steps
    data = upload.body["data"]
    assert asked.body["filename"] == FILENAME and int(asked.body["length"]) == len(data)
    assert upload.body["file_id"] == json.loads(complete.body["files"])[0]["id"] == answer["file"]["id"]
    assert complete.body["channel_id"] == CHANNEL
    comment = complete.body["initial_comment"]
    assert (
        "Savings on prod, week of 2026-10-26: 259.0 node-hours (102.50 at the configured prices)" in comment
    )
    assert "wake op-00000006 failed" in comment
    assert data == png_bytes(report), "the uploaded image is the report's chart"
    assert imread(io.BytesIO(data), format="png").shape[:2] == (HEIGHT_PX, WIDTH_PX)


@pytest.mark.parametrize("written", [CHANNEL, '"#platform"'], ids=["id", "name"])
def test_report_savings_post_sends_each_clusters_report_to_its_channel(
    slack_api: SlackApiServer, tmp_path: Path, written: str
) -> None:
    # A channel named in the config is posted to by its ID, looked up in Slack's channel list.
    slack_api.channel_list = [{"id": "C0OTHER", "name": "other"}, {"id": CHANNEL, "name": "platform"}]
    db = record_history(tmp_path / "history.db")
    config = tmp_path / "scalebot.yaml"
    config.write_text(
        f"clusters:\n  prod:\n    default_channel: {written}\n    node_hour_prices: {{web: 0.5}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SCALEBOT_", "KUBECONFIG"))}
    env |= {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "s3cr3t",
        "SLACK_API_URL": slack_api.url,
    }

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "report",
            "savings",
            "--db",
            str(db),
            "--config",
            str(config),
            "--tz",
            "Europe/Berlin",
            "--post",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert f"posted: prod's savings in {CHANNEL}" in done.stderr
    complete = slack_api.wait_for_call("files.completeUploadExternal")
    assert complete.body["channel_id"] == CHANNEL and "Savings on prod" in complete.body["initial_comment"]
    [upload] = slack_api.calls_to("upload")
    assert imread(io.BytesIO(upload.body["data"]), format="png").shape[:2] == (HEIGHT_PX, WIDTH_PX)


def test_report_savings_post_without_a_token_is_one_line_and_posts_nothing(
    slack_api: SlackApiServer, tmp_path: Path
) -> None:
    config = tmp_path / "scalebot.yaml"
    config.write_text(f"clusters:\n  prod:\n    default_channel: {CHANNEL}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SCALEBOT_", "KUBECONFIG"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "report",
            "savings",
            "--db",
            str(tmp_path / "none.db"),
            "--config",
            str(config),
            "--post",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "SLACK_API_URL": slack_api.url},
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "SLACK_BOT_TOKEN" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and slack_api.calls == []


def test_the_home_tab_shows_the_latest_savings(bot: RunningBot) -> None:
    now = SystemClock().now()
    slept, woke = now - timedelta(days=10), now - timedelta(days=9)  # 24 h with 2 nodes asleep
    for op in (
        recorded_op(1, OpKind.ZERO, slept, {"api": (2, 0)}),
        recorded_op(2, OpKind.WAKE, woke, {"api": (0, 2)}),
    ):
        bot.ops.store.insert_operation(replace(op, target=replace(op.target, cluster="dev-eu")))
    body = bot.signer.event({"type": "app_home_opened", "user": APPROVER, "channel": "D0APP", "tab": "home"})
    assert (
        post(bot.events_url, body, {**bot.signer.headers(body), "Content-Type": "application/json"}).status
        == 200
    )

    published = bot.api.wait_for_call("views.publish", timeout=10)

    text = home_text(published)
    assert "Saved by sleeps: 0.0 node-hours this week, 48.0 over the last 28 days" in text, text


MONDAY_0900_CET = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
"""The post of "Mon 09:00" Europe/Berlin in the week after HISTORY's last full week."""
WEEKLY = (
    f"clusters:\n  prod:\n    default_channel: {CHANNEL}\n    node_hour_prices: {{web: 0.5}}\n"
    "    savings_report: {schedule: Mon 09:00, timezone: Europe/Berlin}\n"
)


def load_config(slack_api: SlackApiServer, tmp_path: Path, text: str) -> bot_settings.Settings:
    config = tmp_path / "scalebot.yaml"
    config.write_text(text)
    env = {
        "SLACK_BOT_TOKEN": "xoxb-test-token",
        "SLACK_SIGNING_SECRET": "s3cr3t",
        "SLACK_API_URL": slack_api.url,
    }
    return bot_settings.load(config, env)


@contextmanager
def running_timer(
    db: Path, clock: FakeClock, settings: bot_settings.Settings, *, paused: bool = True
) -> Iterator[tuple[APSchedulerTimer, BackgroundScheduler]]:
    """`scalebot run`'s timer on `db` as `run` builds it (a start of the service)."""
    schedules = build(db, clock)
    timer = BackgroundScheduler(timezone=UTC)
    runner = APSchedulerTimer(
        schedules,
        clock,
        lambda note: None,
        lambda outcome: None,
        scheduler=timer,
        weekly=weekly_poster(settings, schedules.ops.store),
    )
    runner.start(paused=paused)
    try:
        yield runner, timer
    finally:
        runner.stop()
        schedules.ops.store.close()


def posts(slack_api: SlackApiServer) -> list[str]:
    return [c.body["initial_comment"] for c in slack_api.calls_to("files.completeUploadExternal")]


def test_run_posts_the_weekly_savings_at_its_time_once_per_week_even_after_a_restart(
    slack_api: SlackApiServer, tmp_path: Path
) -> None:
    db = record_history(tmp_path / "history.db")
    settings = load_config(slack_api, tmp_path, WEEKLY)
    clock = FakeClock(MONDAY_0900_CET - timedelta(minutes=1))

    with running_timer(db, clock, settings) as (runner, _):
        assert MONDAY_0900_CET in runner.armed()
        runner.fire_savings_due()
        assert posts(slack_api) == [], "not before its time"

        clock.advance(60)
        runner.fire_savings_due()
        runner.fire_savings_due()  # a second tick in the same week

    [upload] = slack_api.calls_to("upload")
    assert [c.method for c in slack_api.calls if c.method.startswith("files.") or c.method == "upload"] == [
        "files.getUploadURLExternal",
        "upload",
        "files.completeUploadExternal",
    ]
    [complete] = slack_api.calls_to("files.completeUploadExternal")
    assert complete.body["channel_id"] == CHANNEL
    assert json.loads(complete.body["files"])[0]["id"] == upload.body["file_id"]
    [comment] = posts(slack_api)
    assert comment.startswith(
        "Savings on prod, week of 2026-10-26: 259.0 node-hours (102.50 at the configured prices)\n"
        "Since 2026-09-07: 1,001.0 node-hours over 2 week(s)."
    ), comment
    assert imread(io.BytesIO(upload.body["data"]), format="png").shape[:2] == (HEIGHT_PX, WIDTH_PX)

    clock.advance(3600)
    with running_timer(db, clock, settings) as (runner, _):  # a restart later that Monday
        assert runner.armed()[-1] == MONDAY_0900_CET + timedelta(days=7), "armed for next week"
        runner.fire_savings_due()
        assert len(posts(slack_api)) == 1, "the week's post was claimed in the database"

        clock.advance(7 * 24 * 3600)
        runner.fire_savings_due()

    assert len(posts(slack_api)) == 2
    assert posts(slack_api)[1].startswith("Savings on prod, week of 2026-10-26: 259.0 node-hours"), (
        "the week after has no sleeps: the last week with savings is still named"
    )


def test_an_overdue_weekly_post_runs_as_soon_as_the_timer_starts(
    slack_api: SlackApiServer, tmp_path: Path
) -> None:
    db = record_history(tmp_path / "history.db")
    settings = load_config(slack_api, tmp_path, WEEKLY)
    clock = FakeClock(MONDAY_0900_CET + timedelta(hours=3))  # scalebot was down at 09:00

    with running_timer(db, clock, settings, paused=False):
        complete = slack_api.wait_for_call("files.completeUploadExternal", timeout=30)

    assert complete.body["channel_id"] == CHANNEL
    assert "week of 2026-10-26" in complete.body["initial_comment"]
    assert Store(db).savings_post_week("prod") == MONDAY_0900_CET.date()


def test_a_refused_weekly_post_is_not_retried_in_a_loop_and_the_next_start_tries_again(
    slack_api: SlackApiServer, tmp_path: Path
) -> None:
    db = record_history(tmp_path / "history.db")
    settings = load_config(slack_api, tmp_path, WEEKLY)
    clock = FakeClock(MONDAY_0900_CET)
    slack_api.fail("files.getUploadURLExternal", status=200, error="not_in_channel")

    with running_timer(db, clock, settings) as (runner, _):
        runner.fire_savings_due()
        assert runner.armed()[-1] == MONDAY_0900_CET + timedelta(days=7), "not re-armed for now"
        runner.fire_savings_due()
    assert len(slack_api.calls_to("files.getUploadURLExternal")) == 1 and posts(slack_api) == []

    with running_timer(db, clock, settings) as (runner, _):
        runner.fire_savings_due()
    assert len(posts(slack_api)) == 1, "the refused week's claim was given back"


def test_without_the_setting_no_weekly_post_is_armed(slack_api: SlackApiServer, tmp_path: Path) -> None:
    db = record_history(tmp_path / "history.db")
    settings = load_config(slack_api, tmp_path, f"clusters:\n  prod:\n    default_channel: {CHANNEL}\n")
    clock = FakeClock(MONDAY_0900_CET)

    with running_timer(db, clock, settings) as (runner, timer):
        assert runner.weekly is None
        assert not [job for job in timer.get_jobs() if job.id.startswith(SAVINGS_JOB_PREFIX)]
        runner.fire_savings_due()
    assert slack_api.calls_to("files.getUploadURLExternal") == []

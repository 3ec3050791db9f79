"""`scalebot report savings`: what the sleeps saved, from the operation history alone.

Reads the SQLite file read-only (it never migrates or writes it) and needs no kubeconfig; prices
per node-hour come from the config file when one is given (`clusters.<name>.node_hour_prices`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.cli import records as cli_read
from bot.cli.common import EXIT_OK
from bot.config import settings
from engine.domain.clock import SystemClock
from engine.domain.durations import parse_duration
from engine.domain.operation import Operation
from engine.savings.figures import PoolKey, SavingsReport, savings
from engine.store.readonly import read_operations_file


class ReportError(cli_read.ReadError):
    """Bad input: printed as one line by `bot.cli.main`, exit 2, nothing written."""


def cmd_savings(args: argparse.Namespace) -> int:
    now = SystemClock().now()
    tz = _zone(args.tz)
    since = _since(args.since, now, tz)
    loaded = _settings(args.config, require_slack=args.post)
    prices = loaded.node_hour_prices() if loaded else {}
    currency = loaded.currency if loaded else None
    png = Path(args.png) if args.png else None
    if png is not None and not png.parent.is_dir():
        raise ReportError(f"--png {args.png}: the directory {png.parent} does not exist")
    ops = read_operations_file(args.db)  # a StoreError (configuration: exit 2) names the file
    report = savings(ops, now=now, tz=tz, since=since, prices=prices, currency=currency)
    cli_read.emit(report.to_json(), args.output, lambda: text_lines(report))
    if png is not None:
        from bot.text.savings_chart import write_png

        write_png(report, png)
    if args.post and loaded is not None:
        _post(loaded, ops, now=now, tz=tz, since=since, prices=prices, currency=currency)
    return EXIT_OK


def _post(
    loaded: settings.Settings,
    ops: Sequence[Operation],
    *,
    now: datetime,
    tz: tzinfo,
    since: datetime | None,
    prices: Mapping[PoolKey, float],
    currency: str | None,
) -> None:
    """Each cluster's own report, in its default channel; a cluster without one is named on stderr."""
    from slack_sdk.errors import SlackApiError

    from bot.slack.app import web_client
    from bot.slack.directory import ChannelDirectory
    from bot.slack.weekly_post import cluster_report, post_weekly

    client = web_client(loaded)
    try:
        loaded = settings.with_channel_ids(loaded, ChannelDirectory(client).resolve)
    except settings.SettingsError as exc:
        raise ReportError(str(exc)) from None
    for cluster in sorted({op.target.cluster for op in ops}):
        channel = loaded.channel_for(cluster)
        if channel is None:
            print(f"not posted: cluster {cluster} has no default_channel in the config", file=sys.stderr)
            continue
        report = cluster_report(ops, cluster, now=now, tz=tz, since=since, prices=prices, currency=currency)
        try:
            post_weekly(client, channel, cluster, report)
        except SlackApiError as exc:
            raise ReportError(
                f"Slack refused the post of {cluster}'s savings in {channel}: {exc.response.get('error')}"
            ) from None
        print(f"posted: {cluster}'s savings in {channel}", file=sys.stderr)


def text_lines(report: SavingsReport) -> list[str]:
    """Rows per cluster, pool and week, each cluster's subtotal, and the total; money with the
    configured currency, weeks from Monday 00:00 in the report's zone, a partial week marked."""
    since = report.since.isoformat(timespec="seconds") if report.since else "the first record"
    currency = report.currency or ""
    shown = {r.week for r in report.rows}
    partial = {s.week: s for s in report.week_spans() if s.partial and s.week in shown}
    unit = currency or "the configured prices (no currency set)"
    money = f"money in {unit}" if report.money is not None else "no prices configured (node-hours only)"
    lines = [
        f"Savings from {since} to {report.until.isoformat(timespec='seconds')}",
        f"Weeks start Monday 00:00 {report.zone_name}; {money}",
        f"{'cluster':<16} {'pool':<16} {'week':<11} {'node-hours':>11} {'money':>14}",
    ]
    for total in sorted(report.cluster_totals(), key=lambda t: t.cluster):
        for r in (r for r in report.rows if r.cluster == total.cluster):
            week = r.week.isoformat() + ("*" if r.week in partial else "")
            hours = f"{r.node_hours:>11,.1f}"
            row = f"{r.cluster:<16} {r.pool:<16} {week:<11} {hours} {_money(r.money, currency):>14}"
            lines.append(row.rstrip())
        lines.append(
            f"{total.cluster + ' total':<45} {total.node_hours:>11,.1f} {_money(total.money, currency):>14}"
        )
    lines.append(f"{'total':<45} {report.node_hours:>11,.1f} {_money(report.money, currency):>14}")
    for span in partial.values():
        start, end = span.start.isoformat(timespec="minutes"), span.end.isoformat(timespec="minutes")
        lines.append(f"* partial week: {start} to {end}")
    lines.append("What this report cannot know:")
    lines.extend(f"- {note}" for note in report.unknowns)
    return lines


def _money(amount: float | None, currency: str) -> str:
    return "" if amount is None else f"{amount:,.2f} {currency}".rstrip()


def _zone(name: str) -> tzinfo:
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ReportError(f"--tz {name!r} is not a time zone (e.g. Europe/Berlin, UTC)") from None


def _since(text: str | None, now: datetime, tz: tzinfo) -> datetime | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        try:
            return now - parse_duration(text)
        except ValueError:
            raise ReportError(
                f"--since {text!r}: give a date or time (2026-03-01, 2026-03-01T18:00) or how long ago (28d)"
            ) from None
    return at if at.tzinfo else at.replace(tzinfo=tz)


def _settings(config: str | None, *, require_slack: bool) -> settings.Settings | None:
    """The config (prices, channels), if one is given; posting needs it and Slack's settings."""
    if not config and not os.environ.get("SCALEBOT_CONFIG"):
        if require_slack:
            raise ReportError("--post needs the config file (--config or $SCALEBOT_CONFIG) for the channels")
        return None
    return settings.load(config, os.environ, require_slack=require_slack)  # SettingsError: exit 2

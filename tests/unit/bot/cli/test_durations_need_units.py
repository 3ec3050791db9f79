"""A number without a unit is refused wherever a duration enters, never read as seconds.

`scalebot zero --graceful-window 5` used to end phase 1 after 5 seconds and force-delete the
rest; `request_ttl: 30` meant 30 seconds. Now each surface refuses it with the field's name and the
question "5s or 5m?", and changes nothing: the CLI exits 2 before it opens a cluster or the
database, the config file fails to load, a console (or Slack, tests/slack) command is answered
privately. "0" stays zero, as in Go and kubectl (`--timeout=0`).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.console import simulated_operations
from bot.config.settings import SettingsError, load
from engine.domain.clock import FakeClock
from engine.domain.durations import DurationError, parse_duration
from tests.unit.bot.cli.test_console import START, console

ENV = {"SLACK_BOT_TOKEN": "xoxb-1-secret", "SLACK_SIGNING_SECRET": "s3cr3t-signing"}


@pytest.mark.parametrize("text", ["5", "30", " 90 ", "1.5", "00030"])
def test_the_parser_refuses_a_bare_number(text: str) -> None:
    number = text.strip()
    with pytest.raises(DurationError, match=rf"a duration needs a unit — {number}s or {number}m\?"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        ("5s", timedelta(seconds=5)),
        ("1h30m", timedelta(minutes=90)),
    ],
)
def test_zero_and_numbers_with_units_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["zero", "--graceful-window", "5"], "--graceful-window"),
        (["zero", "--drain-timeout", "30"], "--drain-timeout"),
        (["wake", "--graceful-window", "5"], "--graceful-window"),
        (["scale", "web", "2", "--drain-timeout", "5"], "--drain-timeout"),
        (["consolidate", "--node-grace", "5"], "--node-grace"),
        (["plan", "consolidate", "--node-grace", "5"], "--node-grace"),
        (["drain", "node-1", "--timeout", "5"], "--timeout"),
        (["drain", "node-1", "--interval", "5"], "--interval"),
    ],
)
def test_a_cli_flag_without_a_unit_exits_2_before_touching_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    db = tmp_path / "scalebot.db"
    value = argv[-1]
    code = cli.main([*argv, "--kubeconfig", str(tmp_path / "no-such-kubeconfig"), *_db(argv, db)])

    assert code == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {flag}: a duration needs a unit — {value}s or {value}m?\n"
    assert captured.out == ""
    assert not db.exists(), "refused before the database was opened"


def _db(argv: list[str], db: Path) -> list[str]:
    return [] if argv[0] == "drain" else ["--db", str(db)]


@pytest.mark.parametrize(
    ("config", "path", "value"),
    [
        ("clusters: {dev: {policy: {request_ttl: 30}}}", "clusters.dev.policy.request_ttl", "30"),
        ("clusters: {dev: {consolidation: {node_grace: 5}}}", "clusters.dev.consolidation.node_grace", "5"),
        (
            "clusters: {dev: {consolidation: {empty_node_ttl: '10'}}}",
            "clusters.dev.consolidation.empty_node_ttl",
            "10",
        ),
        ("clusters: {dev: {consolidation: {interval: 60}}}", "clusters.dev.consolidation.interval", "60"),
        ("sender: {update_interval: 3}", "sender.update_interval", "3"),
    ],
)
def test_a_config_duration_without_a_unit_fails_to_load(
    tmp_path: Path, config: str, path: str, value: str
) -> None:
    file = tmp_path / "scalebot.yaml"
    file.write_text(config, encoding="utf-8")
    with pytest.raises(SettingsError) as refused:
        load(file, ENV)
    assert str(refused.value) == f"{path}: a duration needs a unit — {value}s or {value}m?"


def test_a_zero_duration_in_the_config_is_zero(tmp_path: Path) -> None:
    file = tmp_path / "scalebot.yaml"
    file.write_text("clusters: {dev: {consolidation: {node_grace: 0}}}", encoding="utf-8")
    assert load(file, ENV).clusters["dev"].policy.consolidation.node_grace == timedelta(0)


def test_a_console_wake_for_a_bare_number_is_refused_and_changes_nothing() -> None:
    ops = simulated_operations(clock=FakeClock(START))
    try:
        out = console(ops, "wake for 30\n")
        assert "(only you) ⚠️ `for 30`: a duration needs a unit — 30s or 30m?" in out
        assert ops.list_operations() == []
    finally:
        ops.runner.stop()

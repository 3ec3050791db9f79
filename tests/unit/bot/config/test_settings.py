"""Settings: the config file and the environment, validated with errors that name the key.

Covers: a full config; defaults; Socket Mode vs HTTP mode requirements; every class of bad
input (unknown role, unknown key, wrong type, bad duration, bad IDs, YAML syntax, unreadable
file, conflicting channel defaults, token prefixes, SLACK_API_URL without '/'); tokens never in
a repr or str.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from bot.config.settings import (
    Secret,
    SettingsError,
    channel_names,
    forget_secret_env,
    load,
    with_channel_ids,
)
from engine.domain.settings import ScaleDownRules
from engine.operations import policy
from engine.operations.policy import Role

ENV = {"SLACK_BOT_TOKEN": "xoxb-1-secret", "SLACK_SIGNING_SECRET": "s3cr3t-signing"}

FULL = """
server: {http_port: 3100, health_port: 8081}
sender: {update_interval: 5s, updates_per_minute: 30, posts_per_minute: 90}
fleet_digest_channel: C0FLEET
currency: EUR
workers: 4
channels: {C0STAGE: staging}
clusters:
  dev-eu:
    context: kind-dev
    kubeconfig: /etc/scalebot/kubeconfig
    provider: labels
    pool_label: example.com/pool
    api_qps: 150
    api_burst: 300
    default_channel: C0DEV
    policy:
      users: {U0ADMIN: admin, U0OPS: operator}
      groups: {S0SRE: approver}
      approval_required_for: [zero, force]
      approvals_required: 2
      allow_self_approval: true
      request_ttl: 45m
  staging:
    provider: capi
    protected: true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scalebot.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(SettingsError) as info:
        load(write(tmp_path, text), ENV if env is None else env)
    return str(info.value)


def test_full_config(tmp_path: Path) -> None:
    settings = load(write(tmp_path, FULL), {**ENV, "SCALEBOT_DB": "/data/scalebot.db"})

    dev = settings.clusters["dev-eu"]
    assert (dev.context, dev.provider, dev.options["pool_label"], str(dev.kubeconfig)) == (
        "kind-dev",
        "labels",
        "example.com/pool",
        "/etc/scalebot/kubeconfig",
    )
    assert (dev.api_qps, dev.api_burst) == (150.0, 300)
    assert dev.policy.users == {"U0ADMIN": Role.ADMIN, "U0OPS": Role.OPERATOR}
    assert dev.policy.groups == {"S0SRE": Role.APPROVER}
    assert dev.policy.approval_required_for == frozenset({"zero", "force"})
    assert (dev.policy.approvals_required, dev.policy.allow_self_approval) == (2, True)
    assert dev.policy.request_ttl == timedelta(minutes=45)
    staging = settings.clusters["staging"]
    assert staging.context == "staging" and staging.policy.protected and staging.protected
    assert settings.channels == {"C0DEV": "dev-eu", "C0STAGE": "staging"}
    assert settings.default_cluster("C0DEV") == "dev-eu" and settings.default_cluster("C0OTHER") is None
    assert settings.channel_for("dev-eu") == "C0DEV"
    assert (settings.server.http_port, settings.server.health_port, settings.workers) == (3100, 8081, 4)
    assert (settings.sender.update_interval, settings.sender.updates_per_minute) == (5.0, 30.0)
    assert settings.sender.posts_per_minute == 90.0
    assert settings.fleet_digest_channel == "C0FLEET"
    assert settings.currency == "EUR"
    assert str(settings.db_path) == "/data/scalebot.db"
    assert not settings.slack.socket_mode


def test_defaults_and_the_config_path_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "clusters: {dev-eu: {}}")
    settings = load(None, {**ENV, "SCALEBOT_CONFIG": str(path)})

    assert settings.config_path == path
    assert settings.default_cluster("C0ANY") == "dev-eu"  # the only cluster
    assert (settings.server.http_port, settings.server.health_port) == (3000, 8080)
    assert str(settings.db_path) == "scalebot.db"
    assert settings.clusters["dev-eu"].policy.request_ttl == timedelta(minutes=30)
    assert settings.clusters["dev-eu"].policy.drain_one_at_a_time is False
    assert (settings.clusters["dev-eu"].api_qps, settings.clusters["dev-eu"].api_burst) == (200.0, 300)
    assert settings.slack.api_url is None


def test_drain_one_at_a_time_is_a_cluster_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "clusters: {dev-eu: {policy: {drain_one_at_a_time: true}}}")
    settings = load(None, {**ENV, "SCALEBOT_CONFIG": str(path)})

    assert settings.clusters["dev-eu"].policy.drain_one_at_a_time is True


def test_socket_mode_needs_no_signing_secret(tmp_path: Path) -> None:
    settings = load(
        None,
        {
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_APP_TOKEN": "xapp-1",
            "SLACK_API_URL": "http://127.0.0.1:9/api/",
        },
    )
    assert settings.slack.socket_mode and settings.slack.signing_secret is None
    assert settings.slack.api_url == "http://127.0.0.1:9/api/"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "clusters: {dev-eu: {policy: {users: {U1: boss}}}}",
            "clusters.dev-eu.policy.users.U1: unknown role 'boss' (viewer, operator, approver, admin)",
        ),
        ("clusters: {dev-eu: {polcy: {}}}", "clusters.dev-eu.polcy: unknown setting (known here: context,"),
        (
            "clusters: {dev-eu: {provider: nimbus}}",
            "clusters.dev-eu.provider: unknown provider 'nimbus' (labels, capi",
        ),
        (
            "clusters: {dev-eu: {provider: capi, pool_label: example.com/pool}}",
            "clusters.dev-eu.pool_label: a setting of provider labels, not of capi",
        ),
        (
            "clusters: {dev-eu: {policy: {users: {alice: admin}}}}",
            "clusters.dev-eu.policy.users.alice: 'alice' is not a Slack user ID (U… or W…); use IDs",
        ),
        (
            "clusters: {dev-eu: {policy: {groups: {U1: admin}}}}",
            "clusters.dev-eu.policy.groups.U1: 'U1' is not",
        ),
        (
            "clusters: {dev-eu: {policy: {request_ttl: soon}}}",
            'clusters.dev-eu.policy.request_ttl: invalid duration "soon"',
        ),
        ("clusters: {dev-eu: {api_qps: 0}}", "clusters.dev-eu.api_qps: expected a number from 1"),
        (
            "clusters: {dev-eu: {policy: {approvals_required: 0}}}",
            "clusters.dev-eu.policy.approvals_required: expected a whole number from 1 to 10, got 0",
        ),
        (
            "clusters: {dev-eu: {policy: {approval_required_for: [zero, nap]}}}",
            "clusters.dev-eu.policy.approval_required_for[1]: unknown kind 'nap'",
        ),
        (
            "clusters: {dev-eu: {protected: maybe}}",
            "clusters.dev-eu.protected: expected true or false, got 'maybe'",
        ),
        ("clusters: {dev-eu: {default_channel: general}}", "'general' is not a channel ID"),
        ("clusters: {Dev_EU: {}}", "clusters.Dev_EU: cluster names are DNS-1123 labels"),
        ("clusters: [dev-eu]", "clusters: expected a mapping of settings"),
        (
            "server: {http_port: 70000}",
            "server.http_port: expected a whole number from 0 to 65535, got 70000",
        ),
        (
            "sender: {updates_per_minute: 120}",
            "sender.updates_per_minute: expected a number from 1 to 50, got 120",
        ),
        ("fleet_digest_channel: fleet", "fleet_digest_channel: 'fleet' is not a channel ID (C…)"),
        ("currency: €", "currency: '€' is not an ISO 4217 currency code (EUR, USD, GBP)"),
        (
            "sender: {posts_per_minute: 1000}",
            "sender.posts_per_minute: expected a number from 10 to 600, got 1000",
        ),
        ("channels: {C0X: nowhere}", "channels.C0X: unknown cluster 'nowhere' (none configured)"),
        (
            "clusters: {a: {default_channel: C0X}, b: {default_channel: C0X}}",
            "clusters.b.default_channels: C0X is already the default channel of a",
        ),
        ("colour: blue", "colour: unknown setting"),
        ("clusters: {dev-eu: {context: [1]}}", "clusters.dev-eu.context: expected text, got list"),
        ("just text", "the config file must be a mapping"),
        (
            "clusters: {dev-eu: {consolidation: {interval: 1s}}}",
            "clusters.dev-eu.consolidation.interval: at least 10s",
        ),
        ("clusters: {dev-eu: {consolidation: {evict: true}}}", "clusters.dev-eu.consolidation.evict"),
        (
            "clusters: {dev-eu: {consolidation: {utilization_threshold: 1.5}}}",
            "clusters.dev-eu.consolidation.utilization_threshold: expected a number from 0 to 1, got 1.5",
        ),
        (
            "clusters: {dev-eu: {consolidation: {unneeded_time: 5m, empty_node_ttl: 5m}}}",
            "clusters.dev-eu.consolidation.empty_node_ttl: the older name of unneeded_time; give only one",
        ),
        (
            "clusters: {dev-eu: {consolidation: {delay_after_add: -1m}}}",
            "clusters.dev-eu.consolidation.delay_after_add",
        ),
        (
            "clusters: {dev-eu: {drain_report: grouped}}",
            "clusters.dev-eu.drain_report: expected current or legacy",
        ),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    assert message in error(tmp_path, text)


def test_yaml_syntax_errors_give_line_and_column(tmp_path: Path) -> None:
    message = error(tmp_path, "clusters:\n  dev-eu: {policy: [\n")
    assert "not valid YAML at line" in message and "scalebot.yaml" in message


def test_unreadable_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"missing\.yaml: cannot read the config file"):
        load(tmp_path / "missing.yaml", ENV)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SLACK_BOT_TOKEN: not set"),
        ({"SLACK_BOT_TOKEN": "xoxp-user"}, "SLACK_BOT_TOKEN: expected a bot token starting with xoxb-"),
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET: not set"),
        (
            {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xoxb-2"},
            "SLACK_APP_TOKEN: expected an app-level token",
        ),
        (
            {**ENV, "SLACK_API_URL": "https://slack.example.com/api"},
            "SLACK_API_URL: 'https://slack.example.com/api' must be an http(s) URL ending with '/'",
        ),
    ],
)
def test_environment_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        load(None, env)
    assert message in str(info.value)


def test_console_mode_needs_no_tokens() -> None:
    assert load(None, {}, require_slack=False).slack.bot_token.reveal() == ""


def test_tokens_never_show_in_reprs(tmp_path: Path) -> None:
    env = {**ENV, "SLACK_APP_TOKEN": "xapp-1-very-secret"}
    settings = load(write(tmp_path, FULL), env)

    for text in (repr(settings), str(settings), repr(settings.slack), f"{settings.slack.bot_token}"):
        assert (
            "xoxb-1-secret" not in text and "s3cr3t-signing" not in text and "xapp-1-very-secret" not in text
        )
    assert settings.slack.bot_token.reveal() == "xoxb-1-secret"
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")


def test_consolidation_settings_default_off_and_read_when_given(tmp_path: Path) -> None:
    default = load(write(tmp_path, "clusters: {dev-eu: {}}"), ENV).clusters["dev-eu"].policy.consolidation
    assert (default.empty_nodes, default.allow_alongside_autoscaler) == (False, False)
    assert (default.unneeded_time, default.empty_node_batch, default.interval) == (
        timedelta(minutes=10),
        10,
        timedelta(seconds=60),
    )
    text = (
        "clusters: {dev-eu: {consolidation: {empty_nodes: true, empty_node_ttl: 10m, empty_node_batch: 3, "
        "interval: 30s, node_grace: 2m, max_nodes: 4, allow_alongside_autoscaler: true}}}"
    )
    given = load(write(tmp_path, text), ENV).clusters["dev-eu"].policy.consolidation
    assert (given.empty_nodes, given.unneeded_time, given.empty_node_batch, given.interval) == (
        True,
        timedelta(minutes=10),
        3,
        timedelta(seconds=30),
    )
    assert (given.node_grace, given.max_nodes, given.allow_alongside_autoscaler) == (
        timedelta(minutes=2),
        4,
        True,
    )


def test_cluster_autoscaler_rules_and_timings_default_as_cluster_autoscaler_and_are_read(
    tmp_path: Path,
) -> None:
    cluster = load(write(tmp_path, "clusters: {dev-eu: {}}"), ENV).clusters["dev-eu"]
    default = cluster.policy.consolidation
    assert default.rules == ScaleDownRules(
        utilization_threshold=0.5,
        gpu_utilization_threshold=0.5,
        ignore_daemonsets_utilization=False,
        skip_nodes_with_system_pods=True,
        system_pod_disruption_timeout=timedelta(hours=1),
        skip_nodes_with_local_storage=True,
        skip_nodes_with_custom_controller_pods=True,
    )
    assert (default.unneeded_time, default.delay_after_add) == (timedelta(minutes=10), timedelta(minutes=10))
    assert cluster.drain_report == "current"
    text = (
        "clusters: {dev-eu: {drain_report: legacy, consolidation: {utilization_threshold: 0.7, "
        "gpu_utilization_threshold: 0.2, ignore_daemonsets_utilization: true, "
        "skip_nodes_with_system_pods: false, "
        "system_pod_disruption_timeout: 30m, skip_nodes_with_local_storage: false, "
        "skip_nodes_with_custom_controller_pods: false, unneeded_time: 3m, delay_after_add: 0s}}}"
    )
    cluster = load(write(tmp_path, text), ENV).clusters["dev-eu"]
    given = cluster.policy.consolidation
    assert given.rules == ScaleDownRules(0.7, 0.2, True, False, timedelta(minutes=30), False, False)
    assert (given.unneeded_time, given.delay_after_add) == (timedelta(minutes=3), timedelta(0))
    # The plans get the same rules as the policy.
    assert given.planning.rules == given.rules
    assert cluster.drain_report == "legacy"


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("slack: {bot_token: xoxb-123-secret}", "slack.bot_token", "xoxb-123-secret"),
        ("slack: {signing_secret: s3cr3t-value}", "slack.signing_secret", "s3cr3t-value"),
        ("slak: {allowed_team_ids: [T1]}", "slak", "T1"),
    ],
)
def test_a_key_the_program_does_not_use_is_an_error_naming_it_without_its_value(
    tmp_path: Path, text: str, key: str, value: str
) -> None:
    message = error(tmp_path, text)
    assert message.startswith(f"{key}: unknown setting (known here: ")
    assert value not in message, "a secret put in the wrong place is not echoed"


def test_workloads_return_timeout_is_a_duration(tmp_path: Path) -> None:
    assert load(None, ENV).workloads_return_timeout == timedelta(minutes=5)
    assert load(
        write(tmp_path, "workloads_return_timeout: 90s\n"), ENV
    ).workloads_return_timeout == timedelta(seconds=90)
    assert "workloads_return_timeout: a duration needs a unit" in error(
        tmp_path, "workloads_return_timeout: 5\n"
    )


def test_the_slack_secrets_leave_the_environment_once_the_settings_hold_them() -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1-abc",
        "SLACK_APP_TOKEN": "xapp-1-def",
        "SLACK_SIGNING_SECRET": "s3cret",
        "SCALEBOT_DB": "/data/scalebot.db",
    }
    loaded = load(None, env)
    forget_secret_env(env)
    assert env == {"SCALEBOT_DB": "/data/scalebot.db"}
    assert loaded.slack.bot_token.reveal() == "xoxb-1-abc"
    assert loaded.slack.app_token is not None and loaded.slack.app_token.reveal() == "xapp-1-def"


def test_the_weekly_savings_post_is_off_by_default_and_read_when_given(tmp_path: Path) -> None:
    off = load(write(tmp_path, "clusters:\n  dev-eu:\n    default_channel: C0DEV\n"), ENV)
    assert off.clusters["dev-eu"].savings_report is None

    on = load(
        write(
            tmp_path,
            "clusters:\n  dev-eu:\n    default_channel: C0DEV\n"
            "    savings_report: {schedule: Mon 09:00, timezone: Europe/Berlin}\n"
            "  staging:\n    savings_report: {schedule: Fri 16:30, channel: C0STAGE}\n",
        ),
        ENV,
    )
    dev, staging = on.clusters["dev-eu"].savings_report, on.clusters["staging"].savings_report
    assert str(dev) == "Mon 09:00 Europe/Berlin in C0DEV"
    assert str(staging) == "Fri 16:30 UTC in C0STAGE"


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ("{timezone: UTC}", 'savings_report.schedule: required, one weekday and a time, e.g. "Mon 09:00"'),
        ("{schedule: Mon-Fri 09:00}", 'savings_report.schedule: "Mon-Fri 09:00" names 5 days'),
        ("{schedule: Mon 9}", 'clusters.dev-eu.savings_report.schedule: invalid time "9"'),
        ("{schedule: Montag 09:00}", 'clusters.dev-eu.savings_report.schedule: unknown day "Montag"'),
        ("{schedule: Mon 09:00, timezone: CET}", "clusters.dev-eu.savings_report.timezone:"),
        ("{schedule: Mon 09:00, timezone: Mars/Olympus}", 'timezone: unknown time zone "Mars/Olympus"'),
        ("{schedule: Mon 09:00, channel: general}", "savings_report.channel: 'general' is not a channel ID"),
        ("{schedule: Mon 09:00, every: 7d}", "clusters.dev-eu.savings_report.every: unknown setting"),
        ("weekly", "clusters.dev-eu.savings_report: expected a mapping of settings"),
    ],
)
def test_a_bad_weekly_savings_post_is_refused_naming_the_key(
    tmp_path: Path, report: str, message: str
) -> None:
    assert message in error(
        tmp_path, f"clusters:\n  dev-eu:\n    default_channel: C0DEV\n    savings_report: {report}\n"
    )


def test_the_weekly_savings_post_needs_a_channel(tmp_path: Path) -> None:
    assert error(tmp_path, "clusters:\n  dev-eu:\n    savings_report: {schedule: Mon 09:00}\n") == (
        "clusters.dev-eu.savings_report.channel: no channel to post in; give one (C…) or the "
        "cluster's default_channel"
    )


def test_channels_may_be_named_and_every_name_becomes_its_id_before_use(tmp_path: Path) -> None:
    text = """
channels: {"#staging-ops": staging}
clusters:
  dev-eu:
    default_channel: "#platform"
    allowed_channels: ["#platform", "<#C0SRE|sre>", C0OPS]
  staging: {}
"""
    loaded = load(write(tmp_path, text), ENV)
    assert channel_names(loaded) == ["#platform", "#staging-ops"]
    ids = {"#platform": "C0PLAT", "#staging-ops": "C0STG"}

    resolved = with_channel_ids(loaded, lambda name: ids[name])

    dev = resolved.clusters["dev-eu"]
    assert dev.default_channels == ("C0PLAT",)
    assert dev.policy.channels == frozenset({"C0PLAT", "C0SRE", "C0OPS"}), "rules hold IDs only"
    assert resolved.default_cluster("C0PLAT") == "dev-eu" and resolved.default_cluster("C0STG") == "staging"
    assert channel_names(resolved) == []


def test_channels_separate_clusters_by_default(tmp_path: Path) -> None:
    """Without `allowed_channels` a cluster is operated from the channels mapped to it; one with none
    of its own is still never operated from another cluster's channel."""
    text = """
channels: {C0PROD: prod}
clusters:
  dev-eu: {default_channel: C0DEV}
  prod: {protected: true}
  lab: {}
  shared: {allowed_channels: [C0OPS, C0DEV]}
"""
    policies = load(write(tmp_path, text), ENV).policies()
    assert policies["dev-eu"].channels == frozenset({"C0DEV"})
    assert policies["prod"].channels == frozenset({"C0PROD"})
    assert policies["shared"].channels == frozenset({"C0OPS", "C0DEV"}), "allowed_channels says otherwise"
    allowed = {
        (name, channel): policy.channel_allowed(policies[name], channel).allowed
        for name in ("dev-eu", "prod", "lab")
        for channel in ("C0DEV", "C0PROD", "C0OPS", "C0RANDOM")
    }
    assert allowed == {
        ("dev-eu", "C0DEV"): True,
        ("dev-eu", "C0PROD"): False,
        ("dev-eu", "C0OPS"): False,
        ("dev-eu", "C0RANDOM"): False,
        ("prod", "C0DEV"): False,
        ("prod", "C0PROD"): True,
        ("prod", "C0OPS"): False,
        ("prod", "C0RANDOM"): False,
        ("lab", "C0DEV"): False,  # lab has no channel: any but another cluster's
        ("lab", "C0PROD"): False,
        ("lab", "C0OPS"): False,
        ("lab", "C0RANDOM"): True,
    }
    lab_from_dev = policy.channel_allowed(policies["lab"], "C0DEV")
    assert lab_from_dev.reason.startswith("lab is not operated from another cluster's channel")


def test_a_protected_cluster_never_accepts_other_channels(tmp_path: Path) -> None:
    alone = "clusters:\n  dev-eu: {default_channel: C0DEV}\n  prod: {protected: true}\n"
    assert error(tmp_path, alone) == (
        "clusters.prod: a protected cluster is operated only from its own channels; give it "
        "default_channels (or allowed_channels)"
    )
    assert load(write(tmp_path, alone), {}, require_slack=False).clusters["prod"].protected, (
        "the CLI is in no channel"
    )
    borrowed = (
        "clusters:\n  dev-eu: {default_channel: C0DEV}\n"
        "  prod: {protected: true, allowed_channels: [C0PROD, C0DEV]}\n"
    )
    assert error(tmp_path, borrowed) == (
        "clusters.prod.allowed_channels: C0DEV is the channel of dev-eu; a protected cluster never "
        "accepts another cluster's channel"
    )


def test_a_channel_name_slack_does_not_know_stops_the_start(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, 'clusters: {dev-eu: {allowed_channels: ["#gone"]}}'), ENV)

    def unknown(name: str) -> str:
        raise ValueError(f"I cannot find the channel {name}")

    with pytest.raises(
        SettingsError, match="channel #gone in the configuration: I cannot find the channel #gone"
    ):
        with_channel_ids(loaded, unknown)


GOOD_ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//team//releases//EN
BEGIN:VEVENT
UID:r1@team
DTSTAMP:20260101T000000Z
SUMMARY:Release weekend
DTSTART;VALUE=DATE:20270326
DTEND;VALUE=DATE:20270329
END:VEVENT
BEGIN:VEVENT
UID:r2@team
DTSTAMP:20260101T000000Z
SUMMARY:Quarter freeze
DTSTART;VALUE=DATE:20270101
RRULE:FREQ=MONTHLY;INTERVAL=3;COUNT=8
EXDATE;VALUE=DATE:20270401
END:VEVENT
END:VCALENDAR
"""


def test_calendars_are_read_at_start_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "releases.ics").write_text(GOOD_ICS, encoding="utf-8")
    settings = load(write(tmp_path, "calendars:\n  releases: releases.ics\n"), ENV)
    days = settings.calendars["releases"].days(date(2027, 1, 1), date(2027, 12, 31))
    assert days == {
        date(2027, 1, 1): "Quarter freeze",
        date(2027, 3, 26): "Release weekend",
        date(2027, 3, 27): "Release weekend",
        date(2027, 3, 28): "Release weekend",
        date(2027, 7, 1): "Quarter freeze",  # 2027-04-01 is excluded (EXDATE)
        date(2027, 10, 1): "Quarter freeze",
    }


def _event(body: str) -> str:
    return (
        "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//t//t//EN\nBEGIN:VEVENT\nUID:x@t\n"
        f"DTSTAMP:20260101T000000Z\n{body}\nEND:VEVENT\nEND:VCALENDAR\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "calendars.releases: calendar releases ({}): cannot read the file (No such file"),
        ("hello: world\n", "calendars.releases: calendar releases ({}): not an iCalendar file"),
        ("", "calendars.releases: calendar releases ({}): not an iCalendar file"),
        (_event("SUMMARY:No date"), 'event "No date" has no DTSTART: every event needs its date'),
        (
            _event("SUMMARY:Every minute\nDTSTART:20260101T000000Z\nRRULE:FREQ=MINUTELY"),
            "its events repeat more than 20000 times in the years scalebot looks at: check the RRULEs",
        ),
        (
            _event("SUMMARY:Forever\nDTSTART;VALUE=DATE:20260101\nDTEND;VALUE=DATE:20290101"),
            'event "Forever" lasts 1096 days (from 2026-01-01): check its DTEND',
        ),
        (_event("SUMMARY:Bad\nDTSTART;VALUE=DATE:2026-13-45"), "an event cannot be read"),
    ],
)
def test_a_bad_calendar_stops_the_start_naming_the_file_and_the_fix(
    tmp_path: Path, content: str | None, message: str
) -> None:
    ics = tmp_path / "releases.ics"
    if content is not None:
        ics.write_text(content, encoding="utf-8")
    with pytest.raises(SettingsError) as caught:
        load(write(tmp_path, f"calendars:\n  releases: {ics}\n"), ENV)
    assert message.format(ics) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("calendars:\n  Releases!: /x.ics\n", "calendars.Releases!: calendar names are lowercase letters"),
        ("calendars:\n  releases: ''\n", "calendars.releases: give the path of an .ics file"),
        ("calendars: [a.ics]\n", "calendars: expected a mapping of settings"),
    ],
)
def test_bad_calendar_keys_are_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        load(write(tmp_path, text), ENV)


def test_a_calendar_file_larger_than_a_team_calendar_is_refused(tmp_path: Path) -> None:
    ics = tmp_path / "big.ics"
    ics.write_bytes(b"BEGIN:VCALENDAR\n" + b"X-PAD:" + b"x" * (3 * 1024 * 1024) + b"\nEND:VCALENDAR\n")
    with pytest.raises(SettingsError, match="more than a team calendar holds"):
        load(write(tmp_path, f"calendars:\n  big: {ics}\n"), ENV)

"""Where a Slack request says it comes from, and the allowed workspaces, enterprises and apps."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import settings
from bot.slack import origin

ALLOWED = origin.AllowedOrigins(frozenset({"T0OURS"}), frozenset({"E0OURS"}), frozenset({"A0OURS"}))


def test_a_slash_command_and_a_click_are_read_alike() -> None:
    command = {"team_id": "T0OURS", "enterprise_id": "E0OURS", "api_app_id": "A0OURS", "user_id": "U1"}
    click = {
        "team": {"id": "T0OURS"},
        "user": {"id": "U1", "team_id": "T0OURS"},
        "enterprise": {"id": "E0OURS"},
        "api_app_id": "A0OURS",
        "channel": {"id": "C1"},
    }
    for body in (command, click):
        assert origin.refusal(origin.origin_of(body), ALLOWED) == ""


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"user": {"id": "U1", "team_id": "T0THEIRS"}}, "workspace T0THEIRS is not allowed"),
        ({"enterprise": {"id": "E0THEIRS"}}, "enterprise E0THEIRS is not allowed"),
        ({"api_app_id": "A0OTHER"}, "app A0OTHER is not this scalebot"),
        ({"api_app_id": None}, "app (none) is not this scalebot"),
        ({"team": None, "user": {"id": "U1"}}, "names no Slack workspace"),
    ],
)
def test_anything_not_ours_is_refused(change: dict[str, object], fragment: str) -> None:
    body = {
        "team": {"id": "T0OURS"},
        "user": {"id": "U1", "team_id": "T0OURS"},
        "enterprise": {"id": "E0OURS"},
        "api_app_id": "A0OURS",
    } | change
    assert fragment in origin.refusal(origin.origin_of(body), ALLOWED)


def test_allowed_ids_and_channels_are_read_and_validated(tmp_path: Path) -> None:
    config = tmp_path / "scalebot.yaml"
    config.write_text(
        "slack: {allowed_team_ids: [T0A, T0B], allowed_app_ids: A0APP}\n"
        "clusters: {dev: {allowed_channels: [C0OPS], protected: true}}\n"
    )
    loaded = settings.load(config, {}, require_slack=False)
    assert loaded.slack.allowed_team_ids == ("T0A", "T0B") and loaded.slack.allowed_app_ids == ("A0APP",)
    assert loaded.clusters["dev"].policy.channels == frozenset({"C0OPS"})
    config.write_text("slack: {allowed_team_ids: [dev-workspace]}\n")
    with pytest.raises(settings.SettingsError, match=r"slack.allowed_team_ids\[0\]: 'dev-workspace' is not"):
        settings.load(config, {}, require_slack=False)
    config.write_text("clusters: {dev: {allowed_channels: [D0DM]}}\n")
    with pytest.raises(settings.SettingsError, match=r"allowed_channels\[0\]: 'D0DM' is not a channel ID"):
        settings.load(config, {}, require_slack=False)

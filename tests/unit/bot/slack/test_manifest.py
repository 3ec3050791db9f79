"""The Slack app manifest ships what the bot needs and nothing more.

Covers: /scale with a usage hint naming every subcommand and should_escape; interactivity on;
Socket Mode on; exactly the minimal bot scopes (commands, chat:write, channels:read and
groups:read to tell whether scalebot is in a channel, channels:history and groups:history to find
its own post after an ambiguous timeout), chat:write.public documented as the opt-in; Slack's
length limits on names and hints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MANIFEST = Path(__file__).resolve().parents[4] / "manifests" / "slack-app.yaml"


def load() -> dict[str, Any]:
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_manifest_has_the_command_interactivity_and_socket_mode() -> None:
    manifest = load()

    assert manifest["_metadata"]["major_version"] == 1
    assert len(manifest["display_information"]["name"]) <= 35
    assert len(manifest["features"]["bot_user"]["display_name"]) <= 80
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/scale"
    assert command["should_escape"] is True
    assert 0 < len(command["description"]) <= 2000 and 0 < len(command["usage_hint"]) <= 1000
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["token_rotation_enabled"] is False


def test_manifest_asks_for_the_minimal_scopes() -> None:
    scopes = sorted(load()["oauth_config"]["scopes"]["bot"])
    assert scopes == [
        "channels:history",
        "channels:read",
        "chat:write",
        "commands",
        "groups:history",
        "groups:read",
    ]
    text = MANIFEST.read_text(encoding="utf-8")
    assert "usergroups:read" in text and "chat:write.public" in text  # documented as the optional ones


def test_usage_hint_lists_every_subcommand() -> None:
    from bot.text import messages

    hint = load()["features"]["slash_commands"][0]["usage_hint"]
    words = {part.split()[0] for part in hint.split(" | ")}
    assert words == set(messages.USAGE)


def test_command_matches_the_bot() -> None:
    from bot.text import messages

    assert load()["features"]["slash_commands"][0]["command"] == messages.COMMAND

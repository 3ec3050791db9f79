"""The `config` part of charts/scalebot/values.schema.json, generated from scalebot's settings loader.

The keys come from the loader itself: every section is probed with an unknown key, and the loader's
refusal ("unknown setting (known here: ...)") lists the keys it accepts there, the same way for
each pool provider (a cluster's keys depend on its `provider`). So `helm install` refuses exactly
the keys `scalebot run` would refuse at start, and accepts every key it reads. The values are
checked by type where the loader has a fixed form (ports, roles, channel references as
bot.config.channel_refs reads them, cluster names, durations); everything else the loader checks
again at start, naming the key.

  .venv/bin/python scripts/chart_config_schema.py           # rewrite the schema's `config`
  .venv/bin/python scripts/chart_config_schema.py --check   # exit 1 if it is not current
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bot.config import channel_refs, cluster_settings, providers, settings  # noqa: E402

SCHEMA = REPO / "charts" / "scalebot" / "values.schema.json"
ENV = {"SLACK_BOT_TOKEN": "xoxb-schema", "SLACK_SIGNING_SECRET": "schema-signing-secret"}
PROBE = "zz_unknown"
Json = dict[str, Any]

ROLES = ["viewer", "operator", "approver", "admin"]
DURATION: Json = {"type": ["string", "integer"], "pattern": "^([0-9]+(ms|s|m|h|d))+$"}
CHANNEL: Json = {
    "type": "string",
    "pattern": "^(?:"
    + "|".join(
        p.pattern for p in (channel_refs._CHANNEL_ID, channel_refs._CHANNEL_LINK, channel_refs._CHANNEL_NAME)
    )
    + ")$",
}
# Where the loader wants an ID, not a name (`fleet_digest_channel`): `C…` or Slack's `<#C…|name>`;
# empty or null: not set.
CHANNEL_ID: Json = {
    "type": ["string", "null"],
    "pattern": "^(?:"
    + "|".join(p.pattern for p in (channel_refs._CHANNEL_ID, channel_refs._CHANNEL_LINK))
    + ")?$",
}
CHANNELS: Json = {"oneOf": [CHANNEL, {"type": "array", "items": CHANNEL}]}
PORT: Json = {"type": "integer", "minimum": 1, "maximum": 65535}

# The values with a fixed form, by key path (`<cluster>` for any cluster); other keys: any value.
VALUES: dict[str, Json] = {
    "workers": {"type": "integer", "minimum": 1, "maximum": 64},
    "workloads_return_timeout": DURATION,
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "calendars": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
    "server.host": {"type": "string", "minLength": 1},
    "server.http_port": PORT,
    "server.health_port": PORT,
    "sender.update_interval": DURATION,
    "sender.posts_per_minute": {"type": "number", "minimum": 10, "maximum": 600},
    "sender.updates_per_minute": {"type": "number", "minimum": 1, "maximum": 50},
    "sender.posts_per_second": {"type": "number", "minimum": 0.1, "maximum": 10},
    "fleet_digest_channel": CHANNEL_ID,
    "runner.max_operations": {"type": "integer", "minimum": 1, "maximum": 10_000},
    "runner.max_operations_per_cluster": {"type": "integer", "minimum": 1, "maximum": 1_000},
    "runner.step_workers": {"type": "integer", "minimum": 1, "maximum": 256},
    "runner.max_evictions_in_flight": {"type": "integer", "minimum": 2, "maximum": 1_024},
    "runner.max_evictions_per_cluster": {"type": "integer", "minimum": 2, "maximum": 256},
    "runner.eviction_processes": {"type": "integer", "minimum": 0, "maximum": 32},
    "<cluster>.context": {"type": "string"},
    "<cluster>.kubeconfig": {"type": "string"},
    "<cluster>.provider": {"enum": sorted(providers.PROVIDERS)},
    "<cluster>.default_channel": CHANNEL,
    "<cluster>.default_channels": CHANNELS,
    "<cluster>.allowed_channels": CHANNELS,
    "<cluster>.protected": {"type": "boolean"},
    "<cluster>.gitops": {"type": "string"},
    "<cluster>.policy.users": {
        "type": "object",
        "propertyNames": {"pattern": "^[UW][A-Z0-9]+$"},
        "additionalProperties": {"enum": ROLES},
    },
    "<cluster>.policy.groups": {
        "type": "object",
        "propertyNames": {"pattern": "^S[A-Z0-9]+$"},
        "additionalProperties": {"enum": ROLES},
    },
    "<cluster>.policy.approvals_required": {"type": "integer", "minimum": 1},
    "<cluster>.policy.protected_approvals": {"type": "integer", "minimum": 1},
    "<cluster>.policy.allow_self_approval": {"type": "boolean"},
    "<cluster>.policy.request_ttl": DURATION,
    "<cluster>.savings_report.channel": CHANNEL,
}
SECTIONS = {"server": "server", "sender": "sender", "slack": "slack", "runner": "runner"}
CLUSTER_SECTIONS = ("policy", "consolidation", "savings_report")


def known_keys(config: str) -> list[str]:
    """The keys the loader accepts where `zz_unknown` sits in `config`, from its own refusal."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.yaml"
        path.write_text(config, encoding="utf-8")
        try:
            settings.load(path, ENV)
        except settings.SettingsError as exc:
            match = re.search(r"unknown setting \(known here: ([^)]*)\)", str(exc))
            if match:
                return match.group(1).split(", ")
            raise
    raise AssertionError(f"the loader accepted the unknown key in {config!r}")


def section(path: str, keys: list[str], nested: dict[str, Json] | None = None) -> Json:
    nested = nested or {}
    properties = {k: nested.get(k) or VALUES.get(f"{path}.{k}" if path else k, {}) for k in sorted(keys)}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def cluster_schema() -> Json:
    """Every provider's keys (its options beside the common ones), chosen by `provider`."""
    by_provider = {
        name: known_keys(f"clusters: {{c: {{provider: {name}, {PROBE}: 1}}}}")
        for name in sorted(providers.PROVIDERS)
    }
    nested = {
        part: section(f"<cluster>.{part}", known_keys(f"clusters: {{c: {{{part}: {{{PROBE}: 1}}}}}}"))
        for part in CLUSTER_SECTIONS
    }
    wave = section("<cluster>.wake_waves", known_keys(f"clusters: {{c: {{wake_waves: [{{{PROBE}: 1}}]}}}}"))
    nested["wake_waves"] = {
        "type": "array",
        "items": {"oneOf": [{"type": "array", "items": {"type": "string"}}, wave]},
    }
    every = sorted({k for keys in by_provider.values() for k in keys})
    schema = section("<cluster>", every, nested)
    schema["additionalProperties"] = False
    # A key of another provider is refused, as the loader refuses it (no `provider`: the default's).
    schema["allOf"] = [
        {
            "if": (
                {"properties": {"provider": {"const": name}}, "required": ["provider"]}
                if name != providers.DEFAULT_PROVIDER
                else {"not": {"required": ["provider"]}, "properties": {}}
            ),
            "then": {"propertyNames": {"enum": keys}},
        }
        for name, keys in sorted(by_provider.items())
    ]
    default = by_provider[providers.DEFAULT_PROVIDER]
    schema["allOf"].append(
        {
            "if": {
                "properties": {"provider": {"const": providers.DEFAULT_PROVIDER}},
                "required": ["provider"],
            },
            "then": {"propertyNames": {"enum": default}},
        }
    )
    return schema


def config_schema() -> Json:
    nested: dict[str, Json] = {
        part: section(path, known_keys(f"{part}: {{{PROBE}: 1}}")) for part, path in SECTIONS.items()
    }
    nested["channels"] = {
        "type": "object",
        "propertyNames": CHANNEL,
        "additionalProperties": {"type": "string", "minLength": 1},
    }
    nested["clusters"] = {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": f"^{cluster_settings._NAME.pattern}$", "maxLength": 63},
        "additionalProperties": cluster_schema(),
    }
    schema = section("", known_keys(f"{PROBE}: 1"), nested)
    schema["description"] = (
        "scalebot's config file (README: configuration reference), generated from the settings loader "
        "by scripts/chart_config_schema.py; scalebot checks every value again at start."
    )
    schema["required"] = ["clusters"]
    return schema


def render(values_schema: Json) -> str:
    return (
        json.dumps(
            {**values_schema, "properties": {**values_schema["properties"], "config": config_schema()}},
            indent=2,
        )
        + "\n"
    )


def main(argv: list[str]) -> int:
    current = SCHEMA.read_text(encoding="utf-8")
    wanted = render(json.loads(current))
    if argv[1:] == ["--check"]:
        if wanted != current:
            print(
                f"{SCHEMA.relative_to(REPO)} is not current: run scripts/chart_config_schema.py",
                file=sys.stderr,
            )
            return 1
        return 0
    SCHEMA.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The chart's `config` schema (charts/scalebot/values.schema.json) against scalebot's settings loader.

Covers: the schema is what scripts/chart_config_schema.py generates from the loader today; every
config example in README, docs/, the chart's values files and manifests/base/config.yaml passes
it (the strict schema once refused `calendars`, `workloads_return_timeout` and `#channel` names
that README documents); every key the loader refuses as unknown, at every level and for each pool
provider, and a channel it cannot read, are refused by the schema too.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from bot.config import providers

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "scalebot"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "chart_config_schema", REPO / "scripts" / "chart_config_schema.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_config_schema"] = module
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def config_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    return schema


def errors(config: Any) -> list[str]:
    validator = jsonschema.Draft7Validator(config_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(config)]


def examples() -> dict[str, Any]:
    """Every config example the project documents, by where it is."""
    found: dict[str, Any] = {}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, block in enumerate(
            re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
        ):
            parsed = yaml.safe_load(block)
            if isinstance(parsed, dict) and "clusters" in parsed:
                found[f"{doc.name} #{i}"] = parsed
    for values in (CHART / "values.yaml", CHART / "ci" / "full-values.yaml"):
        found[str(values.relative_to(REPO))] = yaml.safe_load(values.read_text())["config"]
    found["manifests/base/config.yaml"] = yaml.safe_load(
        (REPO / "manifests" / "base" / "config.yaml").read_text()
    )
    return found


def test_the_schema_is_generated_from_the_loader_and_current() -> None:
    assert GENERATOR.main(["chart_config_schema.py", "--check"]) == 0, "run scripts/chart_config_schema.py"


@pytest.mark.parametrize(
    ("where", "config"), sorted(examples().items()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_documented_config_passes_the_schema(where: str, config: Any) -> None:
    assert errors(config) == [], where


def test_what_the_old_schema_refused_loads_and_passes(tmp_path: Path) -> None:
    """README's configuration reference documents these; the hand-written schema refused them."""
    from bot.config import settings

    calendar = tmp_path / "releases.ics"
    calendar.write_text("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nEND:VCALENDAR\r\n")
    config = {
        "calendars": {"releases": str(calendar)},
        "workloads_return_timeout": "15m",
        "channels": {"#platform": "prod"},
        "clusters": {"prod": {"default_channels": ["#platform", "<#C0123|ops>"], "allowed_channels": "#ops"}},
    }
    path = tmp_path / "scalebot.yaml"
    path.write_text(yaml.safe_dump(config))
    settings.load(path, GENERATOR.ENV)
    assert errors(config) == []


def test_the_fleet_slack_knobs_pass_as_the_loader_reads_them(tmp_path: Path) -> None:
    """`sender.posts_per_minute` is a number (the loader reads 90.5; the schema once wanted an
    integer) and `fleet_digest_channel` an ID, a Slack link, or empty for none."""
    from bot.config import settings

    for extra in (
        {"sender": {"posts_per_minute": 90.5}, "fleet_digest_channel": "C0FLEET"},
        {"fleet_digest_channel": "<#C0FLEET|fleet>"},
        {"fleet_digest_channel": ""},
    ):
        config = {"clusters": {"prod": {}}, **extra}
        path = tmp_path / "scalebot.yaml"
        path.write_text(yaml.safe_dump(config))
        settings.load(path, GENERATOR.ENV)
        assert errors(config) == [], extra


PROBES = [
    {"zz_unknown": 1},
    {"server": {"zz_unknown": 1}},
    {"sender": {"zz_unknown": 1}},
    {"slack": {"zz_unknown": 1}},
    *({"clusters": {"c": {"provider": name, "zz_unknown": 1}}} for name in sorted(providers.PROVIDERS)),
    {"clusters": {"c": {"zz_unknown": 1}}},
    {"clusters": {"c": {"policy": {"zz_unknown": 1}}}},
    {"clusters": {"c": {"consolidation": {"zz_unknown": 1}}}},
    {"clusters": {"c": {"savings_report": {"zz_unknown": 1}}}},
    {"clusters": {"c": {"wake_waves": [{"zz_unknown": 1}]}}},
    # Another provider's option: the labels provider has no capi_cluster, Karpenter no pool_label.
    {"clusters": {"c": {"capi_cluster": "ns/c"}}},
    {"clusters": {"c": {"provider": "karpenter", "pool_label": "x.io/pool"}}},
    # Channels the loader cannot read: a bare name, a user ID.
    {"clusters": {"c": {"default_channels": ["general"]}}},
    {"channels": {"U0123": "c"}, "clusters": {"c": {}}},
    # The fleet digest wants a channel ID, not a name; the workspace's post rate has bounds.
    {"fleet_digest_channel": "#fleet", "clusters": {"c": {}}},
    {"fleet_digest_channel": 12, "clusters": {"c": {}}},
    {"sender": {"posts_per_minute": 5}, "clusters": {"c": {}}},
    {"sender": {"posts_per_minute": "fast"}, "clusters": {"c": {}}},
]


@pytest.mark.parametrize("config", PROBES, ids=lambda c: json.dumps(c)[:60])
def test_what_the_loader_refuses_the_schema_refuses(config: Any, tmp_path: Path) -> None:
    from bot.config import settings

    path = tmp_path / "scalebot.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(settings.SettingsError):
        settings.load(path, GENERATOR.ENV)
    assert errors(config), "the schema let through what the loader refuses"

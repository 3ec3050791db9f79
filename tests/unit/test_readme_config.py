"""The README's Slack set-up and configuration reference agree with the code.

Covers: step 1 of "Running it for a team" names every scope the Slack app manifest asks for (the
bot scopes, the optional ones it documents in comments, the app-level token's); every YAML config
example in the README loads through the real settings loader; every setting the loader accepts
(asked of the loader itself: an unknown key is refused with the list of the keys known there, for
each section and each pool provider) has a row in the configuration reference, and every row
names a setting that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bot.config import providers, settings

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
MANIFEST = REPO / "manifests" / "slack-app.yaml"
ENV = {"SLACK_BOT_TOKEN": "xoxb-readme", "SLACK_SIGNING_SECRET": "readme-signing-secret"}


def section(start: str, end: str) -> str:
    text = README[README.index(start) :]
    return text[: text.index(end, len(start))]


def manifest_scopes() -> set[str]:
    text = MANIFEST.read_text(encoding="utf-8")
    required = set(yaml.safe_load(text)["oauth_config"]["scopes"]["bot"])
    scopes_block = text[text.index("scopes:") : text.index("settings:")]
    optional = set(re.findall(r"#\s*-\s*([a-z_.]+:[a-z_.]+)", scopes_block))
    app_level = set(re.findall(r"\bconnections:write\b", text))
    return required | optional | app_level


def test_step_1_names_every_scope_the_manifest_asks_for() -> None:
    step_1 = section("1. Create the Slack app", "\n2. ")
    scopes = manifest_scopes()

    assert {"commands", "chat:write", "users:read", "usergroups:read", "connections:write"} <= scopes
    missing = sorted(scope for scope in scopes if f"`{scope}`" not in step_1)
    assert missing == [], f"README step 1 does not name these scopes of {MANIFEST.name}: {missing}"


def yaml_examples() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", README, flags=re.DOTALL)


def test_the_readme_has_a_complete_config_example() -> None:
    examples = [yaml.safe_load(text) for text in yaml_examples()]
    assert any({"server", "channels", "slack", "clusters"} <= set(e) for e in examples)


@pytest.mark.parametrize("example", yaml_examples(), ids=lambda text: text.split("\n", 1)[0][:40])
def test_every_config_example_in_the_readme_loads(tmp_path: Path, example: str) -> None:
    path = tmp_path / "scalebot.yaml"
    path.write_text(example, encoding="utf-8")
    loaded = settings.load(path, ENV)
    assert loaded.clusters, "an example names at least one cluster"


def known_keys(tmp_path: Path, config: str) -> list[str]:
    """The keys the loader accepts where `zz_unknown` sits in `config`, from its own refusal."""
    path = tmp_path / "probe.yaml"
    path.write_text(config, encoding="utf-8")
    with pytest.raises(settings.SettingsError) as refused:
        settings.load(path, ENV)
    match = re.search(r"unknown setting \(known here: ([^)]*)\)", str(refused.value))
    assert match, str(refused.value)
    return match.group(1).split(", ")


def every_setting(tmp_path: Path) -> set[str]:
    paths = set(known_keys(tmp_path, "zz_unknown: 1"))
    for part in ("server", "sender", "slack", "runner"):
        paths |= {f"{part}.{key}" for key in known_keys(tmp_path, f"{part}: {{zz_unknown: 1}}")}
    for provider in providers.PROVIDERS:
        config = f"clusters: {{c: {{provider: {provider}, zz_unknown: 1}}}}"
        paths |= {f"clusters.<name>.{key}" for key in known_keys(tmp_path, config)}
    for part in ("policy", "consolidation", "savings_report"):
        config = f"clusters: {{c: {{{part}: {{zz_unknown: 1}}}}}}"
        paths |= {f"clusters.<name>.{part}.{key}" for key in known_keys(tmp_path, config)}
    return paths


def documented() -> set[str]:
    """Every key path in the first column of the configuration reference's settings table; a bare
    name after a dotted one shares its prefix ("`server.host` / `http_port`")."""
    reference = section("### Configuration reference", "\n### ")
    paths: set[str] = set()
    for row in reference.splitlines():
        if not row.startswith("| `") or row.startswith("| `SLACK") or row.startswith("| `SCALEBOT"):
            continue
        prefix = ""
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if name.startswith("."):  # "`clusters.<name>.policy.users` / `.groups`"
                paths.add(prefix + name)
            elif "." in name:
                prefix = name.rsplit(".", 1)[0]
                paths.add(name)
            else:
                paths.add(f"{prefix}.{name}" if prefix else name)
    return paths


def test_every_setting_is_in_the_configuration_reference(tmp_path: Path) -> None:
    known = every_setting(tmp_path)
    rows = documented()
    assert "clusters.<name>.policy.request_ttl" in known and "clusters.<name>.pool_label" in known

    missing = sorted(k for k in known if k not in rows and not any(r.startswith(k + ".") for r in rows))
    assert missing == [], f"settings missing from the README's configuration reference: {missing}"
    stale = sorted(r for r in rows if r not in known and "<" not in r.rsplit(".", 1)[1])
    assert stale == [], f"the README documents settings the loader refuses: {stale}"

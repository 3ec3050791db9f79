"""One table of commands (`bot.text.command_registry`) drives every surface: the `/scale` grammar and
its help, the Slack dispatcher and listener (and so the console), the `scalebot` argument tree, the
Slack app manifest's usage hint and README's `/scale` table. Each test compares one surface with the
table, so a command added, renamed or dropped in one place and not the others fails here."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from bot.cli.parser import build_parser, command_paths
from bot.slack.dispatch import Dispatcher
from bot.text import command_registry, commands, messages
from bot.text.command_registry import CLI, COMMANDS, SLACK, Surface

REPO = Path(__file__).resolve().parents[4]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("command_docs", REPO / "scripts" / "command_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["command_docs"] = module
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def test_the_manifest_hint_and_the_readme_table_are_generated_and_current() -> None:
    assert GENERATOR.main(["command_docs.py", "--check"]) == 0, "run scripts/command_docs.py"
    manifest = yaml.safe_load((REPO / "manifests" / "slack-app.yaml").read_text(encoding="utf-8"))
    hint = manifest["features"]["slash_commands"][0]["usage_hint"]
    assert hint == command_registry.manifest_hint()
    assert {part.split()[0] for part in hint.split(" | ")} == set(SLACK)


def test_a_stale_readme_table_or_manifest_hint_is_found() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stale = readme.replace("| `whoami [CLUSTER] [@user]` |", "| `whoami [CLUSTER]` |")
    assert stale != readme and GENERATOR.readme_text(stale) == readme
    manifest = (REPO / "manifests" / "slack-app.yaml").read_text(encoding="utf-8")
    assert GENERATOR.manifest_text(manifest.replace(" | whoami", "")) == manifest


def test_the_slack_grammar_and_help_are_the_tables() -> None:
    assert tuple(SLACK) == commands.SUBCOMMANDS
    assert {name: spec.usage for name, spec in SLACK.items()} == messages.USAGE
    assert {name: spec.summary for name, spec in SLACK.items()} == messages.SUMMARY
    for name, spec in SLACK.items():
        assert spec.usage.split()[0] == name, "a usage line starts with its subcommand"
        assert spec.slack, f"/scale {name} has no handler"
        for alias in spec.aliases:
            assert commands._subcommand(alias) == name


@pytest.mark.parametrize("spec", list(SLACK.values()), ids=lambda s: s.name)
def test_each_slack_subcommands_examples_parse_to_it_and_have_a_dispatcher_handler(
    spec: command_registry.CommandSpec,
) -> None:
    handler = getattr(Dispatcher, spec.slack, None)
    assert callable(handler), f"Dispatcher.{spec.slack}"
    assert list(inspect.signature(handler).parameters) == ["self", "command", "inv"]
    examples = spec.examples_for(messages.COMMAND)
    assert examples, f"/scale {spec.name} has no example"
    for line in examples:
        # Slack sends a typed @name as a user ID (`should_escape`).
        typed = line.removeprefix(messages.COMMAND + " ")
        text = re.sub(r"@(\w+)", lambda m: f"<@U0{m.group(1).upper()}>", typed)
        parsed = commands.parse(text, default_cluster="dev-eu", clusters=("dev-eu",))
        assert commands.subcommand_of(parsed) == spec.name, line


def test_the_cli_tree_is_the_table() -> None:
    parser = build_parser()
    tree = {path: sub for path, sub in command_paths(parser) if path}
    assert set(tree) == set(CLI), "every scalebot command is in the table, and only those"
    for path, sub in tree.items():
        spec = CLI[path]
        assert Surface.CLI in spec.surfaces
        for line in spec.examples_for("scalebot"):
            assert line in (sub.epilog or ""), f"{line!r} in `scalebot {path} --help`"
        if spec.cli:
            handler = sub.get_default("handler")
            assert handler is not None and handler.__name__ == spec.cli
            module, function = spec.cli.split(":")
            assert callable(getattr(importlib.import_module(module), function)), spec.cli


def test_every_cli_help_line_is_the_tables_summary() -> None:
    help_text = " ".join(build_parser().format_help().split())
    for spec in COMMANDS:
        if Surface.CLI in spec.surfaces and " " not in spec.command_line and not spec.hidden:
            assert " ".join(spec.summary.split()) in help_text, spec.name


def test_every_cli_command_has_a_row_in_the_readmes_command_table() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Commands\n") :]
    section = section[: section.index("\n\n", section.index("|---|"))]
    cells = [row.split(" | ")[0] for row in section.splitlines() if row.startswith("| `")]
    named = {name for cell in cells for name in re.findall(r"`(?:scalebot )?([a-z][a-z-]*)", cell)}
    top = {spec.command_line for spec in CLI.values() if " " not in spec.command_line and not spec.hidden}
    assert top <= named, f"README's Commands table lacks {sorted(top - named)}"


def test_a_help_topic_shows_the_tables_examples() -> None:
    from bot.slack.blocks import views

    text = str(views.help_view("zero").block_dicts())
    assert "/scale zero web batch --workloads" in text


def test_the_consoles_own_commands_are_the_tables_and_never_shadow_a_slash_command() -> None:
    from bot.cli import console

    own = {n: s for n, s in command_registry.BY_NAME.items() if s.surfaces == command_registry.CONSOLE_ONLY}
    assert set(console.CONSOLE) == set(own)
    slash_words = set(SLACK) | set(command_registry.ALIASES)
    for name, spec in own.items():
        assert not ({name.split()[0], *spec.aliases} & slash_words) or " " in name, name
        if name != "quit":  # the loop itself leaves
            assert callable(getattr(console, spec.console, None)), spec.console
        assert spec.usage.split()[0] == name.split()[0]
    help_lines = console._CONSOLE_HELP
    assert len(help_lines) == 1 + len(own) and all(s.summary in "\n".join(help_lines) for s in own.values())

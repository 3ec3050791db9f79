"""`scalebot completion bash|zsh|fish`: the script completes commands, nested commands, flags, positional
choices and flag values, generated from the parser (checked by running bash on it)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import completion
from bot.cli import main as cli
from bot.cli.parser import build_parser
from tests.unit.bot.cli.test_cli_reads import _database

REPO = Path(__file__).resolve().parents[4]


def complete(line: str, *, cwd: Path | None = None) -> list[str]:
    """What bash offers for `line` (a trailing space: completing a new word); `scalebot` itself is
    this interpreter's `-m bot`, run in `cwd`."""
    script = completion.script(build_parser(), "bash")
    driver = (
        f'scalebot() {{ {shlex.quote(sys.executable)} -m bot "$@"; }}\n'
        f"{script}\n"
        f"COMP_WORDS=({line})\n"
        '[[ "$LINE" == *" " ]] && COMP_WORDS+=("")\n'
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        "_scalebot\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver],
        env={"LINE": line, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.split()


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("scalebot dr", ["drain"]),
        ("scalebot ops ", ["cancel", "list", "show", "verify-audit"]),
        ("scalebot plan ", ["advise", "consolidate", "drain", "scale", "wake", "zero"]),
        ("scalebot drain --pod", ["--pod-selector"]),
        ("scalebot ops list -o ", ["text", "json", "yaml", "wide", "name"]),
        ("scalebot completion ", ["bash", "fish", "zsh"]),
    ],
)
def test_bash_completes_the_parsers_words(line: str, offered: list[str]) -> None:
    assert complete(line) == offered


def test_every_command_is_offered_and_no_flag_before_a_dash() -> None:
    top = complete("scalebot ")

    assert {"zero", "wake", "scale", "drain", "console", "completion", "operations"} <= set(top)
    assert not [w for w in top if w.startswith("-")]


def test_zsh_loads_the_same_function_through_bashcompinit(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out

    assert script.startswith("#compdef scalebot\nautoload -U +X bashcompinit && bashcompinit\n")
    assert "complete -F _scalebot scalebot" in script
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-n"], input=script, text=True, check=True, timeout=30)


def test_fish_gets_the_same_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "fish"]) == 0
    script = capsys.readouterr().out

    assert "complete -c scalebot -f -a '(__scalebot_complete)'" in script
    assert "        case 'ops list'\n" in script and "        case 'plan drain'\n" in script
    assert "        case 'ops list -o'\n            echo 'text json yaml wide name'" in script
    if shutil.which("fish"):
        subprocess.run(["fish", "--no-execute"], input=script, text=True, check=True, timeout=30)


def test_operation_ids_complete_from_the_database(tmp_path: Path) -> None:
    _database(tmp_path / "elsewhere.db")

    assert complete("scalebot ops show --db elsewhere.db ", cwd=tmp_path) == ["op-1"]
    assert complete("scalebot operations cancel --db elsewhere.db op-", cwd=tmp_path) == ["op-1"]
    assert complete("scalebot ops show ", cwd=tmp_path) == [], "no ./scalebot.db: nothing, and no error"

"""`scalebot completion bash|zsh|fish`: the script completes commands, nested commands, flags, positional
choices and flag values, generated from the parser (checked by running bash on it)."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli import completion
from bot.cli import main as cli
from bot.cli.parser import build_parser
from tests.kubeconfigs import token_kubeconfig
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


def _simulated(db: Path) -> None:
    """The simulated cluster kept in `db` (nodes batch-0…2, system-0…1, web-0…2)."""
    from bot.runtime import wiring
    from engine.store.database import Store

    store = Store(db)
    wiring.simulated_cluster(store=store)
    store.close()


def test_nodes_and_pools_complete_from_the_cluster_typed_on_the_line(tmp_path: Path) -> None:
    _simulated(tmp_path / "sim.db")

    assert complete("scalebot cordon --simulated --db sim.db w", cwd=tmp_path) == ["web-0", "web-1", "web-2"]
    assert complete("scalebot plan drain --db sim.db --simulated sys", cwd=tmp_path) == [
        "system-0",
        "system-1",
    ]
    assert complete("scalebot zero --simulated --db sim.db ", cwd=tmp_path) == ["batch", "system", "web"]
    assert complete("scalebot wake --simulated --db sim.db b", cwd=tmp_path) == ["batch"]
    assert complete("scalebot zero --simulated --db sim.db --workloads-", cwd=tmp_path) == [
        "--workloads-only",
        "--workloads-return-timeout",
    ], "a dash completes flags, never names"


def test_clusters_complete_from_the_database_for_status_and_schedules(tmp_path: Path) -> None:
    from tests.unit.bot.cli.test_cli_reads import _schedules_database

    _schedules_database(tmp_path / "scalebot.db")

    assert complete("scalebot status ", cwd=tmp_path) == ["dev-eu", "prod"]
    assert complete("scalebot schedule list p", cwd=tmp_path) == ["prod"]


def test_the_hidden_complete_command_names_schedules_and_stays_out_of_help_and_completion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.bot.cli.test_cli_reads import _schedules_database

    _schedules_database(tmp_path / "scalebot.db")

    assert cli.main(["__complete", "schedules", "--db", str(tmp_path / "scalebot.db")]) == 0
    assert capsys.readouterr().out.split() == ["lunch", "nightly", "weekend"]
    assert "__complete" not in build_parser().format_help()
    assert "__complete" not in complete("scalebot _")


def test_a_completion_never_fails_the_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No database, no kubeconfig: nothing offered, exit 0, no file created."""
    missing = tmp_path / "missing.db"
    for kind in ("operations", "schedules", "clusters"):
        assert cli.main(["__complete", kind, "--db", str(missing)]) == 0
    assert cli.main(["__complete", "nodes", "--kubeconfig", str(tmp_path / "absent.yaml")]) == 0
    assert cli.main(["__complete", "pools", "--simulated", "--db", str(missing)]) == 0
    assert capsys.readouterr().out == ""
    assert not missing.exists()


@pytest.fixture
def silent_kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose API server accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    path = token_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        yield path
    finally:
        listener.close()


def test_a_cluster_that_does_not_answer_costs_the_shell_the_timeout_only(
    silent_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.cli import complete as dynamic

    started = time.monotonic()
    code = cli.main(["__complete", "nodes", "--kubeconfig", str(silent_kubeconfig)])
    waited = time.monotonic() - started

    assert code == 0 and capsys.readouterr().out == ""
    # The import of the client comes before the timeout starts; the wait for the server is bounded.
    assert waited < dynamic.TIMEOUT + 10, waited


def test_the_bash_script_asks_complete_for_each_commands_names() -> None:
    script = completion.script(build_parser(), "bash")
    assert "    drain) echo nodes ;;\n" in script and "    'ops cancel') echo operations ;;\n" in script
    assert "    zero) echo pools ;;\n" in script and "    status) echo clusters ;;\n" in script
    fish = completion.script(build_parser(), "fish")
    assert "        case 'plan scale'\n            echo pools" in fish
    assert 'scalebot __complete $kind --prefix "$cur" $ctx 2>/dev/null' in fish

"""kubectl's habits: global flags after the verb, an unknown flag answered with that command's
usage, Examples in every command's help (each one parses), header rows and `-o wide|name` in
lists, and each command offering only the flags that apply to it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.common import EXIT_OK, EXIT_USAGE
from bot.cli.parser import PROG, build_parser, command_paths
from bot.text.command_registry import CLI
from tests.unit.bot.cli.test_cli_reads import _database


def test_global_flags_are_accepted_after_the_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "typo.db"

    assert cli.main(["status", "--db", str(missing), "--log-format", "json", "-v"]) == EXIT_USAGE

    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["msg"] == f"error: no database at {missing}", "JSON, as asked after the verb"


def test_a_global_flag_before_the_verb_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--log-format", "json", "status", "--db", str(tmp_path / "typo.db")]) == EXIT_USAGE

    assert json.loads(capsys.readouterr().err)["level"] == "ERROR"


def test_an_unknown_flag_prints_that_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["ops", "list", "--bogus"])

    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: scalebot operations list ")
    assert err.rstrip().endswith("scalebot operations list: error: unrecognized arguments: --bogus")


def test_every_command_has_examples_and_each_example_parses(capsys: pytest.CaptureFixture[str]) -> None:
    paths = {path: sub for path, sub in command_paths(build_parser()) if path}

    assert sorted(CLI) == sorted(paths), "a registry entry per command"
    for path, sub in paths.items():
        assert "\nExamples:\n  scalebot " in sub.format_help(), path
        for example in CLI[path].examples_for(PROG):
            words = shlex.split(example)
            assert words[0] == "scalebot"
            args = build_parser().parse_args(words[1:])
            assert callable(args.handler), example


def test_ops_list_has_a_header_and_kubectls_wide_and_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "scalebot.db")
    _database(tmp_path / "scalebot.db")

    assert cli.main(["ops", "list", "--db", db]) == EXIT_OK
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "STATE", "KIND", "CLUSTER", "AGE", "SUMMARY"]
    assert row.split()[:4] == ["op-1", "succeeded", "zero", "dev-eu"]
    assert len(row) <= 80, "readable at 80 columns"

    assert cli.main(["ops", "list", "--db", db, "-o", "wide"]) == EXIT_OK
    header, row = capsys.readouterr().out.splitlines()
    assert "REQUESTED BY" in header and "CREATED" in header and "cli:alice" in row

    assert cli.main(["ops", "list", "--db", db, "-o", "name"]) == EXIT_OK
    assert capsys.readouterr().out == "operation/op-1\n"


def test_read_commands_offer_only_the_flags_that_apply(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["ops", "list"], ["ops", "show"], ["ops", "verify-audit"], ["status"], ["schedule"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*command, "--help"])
        text = capsys.readouterr().out
        for flag in ("--eks-cluster", "--kubeconfig", "--provider", "--simulated", "--graceful-window"):
            assert flag not in text, (command, flag)
        assert "--db FILE" in text and "Examples:" in text


WARN_AFTER_MAIN = """
import sys, warnings
from urllib3.exceptions import InsecureRequestWarning
from bot.cli.main import main
main(sys.argv[1:])
warnings.warn("Unverified HTTPS request is being made to host '127.0.0.1'", InsecureRequestWarning)
"""


@pytest.mark.parametrize("flags", [[], ["-v", "--log-format", "json"]], ids=["quiet", "json"])
def test_library_warnings_are_log_lines(flags: list[str], tmp_path: Path) -> None:
    """No InsecureRequestWarning on stderr by default; with -v it is a log line (JSON if asked)."""
    done = subprocess.run(
        [sys.executable, "-c", WARN_AFTER_MAIN, "status", "--db", str(tmp_path / "typo.db"), *flags],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    lines = done.stderr.splitlines()
    if not flags:
        assert lines == [f"error: no database at {tmp_path / 'typo.db'}"]
    else:
        error, warning = (json.loads(line) for line in lines)
        assert error["msg"] == f"error: no database at {tmp_path / 'typo.db'}"
        assert warning["level"] == "WARNING" and "InsecureRequestWarning" in warning["msg"]


def test_plan_scale_takes_the_words_of_scale(capsys: pytest.CaptureFixture[str]) -> None:
    """One name for one thing: `plan scale POOL N` previews `scale POOL N`."""
    planned = build_parser().parse_args(["plan", "scale", "web", "2"])
    scaled = build_parser().parse_args(["scale", "web", "2"])

    assert (
        (planned.pool, planned.size, planned.kind)
        == (scaled.pool, scaled.size, scaled.kind)
        == ("web", 2, "scale")
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "scale", "--help"])
    assert capsys.readouterr().out.startswith("usage: scalebot plan scale POOL N [options]\n")


def test_kubectls_global_flags_are_accepted_where_they_do_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script that passes --kubeconfig and --context to every command still works on `ops list`
    (which reads only the database), and `completion` takes them too, as kubectl's commands do."""
    db = tmp_path / "scalebot.db"
    _database(db)
    flags = ["--kubeconfig", str(tmp_path / "none"), "--context", "prod"]

    assert cli.main(["ops", "list", "--db", str(db), *flags, "-o", "name"]) == EXIT_OK
    assert cli.main(["completion", "bash", *flags]) == EXIT_OK
    assert capsys.readouterr().out.startswith("operation/op-1\n# scalebot bash completion")

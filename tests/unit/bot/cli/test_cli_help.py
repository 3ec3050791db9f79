"""`--help` of the pool commands is short: the usage line names the command's own arguments, the
shared cluster and provider options sit in groups, and no internal name (PROVIDER_…) shows."""

from __future__ import annotations

import pytest

from bot.cli.parser import build_parser


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("zero", "usage: scalebot zero [POOL ...] [options]"),
        ("wake", "usage: scalebot wake [POOL ...] [options]"),
        ("scale", "usage: scalebot scale POOL N [options]"),
    ],
)
def test_pool_commands_have_a_one_line_usage_and_grouped_options(
    capsys: pytest.CaptureFixture[str], command: str, usage: str
) -> None:
    text = help_of(capsys, command)

    assert text.splitlines()[0] == usage
    assert "PROVIDER_" not in text and "GRACEFUL_WINDOW" not in text
    own, shared = text.split("\ncluster and database:\n")
    assert "--eks-cluster" not in own and "--kubeconfig" not in own
    assert "pool provider:" in shared and "--eks-cluster VALUE   eks:" in shared


def test_the_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys)

    assert text.split("\n\n")[1].startswith("scalebot: drain nodes and scale node pools to zero and back")
    for command in ("drain", "zero", "wake", "scale", "console", "demo", "operations (ops)", "completion"):
        assert f"\n    {command} " in text

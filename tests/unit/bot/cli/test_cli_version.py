"""`scalebot --version` names the installed distribution's version (what the image test checks)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.cli.parser import build_parser

REPO = Path(__file__).resolve().parents[4]


def test_version_is_the_projects(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.split() == ["scalebot", version]

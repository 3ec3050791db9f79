"""The engine speaks no Slack: no mention, channel link, date or user-group markup and no slash
command in any string it builds; bot/text/messages.py renders the engine's data for Slack (and the CLI).

Read with `ast`, so docstrings and comments (which may name `/scale …` to say what a function
serves) are not counted, while f-string parts are.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"
SLACK = re.compile(r"<[@#!]|/scale [a-z]")
"""Markup, or the slash command with a subcommand (not the Kubernetes `…/scale` subresource)."""


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    # A string right after an assignment documents that attribute.
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for before, after in itertools.pairwise(stmts):
                documented = isinstance(before, ast.Assign | ast.AnnAssign)
                if documented and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    found.add(id(after.value))
    return found


def slack_strings(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and SLACK.search(node.value)
    ]


@pytest.mark.parametrize("path", sorted(ENGINE.rglob("*.py")), ids=lambda p: str(p.relative_to(ENGINE)))
def test_no_slack_markup_or_slash_command_in_the_engine(path: Path) -> None:
    assert slack_strings(path.read_text()) == []


def test_the_check_sees_f_strings_and_skips_docstrings() -> None:
    source = '''
def f(u):
    """For `/scale status`."""
    return f"Approved by <@{u}>" + "see `/scale ops list`"
'''
    assert sorted(text for _, text in slack_strings(source)) == ["Approved by <@", "see `/scale ops list`"]

"""Rules of the code's layout that no linter checks: private names stay in their module, and the
sentences that excuse a long module are true.

A private name (`_name`) is private to the module that defines it. Importing it from another module
(`from engine.x import _helper`, or `x._helper` through an imported module) couples the two behind
the owner's back: the owner may rename or change it as an internal detail. ruff's PLC2701 checks
this only against other packages, so this test checks it inside scalebot's own. Code another module
needs is public in the module that owns it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "engine", "localcluster")
# A module over this many lines says why it is one module; see test_long_modules_say_why.
LONG_MODULE_LINES = 600
LONG_MODULE_SENTENCE = "600 lines"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_own(target: str) -> bool:
    return target.split(".", maxsplit=1)[0] in PACKAGES


def private_names_used_across_modules(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Each private name of another scalebot module that `module`'s source imports or reaches
    through an imported module, as `line: owner.name`."""
    tree = ast.parse(source, module)
    found: list[str] = []
    imported_modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _import_target(node, module, is_package)
            for alias in node.names:
                if _is_private(alias.name) and target != module and _is_own(target):
                    found.append(f"{node.lineno}: {target}.{alias.name}")
                elif _is_own(target):
                    imported_modules[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_own(alias.name):
                    imported_modules[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported_modules
        ):
            found.append(f"{node.lineno}: {imported_modules[node.value.id]}.{node.attr}")
    return found


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_the_checker_finds_private_imports_and_attributes_and_allows_its_own() -> None:
    # The check itself can fail: a module written the wrong way is caught each way.
    source = (
        "from engine.kube.client import _one\nimport engine.kube.client as kc\nkc._two\n"
        "from engine.domain import model\nmodel._three\nfrom .probe import _mine\nfrom argparse import _X\n"
    )
    found = private_names_used_across_modules(source, "engine.probe")
    assert [line.split(": ", 1)[1] for line in found] == [
        "engine.kube.client._one",
        "engine.kube.client._two",
        "engine.domain.model._three",
    ]


def test_no_module_uses_another_modules_private_names() -> None:
    sources = _sources()
    assert len(sources) > 100, "the packages' sources were not found"
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sources
        for line in private_names_used_across_modules(
            path.read_text(), _module_name(path), is_package=path.name == "__init__.py"
        )
    ]
    assert found == [], "make these public in the module that owns them, or move the code:\n" + "\n".join(
        found
    )


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_long_modules_say_why(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    says_why = LONG_MODULE_SENTENCE in path.read_text()
    if lines > LONG_MODULE_LINES:
        assert says_why, f"{lines} lines: split it, or say why it is one module over 600 lines"
    else:
        assert not says_why, f"it says it is over 600 lines, but has {lines}: drop the sentence"

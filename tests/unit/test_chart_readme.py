"""charts/scalebot/README.md's values table, generated from values.yaml's comments by
scripts/chart_readme.py (helm-docs style): current, and a row for every value of the chart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "scripts" / "chart_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_readme"] = module
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def test_the_values_table_is_current() -> None:
    assert GENERATOR.main(["chart_readme.py", "--check"]) == 0, "run scripts/chart_readme.py"


def test_every_value_has_a_row_and_the_knobs_are_described() -> None:
    text = GENERATOR.VALUES.read_text(encoding="utf-8")
    rows = {key: description for key, _, description in GENERATOR.rows(text)}
    for top in yaml.safe_load(text):
        assert any(key == top or key.startswith(f"{top}.") for key in rows), top
    for knob in (
        "serviceAccount.annotations",
        "image.digest",
        "networkPolicy.metricsFrom",
        "rbac.keda",
        "config",
    ):
        assert rows[knob], f"{knob} has no description in values.yaml"


def test_a_comment_becomes_the_description_and_a_value_the_default() -> None:
    values = "# The group.\ngroup:\n  # What it does.\n  knob: 3  # and more\n  other: [a]\n"
    assert GENERATOR.rows(values) == [
        ("group", "", "The group."),
        ("group.knob", "3", "What it does. and more"),
        ("group.other", '["a"]', ""),
    ]

"""The chart's alerts and dashboard checked against what scalebot exposes.

`evaluate` runs expressions through Prometheus' own PromQL engine (localcluster/promql, built from
its pinned Go module by scripts/build-go-tool.sh) over series loaded from an exposition: each
sample held constant for `LOAD_MINUTES` minutes, one point a minute, unless a test gives it a
sequence of its own (an operation that fails half-way).

Every PromQL expression (the alert rules of charts/scalebot/files/alerts.yaml, the dashboard's
targets and variable queries in files/dashboard.json) is parsed by a PromQL parser (the
promql-parser package: the Rust `promql-parser` crate, which follows Prometheus' grammar), and
every series selector in it must name a metric of the given exposition, with label matchers only
on labels that metric has. Grafana's variables are replaced before parsing (`$cluster` by `.*`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

CHART = Path(__file__).resolve().parents[1] / "charts" / "scalebot"
ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
_GRAFANA_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[a-z_:]+), *(?P<label>[a-z_]+)\)$")


@dataclass(frozen=True)
class Query:
    where: str
    expr: str


def queries() -> list[Query]:
    """Every PromQL expression the chart ships, with where it comes from."""
    found = [
        Query(f"alert {rule['alert']}", rule["expr"])
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
    ]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        found += [Query(f"panel {panel['title']!r} {t['refId']}", t["expr"]) for t in panel["targets"]]
    return found


def variable_queries() -> list[tuple[str, str]]:
    """The dashboard's `label_values(metric, label)` variables as (metric, label)."""
    found = []
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["definition"])
            assert match, f"variable {variable['name']}: {variable['definition']}"
            found.append((match["metric"], match["label"]))
    return found


def exposed(exposition: str) -> dict[str, set[str] | None]:
    """Series names in a text exposition -> their label names (None: no sample shows them)."""
    names: dict[str, set[str] | None] = {}
    for family in text_string_to_metric_families(exposition):
        labels = {label for sample in family.samples for label in sample.labels} - {"le"}
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names[family.name + suffix] = labels if family.samples else None
    return names


def _selectors(node: Any) -> Iterator[Any]:
    if isinstance(node, promql_parser.VectorSelector):
        yield node
        return
    for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, (str, int, float)):
            yield from _selectors(child)
    for arg in getattr(node, "args", None) or ():
        yield from _selectors(arg)


def problems(exposition: str) -> list[str]:
    """What in the chart's queries does not hold against `exposition` (empty: all good)."""
    names = exposed(exposition)
    found = []
    for query in queries():
        text = grafana_free(query.expr)
        try:
            ast = promql_parser.parse(text)
        except ValueError as exc:
            found.append(f"{query.where}: does not parse: {exc}")
            continue
        selectors = list(_selectors(ast))
        if not selectors:
            found.append(f"{query.where}: reads no metric")
        for selector in selectors:
            if selector.name not in names:
                found.append(f"{query.where}: {selector.name} is not exposed")
                continue
            labels = names[selector.name]
            for matcher in selector.matchers.matchers:
                if labels is not None and matcher.name not in labels:
                    found.append(f"{query.where}: {selector.name} has no label {matcher.name}")
    for metric, label in variable_queries():
        if metric not in names or (names[metric] is not None and label not in (names[metric] or ())):
            found.append(f"variable label_values({metric}, {label}): no such series or label")
    return found


LOAD_MINUTES = 30


def _number(value: float) -> str:
    """A sample value in promqltest's notation (no exponent: `1e+09+0x30` would not parse)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return f"{value:.6f}".rstrip("0").rstrip(".")


def series_key(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def load_text(exposition: str, sequences: Mapping[str, str] | None = None) -> str:
    """promqltest's `load` for the exposition's samples; `sequences` replaces the values of the
    series named by `series_key` (e.g. `"0+0x20 1+0x10"`: a counter that grows at minute 21)."""
    sequences = dict(sequences or {})
    lines = ["load 1m"]
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            key = series_key(sample.name, sample.labels)
            values = sequences.pop(key, f"{_number(sample.value)}+0x{LOAD_MINUTES}")
            lines.append(f"  {key} {values}")
    assert not sequences, f"no such series in the exposition: {sorted(sequences)}"
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Evaluated:
    expr: str
    error: str
    series: int
    value: str


def evaluate(engine: Path, load: str, exprs: Sequence[str]) -> list[Evaluated]:
    """Evaluate `exprs` at the end of `load` with the built engine (a `go test -c` binary)."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / name for name in ("load", "exprs.json", "out.json")}
        paths["load"].write_text(load)
        paths["exprs.json"].write_text(json.dumps(list(exprs)))
        env = {
            **os.environ,
            "PROMQL_LOAD": str(paths["load"]),
            "PROMQL_EXPRS": str(paths["exprs.json"]),
            "PROMQL_AT": str(LOAD_MINUTES * 60),
            "PROMQL_OUT": str(paths["out.json"]),
        }
        result = subprocess.run(
            [str(engine), "-test.run", "^TestEvaluate$"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return [Evaluated(**r) for r in json.loads(paths["out.json"].read_text())]


def grafana_free(expr: str) -> str:
    return _GRAFANA_VARIABLE.sub(".*", expr)

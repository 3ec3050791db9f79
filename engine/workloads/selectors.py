"""Label selectors written as text (`env in (dev,staging),!protected`), parsed into `LabelSelector`.

Pure. The configuration names namespaces and exclusions with the same selector syntax kubectl's
`-l` accepts (equality `=`, `==`, `!=`; sets `in`, `notin`; existence `key`, `!key`), so planning
can match labels in memory and report what a selector excluded, instead of asking the API server
to filter and losing that information.
"""

from __future__ import annotations

import re

from engine.domain.model import LabelSelector, LabelSelectorRequirement

_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


def parse_selector(text: str) -> LabelSelector:
    """Parse a selector; an empty text selects everything. ValueError says which part is wrong."""
    match_labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    for part in _split(text):
        try:
            requirement = _requirement(part)
        except ValueError as exc:
            raise ValueError(f'invalid label selector "{text}": {exc}') from None
        if requirement.operator == "=":
            match_labels[requirement.key] = requirement.values[0]
        else:
            expressions.append(requirement)
    return LabelSelector(match_labels=match_labels, match_expressions=tuple(expressions))


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two requirements)."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    stripped = [p.strip() for p in parts]
    if stripped == [""]:
        return []
    if "" in stripped:
        raise ValueError(f'invalid label selector "{text}": empty requirement between commas')
    return stripped


def _requirement(part: str) -> LabelSelectorRequirement:
    if m := _SET.match(part):
        values = tuple(v.strip() for v in m["values"].split(","))
        op = "In" if m["op"] == "in" else "NotIn"
        return LabelSelectorRequirement(_checked_key(m["key"]), op, tuple(_checked_value(v) for v in values))
    if m := _EQUALITY.match(part):
        key, value = _checked_key(m["key"]), _checked_value(m["value"])
        if m["op"] == "!=":
            return LabelSelectorRequirement(key, "NotIn", (value,))
        return LabelSelectorRequirement(key, "=", (value,))
    if part.startswith("!"):
        return LabelSelectorRequirement(_checked_key(part[1:].strip()), "DoesNotExist")
    return LabelSelectorRequirement(_checked_key(part), "Exists")


def _checked_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f'"{key}" is not a valid label key')
    return key


def _checked_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise ValueError(f'"{value}" is not a valid label value')
    return value

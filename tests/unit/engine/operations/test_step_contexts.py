"""Each step is given only what it uses of its runner (`engine.operations.steps.context`).

A step's `ctx` is typed with the parts of `StepContext` it declares, and `mypy --strict` refuses a
step that reaches past them; this pins which steps reach the store at all, and through which port,
so widening a step's context is a visible change here."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import pytest

from engine.operations.steps import STEPS
from engine.operations.steps.context import Basics, StepContext
from engine.operations.steps.cordon_drain import give_back_nodes

STORE_PORTS = {"sleep_records", "audit_trail"}

EXPECTED_STORE_PORTS = {
    "fit": set(),
    "remove_node": set(),
    "consolidated": set(),
    "record": {"sleep_records"},
    "cordon": {"sleep_records"},
    "drain": set(),
    "force": {"audit_trail"},
    "remove": set(),
    "verify": {"sleep_records"},
    "resize": {"sleep_records"},
    "wait_ready": {"sleep_records"},
    "finish": {"sleep_records"},
    "workloads_sleep": {"sleep_records"},
    "workloads_leave": set(),
    "workloads_wake": {"sleep_records"},
    "workloads_return": {"sleep_records"},
}


def _members(context: type) -> set[str]:
    found: set[str] = set()
    for cls in context.__mro__:
        if getattr(cls, "_is_protocol", False) and cls.__module__ != "typing":
            found |= {name for name in vars(cls) if not name.startswith("_")}
    return found


def _context_of(step: Callable[..., Any]) -> type:
    context = typing.get_type_hints(step)["ctx"]
    assert isinstance(context, type)
    return context


def test_every_step_of_the_flows_is_in_the_table() -> None:
    assert set(STEPS) == set(EXPECTED_STORE_PORTS)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_step_reaches_only_the_store_ports_it_uses_and_never_the_whole_store(name: str) -> None:
    members = _members(_context_of(STEPS[name]))
    assert "store" not in members
    assert _members(Basics) <= members, "every step has the clock, the settings and emit"
    assert members & STORE_PORTS == EXPECTED_STORE_PORTS[name]
    assert _context_of(STEPS[name]) is not StepContext, "a step declares the parts it uses"


def test_giving_nodes_back_uses_only_the_clusters_executors() -> None:
    assert _members(_context_of(give_back_nodes)) & STORE_PORTS == set()

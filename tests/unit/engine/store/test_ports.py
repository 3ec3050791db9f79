"""The narrow ports of the store (`engine.store.ports`): `Store` implements every one, and each is a
small part of it.

mypy checks the types wherever a `Store` is given for a port; this checks what mypy cannot see
until someone passes a `Store`: every method a port names is `Store`'s, with the same parameters
(names, kinds, defaults), so a port cannot drift from the store it describes."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from engine.store import ports
from engine.store.database import Store

PORTS = [getattr(ports, name) for name in ports.__all__]


def _members(port: type) -> dict[str, Callable[..., Any]]:
    """The methods a port declares, its own and those of the ports it extends."""
    found: dict[str, Callable[..., Any]] = {}
    for cls in reversed(port.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False) or cls.__module__ == "typing":
            continue
        found.update({n: f for n, f in vars(cls).items() if callable(f) and not n.startswith("_")})
    return found


def _parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("port", PORTS, ids=lambda port: port.__name__)
def test_the_store_implements_every_method_of_each_port_with_its_parameters(port: type) -> None:
    members = _members(port)
    assert members, f"{port.__name__} declares no method"
    for name, declared in members.items():
        implemented = getattr(Store, name, None)
        assert implemented is not None, f"{port.__name__}.{name} is not a method of Store"
        assert _parameters(implemented) == _parameters(declared), f"{port.__name__}.{name}"


def test_each_port_is_a_small_part_of_the_store() -> None:
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    for port in PORTS:
        assert len(_members(port)) <= 15 < len(public), port.__name__

"""Fixtures of the reliability tests (the control plane fixtures come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.support import Processes, pool_and_spare, pool_held_by_a_pdb


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Processes this test starts; whatever is still alive at the end is killed (also on failure)."""
    registry = Processes(tmp_path)
    try:
        yield registry
    finally:
        registry.cleanup()


@pytest.fixture
def spare_pool(node_pool: Callable[..., list[str]], pool_key: str, unique_name: str) -> tuple[str, list[str]]:
    """Pool `<name>-a` (one node) and its nodes, with a one-node pool `<name>-b` beside it."""
    return pool_and_spare(node_pool, pool_key, unique_name)


@pytest.fixture
def held_pool(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], pool_key: str, unique_name: str
) -> tuple[str, list[str]]:
    """`spare_pool` whose one `web` pod a PDB keeps in place until `support.release_pdb`."""
    return pool_held_by_a_pdb(admin_api, namespace, node_pool, pool_key, unique_name)

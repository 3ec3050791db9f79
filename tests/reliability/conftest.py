"""Fixtures of the reliability tests (the control plane fixtures come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.support import Processes


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Processes this test starts; whatever is still alive at the end is killed (also on failure)."""
    registry = Processes(tmp_path)
    try:
        yield registry
    finally:
        registry.cleanup()

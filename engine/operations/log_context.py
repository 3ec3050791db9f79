"""Fields every log line of a thread carries while it works on one operation.

The runner binds `operation` (and `cluster` once the operation is read) around the work of each
operation; whatever logs underneath (drain, pools, workloads) needs no `extra=` for them. bot.config.logs
adds the bound fields to each line; a field passed as `extra=` wins over the bound one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

_FIELDS: ContextVar[Mapping[str, str]] = ContextVar("scalebot_log_fields", default=MappingProxyType({}))


@contextmanager
def bind(**fields: str) -> Iterator[None]:
    """Add `fields` to every log line of this thread (or task) until the block ends."""
    token = _FIELDS.set({**_FIELDS.get(), **fields})
    try:
        yield
    finally:
        _FIELDS.reset(token)


def add(**fields: str) -> None:
    """Add `fields` inside the innermost `bind` block (which removes them again when it ends)."""
    _FIELDS.set({**_FIELDS.get(), **fields})


def current() -> Mapping[str, str]:
    return _FIELDS.get()

"""Pausing Python's cyclic garbage collector around work that builds many long-lived objects.

Decoding 30,000 pods or planning over them creates hundreds of thousands of objects, none of them
garbage: every collection their allocations trigger meanwhile scans them (a full one, the whole
heap) for nothing, 10-50 % of the work (docs/benchmarks.md). `collector_paused` turns the
collector off for the span and back on when the last span open in the process ends, and only if
it was on when the first began, so a caller's own `gc.disable()` is kept and overlapping spans in
several threads never turn it on under one another. The objects are collected as usual afterwards.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open_spans = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    global _open_spans, _resume  # noqa: PLW0603 - the process has one collector, so one count
    with _lock:
        if _open_spans == 0:
            _resume = gc.isenabled()
            gc.disable()
        _open_spans += 1
    try:
        yield
    finally:
        with _lock:
            _open_spans -= 1
            if _open_spans == 0 and _resume:
                gc.enable()

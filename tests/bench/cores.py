"""Splitting this machine's cores between a service and what measures it, as separate machines
would: `core_split` decides, `pin_process` applies it to every thread of a running process."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def core_split() -> tuple[set[int], set[int]] | None:
    """(the first core, the others), or None where there are fewer than two."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return ({cores[0]}, set(cores[1:])) if len(cores) >= 2 else None


def pin_process(pid: int, cores: set[int]) -> int:
    """Pin every thread of process `pid` to `cores` (threads it starts later inherit the pinning);
    returns how many threads were pinned. A thread that ended meanwhile is skipped."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(task.name), cores)
            pinned += 1
    return pinned

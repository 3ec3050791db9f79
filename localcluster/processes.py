"""The control plane's child processes: their record, the hooks that stop them when this process
exits or is killed, and what is read about a running one (alive, log tail, memory).

Every live `ControlPlane` registers here; `atexit` and SIGTERM/SIGHUP (turned into SystemExit) stop
them all, and a child asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG), so no
test run leaves an etcd or an API server behind. `localcluster.controlplane` starts and stops them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane


LOG_TAIL_LINES = 50


@dataclass
class ComponentProcess:
    name: str
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    restarts: int = 0
    argv: list[str] = field(default_factory=list)


LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()
_HOOKS = {"installed": False}
_HOOKS_LOCK = threading.Lock()


def _stop_all_live() -> None:
    for cp in list(LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


def _exit_on_signal(signum: int, _frame: object) -> None:
    # Raising SystemExit unwinds `with` blocks and pytest finalizers, then atexit runs: the same
    # orderly teardown as a normal exit. Only installed where the default action would kill us.
    raise SystemExit(128 + signum)


def install_process_hooks() -> None:
    with _HOOKS_LOCK:
        if _HOOKS["installed"]:
            return
        _HOOKS["installed"] = True
        atexit.register(_stop_all_live)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is signal.SIG_DFL:
                    signal.signal(sig, _exit_on_signal)


_PR_SET_PDEATHSIG = 1
LIBC: dict[str, Any] = {}


def die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGKILL the child if the parent dies without cleaning up.

    The libc handle is resolved in the parent (see _spawn): the forked child only makes the call.
    """
    LIBC["prctl"](_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(data.splitlines()[-lines:])


def process_rss_kib(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) in KiB from /proc; (0, 0) if the process is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except (OSError, ValueError):
        return 0, 0
    return rss, hwm


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie (exited, not yet reaped by its new parent) counts as gone.
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False

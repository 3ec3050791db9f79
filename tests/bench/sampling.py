"""A sampling profile of the measured scalebot process, taken by py-spy from outside it.

cProfile slows a threaded client down by a fifth and can only run on a separate, unmeasured run;
py-spy reads the process's stacks from outside (`--nonblocking`: the process is never paused), so
the profile belongs to the very run whose figures are reported. It samples every thread, idle
ones included (`--idle`), so a sample is a slice of one thread's wall time; `summarize` sorts
those slices into what the thread was waiting for, and ranks scalebot's own functions.

py-spy's raw output is one line per distinct stack, root first: `frame;frame;... COUNT`, each
frame `function (path:line)`.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RATE_HZ = 10
"""Samples per second per thread: enough for minutes-long runs. py-spy's own CPU time is reported
with the profile: at 20 Hz it used 15 % of a core beside a 1,000-node zero-scale."""

WAITS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (category, markers: any of them in a stack puts the sample there); the first match wins.
    ("worker threads idle, waiting for work", ("_worker (", "concurrent/futures/thread.py")),
    ("client-side rate limiter (QPS 50 / burst 100)", ("engine/kube/ratelimit.py",)),
    ("waiting for the API server's answer", ("getresponse (",)),
    ("sending requests (TLS write)", ("sendall (", "_send_output (")),
    ("runner and main thread waiting (next pass, operation end)", ("wait_idle (", "clock.py")),
    (
        "Slack progress path (sender, outbox)",
        ("bot/slack/delivery/sender.py", "bot/slack/delivery/progress.py", "bot/slack/delivery/outbox.py"),
    ),
)
"""Stacks that contain a marker are sorted into its category; the rest is Python running."""
IDLE_LEAVES = ("threading.py", "queue.py", "selectors.py")
"""A stack that ends in one of these (a condition, event, queue or select wait) is a thread
blocked on something not named above, not one using the CPU."""
OTHER_WAITS = "other threads blocked (conditions, queues)"
IDLE_CATEGORIES = frozenset({WAITS[0][0], WAITS[4][0], OTHER_WAITS})
"""Left out of the own-function ranking: threads with nothing to do."""
OWN_CODE = ("engine/", "bot/")
"""scalebot's packages; py-spy prints paths as the interpreter imported them (relative to the
repository when it runs from there, absolute from an installed copy)."""


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    path: str
    line: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        function, _, rest = text.partition(" (")
        path, _, line = rest.rstrip(")").rpartition(":")
        return cls(function, path, line)

    def short(self) -> str:
        path = self.path
        for marker in ("/site-packages/", "/lib/python3.11/", "/work/main/"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        own = _own_path(self.path)
        return f"{self.function} ({own or path})"


def _own_path(path: str) -> str | None:
    """`engine/drain/passes.py` for a frame in scalebot's own code, whatever prefix py-spy printed."""
    for package in OWN_CODE:
        if path.startswith(package):
            return path
        if f"/{package}" in path and "/site-packages/" not in path:
            return package + path.split(f"/{package}", 1)[1]
    return None


def parse_raw(lines: Iterable[str]) -> list[tuple[tuple[str, ...], int]]:
    """(stack of frame texts root first, samples) per line of py-spy's raw format."""
    out: list[tuple[tuple[str, ...], int]] = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((tuple(stack.split(";")), int(count)))
    return out


def unqualified(frame: str) -> str:
    """`run (path:1)` for `_WorkItem.run (path:1)`: py-spy 0.4.2+ prints qualified names."""
    function, sep, rest = frame.partition(" (")
    return function.rpartition(".")[2] + sep + rest


def category(stack: Sequence[str]) -> str:
    stack = [unqualified(frame) for frame in stack]
    joined = ";".join(stack)
    for name, markers in WAITS:
        if any(m in joined for m in markers) and (name != WAITS[0][0] or _idle_worker(stack)):
            return name
    if stack and any(f"/{leaf}:" in stack[-1] or f"({leaf}:" in stack[-1] for leaf in IDLE_LEAVES):
        return OTHER_WAITS
    return "running Python (CPU: parsing, classification, bookkeeping)"


def _idle_worker(stack: Sequence[str]) -> bool:
    """A pool thread blocked in its work queue, not one running a task (tasks nest under `run`)."""
    return not any(frame.startswith("run (") and "concurrent/futures/thread.py" in frame for frame in stack)


def summarize(
    stacks: Sequence[tuple[tuple[str, ...], int]], *, rate_hz: int = RATE_HZ, top: int = 15
) -> dict[str, Any]:
    """Thread time by category, and scalebot's innermost own functions by thread time."""
    total = sum(n for _, n in stacks)
    by_category: Counter[str] = Counter()
    own: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for stack, n in stacks:
        name = category(stack)
        by_category[name] += n
        if name in IDLE_CATEGORIES:
            continue
        frames = [Frame.parse(f) for f in stack]
        innermost_own = next((f for f in reversed(frames) if _own_path(f.path)), None)
        if innermost_own is not None:
            own[innermost_own.short()] += n
        if name.startswith("running Python") and frames:
            leaves[frames[-1].short()] += n
    seconds = 1.0 / rate_hz

    def table(counter: Counter[str], limit: int) -> list[list[Any]]:
        return [[name, n * seconds, n / total if total else 0.0] for name, n in counter.most_common(limit)]

    return {
        "samples": total,
        "rate_hz": rate_hz,
        "thread_seconds": total * seconds,
        "by_category": table(by_category, len(by_category)),
        "own_functions": table(own, top),
        "cpu_leaves": table(leaves, top),
    }


def render(summary: dict[str, Any]) -> list[str]:
    """Plain-text tables of a summary, for the report."""

    def block(title: str, entries: Sequence[Sequence[Any]]) -> list[str]:
        lines = [title]
        lines += [f"  {seconds:9.1f} s  {share * 100:5.1f} %  {name}" for name, seconds, share in entries]
        return lines

    return [
        f"{summary['samples']:,} samples at {summary['rate_hz']} Hz per thread = "
        f"{summary['thread_seconds']:.0f} thread-seconds",
        *block("thread time by what the thread was doing:", summary["by_category"]),
        *block(
            "busy thread time by scalebot's innermost own function (idle workers and waits between "
            "passes left out):",
            summary["own_functions"],
        ),
        *block("CPU samples by the Python function running:", summary["cpu_leaves"]),
    ]


class Sampler:
    """`py-spy record` attached to a running process until it exits."""

    def __init__(self, pid: int, out: Path, *, rate_hz: int = RATE_HZ) -> None:
        self.out = out
        self.rate_hz = rate_hz
        self._proc = subprocess.Popen(
            [
                py_spy_path() or "py-spy",
                "record",
                "--nonblocking",
                "--idle",
                "--rate",
                str(rate_hz),
                "--format",
                "raw",
                "--output",
                str(out),
                "--pid",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def finish(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait for py-spy to write its file (it stops when the process exits); the summary."""
        # Its CPU time: what the children reaped while it is waited for used (only py-spy here).
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            _, err = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if not self.out.exists():
            return {"error": (err or b"").decode(errors="replace").strip()[-500:] or "py-spy wrote nothing"}
        with self.out.open(encoding="utf-8", errors="replace") as lines:
            return {**summarize(parse_raw(lines), rate_hz=self.rate_hz), "sampler_cpu_seconds": cpu}


def py_spy_path() -> str | None:
    """py-spy from the interpreter's own environment (the test extra installs it), else from PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")

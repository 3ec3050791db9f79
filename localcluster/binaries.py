"""Locating (and, on first use, building) the pinned control-plane binaries.

This module owns the call to scripts/build-control-plane.sh: it runs the script, which returns at
once when its cache is warm, and hands back the cache directory. Whatever prevents the build (no Go
toolchain, Go too old, the Go module proxy unreachable, a checksum that disagrees with the lock)
becomes a `ControlPlaneUnavailable` carrying the script's own explanation, so that tests fail with a
message saying what is missing instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")

# Shapes of `go` errors that mean a module could not be fetched or verified: the network, the module
# proxy or the checksum database refused or did not answer. Matched on the error's shape, never on a
# host name, so a mirror set in GOPROXY is recognised the same way.
_FETCH_FAILURES = (
    "dial tcp",
    "no such host",
    "i/o timeout",
    "timeout",
    "connection refused",
    "connection reset",
    "TLS handshake",
    "GOPROXY",
    "GOSUMDB",
    "network is unreachable",
    "403 Forbidden",
    "404 Not Found",
    "410 Gone",
    "reading https://",
)

# A checksum that disagrees with the committed go.sum: never a network problem, always a real one.
_CHECKSUM_FAILURES = ("checksum mismatch", "SECURITY ERROR", "missing go.sum entry")


class ControlPlaneUnavailable(RuntimeError):
    """The control-plane binaries cannot be built here; the message says what is missing."""


def _explain(returncode: int, tail: list[str]) -> str:
    """Turn the tail of the build script's stderr into one headline plus the evidence."""
    own = [line for line in tail if line.startswith(("build-control-plane:", "build-go-tool:"))]
    text = "\n".join(tail)
    if own and "phase " not in own[-1]:
        # The script's own `die` message already names what is missing (Go, Go version, a file).
        headline = own[-1].split(":", 1)[1].strip()
    elif any(fragment in text for fragment in _CHECKSUM_FAILURES):
        headline = (
            "a downloaded module does not match the committed lock (localcluster/go/*/go.sum); "
            "if the lock was edited by hand, restore it (git checkout localcluster/go) or regenerate it "
            "with scripts/bump-control-plane.sh"
        )
    elif any(fragment in text for fragment in _FETCH_FAILURES):
        proxy = os.environ.get("GOPROXY") or "the default in `go env GOPROXY`"
        headline = (
            f"the pinned Kubernetes/etcd/kwok modules cannot be downloaded (GOPROXY: {proxy}); check "
            "your Go module proxy setting (GOPROXY, GOSUMDB, GONOSUMDB, GOFLAGS) and that it is "
            "reachable, then re-run"
        )
    else:
        headline = f"the build script failed (exit code {returncode})"
    evidence = "\n".join(f"    {line}" for line in tail[-25:])
    return f"control plane unavailable: {headline}\n  script: {BUILD_SCRIPT}\n  last output:\n{evidence}"


def _pump(stream: IO[str], sink: deque[str], echo: IO[str] | None) -> None:
    for line in stream:
        sink.append(line.rstrip("\n"))
        if echo is not None:
            echo.write(line)
            echo.flush()


def ensure_binaries(*, echo: IO[str] | None = None, timeout: float = 3 * 3600) -> Path:
    """Build the control-plane binaries if needed and return the cache directory.

    The directory holds bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,kwok,
    karpenter-kwok}, kwok.yaml, capi-crds/, karpenter-crds/, build-times.txt and STAMP.
    `SCALEBOT_CACHE_DIR` (read by the script) moves the cache. The script's progress goes to `echo`
    (default: stderr) as it happens, because a cold build takes many minutes.
    """
    cache_dir = Path(_run_build(BUILD_SCRIPT, echo=echo, timeout=timeout))
    missing = [name for name in BINARIES if not (cache_dir / "bin" / name).is_file()]
    if missing or not (cache_dir / "kwok.yaml").is_file():
        raise ControlPlaneUnavailable(
            f"control plane unavailable: {BUILD_SCRIPT} reported {cache_dir}, but it lacks "
            f"{', '.join(missing) or 'kwok.yaml'}"
        )
    return cache_dir


GO_TOOL_SCRIPT = REPO_ROOT / "scripts" / "build-go-tool.sh"


def ensure_go_tool(tool: str, *, echo: IO[str] | None = None, timeout: float = 3600) -> Path:
    """Build a Go tool of the tests if needed (scripts/build-go-tool.sh: `helm`, `promql`) and return
    the binary's path."""
    binary = Path(_run_build(GO_TOOL_SCRIPT, tool, echo=echo, timeout=timeout))
    if not binary.is_file():
        raise ControlPlaneUnavailable(
            f"{tool} unavailable: {GO_TOOL_SCRIPT} reported {binary}, which is missing"
        )
    return binary


def _run_build(script: Path, *args: str, echo: IO[str] | None, timeout: float) -> str:
    """Run a build script (its progress to `echo`, default stderr) and return its last stdout line."""
    if not script.is_file():
        raise ControlPlaneUnavailable(f"control plane unavailable: build script {script} is missing")
    for tool in ("bash", "flock"):
        if shutil.which(tool) is None:
            raise ControlPlaneUnavailable(
                f"control plane unavailable: `{tool}` is not installed; {script} needs it"
            )
    tail: deque[str] = deque(maxlen=200)
    proc = subprocess.Popen(
        ["bash", str(script), *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    pump = threading.Thread(
        target=_pump, args=(proc.stderr, tail, echo if echo is not None else sys.stderr), daemon=True
    )
    pump.start()
    try:
        stdout = proc.stdout.read()
        proc.wait(timeout=timeout)
    except BaseException:
        # Ctrl-C or a timeout: the script holds a flock and builds into a temporary directory, so
        # stopping it leaves no half-finished cache behind.
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    pump.join(timeout=10)
    proc.stderr.close()
    lines = [line for line in stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise ControlPlaneUnavailable(_explain(proc.returncode, list(tail)))
    return lines[-1]


def build_summary(cache_dir: Path) -> str:
    """One line from build-times.txt: total wall time and peak RSS of the build that filled the cache."""
    times = cache_dir / "build-times.txt"
    if not times.is_file():
        return "control-plane build: no build-times.txt"
    total = "?"
    peak_kb = 0
    phases: list[str] = []
    for line in times.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "total":
            total = parts[1]
        elif len(parts) == 3 and parts[2].isdigit():
            peak_kb = max(peak_kb, int(parts[2]))
            phases.append(f"{parts[0]} {parts[1]} s")
    return (
        f"control-plane build: {total} s (peak RSS {peak_kb / 1048576:.1f} GiB; {', '.join(phases)}) "
        f"cached in {cache_dir}"
    )

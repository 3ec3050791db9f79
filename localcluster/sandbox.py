"""`scalebot sandbox up|down`: a demo cluster that outlives the command that started it.

This module owns the sandbox's life cycle on disk: `up` starts a detached ControlPlane, fills it
with a small demo cluster, and records in `<state_dir>/sandbox.json` everything `down` needs (the
process ids, which are also their process-group ids, the binaries they run, the run directory);
`down` stops exactly those process groups, after checking that each pid still runs the binary that
was recorded (a recycled pid is never signalled), and removes the run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from localcluster import bodies, objects, waits
from localcluster.controlplane import ControlPlane

STATE_FILE = "sandbox.json"
DEMO_NAMESPACE = "demo"
DEMO_POOLS = {"pool-a": 3, "pool-b": 4, "pool-c": 3}


class SandboxError(RuntimeError):
    """The sandbox cannot be started or stopped; the message says why."""


def _state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def _runs(pid: int, argv0: str) -> bool:
    """True if `pid` is alive and still executes `argv0` (guards against pid reuse)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    if exe.endswith(" (deleted)"):
        exe = exe.removesuffix(" (deleted)")
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z" and os.path.realpath(argv0) == exe


def status(state_dir: Path) -> dict[str, Any] | None:
    """The recorded sandbox if all of its processes are still running, else None."""
    path = _state_path(state_dir)
    if not path.is_file():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    procs = state.get("processes", [])
    if procs and all(_runs(p["pid"], p["argv0"]) for p in procs):
        return state
    return None


def _populate_demo(api: Any) -> dict[str, Any]:
    """Three pools, Deployments (one under a PDB allowing 1, one allowing 0), a DaemonSet, a bare pod."""
    for pool, count in DEMO_POOLS.items():
        objects.create_node_pool(api, pool, count, wait_ready=False)
    waits.wait_for_nodes_ready(
        api, [f"{pool}-{i:02d}" for pool, count in DEMO_POOLS.items() for i in range(count)], timeout=60
    )
    ns = DEMO_NAMESPACE
    objects.create_namespace(api, ns)
    objects.create_deployment(api, ns, "web", 4, node_selector={bodies.POOL_LABEL: "pool-a"})
    objects.create_deployment(api, ns, "api", 3, node_selector={bodies.POOL_LABEL: "pool-b"})
    objects.create_deployment(
        api, ns, "worker", 2, node_selector={bodies.POOL_LABEL: "pool-c"}, empty_dir=True
    )
    objects.create_deployment(api, ns, "ledger", 1, node_selector={bodies.POOL_LABEL: "pool-b"})
    objects.create_pdb(api, ns, "web", match_labels={"app": "web"}, max_unavailable=1)
    objects.create_pdb(api, ns, "ledger", match_labels={"app": "ledger"}, min_available=1)
    objects.create_daemonset(api, ns, "node-agent")
    objects.create_bare_pod(api, ns, "debug-shell", node="pool-c-00")
    total_nodes = sum(DEMO_POOLS.values())
    waits.wait_for_pods_running(api, ns, count=4 + 3 + 2 + 1 + total_nodes + 1, timeout=120)
    waits.wait_for_pdb_observed(api, ns, "web", expected_pods=4)
    waits.wait_for_pdb_observed(api, ns, "ledger", expected_pods=1)
    return {
        "namespace": ns,
        "pools": DEMO_POOLS,
        "deployments": ["web", "api", "worker", "ledger"],
        "pdbs": {"web": "allows 1 disruption", "ledger": "allows 0 disruptions"},
        "daemonsets": ["node-agent"],
        "bare_pods": ["debug-shell"],
    }


def up(state_dir: Path, *, cache_dir: Path | None = None) -> dict[str, Any]:
    """Start the sandbox (or return the running one) and return its description.

    Keys: admin_kubeconfig, scalebot_kubeconfig (copies in state_dir), api_url, run_dir, startup_seconds,
    demo (what was created), processes (name, pid, argv0).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    running = status(state_dir)
    if running is not None:
        return running
    if _state_path(state_dir).exists():
        down(state_dir)  # a half-dead previous sandbox: clear it first
    cp = ControlPlane(cache_dir, detached=True)
    try:
        cp.start()
        api = cp.admin_api_client(pool_size=8)
        try:
            demo = _populate_demo(api)
        finally:
            api.close()
    except BaseException:
        cp.stop()
        raise
    admin = state_dir / "admin.kubeconfig"
    scalebot = state_dir / "scalebot.kubeconfig"
    shutil.copyfile(cp.admin_kubeconfig, admin)
    shutil.copyfile(cp.scalebot_kubeconfig, scalebot)
    admin.chmod(0o600)
    scalebot.chmod(0o600)
    state = {
        **cp.detach_info(),
        "admin_kubeconfig": str(admin),
        "scalebot_kubeconfig": str(scalebot),
        "startup_seconds": round(cp.startup_seconds, 1),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "demo": demo,
    }
    tmp = _state_path(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(_state_path(state_dir))
    return state


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    # If `up` ran in this same process the components are our children: reap them so that they do
    # not linger as zombies (harmless otherwise: _runs() treats a zombie as stopped).
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def down(state_dir: Path, *, grace: float = 10.0) -> bool:
    """Stop the recorded sandbox and remove its files; False if there was nothing to stop."""
    path = _state_path(state_dir)
    if not path.is_file():
        return False
    state = json.loads(path.read_text())
    # Reverse start order: kwok, scheduler, controller manager, apiserver, etcd.
    for proc in reversed(state.get("processes", [])):
        pid, argv0 = int(proc["pid"]), str(proc["argv0"])
        if not _runs(pid, argv0):
            continue
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        # Polling with a deadline: these processes are not our children, so we cannot wait() them.
        while _runs(pid, argv0) and time.monotonic() < deadline:
            time.sleep(0.05)
        _reap(pid)
        if _runs(pid, argv0):
            _signal_group(pid, signal.SIGKILL)
            stop_by = time.monotonic() + grace
            while _runs(pid, argv0) and time.monotonic() < stop_by:
                time.sleep(0.05)
            _reap(pid)
            if _runs(pid, argv0):
                raise SandboxError(f"{proc['name']} (pid {pid}) survived SIGKILL")
    run_dir = state.get("run_dir")
    if run_dir and Path(run_dir).name.startswith("scalebot-cp-"):
        shutil.rmtree(run_dir, ignore_errors=True)
    for name in ("admin.kubeconfig", "scalebot.kubeconfig", STATE_FILE):
        (state_dir / name).unlink(missing_ok=True)
    return True

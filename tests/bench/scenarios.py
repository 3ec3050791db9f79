"""One function per measured run; each starts a fresh, populated cluster and returns plain JSON.

  run_scalebot   scalebot's zero-scale of every pool (child process, production wiring), with
                 planning measured first on the same cluster (read-only, a separate process) and
                 the Slack progress path attached if asked; scenarios 1, 2, 4, 5 and 6
  run_kubectl    the pinned `kubectl drain --ignore-daemonsets --delete-emptydir-data --force
                 NODE…` of the same nodes, with the same identity; the baseline of scenario 1
  run_raw        the bare eviction loop (scenario 3), with scalebot's client settings or none

The results are dictionaries (they are embedded in docs/benchmarks.md and re-rendered from there),
built from what the child processes report, the API server's /metrics before and after, and the
control-plane processes' CPU time.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from localcluster import bodies, rest
from localcluster.binaries import REPO_ROOT
from tests.bench import child, sampling
from tests.bench.cluster import (
    Cluster,
    Echo,
    Size,
    control_plane_cores,
    eviction_requests,
    fresh_cluster,
    identity_requests,
)
from tests.bench.cores import pin_process

KUBECTL_DRAIN_FLAGS = ("--ignore-daemonsets", "--delete-emptydir-data", "--force")
KUBECTL_RBAC_NAME = "bench-kubectl-drain"
"""kubectl's DaemonSet filter GETs each DaemonSet (`get daemonsets`), a verb scalebot's ClusterRole
does not grant (scalebot lists them). The kubectl cluster binds this one extra read to the same
ServiceAccount, so kubectl runs with scalebot's identity and API Priority and Fairness level."""

_RESPONSE = re.compile(r'"Response" verb="([A-Z]+)" url="([^"]+)" status="(\d+)')
_THROTTLED = re.compile(r'"Waited before sending request" delay="([0-9.]+)(ms|s)"')


class BenchError(RuntimeError):
    """A measured process failed; the message carries its log tail."""


# -- child processes ---------------------------------------------------------------------------------


def run_child(
    mode: str,
    kubeconfig: Path,
    args: Sequence[str],
    *,
    timeout: float,
    workdir: Path,
    on_start: Callable[[int], object] | None = None,
    tree: Path = REPO_ROOT,
) -> tuple[dict[str, Any], int]:
    """Run `tests.bench.child MODE`; return its JSON and its peak RSS (KiB, from wait4).

    `on_start` gets the child's pid as soon as it runs (to attach a sampling profiler); `tree` is
    the source tree it runs (another checkout measures other code on the same cluster)."""
    out = workdir / f"{mode}.json"
    log = workdir / f"{mode}.log"
    argv = [
        sys.executable,
        "-m",
        "tests.bench.child",
        mode,
        "--kubeconfig",
        str(kubeconfig),
        "--out",
        str(out),
        *args,
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=tree, stdout=sink, stderr=subprocess.STDOUT, env=env)
    if on_start is not None:
        on_start(proc.pid)
    status, maxrss = _wait(proc, timeout)
    if status != 0 or not out.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise BenchError(f"child {mode} exited with {status}:\n{tail}")
    return orjson.loads(out.read_bytes()), maxrss


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, int]:
    """Wait for the process with a deadline; (exit status, ru_maxrss KiB). Kills it on timeout."""
    box: dict[str, tuple[int, int, Any]] = {}
    waiter = threading.Thread(target=lambda: box.update(r=os.wait4(proc.pid, 0)), daemon=True)
    waiter.start()
    try:
        waiter.join(timeout)
    finally:  # on timeout, and on Ctrl-C: never leave a measured process behind
        if waiter.is_alive():
            proc.kill()
            waiter.join(30)
    _, raw_status, usage = box["r"]
    proc.returncode = os.waitstatus_to_exitcode(raw_status)  # reaped here, not by Popen
    return proc.returncode, int(usage.ru_maxrss)


# -- scalebot ----------------------------------------------------------------------------------------


def populate_figures(cluster: Cluster) -> dict[str, Any]:
    report = cluster.populate
    return {
        "nodes": report.nodes,
        "pools": len(report.pools),
        "pods": report.pods,
        "deployments": report.deployments,
        "statefulsets": report.statefulsets,
        "pdbs": report.pdbs,
        "node_seconds": report.node_seconds,
        "pod_seconds": report.pod_seconds,
        "total_seconds": report.total_seconds,
        "pods_per_second": report.pods_per_second,
        "bound_directly": report.bound_directly,
        "startup_seconds": cluster.cp.startup_seconds,
        "loadavg": list(cluster.loadavg_before),
        "component_rss_mib": {k: list(v) for k, v in cluster.component_rss_mib().items()},
    }


def run_scalebot(
    size: Size,
    *,
    echo: Echo,
    planning: bool,
    slack: bool,
    profile: bool = False,
    sample: bool = False,
    plan_rounds: int = 3,
    eviction_sample: int | None = None,
    artifacts: Path | None = None,
    api_limit: tuple[float, int] | None = None,
    fixed_evictions: int | None = None,
    adaptive_evictions: bool = False,
) -> dict[str, Any]:
    """scalebot's zero-scale on a fresh cluster (after planning, if asked, on the same cluster).

    `api_limit` is (api_qps, api_burst) instead of the product's defaults; `fixed_evictions`
    another fixed number of evictions in flight, `adaptive_evictions` the adaptive limit instead
    (`tests.bench.eviction_limit`).

    `sample` attaches py-spy to the measured process (`tests.bench.sampling`); `profile` runs it
    under cProfile instead (slower: only for a run of its own). `eviction_sample` also records how
    long the first N evictions took, to compare with a bare loop that evicts only N pods. Raw
    files worth keeping (py-spy's stacks) are copied into `artifacts`.
    """
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        result: dict[str, Any] = {"size": size.name, "populate": populate_figures(cluster)}
        kubeconfig = cluster.cp.scalebot_kubeconfig
        if planning:
            echo("planning: plan zero vs generated-model listing ...")
            plan, _ = run_child(
                "plan", kubeconfig, ["--rounds", str(plan_rounds)], timeout=3600, workdir=workdir
            )
            result["plan"] = plan
        server = _slack_server() if slack else None
        try:
            args = ["--timeout", "7200", "--covered", str(cluster.write_covered(workdir / "covered.txt"))]
            if server is not None:
                args += ["--slack-url", server.url]
            if profile:
                args += ["--profile", str(workdir / "zero.prof")]
            if eviction_sample:
                args += ["--sample", str(eviction_sample)]
            if api_limit is not None:
                args += ["--api-qps", f"{api_limit[0]:g}", "--api-burst", str(api_limit[1])]
            result["api_limit"] = list(api_limit or (DEFAULT_QPS, DEFAULT_BURST))
            if fixed_evictions is not None:
                args += ["--fixed-evictions", str(fixed_evictions)]
            if adaptive_evictions:
                args.append("--adaptive-evictions")
            result["fixed_evictions"] = fixed_evictions
            result["adaptive_evictions"] = adaptive_evictions
            samplers: list[sampling.Sampler] = []

            def attach(pid: int) -> None:
                samplers.append(sampling.Sampler(pid, workdir / "zero.pyspy.txt"))

            if sample and sampling.py_spy_path() is None:
                echo("py-spy not found: no sampling profile (pip install '.[test]')")
                sample = False
            echo(
                f"scalebot: zero-scale of {size.nodes} nodes"
                f"{' (cProfile)' if profile else ' (py-spy attached)' if sample else ''} ..."
            )
            before, cpu_before = cluster.metrics(), cluster.component_cpu_seconds()
            load_before = os.getloadavg()
            zero, maxrss = run_child(
                "zero",
                kubeconfig,
                args,
                timeout=7500,
                workdir=workdir,
                on_start=attach if sample else None,
            )
            after, cpu_after = cluster.metrics(), cluster.component_cpu_seconds()
            if samplers:
                result["sampled_profile"] = samplers[0].finish()
                if artifacts is not None and samplers[0].out.exists():
                    artifacts.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(samplers[0].out, artifacts / f"{size.name}-zero.pyspy.txt")
            result["zero"] = zero
            result["child_maxrss_kib"] = maxrss
            result["loadavg_during"] = [load_before[0], os.getloadavg()[0]]
            result["identity_requests"] = identity_requests(before, after)
            result["server_evictions"] = eviction_requests(before, after)
            result["component_cpu_seconds"] = _delta(cpu_before, cpu_after)
            result["left_on_nodes"] = _pods_left(cluster)
            if server is not None:
                result["slack"] = slack_figures(server.calls, zero["events"], zero.get("slack") or {})
        finally:
            if server is not None:
                server.close()
        return result


def run_planning(
    size: Size,
    *,
    echo: Echo,
    plan_rounds: int = 3,
    baseline_tree: Path | None = None,
    bind_directly: bool = False,
    pin_cores: bool = False,
) -> dict[str, Any]:
    """Planning alone on a fresh cluster (the same measurement run_scalebot makes first); with
    `baseline_tree`, that checkout's planning is measured too, on the same cluster, right after.
    `bind_directly` populates with the shortcut that skips placement (planning reads the pods
    wherever they are). `pin_cores`: after the population, the control plane's processes on one
    core and the measuring child on the others, so the server's answer and the client's decode
    do not compete for a core (on a real cluster the API server has machines of its own)."""
    with (
        fresh_cluster(size, echo=echo, bind_directly=bind_directly) as cluster,
        tempfile.TemporaryDirectory(prefix="bench-") as tmp,
    ):
        pinned: dict[str, Any] = {}
        on_start: Callable[[int], object] | None = None
        if pin_cores:
            server, client = control_plane_cores(cluster)
            pinned = {"control_plane_cores": sorted(server), "client_cores": sorted(client)}
            echo(f"planning: control plane pinned to cores {sorted(server)}, the client to {sorted(client)}")

            def on_start(pid: int) -> object:
                return pin_process(pid, client)

        echo("planning: plan zero vs generated-model listing ...")
        plan, _ = run_child(
            "plan",
            cluster.cp.scalebot_kubeconfig,
            ["--rounds", str(plan_rounds)],
            timeout=3600,
            workdir=Path(tmp),
            on_start=on_start,
        )
        result = {"size": size.name, "populate": populate_figures(cluster), "plan": plan, **pinned}
        if baseline_tree is not None:
            echo(f"planning: the same, with the code in {baseline_tree} ...")
            (Path(tmp) / "baseline").mkdir()
            result["plan_baseline"], _ = run_child(
                "plan",
                cluster.cp.scalebot_kubeconfig,
                ["--rounds", str(plan_rounds)],
                timeout=3600,
                workdir=Path(tmp) / "baseline",
                tree=baseline_tree,
                on_start=on_start,
            )
        return result


def _slack_server() -> Any:
    from tests.slack.harness import SlackApiServer

    return SlackApiServer().start()


def _delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - v for k, v in before.items()}


def _pods_left(cluster: Cluster) -> dict[str, int]:
    """Nodes left, and non-DaemonSet pods still bound to one of the benchmark's nodes."""
    nodes = set(cluster.nodes)
    remaining_nodes = [
        n for n in rest.list_items(cluster.admin, rest.node_path()) if n["metadata"]["name"] in nodes
    ]
    pods = [
        p
        for p in rest.list_pods(cluster.admin)
        if (p.get("spec") or {}).get("nodeName") in nodes
        and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or ())
    ]
    return {"nodes": len(remaining_nodes), "pods": len(pods)}


def slack_figures(
    calls: Sequence[Any], events: Sequence[Mapping[str, Any]], info: Mapping[str, Any]
) -> dict[str, Any]:
    """chat.* calls of the run, and how long each progress state waited for Slack to show it.

    A state change is a progress event that changes the status line (phase, report, final). It
    counts as shown at the first chat.update or chat.postMessage, at or after the event, whose text
    contains that event's text or a later event's (the sender coalesces, so a newer state may
    replace an older one before it is sent).
    """
    from tests.slack.harness import all_text

    writes = [c for c in calls if c.method in ("chat.update", "chat.postMessage") and c.status == 200]
    texts = [(c.at, c.method, c.body.get("ts") or "", all_text(c)) for c in writes]
    changes = [e for e in events if e["kind"] in ("phase", "report", "final") and e["text"]]
    gaps: list[float] = []
    unshown: list[str] = []
    for i, event in enumerate(changes):
        later = [e["text"] for e in changes[i:]]
        shown = next(
            (at for at, _, _, text in texts if at >= event["at"] and any(t in text for t in later)), None
        )
        if shown is None:
            unshown.append(event["text"])
        else:
            gaps.append(shown - event["at"])
    final_text = str(next((e["text"] for e in reversed(changes) if e["kind"] == "final"), ""))
    updates = [(at, ts, text) for at, method, ts, text in texts if method == "chat.update"]
    per_message: dict[str, list[tuple[float, bool]]] = {}
    for at, ts, text in updates:
        per_message.setdefault(str(ts), []).append((at, bool(final_text) and final_text in text))
    pairs = [(b[0] - a[0], b[1]) for seq in per_message.values() for a, b in itertools.pairwise(seq)]
    # The sender sends a final rendering at once (it jumps the per-message interval by design).
    min_interval = min((gap for gap, to_final in pairs if not to_final), default=None)
    to_final = min((gap for gap, final in pairs if final), default=None)
    times = sorted(at for at, _, _ in updates)
    per_minute = max((sum(1 for t in times if s <= t < s + 60) for s in times), default=0)
    final_shown = bool(final_text) and any(final_text in text for *_, text in texts)
    return {
        "post_message": sum(1 for c in calls if c.method == "chat.postMessage"),
        "update": sum(1 for c in calls if c.method == "chat.update"),
        "other": dict(
            Counter(c.method for c in calls if c.method not in ("chat.update", "chat.postMessage"))
        ),
        "state_changes": len(changes),
        "longest_gap_seconds": max(gaps, default=None),
        "unshown_states": unshown,
        "min_update_interval_seconds": min_interval,
        "final_after_previous_update_seconds": to_final,
        "max_updates_per_minute": per_minute,
        "final_shown": final_shown,
        "delivered": info.get("delivered"),
    }


# -- kubectl -----------------------------------------------------------------------------------------


def _grant_kubectl_drain(cluster: Cluster) -> None:
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    rest.create(
        cluster.admin,
        f"{rbac}/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": KUBECTL_RBAC_NAME},
            "rules": [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]}],
        },
    )
    rest.create(
        cluster.admin,
        f"{rbac}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": KUBECTL_RBAC_NAME},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": KUBECTL_RBAC_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "scalebot", "namespace": "scalebot"}],
        },
    )


def run_kubectl(
    size: Size, *, echo: Echo, budget: float | None, stop_after_nodes: int | None = None
) -> dict[str, Any]:
    """`kubectl drain FLAGS n1 n2 …` (every node in one command, as a person would) on a fresh cluster.

    kubectl 1.36 cordons every named node first, then drains them one after the other: per node one
    pod listing, one eviction per pod (each in its own goroutine), then a GET per pod every second
    until it is gone; its client is limited to client-go's default 5 QPS / burst 10. With `budget`
    (seconds) or `stop_after_nodes`, kubectl is stopped early and its total is extrapolated from
    the nodes it finished (each node is drained alone, so the time per node is constant).
    """
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        _grant_kubectl_drain(cluster)
        kubeconfig = cluster.cp.scalebot_kubeconfig
        argv = [
            str(cluster.kubectl_path),
            f"--kubeconfig={kubeconfig}",
            "drain",
            *KUBECTL_DRAIN_FLAGS,
            "-v=6",  # one log line per response: the requests by verb and resource
            *cluster.nodes,
        ]
        stderr_path = Path(tmp) / "kubectl.log"
        echo(
            f"kubectl: drain of {len(cluster.nodes)} nodes{f' (budget {budget:.0f} s)' if budget else ''} ..."
        )
        before, cpu_before = cluster.metrics(), cluster.component_cpu_seconds()
        load_before = os.getloadavg()
        lines: list[tuple[float, str]] = []
        enough, closed = threading.Event(), threading.Event()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(cluster.cp.run_dir)}
        started = time.monotonic()
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
            assert proc.stdout is not None
            stdout = proc.stdout

            def read() -> None:
                done = 0
                for raw in stdout:
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    lines.append((time.monotonic(), line))
                    done += line.endswith(" drained")
                    if stop_after_nodes and done >= stop_after_nodes:
                        enough.set()
                closed.set()  # kubectl closed its output: it has exited
                enough.set()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            enough.wait(budget if budget else 6 * 3600.0)
            status, maxrss = _wait(proc, 30.0 if closed.is_set() else 0.0)  # else: stopped early
            reader.join(10)
            stdout.close()
        ended = time.monotonic()
        after, cpu_after = cluster.metrics(), cluster.component_cpu_seconds()
        cordoned = [t for t, line in lines if line.endswith(" cordoned")]
        drained = [t for t, line in lines if line.endswith(" drained")]
        complete = len(drained) == len(cluster.nodes)
        cordon_done = max(cordoned, default=started)
        seconds = ended - started
        extrapolated = None
        if not complete and drained:
            per_node = (drained[-1] - cordon_done) / len(drained)
            extrapolated = (cordon_done - started) + per_node * len(cluster.nodes)
        requests, throttled, throttle_seconds = _kubectl_requests(stderr_path.read_text(errors="replace"))
        return {
            "size": size.name,
            "populate": populate_figures(cluster),
            "argv": ["kubectl", "drain", *KUBECTL_DRAIN_FLAGS, f"<{len(cluster.nodes)} nodes>"],
            "exit_status": status,
            "complete": complete,
            "budget_seconds": budget,
            "stop_after_nodes": stop_after_nodes,
            "seconds": seconds,
            "cordon_seconds": cordon_done - started,
            "nodes_drained": len(drained),
            "first_node_seconds": (drained[0] - cordon_done) if drained else None,
            "last_drained_seconds": (drained[-1] - started) if drained else None,
            "extrapolated_seconds": extrapolated,
            "evicted_lines": sum(1 for _, line in lines if line.endswith(" evicted")),
            "maxrss_kib": maxrss,
            "requests": [[v, r, n] for (v, r), n in sorted(requests.items())],
            "throttled_requests": throttled,
            "throttled_seconds": throttle_seconds,
            "identity_requests": identity_requests(before, after),
            "server_evictions": eviction_requests(before, after),
            "component_cpu_seconds": _delta(cpu_before, cpu_after),
            "loadavg_during": [load_before[0], os.getloadavg()[0]],
            "left_on_nodes": _pods_left(cluster),
        }


def _kubectl_requests(log: str) -> tuple[Counter[tuple[str, str]], int, float]:
    counts: Counter[tuple[str, str]] = Counter()
    for verb, url, _ in _RESPONSE.findall(log):
        counts[child.classify(verb, url)] += 1
    waits = [float(v) / (1000.0 if unit == "ms" else 1.0) for v, unit in _THROTTLED.findall(log)]
    return counts, len(waits), sum(waits)


# -- the bare eviction loop --------------------------------------------------------------------------


def run_raw(
    size: Size,
    *,
    echo: Echo,
    qps: float,
    burst: int,
    order: str = "name",
    limit: int | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Eviction POSTs for every pod a drain would evict, no drain logic, nodes cordoned first.

    `order` "name" is namespace/name order (what the drain did before it interleaved); "spread"
    round-robins over workloads, so that concurrent evictions never contend for one
    PodDisruptionBudget. `limit` evicts only the first N pods of that order (at the full size a
    loop over every pod would take as long as the zero-scale itself).
    """
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        cluster.cordon_all()  # as in a drain: replacements stay Pending instead of being scheduled
        limit_text = f"QPS {qps:g} / burst {burst}" if qps > 0 else "no client-side limit"
        count = min(limit, size.evictable_pods) if limit else size.evictable_pods
        echo(
            f"raw: eviction loop over {count} pods ({limit_text}, {order} order, "
            f"{workers or 'default'} workers) ..."
        )
        before, cpu_before = cluster.metrics(), cluster.component_cpu_seconds()
        load_before = os.getloadavg()
        covered = cluster.write_covered(workdir / "covered.txt")
        raw, maxrss = run_child(
            "evict",
            cluster.cp.scalebot_kubeconfig,
            [
                "--qps",
                str(qps),
                "--burst",
                str(burst),
                "--order",
                order,
                "--covered",
                str(covered),
                *(["--limit", str(limit)] if limit else []),
                *(["--workers", str(workers)] if workers else []),
            ],
            timeout=7200,
            workdir=workdir,
        )
        after, cpu_after = cluster.metrics(), cluster.component_cpu_seconds()
        raw.update(
            size=size.name,
            populate=populate_figures(cluster),
            identity_requests=identity_requests(before, after),
            server_evictions=eviction_requests(before, after),
            component_cpu_seconds=_delta(cpu_before, cpu_after),
            child_maxrss_kib=maxrss,
            loadavg_during=[load_before[0], os.getloadavg()[0]],
        )
        return raw


# -- kubectl in parallel: the baselines a person who knows kubectl would use --------------------------

KUBECTL_CLIENT_QPS = 5.0
"""client-go's default for kubectl's requests (its discovery client aside). The pinned kubectl has no
flag to change it (no --kube-api-qps/--kube-api-burst among `kubectl options`), so "at scalebot's
client QPS" means as many kubectl processes at once as make scalebot's default `api_qps`."""
KUBECTL_AT_SCALEBOT_QPS = max(1, int(DEFAULT_QPS // KUBECTL_CLIENT_QPS))
"""kubectl processes at once whose 5 QPS each add up to scalebot's default client limit (200: 40)."""
KUBECTL_PARALLEL: dict[str, tuple[str, int | None]] = {
    "kubectl_pools": ("pool", None),
    "kubectl_pools_qps": ("pool-split", KUBECTL_AT_SCALEBOT_QPS),
    "kubectl_nodes16": ("node", 16),
    "kubectl_nodes_qps": ("node", KUBECTL_AT_SCALEBOT_QPS),
}
"""The parallel kubectl baselines by run name: (how the nodes are split, processes at once).
"pool": one `kubectl drain -l scalebot.io/pool=<pool>` per pool, all at once (the natural way);
"pool-split": the nodes in KUBECTL_AT_SCALEBOT_QPS equal groups, one `kubectl drain <nodes…>` each,
all at once (the pools' drains at scalebot's client limit in all); "node": one `kubectl drain <node>`
per node with N running at once (`xargs -P N`): 16, and KUBECTL_AT_SCALEBOT_QPS for scalebot's limit."""


def kubectl_commands(mode: str, pools: Mapping[str, Sequence[str]], parallel: int | None) -> list[list[str]]:
    """The target arguments of each kubectl command of a parallel baseline."""
    if mode == "pool":
        return [["-l", f"{bodies.POOL_LABEL}={pool}"] for pool in sorted(pools)]
    nodes = [n for pool in sorted(pools) for n in pools[pool]]
    if mode == "node":
        return [[n] for n in nodes]
    groups = max(1, min(parallel or 1, len(nodes)))
    return [nodes[i::groups] for i in range(groups)]


def run_kubectl_parallel(
    size: Size,
    *,
    echo: Echo,
    name: str,
    budget: float | None,
    stop_after_nodes: int | None = None,
) -> dict[str, Any]:
    """A parallel kubectl baseline (see KUBECTL_PARALLEL) on a fresh cluster, timed from the first
    command's start to the last node drained. Stopped early (budget or node count), its total is
    extrapolated from the rate at which nodes were drained (the commands run side by side)."""
    mode, parallel = KUBECTL_PARALLEL[name]
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        _grant_kubectl_drain(cluster)
        kubeconfig = cluster.cp.scalebot_kubeconfig
        pools: dict[str, list[str]] = {}
        for node in rest.list_items(cluster.admin, rest.node_path(), label_selector=bodies.POOL_LABEL):
            pools.setdefault(node["metadata"]["labels"][bodies.POOL_LABEL], []).append(
                node["metadata"]["name"]
            )
        commands = kubectl_commands(mode, pools, parallel)
        at_once = parallel or len(commands)
        base = [
            str(cluster.kubectl_path),
            f"--kubeconfig={kubeconfig}",
            "drain",
            *KUBECTL_DRAIN_FLAGS,
            "-v=6",
        ]
        example = ["kubectl", "drain", *KUBECTL_DRAIN_FLAGS, *commands[0]]
        echo(
            f"{name}: {len(commands)} kubectl drain commands, {at_once} at a time "
            f"(e.g. {' '.join(example)}) ..."
        )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(cluster.cp.run_dir)}
        before, cpu_before = cluster.metrics(), cluster.component_cpu_seconds()
        load_before = os.getloadavg()
        drained: list[float] = []
        lock = threading.Lock()
        stop = threading.Event()
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []

        def one(index: int) -> int:
            if stop.is_set():
                return -1
            log_path = Path(tmp) / f"kubectl-{index}.log"
            with lock:
                logs.append(log_path)
            argv = [*base, *commands[index]]
            # Popen as a context: its output pipe is closed and the process reaped, also when killed.
            with (
                log_path.open("wb") as err,
                subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env) as proc,
            ):
                with lock:
                    procs.append(proc)
                assert proc.stdout is not None
                for raw in proc.stdout:
                    if raw.decode("utf-8", "replace").rstrip("\n").endswith(" drained"):
                        with lock:
                            drained.append(time.monotonic())
                            if stop_after_nodes and len(drained) >= stop_after_nodes:
                                stop.set()
                return proc.wait()

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="kubectl") as runners:
            futures = [runners.submit(one, i) for i in range(len(commands))]
            deadline = started + budget if budget else None
            while not all(f.done() for f in futures):
                if stop.wait(1.0) or (deadline is not None and time.monotonic() > deadline):
                    stop.set()
                    with lock:
                        for proc in procs:
                            if proc.poll() is None:
                                proc.kill()
            statuses = [f.result() for f in futures]
        ended = time.monotonic()
        after, cpu_after = cluster.metrics(), cluster.component_cpu_seconds()
        complete = len(drained) == len(cluster.nodes)
        last = max(drained, default=None)
        seconds = (last - started) if complete and last is not None else ended - started
        extrapolated = None
        if not complete and drained:
            extrapolated = (max(drained) - started) * len(cluster.nodes) / len(drained)
        requests: Counter[tuple[str, str]] = Counter()
        throttled, throttle_seconds = 0, 0.0
        for log_path in logs:
            counted, waits, waited = _kubectl_requests(log_path.read_text(errors="replace"))
            requests.update(counted)
            throttled += waits
            throttle_seconds += waited
        return {
            "size": size.name,
            "populate": populate_figures(cluster),
            "mode": mode,
            "commands": len(commands),
            "parallel": at_once,
            "aggregate_qps": KUBECTL_CLIENT_QPS * at_once,
            "argv": example,
            "exit_statuses": sorted(Counter(statuses).items()),
            "complete": complete,
            "budget_seconds": budget,
            "stop_after_nodes": stop_after_nodes,
            "seconds": seconds,
            "nodes_drained": len(drained),
            "extrapolated_seconds": extrapolated,
            "requests": [[v, r, n] for (v, r), n in sorted(requests.items())],
            "throttled_requests": throttled,
            "throttled_seconds": throttle_seconds,
            "identity_requests": identity_requests(before, after),
            "server_evictions": eviction_requests(before, after),
            "component_cpu_seconds": _delta(cpu_before, cpu_after),
            "loadavg_during": [load_before[0], os.getloadavg()[0]],
            "left_on_nodes": _pods_left(cluster),
        }

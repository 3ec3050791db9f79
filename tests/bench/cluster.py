"""Fresh clusters for the benchmarks, and what the benchmarks read from them.

`fresh_cluster(size)` starts a new `ControlPlane` (its own temp dir), builds the benchmark shape
with `localcluster.populate.populate` as admin, and yields a `Cluster`. It also reads the API
server's Prometheus text (`/metrics`) and the control-plane processes' CPU time from /proc, so
each scenario can report what the server saw and what it cost.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster import bodies, objects, populate, rest, waits
from localcluster.controlplane import DEFAULT_NODE_LEASE_SECONDS, ControlPlane
from localcluster.populate import PopulateReport
from tests.bench.cores import core_split, pin_process

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Size:
    """A benchmark size: `nodes` kwok nodes with `pods_per_node` pods each (one is the DaemonSet's)."""

    name: str
    nodes: int
    pods_per_node: int
    nodes_per_pool: int
    grace_seconds: int = 2
    """terminationGracePeriodSeconds of every pod: identical for scalebot and the baselines."""
    node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS
    """kwok's node lease duration (renewed every quarter of it). `REDUCED_LOAD_LEASE_SECONDS` takes
    most of the control plane's synthetic load (Lease writes) off the machine, for every contender
    alike, so that a comparison measures the clients rather than the simulated kubelets."""

    @property
    def reduced_load(self) -> bool:
        return self.node_lease_seconds != DEFAULT_NODE_LEASE_SECONDS

    @property
    def pods(self) -> int:
        return self.nodes * self.pods_per_node

    @property
    def evictable_pods(self) -> int:
        """Pods a drain evicts: all but the DaemonSet's pod on each node."""
        return self.nodes * (self.pods_per_node - 1)

    @property
    def pools(self) -> int:
        return max(1, -(-self.nodes // self.nodes_per_pool))

    def describe(self) -> str:
        return (
            f"{self.nodes:,} nodes in {self.pools} pools / {self.pods:,} pods "
            f"({self.evictable_pods:,} evictable, {self.nodes:,} DaemonSet)"
        )


REDUCED_LOAD_LEASE_SECONDS = 240
"""Six times kubelet's 40 s: at 1,000 nodes, 17 Lease writes a second instead of 100."""

SIZES: dict[str, Size] = {
    # The e2e smoke test (tests/e2e/test_bench_smoke.py): the same code at a size CI can afford.
    "smoke": Size("smoke", nodes=20, pods_per_node=20, nodes_per_pool=10),
    "small": Size("small", nodes=100, pods_per_node=30, nodes_per_pool=25),
    "full": Size("full", nodes=1000, pods_per_node=30, nodes_per_pool=100),
}

PDB_MAX_UNAVAILABLE = "100%"
"""The PDBs of the benchmark clusters. Every pool is emptied and workloads are pinned to their pool,
so an evicted pod's replacement can never become Ready anywhere: a budget of 1 would let each
covered workload lose one pod and then refuse every other eviction for good (phase 1 could never
finish, and neither could kubectl). "100%" keeps the PDB in the eviction path (the API server
checks and updates each covered PDB on every eviction) while allowing progress."""


@dataclass
class Cluster:
    cp: ControlPlane
    admin: Any
    """kubernetes ApiClient as admin (fixtures, /metrics)."""
    size: Size
    populate: PopulateReport
    nodes: list[str]
    loadavg_before: tuple[float, float, float]
    covered_workloads: list[str] = field(default_factory=list)
    """Workloads (their `app` label) under a PodDisruptionBudget."""

    def write_covered(self, path: Path) -> Path:
        path.write_text("\n".join(self.covered_workloads) + "\n")
        return path

    @property
    def kubectl_path(self) -> Path:
        return self.cp.bin_dir / "kubectl"

    def metrics(self) -> Metrics:
        response = rest.send_request(self.admin, "GET", "/metrics", timeout=60.0)
        return Metrics.parse(response.data.decode("utf-8", "replace"))

    def component_cpu_seconds(self) -> dict[str, float]:
        return {name: process_cpu_seconds(pid) for name, pid in self.cp.pids().items()}

    def component_rss_mib(self) -> dict[str, tuple[float, float]]:
        return {name: (now / 1024, peak / 1024) for name, (now, peak) in self.cp.rss_kib().items()}

    def cordon_all(self) -> None:
        """Cordon every node as admin (for scenarios that must start from cordoned nodes)."""
        rest.run_parallel(lambda n: objects.cordon(self.admin, n), self.nodes, workers=16)


def control_plane_cores(cluster: Cluster) -> tuple[set[int], set[int]]:
    """(the control plane's cores, the client's): the control plane on core 0 and the client on the
    others, as on a real cluster, whose API server and etcd have machines of their own. Needs two
    cores at least."""
    split = core_split()
    if split is None:
        raise RuntimeError("--pin-cores needs two cores at least")
    server, client = split
    for pid in cluster.cp.pids().values():
        pin_process(pid, server)
    return server, client


@contextlib.contextmanager
def fresh_cluster(
    size: Size, *, echo: Echo, populate_timeout: float = 7200.0, bind_directly: bool = False
) -> Iterator[Cluster]:
    """A new control plane populated with `size`; stopped (and its temp dir removed) on exit.

    `bind_directly`: the population's shortcut (`localcluster.populate`), for figures that do not
    measure placement: the Deployments' pods created bound to their nodes, round-robin over their
    pool, by the harness instead of the ReplicaSet controller and the scheduler."""
    with ControlPlane(echo=echo, node_lease_seconds=size.node_lease_seconds) as cp:
        admin = cp.admin_api_client(pool_size=48)
        if bind_directly:  # after the start: its readiness ladder needs the ReplicaSet controller
            cp.restart_controller_manager(disabled_controllers=["replicaset"])
        try:
            report = populate.populate(
                admin,
                nodes=size.nodes,
                pods_per_node=size.pods_per_node,
                nodes_per_pool=size.nodes_per_pool,
                grace=size.grace_seconds,
                pdb_max_unavailable=PDB_MAX_UNAVAILABLE,
                timeout=populate_timeout,
                progress=echo,
                enable_replicasets=cp.restart_controller_manager if bind_directly else None,
            )
            nodes = sorted(
                n["metadata"]["name"]
                for n in rest.list_items(admin, rest.node_path(), label_selector=bodies.POOL_LABEL)
            )
            covered = wait_for_pdbs_settled(admin, report.namespaces)
            yield Cluster(cp, admin, size, report, nodes, os.getloadavg(), covered)
        finally:
            admin.close()


def wait_for_pdbs_settled(admin: Any, namespaces: list[str], *, timeout: float = 600.0) -> list[str]:
    """Wait until the disruption controller has observed every PDB with all its pods healthy;
    return the `app` label values the PDBs select.

    Until then an eviction of a covered pod may be refused (429) for reasons that are the cluster's
    youth, not the drain's, which would make runs differ.
    """
    covered: list[str] = []

    def settled() -> bool:
        covered.clear()
        for ns in namespaces:
            page = rest.raw_request(admin, "GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets")
            for pdb in page.get("items") or ():
                status = pdb.get("status") or {}
                if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                    return False
                if status.get("currentHealthy", -1) != status.get("expectedPods", -2):
                    return False
                app = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).get("app")
                if app:
                    covered.append(str(app))
        return True

    waits.wait_until(settled, timeout, "every PDB observed with all its pods healthy", interval=0.5)
    return sorted(covered)


# -- /metrics ----------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Metrics:
    """Samples of the Prometheus text format, by metric name: [(labels, value)]."""

    samples: Mapping[str, list[tuple[dict[str, str], float]]]

    @classmethod
    def parse(cls, text: str) -> Metrics:
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            match = _SAMPLE.match(line)
            if match is None:
                continue
            labels = dict(_LABEL.findall(match.group(3) or ""))
            try:
                value = float(match.group(4))
            except ValueError:
                continue
            samples.setdefault(match.group(1), []).append((labels, value))
        return cls(samples)

    def total(self, name: str, **match: str) -> float:
        return sum(
            value
            for labels, value in self.samples.get(name, ())
            if all(labels.get(k) == v for k, v in match.items())
        )

    def by(self, name: str, keys: tuple[str, ...], **match: str) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for labels, value in self.samples.get(name, ()):
            if all(labels.get(k) == v for k, v in match.items()):
                key = tuple(labels.get(k, "") for k in keys)
                out[key] = out.get(key, 0.0) + value
        return out


SERVICE_ACCOUNT_FLOW = {"flow_schema": "service-accounts", "priority_level": "workload-low"}
"""How API Priority and Fairness classifies the `scalebot` ServiceAccount: every other client of
these clusters (controllers, scheduler, kwok, the fixtures) is system:masters, hence `exempt`, so
this flow's dispatched-request counter is exactly the traffic of the identity under test."""


def identity_requests(before: Metrics, after: Metrics) -> float:
    name = "apiserver_flowcontrol_dispatched_requests_total"
    return after.total(name, **SERVICE_ACCOUNT_FLOW) - before.total(name, **SERVICE_ACCOUNT_FLOW)


def eviction_requests(before: Metrics, after: Metrics) -> dict[str, float]:
    """Eviction POSTs the API server answered during the interval, by HTTP code (all clients;
    only the identity under test evicts in these clusters)."""
    name = "apiserver_request_total"
    match = {"resource": "pods", "subresource": "eviction", "verb": "POST"}
    old = before.by(name, ("code",), **match)
    new = after.by(name, ("code",), **match)
    return {code[0]: value - old.get(code, 0.0) for code, value in new.items() if value - old.get(code, 0.0)}


# -- /proc -------------------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0.0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # Fields after the command: state is [0]; utime and stime are fields 14 and 15 of stat(5).
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_description() -> dict[str, str]:
    """CPU model and count, memory, kernel, and the load right now (other work shares this host)."""
    model = "unknown CPU"
    cpus = os.cpu_count() or 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    meminfo: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            meminfo[key] = int(value.split()[0]) if value.split() else 0
    load = os.getloadavg()
    return {
        "cpu": f"{cpus} x {model}",
        "memory": (
            f"{meminfo.get('MemTotal', 0) / 1048576:.1f} GiB total, "
            f"{meminfo.get('MemAvailable', 0) / 1048576:.1f} GiB available at the start"
        ),
        "kernel": os.uname().release,
        "load": f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) at the start",
    }

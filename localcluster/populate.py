"""The benchmark shape (`populate`): many kwok nodes in pools, carrying Deployments, StatefulSets,
a DaemonSet and PDBs, created by the real controllers and bound by the real scheduler.

The shortcut `bind_directly` (a cluster started without the ReplicaSet controller) creates the
Deployments' pods itself, owned by their ReplicaSets and bound round-robin to their pool's nodes,
then turns the controller on, which adopts them and creates none: no scheduling, no binding and
none of the Events of either, about half the API server's work per pod. Only placement differs
(every node of a pool gets the same count of Deployment pods; the scheduler spreads them about
as evenly), so figures that read or drain the pods are unaffected; the StatefulSets' pods and the
DaemonSet's are still the controllers' and the scheduler's.

It builds on `objects` and `waits` and reports how fast the cluster filled (`PopulateReport`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster.bodies import POOL_LABEL, node_body
from localcluster.objects import (
    create_daemonset,
    create_deployment,
    create_namespace,
    create_pdb,
    create_statefulset,
)
from localcluster.rest import (
    Json,
    create,
    get,
    list_items,
    list_pods,
    node_path,
    quoted,
    raw_request,
    run_parallel,
)
from localcluster.waits import WaitTimeout, wait_for_nodes_ready, wait_until


@dataclass
class PopulateReport:
    """What `populate` built and how fast (pods/s is measured from the first workload to all Ready)."""

    nodes: int
    pools: list[str]
    namespaces: list[str]
    deployments: int
    statefulsets: int
    pdbs: int
    pods: int
    node_seconds: float
    pod_seconds: float
    total_seconds: float
    bound_directly: int = 0
    """Pods created bound to their nodes by `populate` itself (`bind_directly`), not the scheduler."""

    @property
    def pods_per_second(self) -> float:
        return self.pods / self.pod_seconds if self.pod_seconds > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"populate: {self.nodes} nodes in {len(self.pools)} pools ({self.node_seconds:.1f} s), "
            f"{self.pods} pods from {self.deployments} Deployments, {self.statefulsets} StatefulSets and a "
            f"DaemonSet, {self.pdbs} PDBs in {self.pod_seconds:.1f} s = {self.pods_per_second:.0f} pods/s; "
            f"total {self.total_seconds:.1f} s"
            + (f"; {self.bound_directly} pods bound directly" if self.bound_directly else "")
        )


@dataclass(frozen=True)
class _Workload:
    namespace: str
    name: str
    replicas: int
    pool: str
    statefulset: bool
    pdb: bool


def _plan_workloads(
    pools: Sequence[str],
    sizes: Sequence[int],
    namespaces: Sequence[str],
    *,
    pods_per_node: int,
    replicas_per_workload: int,
    pdb_every: int,
    statefulset_every: int,
) -> list[_Workload]:
    """Split each pool's pods (all but the DaemonSet's one per node) into workloads."""
    plan: list[_Workload] = []
    for pool, size, ns in zip(pools, sizes, namespaces, strict=True):
        remaining = size * (pods_per_node - 1)
        while remaining > 0:
            replicas = min(replicas_per_workload, remaining)
            remaining -= replicas
            index = len(plan) + 1
            plan.append(
                _Workload(
                    namespace=ns,
                    name=f"w{index:05d}",
                    replicas=replicas,
                    pool=pool,
                    statefulset=index % statefulset_every == 0,
                    pdb=index % pdb_every == 0,
                )
            )
    return plan


def _post_workload(
    api: Any, w: _Workload, labels: Mapping[str, str], *, grace: int = 30, pdb_max_unavailable: int | str = 1
) -> None:
    selector = {POOL_LABEL: w.pool}
    if w.statefulset:
        create_statefulset(
            api, w.namespace, w.name, w.replicas, node_selector=selector, labels=labels, grace=grace
        )
    else:
        create_deployment(
            api, w.namespace, w.name, w.replicas, node_selector=selector, labels=labels, grace=grace
        )
    if w.pdb:
        create_pdb(
            api,
            w.namespace,
            f"{w.name}-pdb",
            match_labels={"app": w.name},
            max_unavailable=pdb_max_unavailable,
        )


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a generated name's suffix (apimachinery's rand.String), so that the pods
`populate` names look like the ReplicaSet controller's."""


def _suffix(index: int) -> str:
    chars = []
    for _ in range(5):
        index, digit = divmod(index, len(_NAME_ALPHABET))
        chars.append(_NAME_ALPHABET[digit])
    return "".join(chars)


def _replica_sets(api: Any, namespaces: Sequence[str], deployments: int, timeout: float) -> list[Json]:
    """The Deployments' ReplicaSets, once the deployment controller has created one for each."""
    found: list[Json] = []

    def all_there() -> bool:
        found[:] = [
            rs
            for ns in namespaces
            for rs in list_items(api, f"/apis/apps/v1/namespaces/{quoted(ns)}/replicasets")
        ]
        return len(found) >= deployments

    wait_until(all_there, timeout, f"{deployments} ReplicaSets", interval=0.5, max_interval=2.0)
    return found


def _bound_pods(replica_sets: Sequence[Json], nodes_of_pool: Mapping[str, Sequence[str]]) -> list[Json]:
    """Each ReplicaSet's pods as its controller would create them (its template, owned by it), bound
    to the nodes of its pool in turn: every node of a pool gets the same count, give or take one."""
    turn = dict.fromkeys(nodes_of_pool, 0)
    pods: list[Json] = []
    for rs in sorted(replica_sets, key=lambda r: (r["metadata"]["namespace"], r["metadata"]["name"])):
        meta, template = rs["metadata"], rs["spec"]["template"]
        pool = template["spec"]["nodeSelector"][POOL_LABEL]
        owner = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for i in range(int(rs["spec"]["replicas"])):
            nodes = nodes_of_pool[pool]
            node = nodes[turn[pool] % len(nodes)]
            turn[pool] += 1
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{meta['name']}-{_suffix(i)}",
                        "namespace": meta["namespace"],
                        "labels": dict(template["metadata"].get("labels") or {}),
                        "annotations": dict(template["metadata"].get("annotations") or {}),
                        "ownerReferences": [owner],
                    },
                    "spec": {**template["spec"], "nodeName": node},
                }
            )
    return pods


def _bind_deployment_pods(
    api: Any,
    plan: Sequence[_Workload],
    pools: Sequence[str],
    node_names: Sequence[str],
    namespaces: Sequence[str],
    *,
    workers: int,
    timeout: float,
) -> int:
    """`bind_directly`: create the Deployments' pods, bound (`_bound_pods`); returns how many."""
    replica_sets = _replica_sets(api, namespaces, sum(1 for w in plan if not w.statefulset), timeout)
    nodes_of_pool = {pool: [n for n in node_names if n.startswith(f"{pool}-")] for pool in pools}
    pods = _bound_pods(replica_sets, nodes_of_pool)
    run_parallel(
        lambda pod: create(api, f"/api/v1/namespaces/{quoted(pod['metadata']['namespace'])}/pods", pod),
        pods,
        workers=workers,
    )
    return len(pods)


def _ready_pod_count(api: Any, workload_namespaces: Sequence[str], daemonset_namespace: str) -> int:
    """Ready pods according to the controllers' status fields: a few small lists, not 30k pods."""
    total = 0
    for ns in workload_namespaces:
        for kind in ("deployments", "statefulsets"):
            page = raw_request(api, "GET", f"/apis/apps/v1/namespaces/{quoted(ns)}/{kind}")
            total += sum(
                int((i.get("status") or {}).get("readyReplicas", 0)) for i in page.get("items") or []
            )
    ds = raw_request(api, "GET", f"/apis/apps/v1/namespaces/{quoted(daemonset_namespace)}/daemonsets")
    total += sum(int((i.get("status") or {}).get("numberReady", 0)) for i in ds.get("items") or [])
    return total


def populate(
    api: Any,
    *,
    nodes: int,
    pods_per_node: int,
    prefix: str = "bench",
    nodes_per_pool: int = 100,
    replicas_per_workload: int = 30,
    pdb_every: int = 5,
    statefulset_every: int = 20,
    workers: int = 32,
    timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    grace: int = 30,
    pdb_max_unavailable: int | str = 1,
    enable_replicasets: Callable[[], object] | None = None,
) -> PopulateReport:
    """Build the benchmark shape: `nodes` kwok nodes carrying about `pods_per_node` pods each.

    Pools of `nodes_per_pool` nodes (`<prefix>-pool-<i>`), one namespace per pool, Deployments of
    `replicas_per_workload` pinned to their pool, every `statefulset_every`-th workload a StatefulSet,
    every `pdb_every`-th (20 % by default) under a PDB allowing one disruption, and one DaemonSet on
    every node (one of the `pods_per_node`). Pods are created by the real controllers and bound by the
    real scheduler, as in a cluster; the report gives pods/s. `grace` is every pod's
    terminationGracePeriodSeconds; `pdb_max_unavailable` the PDBs' maxUnavailable (a benchmark that
    empties every pool needs "100%": evicted pods cannot come back anywhere, so a budget of 1 would
    stop each covered workload after its first eviction).

    `enable_replicasets`, for a cluster started without the ReplicaSet controller, is the shortcut
    `bind_directly` (the module's docstring): the Deployments' pods are created here, bound to
    their nodes, and then `enable_replicasets()` turns the controller on.
    """
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    pool_count = max(1, -(-nodes // nodes_per_pool))
    pools = [f"{prefix}-pool-{i}" for i in range(pool_count)]
    sizes = [nodes // pool_count + (1 if i < nodes % pool_count else 0) for i in range(pool_count)]
    label = {"scalebot.test/populate": prefix}

    # Nodes, with pod capacity above the target so spread skew never starves the scheduler.
    bodies = [
        node_body(f"{pool}-{i:04d}", pool, labels=label, pods=max(110, pods_per_node + 20))
        for pool, size in zip(pools, sizes, strict=True)
        for i in range(size)
    ]
    node_names = [body["metadata"]["name"] for body in bodies]
    run_parallel(lambda body: create(api, node_path(), body), bodies, workers=workers)
    say(f"populate: {len(bodies)} nodes created in {time.monotonic() - started:.1f} s")
    wait_for_nodes_ready(api, node_names, timeout=timeout)
    node_seconds = time.monotonic() - started
    say(f"populate: nodes Ready after {node_seconds:.1f} s")

    system_ns = f"{prefix}-system"
    workload_ns = [f"{prefix}-{i}" for i in range(pool_count)]
    run_parallel(
        lambda ns: create_namespace(api, ns, labels=label), [system_ns, *workload_ns], workers=workers
    )

    plan = _plan_workloads(
        pools,
        sizes,
        workload_ns,
        pods_per_node=pods_per_node,
        replicas_per_workload=replicas_per_workload,
        pdb_every=pdb_every,
        statefulset_every=statefulset_every,
    )
    t_pods = time.monotonic()
    # The node agent first, as in a real cluster: created together with the workloads, a DaemonSet pod
    # can find its node already filled by the scheduler's uneven spread and stay Pending for good.
    create_daemonset(api, system_ns, f"{prefix}-agent", node_selector=label, labels=label, grace=grace)
    ds_path = f"/apis/apps/v1/namespaces/{quoted(system_ns)}/daemonsets/{quoted(prefix)}-agent"
    wait_until(
        lambda: (get(api, ds_path).get("status") or {}).get("numberReady", 0) >= len(node_names),
        timeout,
        f"DaemonSet {prefix}-agent Ready on all {len(node_names)} nodes",
        interval=0.5,
        max_interval=2.0,
    )
    say(f"populate: DaemonSet Ready on {len(node_names)} nodes after {time.monotonic() - t_pods:.1f} s")
    run_parallel(
        lambda w: _post_workload(api, w, label, grace=grace, pdb_max_unavailable=pdb_max_unavailable),
        plan,
        workers=workers,
    )
    bound = 0
    if enable_replicasets is not None:
        bound = _bind_deployment_pods(
            api, plan, pools, node_names, workload_ns, workers=workers, timeout=timeout
        )
        say(f"populate: {bound} pods created bound to their nodes in {time.monotonic() - t_pods:.1f} s")
        enable_replicasets()
        say(f"populate: the ReplicaSet controller on after {time.monotonic() - t_pods:.1f} s")
    expected = nodes * pods_per_node
    posted = time.monotonic() - t_pods
    say(f"populate: {len(plan)} workloads posted in {posted:.1f} s; awaiting {expected} pods")

    last_said = [t_pods]

    def all_ready() -> bool:
        count = _ready_pod_count(api, workload_ns, system_ns)
        now = time.monotonic()
        if now - last_said[0] > 15:
            last_said[0] = now
            say(f"populate: {count}/{expected} pods Ready, {count / (now - t_pods):.0f} pods/s")
        return count >= expected

    try:
        wait_until(all_ready, timeout, f"{expected} pods Ready", interval=1.0, max_interval=2.0)
    except WaitTimeout as exc:
        stuck = list_pods(
            api, label_selector=f"scalebot.test/populate={prefix}", field_selector="status.phase!=Running"
        )
        sample = ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} (node {p['spec'].get('nodeName')})"
            for p in stuck[:10]
        )
        raise WaitTimeout(f"{exc}; {len(stuck)} pods not Running, e.g. {sample}") from exc
    pod_seconds = time.monotonic() - t_pods
    report = PopulateReport(
        nodes=len(node_names),
        pools=pools,
        namespaces=[system_ns, *workload_ns],
        deployments=sum(1 for w in plan if not w.statefulset),
        statefulsets=sum(1 for w in plan if w.statefulset),
        pdbs=sum(1 for w in plan if w.pdb),
        pods=expected,
        node_seconds=node_seconds,
        pod_seconds=pod_seconds,
        total_seconds=time.monotonic() - started,
        bound_directly=bound,
    )
    say(str(report))
    return report

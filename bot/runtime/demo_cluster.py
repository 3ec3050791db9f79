"""The built-in simulated cluster: three node pools with workloads, PDBs and awkward pods.

In memory only (engine.kube.fake), so a first look needs no cluster and changes nothing real.
Short termination grace periods keep the demo quick; everything else behaves like the real
eviction API (429 for a PDB that allows nothing, pods lingering until their grace ends).
Every pod has a controller that brings it back (`recreate_on`): a ReplicaSet or StatefulSet pod on
its pool's nodes, its own node first, a DaemonSet pod on its own node. An evicted pod's
replacement waits Pending while the pool is cordoned or asleep and runs again once a wake brings
the nodes back, so a second rehearsal drains the same workloads as the first. The budgets are
`minAvailable` ones, their allowance computed from the healthy pods as the disruption controller
does, so they allow again what they allowed once the pods are back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, Unpack

from engine.kube.fake import FakeCluster

POOL_LABEL = "scalebot.io/pool"
DEMO_GRACE_SECONDS = 3


POOLS = {"system": 2, "web": 3, "batch": 3}


def populate(cluster: FakeCluster) -> None:
    for pool, count in POOLS.items():
        for i in range(count):
            cluster.add_node(f"{pool}-{i}", labels={POOL_LABEL: pool})
    for pool, count in POOLS.items():
        for i in range(count):
            cluster.add_pod(
                "monitoring",
                f"node-exporter-{pool}-{i}",
                node=f"{pool}-{i}",
                controller_kind="DaemonSet",
                controller_name="node-exporter",
                recreate_on=(f"{pool}-{i}",),  # one per node, back when its node is
            )
    cluster.add_daemonset("monitoring", "node-exporter")
    dns = {"k8s-app": "kube-dns"}
    coredns = {f"coredns-{i}": f"system-{i}" for i in range(2)}
    _workload(
        cluster, "kube-system", "coredns", coredns, labels=dns, priority_class="system-cluster-critical"
    )
    cluster.add_pdb("kube-system", "coredns", match_labels=dns, min_available=1)
    _workload(cluster, "shop", "web", {f"web-{i}": f"web-{i % 3}" for i in range(6)}, labels={"app": "web"})
    cluster.add_pdb("shop", "web", match_labels={"app": "web"}, min_available=4)
    _workload(
        cluster, "shop", "postgres", {"postgres-0": "web-2"}, kind="StatefulSet", labels={"app": "postgres"}
    )
    cluster.add_pdb("shop", "postgres", match_labels={"app": "postgres"}, min_available=1)
    _workload(cluster, "batch", "report", {f"report-{i}": f"batch-{i}" for i in range(3)}, empty_dir=True)
    keep = {"karpenter.sh/do-not-disrupt": "true"}
    _workload(cluster, "batch", "notebook", {"notebook": "batch-1"}, annotations=keep)


class _PodFields(TypedDict, total=False):
    """What a workload's pods carry beyond their controller (`FakeCluster.add_pod`'s own names)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    empty_dir: bool
    priority_class: str


def _workload(
    cluster: FakeCluster,
    namespace: str,
    controller: str,
    pods: Mapping[str, str],
    *,
    kind: str = "ReplicaSet",
    **fields: Unpack[_PodFields],
) -> None:
    """The pods of one controller (pod name -> node), with the demo's short grace period; each is
    replaced on its pool's nodes, its own first."""
    for name, node in pods.items():
        cluster.add_pod(
            namespace,
            name,
            node=node,
            controller_kind=kind,
            controller_name=controller,
            grace=DEMO_GRACE_SECONDS,
            recreate_on=pool_nodes_from(node),
            **fields,
        )


def pool_nodes_from(node: str) -> tuple[str, ...]:
    """The nodes of `node`'s pool, `node` first: where its controller places a replacement."""
    pool = node.rsplit("-", 1)[0]
    others = tuple(f"{pool}-{i}" for i in range(POOLS[pool]) if f"{pool}-{i}" != node)
    return (node, *others)

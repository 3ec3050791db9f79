"""The built-in simulated cluster: three node pools with workloads, PDBs and awkward pods.

In memory only (engine.kube.fake), so a first look needs no cluster and changes nothing real.
Short termination grace periods keep the demo quick; everything else behaves like the real
eviction API (429 for a PDB that allows nothing, pods lingering until their grace ends).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, Unpack

from engine.kube.fake import FakeCluster

POOL_LABEL = "scalebot.io/pool"
DEMO_GRACE_SECONDS = 3


def populate(cluster: FakeCluster) -> None:
    pools = {"system": 2, "web": 3, "batch": 3}
    for pool, count in pools.items():
        for i in range(count):
            cluster.add_node(f"{pool}-{i}", labels={POOL_LABEL: pool})
    for pool, count in pools.items():
        for i in range(count):
            cluster.add_pod(
                "monitoring",
                f"node-exporter-{pool}-{i}",
                node=f"{pool}-{i}",
                controller_kind="DaemonSet",
                controller_name="node-exporter",
            )
    cluster.add_daemonset("monitoring", "node-exporter")
    dns = {"k8s-app": "kube-dns"}
    coredns = {f"coredns-{i}": f"system-{i}" for i in range(2)}
    _workload(
        cluster, "kube-system", "coredns", coredns, labels=dns, priority_class="system-cluster-critical"
    )
    cluster.add_pdb("kube-system", "coredns", match_labels=dns, disruptions_allowed=1)
    _workload(cluster, "shop", "web", {f"web-{i}": f"web-{i % 3}" for i in range(6)}, labels={"app": "web"})
    cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=2)
    _workload(
        cluster, "shop", "postgres", {"postgres-0": "web-2"}, kind="StatefulSet", labels={"app": "postgres"}
    )
    cluster.add_pdb("shop", "postgres", match_labels={"app": "postgres"}, disruptions_allowed=0)
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
    """The pods of one controller (pod name -> node), with the demo's short grace period."""
    for name, node in pods.items():
        cluster.add_pod(
            namespace,
            name,
            node=node,
            controller_kind=kind,
            controller_name=controller,
            grace=DEMO_GRACE_SECONDS,
            **fields,
        )

"""The built-in simulated cluster: three node pools with workloads, PDBs and awkward pods.

In memory only (engine.kube.fake), so a first look needs no cluster and changes nothing real.
Short termination grace periods keep the demo quick; everything else behaves like the real
eviction API (429 for a PDB that allows nothing, pods lingering until their grace ends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    _workload(
        cluster,
        "kube-system",
        "ReplicaSet",
        "coredns",
        [(f"coredns-{i}", f"system-{i}") for i in range(2)],
        labels={"k8s-app": "kube-dns"},
        priority_class="system-cluster-critical",
    )
    cluster.add_pdb("kube-system", "coredns", match_labels={"k8s-app": "kube-dns"}, disruptions_allowed=1)
    _workload(
        cluster,
        "shop",
        "ReplicaSet",
        "web",
        [(f"web-{i}", f"web-{i % 3}") for i in range(6)],
        labels={"app": "web"},
    )
    cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=2)
    _workload(
        cluster, "shop", "StatefulSet", "postgres", [("postgres-0", "web-2")], labels={"app": "postgres"}
    )
    cluster.add_pdb("shop", "postgres", match_labels={"app": "postgres"}, disruptions_allowed=0)
    _workload(
        cluster,
        "batch",
        "ReplicaSet",
        "report",
        [(f"report-{i}", f"batch-{i}") for i in range(3)],
        empty_dir=True,
    )
    _workload(
        cluster,
        "batch",
        "ReplicaSet",
        "notebook",
        [("notebook", "batch-1")],
        annotations={"karpenter.sh/do-not-disrupt": "true"},
    )


def _workload(
    cluster: FakeCluster,
    namespace: str,
    controller_kind: str,
    controller_name: str,
    placements: Sequence[tuple[str, str]],
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    empty_dir: bool = False,
    priority_class: str = "",
) -> None:
    """The pods of one controller, (pod name, node) each, with the demo's short grace period."""
    for name, node in placements:
        cluster.add_pod(
            namespace,
            name,
            node=node,
            controller_kind=controller_kind,
            controller_name=controller_name,
            labels=labels,
            annotations=annotations,
            empty_dir=empty_dir,
            grace=DEMO_GRACE_SECONDS,
            priority_class=priority_class,
        )

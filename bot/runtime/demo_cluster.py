"""The built-in simulated cluster: three node pools with workloads, PDBs and awkward pods.

In memory only (engine.kube.fake), so a first look needs no cluster and changes nothing real.
Short termination grace periods keep the demo quick; everything else behaves like the real
eviction API (429 for a PDB that allows nothing, pods lingering until their grace ends).
"""

from __future__ import annotations

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
    for i in range(2):
        cluster.add_pod(
            "kube-system",
            f"coredns-{i}",
            node=f"system-{i}",
            controller_kind="ReplicaSet",
            controller_name="coredns",
            labels={"k8s-app": "kube-dns"},
            grace=DEMO_GRACE_SECONDS,
            priority_class="system-cluster-critical",
        )
    cluster.add_pdb("kube-system", "coredns", match_labels={"k8s-app": "kube-dns"}, disruptions_allowed=1)
    for i in range(6):
        cluster.add_pod(
            "shop",
            f"web-{i}",
            node=f"web-{i % 3}",
            controller_kind="ReplicaSet",
            controller_name="web",
            labels={"app": "web"},
            grace=DEMO_GRACE_SECONDS,
        )
    cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=2)
    cluster.add_pod(
        "shop",
        "postgres-0",
        node="web-2",
        controller_kind="StatefulSet",
        controller_name="postgres",
        labels={"app": "postgres"},
        grace=DEMO_GRACE_SECONDS,
    )
    cluster.add_pdb("shop", "postgres", match_labels={"app": "postgres"}, disruptions_allowed=0)
    for i in range(3):
        cluster.add_pod(
            "batch",
            f"report-{i}",
            node=f"batch-{i}",
            controller_kind="ReplicaSet",
            controller_name="report",
            empty_dir=True,
            grace=DEMO_GRACE_SECONDS,
        )
    cluster.add_pod(
        "batch",
        "notebook",
        node="batch-1",
        controller_kind="ReplicaSet",
        controller_name="notebook",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
        grace=DEMO_GRACE_SECONDS,
    )

"""Which pods on the drained nodes leave with the workloads a sleep scaled to zero (no eviction for
them: their controllers delete them)."""

from __future__ import annotations

from engine.domain.model import OwnerRef, PodInfo
from engine.workloads.returning import leaving_with


def pod(name: str, kind: str = "", owner: str = "", namespace: str = "shop") -> PodInfo:
    controller = OwnerRef(kind=kind, name=owner, uid=f"uid-{owner}") if kind else None
    return PodInfo(namespace=namespace, name=name, uid=f"uid-{name}", node_name="n1", controller=controller)


SCALED = frozenset({"Deployment/shop/web", "StatefulSet/shop/db"})


def test_the_pods_of_a_deployment_and_a_statefulset_scaled_to_zero_leave_with_them() -> None:
    pods = [pod("web-7d9f-abcde", "ReplicaSet", "web-7d9f"), pod("db-0", "StatefulSet", "db")]
    assert [p.name for p in leaving_with(SCALED, pods)] == ["web-7d9f-abcde", "db-0"]


def test_pods_of_anything_else_stay_for_the_drain() -> None:
    pods = [
        pod("api-5c-xyz", "ReplicaSet", "api-5c"),  # a Deployment the sleep did not scale
        pod("web-7d9f-abcde", "ReplicaSet", "web-7d9f", namespace="other"),  # same name, other namespace
        pod("web", "StatefulSet", "web"),  # a StatefulSet named like the scaled Deployment
        pod("agent-x", "DaemonSet", "agent"),
        pod("bare"),
        pod("job-abc", "Job", "job"),
    ]
    assert leaving_with(SCALED, pods) == []

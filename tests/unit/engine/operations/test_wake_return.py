"""A wake whose nodes are Ready follows the workloads not back yet, then says which and why.

Real `Operations`, runner and SQLite; the in-memory cluster and pools, virtual time. The
Deployments are served by a small in-memory `WorkloadApi` whose availability the test moves.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube.fake import FakeCluster
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.core.text import wake_report
from engine.store.database import Store
from engine.workloads import WorkloadScaler
from engine.workloads.model import HpaInfo, Kind, NamespaceInfo, WorkloadInfo

UNSCHEDULABLE = "Unschedulable: 0/2 nodes are available: 2 node(s) had untolerated taint {gpu: true}."


class Deployments:
    """WorkloadApi over a few Deployments; `back_after` looks, `shop/web` becomes available.

    `shop/api` is available all along; `ops/legacy` never is: neither has a pod on the nodes the
    sleep empties, so a wake has nothing to wait for or say about them.
    """

    def __init__(self, back_after: int | None) -> None:
        self.back_after = back_after
        self.looks = 0

    def list_namespaces(self) -> list[NamespaceInfo]:
        return [NamespaceInfo("shop"), NamespaceInfo("ops")]

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        if kind is not Kind.DEPLOYMENT:
            return []
        self.looks += 1
        back = self.back_after is not None and self.looks > self.back_after
        return [
            WorkloadInfo(
                Kind.DEPLOYMENT, "shop", "api", 1, generation=1, observed_generation=1, available_replicas=1
            ),
            WorkloadInfo(
                Kind.DEPLOYMENT,
                "shop",
                "web",
                2,
                generation=1,
                observed_generation=1,
                available_replicas=2 if back else 0,
            ),
            WorkloadInfo(
                Kind.DEPLOYMENT, "ops", "legacy", 1, generation=1, observed_generation=1, available_replicas=0
            ),
        ]

    def list_hpas(self) -> list[HpaInfo]:
        return []

    def has_keda(self) -> bool:
        return False

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        return next(w for w in self.list_workloads(kind) if w.name == name)

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        raise AssertionError("a wake of pools alone scales no workload")

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        return {}

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        raise AssertionError("a wake of pools alone records no workload")


def _woken(tmp_path: Path, deployments: Deployments) -> tuple[Operations, FakeCluster, list[ProgressEvent]]:
    """Pool web zero-scaled, then woken: returns once the wake finished."""
    cluster = FakeCluster()
    assert cluster.clock is not None
    for i in range(2):
        cluster.add_node(f"web-{i}", labels={"scalebot.io/pool": "web"})
        cluster.add_node(f"ops-{i}", labels={"scalebot.io/pool": "ops"})
        # web's pods run on the nodes the sleep empties; legacy's on a pool it leaves alone.
        cluster.add_pod(
            "shop",
            f"web-7d4b9c-{i}",
            node=f"web-{i}",
            controller_kind="ReplicaSet",
            controller_name="web-7d4b9c",
        )
        cluster.add_pod(
            "ops",
            f"legacy-5f6a7-{i}",
            node=f"ops-{i}",
            controller_kind="ReplicaSet",
            controller_name="legacy-5f6a7",
        )
    handle = ClusterHandle(
        name="dev", api=cluster, pools=SimulatedPoolProvider(cluster), workloads=WorkloadScaler(deployments)
    )
    settings = RunnerSettings(workers=1, workloads_return_timeout=timedelta(minutes=3))
    ops = new_operations(Store(tmp_path / "db.sqlite"), {"dev": handle}, {}, cluster.clock, settings=settings)
    events: list[ProgressEvent] = []
    ops.subscribe(events.append)
    for kind in (OpKind.ZERO, OpKind.WAKE):
        target = Target(cluster="dev", pools=("web",))
        out = ops.request(OperationRequest(kind=kind, target=target, requested_by="cli:alice"))
        assert out.ok and out.operation is not None, out.reply
        assert ops.runner.wait_idle(20)
        if kind is OpKind.ZERO:
            # The evicted pods come back Pending: they wait for a node the wake does not bring
            # (a taint they do not tolerate).
            for i in range(2):
                cluster.add_pod(
                    "shop",
                    f"web-7d4b9c-p{i}",
                    node="",
                    phase="Pending",
                    controller_kind="ReplicaSet",
                    controller_name="web-7d4b9c",
                    unscheduled_reason=UNSCHEDULABLE,
                )
    return ops, cluster, events


def test_a_wake_names_the_workloads_still_not_back_and_why_after_following_them(tmp_path: Path) -> None:
    ops, _, events = _woken(tmp_path, Deployments(back_after=None))
    try:
        [wake] = [op for op in ops.list_operations() if op.kind is OpKind.WAKE]
        assert wake.state is OpState.SUCCEEDED, wake.error
        texts = [e.text for e in events if e.operation.id == wake.id]
        assert any(
            t.startswith("Nodes Ready; 0/1 workloads available, following the others for up to 3m")
            and "Deployment/shop/web" in t
            for t in texts
        ), texts
        [final] = [e.text for e in events if e.operation.id == wake.id and e.final]
        assert "2/2 nodes Ready" in final and "0/1 workloads available" in final
        why = (
            "Deployment/shop/web: 0/2 replicas available; 2 pod(s) Pending (web-7d4b9c-p0: "
            + UNSCHEDULABLE
            + ")"
        )
        assert "not back: " + why in final
        assert wake.progress.workloads.not_back == (why,)
        report = wake_report(wake)
        assert report.startswith("dev is only partly back: 2/2 nodes Ready, 0/1 workloads available")
        assert "not back: " + why in report
    finally:
        ops.runner.stop()


def test_a_wake_reports_when_the_workloads_it_followed_are_back(tmp_path: Path) -> None:
    deployments = Deployments(back_after=3)
    ops, _, events = _woken(tmp_path, deployments)
    try:
        [wake] = [op for op in ops.list_operations() if op.kind is OpKind.WAKE]
        assert wake.state is OpState.SUCCEEDED, wake.error
        texts = [e.text for e in events if e.operation.id == wake.id]
        assert any(t.startswith("1/1 workloads available after ") for t in texts), texts
        assert wake.progress.workloads.not_back == ()
        assert wake_report(wake) == "dev is back: 2/2 nodes Ready, 1/1 workloads available"
    finally:
        ops.runner.stop()


def test_a_wake_waits_for_and_reports_only_the_workloads_its_sleep_displaced(tmp_path: Path) -> None:
    """ops/legacy has never been available and scalebot never touched it (its pods are on a pool
    the sleep left running): the wake neither follows it nor names it; it counts shop/web alone,
    whose pods were on the nodes the sleep removed."""
    ops, _, events = _woken(tmp_path, Deployments(back_after=0))
    try:
        [wake] = [op for op in ops.list_operations() if op.kind is OpKind.WAKE]
        assert wake.state is OpState.SUCCEEDED, wake.error
        texts = [e.text for e in events if e.operation.id == wake.id]
        assert not [t for t in texts if "legacy" in t or "following" in t], texts
        [final] = [e.text for e in events if e.operation.id == wake.id and e.final]
        assert "1/1 workloads available" in final and "not back" not in final, final
        assert wake.progress.workloads.not_back == ()
        assert wake_report(wake) == "dev is back: 2/2 nodes Ready, 1/1 workloads available"
    finally:
        ops.runner.stop()

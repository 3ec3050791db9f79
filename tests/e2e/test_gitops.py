"""GitOps coexistence on the real control plane, through the real Operations, as scalebot's ServiceAccount.

Argo CD and Flux do not run here: tests/e2e/gitops_standin.py installs minimal Application,
Kustomization and HelmRelease CRDs and runs a STAND-IN reconciler that reverts a managed
Deployment's replicas the way those controllers do (Argo CD self-heal, Flux drift correction)
unless its owner is paused (skip-reconcile / spec.suspend). The shipped RBAC and field-level
admission policy apply to every write scalebot makes on the owners.

- `gitops: pause`: a sleep pauses each owner before it scales the workloads down, several
  complete stand-in passes later they are still at 0, and the wake restores the workloads and then
  every owner exactly as it was (an annotation that was absent is absent again, `suspend: false`
  stays an explicit false, a HelmRelease suspended before the sleep stays suspended);
- an owner is taken only from what the controller records: a HelmRelease whose status lists no
  inventory, named by a label anyone who can label a workload can write, is reported as an
  unverified owner and never suspended;
- `gitops: warn` (the default): the plan names each owner and the sleep leaves them alone, and the
  stand-in undoes the sleep, which is what the warning is about.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.kube.client import KubeClient
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.labels import LabelPoolProvider
from engine.store.database import Store
from engine.workloads import WorkloadConfig, WorkloadScaler
from engine.workloads.gitops import GitOpsMode
from localcluster import objects, rest, waits
from tests.e2e import gitops_standin as standin
from tests.e2e.support import FAST, pools, run

pytestmark = pytest.mark.e2e

Json = dict[str, Any]
DESIRED = {"web": 3, "api": 2, "jobs": 1}
"""The replicas each Deployment has in "Git": what the stand-in puts back."""


@pytest.fixture(scope="module")
def gitops_crds(admin_api: Any) -> Iterator[None]:
    standin.install_crds(admin_api)
    yield
    standin.remove_crds(admin_api)


class Shop:
    """Three Deployments and their owners in the test's namespace, and the stand-in over them."""

    def __init__(self, admin: Any, namespace: str, node_selector: dict[str, str]) -> None:
        self.admin, self.ns = admin, namespace
        ns = namespace
        argo = {"app.kubernetes.io/instance": f"{ns}_shop"}  # an Application outside argocd's namespace
        flux = {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": ns}
        helm = {"helm.toolkit.fluxcd.io/name": "jobs", "helm.toolkit.fluxcd.io/namespace": ns}
        for name, labels in (("web", argo), ("api", flux), ("jobs", helm)):
            objects.create_deployment(
                admin, ns, name, DESIRED[name], node_selector=node_selector, labels=labels, cpu="10m", grace=1
            )
        standin.create(
            admin,
            standin.ARGO,
            ns,
            {
                "metadata": {"name": "shop"},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": "https://git.example/shop.git", "path": "deploy"},
                    "destination": {"namespace": ns},
                    "syncPolicy": {"automated": {"prune": True, "selfHeal": True}},
                },
                "status": {
                    "resources": [
                        {
                            "group": "apps",
                            "version": "v1",
                            "kind": "Deployment",
                            "namespace": ns,
                            "name": "web",
                        }
                    ]
                },
            },
        )
        standin.create(
            admin,
            standin.KUSTOMIZE,
            ns,
            {
                "metadata": {"name": "apps"},
                "spec": {"interval": "1m", "path": "./apps", "prune": True, "suspend": False},
                "status": {"inventory": {"entries": [{"id": f"{ns}_api_apps_Deployment", "v": "v1"}]}},
            },
        )
        standin.create(
            admin,
            standin.HELM,
            ns,
            {
                "metadata": {"name": "jobs"},
                # Suspended by its team before the sleep: scalebot must leave it suspended.
                "spec": {"interval": "5m", "suspend": True, "chart": {"spec": {"chart": "jobs"}}},
                "status": {"inventory": {"entries": [{"id": f"{ns}_jobs_apps_Deployment", "v": "v1"}]}},
            },
        )

    def owner(self, kind: tuple[str, str, str, str], name: str) -> Json:
        return rest.get(self.admin, standin.path(kind, self.ns, name))

    def owners(self) -> dict[str, Json]:
        """What a restore must give back exactly: each owner's annotations, labels and spec."""
        owners = {
            "Application": self.owner(standin.ARGO, "shop"),
            "Kustomization": self.owner(standin.KUSTOMIZE, "apps"),
            "HelmRelease": self.owner(standin.HELM, "jobs"),
        }
        return {
            kind: copy.deepcopy(
                {k: o["metadata"].get(k) or {} for k in ("annotations", "labels")} | {"spec": o["spec"]}
            )
            for kind, o in owners.items()
        }

    def replicas(self) -> dict[str, int]:
        apps = f"/apis/apps/v1/namespaces/{self.ns}/deployments"
        return {name: rest.get(self.admin, f"{apps}/{name}")["spec"]["replicas"] for name in DESIRED}


@pytest.fixture
def shop(
    admin_api: Any,
    gitops_crds: None,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
) -> Shop:
    pools(node_pool, pool_key, unique_name, a=1)
    return Shop(admin_api, namespace, {"scalebot.test/group": unique_name})


def _operations(kube: KubeClient, namespace: str, db: Path, gitops: GitOpsMode) -> Operations:
    scaler = WorkloadScaler.from_kube_client(kube, WorkloadConfig(namespaces=(namespace,), gitops=gitops))
    provider = LabelPoolProvider(kube, kube.api_client, label="scalebot.test/none", namespace="scalebot")
    return new_operations(
        Store(db), {"e2e": ClusterHandle("e2e", kube, provider, scaler)}, {}, SystemClock(), settings=FAST
    )


def _request(kind: OpKind) -> OperationRequest:
    return OperationRequest(
        kind=kind, target=Target(cluster="e2e", workloads_only=True), requested_by="cli:e2e"
    )


def test_pause_keeps_argo_and_flux_from_undoing_a_sleep_and_wake_restores_each_owner_exactly(
    admin_api: Any, kube: KubeClient, shop: Shop, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    ops = _operations(kube, ns, tmp_path / "db.sqlite", "pause")
    reconciler, loop = standin.start(admin_api, ns, dict(DESIRED))
    try:
        reconciler.wait_passes(2)
        before = shop.owners()
        plan = ops.plan(_request(OpKind.ZERO))
        assert plan.workloads == 3
        assert sorted(plan.workload_keys) == sorted(
            [
                f"Application/{ns}/shop",
                f"Kustomization/{ns}/apps",
                f"Deployment/{ns}/api",
                f"Deployment/{ns}/jobs",
                f"Deployment/{ns}/web",
            ]
        ), "the owners it pauses are part of what is approved; the suspended HelmRelease is not changed"
        named = "\n".join(plan.warnings)
        assert f"Argo CD Application {ns}/shop applies Deployment/{ns}/web" in named
        assert f"Flux Kustomization {ns}/apps applies Deployment/{ns}/api" in named

        slept = run(ops, _request(OpKind.ZERO))
        assert slept.state is OpState.SUCCEEDED, slept.error
        assert shop.replicas() == {"web": 0, "api": 0, "jobs": 0}
        assert shop.owner(standin.ARGO, "shop")["metadata"]["annotations"] == {
            "argocd.argoproj.io/skip-reconcile": "true"
        }
        assert shop.owner(standin.KUSTOMIZE, "apps")["spec"]["suspend"] is True
        reconciler.wait_passes(3)  # three full passes over every owner, each paused
        assert shop.replicas() == {"web": 0, "api": 0, "jobs": 0}
        assert reconciler.reverted == []

        woken = run(ops, _request(OpKind.WAKE))
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert shop.replicas() == DESIRED
        assert shop.owners() == before, "every owner exactly as it was before the sleep"
        reconciler.wait_passes(2)
        assert reconciler.reverted == [] and shop.replicas() == DESIRED
        assert ops.store.workload_records("e2e") == []
    finally:
        loop.stop()
        ops.runner.stop()


def test_warn_names_each_owner_in_the_plan_and_the_thread_and_leaves_them(
    admin_api: Any, kube: KubeClient, shop: Shop, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    ops = _operations(kube, ns, tmp_path / "db.sqlite", "warn")
    thread: list[str] = []

    def hear(event: ProgressEvent) -> None:
        thread.append(event.text)

    ops.subscribe(hear)
    before = shop.owners()
    plan = ops.plan(_request(OpKind.ZERO))
    assert sorted(plan.workload_keys) == [
        f"Deployment/{ns}/api",
        f"Deployment/{ns}/jobs",
        f"Deployment/{ns}/web",
    ]
    warning = {w.split(": ", 1)[0]: w.split(": ", 1)[1] for w in plan.warnings}
    assert warning[f"Deployment/{ns}/web"].startswith(
        f"applied by Argo CD Application {ns}/shop, which may put"
    )
    assert warning[f"Deployment/{ns}/api"].startswith(
        f"applied by Flux Kustomization {ns}/apps, which may put"
    )
    assert warning[f"Deployment/{ns}/jobs"].startswith(
        f"applied by Flux HelmRelease {ns}/jobs, which may put"
    )
    reconciler, loop = standin.start(admin_api, ns, dict(DESIRED))
    try:
        slept = run(ops, _request(OpKind.ZERO))
        assert slept.state is OpState.SUCCEEDED, slept.error
        said = "\n".join(thread)
        assert f"Deployment/{ns}/web: applied by Argo CD Application {ns}/shop" in said
        assert shop.owners() == before, "warn leaves the owners alone"
        # What the warning is about: the (stand-in) controllers put the unsuspended ones back.
        waits.wait_until(
            lambda: (r := shop.replicas())["web"] == 3 and r["api"] == 2, 30, "the stand-in to undo the sleep"
        )
        assert shop.replicas()["jobs"] == 0, "its HelmRelease was suspended before the sleep"
        assert set(reconciler.reverted) >= {"argocd-application-controller: web", "kustomize-controller: api"}
    finally:
        loop.stop()
        ops.runner.stop()
        ops.unsubscribe(hear)


def test_pause_never_suspends_a_helmrelease_that_does_not_list_the_workload(
    admin_api: Any,
    kube: KubeClient,
    shop: Shop,
    namespace: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Whoever can label a Deployment names an unrelated HelmRelease installing into its namespace:
    with no inventory listing the Deployment, the plan calls it unverified and the sleep leaves it."""
    ns = namespace
    labels = {"helm.toolkit.fluxcd.io/name": "billing", "helm.toolkit.fluxcd.io/namespace": ns}
    objects.create_deployment(
        admin_api, ns, "tool", 1, node_selector={"scalebot.test/group": unique_name}, labels=labels, cpu="10m"
    )
    standin.create(
        admin_api,
        standin.HELM,
        ns,
        {
            "metadata": {"name": "billing"},
            "spec": {"interval": "5m", "chart": {"spec": {"chart": "billing"}}},
        },
    )
    billing = shop.owner(standin.HELM, "billing")
    ops = _operations(kube, ns, tmp_path / "db.sqlite", "pause")
    try:
        plan = ops.plan(_request(OpKind.ZERO))
        assert f"HelmRelease/{ns}/billing" not in plan.workload_keys
        assert f"Deployment/{ns}/tool" in plan.workload_keys
        notes = {w.split(": ", 1)[0]: w.split(": ", 1)[1] for w in plan.warnings}
        assert notes[f"Deployment/{ns}/tool"].startswith(
            f"unverified GitOps owner: its labels name Flux HelmRelease/{ns}/billing"
        )
        slept = run(ops, _request(OpKind.ZERO))
        assert slept.state is OpState.SUCCEEDED, slept.error
        after = shop.owner(standin.HELM, "billing")
        assert after["spec"] == billing["spec"] and "suspend" not in after["spec"]
        assert after["metadata"]["resourceVersion"] == billing["metadata"]["resourceVersion"], "never written"
        assert shop.owner(standin.KUSTOMIZE, "apps")["spec"]["suspend"] is True, "a confirmed owner is paused"
        woken = run(ops, _request(OpKind.WAKE))
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert (
            shop.owner(standin.HELM, "billing")["metadata"]["resourceVersion"]
            == billing["metadata"]["resourceVersion"]
        )
    finally:
        ops.runner.stop()

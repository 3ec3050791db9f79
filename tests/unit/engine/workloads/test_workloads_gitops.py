"""GitOps owners in the pure workload planner: who applies a workload, pause or warn, exact restore.

Owners are built from the JSON the API server returns (`WorkloadInfo.from_raw`), so the status
fields the confirmation reads (Argo CD's status.resources, Flux's status.inventory) are the real
shapes. The e2e test (tests/e2e/test_gitops.py) proves the same against the control plane.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bot.config.settings import SettingsError, load
from engine.workloads import Kind, NamespaceInfo, WorkloadConfig, WorkloadInfo, WorkloadSnapshot, plan_sleep
from engine.workloads.model import StoredOriginals, WorkloadRecord
from engine.workloads.plan import plan_wake

NOW = datetime(2026, 5, 4, 18, 0, tzinfo=UTC)
ARGO_LABEL = {"app.kubernetes.io/instance": "shop"}
FLUX_LABELS = {
    "kustomize.toolkit.fluxcd.io/name": "apps",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}


def deployment(name: str, replicas: int = 3, labels: dict[str, str] | None = None) -> WorkloadInfo:
    raw = {
        "metadata": {"namespace": "shop", "name": name, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"replicas": replicas},
    }
    raw["metadata"]["labels"] = labels or {}
    return WorkloadInfo.from_raw(Kind.DEPLOYMENT, raw)


def application(*managed: str, annotations: dict[str, str] | None = None) -> WorkloadInfo:
    raw: dict[str, Any] = {
        "metadata": {"namespace": "argocd", "name": "shop", "uid": "uid-app", "resourceVersion": "5"},
        "spec": {"syncPolicy": {"automated": {"selfHeal": True}}},
        "status": {
            "resources": [
                {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": m}
                for m in managed
            ]
        },
    }
    raw["metadata"]["annotations"] = annotations or {}
    return WorkloadInfo.from_raw(Kind.APPLICATION, raw)


def kustomization(*managed: str, suspend: bool | None = None) -> WorkloadInfo:
    spec: dict[str, Any] = {"interval": "5m", "path": "./apps"}
    if suspend is not None:
        spec["suspend"] = suspend
    raw = {
        "metadata": {"namespace": "flux-system", "name": "apps", "uid": "uid-ks", "resourceVersion": "9"},
        "spec": spec,
        "status": {
            "inventory": {"entries": [{"id": f"shop_{m}_apps_Deployment", "v": "v1"} for m in managed]}
        },
    }
    return WorkloadInfo.from_raw(Kind.KUSTOMIZATION, raw)


def snapshot(*workloads: WorkloadInfo, owners: tuple[WorkloadInfo, ...] = (), **kw: Any) -> WorkloadSnapshot:
    return WorkloadSnapshot(namespaces=(NamespaceInfo("shop"),), workloads=workloads, owners=owners, **kw)


def by_key(plan: Any) -> dict[str, Any]:
    return {d.key: d for d in plan.decisions}


def test_pause_mode_pauses_each_confirmed_owner_first_and_names_what_it_applies() -> None:
    web, api = deployment("web", labels=ARGO_LABEL), deployment("api", labels=FLUX_LABELS)
    plan = plan_sleep(
        snapshot(web, api, owners=(application("web"), kustomization("api"))),
        now=NOW,
        config=WorkloadConfig(gitops="pause"),
    )
    keys = [d.key for d in plan.decisions]
    assert keys == [
        "Application/argocd/shop",
        "Kustomization/flux-system/apps",
        "Deployment/shop/api",
        "Deployment/shop/web",
    ]
    decisions = by_key(plan)
    app, ks = decisions["Application/argocd/shop"], decisions["Kustomization/flux-system/apps"]
    assert app.patch == {
        "metadata": {"annotations": {"argocd.argoproj.io/skip-reconcile": "true"}, "resourceVersion": "5"}
    }
    assert ks.patch == {"metadata": {"resourceVersion": "9"}, "spec": {"suspend": True}}
    assert app.outcome.reason == (
        'no skip-reconcile → skip-reconcile="true": paused for the sleep, restored at wake; '
        "Argo CD Application argocd/shop applies Deployment/shop/web"
    )
    assert ks.record.original is None and ks.record.target is True
    assert decisions["Deployment/shop/web"].paused_by == ("Application/argocd/shop",)
    assert decisions["Deployment/shop/api"].paused_by == ("Kustomization/flux-system/apps",)
    assert plan.gitops_notes == ()


def test_warn_mode_leaves_the_owner_and_names_it_in_the_plan() -> None:
    web = deployment("web", labels=ARGO_LABEL)
    plan = plan_sleep(snapshot(web, owners=(application("web"),)), now=NOW, config=WorkloadConfig())
    assert [d.key for d in plan.decisions] == ["Deployment/shop/web"]
    assert [n.key for n in plan.gitops_notes] == ["Deployment/shop/web"]
    assert plan.gitops_notes[0].reason.startswith("applied by Argo CD Application argocd/shop, which may put")
    assert "gitops: pause" in plan.preview().render()


def test_an_owner_already_paused_before_the_sleep_is_left_so_and_not_recorded() -> None:
    api = deployment("api", labels=FLUX_LABELS)
    plan = plan_sleep(
        snapshot(api, owners=(kustomization("api", suspend=True),)),
        now=NOW,
        config=WorkloadConfig(gitops="pause"),
    )
    owner = by_key(plan)["Kustomization/flux-system/apps"]
    assert owner.category == "unchanged" and owner.patch is None and owner.record is None
    assert owner.outcome.reason.startswith("already paused before sleep (suspend=true); stays so after wake")


def test_a_claim_the_owner_does_not_confirm_is_reported_and_never_acted_on() -> None:
    # A label naming another team's Kustomization: its inventory does not list this Deployment.
    intruder = deployment("intruder", labels=FLUX_LABELS)
    plan = plan_sleep(
        snapshot(intruder, owners=(kustomization("api"),)), now=NOW, config=WorkloadConfig(gitops="pause")
    )
    assert [d.key for d in plan.decisions] == ["Deployment/shop/intruder"]
    assert [(n.key, n.reason) for n in plan.gitops_notes] == [
        (
            "Deployment/shop/intruder",
            "unverified GitOps owner: its labels name Flux Kustomization/flux-system/apps, which does not "
            "list it in its status (Argo CD's status.resources, Flux's status.inventory); that owner is "
            "not paused",
        )
    ]


def helmrelease(*managed: str, inventory: bool = True) -> WorkloadInfo:
    """A Flux HelmRelease installing into `shop`; without `inventory`, as one whose status lists nothing."""
    status: dict[str, Any] = {}
    if inventory:
        status["inventory"] = {"entries": [{"id": f"shop_{m}_apps_Deployment", "v": "v1"} for m in managed]}
    raw = {
        "metadata": {"namespace": "flux-system", "name": "billing", "uid": "uid-hr", "resourceVersion": "4"},
        "spec": {"interval": "5m", "targetNamespace": "shop", "chart": {"spec": {"chart": "billing"}}},
        "status": status,
    }
    return WorkloadInfo.from_raw(Kind.HELMRELEASE, raw)


HELM_LABELS = {"helm.toolkit.fluxcd.io/name": "billing", "helm.toolkit.fluxcd.io/namespace": "flux-system"}


def test_a_helmrelease_without_an_inventory_is_an_unverified_owner_and_never_paused() -> None:
    """Anyone who can label a workload could name an unrelated HelmRelease that installs into its
    namespace: without an inventory that lists the workload, it is named unverified, not suspended."""
    tool = deployment("tool", labels=HELM_LABELS)
    plan = plan_sleep(
        snapshot(tool, owners=(helmrelease(inventory=False),)), now=NOW, config=WorkloadConfig(gitops="pause")
    )
    assert [d.key for d in plan.decisions] == ["Deployment/shop/tool"]
    assert by_key(plan)["Deployment/shop/tool"].paused_by == ()
    [note] = plan.gitops_notes
    assert note.key == "Deployment/shop/tool"
    assert note.reason.startswith(
        "unverified GitOps owner: its labels name Flux HelmRelease/flux-system/billing"
    )
    assert "unverified GitOps owner" in plan.preview().render()


def test_a_helmrelease_whose_inventory_lists_the_workload_is_paused() -> None:
    tool = deployment("tool", labels=HELM_LABELS)
    plan = plan_sleep(
        snapshot(tool, owners=(helmrelease("tool"),)), now=NOW, config=WorkloadConfig(gitops="pause")
    )
    assert by_key(plan)["HelmRelease/flux-system/billing"].patch == {
        "metadata": {"resourceVersion": "4"},
        "spec": {"suspend": True},
    }
    assert by_key(plan)["Deployment/shop/tool"].paused_by == ("HelmRelease/flux-system/billing",)
    assert plan.gitops_notes == ()


def test_a_helm_instance_label_without_an_argo_application_is_no_gitops_claim() -> None:
    plan = plan_sleep(
        snapshot(deployment("web", labels=ARGO_LABEL)), now=NOW, config=WorkloadConfig(gitops="pause")
    )
    assert [d.key for d in plan.decisions] == ["Deployment/shop/web"] and plan.gitops_notes == ()


@pytest.mark.parametrize(
    ("original", "patch_value"),
    [(None, None), (False, False)],
    ids=["suspend-not-set-is-removed", "suspend-false-is-set-false"],
)
def test_wake_restores_the_owner_exactly_after_its_workloads(original: bool | None, patch_value: Any) -> None:
    owner = kustomization("api", suspend=True)
    workload = deployment("api", replicas=0, labels=FLUX_LABELS)
    records = [
        WorkloadRecord(Kind.KUSTOMIZATION, "flux-system", "apps", original, True, NOW, "uid-ks"),
        WorkloadRecord(Kind.DEPLOYMENT, "shop", "api", 3, 0, NOW, "uid-api"),
    ]
    plan = plan_wake(snapshot(workload, owners=(owner,)), records, config=WorkloadConfig())
    assert [d.key for d in plan.decisions] == ["Deployment/shop/api", "Kustomization/flux-system/apps"]
    assert plan.decisions[1].patch == {"metadata": {"resourceVersion": "9"}, "spec": {"suspend": patch_value}}


def test_wake_from_the_configmap_restores_an_owner_outside_the_selected_namespaces() -> None:
    record = WorkloadRecord(Kind.APPLICATION, "argocd", "shop", "false", "true", NOW, "uid-app")
    stored = StoredOriginals({record.key: record})
    owner = application("web", annotations={"argocd.argoproj.io/skip-reconcile": "true"})
    plan = plan_wake(snapshot(owners=(owner,), stored=stored), None, config=WorkloadConfig())
    assert [(d.key, d.patch) for d in plan.decisions] == [
        (
            "Application/argocd/shop",
            {
                "metadata": {
                    "annotations": {"argocd.argoproj.io/skip-reconcile": "false"},
                    "resourceVersion": "5",
                }
            },
        )
    ]


def test_the_cluster_setting_is_pause_or_warn(tmp_path: Any) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("clusters:\n  dev: {gitops: pause}\n  prod: {}\n")
    settings = load(config, {}, require_slack=False)
    assert settings.clusters["dev"].gitops == "pause" and settings.clusters["prod"].gitops == "warn"
    config.write_text("clusters:\n  dev: {gitops: suspend}\n")
    with pytest.raises(SettingsError, match=r"clusters\.dev\.gitops: expected pause or warn, got 'suspend'"):
        load(config, {}, require_slack=False)

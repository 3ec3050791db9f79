"""A STAND-IN for Argo CD's application controller and Flux's kustomize- and helm-controllers.

Neither GitOps tool runs here: only their API matters to scalebot. The CRDs are minimal (the real
group, version, kind and plural; any spec and status), and this stand-in reverts replicas the way
the real controllers do when a managed Deployment drifts from "Git" (`desired`, the replicas each
Deployment has in the repository):
- Argo CD: an Application with automated sync and `selfHeal: true` puts every resource its
  status.resources lists back to the desired state, unless the Application carries
  `argocd.argoproj.io/skip-reconcile: "true"` (all processing stops) or automated sync is off;
- Flux: a Kustomization re-applies every object of its status.inventory on each reconcile, and a
  HelmRelease (drift correction on) the objects of its release in its target namespace, unless
  `spec.suspend: true`.
It writes as the admin (the controllers' own accounts), with their field managers, and counts its
passes so a test can wait for several complete passes instead of sleeping.
"""

from __future__ import annotations

from typing import Any

from localcluster import rest, waits
from tests.e2e import support
from tests.e2e.support import StandInLoop

PRESERVE = support.PRESERVE_UNKNOWN
SKIP_RECONCILE = "argocd.argoproj.io/skip-reconcile"
ARGO = ("argoproj.io", "v1alpha1", "applications", "Application")
KUSTOMIZE = ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
HELM = ("helm.toolkit.fluxcd.io", "v2", "helmreleases", "HelmRelease")
KINDS = (ARGO, KUSTOMIZE, HELM)


def crd(group: str, version: str, plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [
                {"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": PRESERVE}}
            ],
        },
    }


def install_crds(api: Any) -> None:
    for kind in KINDS:
        support.install_crd(api, crd(*kind))


def remove_crds(api: Any) -> None:
    for group, _, plural, _ in KINDS:
        support.remove_crd(api, f"{plural}.{group}")


def path(kind: tuple[str, str, str, str], namespace: str, name: str = "") -> str:
    group, version, plural, _ = kind
    return f"/apis/{group}/{version}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def create(api: Any, kind: tuple[str, str, str, str], namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    group, version, _, name = kind
    return rest.create(api, path(kind, namespace), {"apiVersion": f"{group}/{version}", "kind": name, **body})


class GitOpsStandIn:
    """One reconcile pass over the Applications, Kustomizations and HelmReleases of `namespace`."""

    def __init__(self, admin: Any, namespace: str, desired: dict[str, int]) -> None:
        self.admin, self.namespace, self.desired = admin, namespace, desired
        self.errors: list[Exception] = []
        self.passes = 0
        self.reverted: list[str] = []
        """`<controller>: <deployment>` for every revert, in order."""

    def reconcile(self) -> None:
        for app in rest.list_items(self.admin, path(ARGO, self.namespace)):
            annotations = app["metadata"].get("annotations") or {}
            automated = (app.get("spec", {}).get("syncPolicy") or {}).get("automated")
            if annotations.get(SKIP_RECONCILE) == "true" or automated is None:
                continue
            if automated.get("enabled") is False or not automated.get("selfHeal"):
                continue
            for r in (app.get("status") or {}).get("resources") or ():
                if r.get("kind") == "Deployment":
                    self._heal("argocd-application-controller", r["namespace"], r["name"])
        for ks in rest.list_items(self.admin, path(KUSTOMIZE, self.namespace)):
            if ks.get("spec", {}).get("suspend"):
                continue
            for entry in (ks.get("status") or {}).get("inventory", {}).get("entries") or ():
                namespace, name, _, kind = entry["id"].split("_")
                if kind == "Deployment":
                    self._heal("kustomize-controller", namespace, name)
        for hr in rest.list_items(self.admin, path(HELM, self.namespace)):
            if hr.get("spec", {}).get("suspend"):
                continue
            target = hr["spec"].get("targetNamespace") or hr["metadata"]["namespace"]
            selector = f"helm.toolkit.fluxcd.io/name={hr['metadata']['name']}"
            for d in rest.list_items(
                self.admin, f"/apis/apps/v1/namespaces/{target}/deployments", label_selector=selector
            ):
                self._heal("helm-controller", target, d["metadata"]["name"])
        self.passes += 1

    def _heal(self, controller: str, namespace: str, name: str) -> None:
        deployment = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        want = self.desired[name]
        if rest.get(self.admin, deployment)["spec"]["replicas"] != want:
            rest.raw_request(
                self.admin,
                "PATCH",
                deployment,
                body={"spec": {"replicas": want}},
                query={"fieldManager": controller},
                content_type="application/merge-patch+json",
            )
            self.reverted.append(f"{controller}: {name}")

    def wait_passes(self, count: int, timeout: float = 30.0) -> None:
        """Wait until `count` more complete passes have run (each saw every owner as it is now)."""
        target = self.passes + count
        waits.wait_until(lambda: self.passes >= target, timeout, f"{count} stand-in GitOps passes")
        assert not self.errors, self.errors


def start(admin: Any, namespace: str, desired: dict[str, int]) -> tuple[GitOpsStandIn, StandInLoop]:
    standin = GitOpsStandIn(admin, namespace, desired)
    return standin, StandInLoop(standin, name="gitops-standin", interval=0.2).start()

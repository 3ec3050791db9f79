"""GitOps owners: which Argo CD Application or Flux Kustomization/HelmRelease applies a workload.

Pure. A workload that a GitOps controller applies is put back by it (Argo CD with self-heal, Flux on
every reconcile) minutes after a sleep scaled it down. The objects say who applied them:
- Argo CD: the label `app.kubernetes.io/instance` (its default tracking) or the annotation
  `argocd.argoproj.io/tracking-id` (`<app>:<group>/<kind>:<namespace>/<name>`); the app is
  `<namespace>_<name>` for an Application outside Argo CD's own namespace;
- Flux: the labels `kustomize.toolkit.fluxcd.io/name` + `/namespace`, or
  `helm.toolkit.fluxcd.io/name` + `/namespace`.

Such a claim is only a hint: anyone who may label a workload could name another team's owner, and
Helm charts set `app.kubernetes.io/instance` on objects no Argo CD ever saw. An owner counts only
when the controller itself lists the workload in the owner's status, which only the controller
writes (the status subresource): Argo CD's status.resources, Flux's status.inventory. A HelmRelease
without an inventory lists nothing, so it confirms nothing: "it installs into the workload's
namespace" would let anyone who can label a workload have scalebot suspend an unrelated release
until the wake. A claim no owner confirms is reported as an unverified owner, never paused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from engine.workloads.model import Kind, WorkloadInfo, object_key

GitOpsMode = Literal["pause", "warn"]
GITOPS_MODES: tuple[GitOpsMode, ...] = ("pause", "warn")

ARGOCD_INSTANCE_LABEL = "app.kubernetes.io/instance"
ARGOCD_TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"
FLUX_LABELS: Mapping[Kind, str] = {
    Kind.KUSTOMIZATION: "kustomize.toolkit.fluxcd.io",
    Kind.HELMRELEASE: "helm.toolkit.fluxcd.io",
}
TOOL: Mapping[Kind, str] = {
    Kind.APPLICATION: "Argo CD",
    Kind.KUSTOMIZATION: "Flux",
    Kind.HELMRELEASE: "Flux",
}


@dataclass(frozen=True, slots=True)
class Claim:
    """An owner a workload names: `namespace` empty when the name alone is given (Argo CD's default)."""

    kind: Kind
    namespace: str
    name: str
    explicit: bool
    """False for the bare `app.kubernetes.io/instance` label, which Helm charts set too."""

    def matches(self, owner: WorkloadInfo) -> bool:
        return (
            owner.kind is self.kind
            and owner.name == self.name
            and (not self.namespace or owner.namespace == self.namespace)
        )

    @property
    def text(self) -> str:
        return f"{TOOL[self.kind]} {object_key(self.kind, self.namespace, self.name)}"


def claims(workload: WorkloadInfo) -> tuple[Claim, ...]:
    """The GitOps owners `workload`'s labels and annotations name (none: not GitOps-managed)."""
    found: list[Claim] = []
    labels, annotations = workload.labels, workload.annotations
    for kind, prefix in FLUX_LABELS.items():
        name, namespace = labels.get(f"{prefix}/name"), labels.get(f"{prefix}/namespace")
        if name and namespace:
            found.append(Claim(kind, namespace, name, explicit=True))
    tracking = annotations.get(ARGOCD_TRACKING_ANNOTATION, "")
    app = tracking.partition(":")[0]
    if app:
        found.append(_argocd_claim(app, explicit=True))
    instance = labels.get(ARGOCD_INSTANCE_LABEL)
    if instance and instance != app:
        found.append(_argocd_claim(instance, explicit=False))
    return tuple(found)


def _argocd_claim(app: str, *, explicit: bool) -> Claim:
    namespace, _, name = app.rpartition("_")  # Application names hold no "_"
    return Claim(Kind.APPLICATION, namespace, name, explicit)


def lists(owner: WorkloadInfo, workload: WorkloadInfo) -> bool:
    """Whether the owner's controller reports, in the owner's status, that it applies `workload`."""
    return workload.key in owner.manages


@dataclass(frozen=True, slots=True)
class Ownership:
    """A workload's confirmed GitOps owners, and the claims nothing confirmed (to report)."""

    owners: tuple[WorkloadInfo, ...] = ()
    unconfirmed: tuple[Claim, ...] = ()


def ownership(workload: WorkloadInfo, owners: Iterable[WorkloadInfo]) -> Ownership:
    confirmed: list[WorkloadInfo] = []
    unconfirmed: list[Claim] = []
    candidates = tuple(owners)
    for claim in claims(workload):
        listing = [o for o in candidates if claim.matches(o) and lists(o, workload)]
        if listing:
            confirmed.extend(o for o in listing if o not in confirmed)
        elif claim.explicit:
            unconfirmed.append(claim)
    return Ownership(tuple(sorted(confirmed, key=lambda o: o.key)), tuple(unconfirmed))


def claimed_kinds(workloads: Iterable[WorkloadInfo]) -> frozenset[Kind]:
    """The owner kinds worth listing: those some workload names."""
    return frozenset(c.kind for w in workloads for c in claims(w))


def owner_text(owner: WorkloadInfo) -> str:
    """`Argo CD Application argocd/shop`, `Flux Kustomization flux-system/apps`."""
    return f"{TOOL[owner.kind]} {owner.kind} {owner.namespace}/{owner.name}"


def warn_reason(owners: Iterable[WorkloadInfo]) -> str:
    """The note a `gitops: warn` plan gives a workload it scales down under a GitOps owner."""
    named = ", ".join(owner_text(o) for o in owners)
    return (
        f"applied by {named}, which may put it back while the cluster sleeps (Argo CD with self-heal, "
        "Flux on its next reconcile); set the cluster's gitops: pause to pause the owner for the sleep, "
        "or ignore replicas there"
    )


def unconfirmed_reason(claim: Claim) -> str:
    """The card's note on a claim no owner confirms: unverified, and so never paused."""
    return (
        f"unverified GitOps owner: its labels name {claim.text}, which does not list it in its status "
        "(Argo CD's status.resources, Flux's status.inventory); that owner is not paused"
    )

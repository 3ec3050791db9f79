"""Applies the opt-in grants of manifests/grants/ to a test's control plane, as a deployment would.

A grant names example objects (a Cluster's kubeconfig Secret, Shoots) in an example namespace; the
README tells people to point it at theirs with an overlay of their own (`namespace:` and a patch of
the Role's resourceNames). `apply_grant` writes exactly such an overlay around the shipped
directory and runs `kubectl apply -k` on it as admin, so the rules the tests run under are the
shipped ones, only placed in the test's namespace and named after the test's objects.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane

GRANTS = Path(__file__).resolve().parents[2] / "manifests" / "grants"
CAPI_KUBECONFIG = "capi-workload-kubeconfig"
GARDENER_SHOOTS = "gardener-shoots"
GARDENER_PROJECT = "gardener-project"
ROLES = {
    CAPI_KUBECONFIG: "scalebot-workload-kubeconfig",
    GARDENER_SHOOTS: "scalebot-shoots",
    GARDENER_PROJECT: "scalebot-gardener-project",
}
CLUSTER_SCOPED = {GARDENER_PROJECT}
"""Grants on cluster-scoped objects: a ClusterRole and ClusterRoleBinding, no namespace to set."""
SCALEBOT_SA: dict[str, Any] = {"kind": "ServiceAccount", "name": "scalebot", "namespace": "scalebot"}


def overlay(
    grant: str,
    namespace: str | None,
    names: Sequence[str],
    *,
    at: Path,
    subject: dict[str, Any] | None = None,
) -> str:
    """The kustomization a person writes for `grant` (see its kustomization.yaml), in directory `at`."""
    role = "ClusterRole" if grant in CLUSTER_SCOPED else "Role"
    replaced = [{"op": "replace", "path": "/rules/0/resourceNames", "value": list(names)}]
    if grant == CAPI_KUBECONFIG:  # the Clusters themselves, as its kustomization.yaml says
        clusters = [n.removesuffix("-kubeconfig") for n in names]
        replaced.append({"op": "replace", "path": "/rules/1/resourceNames", "value": clusters})
    patches: list[dict[str, Any]] = [
        {"target": {"kind": role, "name": ROLES[grant]}, "patch": json.dumps(replaced)}
    ]
    if subject is not None:
        patches.append(
            {
                "target": {"kind": f"{role}Binding", "name": ROLES[grant]},
                "patch": json.dumps([{"op": "replace", "path": "/subjects", "value": [subject]}]),
            }
        )
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # Kustomize loads a base outside the overlay's root by relative path.
        "resources": [os.path.relpath(GRANTS / grant, at)],
        "patches": patches,
    }
    if namespace is not None:
        kustomization["namespace"] = namespace
    return yaml.safe_dump(kustomization)


def render(
    plane: ControlPlane, grant: str, namespace: str | None, names: Sequence[str], **kw: Any
) -> list[Any]:
    """What `kubectl kustomize` makes of the overlay: the objects that would be applied."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "kustomization.yaml").write_text(overlay(grant, namespace, names, at=Path(tmp), **kw))
        result = plane.kubectl("kustomize", tmp, check=True)
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def apply_grant(
    plane: ControlPlane, grant: str, namespace: str | None, names: Sequence[str], **kw: Any
) -> list[Any]:
    """Render and apply the overlay as admin; returns the objects applied."""
    docs = render(plane, grant, namespace, names, **kw)
    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout=60)
    assert result.returncode == 0, result.stderr
    return docs


def remove_grant(plane: ControlPlane, docs: Sequence[Any]) -> None:
    """Delete what `apply_grant` applied (cluster-scoped grants outlive a test's namespace)."""
    result = plane.kubectl("delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr

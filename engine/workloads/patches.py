"""The JSON merge patches scalebot sends: one field per kind plus its own annotations.

GitOps owners: a Flux Kustomization's or HelmRelease's spec.suspend, an Argo CD Application's
annotation argocd.argoproj.io/skip-reconcile; a value of None removes the field (restoring "not set").

Deployments and StatefulSets: the patch goes to their `scale` subresource, so it carries
`spec.replicas` and the `resourceVersion` only (the Scale object's version is its parent's, so the
guard holds there too); scalebot writes nothing else on them. Pure. A patch names only the
fields scalebot owns (never the whole annotation map, so other writers' annotations survive,
engine-semantics §7 GitOps) and carries the `resourceVersion` the decision was made on, so it
applies only to the object as it was read (409 otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.workloads.model import (
    ARGOCD_SKIP_RECONCILE_ANNOTATION,
    KEDA_PAUSED_ANNOTATION,
    FieldValue,
    Kind,
    WorkloadInfo,
)

Patch = Mapping[str, Any]
_REPLICA_KINDS = (Kind.DEPLOYMENT, Kind.STATEFULSET)


def merge_patch(workload: WorkloadInfo, value: FieldValue, annotations: Mapping[str, str | None]) -> Patch:
    """A JSON merge patch setting this kind's field to `value` and the given annotations (None removes).

    It names only the fields scalebot owns, never the whole annotation map, so other writers'
    annotations survive; `resourceVersion` makes it apply only to the object we decided on.
    """
    metadata: dict[str, Any] = {"annotations": dict(annotations)}
    body: dict[str, Any] = {}
    if workload.kind in _REPLICA_KINDS:
        # The scale subresource holds no annotations: a caller asking for them here is a bug.
        assert not annotations, f"annotations cannot go through {workload.key}'s scale subresource"
        body["spec"] = {"replicas": value}
    elif workload.kind in (Kind.CRONJOB, Kind.KUSTOMIZATION, Kind.HELMRELEASE):
        body["spec"] = {"suspend": value}  # None (a Flux owner's "not set") removes the field
    elif workload.kind is Kind.APPLICATION:
        metadata["annotations"][ARGOCD_SKIP_RECONCILE_ANNOTATION] = value
    else:
        metadata["annotations"][KEDA_PAUSED_ANNOTATION] = value
    return {"metadata": _with_version(metadata, workload), **body}


def cleanup_patch(workload: WorkloadInfo, annotations: Mapping[str, None]) -> Patch | None:
    if not annotations:
        return None
    return {"metadata": _with_version({"annotations": dict(annotations)}, workload)}


def _with_version(metadata: dict[str, Any], workload: WorkloadInfo) -> dict[str, Any]:
    if not metadata.get("annotations"):
        metadata.pop("annotations", None)
    if workload.resource_version:
        metadata["resourceVersion"] = workload.resource_version
    return metadata

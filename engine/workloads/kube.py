"""The real WorkloadApi adapter: Deployments, StatefulSets, CronJobs, HPAs and KEDA ScaledObjects.

Owns the per-kind endpoints of the official client and nothing else. Every request goes through
the engine's `KubeClient` plumbing (`read_json`, `list_raw`), so answers are parsed from raw JSON
(`_preload_content=False` + orjson, never the generated models), lists are paginated, the client
rate limit and request counts apply, and every failure is already an `engine.kube.errors` type.
Writes are JSON merge patches under field manager "scalebot": replicas through the `scale`
subresource (scalebot has no patch on Deployments and StatefulSets themselves), and the originals
to scalebot's own ConfigMap `scalebot-workloads`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes import client as k8s

from engine.kube import errors
from engine.kube.client import JSON_MERGE_PATCH, KubeClient
from engine.workloads.model import (
    FIELD_MANAGER,
    KEDA_GROUP,
    KEDA_VERSION,
    ORIGINALS_CONFIGMAP,
    HpaInfo,
    Kind,
    NamespaceInfo,
    WorkloadInfo,
)

SCALEDOBJECTS = "scaledobjects"
GITOPS_RESOURCES: Mapping[Kind, tuple[str, str, str]] = {
    Kind.APPLICATION: ("argoproj.io", "v1alpha1", "applications"),
    Kind.KUSTOMIZATION: ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
    Kind.HELMRELEASE: ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
}
"""GitOps owners: (group, version, plural). Listed only when a workload names one; a cluster
without the CRD answers 404, which means no such owners."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    resource: str
    list_all: Callable[..., Any]
    read: Callable[..., Any]
    patch: Callable[..., Any]
    """Deployments and StatefulSets: the `scale` subresource's patch."""


class KubeWorkloadApi:
    def __init__(self, kube: KubeClient) -> None:
        # KubeClient's `read_json` and `list_raw` are the one place that maps ApiException to
        # engine.kube.errors, applies the rate limit and counts requests, and parses raw JSON lists.
        self._kube = kube
        api_client = kube.api_client
        apps, batch = k8s.AppsV1Api(api_client), k8s.BatchV1Api(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._autoscaling = k8s.AutoscalingV2Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._endpoints = {
            Kind.DEPLOYMENT: _Endpoint(
                "deployments",
                apps.list_deployment_for_all_namespaces,
                apps.read_namespaced_deployment,
                apps.patch_namespaced_deployment_scale,
            ),
            Kind.STATEFULSET: _Endpoint(
                "statefulsets",
                apps.list_stateful_set_for_all_namespaces,
                apps.read_namespaced_stateful_set,
                apps.patch_namespaced_stateful_set_scale,
            ),
            Kind.CRONJOB: _Endpoint(
                "cronjobs",
                batch.list_cron_job_for_all_namespaces,
                batch.read_namespaced_cron_job,
                batch.patch_namespaced_cron_job,
            ),
            Kind.SCALEDOBJECT: _Endpoint(
                SCALEDOBJECTS,
                partial(
                    self._custom.list_cluster_custom_object,
                    group=KEDA_GROUP,
                    version=KEDA_VERSION,
                    plural=SCALEDOBJECTS,
                ),
                partial(
                    self._custom.get_namespaced_custom_object,
                    group=KEDA_GROUP,
                    version=KEDA_VERSION,
                    plural=SCALEDOBJECTS,
                ),
                partial(
                    self._custom.patch_namespaced_custom_object,
                    group=KEDA_GROUP,
                    version=KEDA_VERSION,
                    plural=SCALEDOBJECTS,
                ),
            ),
        }
        for kind, (group, version, plural) in GITOPS_RESOURCES.items():
            where = {"group": group, "version": version, "plural": plural}
            self._endpoints[kind] = _Endpoint(
                plural,
                partial(self._custom.list_cluster_custom_object, **where),
                partial(self._custom.get_namespaced_custom_object, **where),
                partial(self._custom.patch_namespaced_custom_object, **where),
            )

    def list_namespaces(self) -> list[NamespaceInfo]:
        return self._kube.list_raw("namespaces", self._core.list_namespace, NamespaceInfo.from_raw)

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        endpoint = self._endpoints[kind]
        try:
            return self._kube.list_raw(
                endpoint.resource, endpoint.list_all, partial(WorkloadInfo.from_raw, kind)
            )
        except errors.NotFound:
            if kind in GITOPS_RESOURCES:
                return []  # the GitOps tool is not installed
            raise

    def list_hpas(self) -> list[HpaInfo]:
        call = self._autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces
        return self._kube.list_raw("horizontalpodautoscalers", call, HpaInfo.from_raw)

    def has_keda(self) -> bool:
        try:
            raw = self._kube.read_json(
                "get", "discovery", self._custom.get_api_resources, group=KEDA_GROUP, version=KEDA_VERSION
            )
        except errors.NotFound:
            return False
        return any(r.get("name") == SCALEDOBJECTS for r in raw.get("resources") or ())

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        endpoint = self._endpoints[kind]
        raw = self._kube.read_json("get", endpoint.resource, endpoint.read, name=name, namespace=namespace)
        return WorkloadInfo.from_raw(kind, raw)

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        endpoint = self._endpoints[kind]
        resource = (
            f"{endpoint.resource}/scale" if kind in (Kind.DEPLOYMENT, Kind.STATEFULSET) else endpoint.resource
        )
        self._kube.read_json(
            "patch",
            resource,
            endpoint.patch,
            name=name,
            namespace=namespace,
            body=dict(patch),
            field_manager=FIELD_MANAGER,
            _content_type=JSON_MERGE_PATCH,
        )

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        try:
            raw = self._kube.read_json(
                "get",
                "configmaps",
                self._core.read_namespaced_config_map,
                name=ORIGINALS_CONFIGMAP,
                namespace=namespace,
            )
        except errors.NotFound:
            return {}
        return dict(raw.get("data") or {})

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        # A merge patch of `data` touches only these keys, so concurrent writers of other keys are
        # safe without a resourceVersion guard. Absent: create it; a lost create race patches.
        created = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": ORIGINALS_CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "scalebot"}},
            "data": {k: v for k, v in changes.items() if v is not None},
        }
        for _ in range(2):
            try:
                self._write_configmap(
                    "patch",
                    self._core.patch_namespaced_config_map,
                    namespace,
                    name=ORIGINALS_CONFIGMAP,
                    body={"data": dict(changes)},
                    _content_type=JSON_MERGE_PATCH,
                )
                return
            except errors.NotFound:
                pass
            try:
                self._write_configmap(
                    "create", self._core.create_namespaced_config_map, namespace, body=created
                )
                return
            except errors.Conflict:
                continue  # created by another writer meanwhile: patch it
        raise errors.Conflict(status=409, message=f"ConfigMap {ORIGINALS_CONFIGMAP} kept changing; try again")

    def _write_configmap(self, verb: str, call: Callable[..., Any], namespace: str, **kwargs: Any) -> None:
        self._kube.read_json(
            verb, "configmaps", call, namespace=namespace, field_manager=FIELD_MANAGER, **kwargs
        )

"""The WorkloadApi port: every Kubernetes call the workload scaler makes, and nothing else.

`engine.workloads.kube.KubeWorkloadApi` implements it over the engine's `KubeClient` (raw JSON,
rate limit, request counts, errors translated into `engine.kube.errors`). Failures raise that
hierarchy, never a client-library exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from engine.workloads.model import HpaInfo, Kind, NamespaceInfo, WorkloadInfo


class WorkloadApi(Protocol):
    def list_namespaces(self) -> list[NamespaceInfo]: ...

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        """Every object of `kind` in the cluster, in one paginated listing."""
        ...

    def list_hpas(self) -> list[HpaInfo]: ...

    def has_keda(self) -> bool:
        """Whether keda.sh/v1alpha1 ScaledObjects are served (a discovery call); False on 404."""
        ...

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        """Raises NotFound when the object is gone."""
        ...

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Send a JSON merge patch as field manager "scalebot"; Conflict when its resourceVersion is stale.

        Deployments and StatefulSets: to their `scale` subresource (the patch holds only replicas).
        """
        ...

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        """The data of scalebot's ConfigMap `scalebot-workloads` in `namespace`; empty when absent."""
        ...

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        """Set (or, for None, remove) these keys of that ConfigMap, creating it if needed."""
        ...

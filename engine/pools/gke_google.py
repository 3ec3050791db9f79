"""The Google Cloud adapter of the GKE provider: `NodePoolApi` over google-cloud-container (node
pools, GKE operations) and google-cloud-compute (managed instance groups, zone operations).

Credentials are Application Default Credentials (`google.auth.default`): on GKE, Workload Identity
(the metadata server answers for the pod's Kubernetes ServiceAccount); elsewhere
GOOGLE_APPLICATION_CREDENTIALS or gcloud's. Both clients use the REST transport. `endpoint_url`
sends both to another endpoint: for tests against a local stand-in only.

Errors, each in one line with Google's own status: 429 (rate limits, not quota), 5xx and connection
failures become `engine.kube.errors.TransportError` (the runner retries a step on it, as Google's
guidance retries them with backoff); a change refused because another operation holds the cluster
(FAILED_PRECONDITION, or reason CLUSTER_ALREADY_HAS_OPERATION) is `CloudBusy` (the provider waits
and tries again); 403 names the IAM permission the call needs; quota is not retried.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.cloud import container_v1
from google.cloud.compute_v1.services.instance_group_managers import InstanceGroupManagersClient
from google.cloud.compute_v1.services.zone_operations import ZoneOperationsClient

from engine.domain.errors import Category, ScalebotError
from engine.kube import errors
from engine.pools.cloud import CloudBusy
from engine.pools.gke import (
    Autoscaling,
    GkeNodePool,
    InstanceGroup,
    ManagedInstance,
    NodePoolNotFound,
    OperationState,
    zone_of,
)

PERMISSIONS = {
    "nodePools.list": "container.clusters.get",
    "nodePools.get": "container.clusters.get",
    "nodePools.setSize": "container.clusters.update",
    "nodePools.setAutoscaling": "container.clusters.update",
    "operations.get": "container.operations.get",
    "instanceGroupManagers.get": "compute.instanceGroupManagers.get",
    "instanceGroupManagers.listManagedInstances": "compute.instanceGroupManagers.get",
    "instanceGroupManagers.deleteInstances": "compute.instanceGroupManagers.update",
    "zoneOperations.get": "compute.zoneOperations.get",
}
BUSY_REASONS = frozenset({"CLUSTER_ALREADY_HAS_OPERATION", "failedPrecondition"})
_POLICIES = {"BALANCED": 1, "ANY": 2}


class GcpCallError(ScalebotError, RuntimeError):
    """A Google Cloud call that failed for a reason a retry does not fix; the message says why."""

    category = Category.CONFIGURATION


class GoogleNodePools:
    """NodePoolApi for the GKE cluster `projects/<project>/locations/<location>/clusters/<cluster>`."""

    def __init__(
        self,
        project: str,
        location: str,
        cluster: str,
        *,
        endpoint_url: str | None = None,
        credentials: Any = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.cluster = f"projects/{project}/locations/{location}/clusters/{cluster}"
        self.project = project
        self._location = f"projects/{project}/locations/{location}"
        self._timeout = timeout_seconds
        options = ClientOptions(api_endpoint=endpoint_url) if endpoint_url else None
        try:
            self._gke = container_v1.ClusterManagerClient(
                transport="rest", credentials=credentials, client_options=options
            )
            self._groups = InstanceGroupManagersClient(
                transport="rest", credentials=credentials, client_options=options
            )
            self._zone_ops = ZoneOperationsClient(
                transport="rest", credentials=credentials, client_options=options
            )
        except auth_exceptions.DefaultCredentialsError as exc:
            raise GcpCallError(
                f"no Google Cloud credentials (Application Default Credentials): {exc}"
            ) from None

    # -- GKE ---------------------------------------------------------------------------------------

    def list_node_pools(self) -> list[str]:
        answer = self._call("nodePools.list", self._gke.list_node_pools, request={"parent": self.cluster})
        return [str(p.name) for p in answer.node_pools]

    def get_node_pool(self, name: str) -> GkeNodePool:
        try:
            raw = self._call("nodePools.get", self._gke.get_node_pool, request={"name": self._pool(name)})
        except _NotFound:
            raise NodePoolNotFound(name) from None
        scaling = raw.autoscaling
        total = bool(scaling.total_min_node_count or scaling.total_max_node_count)
        policy = scaling.location_policy
        return GkeNodePool(
            name=str(raw.name),
            status=_enum_name(raw.status),
            autoscaling=Autoscaling(
                enabled=bool(scaling.enabled),
                min_nodes=int(scaling.total_min_node_count if total else scaling.min_node_count),
                max_nodes=int(scaling.total_max_node_count if total else scaling.max_node_count),
                total=total,
                location_policy="" if not int(policy) else _enum_name(policy),
            ),
            instance_groups=tuple(str(u) for u in raw.instance_group_urls),
            status_message=str(raw.status_message or ""),
        )

    def set_size(self, name: str, per_zone: int) -> str:
        request = {"name": self._pool(name), "node_count": per_zone}
        answer = self._call("nodePools.setSize", self._gke.set_node_pool_size, request=request)
        return str(answer.name)

    def set_autoscaling(self, name: str, autoscaling: Autoscaling) -> str:
        body: dict[str, Any] = {"enabled": autoscaling.enabled}
        if autoscaling.enabled:
            if autoscaling.total:
                body["total_min_node_count"] = autoscaling.min_nodes
                body["total_max_node_count"] = autoscaling.max_nodes
            else:
                body["min_node_count"] = autoscaling.min_nodes
                body["max_node_count"] = autoscaling.max_nodes
            if autoscaling.location_policy in _POLICIES:
                body["location_policy"] = _POLICIES[autoscaling.location_policy]
        request = {"name": self._pool(name), "autoscaling": body}
        answer = self._call("nodePools.setAutoscaling", self._gke.set_node_pool_autoscaling, request=request)
        return str(answer.name)

    def operation(self, name: str) -> OperationState:
        full = name if name.startswith("projects/") else f"{self._location}/operations/{name}"
        raw = self._call("operations.get", self._gke.get_operation, request={"name": full})
        error = ""
        if raw.error and (raw.error.code or raw.error.message):
            error = f"{_rpc_code(int(raw.error.code))}: {' '.join(str(raw.error.message).split())}"
        elif raw.status_message:
            error = " ".join(str(raw.status_message).split())
        return OperationState(str(raw.name or name), _enum_name(raw.status) == "DONE", error)

    # -- Compute Engine ----------------------------------------------------------------------------

    def instance_group(self, url: str) -> InstanceGroup:
        project, zone, group = _group_ref(url)
        raw = self._call(
            "instanceGroupManagers.get",
            self._groups.get,
            project=project,
            zone=zone,
            instance_group_manager=group,
        )
        pager = self._call(
            "instanceGroupManagers.listManagedInstances",
            self._groups.list_managed_instances,
            project=project,
            zone=zone,
            instance_group_manager=group,
        )
        instances = tuple(
            ManagedInstance(
                name=str(i.name or str(i.instance).rsplit("/", 1)[-1]),
                url=str(i.instance),
                action=str(i.current_action or "NONE"),
                status=str(i.instance_status or ""),
            )
            for i in self._call("instanceGroupManagers.listManagedInstances", lambda: list(pager))
        )
        return InstanceGroup(url=url, zone=zone, target_size=int(raw.target_size), instances=instances)

    def delete_instances(self, group_url: str, instance_urls: Sequence[str]) -> str:
        project, zone, group = _group_ref(group_url)
        answer = self._call(
            "instanceGroupManagers.deleteInstances",
            self._groups.delete_instances_unary,
            project=project,
            zone=zone,
            instance_group_manager=group,
            instance_group_managers_delete_instances_request_resource={
                "instances": list(instance_urls),
                # As cluster-autoscaler: an instance already gone does not fail the others.
                "skip_instances_on_validation_error": True,
            },
        )
        return str(answer.name)

    def zone_operation(self, group_url: str, name: str) -> OperationState:
        project, zone, _ = _group_ref(group_url)
        raw = self._call("zoneOperations.get", self._zone_ops.get, project=project, zone=zone, operation=name)
        problems = "; ".join(f"{e.code}: {' '.join(str(e.message).split())}" for e in raw.error.errors)
        if not problems and raw.http_error_status_code:
            problems = f"HTTP {raw.http_error_status_code}: {raw.http_error_message}"
        return OperationState(str(raw.name or name), _enum_name(raw.status) == "DONE", problems)

    # -- plumbing ----------------------------------------------------------------------------------

    def _pool(self, name: str) -> str:
        return f"{self.cluster}/nodePools/{name}"

    def _call(self, operation: str, method: Callable[..., Any], /, **kwargs: Any) -> Any:
        try:
            return method(timeout=self._timeout, **kwargs) if kwargs else method()
        except gexc.GoogleAPICallError as exc:
            raise _translate(operation, exc, self.cluster) from exc
        except auth_exceptions.DefaultCredentialsError as exc:
            raise GcpCallError(
                f"{operation}: no Google Cloud credentials (Workload Identity, "
                f"GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default login): {exc}"
            ) from None
        except auth_exceptions.RefreshError as exc:
            raise GcpCallError(f"{operation}: Google Cloud credentials refused: {exc}") from None
        except (auth_exceptions.TransportError, gexc.RetryError, OSError) as exc:
            raise errors.TransportError(message=f"Google Cloud {operation}: {exc}") from exc


class _NotFound(GcpCallError):
    pass


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value) or "")


def _rpc_code(code: int) -> str:
    names = {
        1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
        6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
        10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
        16: "UNAUTHENTICATED",
    }  # fmt: skip
    return names.get(code, str(code))


def _group_ref(url: str) -> tuple[str, str, str]:
    """(project, zone, group) of `.../projects/<p>/zones/<z>/instanceGroupManagers/<g>`."""
    parts = url.rstrip("/").split("/")
    try:
        project = parts[parts.index("projects") + 1]
    except (ValueError, IndexError):
        raise GcpCallError(f"not a managed instance group URL: {url}") from None
    return project, zone_of(url), parts[-1]


def _status_of(exc: gexc.GoogleAPICallError) -> str:
    """Google's canonical status in the error body (FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ...)."""
    response = exc.response
    try:
        body = response.json() if response is not None and hasattr(response, "json") else {}
    except ValueError:
        body = {}
    return str(((body or {}).get("error") or {}).get("status") or "") if isinstance(body, dict) else ""


def _translate(operation: str, exc: gexc.GoogleAPICallError, cluster: str) -> Exception:
    status = _status_of(exc)
    code = int(exc.code or 0)
    reason = str(exc.reason or "")
    reasons = {reason} | {str(e.get("reason") or "") for e in exc.errors if isinstance(e, dict)}
    # The REST transport prefixes "<METHOD> <URL>: ": the URL says nothing the operation does not.
    message = re.sub(r"^[A-Z]+ \S+: ", "", " ".join(str(exc.message or "").split()))
    where = cluster.rsplit("/", 1)[-1]
    quota = status == "RESOURCE_EXHAUSTED" or any("quota" in r.lower() for r in reasons)
    label = status or f"HTTP {code}"
    if quota and not {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"} & reasons:
        return GcpCallError(f"{operation} (GKE cluster {where}): quota exceeded: {label}: {message}")
    if code == 429 or code >= 500:
        return errors.TransportError(message=f"Google Cloud {operation}: {label}: {message}")
    if status in ("FAILED_PRECONDITION", "ABORTED") or BUSY_REASONS & reasons or code == 409:
        return CloudBusy(f"{operation}: {label}: {message}")
    if code == 404:
        return _NotFound(f"{operation} (GKE cluster {where}): {label}: {message}")
    if code in (401, 403):
        return GcpCallError(
            f"{operation} denied for GKE cluster {where}: scalebot's Google service account needs "
            f"{PERMISSIONS.get(operation, operation)} ({label}: {message})"
        )
    return GcpCallError(f"{operation} (GKE cluster {where}): {label}: {message}")

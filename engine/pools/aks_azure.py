"""The Azure adapter of the AKS provider: `AgentPoolApi` over azure-mgmt-containerservice.

Credentials are `DefaultAzureCredential`: on AKS, workload identity (the webhook injects
AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE into pods labelled
`azure.workload.identity/use: "true"`), else a managed identity, a service principal in the
environment, or the Azure CLI's login. `endpoint_url` sends the calls to another Azure Resource
Manager endpoint: for tests against a local stand-in only.

Errors, each in one line with Azure's own code: 429, 5xx and connection failures become
`engine.kube.errors.TransportError` (the runner retries the step, as Azure's guidance retries
them); 409 `OperationNotAllowed` ("Another operation ... is in progress") is `CloudBusy` (the
provider waits and tries again); 403 `AuthorizationFailed` names the action the role needs; a
long-running operation that ends Failed (e.g. `QuotaExceeded`) is not retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import DefaultAzureCredential
from azure.mgmt.containerservice import ContainerServiceClient, models

from engine.domain.errors import Category, ScalebotError
from engine.kube import errors
from engine.pools.aks import AgentPool, AgentPoolNotFound, Autoscaler, ClusterPower
from engine.pools.cloud import CloudBusy, CloudOperationError, CloudOperationTimeout

_CLUSTERS = "Microsoft.ContainerService/managedClusters"
_POOLS = f"{_CLUSTERS}/agentPools"
ACTIONS = {
    "managedClusters.get": f"{_CLUSTERS}/read",
    "managedClusters.stop": f"{_CLUSTERS}/stop/action",
    "managedClusters.start": f"{_CLUSTERS}/start/action",
    "agentPools.list": f"{_POOLS}/read",
    "agentPools.get": f"{_POOLS}/read",
    "agentPools.createOrUpdate": f"{_POOLS}/write",
    "agentPools.deleteMachines": f"{_POOLS}/deleteMachines/action",
}
BUSY_CODES = frozenset({"OperationNotAllowed", "AnotherOperationInProgress", "Conflict"})
DEFAULT_POLL_SECONDS = 5.0


class AzureCallError(ScalebotError, RuntimeError):
    """An Azure call that failed for a reason a retry does not fix; the message says why."""

    category = Category.CONFIGURATION


class AzureAgentPools:
    """AgentPoolApi for the AKS cluster `cluster` in `resource_group` of `subscription`."""

    def __init__(
        self,
        subscription: str,
        resource_group: str,
        cluster: str,
        *,
        endpoint_url: str | None = None,
        credential: Any = None,
        poll_seconds: float | None = None,
    ) -> None:
        self.cluster = cluster
        self._group = resource_group
        # Between polls of an operation when Azure sends no Retry-After (the SDK's default: 30 s).
        kwargs: dict[str, Any] = {
            "polling_interval": DEFAULT_POLL_SECONDS if poll_seconds is None else poll_seconds
        }
        if endpoint_url:
            kwargs["base_url"] = endpoint_url
        self._client = ContainerServiceClient(credential or DefaultAzureCredential(), subscription, **kwargs)

    def list_agent_pools(self) -> list[str]:
        pools = self._call(
            "agentPools.list", lambda: list(self._client.agent_pools.list(self._group, self.cluster))
        )
        return [str(p.name) for p in pools]

    def get_agent_pool(self, name: str) -> AgentPool:
        try:
            raw = self._raw(name)
        except _NotFound:
            raise AgentPoolNotFound(name) from None
        props = raw.get("properties") or {}
        enabled = bool(props.get("enableAutoScaling"))
        return AgentPool(
            name=str(raw.get("name") or name),
            mode=str(props.get("mode") or "User"),
            count=int(props.get("count") or 0),
            autoscaler=Autoscaler(
                enabled,
                int(props.get("minCount") or 0) if enabled else 0,
                int(props.get("maxCount") or 0) if enabled else 0,
            ),
            state=str(props.get("provisioningState") or ""),
            power=str((props.get("powerState") or {}).get("code") or "Running"),
        )

    def scale(self, name: str, count: int, autoscaler: Autoscaler, *, timeout: float) -> None:
        # As `az aks nodepool scale`: the agent pool as it is, with count and autoscaler changed.
        body = self._raw(name, writable=True)
        props = body.setdefault("properties", {})
        props["count"] = count
        props["enableAutoScaling"] = autoscaler.enabled
        if autoscaler.enabled:
            props["minCount"], props["maxCount"] = autoscaler.min_count, autoscaler.max_count
        else:
            props.pop("minCount", None)
            props.pop("maxCount", None)
        poller = self._call(
            "agentPools.createOrUpdate",
            lambda: self._client.agent_pools.begin_create_or_update(
                self._group, self.cluster, name, models.AgentPool(body)
            ),
        )
        self._wait(
            "agentPools.createOrUpdate", poller, timeout, f"agent pool {name}: count {count}, {autoscaler}"
        )

    def delete_machines(self, name: str, machines: Sequence[str], *, timeout: float) -> None:
        body = models.AgentPoolDeleteMachinesParameter(machine_names=list(machines))
        poller = self._call(
            "agentPools.deleteMachines",
            lambda: self._client.agent_pools.begin_delete_machines(self._group, self.cluster, name, body),
        )
        self._wait("agentPools.deleteMachines", poller, timeout, f"agent pool {name}: deleteMachines")

    def cluster_power(self) -> ClusterPower:
        cluster = self._call(
            "managedClusters.get", lambda: self._client.managed_clusters.get(self._group, self.cluster)
        )
        props = cluster.as_dict().get("properties") or {}
        return ClusterPower(
            code=str((props.get("powerState") or {}).get("code") or "Running"),
            state=str(props.get("provisioningState") or ""),
        )

    def stop_cluster(self, *, timeout: float) -> None:
        poller = self._call(
            "managedClusters.stop",
            lambda: self._client.managed_clusters.begin_stop(self._group, self.cluster),
        )
        self._wait("managedClusters.stop", poller, timeout, f"AKS cluster {self.cluster}: stop")

    def start_cluster(self, *, timeout: float) -> None:
        poller = self._call(
            "managedClusters.start",
            lambda: self._client.managed_clusters.begin_start(self._group, self.cluster),
        )
        self._wait("managedClusters.start", poller, timeout, f"AKS cluster {self.cluster}: start")

    def _raw(self, name: str, *, writable: bool = False) -> dict[str, Any]:
        model = self._call(
            "agentPools.get", lambda: self._client.agent_pools.get(self._group, self.cluster, name)
        )
        raw: dict[str, Any] = model.as_dict(exclude_readonly=writable)
        return raw

    def _wait(self, operation: str, poller: Any, timeout: float, what: str) -> None:
        try:
            poller.wait(timeout)
            if not poller.done():
                raise CloudOperationTimeout(f"{what}: not finished after {timeout:.0f} s")
            poller.result()
        except HttpResponseError as exc:
            if int(exc.status_code or 0) == 429 or int(exc.status_code or 0) >= 500:
                raise errors.TransportError(message=f"Azure {operation}: {_one_line(exc)}") from exc
            raise CloudOperationError(f"{what}: the Azure operation failed: {_one_line(exc)}") from None
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise errors.TransportError(message=f"Azure {operation}: {exc}") from exc

    def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ClientAuthenticationError as exc:
            raise AzureCallError(f"{operation}: Azure credentials refused: {_one_line(exc)}") from None
        except HttpResponseError as exc:
            raise _translate(operation, exc, self.cluster) from exc
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise errors.TransportError(message=f"Azure {operation}: {exc}") from exc


class _NotFound(AzureCallError):
    pass


def _code(exc: HttpResponseError) -> str:
    return str(getattr(exc.error, "code", "") or "") if exc.error is not None else ""


def _one_line(exc: HttpResponseError) -> str:
    code = _code(exc)
    message = str(getattr(exc.error, "message", "") or "") if exc.error is not None else ""
    text = " ".join((message or str(exc.message or exc)).split())
    return f"{code}: {text}" if code else text


def _translate(operation: str, exc: HttpResponseError, cluster: str) -> Exception:
    status = int(exc.status_code or 0)
    code = _code(exc)
    line = _one_line(exc)
    if status == 429 or status >= 500:
        return errors.TransportError(message=f"Azure {operation}: {line}")
    if status == 409 or code in BUSY_CODES:
        return CloudBusy(f"{operation}: {line}")
    if isinstance(exc, ResourceNotFoundError) or status == 404:
        return _NotFound(f"{operation} (AKS cluster {cluster}): {line}")
    if status == 403:
        return AzureCallError(
            f"{operation} denied for AKS cluster {cluster}: scalebot's identity needs "
            f"{ACTIONS.get(operation, operation)} ({line})"
        )
    return AzureCallError(f"{operation} (AKS cluster {cluster}): {line}")

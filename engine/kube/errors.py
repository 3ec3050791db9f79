"""Errors from the Kubernetes API, translated once at the adapter.

The adapter (`engine.kube.transport`) turns every `ApiException` or transport failure into one of
these, chaining the original, so the rest of the engine never depends on the HTTP library:

    KubeError
    ├── NotFound            404
    ├── Conflict            409 (e.g. a UID precondition: the pod name now belongs to a new pod)
    ├── Forbidden           403 (RBAC, a terminating namespace, a negative PDB allowance)
    ├── TooManyRequests     429 (a PodDisruptionBudget, or API Priority and Fairness)
    ├── ServerError         5xx (500 for a pod under two PDBs, 504 for PDB update conflicts)
    ├── InvalidRequest      other 4xx (400, 422): the request itself is wrong
    └── TransportError      no HTTP answer at all: never read as "the pod is gone"

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.domain.errors import Category, OutsideFault, ScalebotError

DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"
MULTIPLE_PDBS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
TERMINATING_NAMESPACE_KEY = (
    "Cannot evict pod from terminating namespace: "
    "unable to create eviction (kube-controller-manager should set deletionTimestamp)"
)
STILL_PROCESSING_FRAGMENT = "is still being processed by the server"


@dataclass(frozen=True, slots=True)
class Cause:
    type: str = ""
    message: str = ""
    field: str = ""


@dataclass(eq=False)
class KubeError(ScalebotError):
    """A failed API call, with the server's Status fields (empty for transport errors)."""

    category = Category.CLUSTER

    status: int = 0
    message: str = ""
    reason: str = ""
    causes: tuple[Cause, ...] = ()
    retry_after_seconds: int | None = None
    has_details: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message or f"HTTP {self.status}")

    def __str__(self) -> str:
        return self.message or f"HTTP {self.status} {self.reason}".strip()

    @property
    def eviction_key(self) -> str:
        """The grouping key Cluster API builds for this eviction failure (its `EvictPods`).

        A 429 is the Status message, a space and the cause messages joined with ","; a 403 for a
        terminating namespace is a fixed sentence; anything else is the Status message.
        """
        if self.status == 429 and self.has_details:
            return f"{self.message} {','.join(c.message for c in self.causes)}"
        if self.is_namespace_terminating:
            return TERMINATING_NAMESPACE_KEY
        return str(self)

    @property
    def is_namespace_terminating(self) -> bool:
        return any(c.type == NAMESPACE_TERMINATING_CAUSE for c in self.causes)

    @property
    def is_pdb_violation(self) -> bool:
        """A 429 because a budget allows no disruption now (not "still being processed")."""
        return self.status == 429 and any(
            c.type == DISRUPTION_BUDGET_CAUSE and STILL_PROCESSING_FRAGMENT not in c.message
            for c in self.causes
        )

    @property
    def is_pdb_transient(self) -> bool:
        return self.status == 429 and any(
            c.type == DISRUPTION_BUDGET_CAUSE and STILL_PROCESSING_FRAGMENT in c.message for c in self.causes
        )

    @property
    def is_multiple_pdbs(self) -> bool:
        return self.status == 500 and self.message.startswith(MULTIPLE_PDBS_MESSAGE)

    @property
    def is_server_overload(self) -> bool:
        """The server (not a budget) says it has too much to do: a 429 of API Priority and Fairness
        or any 5xx but the two-budgets refusal. What adaptive concurrency backs off on."""
        if self.status == 429:
            return not any(c.type == DISRUPTION_BUDGET_CAUSE for c in self.causes)
        return self.status >= 500 and not self.is_multiple_pdbs


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Forbidden(KubeError):
    outside_fault = OutsideFault.FORBIDDEN


class TooManyRequests(KubeError):
    category = Category.TRANSIENT


class ServerError(KubeError):
    category = Category.TRANSIENT


class InvalidRequest(KubeError):
    pass


class TransportError(KubeError):
    category = Category.TRANSIENT
    outside_fault = OutsideFault.API_UNREACHABLE


def error_from_status(status: int, body: Mapping[str, Any] | None) -> KubeError:
    """Build the right subclass from an HTTP status and a `Status` JSON body (possibly empty)."""
    body = body or {}
    details = body.get("details")
    causes = tuple(
        Cause(type=c.get("reason", ""), message=c.get("message", ""), field=c.get("field", ""))
        for c in (details or {}).get("causes") or ()
    )
    retry_after = (details or {}).get("retryAfterSeconds")
    cls: type[KubeError]
    if status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status == 403:
        cls = Forbidden
    elif status == 429:
        cls = TooManyRequests
    elif status >= 500:
        cls = ServerError
    else:
        cls = InvalidRequest
    return cls(
        status=status,
        message=str(body.get("message") or ""),
        reason=str(body.get("reason") or ""),
        causes=causes,
        retry_after_seconds=int(retry_after) if retry_after is not None else None,
        has_details=details is not None,
        raw=body,
    )

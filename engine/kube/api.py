"""The KubeApi port: every Kubernetes call the engine makes, and nothing else.

Two adapters implement it: `engine.kube.client.KubeClient` (the real API server, raw JSON for
large lists) and `engine.kube.fake.FakeCluster` (in memory, for unit tests and the simulated
mode). Failures raise the `engine.kube.errors` hierarchy, never a client-library exception.

Design rules the adapters follow:
- one list call per question (pods of many nodes come from one listing, filtered in memory);
- evictions and deletions carry a UID precondition, so a pod recreated under the same name
  (StatefulSet) is never touched by mistake;
- writes are idempotent where Kubernetes allows it (cordoning a cordoned node writes nothing).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from engine.domain.model import CordonResult, NodeInfo, PdbInfo, PodInfo


class KubeApi(Protocol):
    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        """All nodes, or those matching a label selector (`a=b,c in (d)`)."""
        ...

    def get_node(self, name: str) -> NodeInfo:
        """Raises NotFound for an unknown node."""
        ...

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        """Pods bound to the given nodes (all pods when None), in one listing."""
        ...

    def list_pdbs(self) -> list[PdbInfo]: ...

    def list_daemonset_keys(self) -> frozenset[str]:
        """`namespace/name` of every DaemonSet that exists (orphaned DaemonSet pods are evicted)."""
        ...

    def list_terminating_namespaces(self) -> frozenset[str]: ...

    def set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        """Cordon or uncordon; returns False (and writes nothing) when already in that state."""
        ...

    def set_taint(self, node: str, key: str, *, value: str, effect: str, present: bool) -> bool:
        """Add or remove one taint by key; returns False when nothing had to change."""
        ...

    def cordon(self, node: str, *, taint_key: str, taint_value: str, taint_effect: str) -> CordonResult:
        """Add the taint (an existing key+effect is kept as it is) and cordon, in ONE write.

        One read and at most one write per node: at scale the cordon of a thousand nodes is
        bounded by the client's rate limit, so four requests a node would cost a minute more.
        Both changes landing together also means no crash can leave one without the other.
        """
        ...

    def cordon_many(
        self,
        nodes: Collection[str],
        *,
        taint_key: str,
        taint_value: str,
        taint_effect: str,
        executor: Executor | None = None,
    ) -> dict[str, CordonResult]:
        """`cordon` of many nodes from ONE node listing: at most one write per node and no read
        per node, but on a conflict (someone else wrote the node since the listing: that node is
        read again, so their change is kept). Nodes that do not exist are absent from the answer.
        With an `executor` the writes go out concurrently (the client's rate limit still bounds them).
        """
        ...

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        """POST the policy/v1 Eviction with a UID precondition. Raises on anything but 2xx."""
        ...

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        """DELETE with a UID precondition (grace 0 for a force delete). Raises on anything but 2xx."""
        ...

    def delete_node(self, name: str) -> None: ...


@runtime_checkable
class RateLimitedApi(Protocol):
    """An adapter with a client-side rate limit: how many requests it lets go at once."""

    @property
    def burst(self) -> int | None:
        """The token bucket's size, or None when the client sends without a limit."""
        ...

    def last_wait_seconds(self) -> float:
        """How long the calling thread's last request waited for the client's own limiter."""
        ...


@runtime_checkable
class ServerDryRunApi(Protocol):
    """Evictions and deletions sent with `dryRun=All`: the API server checks budgets and admission
    and changes nothing (`scalebot drain --dry-run=server`). Only the real client implements it."""

    def dry_run_remove(self, pod: PodInfo, *, evict: bool, grace_seconds: int | None = None) -> None: ...


@runtime_checkable
class SchedulingApi(Protocol):
    """Pods as the scheduler model (engine.planning.placement) reads them: every pod's
    `PodInfo.scheduling` projected from the API server's whole object (nodes come from `list_nodes`).

    Only the real client implements it: the in-memory cluster keeps no scheduling fields, so
    consolidation and scale-up advice refuse it rather than plan on a partial picture.
    """

    def list_bound_pods(self) -> list[PodInfo]: ...

    def list_unbound_pods(self) -> list[PodInfo]: ...

    def list_deployment_names(self) -> list[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class PodListing:
    """Pods bound to some nodes, and the resourceVersion a watch resumes from to follow them."""

    pods: list[PodInfo]
    resource_version: str


PodEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class PodEvent:
    type: PodEventType
    pod: PodInfo | None
    """None for a BOOKMARK (it only moves the resourceVersion on)."""
    resource_version: str


class PodEventStream(Protocol):
    """The events of one watch request, in order, until the server ends it (its timeout).

    Iterating raises `errors.KubeError` with status 410 when the resourceVersion is too old
    (compacted), and `errors.TransportError` when the connection breaks. `close()` may be called
    from another thread: it ends the iteration.
    """

    def __iter__(self) -> Iterator[PodEvent]: ...

    def close(self) -> None: ...


@runtime_checkable
class PodWatchApi(Protocol):
    """A pod listing with its resourceVersion, and a watch that resumes from it.

    Only the real client implements it; the drain lists on every pass with any other adapter.
    """

    def list_pods_at(self, *, node_names: Collection[str] | None) -> PodListing:
        """Like `KubeApi.list_pods(node_names=...)`, with the listing's resourceVersion (None:
        every pod, bound or not)."""
        ...

    def watch_pods(self, *, node_names: Collection[str], resource_version: str) -> PodEventStream:
        """Start watching the pods bound to `node_names` (others may be filtered out late)."""
        ...

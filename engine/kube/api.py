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

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from engine.model import CordonResult, NodeInfo, PdbInfo, PodInfo, RawObject


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

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        """POST the policy/v1 Eviction with a UID precondition. Raises on anything but 2xx."""
        ...

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        """DELETE with a UID precondition (grace 0 for a force delete). Raises on anything but 2xx."""
        ...

    def delete_node(self, name: str) -> None: ...


@runtime_checkable
class SchedulingApi(Protocol):
    """Whole objects as the API server returns them, for the scheduler model (engine.placement).

    Only the real client implements it: the in-memory cluster keeps no scheduling fields, so
    consolidation and scale-up advice refuse it rather than plan on a partial picture.
    """

    def list_nodes_json(self) -> list[RawObject]: ...

    def list_bound_pods_json(self) -> list[RawObject]: ...

    def list_unbound_pods_json(self) -> list[RawObject]: ...

    def list_deployment_names(self) -> list[tuple[str, str]]: ...

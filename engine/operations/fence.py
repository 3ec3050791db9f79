"""Fenced Kubernetes writes: the ports a runner acts through, each write behind its claim.

A runner's database writes are fenced by its claim's token (`Store.fenced`), but its Kubernetes
writes go to another system that knows nothing of that token. So every mutating call the runner
makes (cordon, uncordon, taint, evict, delete, node removal, pool resize and restore records,
workload scaling) first runs the runner's `check`, which raises `Fenced` once another runner has
claimed the operation (or this instance may no longer act): a runner that lost its claim stops
before its next write, not at the end of the step under way. Reads go straight through.

`cordon_many` is one check for the whole batch (one listing, then the writes); every other write
is checked on its own, so a batch of evictions stops at the first one after the takeover. The
bound: a write already sent when the claim changes hands may still land (at most one per thread
writing for the operation); nothing is sent after the check that sees the new claim.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from engine.domain.model import CordonResult, NodeInfo, PdbInfo, PodInfo
from engine.kube.api import KubeApi
from engine.pools.base import Pool, PoolProvider, RestoreRecord
from engine.workloads.api import WorkloadApi
from engine.workloads.model import HpaInfo, Kind, NamespaceInfo, WorkloadInfo

FenceCheck = Callable[[], None]
"""Raises `engine.store.claims.Fenced` when the runner may no longer write; returns otherwise."""


class FencedKubeApi:
    """KubeApi whose writes run `check` first; optional read-only ports (watch, scheduling,
    rate limit) are the inner adapter's, so `isinstance` against them still answers truly."""

    def __init__(self, inner: KubeApi, check: FenceCheck) -> None:
        self._inner = inner
        self._check = check

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        return self._inner.list_nodes(label_selector=label_selector)

    def get_node(self, name: str) -> NodeInfo:
        return self._inner.get_node(name)

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        return self._inner.list_pods(node_names=node_names)

    def list_pdbs(self) -> list[PdbInfo]:
        return self._inner.list_pdbs()

    def list_daemonset_keys(self) -> frozenset[str]:
        return self._inner.list_daemonset_keys()

    def list_terminating_namespaces(self) -> frozenset[str]:
        return self._inner.list_terminating_namespaces()

    def set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        self._check()
        return self._inner.set_unschedulable(node, unschedulable)

    def set_taint(self, node: str, key: str, *, value: str, effect: str, present: bool) -> bool:
        self._check()
        return self._inner.set_taint(node, key, value=value, effect=effect, present=present)

    def cordon(self, node: str, *, taint_key: str, taint_value: str, taint_effect: str) -> CordonResult:
        self._check()
        return self._inner.cordon(
            node, taint_key=taint_key, taint_value=taint_value, taint_effect=taint_effect
        )

    def cordon_many(
        self,
        nodes: Collection[str],
        *,
        taint_key: str,
        taint_value: str,
        taint_effect: str,
        executor: Executor | None = None,
    ) -> dict[str, CordonResult]:
        self._check()
        return self._inner.cordon_many(
            nodes, taint_key=taint_key, taint_value=taint_value, taint_effect=taint_effect, executor=executor
        )

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        self._check()
        self._inner.evict_pod(pod, grace_seconds=grace_seconds)

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        self._check()
        self._inner.delete_pod(pod, grace_seconds=grace_seconds)

    def delete_node(self, name: str) -> None:
        self._check()
        self._inner.delete_node(name)


FENCED_EXTRAS = frozenset({"cancel_removal", "prepare_stop", "stop_cluster", "start_cluster"})
"""The optional providers' writes (TakesBackRemoval, StopsCluster): fenced when the inner has them."""


class FencedPools:
    """PoolProvider whose writes run `check` first; the optional ports' writes (`FENCED_EXTRAS`)
    are fenced when the inner provider has them, and their reads are the inner provider's."""

    def __init__(self, inner: PoolProvider, check: FenceCheck) -> None:
        self._inner = inner
        self._check = check
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name in FENCED_EXTRAS:
            return self._fenced(attribute)
        return attribute

    def _fenced(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._check()
            return write(*args, **kwargs)

        return call

    def list_pools(self) -> list[Pool]:
        return self._inner.list_pools()

    def get_pool(self, name: str) -> Pool:
        return self._inner.get_pool(name)

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        self._check()
        return self._inner.record_restore(pool, record)

    def clear_restore(self, pool: str) -> None:
        self._check()
        self._inner.clear_restore(pool)

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        self._check()
        self._inner.prepare_removal(pool, nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        self._check()
        self._inner.remove_nodes(pool, nodes)

    def set_size(self, pool: str, size: int) -> None:
        self._check()
        self._inner.set_size(pool, size)


class FencedWorkloadApi:
    """WorkloadApi whose writes (scaling patches, the recorded originals) run `check` first."""

    def __init__(self, inner: WorkloadApi, check: FenceCheck) -> None:
        self._inner = inner
        self._check = check

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_namespaces(self) -> list[NamespaceInfo]:
        return self._inner.list_namespaces()

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        return self._inner.list_workloads(kind)

    def list_hpas(self) -> list[HpaInfo]:
        return self._inner.list_hpas()

    def has_keda(self) -> bool:
        return self._inner.has_keda()

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        return self._inner.get_workload(kind, namespace, name)

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._check()
        self._inner.patch_workload(kind, namespace, name, patch)

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        return self._inner.read_originals(namespace)

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        self._check()
        self._inner.write_originals(namespace, changes)

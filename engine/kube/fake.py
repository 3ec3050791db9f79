"""An in-memory cluster implementing KubeApi, for unit tests and the built-in simulated mode.

Owns a small model of the API server's behaviour that the engine depends on: the eviction
subresource's answers (engine-semantics.md §1, mirrored from kubernetes
`pkg/registry/core/pod/storage/eviction.go`, in the same order of checks), UID preconditions,
graceful deletion and finalizers, cordoning, taints, and a ReplicaSet/StatefulSet-like
recreation of evicted pods. Errors are built from Status bodies shaped like the server's and go
through `errors.error_from_status`, so they look exactly like the real adapter's.

Time comes from an injected `now` (default: the cluster's own `FakeClock`). Pods whose
deletionTimestamp has passed and that carry no finalizers disappear at the start of every call,
or on `tick()`/`advance()`, as kwok's general pod-delete Stage does in the e2e cluster.

This is a model, not evidence of how Kubernetes behaves: the e2e suite is. Simplifications:
every Running pod counts as Ready; PodDisruptionBudgets have either a fixed allowance that only
evictions change or a `min_available` the allowance is recomputed from; one listing is one
request (no pagination); label selectors support `=`, `==`, `!=`, `in`, `notin`, `key`, `!key`.

One module over 600 lines on purpose: it is one model of one API server, and its checks (eviction,
preconditions, finalizers, recreation) all read and change the same objects and clock in `FakeCluster`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.domain.clock import FakeClock
from engine.domain.model import (
    DEFAULT_TERMINATION_GRACE_SECONDS,
    UNSCHEDULABLE_TAINT_KEY,
    CordonResult,
    LabelSelector,
    LabelSelectorRequirement,
    NodeInfo,
    OwnerRef,
    PdbInfo,
    PodInfo,
    Taint,
    parse_label_selector,
)
from engine.kube import errors

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
PDB_TOO_MANY_REQUESTS_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
PDB_RETRY_AFTER_SECONDS = 10
_CONTROLLER_API_VERSIONS = {
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "ReplicationController": "v1",
}
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the generator Kubernetes uses for pod names


@dataclasses.dataclass
class _Pdb:
    namespace: str
    name: str
    selector: LabelSelector
    allowed: int | None
    """Fixed allowance, decremented by evictions; None when computed from `min_available`."""
    min_available: int | None
    desired_healthy: int
    observed: bool

    def selects(self, pod: PodInfo) -> bool:
        # The eviction path's rule: an empty selector matches nothing.
        return (
            pod.namespace == self.namespace
            and not self.selector.is_empty
            and self.selector.matches(pod.labels)
        )


class FakeCluster:
    """KubeApi in memory. Thread-safe: every method holds one lock."""

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        self.clock: FakeClock | None = None
        if now is None:
            self.clock = FakeClock(DEFAULT_START)
            now = self.clock.now
        self._now = now
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[tuple[str, str], PodInfo] = {}
        self._pdbs: dict[tuple[str, str], _Pdb] = {}
        self._daemonsets: set[str] = set()
        self._terminating_namespaces: set[str] = set()
        self._recreate_on: dict[str, tuple[str, ...]] = {}
        """Pod UID → the nodes its controller may place a replacement on (consumed once)."""
        self._faults: list[tuple[str, str | None, errors.KubeError]] = []
        self._serial = itertools.count(1)
        self.request_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.on_change: Callable[[], None] | None = None
        """Called (with the lock held) after a call that changed the cluster, e.g. to persist it."""
        self._depth = 0
        self._dirty = False

    # -- populating (not counted as requests) --------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        ready: str = "True",
        unschedulable: bool = False,
        taints: Iterable[Taint] = (),
        cpu_allocatable_milli: int = 4000,
        memory_allocatable_bytes: int = 16 * 1024**3,
    ) -> NodeInfo:
        with self._guard():
            node = NodeInfo(
                name=name,
                uid=self._new_uid(),
                labels=dict(labels or {}),
                annotations=dict(annotations or {}),
                taints=tuple(taints),
                unschedulable=False,
                ready=ready,
                ready_reason=_ready_reason(ready),
                cpu_allocatable_milli=cpu_allocatable_milli,
                memory_allocatable_bytes=memory_allocatable_bytes,
                created_at=self._now(),
            )
            self._nodes[name] = _with_unschedulable(node, True) if unschedulable else node
            self._dirty = True
            return self._nodes[name]

    def set_node_ready(self, name: str, ready: str) -> None:
        """ "True", "False" or "Unknown" (the node stopped reporting)."""
        with self._guard():
            node = self._nodes[name]
            self._nodes[name] = dataclasses.replace(node, ready=ready, ready_reason=_ready_reason(ready))
            self._dirty = True

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        controller_kind: str | None = None,
        controller_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        empty_dir: bool = False,
        phase: str = "Running",
        grace: int = DEFAULT_TERMINATION_GRACE_SECONDS,
        priority_class: str = "",
        finalizers: Iterable[str] = (),
        recreate_on: Iterable[str] | None = None,
        cpu_request_milli: int = 0,
        memory_request_bytes: int = 0,
        unscheduled_reason: str = "",
    ) -> PodInfo:
        """Add a pod bound to `node` ("" for an unscheduled pod, with the scheduler's reason).

        `recreate_on` (needs a controller): once evicted or deleted, the controller makes a
        replacement on the first of these nodes that exists, is Ready and is not cordoned, or
        leaves it Pending until one is. A ReplicaSet-style replacement gets a new name at once; a
        StatefulSet one reuses the name, after the old pod is gone. Either gets a new UID.
        """
        controller = None
        if controller_kind:
            if not controller_name:
                raise ValueError("controller_kind needs a controller_name")
            controller = OwnerRef(
                kind=controller_kind,
                name=controller_name,
                uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{controller_kind}/{namespace}/{controller_name}")),
                api_version=_CONTROLLER_API_VERSIONS.get(controller_kind, "v1"),
            )
        elif recreate_on is not None:
            raise ValueError("recreate_on needs a controller")
        with self._guard():
            if (namespace, name) in self._pods:
                raise ValueError(f"pod {namespace}/{name} already exists")
            pod = PodInfo(
                namespace=namespace,
                name=name,
                uid=self._new_uid(),
                node_name=node,
                phase=phase,
                labels=dict(labels or {}),
                annotations=dict(annotations or {}),
                controller=controller,
                has_empty_dir=empty_dir,
                priority_class=priority_class,
                termination_grace_seconds=grace,
                finalizers=tuple(finalizers),
                created_at=self._now(),
                cpu_request_milli=cpu_request_milli,
                memory_request_bytes=memory_request_bytes,
                unscheduled_reason=unscheduled_reason,
            )
            self._pods[(namespace, name)] = pod
            if recreate_on is not None:
                self._recreate_on[pod.uid] = tuple(recreate_on)
            self._dirty = True
            return pod

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """Inspect a pod without counting a request (tests only; the engine lists)."""
        with self._guard():
            self._reap_locked()
            return self._pods.get((namespace, name))

    def all_pods(self) -> list[PodInfo]:
        """Every pod, sorted by key, without counting a request."""
        with self._guard():
            self._reap_locked()
            return sorted(self._pods.values(), key=lambda p: p.key)

    def add_pdb(
        self,
        namespace: str,
        name: str,
        *,
        match_labels: Mapping[str, str],
        disruptions_allowed: int | None = None,
        min_available: int | None = None,
        observed: bool = True,
    ) -> PdbInfo:
        """A budget with a fixed `disruptions_allowed`, or a `min_available` it is computed from.

        `observed=False` models a budget the disruption controller has not processed yet: every
        eviction of a pod it selects gets the transient "still being processed" 429.
        """
        if (disruptions_allowed is None) == (min_available is None):
            raise ValueError("give exactly one of disruptions_allowed and min_available")
        with self._guard():
            pdb = _Pdb(
                namespace=namespace,
                name=name,
                selector=LabelSelector(match_labels=dict(match_labels)),
                allowed=disruptions_allowed,
                min_available=min_available,
                desired_healthy=0,
                observed=observed,
            )
            healthy = self._healthy_locked(pdb)
            if min_available is not None:
                pdb.desired_healthy = min_available
            else:
                pdb.desired_healthy = max(0, healthy - (disruptions_allowed or 0))
            self._pdbs[(namespace, name)] = pdb
            self._dirty = True
            return self._pdb_info_locked(pdb)

    def set_pdb_allowance(self, namespace: str, name: str, disruptions_allowed: int) -> None:
        """What the disruption controller would write; only for budgets with a fixed allowance."""
        with self._guard():
            pdb = self._pdbs[(namespace, name)]
            if pdb.allowed is None:
                raise ValueError(f"PDB {namespace}/{name} computes its allowance from min_available")
            pdb.allowed = disruptions_allowed
            self._dirty = True

    def add_daemonset(self, namespace: str, name: str) -> None:
        with self._guard():
            self._daemonsets.add(f"{namespace}/{name}")
            self._dirty = True

    def set_namespace_terminating(self, namespace: str, terminating: bool = True) -> None:
        with self._guard():
            if terminating:
                self._terminating_namespaces.add(namespace)
            else:
                self._terminating_namespaces.discard(namespace)
            self._dirty = True

    def remove_finalizers(self, namespace: str, name: str) -> None:
        with self._guard():
            pod = self._pods.get((namespace, name))
            if pod is not None:
                self._pods[(namespace, name)] = dataclasses.replace(pod, finalizers=())
                self._dirty = True
            self._reap_locked()

    def fail_next(self, verb: str, error: errors.KubeError, *, resource: str | None = None) -> None:
        """Make the next request with this verb (and resource, if given) raise `error`.

        Verbs and resources are the keys of `request_counts`: ("list", "pods"),
        ("create", "pods/eviction"), ("patch", "nodes"), ("delete", "pods"), ...
        """
        with self._guard():
            self._faults.append((verb, resource, error))

    def tick(self) -> None:
        """Let the cluster catch up with the clock: remove expired pods, place pending replacements."""
        with self._guard():
            self._reap_locked()

    def advance(self, seconds: float) -> None:
        """Move the cluster's own FakeClock forward, then `tick()`."""
        if self.clock is None:
            raise RuntimeError("advance() needs the cluster's own clock; advance yours and call tick()")
        self.clock.advance(seconds)
        self.tick()

    # -- KubeApi -------------------------------------------------------------------------------

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        with self._guard():
            self._request_locked("list", "nodes")
            selector = _parse_label_selector(label_selector or "")
            return [n for _, n in sorted(self._nodes.items()) if selector.matches(n.labels)]

    def get_node(self, name: str) -> NodeInfo:
        with self._guard():
            self._request_locked("get", "nodes")
            return self._node_locked(name)

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        wanted = None if node_names is None else frozenset(node_names)
        if wanted is not None and not wanted:
            return []  # like the real adapter: no request for no nodes
        with self._guard():
            self._request_locked("list", "pods")
            return [
                p
                for _, p in sorted(self._pods.items())
                if wanted is None or (p.node_name and p.node_name in wanted)
            ]

    def list_pdbs(self) -> list[PdbInfo]:
        with self._guard():
            self._request_locked("list", "poddisruptionbudgets")
            return [self._pdb_info_locked(p) for _, p in sorted(self._pdbs.items())]

    def list_daemonset_keys(self) -> frozenset[str]:
        with self._guard():
            self._request_locked("list", "daemonsets")
            return frozenset(self._daemonsets)

    def list_terminating_namespaces(self) -> frozenset[str]:
        with self._guard():
            self._request_locked("list", "namespaces")
            return frozenset(self._terminating_namespaces)

    def set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        with self._guard():
            self._request_locked("get", "nodes")
            current = self._node_locked(node)
            if current.unschedulable == unschedulable:
                return False
            self._request_locked("patch", "nodes")
            self._nodes[node] = _with_unschedulable(current, unschedulable)
            self._dirty = True
            return True

    def set_taint(self, node: str, key: str, *, value: str, effect: str, present: bool) -> bool:
        with self._guard():
            self._request_locked("get", "nodes")
            current = self._node_locked(node)
            if present:
                if any(t.key == key and t.effect == effect for t in current.taints):
                    return False
                taints = (*current.taints, Taint(key=key, effect=effect, value=value))
            else:
                taints = tuple(t for t in current.taints if t.key != key)
                if len(taints) == len(current.taints):
                    return False
            self._request_locked("patch", "nodes")
            self._nodes[node] = dataclasses.replace(current, taints=taints)
            self._dirty = True
            return True

    def cordon(self, node: str, *, taint_key: str, taint_value: str, taint_effect: str) -> CordonResult:
        with self._guard():
            self._request_locked("get", "nodes")
            return self._cordon_locked(self._node_locked(node), taint_key, taint_value, taint_effect)

    def cordon_many(
        self,
        nodes: Collection[str],
        *,
        taint_key: str,
        taint_value: str,
        taint_effect: str,
        executor: Executor | None = None,
    ) -> dict[str, CordonResult]:
        """One listing, then a write per node that needs one. In memory the writes cannot race
        (one lock), so `executor` has nothing to spread."""
        wanted = frozenset(nodes)
        if not wanted:
            return {}
        with self._guard():
            self._request_locked("list", "nodes")
            listed = [n for name, n in sorted(self._nodes.items()) if name in wanted]
            return {n.name: self._cordon_locked(n, taint_key, taint_value, taint_effect) for n in listed}

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        """The eviction subresource, checks in the server's order (eviction.go)."""
        _require_uid(pod)
        with self._guard():
            self._request_locked("create", "pods/eviction")
            if pod.namespace in self._terminating_namespaces:
                # NamespaceLifecycle admission rejects the create before the handler runs.
                raise _namespace_terminating(pod)
            live = self._live_pod_locked(pod)
            if live.phase in ("Succeeded", "Failed", "Pending") or live.is_terminating:
                # canIgnorePDB: the pod is deleted without consulting any budget.
                _check_uid(live, pod.uid)
                self._delete_locked(live, grace_seconds)
                return
            pdbs = [p for _, p in sorted(self._pdbs.items()) if p.selects(live)]
            if len(pdbs) > 1:
                raise errors.error_from_status(
                    500, {**_STATUS_BASE, "message": errors.MULTIPLE_PDBS_MESSAGE, "code": 500}
                )
            if pdbs:
                self._check_and_decrement_locked(pdbs[0])
            # The UID precondition is checked by the delete, after the budget was charged, as on
            # the server: a 409 here has consumed one disruption.
            _check_uid(live, pod.uid)
            self._delete_locked(live, grace_seconds)

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        _require_uid(pod)
        with self._guard():
            self._request_locked("delete", "pods")
            live = self._live_pod_locked(pod)
            _check_uid(live, pod.uid)
            self._delete_locked(live, grace_seconds)

    def delete_node(self, name: str) -> None:
        with self._guard():
            self._request_locked("delete", "nodes")
            self._node_locked(name)
            del self._nodes[name]
            self._dirty = True
            # The pod garbage collector force-deletes pods bound to a node that no longer exists.
            for pod in [p for p in self._pods.values() if p.node_name == name]:
                self._remove_locked(pod)

    # -- state (the simulated cluster keeps it in SQLite between commands) ----------------------

    def to_state(self) -> dict[str, Any]:
        """Everything the cluster holds, as JSON-ready data (`from_state` reads it back)."""
        with self._guard():
            return {
                "nodes": [_encode(n) for _, n in sorted(self._nodes.items())],
                "pods": [_encode(p) for _, p in sorted(self._pods.items())],
                "pdbs": [_encode(p) for _, p in sorted(self._pdbs.items())],
                "daemonsets": sorted(self._daemonsets),
                "terminating_namespaces": sorted(self._terminating_namespaces),
                "recreate_on": {uid: list(nodes) for uid, nodes in sorted(self._recreate_on.items())},
                "serial": self._peek_serial(),
            }

    def _peek_serial(self) -> int:
        """The next UID number, without using it up."""
        number = next(self._serial)
        self._serial = itertools.count(number)
        return number

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], *, now: Callable[[], datetime] | None = None
    ) -> FakeCluster:
        """A cluster as `to_state` left it; pods whose grace ended meanwhile go at the first call."""
        cluster = cls(now=now)
        cluster._nodes = {n.name: n for n in (_decode_node(raw) for raw in state["nodes"])}
        cluster._pods = {(p.namespace, p.name): p for p in (_decode_pod(raw) for raw in state["pods"])}
        cluster._pdbs = {(p.namespace, p.name): p for p in (_decode_pdb(raw) for raw in state["pdbs"])}
        cluster._daemonsets = set(state["daemonsets"])
        cluster._terminating_namespaces = set(state["terminating_namespaces"])
        cluster._recreate_on = {uid: tuple(nodes) for uid, nodes in state["recreate_on"].items()}
        cluster._serial = itertools.count(int(state["serial"]))
        return cluster

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """The lock, and `on_change` once when the outermost call that changed something ends
        (also when it raises: what was written before the error stays written, as on a server)."""
        with self._lock:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._dirty:
                    self._dirty = False
                    if self.on_change is not None:
                        self.on_change()

    # -- internals (call with the lock held) ---------------------------------------------------

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=next(self._serial)))

    def _request_locked(self, verb: str, resource: str) -> None:
        self._reap_locked()
        self.request_counts[(verb, resource)] += 1
        for i, (fault_verb, fault_resource, error) in enumerate(self._faults):
            if fault_verb == verb and fault_resource in (None, resource):
                del self._faults[i]
                raise error

    def _cordon_locked(
        self, current: NodeInfo, taint_key: str, taint_value: str, taint_effect: str
    ) -> CordonResult:
        had_taint = any(t.key == taint_key and t.effect == taint_effect for t in current.taints)
        result = CordonResult(had_taint=had_taint, was_unschedulable=current.unschedulable)
        if had_taint and current.unschedulable:
            return result
        self._request_locked("patch", "nodes")
        cordoned = _with_unschedulable(current, True)
        if not had_taint:
            taint = Taint(key=taint_key, effect=taint_effect, value=taint_value)
            cordoned = dataclasses.replace(cordoned, taints=(*cordoned.taints, taint))
        self._nodes[current.name] = cordoned
        self._dirty = True
        return result

    def _node_locked(self, name: str) -> NodeInfo:
        node = self._nodes.get(name)
        if node is None:
            raise _not_found("nodes", name)
        return node

    def _live_pod_locked(self, pod: PodInfo) -> PodInfo:
        live = self._pods.get((pod.namespace, pod.name))
        if live is None:
            raise _not_found("pods", pod.name)
        return live

    def _healthy_locked(self, pdb: _Pdb) -> int:
        return sum(
            1 for p in self._pods.values() if pdb.selects(p) and p.phase == "Running" and not p.is_terminating
        )

    def _allowed_locked(self, pdb: _Pdb) -> int:
        if pdb.allowed is not None:
            return pdb.allowed
        return max(0, self._healthy_locked(pdb) - pdb.desired_healthy)

    def _pdb_info_locked(self, pdb: _Pdb) -> PdbInfo:
        return PdbInfo(
            namespace=pdb.namespace,
            name=pdb.name,
            selector=pdb.selector,
            disruptions_allowed=self._allowed_locked(pdb),
            current_healthy=self._healthy_locked(pdb),
            desired_healthy=pdb.desired_healthy,
            expected_pods=sum(1 for p in self._pods.values() if pdb.selects(p)),
            generation=1,
            observed_generation=1 if pdb.observed else 0,
        )

    def _check_and_decrement_locked(self, pdb: _Pdb) -> None:
        if not pdb.observed:
            raise _too_many_requests(
                f"The disruption budget {pdb.name} is still being processed by the server.",
                retry_after=PDB_RETRY_AFTER_SECONDS,
            )
        allowed = self._allowed_locked(pdb)
        if allowed < 0:
            raise errors.error_from_status(
                403,
                {
                    **_STATUS_BASE,
                    "message": f'poddisruptionbudget.policy "{pdb.name}" is forbidden: '
                    "pdb disruptions allowed is negative",
                    "reason": "Forbidden",
                    "details": {"name": pdb.name, "group": "policy", "kind": "poddisruptionbudget"},
                    "code": 403,
                },
            )
        if allowed == 0:
            raise _too_many_requests(
                f"The disruption budget {pdb.name} needs {pdb.desired_healthy} healthy pods "
                f"and has {self._healthy_locked(pdb)} currently"
            )
        if pdb.allowed is not None:
            pdb.allowed -= 1
            self._dirty = True

    def _delete_locked(self, pod: PodInfo, grace_seconds: int | None) -> None:
        """Graceful deletion as the pod strategy does it; a later, shorter grace wins."""
        if not pod.node_name or pod.is_finished:
            grace = 0  # nothing runs: the server deletes at once
        else:
            grace = max(0, pod.termination_grace_seconds if grace_seconds is None else grace_seconds)
        deadline = self._now() + timedelta(seconds=grace)
        if pod.deletion_timestamp is None or deadline < pod.deletion_timestamp:
            pod = dataclasses.replace(pod, deletion_timestamp=deadline)
            self._pods[(pod.namespace, pod.name)] = pod
            self._dirty = True
        if grace == 0 and not pod.finalizers:
            self._remove_locked(pod)
            return
        if pod.controller is not None and pod.controller.kind != "StatefulSet":
            # A ReplicaSet stops counting a terminating pod and replaces it right away.
            self._recreate_locked(pod)

    def _remove_locked(self, pod: PodInfo) -> None:
        del self._pods[(pod.namespace, pod.name)]
        self._dirty = True
        self._recreate_locked(pod)

    def _recreate_locked(self, old: PodInfo) -> None:
        pool = self._recreate_on.pop(old.uid, None)
        if pool is None or old.controller is None:
            return
        if old.controller.kind == "StatefulSet":
            name = old.name  # same identity; only once the old pod is gone
        else:
            name = f"{old.controller.name}-{_name_suffix(next(self._serial))}"
        node = self._placement_locked(pool)
        replacement = dataclasses.replace(
            old,
            name=name,
            uid=self._new_uid(),
            node_name=node or "",
            phase="Running" if node else "Pending",
            deletion_timestamp=None,
            finalizers=(),
            created_at=self._now(),
        )
        self._pods[(replacement.namespace, replacement.name)] = replacement
        self._recreate_on[replacement.uid] = pool

    def _placement_locked(self, pool: tuple[str, ...]) -> str | None:
        for name in pool:
            node = self._nodes.get(name)
            if node is not None and node.ready == "True" and not node.is_cordoned:
                return name
        return None

    def _reap_locked(self) -> None:
        now = self._now()
        for pod in list(self._pods.values()):
            if pod.deletion_timestamp is not None and pod.deletion_timestamp <= now and not pod.finalizers:
                self._remove_locked(pod)
        for key, pod in list(self._pods.items()):
            if not pod.node_name and pod.phase == "Pending" and pod.uid in self._recreate_on:
                node = self._placement_locked(self._recreate_on[pod.uid])
                if node is not None:
                    self._pods[key] = dataclasses.replace(pod, node_name=node, phase="Running")
                    self._dirty = True


_STATUS_BASE: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}


def _not_found(resource: str, name: str) -> errors.KubeError:
    return errors.error_from_status(
        404,
        {
            **_STATUS_BASE,
            "message": f'{resource} "{name}" not found',
            "reason": "NotFound",
            "details": {"name": name, "kind": resource},
            "code": 404,
        },
    )


def _too_many_requests(cause: str, *, retry_after: int = 0) -> errors.KubeError:
    details: dict[str, Any] = {"causes": [{"reason": errors.DISRUPTION_BUDGET_CAUSE, "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after  # omitted when 0, as Go's omitempty does
    return errors.error_from_status(
        429,
        {
            **_STATUS_BASE,
            "message": PDB_TOO_MANY_REQUESTS_MESSAGE,
            "reason": "TooManyRequests",
            "details": details,
            "code": 429,
        },
    )


def _namespace_terminating(pod: PodInfo) -> errors.KubeError:
    return errors.error_from_status(
        403,
        {
            **_STATUS_BASE,
            "message": f'pods "{pod.name}" is forbidden: unable to create new content in namespace '
            f"{pod.namespace} because it is being terminated",
            "reason": "Forbidden",
            "details": {
                "name": pod.name,
                "kind": "pods",
                "causes": [
                    {
                        "reason": errors.NAMESPACE_TERMINATING_CAUSE,
                        "message": f"namespace {pod.namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
            "code": 403,
        },
    )


def _check_uid(live: PodInfo, uid: str) -> None:
    if live.uid == uid:
        return
    raise errors.error_from_status(
        409,
        {
            **_STATUS_BASE,
            "message": f'Operation cannot be fulfilled on pods "{live.name}": StorageError: invalid object, '
            f"Code: 4, Key: /registry/pods/{live.namespace}/{live.name}, ResourceVersion: 0, "
            f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {live.uid}",
            "reason": "Conflict",
            "details": {"name": live.name, "kind": "pods"},
            "code": 409,
        },
    )


def _require_uid(pod: PodInfo) -> None:
    if not pod.uid:
        raise ValueError(f"pod {pod.key} has no UID; refusing to write without a UID precondition")


def _with_unschedulable(node: NodeInfo, unschedulable: bool) -> NodeInfo:
    """Set the flag, and the taint the node lifecycle controller keeps in step with it."""
    taints = tuple(t for t in node.taints if t.key != UNSCHEDULABLE_TAINT_KEY)
    if unschedulable:
        taints = (*taints, Taint(key=UNSCHEDULABLE_TAINT_KEY, effect="NoSchedule"))
    return dataclasses.replace(node, unschedulable=unschedulable, taints=taints)


def _encode(value: Any) -> Any:
    """Model dataclasses as JSON-ready data: datetimes in ISO 8601, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _when(raw: str | None) -> datetime | None:
    return datetime.fromisoformat(raw) if raw else None


def _decode_node(raw: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        **{
            **raw,
            "taints": tuple(Taint(**t) for t in raw["taints"]),
            "created_at": _when(raw["created_at"]),
            "deletion_timestamp": _when(raw["deletion_timestamp"]),
        }
    )


def _decode_pod(raw: Mapping[str, Any]) -> PodInfo:
    return PodInfo(
        **{
            **raw,
            "controller": OwnerRef(**raw["controller"]) if raw["controller"] else None,
            "finalizers": tuple(raw["finalizers"]),
            "created_at": _when(raw["created_at"]),
            "deletion_timestamp": _when(raw["deletion_timestamp"]),
        }
    )


def _decode_selector(raw: Mapping[str, Any]) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(raw["match_labels"]),
        match_expressions=tuple(
            LabelSelectorRequirement(r["key"], r["operator"], tuple(r["values"]))
            for r in raw["match_expressions"]
        ),
    )


def _decode_pdb(raw: Mapping[str, Any]) -> _Pdb:
    return _Pdb(**{**raw, "selector": _decode_selector(raw["selector"])})


def _ready_reason(ready: str) -> str:
    return {"True": "KubeletReady", "False": "KubeletNotReady"}.get(ready, "NodeStatusUnknown")


def _name_suffix(number: int) -> str:
    chars = []
    for _ in range(5):
        number, digit = divmod(number, len(_NAME_SUFFIX_ALPHABET))
        chars.append(_NAME_SUFFIX_ALPHABET[digit])
    return "".join(chars)


def _parse_label_selector(text: str) -> LabelSelector:
    """A label selector string as `kubectl -l` takes it; malformed input is a 400, as on the server."""
    try:
        return parse_label_selector(text)
    except ValueError as exc:
        raise errors.error_from_status(
            400, {**_STATUS_BASE, "message": str(exc), "reason": "BadRequest", "code": 400}
        ) from exc

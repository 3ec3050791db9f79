"""What the managed-cloud pool providers (gke, aks, eks) share: their Nodes, their restore records,
the autoscaler bounds a sleep saves, the drained nodes a removal may take, waiting on the cloud's
long-running operations, and the provider's shell around its cloud's own calls.

- Nodes: a managed pool's Nodes carry a label naming the pool (`cloud.google.com/gke-nodepool`,
  `kubernetes.azure.com/agentpool`) and a `spec.providerID` naming the machine behind each;
  `CloudNode` is what a provider reads of one.
- Restore records: kept in a ConfigMap `scalebot-<provider>-<pool>` in scalebot's namespace of the
  workload cluster, written only if absent (the base contract). So they survive a lost database and
  need no write right on the cloud's own object (labels on a node pool change its nodes' template).
- Autoscaler bounds: a sleep lowers the cloud autoscaler's minimum to 0 (else it brings nodes
  back) and keeps the maximum; a wake restores both from the record (`bounds_for`).
- Victims: `check_victims` refuses, before any call, a drained node of another pool or one whose
  `providerID` names no machine of the cloud: removing it would take the wrong machine, or none.
- Operations: `wait_until` polls with a deadline, on the provider's clock; `busy_retry` repeats a
  call the cloud refused because another operation holds the pool or cluster, until that one ends.
- `CloudPoolProvider`: the configured pools, the reads (a pool is the cloud's pool, its Nodes and
  its record), the record with the cloud's own autoscaler state, and both waits above with the
  provider's timeout and poll interval; each provider adds its cloud's calls.

Pure parts are module functions over small dataclasses; the Kubernetes side is `KubeRecords`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from kubernetes import client as k8s

from engine.domain.clock import Clock, SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import RawObject
from engine.kube import errors
from engine.pools.base import RESTORE_ANNOTATION, Pool, PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.common import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    FIELD_MANAGER,
    MANAGED_BY,
    MERGE_PATCH,
    PROVIDER_LABEL,
    NodeRemovalError,
    RawCaller,
    decode_restore,
    encode_restore,
)

log = logging.getLogger(__name__)

POOL_NAME_LABEL = "scalebot.io/cloud-pool"
CLUSTER_ANNOTATION = "scalebot.io/cloud-cluster"
CONFLICT_ATTEMPTS = 5
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

T = TypeVar("T")
P = TypeVar("P")
A = TypeVar("A")


class CloudOperationError(PoolSizeError):
    """The cloud reported an operation failed (quota, an invalid change): a retry does not fix it."""

    category = Category.CONFIGURATION


class CloudOperationTimeout(CloudOperationError):
    """An operation did not finish in time: the step is tried again (it is idempotent)."""

    category = Category.TRANSIENT


class CloudPoolNotFound(ScalebotError, LookupError):
    """The cloud has no pool of that name (a GKE node pool, an AKS agent pool, an EKS node group)."""

    category = Category.CONFIGURATION


class CloudBusy(ScalebotError, RuntimeError):
    """The cloud refused a change because another operation holds the pool or its cluster
    (GKE FAILED_PRECONDITION, AKS 409 OperationNotAllowed): worth repeating once that one ends."""

    category = Category.TRANSIENT


# --------------------------------------------------------------------------------------------------
# Pure parts


@dataclass(frozen=True, slots=True)
class Bounds:
    """A cloud autoscaler's bounds on a pool, in nodes of the whole pool; disabled: no autoscaler."""

    enabled: bool
    min_size: int
    max_size: int

    def __str__(self) -> str:
        if not self.enabled:
            return "autoscaling off"
        return f"autoscaling min {self.min_size}, max {self.max_size}"


def bounds_for(size: int, current: Bounds, record: RestoreRecord | None) -> Bounds:
    """The autoscaler bounds that let the pool have `size` nodes and keep them.

    0: an enabled autoscaler's minimum goes to 0 (the maximum stays: it is the pool's ceiling when
    someone wakes it another way). Above 0 while a restore record exists (the pool is asleep): the
    recorded bounds, min only as far as `size` allows and max at least `size`, and enabled as it was
    recorded. Otherwise min lowered / max raised only if `size` is outside them.
    """
    if size < 0:
        raise PoolSizeError(f"size must be 0 or more, not {size}")
    enabled, min_size, max_size = current.enabled, current.min_size, current.max_size
    if record is not None and size > 0:
        enabled = bool(record.extra.get("autoscaling", enabled))
        min_size = record.min_size
        max_size = record.max_size if record.max_size is not None else max_size
    if not enabled:
        return Bounds(False, current.min_size, current.max_size)
    return Bounds(True, min(min_size, size), max(max_size, size))


def record_name(provider: str, pool: str) -> str:
    """`scalebot-<provider>-<pool>`; a pool name that is no valid object name gets a hashed one."""
    prefix = f"scalebot-{provider}-"
    name = prefix + pool
    if _DNS_SUBDOMAIN.match(name) and len(name) <= 253:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-")[:40]
    return f"{prefix}{cleaned}-{digest}".replace("--", "-")


@dataclass(frozen=True, slots=True)
class CloudNode:
    name: str
    pool: str
    """The value of the provider's pool label ("" when absent)."""
    provider_id: str
    ready: bool

    @classmethod
    def from_raw(cls, raw: RawObject, pool_label: str) -> CloudNode:
        meta = raw.get("metadata") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (raw.get("status") or {}).get("conditions") or ()
        )
        return cls(
            name=str(meta.get("name") or ""),
            pool=str((meta.get("labels") or {}).get(pool_label) or ""),
            provider_id=str((raw.get("spec") or {}).get("providerID") or ""),
            ready=ready,
        )


@dataclass(frozen=True, slots=True)
class Machine:
    """What names a node's machine in its `spec.providerID`, for the refusal of a node without one."""

    described: str
    """e.g. "an EC2 instance in spec.providerID (aws:///<zone>/<instance id>)"."""
    named_by: Callable[[str], bool]
    """True for a providerID that names such a machine."""


def check_victims(
    nodes: Sequence[CloudNode], chosen: Sequence[str], *, pool: str, kind: str, machine: Machine | None = None
) -> dict[str, CloudNode]:
    """The chosen nodes still there, by name; NodeRemovalError for a chosen node of another pool
    (`kind`: "node pool", "agent pool", "node group") or, with `machine`, without one."""
    by_name = {n.name: n for n in nodes if n.name in set(chosen)}
    foreign = sorted(f"{n.name} ({n.pool or f'no {kind} label'})" for n in by_name.values() if n.pool != pool)
    if foreign:
        raise NodeRemovalError(f"nodes not in {kind} {pool}: {', '.join(foreign)}")
    if machine is not None:
        bare = sorted(n.name for n in by_name.values() if not machine.named_by(n.provider_id))
        if bare:
            raise NodeRemovalError(f"nodes without {machine.described}: {', '.join(bare)}")
    return by_name


# --------------------------------------------------------------------------------------------------
# Waiting on the cloud


def wait_until(
    clock: Clock,
    done: Callable[[], bool],
    *,
    timeout: float,
    interval: float,
    what: str,
) -> None:
    """Call `done` every `interval` seconds until it is true; CloudOperationError after `timeout`.
    `done` may raise (an operation that failed) to stop early."""
    deadline = clock.monotonic() + timeout
    while not done():
        if clock.monotonic() >= deadline:
            raise CloudOperationTimeout(f"{what}: not finished after {timeout:.0f} s")
        clock.sleep(interval)


def busy_retry(
    clock: Clock,
    call: Callable[[], T],
    *,
    timeout: float,
    interval: float,
    what: str,
) -> T:
    """`call()`, repeated while the cloud answers CloudBusy, for at most `timeout` seconds."""
    deadline = clock.monotonic() + timeout
    while True:
        try:
            return call()
        except CloudBusy as exc:
            if clock.monotonic() >= deadline:
                raise CloudOperationTimeout(
                    f"{what}: another operation still holds it after {timeout:.0f} s ({exc})"
                ) from None
            log.info("%s: %s; trying again in %.0f s", what, exc, interval)
            clock.sleep(interval)


# --------------------------------------------------------------------------------------------------
# The provider's shell


class CloudPoolProvider(Generic[P, A]):
    """The part of a managed-cloud PoolProvider that is the same for every cloud; `P` is what the
    cloud says of one pool, `A` the provider's port to its cloud. A provider implements
    `_cloud_names`, `_fetch` (raising CloudPoolNotFound), `_to_pool` and, when a wake must set the
    cloud's autoscaler back, `_extra`."""

    name = ""
    cloud = ""
    """"GKE", "AKS", "EKS": in the log lines."""
    kind = ""
    """"node pool", "agent pool", "node group": in the log lines and refusals."""
    operation_timeout_seconds = 900.0
    """How long one of the cloud's operations (or a wait on what it changes) may take."""
    poll_seconds = 2.0

    def __init__(
        self,
        api: A,
        kube: ClusterSide,
        *,
        pools: Sequence[str] = (),
        clock: Clock | None = None,
        operation_timeout_seconds: float | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        """`api`: the cloud's calls for one cluster; `kube`: its Nodes and scalebot's records;
        `pools`: the pools (empty: every pool of the cluster)."""
        self._cloud = api
        self._kube = kube
        self._clock: Clock = clock or SystemClock()
        self._timeout = (
            self.operation_timeout_seconds if operation_timeout_seconds is None else operation_timeout_seconds
        )
        self._poll = self.poll_seconds if poll_seconds is None else poll_seconds
        self._configured = tuple(pools)

    def _cloud_names(self) -> list[str]:
        raise NotImplementedError

    def _fetch(self, name: str) -> P:
        raise NotImplementedError

    def _to_pool(self, cloud_pool: P, nodes: Sequence[CloudNode], record: RestoreRecord | None) -> Pool:
        raise NotImplementedError

    def _extra(self, cloud_pool: P) -> Mapping[str, Any]:
        """What the restore record keeps of the cloud's own state (its autoscaler)."""
        return {}

    # -- reads -------------------------------------------------------------------------------------

    def pool_names(self) -> list[str]:
        return sorted(self._configured) if self._configured else sorted(self._cloud_names())

    def list_pools(self) -> list[Pool]:
        nodes = self._kube.nodes(None)
        records = self._kube.records()
        return [self._to_pool(self._cloud_pool(n), nodes, records.get(n)) for n in self.pool_names()]

    def get_pool(self, name: str) -> Pool:
        cloud_pool = self._cloud_pool(name)
        return self._to_pool(cloud_pool, self._kube.nodes(name), self._kube.read_record(name))

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        record = replace(record, extra={**record.extra, **self._extra(self._cloud_pool(pool))})
        written = self._kube.write_record(pool, record)
        if written:
            log.info(
                "Recorded restore state of %s %s %s: %s", self.cloud, self.kind, pool, encode_restore(record)
            )
        return written

    def clear_restore(self, pool: str) -> None:
        self._kube.clear_record(pool)

    # -- plumbing ----------------------------------------------------------------------------------

    def _cloud_pool(self, name: str) -> P:
        if self._configured and name not in self._configured:
            raise PoolNotFound(name, self._configured)
        try:
            return self._fetch(name)
        except CloudPoolNotFound:
            raise PoolNotFound(name, self.pool_names()) from None

    def _retry(self, call: Callable[[], T], what: str) -> T:
        """`call()`, repeated while the cloud is busy with another operation (`busy_retry`)."""
        return busy_retry(self._clock, call, timeout=self._timeout, interval=self._poll, what=what)

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        """Until `done()` (`wait_until`), within the provider's operation timeout."""
        wait_until(self._clock, done, timeout=self._timeout, interval=self._poll, what=what)


# --------------------------------------------------------------------------------------------------
# The Kubernetes side: Nodes, and the restore records' ConfigMaps


class ClusterSide(Protocol):
    """What a cloud pool provider reads and writes in its cluster's API server (`KubeRecords`)."""

    def nodes(self, pool: str | None) -> list[CloudNode]: ...

    def named_nodes(self, names: Sequence[str]) -> list[CloudNode]: ...

    def read_record(self, pool: str) -> RestoreRecord | None: ...

    def records(self) -> dict[str, RestoreRecord]: ...

    def write_record(self, pool: str, record: RestoreRecord) -> bool: ...

    def clear_record(self, pool: str) -> None: ...


class KubeRecords:
    """A managed pool provider's side of the workload cluster: Nodes by pool label, and restore
    records in ConfigMaps of `namespace` (raw JSON calls through the cluster's one transport)."""

    def __init__(
        self,
        api_client: Any,
        *,
        provider: str,
        pool_label: str,
        namespace: str,
        cloud_cluster: str,
        pool_name_label: str = POOL_NAME_LABEL,
        cluster_annotation: str = CLUSTER_ANNOTATION,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`pool_name_label` and `cluster_annotation` name the pool and the cloud cluster on each
        record (the eks provider keeps the names its records have always had)."""
        self._core = k8s.CoreV1Api(api_client)
        self._call = RawCaller(api_client, request_timeout_seconds)
        self.provider = provider
        self.pool_label = pool_label
        self.namespace = namespace
        self.cloud_cluster = cloud_cluster
        self._pool_name_label = pool_name_label
        self._cluster_annotation = cluster_annotation

    def nodes(self, pool: str | None) -> list[CloudNode]:
        """Nodes of one pool (None: of every pool)."""
        selector = self.pool_label if pool is None else f"{self.pool_label}={pool}"
        page = self._call("list", "nodes", self._core.list_node, label_selector=selector)
        return [CloudNode.from_raw(raw, self.pool_label) for raw in page.get("items") or ()]

    def named_nodes(self, names: Sequence[str]) -> list[CloudNode]:
        """The named Nodes whatever their labels say; gone ones are skipped."""
        found = []
        for name in sorted(set(names)):
            try:
                raw = self._call("get", "nodes", self._core.read_node, name)
            except errors.NotFound:
                continue
            found.append(CloudNode.from_raw(raw, self.pool_label))
        return found

    def read_record(self, pool: str) -> RestoreRecord | None:
        stored = self._read(pool)
        return None if stored is None else self._decode(pool, stored)

    def records(self) -> dict[str, RestoreRecord]:
        call = self._core.list_namespaced_config_map
        selector = f"{PROVIDER_LABEL}={self.provider}"
        page = self._call("list", "configmaps", call, self.namespace, label_selector=selector)
        records: dict[str, RestoreRecord] = {}
        for raw in page.get("items") or ():
            meta = raw.get("metadata") or {}
            if (meta.get("annotations") or {}).get(self._cluster_annotation) != self.cloud_cluster:
                continue
            pool = str((meta.get("labels") or {}).get(self._pool_name_label) or "")
            record = self._decode(pool, raw) if pool else None
            if record is not None:
                records[pool] = record
        return records

    def write_record(self, pool: str, record: RestoreRecord) -> bool:
        """Write unless a record exists; True if written."""
        text = encode_restore(record)
        for _ in range(CONFLICT_ATTEMPTS):
            stored = self._read(pool)
            if stored is not None and RESTORE_ANNOTATION in _annotations(stored):
                return False
            try:
                if stored is None:
                    self._create(pool, text)
                else:
                    version = str((stored.get("metadata") or {}).get("resourceVersion") or "")
                    meta = {"resourceVersion": version, "annotations": {RESTORE_ANNOTATION: text}}
                    self._patch(pool, {"metadata": meta})
            except errors.Conflict:
                continue  # created or changed since read: read again
            return True
        name = record_name(self.provider, pool)
        raise errors.Conflict(status=409, message=f"ConfigMap {name} kept changing; try again")

    def clear_record(self, pool: str) -> None:
        stored = self._read(pool)
        if stored is not None and RESTORE_ANNOTATION in _annotations(stored):
            self._patch(pool, {"metadata": {"annotations": {RESTORE_ANNOTATION: None}}})

    def _decode(self, pool: str, raw: RawObject) -> RestoreRecord | None:
        text = _annotations(raw).get(RESTORE_ANNOTATION)
        where = f"ConfigMap {self.namespace}/{record_name(self.provider, pool)}"
        return None if text is None else decode_restore(text, where=where)

    def _read(self, pool: str) -> RawObject | None:
        call = self._core.read_namespaced_config_map
        name = record_name(self.provider, pool)
        try:
            raw: RawObject = self._call("get", "configmaps", call, name, self.namespace)
        except errors.NotFound:
            return None
        return raw

    def _create(self, pool: str, restore_text: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": record_name(self.provider, pool),
                "namespace": self.namespace,
                "labels": {**MANAGED_BY, PROVIDER_LABEL: self.provider, self._pool_name_label: pool},
                "annotations": {
                    RESTORE_ANNOTATION: restore_text,
                    self._cluster_annotation: self.cloud_cluster,
                },
            },
        }
        call = self._core.create_namespaced_config_map
        self._call("create", "configmaps", call, self.namespace, body, field_manager=FIELD_MANAGER)

    def _patch(self, pool: str, body: Mapping[str, Any]) -> None:
        self._call(
            "patch",
            "configmaps",
            self._core.patch_namespaced_config_map,
            record_name(self.provider, pool),
            self.namespace,
            dict(body),
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )


def _annotations(raw: RawObject) -> Mapping[str, str]:
    return (raw.get("metadata") or {}).get("annotations") or {}

"""Gardener node pools: the `gardener` PoolProvider over a Shoot's workers.

The Shoot (`core.gardener.cloud/v1beta1`) lives in the garden cluster, in its project's namespace:
`garden-<project>` by convention, but the Project's `spec.namespace` says which, so scalebot is told
the namespace or reads it from the Project (`project_namespace`), never derives it from the name.
The Nodes and Pods live in the shoot cluster (`node_api`).

- A pool is a worker of `spec.provider.workers[]`; its nodes are the shoot's Nodes labelled
  `worker.gardener.cloud/pool=<worker>`. desired = the worker's `minimum` (0 while hibernated),
  max = its `maximum`.
- `set_size(N)`: `minimum = N`, and `maximum = N` when the maximum is below it (Gardener refuses
  minimum > maximum); a maximum recorded before a zero-scale is put back. `maxSurge` and
  `maxUnavailable` are never touched (they only shape rolling updates). Ending hibernation comes first
  when the Shoot is hibernated.
- `remove_nodes`: the worker's minimum becomes the number of its nodes that stay. Gardener's
  machine controller picks which machines go, so scalebot drains the chosen nodes first and cannot
  promise those exact machines are the ones removed (the plan says so). To 0: the worker's minimum
  and maximum become 0, which Gardener allows only while another worker with system components
  stays active (`maximum > 0`); the last active worker instead hibernates the whole Shoot
  (`spec.hibernation.enabled: true`): the machines are deleted and the control plane scaled down.
- Restore records are annotations `scalebot.io/restore.<worker>` on the Shoot, written only if
  absent, with the worker's original minimum/maximum in `extra`.
- Every write is a merge patch of the Shoot guarded by the resourceVersion read (409: re-read).
  Workers are a list, so a patch sends the whole `spec.provider.workers` as read, changed in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s

from engine.domain.errors import Category, ScalebotError
from engine.domain.model import RawObject
from engine.domain.node_removal import NodeRemoval
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.pools.base import Pool, PoolNotFound, PoolSizeError, ProviderSchedule, RestoreRecord
from engine.pools.common import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    FIELD_MANAGER,
    MERGE_PATCH,
    RawCaller,
    decode_restore,
    encode_restore,
)

log = logging.getLogger(__name__)

PROVIDER_NAME = "gardener"
GROUP = "core.gardener.cloud"
VERSION = "v1beta1"
SHOOTS = "shoots"
PROJECTS = "projects"
POOL_NODE_LABEL = "worker.gardener.cloud/pool"
RESTORE_PREFIX = "scalebot.io/restore."
EXTRA_MINIMUM = "minimum"
EXTRA_MAXIMUM = "maximum"
CONFLICT_ATTEMPTS = 5
MACHINE_CONTROLLER = "Gardener's machine controller"
"""Picks the machines that go when a worker's minimum/maximum is lowered (scalebot cannot)."""


@dataclass(frozen=True, slots=True)
class ShootView:
    """The parts of a Shoot scalebot decides on, and how to show its progress."""

    namespace: str
    name: str
    resource_version: str
    workers: tuple[Mapping[str, Any], ...]
    annotations: Mapping[str, str]
    hibernation_enabled: bool
    hibernated: bool
    schedules: tuple[ProviderSchedule, ...]
    last_operation: str
    """"Reconcile Processing 40%: Waiting for workers" (empty before the first operation)."""
    settled: bool = True
    """The last operation succeeded for the current generation (Gardener's own "done")."""
    unhealthy: tuple[str, ...] = ()
    """Conditions not True, as "EveryNodeReady False: message"."""

    @classmethod
    def from_raw(cls, raw: RawObject) -> ShootView:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        hibernation = spec.get("hibernation") or {}
        last = status.get("lastOperation") or {}
        operation = ""
        if last:
            operation = f"{last.get('type', '')} {last.get('state', '')} {last.get('progress', 0)}%"
            if last.get("description"):
                operation += f": {last['description']}"
        unhealthy = tuple(
            f"{c.get('type')} {c.get('status')}" + (f": {c['message']}" if c.get("message") else "")
            for c in status.get("conditions") or ()
            if c.get("status") != "True"
        )
        settled = last.get("state", "Succeeded") == "Succeeded" and status.get(
            "observedGeneration"
        ) == meta.get("generation")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            workers=tuple((spec.get("provider") or {}).get("workers") or ()),
            annotations=meta.get("annotations") or {},
            hibernation_enabled=bool(hibernation.get("enabled")),
            hibernated=bool(status.get("hibernated")),
            schedules=tuple(
                ProviderSchedule(
                    system="Gardener",
                    owner=f"Shoot {meta.get('namespace')}/{meta.get('name')}",
                    start=str(s.get("start") or ""),
                    end=str(s.get("end") or ""),
                    location=str(s.get("location") or ""),
                )
                for s in hibernation.get("schedules") or ()
            ),
            last_operation=operation,
            settled=settled,
            unhealthy=unhealthy,
        )

    def worker(self, name: str) -> Mapping[str, Any]:
        for worker in self.workers:
            if worker.get("name") == name:
                return worker
        raise PoolNotFound(name, [str(w.get("name")) for w in self.workers])


def _schedule_text(schedule: ProviderSchedule) -> str:
    parts = [f"{k} {v}" for k, v in (("start", schedule.start), ("end", schedule.end)) if v]
    where = f" ({schedule.location})" if schedule.location else ""
    return "hibernate: " + ", ".join(parts) + where


class ProjectNamespaceError(ScalebotError, ValueError):
    """A project's namespace cannot be read; the message says what to grant or configure."""

    category = Category.CONFIGURATION


def project_namespace(
    api_client: Any, project: str, *, timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
) -> str:
    """The namespace of Gardener project `project` in the garden cluster: its Project's
    `spec.namespace` (cluster-scoped Project; usually `garden-<project>`, but a Project may name
    another one, so it is read, not guessed)."""
    call = RawCaller(api_client, timeout)
    get = k8s.CustomObjectsApi(api_client).get_cluster_custom_object
    try:
        raw = call("get", PROJECTS, get, GROUP, VERSION, PROJECTS, project)
    except errors.NotFound:
        raise ProjectNamespaceError(f"Project {project} not found in the garden cluster") from None
    except errors.Forbidden as exc:
        raise ProjectNamespaceError(
            f"reading Project {project} was refused ({exc}); grant scalebot `get` on it "
            "(manifests/grants/gardener-project) or give shoot as <namespace>/<name>"
        ) from None
    namespace = (raw.get("spec") or {}).get("namespace")
    if not namespace:
        phase = (raw.get("status") or {}).get("phase") or "unknown"
        raise ProjectNamespaceError(f"Project {project} has no namespace yet (phase {phase})")
    return str(namespace)


class GardenerPoolProvider:
    """PoolProvider over one Shoot's workers (see the module docstring)."""

    name = PROVIDER_NAME

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str,
        shoot: str,
        node_api: KubeApi,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`api_client`: the garden cluster; `node_api`: the shoot cluster (Nodes, Pods)."""
        self._custom = k8s.CustomObjectsApi(api_client)
        self._call = RawCaller(api_client, request_timeout_seconds)
        self._nodes = node_api
        self.namespace = namespace
        self.shoot = shoot

    # -- reads -------------------------------------------------------------------------------------

    def read_shoot(self) -> ShootView:
        call = self._custom.get_namespaced_custom_object
        try:
            raw = self._call("get", SHOOTS, call, GROUP, VERSION, self.namespace, SHOOTS, self.shoot)
        except errors.NotFound:
            raise PoolNotFound(f"{self.namespace}/{self.shoot}", []) from None
        return ShootView.from_raw(raw)

    def provider_schedules(self) -> tuple[ProviderSchedule, ...]:
        """The Shoot's own hibernation schedules, which Gardener runs (scalebot only shows them)."""
        return self.read_shoot().schedules

    def list_pools(self) -> list[Pool]:
        shoot = self.read_shoot()
        nodes = self._nodes.list_nodes(label_selector=POOL_NODE_LABEL)
        return sorted((self._pool(shoot, w, nodes) for w in shoot.workers), key=lambda p: p.name)

    def get_pool(self, name: str) -> Pool:
        shoot = self.read_shoot()
        worker = shoot.worker(name)
        return self._pool(shoot, worker, self._nodes.list_nodes(label_selector=f"{POOL_NODE_LABEL}={name}"))

    def _pool(self, shoot: ShootView, worker: Mapping[str, Any], nodes: Sequence[Any]) -> Pool:
        name = str(worker.get("name"))
        mine = [n for n in nodes if n.labels.get(POOL_NODE_LABEL) == name]
        text = shoot.annotations.get(RESTORE_PREFIX + name)
        notes = [f"Shoot {shoot.namespace}/{shoot.name}"]
        if shoot.hibernation_enabled or shoot.hibernated:
            notes.append("hibernated" if shoot.hibernated else "hibernating")
        notes.extend(_schedule_text(s) for s in shoot.schedules)
        progress = "; ".join(
            [f"Shoot {shoot.last_operation}" if shoot.last_operation else "", *shoot.unhealthy]
        ).strip("; ")
        return Pool(
            name=name,
            provider=self.name,
            desired=0 if shoot.hibernation_enabled else int(worker.get("minimum") or 0),
            min_size=0,
            max_size=int(worker.get("maximum") or 0) or None,
            nodes=tuple(sorted(n.name for n in mine)),
            ready_nodes=tuple(sorted(n.name for n in mine if n.ready == "True")),
            restore=None if text is None else decode_restore(text, where=self._where()),
            removal=NodeRemoval.MACHINE,
            removal_reason="; ".join(notes),
            machines_picked_by=MACHINE_CONTROLLER,
            progress=progress,
            settling=not shoot.settled,
        )

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        def decide(shoot: ShootView) -> dict[str, Any] | None:
            if RESTORE_PREFIX + pool in shoot.annotations:
                return None
            worker = shoot.worker(pool)
            extra = {EXTRA_MINIMUM: worker.get("minimum"), EXTRA_MAXIMUM: worker.get("maximum")}
            full = replace(record, extra={**record.extra, **extra})
            return {"metadata": {"annotations": {RESTORE_PREFIX + pool: encode_restore(full)}}}

        return self._update(decide, f"recorded the sizes of worker {pool}")

    def clear_restore(self, pool: str) -> None:
        def decide(shoot: ShootView) -> dict[str, Any] | None:
            if RESTORE_PREFIX + pool not in shoot.annotations:
                return None
            return {"metadata": {"annotations": {RESTORE_PREFIX + pool: None}}}

        self._update(decide, f"cleared the restore record of worker {pool}")

    # -- sizing ------------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Nothing to mark: Gardener's machine controller chooses the machines it removes."""

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """The worker keeps the nodes not named; to 0 the Shoot hibernates if no other worker stays."""
        gone = set(nodes)
        remaining = len([n for n in self.get_pool(pool).nodes if n not in gone])
        self._resize(pool, remaining)

    def set_size(self, pool: str, size: int) -> None:
        self._resize(pool, size)

    def _resize(self, pool: str, size: int) -> None:
        if size < 0:
            raise PoolSizeError(f"worker {pool}: size must be 0 or more, not {size}")

        def decide(shoot: ShootView) -> dict[str, Any] | None:
            workers = [dict(w) for w in shoot.workers]
            target = next((w for w in workers if w.get("name") == pool), None)
            if target is None:
                raise PoolNotFound(pool, [str(w.get("name")) for w in workers])
            spec: dict[str, Any] = {}
            if size == 0 and not _another_active_system_worker(workers, pool):
                # Gardener refuses a Shoot without an active system worker: the whole Shoot sleeps.
                if shoot.hibernation_enabled:
                    return None
                return {"spec": {"hibernation": {"enabled": True}}}
            if shoot.hibernation_enabled and size > 0:
                spec["hibernation"] = {"enabled": False}
            record = shoot.annotations.get(RESTORE_PREFIX + pool)
            maximum = int(target.get("maximum") or 0)
            if size == 0:
                target["minimum"], target["maximum"] = 0, 0
            else:
                recorded = decode_restore(record, where=self._where()).extra if record else {}
                if maximum == 0 and recorded.get(EXTRA_MAXIMUM):
                    maximum = int(recorded[EXTRA_MAXIMUM])  # a zero-scale's maximum comes back
                target["minimum"], target["maximum"] = size, max(maximum, size)
            changed = [dict(w) for w in shoot.workers] != workers
            if changed:
                spec["provider"] = {"workers": workers}
            return {"spec": spec} if spec else None

        self._update(decide, f"worker {pool} set to {size}")

    # -- plumbing ----------------------------------------------------------------------------------

    def _update(self, decide: Callable[[ShootView], dict[str, Any] | None], note: str) -> bool:
        for _ in range(CONFLICT_ATTEMPTS):
            shoot = self.read_shoot()
            body = decide(shoot)
            if body is None:
                return False
            body.setdefault("metadata", {})["resourceVersion"] = shoot.resource_version
            call = self._custom.patch_namespaced_custom_object
            try:
                self._call(
                    "patch",
                    SHOOTS,
                    call,
                    GROUP,
                    VERSION,
                    self.namespace,
                    SHOOTS,
                    self.shoot,
                    body,
                    field_manager=FIELD_MANAGER,
                    _content_type=MERGE_PATCH,
                )
            except errors.Conflict:
                continue
            except errors.InvalidRequest as exc:
                raise PoolSizeError(f"Shoot {self.namespace}/{self.shoot} refused the change: {exc}") from exc
            log.info("Shoot %s/%s: %s", self.namespace, self.shoot, note)
            return True
        raise errors.Conflict(
            status=409, message=f"Shoot {self.namespace}/{self.shoot} kept changing; try again"
        )

    def _where(self) -> str:
        return f"Shoot {self.namespace}/{self.shoot}"


def _another_active_system_worker(workers: Sequence[Mapping[str, Any]], pool: str) -> bool:
    """Gardener's rule: some worker with systemComponents.allow (default true) keeps maximum > 0."""
    for worker in workers:
        if worker.get("name") == pool:
            continue
        allowed = (worker.get("systemComponents") or {}).get("allow", True)
        if allowed and int(worker.get("maximum") or 0) > 0:
            return True
    return False

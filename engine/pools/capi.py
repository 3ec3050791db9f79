"""Cluster API node pools: the `capi` PoolProvider over MachineDeployments.

Owns how scalebot reads and resizes MachineDeployments (cluster.x-k8s.io, the newest version the
API server serves: v1beta2 in current releases, 1.14 here; else v1beta1), maps their Machines to Nodes,
marks the Machines chosen for removal, and keeps cluster-autoscaler's node-group annotations
consistent across a zero-scale.

- Where it runs. The MachineDeployments, MachineSets and Machines live in a *management* cluster
  (`api_client`), the Nodes and Pods in the *workload* cluster (`node_api`); a self-hosted cluster
  is both. Bound to a `Cluster` (`namespace` + `cluster`), every list and read is scoped to objects
  labelled `cluster.x-k8s.io/cluster-name=<cluster>` in that namespace, so the other clusters a
  management cluster holds are never touched. `workload_kubeconfig` reads the workload cluster's
  kubeconfig as clusterctl does (Secret `<cluster>-kubeconfig`, key `value`), as data only (no
  exec plugin, file path or proxy) and only for the Cluster's own `spec.controlPlaneEndpoint`.
- A pool is a MachineDeployment; its name is the object's name when the provider is bound to a
  namespace, `namespace/name` otherwise. desired = spec.replicas (the scale subresource's
  specReplicasPath); min/max = the autoscaler annotations
  `cluster.x-k8s.io/cluster-api-autoscaler-node-group-{min,max}-size` (0 / None when absent).
- Nodes of a pool = `status.nodeRef.name` of the Machines labelled
  `cluster.x-k8s.io/deployment-name=<pool>`.
- Shrinking by k (engine-semantics §5.1): `prepare_removal` annotates the chosen Machines with
  `cluster.x-k8s.io/delete-machine` (value: when), the engine drains them, then `remove_nodes`
  lowers replicas by k; the MachineSet controller deletes annotated Machines first (priority 80,
  above every unmarked one), so exactly the chosen ones go. That lowering is one merge-patch of
  the MachineDeployment that also records the Machines already accounted for (annotation
  `scalebot.io/removed-machines`), so a repeated `remove_nodes` after a crash never subtracts twice.
- A scale-down that fails or is cancelled before the lowering takes its marks back
  (`cancel_removal`), as cluster-autoscaler does: only the marks scalebot wrote, which carry
  `scalebot.io/delete-machine-mark` beside them (a Machine marked by someone else is skipped when
  marking, so it never gets ours, and keeps its mark).
- Autoscaler bounds: a min-size above the target would make cluster-autoscaler refuse or undo the
  shrink, so going to 0 writes min-size "0" in the same patch; the original values are kept in the
  restore record's `extra` (`autoscalerMinSize` / `autoscalerMaxSize`) and `set_size` puts the
  min-size back when the pool grows again (unless someone changed it meanwhile). Between 0 and
  the min-size a size is refused with cluster-autoscaler's phrase, "min size reached".
- The restore record is the annotation `scalebot.io/restore` on the MachineDeployment, written only
  if absent. `set_size` patches the scale subresource. Every write is a merge patch with the field
  manager "scalebot"; read-modify-write patches carry the resourceVersion read, and retry on 409.

One module over 600 lines on purpose: it is one provider, and its reads, removal marks and resizes
share the scoping to one Cluster and the annotation rules above, which only make sense together.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from kubernetes import client as k8s

from engine.domain.clock import Clock, SystemClock
from engine.domain.durations import DurationError, parse_duration
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import RawObject, format_time
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.kube.inline_kubeconfig import (
    InlineKubeconfig,
    UntrustedKubeconfigError,
    check_endpoint,
    parse_inline_kubeconfig,
)
from engine.pools.base import RESTORE_ANNOTATION, Pool, PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.common import (
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    FIELD_MANAGER,
    MERGE_PATCH,
    NodeRemovalError,
    RawCaller,
    decode_restore,
    encode_restore,
)
from engine.pools.victims import DELETE_MACHINE_ANNOTATION, POLICIES, DeletionPolicy, VictimHints

log = logging.getLogger(__name__)

PROVIDER_NAME = "capi"
GROUP = "cluster.x-k8s.io"
PREFERRED_VERSIONS = ("v1beta2", "v1beta1")
MACHINE_DEPLOYMENTS = "machinedeployments"
MACHINES = "machines"
CLUSTERS = "clusters"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
EXCLUDE_NODE_DRAINING = "machine.cluster.x-k8s.io/exclude-node-draining"
PRE_DRAIN_HOOK_PREFIX = "pre-drain.delete.hook.machine.cluster.x-k8s.io"
EXCLUDE_VOLUME_DETACH = "machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach"
KUBECONFIG_SECRET_SUFFIX = "-kubeconfig"
KUBECONFIG_SECRET_KEY = "value"
MIN_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
REMOVED_MACHINES_ANNOTATION = "scalebot.io/removed-machines"
OWN_MARK_ANNOTATION = "scalebot.io/delete-machine-mark"
"""Written with the delete-machine mark, in the same patch: the mark is scalebot's to take back."""
EXTRA_MIN_SIZE = "autoscalerMinSize"
EXTRA_MAX_SIZE = "autoscalerMaxSize"
UNHEALTHY_CONDITIONS = frozenset({"NodeHealthy", "HealthCheckSucceeded", "MachineHealthCheckSucceeded"})
NODE_READY_CONDITIONS = ("NodeReady", "NodeHealthy")
"""v1beta2 reports the Node's Ready as NodeReady; v1beta1 only has NodeHealthy."""
DEFAULT_DELETION_ORDER: DeletionPolicy = "Random"
CONFLICT_ATTEMPTS = 5


class ClusterApiUnavailable(ScalebotError, LookupError):
    """The API server serves no cluster.x-k8s.io version scalebot understands."""

    category = Category.CONFIGURATION


class WorkloadKubeconfigError(ScalebotError, LookupError):
    """The Cluster's kubeconfig Secret is missing, unreadable or has no `value` key."""

    category = Category.CONFIGURATION


def workload_kubeconfig(
    api_client: Any, namespace: str, cluster: str, *, timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
) -> InlineKubeconfig:
    """The workload cluster's kubeconfig from the management cluster, as clusterctl reads it:
    Secret `<cluster>-kubeconfig` in the Cluster's namespace, data key `value`.

    Whoever can write that Secret must not get scalebot's privileges: the document is read as data
    only (`engine.kube.inline_kubeconfig`: no exec plugin, auth provider, file path or proxy), and
    its server must be the Cluster's `spec.controlPlaneEndpoint` (the address Cluster API itself
    writes into the kubeconfig, `https://host:port`). Raises WorkloadKubeconfigError naming the
    Secret and what to change."""
    name = cluster + KUBECONFIG_SECRET_SUFFIX
    where = f"Secret {namespace}/{name}"
    call = RawCaller(api_client, timeout)
    try:
        raw = call("get", "secrets", k8s.CoreV1Api(api_client).read_namespaced_secret, name, namespace)
    except errors.NotFound:
        raise WorkloadKubeconfigError(
            f"{where} not found in the management cluster: is {namespace}/{cluster} a "
            "Cluster API Cluster? (or give the workload cluster's kubeconfig explicitly)"
        ) from None
    except errors.Forbidden as exc:
        raise WorkloadKubeconfigError(
            f"reading {where} was refused ({exc}); grant scalebot `get` on it "
            "(a Role in that namespace with resourceNames) or give the workload kubeconfig explicitly"
        ) from None
    encoded = (raw.get("data") or {}).get(KUBECONFIG_SECRET_KEY)
    if not encoded:
        raise WorkloadKubeconfigError(f"{where} has no data key '{KUBECONFIG_SECRET_KEY}'")
    try:
        text = base64.b64decode(encoded).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise WorkloadKubeconfigError(f"{where}: '{KUBECONFIG_SECRET_KEY}' is not text") from exc
    try:
        kubeconfig = parse_inline_kubeconfig(text, where=where)
        host, port = _control_plane_endpoint(call, api_client, namespace, cluster)
        owner = f"Cluster {namespace}/{cluster}'s spec.controlPlaneEndpoint"
        check_endpoint(kubeconfig, host, port, where=where, owner=owner)
    except UntrustedKubeconfigError as exc:
        raise WorkloadKubeconfigError(str(exc)) from None
    return kubeconfig


def _control_plane_endpoint(
    call: RawCaller, api_client: Any, namespace: str, cluster: str
) -> tuple[str, int]:
    """The Cluster's `spec.controlPlaneEndpoint` (host, port): where Cluster API says its API
    server is, and so the only server its kubeconfig Secret may name."""
    version = served_version(call, k8s.ApisApi(api_client))
    custom = k8s.CustomObjectsApi(api_client)
    try:
        raw = call(
            "get", CLUSTERS, custom.get_namespaced_custom_object, GROUP, version, namespace, CLUSTERS, cluster
        )
    except errors.NotFound:
        raise WorkloadKubeconfigError(
            f"Cluster {namespace}/{cluster} not found in the management cluster: check capi_cluster"
        ) from None
    except errors.Forbidden as exc:
        raise WorkloadKubeconfigError(
            f"reading Cluster {namespace}/{cluster} was refused ({exc}); grant scalebot `get` on "
            "clusters.cluster.x-k8s.io in that namespace (manifests/grants/capi-workload-kubeconfig), "
            "which checks the kubeconfig Secret's server against spec.controlPlaneEndpoint"
        ) from None
    endpoint = (raw.get("spec") or {}).get("controlPlaneEndpoint") or {}
    host, port = endpoint.get("host"), endpoint.get("port")
    return (host if isinstance(host, str) else ""), (port if isinstance(port, int) else 0)


def served_version(call: RawCaller, apis: Any) -> str:
    """The newest cluster.x-k8s.io version the API server serves that scalebot knows."""
    groups = call("get", "apis", apis.get_api_versions)
    served: set[str] = set()
    for group in groups.get("groups") or ():
        if group.get("name") == GROUP:
            served = {v.get("version") for v in group.get("versions") or ()}
    for version in PREFERRED_VERSIONS:
        if version in served:
            return version
    raise ClusterApiUnavailable(
        f"the API server serves no {GROUP} version scalebot supports ({', '.join(PREFERRED_VERSIONS)}); "
        f"served: {', '.join(sorted(served)) or 'none'} - is Cluster API installed in this cluster?"
    )


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """The fields of one Machine the provider decides on."""

    namespace: str
    name: str
    pool: str
    node: str
    """`status.nodeRef.name`; empty until the Machine has a Node."""
    deleting: bool = False
    marked: bool = False
    """Carries the `cluster.x-k8s.io/delete-machine` annotation."""
    marked_by_us: bool = False
    """That mark was written by scalebot's `prepare_removal` (`scalebot.io/delete-machine-mark`)."""
    unhealthy: bool = False
    node_ready: bool = False
    exclude_drain: bool = False
    """Carries `machine.cluster.x-k8s.io/exclude-node-draining`: Cluster API removes it undrained."""
    pre_drain_hooks: tuple[str, ...] = ()
    """Its `pre-drain.delete.hook.machine.cluster.x-k8s.io[/name]` annotations."""
    exclude_detach_wait: bool = False
    deletion_condition: str = ""
    """While deleting: Cluster API's own account (v1beta2 `Deleting`, v1beta1 `DrainingSucceeded`)."""

    @classmethod
    def from_raw(cls, raw: RawObject, pool: str) -> MachineInfo:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        node = str((status.get("nodeRef") or {}).get("name") or "")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            pool=pool,
            node=node,
            deleting=bool(meta.get("deletionTimestamp")),
            marked=DELETE_MACHINE_ANNOTATION in (meta.get("annotations") or {}),
            marked_by_us=OWN_MARK_ANNOTATION in (meta.get("annotations") or {}),
            unhealthy=not node or any(conditions.get(t) == "False" for t in UNHEALTHY_CONDITIONS),
            node_ready=any(conditions.get(t) == "True" for t in NODE_READY_CONDITIONS),
            exclude_drain=EXCLUDE_NODE_DRAINING in (meta.get("annotations") or {}),
            pre_drain_hooks=tuple(
                sorted(k for k in meta.get("annotations") or {} if k.startswith(PRE_DRAIN_HOOK_PREFIX))
            ),
            deletion_condition=_deletion_condition(status) if meta.get("deletionTimestamp") else "",
            exclude_detach_wait=EXCLUDE_VOLUME_DETACH in (meta.get("annotations") or {}),
        )


@dataclass(frozen=True, slots=True)
class _Change:
    """What one guarded patch of a MachineDeployment writes: annotations (None deletes one), and
    optionally spec.replicas; `note` is logged once it is written."""

    annotations: Mapping[str, str | None]
    replicas: int | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class _Deployment:
    """One MachineDeployment as read: what the provider needs, and its resourceVersion."""

    namespace: str
    name: str
    resource_version: str
    replicas: int
    annotations: Mapping[str, str]
    deletion_order: DeletionPolicy
    drain_timeout_seconds: int | None = None
    detach_timeout_seconds: int | None = None

    @classmethod
    def from_raw(cls, raw: RawObject) -> _Deployment:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        replicas = spec.get("replicas")
        if replicas is None:  # unset until defaulted; the scale subresource then reports status
            replicas = (raw.get("status") or {}).get("replicas") or 0
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            replicas=int(replicas),
            annotations=meta.get("annotations") or {},
            deletion_order=_deletion_order(spec),
            drain_timeout_seconds=_drain_timeout(spec),
            detach_timeout_seconds=_drain_timeout(spec, "nodeVolumeDetachTimeout"),
        )

    @property
    def min_size(self) -> int:
        return _int_annotation(self.annotations, MIN_SIZE_ANNOTATION) or 0

    @property
    def max_size(self) -> int | None:
        return _int_annotation(self.annotations, MAX_SIZE_ANNOTATION)

    @property
    def removed_machines(self) -> frozenset[str]:
        text = self.annotations.get(REMOVED_MACHINES_ANNOTATION)
        if not text:
            return frozenset()
        try:
            return frozenset(str(n) for n in orjson.loads(text))
        except (orjson.JSONDecodeError, TypeError):
            return frozenset()


class ClusterApiPoolProvider:
    """PoolProvider over Cluster API MachineDeployments (see the module docstring)."""

    name = PROVIDER_NAME

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str | None = None,
        cluster: str | None = None,
        node_api: KubeApi | None = None,
        version: str | None = None,
        clock: Clock | None = None,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`api_client`: a `kubernetes.client.ApiClient` for the cluster holding the Machines.

        `node_api` (optional) reads the workload cluster's Nodes for `ready_nodes`; without it,
        readiness comes from the Machines' NodeReady condition. `version` skips discovery.
        `cluster` (with `namespace`): the Cluster whose MachineDeployments are the pools.
        """
        if cluster and not namespace:
            raise ValueError("a Cluster is named by namespace and name")
        self.cluster = cluster
        self._custom = k8s.CustomObjectsApi(api_client)
        self._apis = k8s.ApisApi(api_client)
        self._call = RawCaller(api_client, request_timeout_seconds)
        self._node_api = node_api
        self._clock: Clock = clock or SystemClock()
        self._version = version
        self.namespace = namespace

    # -- discovery ---------------------------------------------------------------------------------

    @property
    def version(self) -> str:
        """The cluster.x-k8s.io version used: the newest served one scalebot knows (cached)."""
        if self._version is None:
            self._version = self._discover_version()
        return self._version

    def _discover_version(self) -> str:
        return served_version(self._call, self._apis)

    # -- reads -------------------------------------------------------------------------------------

    def list_pools(self) -> list[Pool]:
        deployments = [_Deployment.from_raw(r) for r in self.list_raw(MACHINE_DEPLOYMENTS, None)]
        machines = self._machines_by_pool(self.list_raw(MACHINES, DEPLOYMENT_NAME_LABEL))
        ready = self._ready_nodes()
        pools = [self._pool(d, machines.get(self._pool_name(d)), ready) for d in deployments]
        return sorted(pools, key=lambda p: p.name)

    def get_pool(self, name: str) -> Pool:
        deployment = self._deployment(name)
        return self._pool(deployment, self.machines(name), self._ready_nodes())

    def machines(self, pool: str) -> list[MachineInfo]:
        """The pool's Machines, sorted by name (extra method)."""
        namespace, name = self._split(pool)
        raws = self.list_raw(MACHINES, f"{DEPLOYMENT_NAME_LABEL}={name}", namespace=namespace)
        return sorted((MachineInfo.from_raw(r, pool) for r in raws), key=lambda m: m.name)

    def victim_hints(self, pool: str) -> VictimHints:
        """Machine state by node name, for `choose_victims(..., marked=, deleting=, unhealthy=)`
        (also on every Pool this provider returns, where planning reads it)."""
        return _hints([m for m in self.machines(pool) if m.node])

    def deletion_order(self, pool: str) -> DeletionPolicy:
        """The MachineDeployment's own deletion order (Random when unset), for choose_victims."""
        return self._deployment(pool).deletion_order

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        """Write the record, with the autoscaler annotations' original values, unless one exists."""

        def decide(deployment: _Deployment) -> _Change | None:
            if RESTORE_ANNOTATION in deployment.annotations:
                return None
            originals = {
                EXTRA_MIN_SIZE: deployment.annotations.get(MIN_SIZE_ANNOTATION),
                EXTRA_MAX_SIZE: deployment.annotations.get(MAX_SIZE_ANNOTATION),
            }
            full = replace(record, extra={**record.extra, **originals})
            return _Change(
                {RESTORE_ANNOTATION: encode_restore(full)}, note=f"recorded {encode_restore(full)}"
            )

        return self._update(pool, decide)

    def clear_restore(self, pool: str) -> None:
        def decide(deployment: _Deployment) -> _Change | None:
            if RESTORE_ANNOTATION not in deployment.annotations:
                return None
            return _Change({RESTORE_ANNOTATION: None}, note="cleared the restore record")

        self._update(pool, decide)

    # -- shrinking ---------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Annotate the chosen nodes' Machines `cluster.x-k8s.io/delete-machine` (kept if present)."""
        stamp = format_time(self._clock.now())
        for machine in self._chosen(pool, self.machines(pool), nodes):
            if machine.marked:
                continue
            body = {
                "metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: stamp, OWN_MARK_ANNOTATION: stamp}}
            }
            self._patch(MACHINES, machine.namespace, machine.name, body)
            log.info("Marked Machine %s (Node %s) for deletion", machine.name, machine.node)

    def cancel_removal(self, pool: str, nodes: Sequence[str]) -> tuple[str, ...]:
        """Take back the delete-machine marks `prepare_removal` wrote on these nodes' Machines.

        A mark left behind makes the MachineSet delete that Machine first at its next scale-down,
        whoever asks for it. Marks someone else wrote stay, and so do those of Machines whose
        removal was already counted in replicas (`remove_nodes` ran): they are going.
        Returns the Machines unmarked.
        """
        counted = self._deployment(pool).removed_machines
        unmarked = []
        for machine in self._chosen(pool, self.machines(pool), nodes):
            if not machine.marked_by_us or machine.deleting or machine.name in counted:
                continue
            body = {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: None, OWN_MARK_ANNOTATION: None}}}
            self._patch(MACHINES, machine.namespace, machine.name, body)
            log.info("Took back the deletion mark of Machine %s (Node %s)", machine.name, machine.node)
            unmarked.append(machine.name)
        return tuple(unmarked)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Lower replicas by the chosen Machines not yet accounted for; repeat-safe.

        The Machines already subtracted are listed on the MachineDeployment in the same patch as
        the new replicas, so a retry (before or after the controller deleted them) changes nothing.
        """

        def decide(deployment: _Deployment) -> _Change | None:
            machines = self.machines(pool)
            done = deployment.removed_machines & {m.name for m in machines}
            pending = sorted(m.name for m in self._chosen(pool, machines, nodes) if m.name not in done)
            if not pending:
                return None
            replicas = max(0, deployment.replicas - len(pending))
            annotations = self._bounds_for(pool, deployment, replicas)
            annotations[REMOVED_MACHINES_ANNOTATION] = orjson.dumps(sorted(done | set(pending))).decode()
            note = f"scaled from {deployment.replicas} to {replicas} replicas, removing {', '.join(pending)}"
            return _Change(annotations, replicas=replicas, note=note)

        self._update(pool, decide)

    # -- sizing ------------------------------------------------------------------------------------

    def set_size(self, pool: str, size: int) -> None:
        """Patch the scale subresource to `size`; min-size lowered for 0, restored when growing.

        Order matters to cluster-autoscaler: min-size goes down before the replicas, and back up
        after them, so it never sees replicas below min-size.
        """
        self._update(pool, lambda deployment: self._before_resize(pool, deployment, size))
        deployment = self._deployment(pool)
        if deployment.replicas != size:
            self._patch_scale(deployment, size)
            log.info("MachineDeployment %s scaled from %d to %d replicas", pool, deployment.replicas, size)
        if size > 0:
            self._update(pool, lambda deployment: self._min_size_to_restore(deployment, size))

    def _before_resize(self, pool: str, deployment: _Deployment, size: int) -> _Change | None:
        """Bounds check; min-size "0" for a zero; a new absolute size also ends any removal ledger."""
        annotations = self._bounds_for(pool, deployment, size)
        if REMOVED_MACHINES_ANNOTATION in deployment.annotations:
            annotations[REMOVED_MACHINES_ANNOTATION] = None
        return _Change(annotations, note=f"prepared for {size} replicas") if annotations else None

    def _min_size_to_restore(self, deployment: _Deployment, size: int) -> _Change | None:
        """The min-size we lowered to "0", if nobody changed it since and it fits `size`."""
        text = deployment.annotations.get(RESTORE_ANNOTATION)
        if text is None or deployment.annotations.get(MIN_SIZE_ANNOTATION) != "0":
            return None
        original = decode_restore(text, where=self._where(deployment)).extra.get(EXTRA_MIN_SIZE)
        if original is None or original == "0":
            return None
        if _int_or_none(original) is None or size < int(original):
            log.warning(
                "Not restoring min-size %r of %s: it does not fit %d replicas",
                original,
                deployment.name,
                size,
            )
            return None
        return _Change({MIN_SIZE_ANNOTATION: str(original)}, note=f"restored min-size {original}")

    # -- plumbing: pools ---------------------------------------------------------------------------

    def _pool(
        self, deployment: _Deployment, machines: Sequence[MachineInfo] | None, ready: frozenset[str] | None
    ) -> Pool:
        name = self._pool_name(deployment)
        with_nodes = [m for m in machines or () if m.node]
        nodes = tuple(sorted(m.node for m in with_nodes))
        if ready is None:
            ready_nodes = tuple(sorted(m.node for m in with_nodes if m.node_ready))
        else:
            ready_nodes = tuple(n for n in nodes if n in ready)
        text = deployment.annotations.get(RESTORE_ANNOTATION)
        return Pool(
            name=name,
            provider=self.name,
            desired=deployment.replicas,
            min_size=deployment.min_size,
            max_size=deployment.max_size,
            nodes=nodes,
            ready_nodes=ready_nodes,
            restore=None if text is None else decode_restore(text, where=self._where(deployment)),
            deletion_order=deployment.deletion_order,
            victim_hints=_hints(with_nodes),
            drain_excluded=frozenset(m.node for m in with_nodes if m.exclude_drain),
            drain_timeout_seconds=deployment.drain_timeout_seconds,
            pre_drain_hooks=tuple(
                sorted((m.node, m.pre_drain_hooks) for m in with_nodes if m.pre_drain_hooks)
            ),
            detach_wait=frozenset(m.node for m in with_nodes if not m.exclude_detach_wait),
            detach_timeout_seconds=deployment.detach_timeout_seconds,
            progress="; ".join(
                f"Machine {m.name}: {m.deletion_condition}" for m in with_nodes if m.deletion_condition
            ),
        )

    def _pool_name(self, deployment: _Deployment) -> str:
        return deployment.name if self.namespace else f"{deployment.namespace}/{deployment.name}"

    def _split(self, pool: str) -> tuple[str, str]:
        """(namespace, name) of a pool name; PoolNotFound when it cannot name a deployment."""
        if self.namespace:
            if "/" in pool:
                raise PoolNotFound(pool, [p.name for p in self.list_pools()])
            return self.namespace, pool
        namespace, _, name = pool.partition("/")
        if not name:
            raise PoolNotFound(pool, [p.name for p in self.list_pools()])
        return namespace, name

    def _deployment(self, pool: str) -> _Deployment:
        namespace, name = self._split(pool)
        call = self._custom.get_namespaced_custom_object
        try:
            raw = self._call(
                "get", MACHINE_DEPLOYMENTS, call, GROUP, self.version, namespace, MACHINE_DEPLOYMENTS, name
            )
        except errors.NotFound:
            raise PoolNotFound(pool, [p.name for p in self.list_pools()]) from None
        labels = (raw.get("metadata") or {}).get("labels") or {}
        if self.cluster and labels.get(CLUSTER_NAME_LABEL) != self.cluster:
            # Another Cluster's MachineDeployment in the same namespace: not a pool of this one.
            raise PoolNotFound(pool, [p.name for p in self.list_pools()])
        return _Deployment.from_raw(raw)

    def _machines_by_pool(self, raws: Sequence[RawObject]) -> dict[str, list[MachineInfo]]:
        grouped: dict[str, list[MachineInfo]] = {}
        for raw in raws:
            meta = raw.get("metadata") or {}
            deployment = (meta.get("labels") or {}).get(DEPLOYMENT_NAME_LABEL, "")
            pool = deployment if self.namespace else f"{meta.get('namespace', '')}/{deployment}"
            grouped.setdefault(pool, []).append(MachineInfo.from_raw(raw, pool))
        return grouped

    def _ready_nodes(self) -> frozenset[str] | None:
        if self._node_api is None:
            return None
        return frozenset(n.name for n in self._node_api.list_nodes() if n.ready == "True")

    def _chosen(self, pool: str, machines: Sequence[MachineInfo], nodes: Sequence[str]) -> list[MachineInfo]:
        """The Machines behind `nodes`; nodes whose Machine is gone are skipped (already removed).

        A node whose Machine belongs to another pool (or to no MachineDeployment) is refused:
        annotating or counting it would shrink the wrong pool.
        """
        wanted = set(nodes)
        own = {m.node: m for m in machines if m.node in wanted}
        strangers = wanted - set(own)
        if strangers:
            namespace = self._split(pool)[0]
            others = {
                str(((r.get("status") or {}).get("nodeRef") or {}).get("name") or ""): r
                for r in self.list_raw(MACHINES, None, namespace=namespace)
            }
            misplaced = sorted(n for n in strangers if n in others)
            if misplaced:
                raise NodeRemovalError(f"nodes not in MachineDeployment {pool}: {', '.join(misplaced)}")
        return [own[n] for n in sorted(own)]

    # -- plumbing: autoscaler bounds ---------------------------------------------------------------

    def _bounds_for(self, pool: str, deployment: _Deployment, size: int) -> dict[str, str | None]:
        """Annotation changes `size` needs: {} within bounds, min-size "0" for an explicit zero.

        Raises PoolSizeError above max-size, below 0, or between 0 and min-size.
        """
        if size < 0:
            raise PoolSizeError(f"pool {pool}: size must be 0 or more, not {size}")
        maximum = deployment.max_size
        if maximum is not None and size > maximum:
            raise PoolSizeError(f"pool {pool}: max size reached: {size} is above the max-size {maximum}")
        if size >= deployment.min_size:
            return {}
        if size > 0:
            raise PoolSizeError(
                f"pool {pool}: min size reached, nodes will not be deleted: "
                f"{size} is below the min-size {deployment.min_size} (only a scale to 0 lowers it)"
            )
        self._require_recorded_min(pool, deployment)
        return {MIN_SIZE_ANNOTATION: "0"}

    def _require_recorded_min(self, pool: str, deployment: _Deployment) -> None:
        """Lowering min-size to 0 loses it unless the restore record already holds the original."""
        text = deployment.annotations.get(RESTORE_ANNOTATION)
        if text is None or EXTRA_MIN_SIZE not in decode_restore(text, where=self._where(deployment)).extra:
            raise PoolSizeError(
                f"pool {pool}: going to 0 lowers its min-size {deployment.min_size} to 0; record the "
                "restore state first (record_restore) so that wake can put it back"
            )

    # -- plumbing: writes --------------------------------------------------------------------------

    def _update(self, pool: str, decide: Callable[[_Deployment], _Change | None]) -> bool:
        """Read, decide, merge-patch guarded by the resourceVersion read; re-read and retry on 409.

        Returns False when `decide` found nothing to change.
        """
        for _ in range(CONFLICT_ATTEMPTS):
            deployment = self._deployment(pool)
            change = decide(deployment)
            if change is None:
                return False
            meta = {"resourceVersion": deployment.resource_version, "annotations": dict(change.annotations)}
            body: dict[str, Any] = {"metadata": meta}
            if change.replicas is not None:
                body["spec"] = {"replicas": change.replicas}
            try:
                self._patch(MACHINE_DEPLOYMENTS, deployment.namespace, deployment.name, body)
            except errors.Conflict:
                continue
            log.info("MachineDeployment %s: %s", pool, change.note)
            return True
        raise errors.Conflict(status=409, message=f"MachineDeployment {pool} kept changing; try again")

    def _patch(self, plural: str, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        call = self._custom.patch_namespaced_custom_object
        self._call(
            "patch",
            plural,
            call,
            GROUP,
            self.version,
            namespace,
            plural,
            name,
            dict(body),
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    def _patch_scale(self, deployment: _Deployment, size: int) -> None:
        call = self._custom.patch_namespaced_custom_object_scale
        self._call(
            "patch",
            f"{MACHINE_DEPLOYMENTS}/scale",
            call,
            GROUP,
            self.version,
            deployment.namespace,
            MACHINE_DEPLOYMENTS,
            deployment.name,
            {"spec": {"replicas": size}},
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    def list_raw(
        self, plural: str, label_selector: str | None, *, namespace: str | None = None
    ) -> list[RawObject]:
        namespace = namespace or self.namespace
        selectors = [s for s in (label_selector, self._cluster_selector()) if s]
        params = {"label_selector": ",".join(selectors)} if selectors else {}
        if namespace:
            in_namespace = self._custom.list_namespaced_custom_object
            page = self._call("list", plural, in_namespace, GROUP, self.version, namespace, plural, **params)
        else:
            everywhere = self._custom.list_cluster_custom_object
            page = self._call("list", plural, everywhere, GROUP, self.version, plural, **params)
        return list(page.get("items") or ())

    def _cluster_selector(self) -> str:
        return f"{CLUSTER_NAME_LABEL}={self.cluster}" if self.cluster else ""

    @staticmethod
    def _where(deployment: _Deployment) -> str:
        return f"MachineDeployment {deployment.namespace}/{deployment.name}"


def _hints(machines: Sequence[MachineInfo]) -> VictimHints:
    return VictimHints(
        marked=frozenset(m.node for m in machines if m.marked),
        deleting=frozenset(m.node for m in machines if m.deleting),
        unhealthy=frozenset(m.node for m in machines if m.unhealthy),
    )


def _deletion_condition(status: Mapping[str, Any]) -> str:
    """The Machine controller's words on its deletion: v1beta2 `Deleting` (reason and message),
    else v1beta1's `DrainingSucceeded` (also kept under `status.deprecated.v1beta1`)."""
    legacy = ((status.get("deprecated") or {}).get("v1beta1") or {}).get("conditions") or ()
    for wanted in ("Deleting", "DrainingSucceeded"):
        for condition in (*(status.get("conditions") or ()), *legacy):
            if condition.get("type") == wanted:
                text = f"{wanted} {condition.get('status', '')}"
                why = ": ".join(str(condition[k]) for k in ("reason", "message") if condition.get(k))
                return f"{text} ({why})" if why else text
    return ""


def _drain_timeout(spec: Mapping[str, Any], field: str = "nodeDrainTimeout") -> int | None:
    """A Machine deletion timeout from the template: v1beta2 `deletion.<field>Seconds`, v1beta1
    `<field>` (a duration); 0 or unset means none, as in Cluster API."""
    machine = (spec.get("template") or {}).get("spec") or {}
    seconds = (machine.get("deletion") or {}).get(f"{field}Seconds")
    if seconds is None and machine.get(field):
        try:
            seconds = int(parse_duration(str(machine[field])).total_seconds())
        except DurationError:
            log.warning("Ignoring %s %r: not a duration", field, machine[field])
            return None
    return int(seconds) if seconds else None


def _deletion_order(spec: Mapping[str, Any]) -> DeletionPolicy:
    """v1beta2 `spec.deletion.order`, v1beta1 `spec.strategy.rollingUpdate.deletePolicy`."""
    order = (spec.get("deletion") or {}).get("order")
    if order is None:
        order = ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("deletePolicy")
    for policy in POLICIES:
        if order == policy:
            return policy
    return DEFAULT_DELETION_ORDER


def _int_annotation(annotations: Mapping[str, str], key: str) -> int | None:
    value = _int_or_none(annotations.get(key))
    if value is None and annotations.get(key) is not None:
        log.warning("Ignoring annotation %s=%r: not a whole number", key, annotations.get(key))
    return value


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None

"""Karpenter node pools: the `karpenter` PoolProvider over NodePools (karpenter.sh/v1).

A dynamic NodePool has no desired size: Karpenter creates a NodeClaim (and through it a node) for
pods that are pending, and removes nodes it finds empty or underused. So a NodePool can be put to
sleep and woken, but not resized to a number: this provider marks its pools `sizes_from_demand`,
and planning refuses `scale POOL N` for N > 0.

- A pool is a NodePool (cluster-scoped; the pool name is the NodePool's name). Its nodes are the
  `status.nodeName` of the NodeClaims labelled `karpenter.sh/nodepool=<pool>`; desired = the number
  of those NodeClaims, terminating ones included (a zero-scale is complete once they are gone).
- Asleep: before anything else changes, `prepare_removal` (and `set_size(pool, 0)`) writes the
  NodePool's `spec.limits` and `spec.disruption` to the annotation `scalebot.io/karpenter-saved`,
  in the same guarded patch that sets `limits` to `cpu: 0, nodes: 0` (no instance type fits: nothing
  new is provisioned, even for pending pods) and one disruption budget `nodes: "0"` (Karpenter's own
  consolidation and drift do not replace or remove nodes while scalebot drains them; budgets never
  hold back the NodeClaim deletes below). An existing saved annotation is never overwritten, so a
  second zero-scale keeps the day-time settings.
- `remove_nodes` deletes the NodeClaims of the drained nodes, and those that have no node yet:
  Karpenter's termination controller then deletes the nodes and the instances behind them (the
  engine has already drained them, honouring PodDisruptionBudgets and do-not-disrupt). Deleting
  the NodePool is never an option: its configuration and every node would go with it.
- Waking (`set_size(pool, n > 0)`) puts the saved `limits` and `disruption` back and drops the
  saved annotation; Karpenter then provisions for whatever is pending. `n` is not a node count
  Karpenter could be asked for; the runner follows the capacity coming back through
  `Pool.pending_pods` and the pool's Ready nodes. `pending_pods` counts only the pending pods this
  NodePool could serve (node selector, required node affinity and tolerations against its
  template's labels, requirements and taints), so a pod no node of it would take does not hold a
  wake until its ready timeout.
- A static NodePool (`spec.replicas`, alpha: Karpenter keeps that many nodes whatever the demand,
  and rejects cpu limits on it) is not a pool here: it is left out of `list_pools` (planning then
  refuses it as an unknown pool), and `get_pool` raises StaticNodePool, a PoolNotFound saying why.
- The restore record (`scalebot.io/restore`, the sizes wake reads) lives on the NodePool too,
  written only if absent. Every write is a merge patch with the field manager "scalebot";
  read-modify-write patches carry the resourceVersion read, and retry on 409.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from kubernetes import client as k8s

from engine.domain.errors import Category, ScalebotError
from engine.domain.model import PodInfo, RawObject, Taint
from engine.kube import errors, projection
from engine.kube.api import KubeApi
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

log = logging.getLogger(__name__)

PROVIDER_NAME = "karpenter"
GROUP = "karpenter.sh"
VERSION = "v1"
NODEPOOLS = "nodepools"
NODECLAIMS = "nodeclaims"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
SAVED_ANNOTATION = "scalebot.io/karpenter-saved"
"""JSON {"limits": ..., "disruption": ...}: the NodePool's settings before scalebot capped it."""
ASLEEP_LIMITS: Mapping[str, str] = {"cpu": "0", "nodes": "0"}
"""No instance type fits a cpu limit of 0; `nodes` is the same cap spelled for node counts."""
ASLEEP_BUDGETS: tuple[Mapping[str, str], ...] = ({"nodes": "0"},)
PENDING_PODS_SELECTOR = "spec.nodeName=,status.phase=Pending"
CONFLICT_ATTEMPTS = 5


class KarpenterUnavailable(ScalebotError, LookupError):
    """The API server does not serve karpenter.sh/v1 NodePools (Karpenter is not installed)."""

    category = Category.CONFIGURATION


class StaticNodePool(PoolNotFound):
    """A static NodePool (`spec.replicas`): Karpenter keeps a fixed node count there, which this
    provider does not drive (capping its limits would not stop it, and Karpenter rejects cpu limits
    on it); it is no pool of scalebot's and is refused by name."""

    def __init__(self, name: str, replicas: int) -> None:
        LookupError.__init__(
            self,
            f"NodePool {name} is static (spec.replicas: {replicas}): Karpenter keeps that many nodes "
            "whatever the demand, and scalebot does not scale static NodePools; change spec.replicas "
            "yourself (zero and wake leave it as it is)",
        )
        self.name = name
        self.known = ()


WELL_KNOWN_LABELS = frozenset(
    {
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    }
)
"""Labels Karpenter sets from the instance type it picks, whether or not the NodePool names them."""


@dataclass(frozen=True, slots=True)
class NodePoolTemplate:
    """What a NodePool's nodes can carry: template labels, requirements and taints."""

    pool: str
    labels: Mapping[str, str]
    requirements: tuple[Mapping[str, Any], ...]
    taints: tuple[Taint, ...]

    @classmethod
    def from_spec(cls, pool: str, spec: Mapping[str, Any]) -> NodePoolTemplate:
        template = spec.get("template") or {}
        inner = template.get("spec") or {}
        return cls(
            pool=pool,
            labels=dict((template.get("metadata") or {}).get("labels") or {}),
            requirements=tuple(inner.get("requirements") or ()),
            taints=tuple(
                Taint(key=t.get("key") or "", effect=t.get("effect") or "", value=t.get("value") or "")
                for t in inner.get("taints") or ()
            ),
        )

    def allows(self, key: str, operator: str, values: Sequence[str]) -> bool:
        """Could a node of this NodePool satisfy `key <operator> values`? (Unknown: yes.)"""
        if key == NODEPOOL_LABEL:
            return _matches({self.pool}, operator, values)
        if key in self.labels:
            return _matches({self.labels[key]}, operator, values)
        rules = [r for r in self.requirements if r.get("key") == key]
        if rules:
            return all(_requirement_allows(r, operator, values) for r in rules)
        if key in WELL_KNOWN_LABELS or key.split("/", 1)[0].startswith("karpenter."):
            return True  # the cloud provider decides which values its instance types bring
        # A label the NodePool never puts on its nodes: only its absence can match.
        return operator in ("NotIn", "DoesNotExist")

    def could_serve(self, pod: PodInfo) -> bool:
        """A pending pod this NodePool could make a node for: its node selector, required node
        affinity and tolerations against the template. Sizes are not checked (instance types vary)."""
        asks = pod.scheduling
        if any(not self.allows(k, "In", [v]) for k, v in asks.node_selector.items()):
            return False
        # matchFields name existing nodes (metadata.name): a node Karpenter would make is not judged on them.
        terms = asks.node_affinity or ()
        if terms and not any(
            all(self.allows(r.key, r.operator, r.values) for r in term.requirements if not r.field)
            for term in terms
        ):
            return False
        return all(asks.tolerates(taint) for taint in self.taints if taint.repels_pods)


def _matches(present: set[str], operator: str, values: Sequence[str]) -> bool:
    if operator == "In":
        return bool(present & set(values))
    if operator == "NotIn":
        return not present & set(values)
    if operator == "Exists":
        return bool(present)
    if operator == "DoesNotExist":
        return not present
    return True  # Gt / Lt: numeric, left to Karpenter


def _requirement_allows(rule: Mapping[str, Any], operator: str, values: Sequence[str]) -> bool:
    """Whether a NodePool requirement leaves room for `operator values` on the same key."""
    kind = rule.get("operator")
    offered = set(rule.get("values") or ())
    if kind == "In":
        return _matches(offered, operator, values) if operator != "NotIn" else bool(offered - set(values))
    if kind == "DoesNotExist":
        return operator in ("NotIn", "DoesNotExist")
    if kind == "NotIn" and operator == "In":
        return bool(set(values) - offered)
    return True  # Exists, NotIn, Gt, Lt: many values remain possible


@dataclass(frozen=True, slots=True)
class _NodePool:
    name: str
    resource_version: str
    annotations: Mapping[str, str]
    limits: Mapping[str, Any] | None
    disruption: Mapping[str, Any] | None
    template: NodePoolTemplate
    replicas: int | None = None
    """`spec.replicas` of a static NodePool (alpha); None for a dynamic one."""

    @classmethod
    def from_raw(cls, raw: RawObject) -> _NodePool:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        replicas = spec.get("replicas")
        name = str(meta.get("name") or "")
        return cls(
            name=name,
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations=meta.get("annotations") or {},
            limits=spec.get("limits"),
            disruption=spec.get("disruption"),
            template=NodePoolTemplate.from_spec(name, spec),
            replicas=None if replicas is None else int(replicas),
        )

    @property
    def capped(self) -> bool:
        return SAVED_ANNOTATION in self.annotations

    @property
    def holds_asleep_settings(self) -> bool:
        limits = self.limits or {}
        budgets = (self.disruption or {}).get("budgets")
        return all(limits.get(k) == v for k, v in ASLEEP_LIMITS.items()) and budgets == list(ASLEEP_BUDGETS)


@dataclass(frozen=True, slots=True)
class _Claim:
    name: str
    pool: str
    node: str
    """`status.nodeName`; empty until the NodeClaim's node has registered."""
    deleting: bool

    @classmethod
    def from_raw(cls, raw: RawObject) -> _Claim:
        meta = raw.get("metadata") or {}
        return cls(
            name=str(meta.get("name") or ""),
            pool=str((meta.get("labels") or {}).get(NODEPOOL_LABEL) or ""),
            node=str((raw.get("status") or {}).get("nodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
        )


@dataclass(frozen=True, slots=True)
class _Patch:
    """One guarded merge patch of a NodePool: metadata annotations (None deletes) and spec fields."""

    annotations: Mapping[str, str | None]
    spec: Mapping[str, Any] | None = None
    note: str = ""


class KarpenterPoolProvider:
    """PoolProvider over Karpenter NodePools (see the module docstring)."""

    name = PROVIDER_NAME

    def __init__(
        self,
        api_client: Any,
        *,
        node_api: KubeApi,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`api_client`: a `kubernetes.client.ApiClient`; `node_api` reads Nodes for readiness."""
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._call = RawCaller(api_client, request_timeout_seconds)
        self._node_api = node_api

    # -- reads -------------------------------------------------------------------------------------

    def list_pools(self) -> list[Pool]:
        """Every dynamic NodePool (static ones, with `spec.replicas`, are no pools of scalebot's)."""
        nodepools = [p for p in (_NodePool.from_raw(r) for r in self._list(NODEPOOLS)) if p.replicas is None]
        claims = [_Claim.from_raw(r) for r in self._list(NODECLAIMS)]
        ready = self._ready_nodes()
        pending = self._pending_pods()
        return sorted((self._pool(p, claims, ready, pending) for p in nodepools), key=lambda p: p.name)

    def get_pool(self, name: str) -> Pool:
        nodepool = self._nodepool(name)
        if nodepool.replicas is not None:
            raise StaticNodePool(name, nodepool.replicas)
        claims = [_Claim.from_raw(r) for r in self._list(NODECLAIMS, f"{NODEPOOL_LABEL}={name}")]
        return self._pool(nodepool, claims, self._ready_nodes(), self._pending_pods())

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        """Write the record (with the NodePool's limits and disruption, for reference) unless one exists."""

        def decide(nodepool: _NodePool) -> _Patch | None:
            if RESTORE_ANNOTATION in nodepool.annotations:
                return None
            saved = self._saved(nodepool)
            full = replace(record, extra={**record.extra, **saved})
            return _Patch({RESTORE_ANNOTATION: encode_restore(full)}, note=f"recorded {encode_restore(full)}")

        return self._update(pool, decide)

    def clear_restore(self, pool: str) -> None:
        def decide(nodepool: _NodePool) -> _Patch | None:
            if RESTORE_ANNOTATION not in nodepool.annotations:
                return None
            return _Patch({RESTORE_ANNOTATION: None}, note="cleared the restore record")

        self._update(pool, decide)

    # -- sleeping ----------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Stop provisioning before the drain: evicted pods must not bring new nodes up."""
        self._claims_for(pool, nodes)  # refuses nodes of another NodePool before anything changes
        self._cap(pool)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Delete the NodeClaims of these drained nodes (and unregistered ones); repeat-safe."""
        self._cap(pool)
        claims = self._claims_for(pool, nodes)
        claims += [c for c in self._claims(pool) if not c.node]
        self._delete_claims(pool, claims)

    def set_size(self, pool: str, size: int) -> None:
        """0: cap the NodePool and delete the NodeClaims that have no node yet. More: uncap it.

        Karpenter sizes a NodePool from pending pods; a size above 0 means "provision again",
        never a node count.
        """
        if size < 0:
            raise PoolSizeError(f"pool {pool}: size must be 0 or more, not {size}")
        if size == 0:
            self._cap(pool)
            self._delete_claims(pool, [c for c in self._claims(pool) if not c.node])
            return
        self._update(pool, self._uncap)

    # -- plumbing ----------------------------------------------------------------------------------

    def _cap(self, pool: str) -> None:
        def decide(nodepool: _NodePool) -> _Patch | None:
            if nodepool.capped and nodepool.holds_asleep_settings:
                return None
            annotations: dict[str, str | None] = {}
            if not nodepool.capped:
                annotations[SAVED_ANNOTATION] = orjson.dumps(self._saved(nodepool)).decode()
            budgets = [dict(b) for b in ASLEEP_BUDGETS]
            spec = {"limits": dict(ASLEEP_LIMITS), "disruption": {"budgets": budgets}}
            note = (
                "limits cpu=0, nodes=0 and a disruption budget of 0 nodes: nothing provisioned or disrupted"
            )
            return _Patch(annotations, spec=spec, note=note)

        self._update(pool, decide)

    @staticmethod
    def _uncap(nodepool: _NodePool) -> _Patch | None:
        text = nodepool.annotations.get(SAVED_ANNOTATION)
        if text is None:
            return None
        try:
            saved = orjson.loads(text)
            limits, disruption = saved["limits"], saved["disruption"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise PoolSizeError(
                f"annotation {SAVED_ANNOTATION} on NodePool {nodepool.name} is not what scalebot wrote "
                f"({exc}); restore spec.limits and spec.disruption by hand, then remove the annotation"
            ) from exc
        # A merge patch merges maps: keys scalebot added and the original lacked must be deleted.
        if limits is None:
            restored_limits: dict[str, Any] | None = None
        else:
            restored_limits = {k: None for k in (nodepool.limits or {}) if k not in limits} | dict(limits)
        if disruption is None:
            restored_disruption: dict[str, Any] | None = {"budgets": None}
        else:
            extra = {k: None for k in (nodepool.disruption or {}) if k not in disruption}
            restored_disruption = extra | dict(disruption)
        spec = {"limits": restored_limits, "disruption": restored_disruption}
        return _Patch({SAVED_ANNOTATION: None}, spec=spec, note="restored its limits and disruption settings")

    @staticmethod
    def _saved(nodepool: _NodePool) -> dict[str, Any]:
        """What capping replaces: the day-time settings (the saved ones once capped)."""
        text = nodepool.annotations.get(SAVED_ANNOTATION)
        if text is not None:
            try:
                saved = orjson.loads(text)
                return {"limits": saved["limits"], "disruption": saved["disruption"]}
            except (orjson.JSONDecodeError, KeyError, TypeError):
                pass
        limits = None if nodepool.limits is None else dict(nodepool.limits)
        disruption = None if nodepool.disruption is None else dict(nodepool.disruption)
        return {"limits": limits, "disruption": disruption}

    def _pool(
        self,
        nodepool: _NodePool,
        claims: Sequence[_Claim],
        ready: frozenset[str],
        pending: Sequence[PodInfo],
    ) -> Pool:
        own = [c for c in claims if c.pool == nodepool.name]
        nodes = tuple(sorted(c.node for c in own if c.node))
        text = nodepool.annotations.get(RESTORE_ANNOTATION)
        return Pool(
            name=nodepool.name,
            provider=self.name,
            desired=len(own),
            nodes=nodes,
            ready_nodes=tuple(n for n in nodes if n in ready),
            restore=None if text is None else decode_restore(text, where=f"NodePool {nodepool.name}"),
            sizes_from_demand=True,
            pending_pods=sum(1 for pod in pending if nodepool.template.could_serve(pod)),
        )

    def _claims(self, pool: str) -> list[_Claim]:
        return [_Claim.from_raw(r) for r in self._list(NODECLAIMS, f"{NODEPOOL_LABEL}={pool}")]

    def _claims_for(self, pool: str, nodes: Sequence[str]) -> list[_Claim]:
        """The NodeClaims behind `nodes`; a node whose NodeClaim is gone is skipped (already removed).

        A node that belongs to another NodePool is refused: deleting its NodeClaim would shrink the
        wrong pool.
        """
        wanted = set(nodes)
        everything = [_Claim.from_raw(r) for r in self._list(NODECLAIMS)]
        misplaced = sorted(c.node for c in everything if c.node in wanted and c.pool != pool)
        if misplaced:
            raise NodeRemovalError(f"nodes not in NodePool {pool}: {', '.join(misplaced)}")
        return [c for c in everything if c.node in wanted]

    def _delete_claims(self, pool: str, claims: Sequence[_Claim]) -> None:
        for claim in sorted({c.name: c for c in claims}.values(), key=lambda c: c.name):
            if claim.deleting:
                continue
            call = self._custom.delete_cluster_custom_object
            try:
                self._call("delete", NODECLAIMS, call, GROUP, VERSION, NODECLAIMS, claim.name)
            except errors.NotFound:
                continue
            log.info(
                "NodePool %s: deleted NodeClaim %s (node %s); Karpenter terminates it",
                pool,
                claim.name,
                claim.node or "not registered",
            )

    def _ready_nodes(self) -> frozenset[str]:
        nodes = self._node_api.list_nodes(label_selector=NODEPOOL_LABEL)
        return frozenset(n.name for n in nodes if n.ready == "True")

    def _pending_pods(self) -> list[PodInfo]:
        """Unscheduled Pending pods (each pool counts those it could serve: NodePoolTemplate), read
        by the one decode of a pod (engine.kube.projection)."""
        call = self._core.list_pod_for_all_namespaces
        data = self._call.read("list", "pods", call, field_selector=PENDING_PODS_SELECTOR)
        return [pod for pod in projection.decode_pod_page(data).items if not pod.is_terminating]

    def _nodepool(self, name: str) -> _NodePool:
        call = self._custom.get_cluster_custom_object
        try:
            raw = self._call("get", NODEPOOLS, call, GROUP, VERSION, NODEPOOLS, name)
        except errors.NotFound:
            raise PoolNotFound(name, [p.name for p in self.list_pools()]) from None
        return _NodePool.from_raw(raw)

    def _list(self, plural: str, label_selector: str | None = None) -> list[RawObject]:
        params = {"label_selector": label_selector} if label_selector else {}
        call = self._custom.list_cluster_custom_object
        try:
            page = self._call("list", plural, call, GROUP, VERSION, plural, **params)
        except errors.NotFound:
            raise KarpenterUnavailable(
                f"the API server does not serve {GROUP}/{VERSION} {plural}: "
                "is Karpenter (v1) installed in this cluster?"
            ) from None
        return list(page.get("items") or ())

    def _update(self, pool: str, decide: Callable[[_NodePool], _Patch | None]) -> bool:
        """Read, decide, merge-patch guarded by the resourceVersion read; re-read and retry on 409."""
        for _ in range(CONFLICT_ATTEMPTS):
            nodepool = self._nodepool(pool)
            change = decide(nodepool)
            if change is None:
                return False
            meta = {"resourceVersion": nodepool.resource_version, "annotations": dict(change.annotations)}
            body: dict[str, Any] = {"metadata": meta}
            if change.spec is not None:
                body["spec"] = dict(change.spec)
            call = self._custom.patch_cluster_custom_object
            try:
                self._call(
                    "patch",
                    NODEPOOLS,
                    call,
                    GROUP,
                    VERSION,
                    NODEPOOLS,
                    pool,
                    body,
                    field_manager=FIELD_MANAGER,
                    _content_type=MERGE_PATCH,
                )
            except errors.Conflict:
                continue
            log.info("NodePool %s: %s", pool, change.note)
            return True
        raise errors.Conflict(status=409, message=f"NodePool {pool} kept changing; try again")

"""Node pools defined by a node label: the `labels` PoolProvider.

A pool is the set of Nodes carrying a label (default `scalebot.io/pool`); the label's value is the
pool's name. This module owns that provider, the ConfigMap that stands in for the pool object
Kubernetes does not have, the node templates kept in it, and the JSON form of the restore record
(`encode_restore` / `decode_restore`, shared with the Cluster API provider).

Sizes. desired = the number of Nodes with the label; min 0; max unknown (None).

Shrinking. The caller has cordoned and drained the nodes (this provider refuses a node that is not
cordoned). What happens next depends on what is behind the nodes, because deleting a Node object
stops no VM by itself (a cloud controller manager deletes Nodes whose instance is gone, never the
reverse):
- NodeRemoval.NODE, the Node object is deleted, when something terminates the machine behind it:
  a Karpenter termination finalizer (`karpenter.sh/termination`), a Cluster API Machine (the
  Node's `cluster.x-k8s.io/machine` annotation), or kwok (the node is simulated: annotation
  `kwok.x-k8s.io/node` or a `kwok://` providerID); or when the cluster's config says
  `node_removal: delete-node`. Every node of the pool must qualify.
- NodeRemoval.EMPTY otherwise (or with `node_removal: empty`): the node stays cordoned and drained,
  marked `scalebot.io/emptied`, so an autoscaler (or a person) can remove it. It no longer counts
  in the pool's nodes or desired size; the plan and the operation say "emptied, not removed".

Growing. A label has no node-group API behind it: Kubernetes cannot create a machine. `set_size`
above the current count first returns emptied nodes to service (uncordon, scalebot's draining
taint and the emptied mark removed), then re-creates Node objects this provider deleted, from
templates recorded before their removal (same names, labels, annotations, taints, capacity), but
only simulated (kwok) ones: on kwok clusters and the sandbox that is exactly a wake-up, while on a
real cloud a Node object without a kubelet behind it would be a lie. A size beyond that raises
PoolSizeError saying what would bring the machines back.

Where the record lives. Each pool that was ever shrunk has a ConfigMap `scalebot-pool-<name>` in
scalebot's namespace:
- annotation `scalebot.io/restore`: the restore record as JSON, written only if absent;
- data `node.<node name>`: one node template each (JSON), written before the node is removed and
  never overwritten while recorded, so the day-time shape survives a second night-time shrink.
  The parsed record exposes them as `extra["nodeTemplates"]`. (Data, not the annotation: annotations
  are capped at 256 KiB in total, a ConfigMap at 1 MiB, about a thousand templates.)
A pool whose nodes are all gone still exists while its ConfigMap does, so `wake` can find it:
`list_pools` merges the nodes' labels and the ConfigMaps.

One module over 600 lines on purpose: it is one provider, and the ConfigMap, its node templates and
the removal rules above are read and written together by every resize and wake.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from kubernetes import client as k8s

from engine.domain.clock import Clock, SystemClock
from engine.domain.model import DRAINING_TAINT_KEY, NodeInfo, RawObject, format_time
from engine.domain.node_removal import NodeRemoval
from engine.drain.passes import uncordon_node
from engine.kube import errors
from engine.kube.api import KubeApi
from engine.pools.base import POOL_LABEL, RESTORE_ANNOTATION, Pool, PoolNotFound, PoolSizeError, RestoreRecord
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
from engine.pools.victims import AUTOSCALER_TAINTS, is_emptying

log = logging.getLogger(__name__)

PROVIDER_NAME = "labels"
DEFAULT_NAMESPACE = "scalebot"
CONFIGMAP_PREFIX = "scalebot-pool-"
TEMPLATE_KEY_PREFIX = "node."
NODE_TEMPLATES_EXTRA = "nodeTemplates"
POOL_NAME_LABEL = "scalebot.io/pool-name"
POOL_LABEL_ANNOTATION = "scalebot.io/pool-label"
EMPTIED_ANNOTATION = "scalebot.io/emptied"
"""On a node emptied and kept (NodeRemoval.EMPTY): when. Out of the pool's count until wake."""
REMOVING_ANNOTATION = "scalebot.io/removing"
"""On a drained node about to be deleted (NodeRemoval.NODE): when scalebot decided to delete it.
Written just before the DELETE because scalebot's admission policy lets its ServiceAccount delete
only a node of a managed pool that carries both this annotation and scalebot's draining taint."""
CORDONED_BEFORE_ANNOTATION = "scalebot.io/cordoned-before"
"""On a node chosen for removal that someone else had cordoned (when scalebot found it so): if it is
emptied, wake returns it to the pool but leaves that cordon, and the operation names it."""
KARPENTER_FINALIZER = "karpenter.sh/termination"
CAPI_MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_PROVIDER_PREFIX = "kwok://"
NODE_REMOVAL_MODES = ("auto", "delete-node", "empty")
"""`node_removal` setting: detect what is behind the nodes, always delete the Node, never delete it."""
CONFLICT_ATTEMPTS = 5

# Node metadata written by kubelets, controllers, drains and tools, not part of what the node "is":
# re-creating a node must not bring back last night's cordon or a stale controller stamp.
NOISE_ANNOTATION_PREFIXES = (
    "kubectl.kubernetes.io/",
    "node.alpha.kubernetes.io/",
    "volumes.kubernetes.io/",
    "csi.volume.kubernetes.io/",
    "alpha.kubernetes.io/",
    "cluster.x-k8s.io/",
)
"""kubectl's last-applied state, the TTL and attach/detach controllers' and the CSI driver's
stamps, and Cluster API's back-references to a Machine that no longer exists. kwok's own
`kwok.x-k8s.io/node` is kept: it is how a kwok set up with an annotation selector finds its nodes."""
NOISE_TAINT_KEYS = frozenset({DRAINING_TAINT_KEY, *AUTOSCALER_TAINTS})
NOISE_TAINT_PREFIX = "node.kubernetes.io/"
"""not-ready, unreachable, unschedulable, *-pressure: set by the node lifecycle controller."""

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_MAX_NAME = 253


def node_backing(raw: RawObject) -> str:
    """What terminates the machine when this Node object is deleted; "" when nothing does."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if KARPENTER_FINALIZER in (meta.get("finalizers") or ()):
        return "Karpenter"
    if annotations.get(CAPI_MACHINE_ANNOTATION):
        return "Cluster API"
    provider_id = str((raw.get("spec") or {}).get("providerID") or "")
    if KWOK_ANNOTATION in annotations or provider_id.startswith(KWOK_PROVIDER_PREFIX):
        return "kwok"
    return ""


def removal_for(raws: Sequence[RawObject], mode: str) -> tuple[NodeRemoval, str]:
    """What removing this pool's nodes does, and why (see the module docstring)."""
    if mode == "delete-node":
        return NodeRemoval.NODE, "node_removal: delete-node"
    if mode == "empty":
        return NodeRemoval.EMPTY, "node_removal: empty"
    backings = [node_backing(raw) for raw in raws]
    unbacked = backings.count("")
    if unbacked:
        return NodeRemoval.EMPTY, (
            f"nothing stops the machine behind {unbacked} of {len(raws)} node(s) when its Node object "
            "is deleted (no Karpenter finalizer, Cluster API Machine or kwok); "
            "set node_removal: delete-node if something does"
        )
    if not backings:
        return NodeRemoval.NODE, ""
    return NodeRemoval.NODE, "nodes managed by " + " and ".join(sorted(set(backings)))


def _name(raw: RawObject) -> str:
    return str((raw.get("metadata") or {}).get("name") or "")


def _is_emptied(raw: RawObject) -> bool:
    return EMPTIED_ANNOTATION in _annotations(raw)


def _annotations(raw: RawObject) -> Mapping[str, str]:
    return (raw.get("metadata") or {}).get("annotations") or {}


def is_simulated_template(template: Mapping[str, Any]) -> bool:
    """A template of a kwok node: re-creating its Node object is what waking it means."""
    return KWOK_ANNOTATION in (template.get("annotations") or {})


# --------------------------------------------------------------------------------------------------
# Node templates


def node_template(raw: RawObject) -> dict[str, Any]:
    """What re-creating this node needs: identity and shape, without runtime noise."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(NOISE_ANNOTATION_PREFIXES) and k != REMOVING_ANNOTATION
    }
    taints = [
        {k: v for k, v in t.items() if k != "timeAdded"}
        for t in (raw.get("spec") or {}).get("taints") or ()
        if t.get("key") not in NOISE_TAINT_KEYS and not str(t.get("key", "")).startswith(NOISE_TAINT_PREFIX)
    ]
    return {
        "name": meta.get("name", ""),
        "labels": dict(meta.get("labels") or {}),
        "annotations": annotations,
        "taints": taints,
        "capacity": dict(status.get("capacity") or {}),
        "allocatable": dict(status.get("allocatable") or {}),
    }


def node_from_template(template: Mapping[str, Any]) -> dict[str, Any]:
    """The Node body to POST. Status is accepted on create (a kubelet registers that way), so
    capacity and allocatable arrive with the node; kwok keeps what it is given."""
    spec = {"taints": list(template.get("taints") or ())} if template.get("taints") else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": template["name"],
            "labels": dict(template.get("labels") or {}),
            "annotations": dict(template.get("annotations") or {}),
        },
        "spec": spec,
        "status": {
            "capacity": dict(template.get("capacity") or {}),
            "allocatable": dict(template.get("allocatable") or {}),
        },
    }


def configmap_name(pool: str) -> str:
    """`scalebot-pool-<pool>`; a pool name that is no valid object name gets a hashed, valid one."""
    name = CONFIGMAP_PREFIX + pool
    if _DNS_SUBDOMAIN.match(name) and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-")[:40]
    return f"{CONFIGMAP_PREFIX}{cleaned}-{digest}".replace("--", "-")


# --------------------------------------------------------------------------------------------------
# The provider


@dataclass(frozen=True, slots=True)
class _Store:
    """One pool's ConfigMap as read: record annotation text, templates, resourceVersion."""

    exists: bool
    resource_version: str = ""
    restore_text: str | None = None
    templates: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class LabelPoolProvider:
    """PoolProvider for pools made of the Nodes that carry `label` (see the module docstring)."""

    name = PROVIDER_NAME

    def __init__(
        self,
        api: KubeApi,
        raw: Any,
        *,
        label: str = POOL_LABEL,
        namespace: str = DEFAULT_NAMESPACE,
        node_removal: str = "auto",
        clock: Clock | None = None,
        request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        """`api` reads and deletes nodes; `raw` is a `kubernetes.client.ApiClient` for node
        templates, node creation and the ConfigMaps in `namespace`. `node_removal`: one of
        NODE_REMOVAL_MODES (see the module docstring)."""
        if node_removal not in NODE_REMOVAL_MODES:
            raise ValueError(f"node_removal: '{node_removal}' is not one of {', '.join(NODE_REMOVAL_MODES)}")
        self.node_removal = node_removal
        self._clock: Clock = clock or SystemClock()
        self._api = api
        self._core = k8s.CoreV1Api(raw)
        self._call = RawCaller(raw, request_timeout_seconds)
        self.label = label
        self.namespace = namespace

    # -- reads -------------------------------------------------------------------------------------

    def list_pools(self) -> list[Pool]:
        nodes_by_pool: dict[str, list[RawObject]] = {}
        for raw in self._list_raw_nodes(self.label):
            nodes_by_pool.setdefault(raw["metadata"]["labels"][self.label], []).append(raw)
        stores = self._list_stores()
        names = sorted(set(nodes_by_pool) | set(stores))
        return [self._pool(n, nodes_by_pool.get(n, []), stores.get(n, _Store(False))) for n in names]

    def get_pool(self, name: str) -> Pool:
        raws = self._list_raw_nodes(f"{self.label}={name}")
        store = self._read_store(name)
        if not raws and not store.exists:
            raise PoolNotFound(name, [p.name for p in self.list_pools()])
        return self._pool(name, raws, store)

    def node_templates(self, pool: str) -> dict[str, dict[str, Any]]:
        """Recorded templates by node name (extra method: what `set_size` can re-create)."""
        return {k: dict(v) for k, v in self._read_store(pool).templates.items()}

    # -- restore record ----------------------------------------------------------------------------

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        """Write the record (and templates of the pool's current nodes) unless one exists."""
        templates = {t["name"]: t for t in self._capture(pool)}
        for _ in range(CONFLICT_ATTEMPTS):
            store = self._read_store(pool)
            if not templates and not store.exists:
                raise PoolNotFound(pool, [p.name for p in self.list_pools()])
            if store.restore_text is not None:
                return False
            new_templates = {k: v for k, v in templates.items() if k not in store.templates}
            if self._write_store(pool, store, new_templates, {RESTORE_ANNOTATION: encode_restore(record)}):
                log.info("Recorded restore state of label pool %s: %s", pool, encode_restore(record))
                return True
        raise errors.Conflict(
            status=409, message=f"ConfigMap {configmap_name(pool)} kept changing; try again"
        )

    def clear_restore(self, pool: str) -> None:
        """Drop the record, the templates of nodes that exist again (absent ones stay), and the
        cordoned-before marks of nodes back in service (wake has named them by then)."""
        nodes = self._pool_nodes(pool)
        present = {n.name for n in nodes}
        for node in nodes:
            if CORDONED_BEFORE_ANNOTATION in node.annotations and EMPTIED_ANNOTATION not in node.annotations:
                self._patch_node(node.name, {"metadata": {"annotations": {CORDONED_BEFORE_ANNOTATION: None}}})
        for _ in range(CONFLICT_ATTEMPTS):
            store = self._read_store(pool)
            if not store.exists:
                return
            stale = [k for k in store.templates if k in present]
            if store.restore_text is None and not stale:
                return
            body = {
                "metadata": {
                    "resourceVersion": store.resource_version,
                    "annotations": {RESTORE_ANNOTATION: None},
                },
                "data": {TEMPLATE_KEY_PREFIX + k: None for k in stale},
            }
            try:
                self._patch_configmap(pool, body)
                return
            except errors.Conflict:
                continue
        raise errors.Conflict(
            status=409, message=f"ConfigMap {configmap_name(pool)} kept changing; try again"
        )

    # -- shrinking ---------------------------------------------------------------------------------

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Record the chosen nodes' templates before the drain changes them (cordon, taints), and
        mark those someone else cordoned: scalebot's cordon is not there yet (or carries its taint,
        on a repeat), so an emptied node's wake knows which cordons are not scalebot's to undo."""
        raws = self._named_nodes(pool, nodes, self._list_raw_nodes(f"{self.label}={pool}"))
        self._record_templates(pool, [node_template(raw) for raw in raws.values()])
        stamp = format_time(self._clock.now())
        for name, raw in sorted(raws.items()):
            node = NodeInfo.from_raw(raw)
            marked = CORDONED_BEFORE_ANNOTATION in ((raw.get("metadata") or {}).get("annotations") or {})
            ours = any(t.key == DRAINING_TAINT_KEY for t in node.taints)
            theirs = node.is_cordoned and not ours
            if theirs and not marked:
                self._patch_node(name, {"metadata": {"annotations": {CORDONED_BEFORE_ANNOTATION: stamp}}})
                log.info("Node %s of label pool %s was cordoned before scalebot chose it", name, pool)
            elif marked and not node.is_cordoned:  # uncordoned since an earlier operation marked it
                self._patch_node(name, {"metadata": {"annotations": {CORDONED_BEFORE_ANNOTATION: None}}})

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Delete these drained Node objects, or mark them emptied where deleting would stop no
        machine (NodeRemoval.EMPTY); nodes already gone or marked are skipped (idempotent)."""
        # One listing of the pool answers both questions: the state of the named nodes, and what
        # is behind every node of the pool (all must qualify for NODE, the named ones or not).
        listed = self._list_raw_nodes(f"{self.label}={pool}")
        raws = self._named_nodes(pool, nodes, listed)
        not_cordoned = sorted(n for n, raw in raws.items() if not is_emptying(NodeInfo.from_raw(raw)))
        if not_cordoned:
            raise NodeRemovalError(
                f"refusing to delete nodes that are not cordoned; drain them first: {', '.join(not_cordoned)}"
            )
        # A named node found by its own GET joined the pool after the listing: it counts too.
        listed_names = {_name(raw) for raw in listed}
        late = [raw for name, raw in raws.items() if name not in listed_names]
        removal, reason = removal_for([*listed, *late], self.node_removal)
        if removal is NodeRemoval.EMPTY:
            stamp = format_time(self._clock.now())
            for name, raw in sorted(raws.items()):
                if EMPTIED_ANNOTATION in ((raw.get("metadata") or {}).get("annotations") or {}):
                    continue
                self._patch_node(name, {"metadata": {"annotations": {EMPTIED_ANNOTATION: stamp}}})
                log.info("Emptied Node %s of label pool %s and kept it: %s", name, pool, reason)
            return
        self._record_templates(pool, [node_template(raw) for raw in raws.values()])
        stamp = format_time(self._clock.now())
        for name, raw in sorted(raws.items()):
            try:
                if REMOVING_ANNOTATION not in _annotations(raw):
                    self._patch_node(name, {"metadata": {"annotations": {REMOVING_ANNOTATION: stamp}}})
                self._api.delete_node(name)
            except errors.NotFound:
                continue
            log.info("Deleted Node %s of label pool %s", name, pool)

    # -- growing -----------------------------------------------------------------------------------

    def set_size(self, pool: str, size: int) -> None:
        """Absolute size: equal is a no-op; above returns emptied nodes to service, then re-creates
        recorded simulated (kwok) nodes; below is refused."""
        if size < 0:
            raise PoolSizeError(f"pool {pool}: size must be 0 or more, not {size}")
        raws = self._list_raw_nodes(f"{self.label}={pool}")
        emptied = sorted(_name(r) for r in raws if _is_emptied(r))
        present = {_name(r) for r in raws} - set(emptied)
        if size < len(present):
            raise PoolSizeError(
                f"label pool {pool} has {len(present)} nodes; it shrinks only by draining chosen nodes "
                f"and removing them (remove_nodes), not by set_size({size})"
            )
        missing = size - len(present)
        if missing == 0:
            return
        templates = self.node_templates(pool)
        if not templates and not raws and not self._read_store(pool).exists:
            raise PoolNotFound(pool, [p.name for p in self.list_pools()])
        gone = [templates[k] for k in sorted(templates) if k not in present and k not in emptied]
        simulated = [t for t in gone if is_simulated_template(t)]
        if len(emptied) + len(simulated) < missing:
            real = [t["name"] for t in gone if not is_simulated_template(t)]
            back = len(emptied) + len(simulated)
            why = (
                f"the Node objects of {', '.join(real)} were deleted and had real machines behind them "
                "(scalebot re-creates only simulated kwok nodes; a Node without a kubelet would be a lie)"
                if real
                else f"scalebot can only bring back the {back} node(s) it emptied or removed"
            )
            raise PoolSizeError(
                f"label pool {pool} can grow from {len(present)} to at most {len(present) + back} nodes: "
                f"{why}. New machines come from the cluster's autoscaler or node group "
                "(a node-group provider), not a node label"
            )
        marked = {_name(r) for r in raws if CORDONED_BEFORE_ANNOTATION in _annotations(r)}
        for name in emptied[:missing]:
            if name in marked:
                # Someone else's cordon from before the zero-scale stays; only scalebot's taint goes.
                self._api.set_taint(name, DRAINING_TAINT_KEY, value="", effect="NoSchedule", present=False)
            else:
                uncordon_node(self._api, name)
            self._patch_node(name, {"metadata": {"annotations": {EMPTIED_ANNOTATION: None}}})
            log.info("Returned emptied Node %s of label pool %s to service", name, pool)
        for template in simulated[: max(0, missing - len(emptied))]:
            self._create_node(template)

    # -- plumbing ----------------------------------------------------------------------------------

    def _pool(self, name: str, raws: Sequence[RawObject], store: _Store) -> Pool:
        serving = [NodeInfo.from_raw(r) for r in raws if not _is_emptied(r)]
        names = tuple(sorted(n.name for n in serving))
        removal, reason = removal_for(raws, self.node_removal)
        return Pool(
            name=name,
            provider=self.name,
            desired=len(names),
            min_size=0,
            max_size=None,
            nodes=names,
            ready_nodes=tuple(sorted(n.name for n in serving if n.ready == "True")),
            restore=self._restore_of(name, store),
            emptied=tuple(sorted(_name(r) for r in raws if _is_emptied(r))),
            kept_cordoned=tuple(
                sorted(
                    n.name for n in serving if n.is_cordoned and CORDONED_BEFORE_ANNOTATION in n.annotations
                )
            ),
            removal=removal,
            removal_reason=reason,
        )

    def _list_raw_nodes(self, selector: str) -> list[RawObject]:
        page = self._call("list", "nodes", self._core.list_node, label_selector=selector)
        return list(page.get("items") or ())

    def _patch_node(self, name: str, body: Mapping[str, Any]) -> None:
        self._call(
            "patch",
            "nodes",
            self._core.patch_node,
            name,
            dict(body),
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    def _restore_of(self, pool: str, store: _Store) -> RestoreRecord | None:
        if store.restore_text is None:
            return None
        record = decode_restore(
            store.restore_text, where=f"ConfigMap {self.namespace}/{configmap_name(pool)}"
        )
        templates = {k: dict(v) for k, v in store.templates.items()}
        return RestoreRecord(
            desired=record.desired,
            min_size=record.min_size,
            max_size=record.max_size,
            recorded_at=record.recorded_at,
            operation_id=record.operation_id,
            extra={**record.extra, NODE_TEMPLATES_EXTRA: templates},
        )

    def _pool_nodes(self, pool: str) -> list[NodeInfo]:
        return self._api.list_nodes(label_selector=f"{self.label}={pool}")

    def _named_nodes(
        self, pool: str, nodes: Iterable[str], listed: Sequence[RawObject]
    ) -> dict[str, RawObject]:
        """Raw Node JSON of the named nodes, taken from `listed` (the pool's nodes, one listing);
        named nodes that do not exist are skipped.

        A named node missing from the listing is read on its own (rare: it is gone, or it is not
        in the pool), because the two differ: a node carrying another pool's label is refused, as
        removing it would shrink that pool.
        """
        by_name = {_name(raw): raw for raw in listed}
        found: dict[str, RawObject] = {}
        for name in sorted(set(nodes)):
            raw = by_name.get(name)
            if raw is None:
                try:
                    raw = self._call("get", "nodes", self._core.read_node, name)
                except errors.NotFound:
                    continue
                owner = ((raw.get("metadata") or {}).get("labels") or {}).get(self.label)
                if owner != pool:
                    raise NodeRemovalError(
                        f"node {name} is not in label pool {pool} ({self.label}={owner or '<unset>'})"
                    )
            found[name] = raw
        return found

    def _capture(self, pool: str) -> list[dict[str, Any]]:
        """Templates of every node of the pool."""
        return [node_template(raw) for raw in self._list_raw_nodes(f"{self.label}={pool}")]

    def _record_templates(self, pool: str, templates: Sequence[Mapping[str, Any]]) -> None:
        """Add templates for nodes that have none yet (never replace a recorded one)."""
        for _ in range(CONFLICT_ATTEMPTS):
            store = self._read_store(pool)
            new = {t["name"]: t for t in templates if t["name"] not in store.templates}
            if not new or self._write_store(pool, store, new, {}):
                return
        raise errors.Conflict(
            status=409, message=f"ConfigMap {configmap_name(pool)} kept changing; try again"
        )

    def _write_store(
        self,
        pool: str,
        store: _Store,
        templates: Mapping[str, Mapping[str, Any]],
        annotations: Mapping[str, str],
    ) -> bool:
        """Create or patch (guarded by resourceVersion) the ConfigMap; False on a lost race."""
        data = {
            TEMPLATE_KEY_PREFIX + k: orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
            for k, v in templates.items()
        }
        try:
            if store.exists:
                meta = {"resourceVersion": store.resource_version, "annotations": dict(annotations)}
                self._patch_configmap(pool, {"metadata": meta, "data": data})
            else:
                self._create_configmap(pool, data, annotations)
        except errors.Conflict:
            return False  # 409: changed or created since we read it; the caller re-reads
        return True

    def _create_configmap(self, pool: str, data: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name(pool),
                "namespace": self.namespace,
                "labels": {**MANAGED_BY, PROVIDER_LABEL: self.name, POOL_NAME_LABEL: pool},
                "annotations": {**annotations, POOL_LABEL_ANNOTATION: self.label},
            },
            "data": dict(data),
        }
        call = self._core.create_namespaced_config_map
        self._call("create", "configmaps", call, self.namespace, body, field_manager=FIELD_MANAGER)

    def _patch_configmap(self, pool: str, body: Mapping[str, Any]) -> None:
        call = self._core.patch_namespaced_config_map
        name = configmap_name(pool)
        self._call(
            "patch",
            "configmaps",
            call,
            name,
            self.namespace,
            body,
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    def _read_store(self, pool: str) -> _Store:
        try:
            raw = self._call(
                "get",
                "configmaps",
                self._core.read_namespaced_config_map,
                configmap_name(pool),
                self.namespace,
            )
        except errors.NotFound:
            return _Store(False)
        return self._store_from_raw(raw)

    def _list_stores(self) -> dict[str, _Store]:
        selector = f"{PROVIDER_LABEL}={self.name}"
        call = self._core.list_namespaced_config_map
        page = self._call("list", "configmaps", call, self.namespace, label_selector=selector)
        stores: dict[str, _Store] = {}
        for raw in page.get("items") or ():
            meta = raw.get("metadata") or {}
            if (meta.get("annotations") or {}).get(POOL_LABEL_ANNOTATION, POOL_LABEL) != self.label:
                continue  # another label provider's pool in the same namespace
            stores[(meta.get("labels") or {}).get(POOL_NAME_LABEL, "")] = self._store_from_raw(raw)
        stores.pop("", None)
        return stores

    @staticmethod
    def _store_from_raw(raw: RawObject) -> _Store:
        meta = raw.get("metadata") or {}
        templates = {
            key.removeprefix(TEMPLATE_KEY_PREFIX): orjson.loads(value)
            for key, value in (raw.get("data") or {}).items()
            if key.startswith(TEMPLATE_KEY_PREFIX)
        }
        return _Store(
            exists=True,
            resource_version=str(meta.get("resourceVersion") or ""),
            restore_text=(meta.get("annotations") or {}).get(RESTORE_ANNOTATION),
            templates=templates,
        )

    def _create_node(self, template: Mapping[str, Any]) -> None:
        try:
            self._call(
                "create",
                "nodes",
                self._core.create_node,
                node_from_template(template),
                field_manager=FIELD_MANAGER,
            )
        except errors.Conflict:
            return  # 409 AlreadyExists: created by an earlier, interrupted attempt
        log.info("Re-created Node %s from its recorded template", template["name"])

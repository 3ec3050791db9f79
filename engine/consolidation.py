"""PURE: which nodes could be removed because their pods fit on the rest (consolidation planning).

The rules are cluster-autoscaler's scale-down eligibility and CAST AI's Evictor, decided for a
person to approve rather than acted on behind their back:

- a candidate node is Ready, not cordoned, older than a grace period (default 5 min), not annotated
  `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`, and its pool stays at or above
  its minimum size;
- its pods are classified like a `kubectl drain` that ignores DaemonSets and refuses what kubectl
  refuses (bare pods, local storage, opted-out pods): any refusal keeps the node;
- a pod whose PodDisruptionBudget allows no disruption now (or that two budgets cover) keeps it;
- its movable pods must all fit on the nodes that stay (engine.placement, conservative), next to
  what already runs there and to the pods moved off earlier candidates;
- cheapest first: fewest pods to move, then the smallest requests, then the name.

The plan lists the nodes to remove with where each pod would go, and every node kept with why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine import filters, placement
from engine.model import NodeInfo, PdbIndex, PdbInfo, PodInfo
from engine.operation import OperationPlan, OpKind, PoolChange
from engine.pools.base import Pool

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as both the drain rules (NodeInfo) and the scheduler model (SimNode) see it."""

    info: NodeInfo
    sim: placement.SimNode
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    info: PodInfo
    sim: placement.SimPod


# Deployments whose name says another tool already consolidates this cluster. Matched on the names their
# Helm charts and manifests give them ("cluster-autoscaler", "aws-cluster-autoscaler", "karpenter",
# "castai-evictor"), which is what a person would recognise in the note as well.
_CONSOLIDATORS = (
    ("cluster-autoscaler", "cluster-autoscaler removes underused nodes by itself"),
    ("karpenter", "Karpenter consolidates its NodePools by itself (spec.disruption)"),
    ("castai-evictor", "CAST AI's Evictor bin-packs this cluster by itself"),
)


def other_consolidators(deployments: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Notes naming the autoscalers already running (namespace/name), so a plan does not fight them."""
    notes = []
    for fragment, what in _CONSOLIDATORS:
        found = sorted(f"{ns}/{name}" for ns, name in deployments if fragment in name)
        if found:
            notes.append(f"{what} ({', '.join(found)}): scalebot's plan is advice, not a second autoscaler")
    return tuple(notes)


def snapshot_from_raw(
    pools: Sequence[Pool], nodes: Sequence[Mapping[str, Any]], bound_pods: Sequence[Mapping[str, Any]]
) -> SchedulingSnapshot:
    """Nodes with their pool (membership from the pool provider, not one label) and bound pods."""
    pool_of = {node: pool.name for pool in pools for node in pool.nodes}
    return SchedulingSnapshot(
        nodes=tuple(
            node_view(raw, pool=pool_of.get((raw.get("metadata") or {}).get("name", ""))) for raw in nodes
        ),
        pods=tuple(pod_view(raw) for raw in bound_pods),
    )


def node_view(raw: Mapping[str, Any], *, pool: str | None) -> NodeView:
    return NodeView(info=NodeInfo.from_raw(raw), sim=placement.node_from_raw(raw), pool=pool)


def pod_view(raw: Mapping[str, Any]) -> PodView:
    return PodView(info=PodInfo.from_raw(raw), sim=placement.pod_from_raw(raw))


@dataclass(frozen=True, slots=True)
class ConsolidationSettings:
    node_grace: timedelta = timedelta(minutes=5)
    """Nodes younger than this are left alone (they may be there for pods still arriving)."""
    max_nodes: int = 10
    """Nodes one plan removes at most."""


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    """Per cluster (settings `consolidation:`): how consolidation plans, and what runs unattended."""

    node_grace: timedelta = timedelta(minutes=5)
    max_nodes: int = 10
    allow_alongside_autoscaler: bool = False
    """Plan and run consolidations although cluster-autoscaler, Karpenter or CAST AI run here too."""
    empty_nodes: bool = False
    """Remove nodes that ran only DaemonSet/mirror pods for `empty_node_ttl`, without asking."""
    empty_node_ttl: timedelta = timedelta(minutes=5)
    empty_node_batch: int = 10
    """Empty nodes removed at once at most (cluster-autoscaler's --max-empty-bulk-delete default)."""
    interval: timedelta = timedelta(seconds=60)
    """How often the unattended policies look at the cluster."""
    evictor: bool = False
    """Evictor mode: every cycle, propose the consolidation plan when it changed (one card)."""
    evictor_auto_approve: bool = False
    """Evictor mode's proposals run without an approval (never on a protected cluster)."""

    @property
    def planning(self) -> ConsolidationSettings:
        return ConsolidationSettings(node_grace=self.node_grace, max_nodes=self.max_nodes)


@dataclass(frozen=True, slots=True)
class SchedulingSnapshot:
    """The cluster as the scheduler model sees it, taken once: nodes (with their pool) and bound pods."""

    nodes: tuple[NodeView, ...]
    pods: tuple[PodView, ...]
    autoscalers: tuple[str, ...] = ()
    """Notes naming the other consolidators that run here (`other_consolidators`)."""


@dataclass(frozen=True, slots=True)
class NodeRemoval:
    node: str
    pool: str | None
    moves: tuple[tuple[str, str], ...]
    """(pod key, destination node) for every pod that has to move."""


@dataclass(frozen=True, slots=True)
class NodeKept:
    node: str
    pool: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    remove: tuple[NodeRemoval, ...]
    keep: tuple[NodeKept, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "remove": [
                {"node": r.node, "pool": r.pool, "moves": [{"pod": p, "to": n} for p, n in r.moves]}
                for r in self.remove
            ],
            "keep": [{"node": k.node, "pool": k.pool, "reason": k.reason} for k in self.keep],
            "notes": list(self.notes),
        }

    def to_text(self) -> str:
        lines = [f"Plan: consolidate: {len(self.remove)} node(s) can be removed, {len(self.keep)} kept"]
        for r in self.remove:
            lines.append(
                f"Remove {r.node}{f' (pool {r.pool})' if r.pool else ''}: {len(r.moves)} pod(s) move"
            )
            lines.extend(f"  {pod} → {dest}" for pod, dest in r.moves)
        if self.keep:
            lines.append("Kept:")
            lines.extend(f"  {k.node}: {k.reason}" for k in self.keep)
        lines.extend(f"Note: {n}" for n in self.notes)
        lines.append("Nothing was changed (plan only).")
        return "\n".join(lines)


def plan_consolidation(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    pdbs: Sequence[PdbInfo],
    *,
    pool_minimums: Mapping[str, int],
    daemonset_keys: frozenset[str],
    now: datetime,
    settings: ConsolidationSettings = ConsolidationSettings(),
    notes: Sequence[str] = (),
    removable_pools: frozenset[str] | None = None,
) -> ConsolidationPlan:
    """The nodes whose pods all fit elsewhere, cheapest first; and why every other node stays.

    `removable_pools`: only nodes of these pools are candidates (an operation removes nodes through
    the pool provider, so a node in no pool stays); every node still takes moved pods. None: any node.
    """
    ctx = filters.DrainContext(
        options=filters.DrainOptions.kubectl(ignore_daemonsets=True),
        now=now,
        daemonset_keys=daemonset_keys,
        unreachable_nodes=frozenset(n.info.name for n in nodes if n.info.is_unreachable),
    )
    index = PdbIndex(pdbs)
    on_node: dict[str, list[PodView]] = {n.info.name: [] for n in nodes}
    for pod in pods:
        if pod.info.node_name in on_node and not pod.info.is_finished:
            on_node[pod.info.node_name].append(pod)
    pool_left = {
        pool: sum(1 for n in nodes if n.pool == pool and not n.info.is_cordoned) for pool in pool_minimums
    }

    kept: list[NodeKept] = []
    candidates: list[tuple[NodeView, list[PodView]]] = []
    for node in nodes:
        reason = _outside(node, removable_pools) or _ineligible(node, now, settings)
        movable: list[PodView] = []
        if not reason:
            reason, movable = _movable_pods(on_node[node.info.name], ctx, index)
        if reason:
            kept.append(NodeKept(node.info.name, node.pool, reason))
        else:
            candidates.append((node, movable))
    candidates.sort(
        key=lambda c: (len(c[1]), sum(p.sim.requests.get(placement.CPU, 0) for p in c[1]), c[0].info.name)
    )

    # A node that takes pods moved off an earlier candidate stays: removing it too would evict those
    # pods a second time (cluster-autoscaler keeps such destinations as well).
    receives: dict[str, str] = {}
    # The cluster as the plan goes: removed nodes dropped, moved pods on their new node.
    simulation = placement.Simulation([n.sim for n in nodes], (p.sim for p in pods if not p.info.is_finished))
    removals: list[NodeRemoval] = []
    for node, movable in candidates:
        name = node.info.name
        minimum = pool_minimums.get(node.pool or "")
        if name in receives:
            kept.append(NodeKept(name, node.pool, f"takes pods moved off {receives[name]} in this plan"))
            continue
        if len(removals) >= settings.max_nodes:
            kept.append(NodeKept(name, node.pool, f"this plan removes at most {settings.max_nodes} nodes"))
            continue
        if node.pool is not None and minimum is not None and pool_left[node.pool] - 1 < minimum:
            kept.append(NodeKept(name, node.pool, f"pool {node.pool} is at its minimum size ({minimum})"))
            continue
        result = simulation.place([p.sim for p in movable], exclude=(name,), all_or_nothing=True)
        if not result.fits:
            stuck, why = next(iter(result.unplaced.items()))
            kept.append(NodeKept(name, node.pool, f"{stuck} fits on no other node: {why}"))
            continue
        simulation.drop_node(name)
        if node.pool in pool_left:
            pool_left[node.pool] -= 1
        for destination in result.assignments.values():
            receives.setdefault(destination, name)
        removals.append(NodeRemoval(name, node.pool, tuple(sorted(result.assignments.items()))))
    return ConsolidationPlan(
        remove=tuple(removals), keep=tuple(sorted(kept, key=lambda k: k.node)), notes=tuple(notes)
    )


def _outside(node: NodeView, removable_pools: frozenset[str] | None) -> str:
    if removable_pools is None or node.pool in removable_pools:
        return ""
    if node.pool is None:
        return "in no node pool scalebot manages (it can only remove nodes through a pool)"
    return f"pool {node.pool} is not part of this request"


def _ineligible(node: NodeView, now: datetime, settings: ConsolidationSettings) -> str:
    info = node.info
    if info.deletion_timestamp is not None:
        return "already being deleted"
    if info.is_cordoned:
        return "cordoned (someone or something is already draining it)"
    if info.ready != "True":
        return f"not Ready ({info.ready_reason or info.ready})"
    if info.annotations.get(SCALE_DOWN_DISABLED) == "true":
        return f"annotated {SCALE_DOWN_DISABLED}=true"
    if info.created_at is not None and now - info.created_at < settings.node_grace:
        return f"younger than {minutes(settings.node_grace)}"
    return ""


def _movable_pods(
    pods: Sequence[PodView], ctx: filters.DrainContext, index: PdbIndex
) -> tuple[str, list[PodView]]:
    """The pods that would have to move, or why the node cannot be emptied now."""
    movable: list[PodView] = []
    for pod in pods:
        verdict = filters.classify(pod.info, ctx)
        if verdict.action is filters.Action.BLOCK:
            return f"{pod.info.key}: {verdict.reason}", []
        if verdict.action is filters.Action.WAIT:
            return f"{pod.info.key}: {verdict.reason or 'would be waited for until it completes'}", []
        if verdict.action is not filters.Action.EVICT or pod.info.is_terminating:
            continue
        budgets = index.for_pod(pod.info)
        if len(budgets) > 1:
            return (
                f"{pod.info.key}: covered by {len(budgets)} PodDisruptionBudgets (evictions are refused)",
                [],
            )
        if budgets and budgets[0].disruptions_allowed <= 0:
            return f"{pod.info.key}: PodDisruptionBudget {budgets[0].key} allows 0 disruptions now", []
        movable.append(pod)
    return "", movable


def minutes(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def operation_plan(
    cluster: str, plan: ConsolidationPlan, pools: Sequence[Pool], *, warnings: Sequence[str] = ()
) -> OperationPlan:
    """The operation an approver sees: each pool shrinks by the nodes it loses, with the moves."""
    by_pool: dict[str, list[str]] = {}
    for removal in plan.remove:
        by_pool.setdefault(removal.pool or "", []).append(removal.node)
    changes = tuple(
        PoolChange(
            pool=p.name,
            before=p.desired,
            after=p.desired - len(by_pool[p.name]),
            nodes_to_remove=tuple(sorted(by_pool[p.name])),
            min_size=p.min_size,
            max_size=p.max_size,
        )
        for p in sorted(pools, key=lambda p: p.name)
        if p.name in by_pool
    )
    return OperationPlan(
        kind=OpKind.CONSOLIDATE,
        cluster=cluster,
        pools=changes,
        nodes=tuple(r.node for r in plan.remove),
        blockers=tuple((f"node {k.node}", k.reason) for k in plan.keep),
        warnings=(*plan.notes, *warnings),
        moves=tuple((r.node, pod, dest) for r in plan.remove for pod, dest in r.moves),
    )


def recheck(
    node: str,
    snap: SchedulingSnapshot,
    pdbs: Sequence[PdbInfo],
    *,
    not_destinations: frozenset[str],
    daemonset_keys: frozenset[str],
    now: datetime,
) -> tuple[tuple[tuple[str, str], ...], str]:
    """Just before a node is cordoned: do its pods still fit on the nodes that stay?

    Returns the moves, or "" moves and why not. `not_destinations`: nodes this operation removes
    later (a pod placed there would be evicted twice) or already removed. The node's own cordon
    is not required: a node this operation cordoned earlier and gave back is judged as it is now.
    """
    views = {n.info.name: n for n in snap.nodes}
    view = views.get(node)
    if view is None:
        return (), "the node is gone"
    if view.info.deletion_timestamp is not None:
        return (), "the node is already being deleted"
    if view.info.is_cordoned:
        return (), "cordoned since the plan (someone or something else is draining it)"
    ctx = filters.DrainContext(
        options=filters.DrainOptions.kubectl(ignore_daemonsets=True),
        now=now,
        daemonset_keys=daemonset_keys,
        unreachable_nodes=frozenset(n.info.name for n in snap.nodes if n.info.is_unreachable),
    )
    live = [p for p in snap.pods if p.info.node_name == node and not p.info.is_finished]
    reason, movable = _movable_pods(live, ctx, PdbIndex(pdbs))
    if reason:
        return (), reason
    simulation = placement.Simulation(
        [n.sim for n in snap.nodes], (p.sim for p in snap.pods if not p.info.is_finished)
    )
    excluded = tuple(sorted({node, *not_destinations} & set(views)))
    result = simulation.place([p.sim for p in movable], exclude=excluded, all_or_nothing=True)
    if not result.fits:
        stuck, why = next(iter(result.unplaced.items()))
        return (), f"{stuck} no longer fits on the nodes that stay: {why}"
    return tuple(sorted(result.assignments.items())), ""


UNDERUSED_THRESHOLD = 0.5
"""cluster-autoscaler's --scale-down-utilization-threshold default: requests under half of allocatable."""


@dataclass(frozen=True, slots=True)
class Underused:
    node: str
    pool: str | None
    cpu: float
    """Requested / allocatable CPU."""
    memory: float
    movable: str
    """"" when the node's pods could all move elsewhere (the consolidation plan removes it); else why not."""

    @property
    def utilisation(self) -> float:
        """cluster-autoscaler's figure: the higher of the two fractions."""
        return max(self.cpu, self.memory)


def underused(
    snap: SchedulingSnapshot, plan: ConsolidationPlan, *, threshold: float = UNDERUSED_THRESHOLD
) -> tuple[Underused, ...]:
    """Nodes whose requests are under `threshold` of allocatable, emptiest first, with whether the
    plan (which already holds every removal rule) could move their pods."""
    requested: dict[str, dict[str, int]] = {n.info.name: {} for n in snap.nodes}
    for pod in snap.pods:
        used = requested.get(pod.info.node_name)
        if used is None or pod.info.is_finished:
            continue
        for resource in (placement.CPU, placement.MEMORY):
            used[resource] = used.get(resource, 0) + pod.sim.requests.get(resource, 0)
    removable = {r.node for r in plan.remove}
    kept = {k.node: k.reason for k in plan.keep}
    rows = []
    for node in snap.nodes:
        name = node.info.name
        fractions = [
            requested[name].get(r, 0) / node.sim.allocatable[r] if node.sim.allocatable.get(r) else 0.0
            for r in (placement.CPU, placement.MEMORY)
        ]
        if max(fractions) >= threshold:
            continue
        why = "" if name in removable else kept.get(name, "not considered")
        rows.append(Underused(name, node.pool, fractions[0], fractions[1], why))
    return tuple(sorted(rows, key=lambda r: (r.utilisation, r.node)))


def is_empty_node_pod(pod: PodInfo) -> bool:
    """What an "empty" node may still run: DaemonSet and mirror (static) pods, and finished pods."""
    return pod.is_finished or pod.is_mirror or (pod.controller is not None and pod.controller.is_daemonset)


def empty_nodes(
    snap: SchedulingSnapshot,
    *,
    pools: Sequence[Pool],
    now: datetime,
    settings: ConsolidationSettings = ConsolidationSettings(),
) -> tuple[str, ...]:
    """Nodes of a pool that run nothing but DaemonSet/mirror pods and pass the removal rules
    (Ready, not cordoned, not annotated scale-down-disabled, older than the grace period)."""
    busy = {p.info.node_name for p in snap.pods if not is_empty_node_pod(p.info)}
    names = frozenset(p.name for p in pools)
    return tuple(
        sorted(
            n.info.name
            for n in snap.nodes
            if n.info.name not in busy and not _outside(n, names) and not _ineligible(n, now, settings)
        )
    )


def track_empty(
    since: Mapping[str, datetime], empty_now: Sequence[str], now: datetime
) -> dict[str, datetime]:
    """When each node was first seen empty: kept while it stays empty, forgotten once it is not."""
    return {node: since.get(node, now) for node in empty_now}


def due_empty(
    since: Mapping[str, datetime],
    *,
    pools: Sequence[Pool],
    ttl: timedelta,
    batch: int,
    now: datetime,
) -> tuple[str, ...]:
    """Nodes empty for at least `ttl`, longest-empty first, at most `batch`, no pool below its minimum."""
    pool_of = {node: pool for pool in pools for node in pool.nodes}
    room = {pool.name: pool.desired - pool.min_size for pool in pools}
    due: list[str] = []
    for node, first in sorted(since.items(), key=lambda item: (item[1], item[0])):
        pool = pool_of.get(node)
        if pool is None or now - first < ttl or room[pool.name] <= 0 or len(due) >= batch:
            continue
        room[pool.name] -= 1
        due.append(node)
    return tuple(due)

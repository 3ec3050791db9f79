"""PURE: which nodes could be removed because their pods fit on the rest (consolidation planning).

The rules are cluster-autoscaler's scale-down eligibility and CAST AI's Evictor, decided for a
person to approve rather than acted on behind their back:

- a candidate node is Ready, not cordoned, not claimed by another autoscaler (cluster-autoscaler's
  ToBeDeleted / DeletionCandidate taints, Karpenter's disrupted taint), older than a grace period
  (default 5 min), not annotated `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`,
  at or below the utilization threshold (`ScaleDownRules`), and its pool stays at or above its
  minimum size;
- its pods are classified like a `kubectl drain` that ignores DaemonSets and refuses bare pods and
  opted-out pods, then by cluster-autoscaler's own drainability rules (kube-system pods without a
  budget, local storage, custom controllers, `safe-to-evict`): any refusal keeps the node;
- a pod whose PodDisruptionBudget allows no disruption now (or that two budgets cover) keeps it;
- its movable pods must all fit on the nodes that stay (engine.planning.placement, conservative), next to
  what already runs there and to the pods moved off earlier candidates;
- cheapest first: fewest pods to move, then the smallest requests, then the name.

The plan lists the nodes to remove with where each pod would go, and every node kept with why.

Over 600 lines on purpose: the plan, the recheck before each cordon, the underused rows of the
advice and the empty-node policy are one decision (may this node go?) asked at four moments, and
share its private rules (eligibility, pool scope, utilisation, drainability); split apart, those
rules would have to become public across modules for no other reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.domain.model import (
    SAFE_TO_EVICT_ANNOTATION,
    SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION,
    NodeInfo,
    PdbIndex,
    PdbInfo,
    PodInfo,
)
from engine.domain.operation import OperationPlan, OpKind, PoolChange
from engine.domain.settings import ConsolidationSettings, ScaleDownRules
from engine.drain import filters
from engine.planning import placement
from engine.pools.base import Pool
from engine.pools.victims import claimed_by_autoscaler, is_emptying

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
GPU_RESOURCE = "nvidia.com/gpu"
"""cluster-autoscaler's default GPU resource: a node that has it is judged on its GPUs alone."""
SYSTEM_NAMESPACE = "kube-system"
REPLICATED_KINDS = frozenset({"ReplicationController", "ReplicaSet", "StatefulSet", "Job"})
"""Controllers cluster-autoscaler knows to recreate a pod elsewhere (DaemonSet pods are skipped before)."""
LONG_TERMINATING_EXTRA = timedelta(seconds=30)
"""A pod deleted longer ago than its grace period plus this is ignored (cluster-autoscaler's rule)."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node with the pool it belongs to (membership from the pool provider, not one label)."""

    info: NodeInfo
    pool: str | None = None


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


def snapshot(
    pools: Sequence[Pool], nodes: Sequence[NodeInfo], bound_pods: Sequence[PodInfo]
) -> SchedulingSnapshot:
    """Nodes with their pool (membership from the pool provider, not one label) and bound pods."""
    pool_of = {node: pool.name for pool in pools for node in pool.nodes}
    return SchedulingSnapshot(
        nodes=tuple(NodeView(node, pool=pool_of.get(node.name)) for node in nodes), pods=tuple(bound_pods)
    )


@dataclass(frozen=True, slots=True)
class SchedulingSnapshot:
    """The cluster as the scheduler model sees it, taken once: nodes (with their pool) and bound pods."""

    nodes: tuple[NodeView, ...]
    pods: tuple[PodInfo, ...]
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
    pods: Sequence[PodInfo],
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
    ctx = _drain_context(nodes, daemonset_keys, now)
    index = PdbIndex(pdbs)
    on_node = _live_pods_by_node(nodes, pods)
    # Nodes being emptied (cordoned, or tainted by an autoscaler deleting them) are already leaving.
    pool_left = {
        pool: sum(1 for n in nodes if n.pool == pool and not is_emptying(n.info)) for pool in pool_minimums
    }

    kept: list[NodeKept] = []
    candidates: list[tuple[NodeView, list[PodInfo]]] = []
    for node in nodes:
        residents = on_node[node.info.name]
        reason = (
            _outside(node, removable_pools)
            or _ineligible(node, now, settings)
            or _utilisation_reason(utilisation(node, residents, settings.rules, now), settings.rules)
        )
        movable: list[PodInfo] = []
        if not reason:
            reason, movable = _movable_pods(residents, ctx, index, settings.rules)
        if reason:
            kept.append(NodeKept(node.info.name, node.pool, reason))
        else:
            candidates.append((node, movable))
    candidates.sort(
        key=lambda c: (
            len(c[1]),
            sum(p.scheduling.requests.get(placement.CPU, 0) for p in c[1]),
            c[0].info.name,
        )
    )

    # A node that takes pods moved off an earlier candidate stays: removing it too would evict those
    # pods a second time (cluster-autoscaler keeps such destinations as well).
    receives: dict[str, str] = {}
    # The cluster as the plan goes: removed nodes dropped, moved pods on their new node.
    simulation = placement.Simulation([n.info for n in nodes], (p for p in pods if not p.is_finished))
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
        result = simulation.place(movable, exclude=(name,), all_or_nothing=True)
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


def _live_pods_by_node(nodes: Sequence[NodeView], pods: Sequence[PodInfo]) -> dict[str, list[PodInfo]]:
    """Each node's pods that still hold resources (finished pods do not)."""
    on_node: dict[str, list[PodInfo]] = {n.info.name: [] for n in nodes}
    for pod in pods:
        if pod.node_name in on_node and not pod.is_finished:
            on_node[pod.node_name].append(pod)
    return on_node


def _outside(node: NodeView, removable_pools: frozenset[str] | None) -> str:
    if removable_pools is None or node.pool in removable_pools:
        return ""
    if node.pool is None:
        return "in no node pool scalebot manages (it can only remove nodes through a pool)"
    return f"pool {node.pool} is not part of this request"


def _drain_context(
    nodes: Sequence[NodeView], daemonset_keys: frozenset[str], now: datetime
) -> filters.DrainContext:
    """kubectl's drain rules that scalebot keeps (bare pods, orphaned DaemonSet pods, opt-outs);
    local storage is judged by cluster-autoscaler's rule instead (`scale_down_blocker`)."""
    return filters.DrainContext(
        options=filters.DrainOptions.kubectl(ignore_daemonsets=True, delete_emptydir_data=True),
        now=now,
        daemonset_keys=daemonset_keys,
        unreachable_nodes=frozenset(n.info.name for n in nodes if n.info.is_unreachable),
    )


def _ineligible(node: NodeView, now: datetime, settings: ConsolidationSettings) -> str:
    info = node.info
    if info.deletion_timestamp is not None:
        return "already being deleted"
    claimed = claimed_by_autoscaler(info)
    if claimed:
        return claimed
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
    pods: Sequence[PodInfo], ctx: filters.DrainContext, index: PdbIndex, rules: ScaleDownRules
) -> tuple[str, list[PodInfo]]:
    """The pods that would have to move, or why the node cannot be emptied now."""
    movable: list[PodInfo] = []
    for pod in pods:
        verdict = filters.classify(pod, ctx)
        if verdict.action is filters.Action.BLOCK:
            return f"{pod.key}: {verdict.reason}", []
        if verdict.action is filters.Action.WAIT:
            return f"{pod.key}: {verdict.reason or 'would be waited for until it completes'}", []
        if verdict.action is not filters.Action.EVICT or pod.is_terminating:
            continue
        budgets = index.for_pod(pod)
        blocker = scale_down_blocker(pod, has_budget=bool(budgets), rules=rules, now=ctx.now)
        if blocker:
            return f"{pod.key}: {blocker}", []
        if len(budgets) > 1:
            return (
                f"{pod.key}: covered by {len(budgets)} PodDisruptionBudgets (evictions are refused)",
                [],
            )
        if budgets and budgets[0].disruptions_allowed <= 0:
            return f"{pod.key}: PodDisruptionBudget {budgets[0].key} allows 0 disruptions now", []
        movable.append(pod)
    return "", movable


def scale_down_blocker(pod: PodInfo, *, has_budget: bool, rules: ScaleDownRules, now: datetime) -> str:
    """Why cluster-autoscaler's drainability rules keep this pod's node ("" when none does).

    For a pod the kubectl rules would evict; in cluster-autoscaler's order: `safe-to-evict: "true"`
    lets it go past every rule below, `"on-completion"` waits for it, then custom controllers,
    kube-system pods without a budget, local storage. (`"false"`, DaemonSet, mirror and finished
    pods are settled by the kubectl rules before.)
    """
    safe_to_evict = pod.annotations.get(SAFE_TO_EVICT_ANNOTATION)
    if safe_to_evict == "true":
        return ""
    if safe_to_evict == "on-completion":
        return f"annotated {SAFE_TO_EVICT_ANNOTATION}=on-completion: it is waited for until it completes"
    owner = pod.controller
    if (
        rules.skip_nodes_with_custom_controller_pods
        and owner is not None
        and owner.kind not in REPLICATED_KINDS
    ):
        return (
            f"{pod.key} is not replicated: its controller is a {owner.kind} "
            "(not a ReplicaSet, StatefulSet, Job or ReplicationController)"
        )
    if (
        rules.skip_nodes_with_system_pods
        and pod.namespace == SYSTEM_NAMESPACE
        and not has_budget
        and (pod.created_at is None or now - pod.created_at <= rules.system_pod_disruption_timeout)
    ):
        return f"non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: {pod.name}"
    if rules.skip_nodes_with_local_storage:
        listed = set(pod.annotations.get(SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, "").split(","))
        local = [volume for volume in pod.local_volumes if volume not in listed]
        if local:
            return (
                f"pod with local storage present: {pod.name} (volumes {', '.join(local)}; "
                f"list them in {SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION} if their data may be lost)"
            )
    return ""


@dataclass(frozen=True, slots=True)
class Utilisation:
    """cluster-autoscaler's utilisation of a node: the resource that decides, and its share."""

    resource: str
    value: float
    unknown: bool = False
    """The node reports no allocatable amount of `resource`: no figure can be computed."""


def utilisation(node: NodeView, pods: Sequence[PodInfo], rules: ScaleDownRules, now: datetime) -> Utilisation:
    """cluster-autoscaler's utilisation: GPUs alone on a GPU node, else the higher of cpu and memory."""
    gpu = node.info.allocatable.get(GPU_RESOURCE, 0) > 0
    best: Utilisation | None = None
    for resource in (GPU_RESOURCE,) if gpu else (placement.CPU, placement.MEMORY):
        share = resource_share(node, pods, resource, rules, now)
        if share is None:
            return Utilisation(resource, 0.0, unknown=True)
        # The later resource wins a tie, as cluster-autoscaler's `cpu > mem` comparison has it.
        if best is None or share >= best.value:
            best = Utilisation(resource, share)
    assert best is not None
    return best


def resource_share(
    node: NodeView, pods: Sequence[PodInfo], resource: str, rules: ScaleDownRules, now: datetime
) -> float | None:
    """Σ requests ÷ allocatable of `resource` over the node's live pods; None when the node reports
    no allocatable amount. DaemonSet and mirror pods count (unless `ignore_daemonsets_utilization`,
    which also takes their requests out of allocatable); pods terminating far past their grace do not."""
    allocatable = node.info.allocatable.get(resource, 0)
    if allocatable <= 0:
        return None
    requested = set_aside = 0
    for pod in pods:
        amount = pod.scheduling.requests.get(resource, 0)
        if rules.ignore_daemonsets_utilization and _is_daemonset_pod(pod):
            set_aside += amount
        elif not _long_terminating(pod, now):
            requested += amount
    room = allocatable - set_aside
    return requested / room if room > 0 else float(requested > 0)


def threshold_for(figure: Utilisation, rules: ScaleDownRules) -> float:
    return rules.gpu_utilization_threshold if figure.resource == GPU_RESOURCE else rules.utilization_threshold


def _utilisation_reason(figure: Utilisation, rules: ScaleDownRules) -> str:
    if figure.unknown:
        return f"its allocatable {figure.resource} is unknown, so its utilisation cannot be computed"
    threshold = threshold_for(figure, rules)
    if figure.value <= threshold:
        return ""
    return (
        f"{figure.resource} requested is {percent(figure.value)} of allocatable, above the "
        f"scale-down utilization threshold ({percent(threshold)})"
    )


def percent(share: float) -> str:
    return f"{share * 100:.3g}%"


def _is_daemonset_pod(pod: PodInfo) -> bool:
    return pod.controller is not None and pod.controller.is_daemonset


def _long_terminating(pod: PodInfo, now: datetime) -> bool:
    if pod.deletion_timestamp is None:
        return False
    return (
        pod.deletion_timestamp + timedelta(seconds=pod.termination_grace_seconds) + LONG_TERMINATING_EXTRA
        < now
    )


def scale_up_hold(nodes: Sequence[NodeView], now: datetime, delay: timedelta) -> str:
    """Why the unattended policies remove nothing now: a node joined less than `delay` ago ("" if none).

    cluster-autoscaler waits `--scale-down-delay-after-add` after its own scale-ups; scalebot does
    not see who added a node, so any new node counts as a scale-up."""
    joined = [(n.info.created_at, n.info.name) for n in nodes if n.info.created_at is not None]
    if not joined:
        return ""
    newest, name = max(joined)
    if now - newest >= delay:
        return ""
    return (
        f"node {name} joined {minutes(now - newest)} ago; nothing is removed until "
        f"{minutes(delay)} after a scale-up (delay_after_add)"
    )


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
    rules: ScaleDownRules = ScaleDownRules(),
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
    claimed = claimed_by_autoscaler(view.info)
    if claimed:
        return (), f"since the plan, {claimed}"
    if view.info.is_cordoned:
        return (), "cordoned since the plan (someone or something else is draining it)"
    ctx = _drain_context(snap.nodes, daemonset_keys, now)
    live = [p for p in snap.pods if p.node_name == node and not p.is_finished]
    reason, movable = _movable_pods(live, ctx, PdbIndex(pdbs), rules)
    if reason:
        return (), reason
    simulation = placement.Simulation(
        [n.info for n in snap.nodes], (p for p in snap.pods if not p.is_finished)
    )
    excluded = tuple(sorted({node, *not_destinations} & set(views)))
    result = simulation.place(movable, exclude=excluded, all_or_nothing=True)
    if not result.fits:
        stuck, why = next(iter(result.unplaced.items()))
        return (), f"{stuck} no longer fits on the nodes that stay: {why}"
    return tuple(sorted(result.assignments.items())), ""


@dataclass(frozen=True, slots=True)
class Underused:
    node: str
    pool: str | None
    cpu: float
    """Requested / allocatable CPU."""
    memory: float
    movable: str
    """"" when the node's pods could all move elsewhere (the consolidation plan removes it); else why not."""
    figure: Utilisation = Utilisation(placement.CPU, 0.0)
    """cluster-autoscaler's figure: the deciding resource (GPUs on a GPU node) and its share."""

    @property
    def utilisation(self) -> float:
        return self.figure.value


def underused(
    snap: SchedulingSnapshot,
    plan: ConsolidationPlan,
    *,
    now: datetime,
    rules: ScaleDownRules = ScaleDownRules(),
) -> tuple[Underused, ...]:
    """Nodes at or under the scale-down utilization threshold, emptiest first, with whether the
    plan (which already holds every removal rule) could move their pods."""
    on_node = _live_pods_by_node(snap.nodes, snap.pods)
    removable = {r.node for r in plan.remove}
    kept = {k.node: k.reason for k in plan.keep}
    rows = []
    for node in snap.nodes:
        name = node.info.name
        figure = utilisation(node, on_node[name], rules, now)
        if figure.unknown or figure.value > threshold_for(figure, rules):
            continue
        cpu, memory = (
            resource_share(node, on_node[name], r, rules, now) or 0.0
            for r in (placement.CPU, placement.MEMORY)
        )
        why = "" if name in removable else kept.get(name, "not considered")
        rows.append(Underused(name, node.pool, cpu, memory, why, figure))
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
    busy = {p.node_name for p in snap.pods if not is_empty_node_pod(p)}
    names = frozenset(p.name for p in pools)
    on_node = _live_pods_by_node(snap.nodes, snap.pods)
    rules = settings.rules
    return tuple(
        sorted(
            n.info.name
            for n in snap.nodes
            if n.info.name not in busy
            and not _outside(n, names)
            and not _ineligible(n, now, settings)
            # DaemonSet pods count towards the threshold unless told otherwise, as in cluster-autoscaler.
            and not _utilisation_reason(utilisation(n, on_node[n.info.name], rules, now), rules)
        )
    )


def track_since(since: Mapping[str, datetime], seen_now: Sequence[str], now: datetime) -> dict[str, datetime]:
    """When each node was first seen (empty, or removable): kept while it stays so, forgotten once not."""
    return {node: since.get(node, now) for node in seen_now}


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

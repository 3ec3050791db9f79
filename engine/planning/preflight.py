"""Pre-flight plans: what a drain or a pool operation would do, and why, without changing anything.

Pure: takes snapshots (nodes, pods, PDBs) and a filter context; returns values that render
themselves as text and JSON. The same plan is what an approval card shows, so identical
snapshots must produce identical plans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from engine.domain import force_scope
from engine.domain.collector import collector_paused
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import NodeInfo, PdbIndex, PdbInfo, PodInfo
from engine.domain.operation import OperationPlan, OpKind, PoolChange, Target
from engine.drain import filters
from engine.pools import victims
from engine.pools.base import Pool


@dataclass(frozen=True, slots=True)
class PodPlan:
    pod: str
    node: str
    action: str
    """evict, delete, skip, block, wait, later — or `blocked` when a PDB will refuse it now."""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DrainPlan:
    nodes: tuple[str, ...]
    pods: tuple[PodPlan, ...]
    warnings: tuple[str, ...] = ()
    already_cordoned: tuple[str, ...] = ()

    def count(self, action: str) -> int:
        return sum(1 for p in self.pods if p.action == action)

    @property
    def can_complete(self) -> bool:
        """False when some pod cannot go without force or a relaxed PDB."""
        return not any(p.action in ("block", "blocked") for p in self.pods)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "already_cordoned": list(self.already_cordoned),
            "summary": dict(sorted(Counter(p.action for p in self.pods).items())),
            "can_complete": self.can_complete,
            "pods": [
                {"pod": p.pod, "node": p.node, "action": p.action, "reason": p.reason} for p in self.pods
            ],
            "warnings": list(self.warnings),
        }

    def to_text(self) -> str:
        summary = ", ".join(f"{n} {a}" for a, n in sorted(Counter(p.action for p in self.pods).items()))
        lines = [f"Plan: drain {len(self.nodes)} node(s): {', '.join(self.nodes)}"]
        if self.already_cordoned:
            lines.append(f"Already cordoned (left cordoned on cancel): {', '.join(self.already_cordoned)}")
        lines.append(f"Pods: {summary or 'none'}")
        for action in ("blocked", "block", "wait", "later", "evict", "delete", "skip"):
            group = [p for p in self.pods if p.action == action]
            if not group:
                continue
            lines.append(f"{_HEADINGS[action]}:")
            lines.extend(f"  {p.pod} (node {p.node}){': ' + p.reason if p.reason else ''}" for p in group)
        lines.extend(f"Warning: {w}" for w in self.warnings)
        lines.append("Nothing was changed (plan only).")
        return "\n".join(lines)


_HEADINGS = {
    "blocked": "Will be refused by a PodDisruptionBudget now",
    "block": "Refused without --force (the drain cannot complete)",
    "wait": "Left running until they complete",
    "later": "Evicted after the others are gone (drain order)",
    "evict": "Evicted",
    "delete": "Deleted (finished pods, no eviction needed)",
    "skip": "Skipped",
}


def plan_drain(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    pdbs: Sequence[PdbInfo],
    ctx: filters.DrainContext,
    pod_filters: Sequence[filters.PodFilter] | None = None,
) -> DrainPlan:
    """Classify every pod on `nodes` and predict what the PodDisruptionBudgets will allow."""
    names = {n.name for n in nodes}
    classified = filters.classify_pods([p for p in pods if p.node_name in names], ctx, pod_filters)
    return _drain_plan_of(nodes, classified, pdbs, _pdb_matcher(pdbs))


_ACTION_TEXT: dict[filters.Action, str] = {action: action.value for action in filters.Action}


def _drain_plan_of(
    nodes: Sequence[NodeInfo],
    classified: Sequence[tuple[PodInfo, filters.Verdict]],
    pdbs: Sequence[PdbInfo],
    pdbs_of: Callable[[PodInfo], Sequence[PdbInfo]],
) -> DrainPlan:
    """The plan of a drain of `nodes` whose pods are already classified (`filters.classify_pods`);
    `pdbs_of` answers which of `pdbs` select a pod (`_pdb_matcher`)."""
    refused_nodes = filters.blocked_nodes(classified)
    # Same rule as the drain pass, per node: waiting pods count too, so a slow low-order group holds
    # back the rest of its node.
    waiting_or_evicted = (filters.Action.EVICT, filters.Action.WAIT)
    min_order: dict[str, int] = {}
    for pod, verdict in classified:
        if verdict.action in waiting_or_evicted:
            min_order[pod.node_name] = min(min_order.get(pod.node_name, verdict.order), verdict.order)
    budget_left = {p.key: p.disruptions_allowed for p in pdbs}
    entries: list[PodPlan] = []
    evict = filters.Action.EVICT
    for pod, verdict in classified:
        # Once per pod of the drained nodes (30,000 at full size): the enum's `.value` is a
        # descriptor call, so the action's text comes from a dict.
        reason = verdict.reason
        if verdict.action is not evict:
            action = _ACTION_TEXT[verdict.action]
        elif pod.is_terminating:
            action, reason = "skip", "already terminating (deletionTimestamp set)"
        elif pod.node_name in refused_nodes:
            action, reason = (
                "skip",
                "another pod on this node is refused; kubectl drains a node all or nothing",
            )
        elif verdict.order > min_order.get(pod.node_name, 0):
            action, reason = "later", "system-critical: evicted after the other pods"
        else:
            action, reason = _predict_eviction(pod, pdbs_of(pod), budget_left)
        entries.append(PodPlan(pod=pod.key, node=pod.node_name, action=action, reason=reason))
    return DrainPlan(
        nodes=tuple(sorted({n.name for n in nodes})),
        pods=tuple(entries),
        warnings=tuple(_pdb_warnings(pdbs)),
        already_cordoned=tuple(sorted(n.name for n in nodes if n.is_cordoned)),
    )


def _predict_eviction(
    pod: PodInfo, matching: Sequence[PdbInfo], budget_left: dict[str, int]
) -> tuple[str, str]:
    """What the eviction API will answer for `pod`, selected by the budgets `matching`, from their
    current status (and what we used up)."""
    if len(matching) > 1:
        names = ", ".join(sorted(p.key for p in matching))
        return (
            "blocked",
            f"covered by {len(matching)} PodDisruptionBudgets ({names}); the eviction API refuses it (500)",
        )
    if not matching:
        return "evict", ""
    pdb = matching[0]
    if not pdb.is_observed:
        return "evict", f"PodDisruptionBudget {pdb.key} not yet observed by the controller (429 until it is)"
    if budget_left[pdb.key] <= 0:
        return "blocked", (
            f"PodDisruptionBudget {pdb.key} allows 0 disruptions now "
            f"(needs {pdb.desired_healthy} healthy, has {pdb.current_healthy})"
        )
    budget_left[pdb.key] -= 1
    return "evict", f"within PodDisruptionBudget {pdb.key}"


def _pdb_matcher(pdbs: Sequence[PdbInfo]) -> Callable[[PodInfo], Sequence[PdbInfo]]:
    """Which of `pdbs` select a pod, each pod matched once however often a plan asks (the drain's
    plan and the force scope both do); nothing to match at all when there are no budgets."""
    if not pdbs:
        return lambda pod: ()
    index = PdbIndex(pdbs)
    found: dict[str, Sequence[PdbInfo]] = {}

    def pdbs_of(pod: PodInfo) -> Sequence[PdbInfo]:
        matching = found.get(pod.key)
        if matching is None:
            matching = found[pod.key] = index.for_pod(pod)
        return matching

    return pdbs_of


def _pdb_warnings(pdbs: Sequence[PdbInfo]) -> list[str]:
    warnings = []
    for pdb in sorted(pdbs, key=lambda p: p.key):
        if pdb.selector.is_empty:
            warnings.append(f"PodDisruptionBudget {pdb.key} has an empty selector and protects nothing")
        elif (
            pdb.is_observed
            and pdb.expected_pods > 0
            and pdb.current_healthy >= pdb.expected_pods
            and pdb.disruptions_allowed == 0
        ):
            warnings.append(
                f"PodDisruptionBudget {pdb.key} allows no voluntary eviction even with every pod healthy: "
                "a drain can only complete by force"
            )
    return warnings


class PlanError(ScalebotError, ValueError):
    """The request cannot be planned (unknown pool, size outside limits, nothing asleep)."""

    category = Category.USAGE


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything planning reads, taken once (one listing per kind of object)."""

    cluster: str
    pools: tuple[Pool, ...]
    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...]
    pdbs: tuple[PdbInfo, ...]
    pods_resource_version: str = ""
    """The pod listing's resourceVersion ("" when the adapter does not tell): a watch of these
    pods can start from it (the drain's pod feed, `Runner.offer_pods`)."""
    daemonset_keys: frozenset[str] = frozenset()
    restore_sizes: Mapping[str, int] = field(default_factory=dict)
    """Pool → size recorded before a scale-down (SQLite, else the pool object's annotation)."""
    workloads_to_sleep: int = 0
    """Workloads a sleep would change (0 when the operation does not touch workloads)."""
    workloads_asleep: int = 0
    """Workloads with a recorded original, waiting for a wake."""
    workload_keys: tuple[str, ...] = ()
    """`Kind/namespace/name` of the workloads a sleep would change (the approved set)."""
    workload_notes: tuple[str, ...] = ()
    """What the approver should know about those workloads: their GitOps owners, paused or not."""

    def pool(self, name: str) -> Pool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise PlanError(f'pool "{name}" not found in {self.cluster}; pools: {_names(self.pools)}')


def plan_operation(kind: OpKind, target: Target, snap: ClusterSnapshot, *, now: datetime) -> OperationPlan:
    """The plan an approver sees and the runner executes. Pure; raises PlanError for bad requests.

    The garbage collector is paused meanwhile (`engine.domain.collector`): a plan over 30,000 pods
    builds a verdict, a key and a warning list for each, and the collections those allocations
    trigger cost a third of the plan."""
    with collector_paused():
        return _plan_operation(kind, target, snap, now=now)


def _plan_operation(kind: OpKind, target: Target, snap: ClusterSnapshot, *, now: datetime) -> OperationPlan:
    if kind is OpKind.DRAIN:
        return _plan_node_drain(target, snap, now=now)
    if kind is OpKind.WAKE:
        return _plan_wake(target, snap)
    if target.workloads_only:
        if kind is not OpKind.ZERO:
            raise PlanError("workloads-only applies to `zero` and `wake`")
        return OperationPlan(
            kind=kind,
            cluster=snap.cluster,
            workloads=snap.workloads_to_sleep,
            workload_keys=snap.workload_keys,
            warnings=snap.workload_notes,
        )
    pools = [snap.pool(p) for p in target.pools] if target.pools else list(snap.pools)
    if not pools:
        raise PlanError(f"cluster {snap.cluster} has no node pools")
    if kind is OpKind.SCALE:
        if len(pools) != 1 or target.size is None:
            raise PlanError("scale needs exactly one pool and a size, e.g. `scale web 3`")
        plan = _plan_resize(kind, snap, {pools[0].name: target.size}, now=now, force=target.force)
        return replace(plan, one_at_a_time=bool(target.one_at_a_time and plan.nodes))
    plan = _plan_resize(kind, snap, {p.name: 0 for p in pools}, now=now, force=target.force)
    plan = replace(plan, one_at_a_time=bool(target.one_at_a_time and plan.nodes))
    if not target.workloads:
        return plan
    return replace(
        plan,
        workloads=snap.workloads_to_sleep,
        workload_keys=snap.workload_keys,
        warnings=(*plan.warnings, *snap.workload_notes),
    )


def _plan_resize(
    kind: OpKind, snap: ClusterSnapshot, sizes: Mapping[str, int], *, now: datetime, force: bool
) -> OperationPlan:
    # The pods grouped by node once, for every pool and for the drain's classification.
    by_node = victims.pods_by_node(snap.pods)
    changes: list[PoolChange] = []
    for name, size in sorted(sizes.items()):
        pool = snap.pool(name)
        _check_limits(pool, size, to_zero=kind is OpKind.ZERO)
        remove: tuple[str, ...] = ()
        if size < pool.size:
            remove = _victims(pool, snap.nodes, by_node, pool.size - size)
        changes.append(
            PoolChange(
                pool=name,
                before=pool.desired,
                after=size,
                nodes_to_remove=remove,
                min_size=pool.min_size,
                max_size=pool.max_size,
                removal=pool.removal,
                removal_reason=pool.removal_reason,
                not_drained=tuple(n for n in remove if n in pool.drain_excluded),
                drain_timeout_seconds=pool.drain_timeout_seconds,
                hooked=tuple((n, hooks) for n, hooks in pool.pre_drain_hooks if n in remove),
                detach_wait=tuple(
                    n
                    for n in remove
                    if n in pool.detach_wait
                    and n not in pool.drain_excluded
                    and n not in dict(pool.pre_drain_hooks)
                ),
                detach_timeout_seconds=pool.detach_timeout_seconds,
                machines_picked_by=pool.machines_picked_by,
            )
        )
    after = {p.name: p.desired for p in snap.pools} | dict(sizes)
    force_phase = all(size == 0 for size in after.values())
    drained = tuple(
        sorted(
            n
            for c in changes
            for n in c.nodes_to_remove
            if n not in c.not_drained and n not in c.hooked_nodes
        )
    )
    # Opt-outs block a scale-down and a partial zero; only an explicit force evicts them.
    options = filters.DrainOptions.machine(
        opt_outs_wait=force_phase, evict_opt_outs=force and not force_phase
    )
    drain = _Drain.of(snap, drained, by_node, options, now=now)
    blockers, warnings = drain.blockers()
    if force_phase and blockers:
        warnings = (
            *warnings,
            "every pool goes to 0: pods still blocking after phase 1 will be force-deleted",
        )
    forcing: tuple[str, ...] = ()
    if force_phase:
        forcing = (force_scope.FORCE_PHASE,)
    elif force:
        forcing = (force_scope.FORCE,)
    scope = _force_scope(drain, blockers if force_phase else ()) if forcing else None
    return OperationPlan(
        kind=kind,
        cluster=snap.cluster,
        pools=tuple(changes),
        nodes=drained,
        blockers=blockers,
        force_phase=force_phase,
        warnings=warnings,
        forcing=forcing,
        force_scope=scope,
    )


def _victims(
    pool: Pool, nodes: Sequence[NodeInfo], by_node: Mapping[str, Sequence[PodInfo]], count: int
) -> tuple[str, ...]:
    """The `count` nodes `pool` loses, sorted. When every node leaves, no ranking can change the
    answer: it is skipped (it reads every pod of the pool)."""
    members = frozenset(pool.nodes)
    pool_nodes = [n for n in nodes if n.name in members]
    if count == len(pool_nodes) == len({n.name for n in pool_nodes}):
        return tuple(sorted(n.name for n in pool_nodes))
    chosen = victims.choose_victims(
        pool_nodes,
        [p for n in pool_nodes for p in by_node.get(n.name, ())],
        count,
        policy=pool.deletion_order,
        marked=pool.victim_hints.marked,
        deleting=pool.victim_hints.deleting,
        unhealthy=pool.victim_hints.unhealthy,
    )
    return tuple(sorted(chosen))


@dataclass(frozen=True, slots=True)
class _Drain:
    """A planned drain of `nodes`: their pods, classified once under the run's `ctx`."""

    snap: ClusterSnapshot
    nodes: tuple[str, ...]
    node_infos: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...]
    ctx: filters.DrainContext
    classified: tuple[tuple[PodInfo, filters.Verdict], ...]
    pdbs_of: Callable[[PodInfo], Sequence[PdbInfo]]

    @classmethod
    def of(
        cls,
        snap: ClusterSnapshot,
        nodes: tuple[str, ...],
        by_node: Mapping[str, Sequence[PodInfo]],
        options: filters.DrainOptions,
        *,
        now: datetime,
    ) -> _Drain:
        wanted = set(nodes)
        pods = tuple(p for n in sorted(wanted) for p in by_node.get(n, ()))
        ctx = _context(snap, nodes, options, now=now)
        return cls(
            snap=snap,
            nodes=nodes,
            node_infos=tuple(n for n in snap.nodes if n.name in wanted),
            pods=pods,
            ctx=ctx,
            classified=tuple(filters.classify_pods(pods, ctx)) if nodes else (),
            pdbs_of=_pdb_matcher(snap.pdbs),
        )

    def blockers(self) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
        if not self.nodes:
            return (), ()
        drain_plan = _drain_plan_of(self.node_infos, self.classified, self.snap.pdbs, self.pdbs_of)
        blockers = tuple(
            (p.pod, p.reason) for p in drain_plan.pods if p.action in ("block", "blocked", "wait")
        )
        return blockers, drain_plan.warnings

    def context(self, options: filters.DrainOptions) -> filters.DrainContext:
        return replace(self.ctx, options=options)


def _force_scope(drain: _Drain, phase2: Sequence[tuple[str, str]]) -> force_scope.ForceScope:
    """What a forced run may remove beyond a plain drain: the Pods on the drained nodes the plain
    drain refuses and the run's drain removes, each with why; for a full zero-scale also the Pods
    expected to block phase 1 (`phase2`, with why), whatever phase 1 leaves of the workloads on
    those nodes now, and the budgets selecting them."""
    options = drain.ctx.options
    plain = filters.plain_drain(opt_outs_wait=bool(phase2) or options.opt_outs_wait)
    # Only a Pod some plain-drain rule may refuse is classified again (most Pods are not).
    candidates = [p for p in drain.pods if filters.may_refuse(p)]
    forced = filters.needing_force(candidates, drain.context(plain), drain.ctx)
    if not options.opt_outs_wait:  # not a full zero-scale: no phase 2
        return force_scope.build_scope(forced)
    # Phase 2 deletes what a machine drain evicting opt-outs would not skip. Its options differ from
    # the run's (phase 1: opted-out pods wait) only in the opt-out rule, which never skips: the
    # run's own verdicts say which Pods it skips.
    deletable = [p for p, v in drain.classified if v.action is not filters.Action.SKIP]
    by_key = {p.key: p for p in deletable}
    expected = [
        force_scope.ForcedPod(pod, force_scope.unit_of(by_key[pod]), f"phase 2 if still there: {why}")
        for pod, why in phase2
        if pod in by_key
    ]
    pdbs = {pdb.key for p in deletable for pdb in drain.pdbs_of(p)}
    return force_scope.build_scope([*forced, *expected], deletable, pdbs)


def _check_limits(pool: Pool, size: int, *, to_zero: bool) -> None:
    if size < 0:
        raise PlanError(f"a pool size cannot be negative ({size})")
    if pool.sizes_from_demand and size != 0:
        raise PlanError(
            f"pool {pool.name} ({pool.provider}) sizes itself from demand: its nodes come from pending pods, "
            f"so it cannot be scaled to {size}. `scale {pool.name} 0` or `zero` stops it provisioning "
            "and removes its nodes; `wake` lets it provision again"
        )
    if pool.max_size is not None and size > pool.max_size:
        raise PlanError(f"pool {pool.name}: {size} is above its max size {pool.max_size}")
    if size < pool.min_size and not (to_zero and size == 0):
        raise PlanError(
            f"pool {pool.name}: min size reached ({pool.min_size}); nodes will not be deleted "
            "(use `zero` to take a pool to 0 on purpose)"
        )


def _plan_node_drain(target: Target, snap: ClusterSnapshot, *, now: datetime) -> OperationPlan:
    known = {n.name for n in snap.nodes}
    missing = [n for n in target.nodes if n not in known]
    if not target.nodes or missing:
        raise PlanError(
            f"node(s) not found: {', '.join(missing) or '(none given)'}; nodes: {_names(snap.nodes)}"
        )
    options = replace(
        filters.DrainOptions.kubectl(force=target.force, ignore_daemonsets=True, delete_emptydir_data=True),
        disable_eviction=target.disable_eviction,
    )
    nodes = tuple(sorted(target.nodes))
    drain = _Drain.of(snap, nodes, victims.pods_by_node(snap.pods), options, now=now)
    blockers, warnings = drain.blockers()
    forcing = tuple(
        option
        for option, given in (
            (force_scope.FORCE, target.force),
            (force_scope.DISABLE_EVICTION, target.disable_eviction),
        )
        if given
    )
    if not forcing:
        return OperationPlan(
            kind=OpKind.DRAIN, cluster=snap.cluster, nodes=nodes, blockers=blockers, warnings=warnings
        )
    return OperationPlan(
        kind=OpKind.DRAIN,
        cluster=snap.cluster,
        nodes=nodes,
        blockers=blockers,
        warnings=warnings,
        forcing=forcing,
        force_scope=_force_scope(drain, ()),
    )


def _plan_wake(target: Target, snap: ClusterSnapshot) -> OperationPlan:
    names = target.pools or tuple(sorted(snap.restore_sizes))
    asleep = {n: snap.restore_sizes[n] for n in names if n in snap.restore_sizes}
    if (target.workloads_only or not asleep) and snap.workloads_asleep and not target.pools:
        return OperationPlan(kind=OpKind.WAKE, cluster=snap.cluster, workloads=snap.workloads_asleep)
    if not asleep:
        what = ", ".join(target.pools) if target.pools else f"cluster {snap.cluster}"
        raise PlanError(f"{what} is not asleep: no sizes were recorded by a scale-down")
    unknown = [n for n in names if n not in snap.restore_sizes]
    if unknown:
        raise PlanError(
            f"pool(s) {', '.join(unknown)} have nothing to restore; asleep: {', '.join(sorted(asleep))}"
        )
    pools = {p.name: p for p in snap.pools}
    changes = tuple(
        PoolChange(pool=n, before=pools[n].desired if n in pools else 0, after=size)
        for n, size in sorted(asleep.items())
    )
    return OperationPlan(
        kind=OpKind.WAKE, cluster=snap.cluster, pools=changes, workloads=snap.workloads_asleep
    )


def _context(
    snap: ClusterSnapshot, nodes: Sequence[str], options: filters.DrainOptions, *, now: datetime
) -> filters.DrainContext:
    wanted = set(nodes)
    return filters.DrainContext(
        options=options,
        now=now,
        daemonset_keys=snap.daemonset_keys,
        unreachable_nodes=frozenset(n.name for n in snap.nodes if n.name in wanted and n.is_unreachable),
    )


def _names(items: Sequence[NodeInfo] | Sequence[Pool]) -> str:
    names = sorted(i.name for i in items)
    return ", ".join(names[:20]) + (f" ... ({len(names) - 20} more)" if len(names) > 20 else "") or "none"

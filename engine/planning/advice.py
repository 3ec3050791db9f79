"""PURE: scale-up advice for pending pods — which pool to grow, by how many nodes, and what it wastes.

cluster-autoscaler's estimate and its least-waste expander, as a proposal instead of an action:

- for each pool, new nodes are modelled on the pool's template (an existing node's allocatable,
  labels and taints, plus the DaemonSet pods every new node would also run); pending pods are packed
  onto as many new nodes as they need (largest first, engine.planning.placement's rules), never past the
  pool's maximum size;
- waste is computed from node *capacity* times the node count, against the requests of the pods the
  option places: wastedCPU = (cap·n - Σreq)/(cap·n), the same for memory; the score is their sum;
- the best option places the most pending pods, then wastes least (cluster-autoscaler compares waste
  among the options that help; here an option that helps fewer pods never wins on waste alone).

Each option renders cluster-autoscaler's own log line: "Expanding Node Group web would waste 25.00% CPU,
50.00% Memory, 37.50% Blended".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.domain.model import DRAINING_TAINT_KEY, NodeInfo, PodInfo
from engine.planning import placement
from engine.pools.base import Pool
from engine.pools.victims import AUTOSCALER_TAINTS

CPU, MEMORY = placement.CPU, placement.MEMORY


@dataclass(frozen=True, slots=True)
class PoolTemplate:
    pool: str
    node: NodeInfo
    """What a new node of the pool looks like (allocatable, labels, taints)."""
    capacity: dict[str, int]
    """Capacity of such a node (cpu in millicores, memory in bytes): waste is computed on it."""
    size: int
    max_size: int | None = None
    daemonsets: tuple[PodInfo, ...] = ()
    """Pods every new node runs as well (DaemonSets that select it): they use room, not waste it."""


@dataclass(frozen=True, slots=True)
class ExpansionOption:
    pool: str
    nodes: int
    pods: tuple[str, ...]
    """The pending pods this option would schedule."""
    wasted_cpu: float
    wasted_memory: float
    limited_by_max: bool = False
    """The pool's maximum stopped the estimate before every pod it could take was placed."""
    size: int = 0
    """The pool's size now: growing it means asking for `size + nodes`."""

    @property
    def score(self) -> float:
        return self.wasted_cpu + self.wasted_memory

    def describe(self) -> str:
        return (
            f"Expanding Node Group {self.pool} would waste {self.wasted_cpu * 100:.2f}% CPU, "
            f"{self.wasted_memory * 100:.2f}% Memory, {self.score * 50:.2f}% Blended"
        )


@dataclass(frozen=True, slots=True)
class ScaleUpAdvice:
    options: tuple[ExpansionOption, ...]
    """Every pool that would schedule at least one pending pod, best first."""
    unhelped: dict[str, str]
    """Pending pods no pool's new node would take, with why (the scheduler's wording for the best try)."""

    notes: tuple[str, ...] = ()

    @property
    def best(self) -> ExpansionOption | None:
        return self.options[0] if self.options else None

    def to_json(self) -> dict[str, Any]:
        return {
            "best": self.best.pool if self.best else None,
            "options": [
                {
                    "pool": o.pool,
                    "nodes": o.nodes,
                    "pods": list(o.pods),
                    "wasted_cpu": round(o.wasted_cpu, 4),
                    "wasted_memory": round(o.wasted_memory, 4),
                    "limited_by_max": o.limited_by_max,
                    "size": o.size,
                    "line": o.describe(),
                }
                for o in self.options
            ],
            "unhelped": dict(self.unhelped),
            "notes": list(self.notes),
        }

    def to_text(self) -> str:
        if not self.options and not self.unhelped:
            return "No unschedulable pods: nothing to advise."
        lines = []
        best = self.best
        if best:
            lines.append(f"Advice: grow pool {best.pool} by {best.nodes} node(s) for {len(best.pods)} pod(s)")
        for o in self.options:
            capped = " (pool maximum reached)" if o.limited_by_max else ""
            lines.append(f"  {o.describe()} (+{o.nodes} node(s), {len(o.pods)} pod(s)){capped}")
        lines.extend(f"Cannot help {pod}: {why}" for pod, why in sorted(self.unhelped.items()))
        lines.extend(f"Note: {n}" for n in self.notes)
        lines.append("Nothing was changed (advice only).")
        return "\n".join(lines)


def is_unschedulable(pod: PodInfo) -> bool:
    """A pending pod the scheduler gave up on for now (PodScheduled=False, reason Unschedulable)."""
    reason = pod.unscheduled_reason
    return not pod.node_name and (reason == "Unschedulable" or reason.startswith("Unschedulable: "))


def template_of(
    pool: str,
    node: NodeInfo,
    *,
    size: int,
    max_size: int | None,
    daemonsets: Sequence[PodInfo] = (),
) -> PoolTemplate:
    """A pool's new node modelled on one of its nodes (capacity from status.capacity, else allocatable)."""
    # Taints that describe this node's state, not the pool's: a new node would not have them.
    model = replace(node, taints=tuple(t for t in node.taints if not _state_taint(t.key)))
    return PoolTemplate(
        pool=pool,
        node=model,
        capacity={r: node.capacity.get(r) or node.allocatable.get(r, 0) for r in (CPU, MEMORY)},
        size=size,
        max_size=max_size,
        daemonsets=tuple(daemonsets),
    )


def advise(
    pools: Sequence[Pool],
    nodes: Sequence[NodeInfo],
    bound_pods: Sequence[PodInfo],
    unbound_pods: Sequence[PodInfo],
) -> ScaleUpAdvice:
    """Advice from one listing: each pool's template modelled on one of its nodes (and the DaemonSet
    pods that node runs), for the pods the scheduler reported Unschedulable."""
    by_name = {node.name: node for node in nodes}
    daemonset_pods: dict[str, list[PodInfo]] = {}
    for pod in bound_pods:
        if pod.controller is not None and pod.controller.kind == "DaemonSet":
            daemonset_pods.setdefault(pod.node_name, []).append(pod)
    templates, notes = [], []
    for pool in pools:
        model = next((n for n in pool.nodes if n in by_name), None)
        if model is None:
            notes.append(f"pool {pool.name} has no node to model a new one on (it is at zero)")
            continue
        templates.append(
            template_of(
                pool.name,
                by_name[model],
                size=pool.desired,
                max_size=pool.max_size,
                daemonsets=daemonset_pods.get(model, ()),
            )
        )
    pending = [pod for pod in unbound_pods if is_unschedulable(pod)]
    return advise_scale_up(pending, templates, notes=notes)


def advise_scale_up(
    pending: Sequence[PodInfo], templates: Sequence[PoolTemplate], *, notes: Sequence[str] = ()
) -> ScaleUpAdvice:
    options: list[ExpansionOption] = []
    why_not: dict[str, str] = {}
    for template in templates:
        option, rejected = _estimate(pending, template)
        if option is not None:
            options.append(option)
        for key, reason in rejected.items():
            why_not.setdefault(key, f"pool {template.pool}: {reason}")
    options.sort(key=lambda o: (-len(o.pods), o.score, o.nodes, o.pool))
    helped = {key for option in options for key in option.pods}
    unhelped = {p.key: why_not.get(p.key, "no pool to grow") for p in pending if p.key not in helped}
    return ScaleUpAdvice(options=tuple(options), unhelped=unhelped, notes=tuple(notes))


def _estimate(
    pending: Sequence[PodInfo], template: PoolTemplate
) -> tuple[ExpansionOption | None, dict[str, str]]:
    """Pack the pending pods onto new nodes of one pool: the binpacking estimate."""
    room = None if template.max_size is None else max(0, template.max_size - template.size)
    new_nodes: list[NodeInfo] = []
    residents: list[PodInfo] = []
    placed: list[PodInfo] = []
    rejected: dict[str, str] = {}
    limited = False
    for pod in sorted(
        pending,
        key=lambda p: (-p.scheduling.requests.get(CPU, 0), -p.scheduling.requests.get(MEMORY, 0), p.key),
    ):
        if pod.scheduling.unmodelled:
            rejected[pod.key] = "not modelled: " + "; ".join(pod.scheduling.unmodelled)
            continue
        result = placement.place(new_nodes, residents, [pod])
        if not result.fits:
            if room is not None and len(new_nodes) >= room:
                limited = True
                rejected[pod.key] = f"the pool is at its maximum size ({template.max_size})"
                continue
            fresh = _new_node(template, len(new_nodes))
            trial = placement.place(
                [*new_nodes, fresh], [*residents, *_daemonsets_on(template, fresh)], [pod]
            )
            if not trial.fits:
                rejected[pod.key] = trial.unplaced[pod.key].replace("0/", "a new node: 0/", 1)
                continue
            new_nodes.append(fresh)
            residents.extend(_daemonsets_on(template, fresh))
            result = trial
        residents.append(replace(pod, node_name=result.assignments[pod.key]))
        placed.append(pod)
    if not placed:
        return None, rejected
    n = len(new_nodes)
    return (
        ExpansionOption(
            pool=template.pool,
            nodes=n,
            pods=tuple(sorted(p.key for p in placed)),
            wasted_cpu=_waste(
                template.capacity.get(CPU, 0) * n, sum(p.scheduling.requests.get(CPU, 0) for p in placed)
            ),
            wasted_memory=_waste(
                template.capacity.get(MEMORY, 0) * n,
                sum(p.scheduling.requests.get(MEMORY, 0) for p in placed),
            ),
            limited_by_max=limited,
            size=template.size,
        ),
        rejected,
    )


def _new_node(template: PoolTemplate, index: int) -> NodeInfo:
    name = f"{template.pool}-new-{index}"
    labels = {**template.node.labels, placement.HOSTNAME_KEY: name}
    return replace(template.node, name=name, labels=labels, unschedulable=False)


def _daemonsets_on(template: PoolTemplate, node: NodeInfo) -> list[PodInfo]:
    return [replace(ds, name=f"{ds.name}-{node.name}", node_name=node.name) for ds in template.daemonsets]


# cluster-autoscaler sanitises its node templates the same way (utils/taints): node conditions, cordons
# and the marks of a drain or a deletion in progress.
_STATE_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_STATE_TAINTS = frozenset({*AUTOSCALER_TAINTS, DRAINING_TAINT_KEY})


def _state_taint(key: str) -> bool:
    return key in _STATE_TAINTS or key.startswith(_STATE_TAINT_PREFIXES)


def _waste(capacity: int, requested: int) -> float:
    return (capacity - requested) / capacity if capacity > 0 else 0.0

"""Pre-flight plans: what a drain would do to each pod, and why, without changing anything.

Pure: takes snapshots (nodes, pods, PDBs) and a filter context; returns values that render
themselves as text and JSON. The same plan is what an approval card shows, so identical
snapshots must produce identical plans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine import filters
from engine.model import NodeInfo, PdbInfo, PodInfo, pdbs_for_pod


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
    refused_nodes = filters.blocked_nodes(classified)
    # Same rule as the drain pass: waiting pods count too, so a slow low-order group holds back the rest.
    waiting_or_evicted = (filters.Action.EVICT, filters.Action.WAIT)
    min_order = min((v.order for _, v in classified if v.action in waiting_or_evicted), default=0)
    budget_left = {p.key: p.disruptions_allowed for p in pdbs}
    entries: list[PodPlan] = []
    for pod, verdict in classified:
        action = verdict.action.value
        reason = verdict.reason
        if verdict.action is filters.Action.EVICT and pod.is_terminating:
            action, reason = "skip", "already terminating (deletionTimestamp set)"
        elif verdict.action is filters.Action.EVICT and pod.node_name in refused_nodes:
            action, reason = (
                "skip",
                "another pod on this node is refused; kubectl drains a node all or nothing",
            )
        elif verdict.action is filters.Action.EVICT and verdict.order > min_order:
            action, reason = "later", "system-critical: evicted after the other pods"
        elif verdict.action is filters.Action.EVICT:
            action, reason = _predict_eviction(pod, pdbs, budget_left)
        entries.append(PodPlan(pod=pod.key, node=pod.node_name, action=action, reason=reason))
    return DrainPlan(
        nodes=tuple(sorted(names)),
        pods=tuple(entries),
        warnings=tuple(_pdb_warnings(pdbs)),
        already_cordoned=tuple(sorted(n.name for n in nodes if n.is_cordoned)),
    )


def _predict_eviction(pod: PodInfo, pdbs: Sequence[PdbInfo], budget_left: dict[str, int]) -> tuple[str, str]:
    """What the eviction API will answer, from the budgets' current status (and what we used up)."""
    matching = pdbs_for_pod(pod, pdbs)
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

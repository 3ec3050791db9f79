"""What an approval lets a forced run remove: the force scope.

A run is forced when it may evict or delete what a plain drain refuses: `--force` (bare Pods,
orphaned DaemonSet Pods, Pods whose owners opted out of disruption) or phase 2 of a full
zero-scale (grace-0 DELETEs that bypass PodDisruptionBudgets). Each forcing option is a word in
the plan's `forcing` set, so a later one (`disable_eviction`) is tagged, counted and hashed the
same way.

The unit of consent is the workload, not the Pod: a Pod is in scope when its controller
(`Kind/namespace/name`) was approved, so a ReplicaSet's replacement Pod keeps the approval;
a bare Pod has no owner and is approved by name (`Pod/namespace/name`). Phase 2 also checks the
PodDisruptionBudgets it overrides: a budget that was not on the card puts its Pods outside.

Pure: values and functions over `engine.domain.model`; no I/O. What measures a Pod against a plain
drain (what needs force, the guard a forced drain runs first) lives with the drain rules it reads,
in `engine.drain.filters`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.domain.model import PodInfo

FORCE = "force"
"""`--force`: evict what a plain drain refuses (bare Pods, orphaned DaemonSet Pods, opt-outs)."""
FORCE_PHASE = "phase2"
"""Phase 2 of a full zero-scale: DELETE with grace 0 whatever phase 1 left."""
DISABLE_EVICTION = "disable_eviction"
"""`--disable-eviction`: DELETE instead of evict, so no PodDisruptionBudget is consulted."""


def unit_of(pod: PodInfo) -> str:
    """The approved unit a Pod belongs to: its controller, or the Pod itself when it has none."""
    if pod.controller is None:
        return f"Pod/{pod.key}"
    return f"{pod.controller.kind}/{pod.namespace}/{pod.controller.name}"


@dataclass(frozen=True, slots=True)
class ForcedPod:
    """One line of the card: a Pod the run expects to force, its unit, and why it needs force."""

    pod: str
    unit: str
    reason: str


@dataclass(frozen=True, slots=True)
class ForceScope:
    units: tuple[str, ...] = ()
    """Sorted `Kind/namespace/name` of the owners (or bare Pods) whose Pods may be forced."""
    pdbs: tuple[str, ...] = ()
    """Sorted `namespace/name` of the PodDisruptionBudgets phase 2 may override."""
    pods: tuple[ForcedPod, ...] = ()
    """The Pods expected to be forced, as planned: shown on the card; not the unit of consent."""

    def outside(self, pod: PodInfo, pdbs: Iterable[str] = ()) -> str:
        """ "" when the approval covers forcing `pod` (under `pdbs`, the budgets selecting it now);
        otherwise why it does not, as the thread says it."""
        unit = unit_of(pod)
        if unit not in self.units:
            return f"{unit} was not in the approved force scope"
        new = sorted(set(pdbs) - set(self.pdbs))
        if new:
            return f"PodDisruptionBudget {', '.join(new)} was not in the approved force scope"
        return ""

    def essence(self) -> dict[str, Any]:
        """What the plan hash covers: the units and budgets, not the Pods' names."""
        return {"units": list(self.units), "pdbs": list(self.pdbs)}

    def to_json(self) -> dict[str, Any]:
        return {**self.essence(), "pods": [[p.pod, p.unit, p.reason] for p in self.pods]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForceScope:
        return cls(
            units=tuple(data.get("units") or ()),
            pdbs=tuple(data.get("pdbs") or ()),
            pods=tuple(ForcedPod(p[0], p[1], p[2]) for p in data.get("pods") or ()),
        )


def build_scope(
    forced: Sequence[ForcedPod], also: Iterable[PodInfo] = (), pdbs: Iterable[str] = ()
) -> ForceScope:
    """The scope of `forced` Pods, plus the units of `also` (Pods phase 2 may delete if phase 1
    leaves them) and the budgets phase 2 may override."""
    units = {p.unit for p in forced} | {unit_of(p) for p in also}
    reasons: dict[str, list[str]] = {}
    unit: dict[str, str] = {}
    for p in forced:  # a Pod both refused by a plain drain and expected in phase 2: one line
        reasons.setdefault(p.pod, []).append(p.reason)
        unit[p.pod] = p.unit
    return ForceScope(
        units=tuple(sorted(units)),
        pdbs=tuple(sorted(set(pdbs))),
        pods=tuple(ForcedPod(pod, unit[pod], "; ".join(why)) for pod, why in sorted(reasons.items())),
    )


_OPTION_NAMES = {FORCE: "--force", FORCE_PHASE: "phase 2", DISABLE_EVICTION: "--disable-eviction"}


def heading(forcing: Iterable[str]) -> str:
    """What the forced run may do, in one sentence (the card's and the CLI's heading). A forcing
    option added later is named as it is spelt in the plan."""
    options = sorted(set(forcing))
    named = ", ".join(_OPTION_NAMES.get(o, o) for o in options)
    if FORCE_PHASE in options:
        return (
            f"Forced run ({named}): what phase 1 leaves is deleted with grace 0, past "
            "PodDisruptionBudgets, only within this approved scope"
        )
    return f"Forced run ({named}): it removes what a plain drain refuses only within this approved scope"


def describe(scope: ForceScope, *, limit: int = 20) -> list[str]:
    """The scope as lines: each Pod expected to be forced with its unit and why, the other units
    phase 2 may reach, and the budgets it may override. Anything outside is refused, not forced."""
    lines = [f"{p.pod} ({p.unit}): {p.reason}" for p in scope.pods[:limit]]
    if len(scope.pods) > limit:
        lines.append(f"... ({len(scope.pods) - limit} more Pods)")
    if not scope.pods:
        lines.append("no Pod needs force now")
    listed = {p.unit for p in scope.pods}
    others = [u for u in scope.units if u not in listed]
    if others:
        more = f", ... ({len(others) - limit} more)" if len(others) > limit else ""
        shown = ", ".join(others[:limit]) + more
        lines.append(f"and whatever phase 1 leaves of: {shown}")
    if scope.pdbs:
        lines.append(f"PodDisruptionBudgets it may override: {', '.join(scope.pdbs[:limit])}")
    lines.append("a Pod of any other owner (or a new bare Pod) is not forced: the run stops and names it")
    return lines

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

Pure: values and functions over `engine.domain.model` and `engine.drain.filters`; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.domain.model import PodInfo
from engine.drain import filters

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


def plain_drain(*, opt_outs_wait: bool = False) -> filters.DrainOptions:
    """The plain drain a forced run is measured against: `/scale drain NODE` without --force
    (kubectl drain --ignore-daemonsets --delete-emptydir-data). `opt_outs_wait`: phase 1 of a
    full zero-scale, where opted-out Pods wait for phase 2 instead of being refused."""
    plain = filters.DrainOptions.kubectl(ignore_daemonsets=True, delete_emptydir_data=True)
    return replace(plain, opt_outs_wait=opt_outs_wait)


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


def refusals(pod: PodInfo, plain: filters.DrainContext) -> list[str]:
    """Why a plain drain (options in `plain`) refuses `pod`, one phrase per rule; [] when it does not."""
    reasons = []
    verdict = filters.daemonset_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK and pod.controller is not None:
        gone = pod.controller.name
        reasons.append(f"orphaned DaemonSet Pod (DaemonSet {gone} is gone): nothing recreates it")
    verdict = filters.local_storage_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK:
        reasons.append("emptyDir local storage: its data is lost")
    verdict = filters.unreplicated_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK:
        reasons.append("bare Pod (no controller): nothing recreates it")
    annotation = filters.opt_out_annotation(pod)
    verdict = filters.opt_out_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK and annotation is not None:
        reasons.append(f"annotated {annotation}: its owner opted out of disruption")
    return reasons


def needing_force(
    pods: Iterable[PodInfo], plain: filters.DrainContext, forced: filters.DrainContext
) -> list[ForcedPod]:
    """The Pods the plain drain refuses and the forced one removes, with why each needs force."""
    out = []
    for pod in pods:
        if filters.classify(pod, plain).action is not filters.Action.BLOCK:
            continue
        if filters.classify(pod, forced).action is filters.Action.BLOCK:
            continue  # force does not help (another refusal stands): it is a blocker, not forced
        out.append(ForcedPod(pod.key, unit_of(pod), "; ".join(refusals(pod, plain))))
    return out


def scope_guard(scope: ForceScope, plain: filters.DrainOptions) -> filters.PodFilter:
    """A filter that runs first in a forced drain: a Pod only force removes (the `plain` drain
    refuses it) and that the scope does not cover is refused, naming its unit and why, instead
    of being evicted without anyone having approved it."""

    def guard(pod: PodInfo, ctx: filters.DrainContext) -> filters.Verdict | None:
        unforced = replace(ctx, options=plain)
        if filters.classify(pod, unforced).action is not filters.Action.BLOCK:
            return None
        why = scope.outside(pod)
        if not why:
            return None
        refused = "; ".join(refusals(pod, unforced)) or "refused by a plain drain"
        return filters.Verdict(
            filters.Action.BLOCK,
            f"Pods outside the approved force scope ({why}; a plain drain refuses it: {refused}); "
            "request the run again to approve them",
        )

    return guard


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

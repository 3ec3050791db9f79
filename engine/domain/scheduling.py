"""What a pod asks of the scheduler (`PodScheduling`): requests, node selector and affinity,
tolerations, required pod anti-affinity, topology spread, host ports.

`PodInfo.scheduling` carries it (engine.domain.model projects it from the pod's JSON with the pod's
other fields; every replica of a workload shares one value per listed page), and the scheduler model
(engine.planning.placement) reads it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Annotations only: engine.domain.model imports this module for PodInfo's fields.
    from engine.domain.model import LabelSelector, Taint


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False
    """A matchFields requirement: `key` is a field of the Node (only metadata.name exists)."""


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    requirements: tuple[NodeRequirement, ...]


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term: pods matching `selector` in `namespaces`, per topology domain."""

    selector: LabelSelector
    namespaces: frozenset[str]
    topology_key: str


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1


@dataclass(frozen=True, slots=True)
class PodScheduling:
    requests: Mapping[str, int] = field(default_factory=dict)
    """The scheduler's effective requests (engine.domain.model.effective_requests): cpu in
    millicores, memory in bytes, extended resources as integers; init containers, sidecars, limits
    standing in for missing requests and the pod overhead included (unlike PodInfo's
    `cpu_request_milli`, the plain sum of the app containers' requests)."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    """Required node affinity: any one term must match. None when the pod has none."""
    tolerations: tuple[Toleration, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    """Required pod anti-affinity terms on a topology key the scheduler model covers."""
    spread: tuple[SpreadConstraint, ...] = ()
    """DoNotSchedule topology spread constraints the scheduler model covers."""
    host_ports: tuple[tuple[str, int], ...] = ()
    """(protocol, port) of every container port with a hostPort."""
    unmodelled: tuple[str, ...] = ()
    """Scheduling rules the scheduler model does not cover: such a pod never "fits" in it."""

    def tolerates(self, taint: Taint) -> bool:
        """One of the pod's tolerations tolerates `taint`: the one toleration matcher (the scheduler
        model's and the Karpenter provider's)."""
        return any(t.tolerates(taint) for t in self.tolerations)


NO_SCHEDULING = PodScheduling()
"""A pod that asks nothing of the scheduler (requests nothing, tolerates nothing)."""

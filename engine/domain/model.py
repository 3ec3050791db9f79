"""Domain values the engine decides on: pods, nodes and PodDisruptionBudgets.

Pure: no I/O, no clock. Nodes and budgets are built from the raw JSON the API server returns
(`from_raw`), reading only the fields scalebot uses. Pods have one decode, engine.kube.projection
(the listings and watches of a drain are the big reads); what it reads of a pod's spec is parsed here
(`scheduling_fields`, `unscheduled_reason`, the quantity and time parsers), pure and shared with the
nodes' resources.

Over 600 lines on purpose: the values and their parsers from the API's JSON belong together, and
the scheduling values' module (engine.domain.scheduling) cannot hold their parsing without an
import cycle (it needs LabelSelector and the quantity parsers defined here). Parsing raw JSON instead of the
generated client models is what keeps a 30,000-pod listing fast (the models take
roughly 8x longer to deserialise).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from engine.domain.scheduling import (
    NO_SCHEDULING,
    AffinityTerm,
    NodeRequirement,
    NodeSelectorTerm,
    PodScheduling,
    SpreadConstraint,
    Toleration,
)

RawObject = Mapping[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
KARPENTER_DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
SCALEBOT_DO_NOT_DISRUPT_ANNOTATION = "scalebot.io/do-not-disrupt"
CAPI_DRAIN_LABEL = "cluster.x-k8s.io/drain"
DRAINING_TAINT_KEY = "scalebot.io/draining"
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
CA_TO_BE_DELETED_TAINT_KEY = "ToBeDeletedByClusterAutoscaler"
"""cluster-autoscaler is draining and deleting the node (value: unix time, NoSchedule)."""
CA_DELETION_CANDIDATE_TAINT_KEY = "DeletionCandidateOfClusterAutoscaler"
"""cluster-autoscaler found the node unneeded and counts down to removing it (PreferNoSchedule)."""
KARPENTER_DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
"""Karpenter is draining and deleting the node (it does not cordon)."""
SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
DEFAULT_TERMINATION_GRACE_SECONDS = 30


def parse_time(value: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp as the API server writes it (UTC, `Z` suffix)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, as Kubernetes and Cluster API print it."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    api_version: str = ""

    @property
    def is_daemonset(self) -> bool:
        """An apps/v1 DaemonSet: another API group's kind named DaemonSet is an ordinary controller."""
        return self.kind == "DaemonSet" and self.api_version == "apps/v1"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as scalebot reads it, decoded from the API's JSON by engine.kube.projection (its one
    decode: listings, watches, one pod, the tests' builders)."""

    namespace: str
    name: str
    uid: str
    node_name: str = ""
    phase: str = "Running"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    controller: OwnerRef | None = None
    has_empty_dir: bool = False
    priority_class: str = ""
    termination_grace_seconds: int = DEFAULT_TERMINATION_GRACE_SECONDS
    deletion_timestamp: datetime | None = None
    finalizers: tuple[str, ...] = ()
    created_at: datetime | None = None
    cpu_request_milli: int = 0
    memory_request_bytes: int = 0
    unscheduled_reason: str = ""
    """Why the scheduler has not placed the pod, from its PodScheduled=False condition
    ("Unschedulable: 0/3 nodes are available: ..."); "" once scheduled or not yet looked at."""
    local_volumes: tuple[str, ...] = ()
    """Names of the volumes whose data lives on the node and dies with it, as cluster-autoscaler
    counts them: hostPath, and emptyDir unless its medium is Memory."""
    scheduling: PodScheduling = NO_SCHEDULING
    """What the pod asks of the scheduler: engine.planning.placement models it."""

    @property
    def key(self) -> str:
        """`namespace/name`, the form every upstream message uses; also the sort key."""
        return f"{self.namespace}/{self.name}"

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def is_mirror(self) -> bool:
        return MIRROR_ANNOTATION in self.annotations

    @property
    def is_critical(self) -> bool:
        return self.priority_class in CRITICAL_PRIORITY_CLASSES


UNSCHEDULED_REASON_CHARS = 300
"""A scheduler's message names every node group it tried; the report needs its first lines."""


def unscheduled_reason(conditions: Iterable[tuple[Any, Any, Any, Any]]) -> str:
    """The pod's PodScheduled=False reason and message, from its (type, status, reason, message)
    conditions; "" when it has none."""
    for kind, status, reason_value, message_value in conditions:
        if kind == "PodScheduled" and status == "False":
            reason, message = str(reason_value or ""), str(message_value or "")
            text = f"{reason}: {message}" if reason and message else reason or message or "not scheduled"
            return text[:UNSCHEDULED_REASON_CHARS]
    return ""


SUPPORTED_TOPOLOGY_KEYS = frozenset(
    {"kubernetes.io/hostname", "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"}
)
"""The topology keys the scheduler model (engine.planning.placement) counts domains of."""


def parse_resources(raw: Mapping[str, Any]) -> dict[str, int]:
    """A resource list (requests, allocatable, overhead): cpu in millicores, the rest as integers."""
    return {
        name: parse_cpu_milli(value) if name == "cpu" else parse_quantity(value)
        for name, value in raw.items()
    }


def container_requests(raw_resources: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests (`resources`' JSON); a resource with a limit and no request is given
    the limit as its request."""
    return parse_resources({**(raw_resources.get("limits") or {}), **(raw_resources.get("requests") or {})})


def effective_requests(
    containers: Iterable[Mapping[str, int]],
    init_containers: Iterable[tuple[Mapping[str, int], bool]],
    overhead: Mapping[str, int],
) -> dict[str, int]:
    """The scheduler's view of a pod's requests, from its containers' (`container_requests`), its
    init containers' with whether each is a sidecar (restartPolicy Always), and its overhead.

    max(sum of app containers + restartable (sidecar) init containers, each regular init container +
    the sidecars started before it), plus the pod overhead.
    """
    total: dict[str, int] = {}
    for requests in containers:
        _add(total, requests)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for requests, sidecar in init_containers:
        if sidecar:
            _add(sidecars, requests)
            continue
        for resource, amount in requests.items():
            init_peak[resource] = max(init_peak.get(resource, 0), amount + sidecars.get(resource, 0))
    _add(total, sidecars)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, 0), amount)
    _add(total, overhead)
    return {k: v for k, v in total.items() if v}


def _add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, 0) + amount


class SchedulingFields(NamedTuple):
    """The fields of PodInfo read from the pod's containers and scheduling rules (`scheduling_fields`)."""

    cpu_request_milli: int
    memory_request_bytes: int
    scheduling: PodScheduling


def scheduling_fields(
    spec: RawObject, *, namespace: str, labels: Mapping[str, str], zoned_volumes: Sequence[str]
) -> SchedulingFields:
    """PodInfo's fields from a pod spec's containers (`containers`, `initContainers`, `overhead`)
    and scheduling rules (`nodeSelector`, `tolerations`, `affinity`, `topologySpreadConstraints`,
    `resourceClaims`), with the names of its volumes that may be bound to a zone (PersistentVolumeClaims
    and ephemeral volumes). Every replica of a workload has the same: engine.kube.projection calls it
    once per distinct value on a page.

    What the scheduler model does not cover is listed in `unmodelled`: required pod affinity, terms on
    other topology keys or with namespace selectors, zoned volumes, dynamic resource claims.
    """
    containers = spec.get("containers") or ()
    cpu = memory = 0
    for container in containers:
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu += parse_cpu_milli(requests.get("cpu"))
        memory += parse_quantity(requests.get("memory"))
    affinity = spec.get("affinity") or {}
    unmodelled: list[str] = []
    if (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        unmodelled.append("required pod affinity")
    anti = []
    for raw_term in (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ():
        term, problem = _affinity_term(raw_term, namespace)
        if problem:
            unmodelled.append(problem)
        elif term is not None:
            anti.append(term)
    spread = []
    for raw_constraint in spec.get("topologySpreadConstraints") or ():
        constraint, problem = _spread_constraint(raw_constraint, labels)
        if problem:
            unmodelled.append(problem)
        elif constraint is not None:
            spread.append(constraint)
    unmodelled.extend(f"volume {name} may be bound to a zone" for name in zoned_volumes)
    if spec.get("resourceClaims"):
        unmodelled.append("dynamic resource claims")
    return SchedulingFields(
        cpu,
        memory,
        PodScheduling(
            requests=effective_requests(
                [container_requests(c.get("resources") or {}) for c in containers],
                [
                    (container_requests(c.get("resources") or {}), c.get("restartPolicy") == "Always")
                    for c in spec.get("initContainers") or ()
                ],
                parse_resources(spec.get("overhead") or {}),
            ),
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=tuple(
                Toleration(
                    key=t.get("key") or "",
                    operator=t.get("operator") or "Equal",
                    value=t.get("value") or "",
                    effect=t.get("effect") or "",
                )
                for t in spec.get("tolerations") or ()
            ),
            host_ports=tuple(
                (p.get("protocol") or "TCP", int(p["hostPort"]))
                for c in containers
                for p in c.get("ports") or ()
                if p.get("hostPort")
            ),
            node_affinity=_node_affinity(affinity.get("nodeAffinity") or {}),
            anti_affinity=tuple(anti),
            spread=tuple(spread),
            unmodelled=tuple(unmodelled),
        ),
    )


def _node_affinity(raw: RawObject) -> tuple[NodeSelectorTerm, ...] | None:
    required = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return None
    return tuple(
        NodeSelectorTerm(
            requirements=tuple(
                NodeRequirement(
                    key=e.get("key", ""), operator=e.get("operator", ""), values=tuple(e.get("values") or ())
                )
                for e in term.get("matchExpressions") or ()
            )
            + tuple(
                NodeRequirement(
                    key=e.get("key", ""),
                    operator=e.get("operator", ""),
                    values=tuple(e.get("values") or ()),
                    field=True,
                )
                for e in term.get("matchFields") or ()
            )
        )
        for term in required.get("nodeSelectorTerms") or ()
    )


def _affinity_term(raw: RawObject, namespace: str) -> tuple[AffinityTerm | None, str]:
    key = raw.get("topologyKey", "")
    if key not in SUPPORTED_TOPOLOGY_KEYS:
        return None, f"pod anti-affinity on {key or 'no topology key'}"
    if raw.get("namespaceSelector") is not None:
        return None, "pod anti-affinity with a namespace selector"
    if raw.get("matchLabelKeys") or raw.get("mismatchLabelKeys"):
        return None, "pod anti-affinity with matchLabelKeys"
    namespaces = frozenset(raw.get("namespaces") or (namespace,))
    return AffinityTerm(LabelSelector.from_raw(raw.get("labelSelector")), namespaces, key), ""


def _spread_constraint(raw: RawObject, labels: Mapping[str, str]) -> tuple[SpreadConstraint | None, str]:
    if raw.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
        return None, ""  # ScheduleAnyway is a preference
    key = raw.get("topologyKey", "")
    if key not in SUPPORTED_TOPOLOGY_KEYS:
        return None, f"topology spread on {key or 'no topology key'}"
    if raw.get("nodeAffinityPolicy", "Honor") != "Honor" or raw.get("nodeTaintsPolicy", "Ignore") != "Ignore":
        return None, "topology spread with non-default node policies"
    selector = LabelSelector.from_raw(raw.get("labelSelector"))
    extra = {k: labels[k] for k in raw.get("matchLabelKeys") or () if k in labels}
    if extra:
        selector = LabelSelector(
            match_labels={**selector.match_labels, **extra}, match_expressions=selector.match_expressions
        )
    if raw.get("labelSelector") is None:
        # No selector matches no pods: the constraint counts nothing and never blocks.
        return None, ""
    return SpreadConstraint(
        max_skew=int(raw.get("maxSkew", 1)),
        topology_key=key,
        selector=selector,
        min_domains=int(raw.get("minDomains") or 1),
    ), ""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    @property
    def repels_pods(self) -> bool:
        """NoSchedule or NoExecute: only a pod that tolerates it is placed on the node
        (PreferNoSchedule only steers the scheduler)."""
        return self.effect in ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class CordonResult:
    """What a node carried before scalebot cordoned it."""

    had_taint: bool
    """Our draining taint was already there: an earlier run of ours cordoned it."""
    was_unschedulable: bool

    @property
    def cordoned_by_someone_else(self) -> bool:
        """Cordoned before we came, and not by us: a cancel or wake must leave it cordoned."""
        return self.was_unschedulable and not self.had_taint


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: str = "Unknown"
    """Status of the Ready condition: "True", "False", "Unknown" (unreachable), or "" when the node
    has no Ready condition yet (never reported: not unreachable, as Cluster API reads it)."""
    ready_reason: str = ""
    cpu_allocatable_milli: int = 0
    memory_allocatable_bytes: int = 0
    created_at: datetime | None = None
    deletion_timestamp: datetime | None = None
    volumes_attached: int = 0
    """Entries of status.volumesAttached: volumes still attached to the node's machine."""
    allocatable: Mapping[str, int] = field(default_factory=dict)
    """Every resource of status.allocatable (`parse_resources`): cpu in millicores, memory in bytes, pods
    as a count, extended resources as integers. The scheduler model reads it."""
    capacity: Mapping[str, int] = field(default_factory=dict)
    """status.capacity the same way: scale-up advice computes a new node's waste on it."""

    @property
    def is_unreachable(self) -> bool:
        return self.ready == "Unknown"

    @property
    def is_cordoned(self) -> bool:
        """Cordoned by anyone: kubectl's flag, or a drain taint that Karpenter-style tools use instead."""
        return self.unschedulable or any(t.key == DRAINING_TAINT_KEY for t in self.taints)

    @classmethod
    def from_raw(cls, raw: RawObject) -> NodeInfo:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        ready, reason = "", "NodeStatusNeverUpdated"
        for cond in status.get("conditions") or ():
            if cond.get("type") == "Ready":
                ready, reason = cond.get("status", "Unknown"), cond.get("reason", "")
        allocatable = parse_resources(status.get("allocatable") or {})
        return cls(
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
            taints=tuple(
                Taint(key=t.get("key", ""), effect=t.get("effect", ""), value=t.get("value") or "")
                for t in spec.get("taints") or ()
            ),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            ready_reason=reason,
            cpu_allocatable_milli=allocatable.get("cpu", 0),
            memory_allocatable_bytes=allocatable.get("memory", 0),
            created_at=parse_time(meta.get("creationTimestamp")),
            deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
            volumes_attached=len(status.get("volumesAttached") or ()),
            allocatable=allocatable,
            capacity=parse_resources(status.get("capacity") or {}),
        )


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(_requirement_matches(r, labels) for r in self.match_expressions)

    @classmethod
    def from_raw(cls, raw: RawObject | None) -> LabelSelector:
        raw = raw or {}
        return cls(
            match_labels=raw.get("matchLabels") or {},
            match_expressions=tuple(
                LabelSelectorRequirement(
                    key=e.get("key", ""), operator=e.get("operator", ""), values=tuple(e.get("values") or ())
                )
                for e in raw.get("matchExpressions") or ()
            ),
        )


def _requirement_matches(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    if req.operator == "In":
        return labels.get(req.key) in req.values
    if req.operator == "NotIn":
        return labels.get(req.key) not in req.values
    if req.operator == "Exists":
        return req.key in labels
    if req.operator == "DoesNotExist":
        return req.key not in labels
    return False  # an invalid operator selects nothing, as the API server treats an invalid selector


@dataclass(frozen=True, slots=True)
class PdbInfo:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0
    generation: int = 0
    observed_generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_observed(self) -> bool:
        """Until the disruption controller has observed the budget, every eviction gets a 429."""
        return self.observed_generation >= self.generation

    def selects(self, pod: PodInfo) -> bool:
        """The eviction path's rule: a nil or empty selector matches nothing, not everything."""
        return (
            pod.namespace == self.namespace
            and not self.selector.is_empty
            and self.selector.matches(pod.labels)
        )

    @classmethod
    def from_raw(cls, raw: RawObject) -> PdbInfo:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            selector=LabelSelector.from_raw(spec.get("selector")),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            current_healthy=int(status.get("currentHealthy") or 0),
            desired_healthy=int(status.get("desiredHealthy") or 0),
            expected_pods=int(status.get("expectedPods") or 0),
            generation=int(meta.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
        )


def pdbs_for_pod(pod: PodInfo, pdbs: Sequence[PdbInfo]) -> list[PdbInfo]:
    return [p for p in pdbs if p.selects(pod)]


class PdbIndex:
    """PodDisruptionBudgets indexed for matching many pods: by namespace (a PDB selects pods of its
    own namespace only) and by one of its `matchLabels` pairs, so a pod is checked against the few
    PDBs that can select it, not all of them (30,000 pods and 200 PDBs make six million checks).
    `for_pod` answers exactly what `pdbs_for_pod` does, in the same order."""

    def __init__(self, pdbs: Iterable[PdbInfo]) -> None:
        self._by_label: dict[tuple[str, str, str], list[tuple[int, PdbInfo]]] = {}
        self._unkeyed: dict[str, list[tuple[int, PdbInfo]]] = {}
        for position, pdb in enumerate(pdbs):
            if pdb.selector.match_labels:
                key, value = min(pdb.selector.match_labels.items())
                self._by_label.setdefault((pdb.namespace, key, value), []).append((position, pdb))
            else:
                self._unkeyed.setdefault(pdb.namespace, []).append((position, pdb))

    def for_pod(self, pod: PodInfo) -> list[PdbInfo]:
        candidates = list(self._unkeyed.get(pod.namespace, ()))
        if self._by_label:
            for key, value in pod.labels.items():
                candidates += self._by_label.get((pod.namespace, key, value), ())
        return [pdb for _, pdb in sorted(candidates, key=lambda c: c[0]) if pdb.selects(pod)]


_SUFFIXES = {
    "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def parse_quantity(value: str | int | float | None) -> int:
    """A Kubernetes quantity ("512Mi", "1G", "1e3") as an integer; 0 when absent or malformed."""
    if value is None or value == "":
        return 0
    if isinstance(value, int | float):
        return int(value)
    text = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"):
        if text.endswith(suffix):
            try:
                return int(float(text[: -len(suffix)]) * _SUFFIXES[suffix])
            except ValueError:
                return 0
    if text.endswith("m"):
        try:
            return int(float(text[:-1]) / 1000)
        except ValueError:
            return 0
    try:
        return int(float(text))
    except ValueError:
        return 0


def parse_cpu_milli(value: str | int | float | None) -> int:
    """CPU in millicores: "250m" → 250, "2" → 2000."""
    if value is None or value == "":
        return 0
    if isinstance(value, int | float):
        return int(value * 1000)
    text = value.strip()
    try:
        if text.endswith("m"):
            return int(float(text[:-1]))
        return int(float(text) * 1000)
    except ValueError:
        return 0


_SET_REQUIREMENT = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


def parse_label_selector(text: str) -> LabelSelector:
    """A label selector string as `kubectl -l` takes it (`=`, `==`, `!=`, `in`, `notin`, `key`,
    `!key`); ValueError names a term it cannot read."""
    requirements: list[LabelSelectorRequirement] = []
    for term in (t.strip() for t in re.split(r",(?![^(]*\))", text)):
        if not term:
            continue
        match = _SET_REQUIREMENT.match(term)
        if match:
            key, op, values = match.groups()
            parsed = tuple(v.strip() for v in values.split(",") if v.strip())
            requirements.append(LabelSelectorRequirement(key, "In" if op == "in" else "NotIn", parsed))
        elif term.startswith("!"):
            requirements.append(LabelSelectorRequirement(term[1:].strip(), "DoesNotExist"))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            requirements.append(LabelSelectorRequirement(key.strip(), "NotIn", (value.strip(),)))
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            requirements.append(LabelSelectorRequirement(key.strip(), "In", (value.strip(),)))
        elif re.fullmatch(r"[\w./-]+", term):
            requirements.append(LabelSelectorRequirement(term, "Exists"))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return LabelSelector(match_expressions=tuple(requirements))

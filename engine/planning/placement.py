"""PURE: would these pods fit on these nodes, and where? A conservative model of kube-scheduler.

Consolidation ("can this node's pods move elsewhere?") and scale-up advice ("which pool would take
these pending pods?") both ask it. The model follows kube-scheduler's filter plugins for what it
covers, with the scheduler's own wording for why a node was rejected:

  NodeResourcesFit     requests (cpu, memory, pods, extended resources) within allocatable; the
                       effective request of init containers as the scheduler computes it
  TaintToleration      NoSchedule / NoExecute taints must be tolerated (PreferNoSchedule is soft)
  NodeUnschedulable    a cordoned node takes only pods tolerating node.kubernetes.io/unschedulable
  NodeAffinity         nodeSelector and required node affinity (In, NotIn, Exists, DoesNotExist,
                       Gt, Lt; matchFields on metadata.name)
  NodePorts            host ports (protocol + port; any host IP counts as a conflict)
  InterPodAffinity     required pod anti-affinity on kubernetes.io/hostname or a zone label, in
                       both directions (the incoming pod's terms and the residents' terms)
  PodTopologySpread    DoNotSchedule constraints on hostname or zone, with matchLabelKeys and
                       minDomains; nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore (the defaults)

What it does not model makes a pod "does not fit", never "fits": required pod affinity, anti-affinity
or spread on other topology keys, non-default spread policies, namespace selectors on affinity terms,
volumes bound to a zone (PersistentVolumeClaims), dynamic resource claims. Placement is greedy
(largest first, onto the fullest node that takes it, as a bin-packer would), so "does not fit" can
be wrong in the safe direction: a cleverer arrangement might exist. Preferred (soft) rules are
ignored: they never stop the scheduler from binding a pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.domain.model import LabelSelector, Taint, parse_cpu_milli, parse_quantity

HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
SUPPORTED_TOPOLOGY_KEYS = frozenset({HOSTNAME_KEY, ZONE_KEY, "failure-domain.beta.kubernetes.io/zone"})
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
CPU, MEMORY, PODS = "cpu", "memory", "pods"


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
class SimNode:
    name: str
    allocatable: Mapping[str, int]
    """cpu in millicores, memory in bytes, pods as a count, extended resources as integers."""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class SimPod:
    namespace: str
    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    """Required node affinity: any one term must match. None when the pod has none."""
    tolerations: tuple[Toleration, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[tuple[str, int], ...] = ()
    """(protocol, port) of every container port with a hostPort."""
    unsupported: tuple[str, ...] = ()
    """Scheduling rules the model does not cover: such a pod never "fits"."""
    node: str = ""
    """The node it runs on now ("" for a pending pod)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Placement:
    assignments: Mapping[str, str]
    """pod key → node name, for every pod that fits."""
    unplaced: Mapping[str, str]
    """pod key → why no node takes it (the scheduler's "0/N nodes are available: …" wording)."""

    @property
    def fits(self) -> bool:
        return not self.unplaced


# -- the simulation ------------------------------------------------------------------------------


def place(
    nodes: Sequence[SimNode],
    residents: Iterable[SimPod],
    incoming: Sequence[SimPod],
    *,
    all_or_nothing: bool = False,
) -> Placement:
    """Place `incoming` pods onto `nodes`, which already run `residents` (pods that stay, DaemonSets).

    Residents on nodes not in `nodes` are ignored (they leave with their node). With
    `all_or_nothing` the simulation stops at the first pod that fits nowhere (a consolidation
    candidate needs every pod placed; the rest would be wasted work).
    """
    return Simulation(nodes, residents).place(incoming, all_or_nothing=all_or_nothing)


class Simulation:
    """Nodes and the pods on them, kept across many placements (one consolidation plan asks hundreds).

    `place` binds what fits; with `all_or_nothing` a placement that leaves a pod out is rolled back
    whole. A pod already in the simulation moves: its old place is given up first (and restored on a
    rollback). Excluded nodes count as gone: they take no pod, and their pods count for no rule.
    """

    def __init__(self, nodes: Sequence[SimNode], residents: Iterable[SimPod]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.used: dict[str, Counter[str]] = {n.name: Counter() for n in nodes}
        self.on_node: dict[str, dict[str, SimPod]] = {n.name: {} for n in nodes}
        self.where: dict[str, str] = {}
        """pod key → node."""
        self.by_namespace: dict[str, dict[str, SimPod]] = {}
        self.by_label: dict[tuple[str, str, str], dict[str, SimPod]] = {}
        """(namespace, label, value) → pods: selectors look up their rarest label instead of scanning."""
        self.repellers: dict[tuple[str, str, str] | None, dict[str, SimPod]] = {}
        """Pods with anti-affinity terms, by (namespace, label, value) of a term's first matchLabel
        (None: terms without matchLabels, checked against every newcomer)."""
        for pod in residents:
            if pod.node in self.nodes:
                self._bind(pod, pod.node)

    def place(
        self, incoming: Sequence[SimPod], *, exclude: Collection[str] = (), all_or_nothing: bool = False
    ) -> Placement:
        excluded = frozenset(exclude)
        candidates = [n for n in self.nodes.values() if n.name not in excluded]
        assignments: dict[str, str] = {}
        unplaced: dict[str, str] = {}
        undo: list[tuple[SimPod, str | None]] = []
        """(pod, where it was before this call) for every pod bound here, to roll back."""
        for pod in sorted(incoming, key=_largest_first):
            if pod.unsupported:
                unplaced[pod.key] = "not modelled, so not assumed to fit: " + "; ".join(pod.unsupported)
                if all_or_nothing:
                    break
                continue
            before = self.where.get(pod.key)
            if before is not None:
                self._unbind(pod.key)
            rules = _PodRules.of(pod, self, excluded)
            reasons: Counter[str] = Counter()
            best: SimNode | None = None
            best_free = 0.0
            for node in candidates:
                reason = self._rejects(pod, node, rules)
                if reason:
                    reasons[reason] += 1
                    continue
                free = self._free_fraction_after(pod, node)
                if best is None or free < best_free:
                    best, best_free = node, free
            if best is None:
                if before is not None:
                    self._bind(self._pod_at(pod, before), before)
                unplaced[pod.key] = _unavailable(len(candidates), reasons)
                if all_or_nothing:
                    break
                continue
            self._bind(self._pod_at(pod, best.name), best.name)
            undo.append((pod, before))
            assignments[pod.key] = best.name
        if unplaced and all_or_nothing:
            for pod, before in reversed(undo):
                self._unbind(pod.key)
                if before is not None:
                    self._bind(self._pod_at(pod, before), before)
            return Placement(assignments={}, unplaced=unplaced)
        return Placement(assignments=assignments, unplaced=unplaced)

    def drop_node(self, name: str) -> None:
        """The node is gone, and so are the pods still on it."""
        for key in list(self.on_node.get(name, {})):
            self._unbind(key)
        self.nodes.pop(name, None)
        self.used.pop(name, None)
        self.on_node.pop(name, None)

    # -- bookkeeping --------------------------------------------------------------------------------

    @staticmethod
    def _pod_at(pod: SimPod, node: str) -> SimPod:
        return pod if pod.node == node else replace(pod, node=node)

    def _bind(self, pod: SimPod, node: str) -> None:
        self.used[node].update({**pod.requests, PODS: 1})
        self.on_node[node][pod.key] = pod
        self.where[pod.key] = node
        self.by_namespace.setdefault(pod.namespace, {})[pod.key] = pod
        for label in pod.labels.items():
            self.by_label.setdefault((pod.namespace, *label), {})[pod.key] = pod
        for index in _repeller_keys(pod):
            self.repellers.setdefault(index, {})[pod.key] = pod

    def _unbind(self, key: str) -> None:
        node = self.where.pop(key)
        pod = self.on_node[node].pop(key)
        self.used[node].subtract({**pod.requests, PODS: 1})
        self.by_namespace[pod.namespace].pop(key, None)
        for label in pod.labels.items():
            self.by_label[(pod.namespace, *label)].pop(key, None)
        for index in _repeller_keys(pod):
            self.repellers[index].pop(key, None)

    def selected(self, namespace: str, selector: LabelSelector) -> Iterable[SimPod]:
        """The pods of `namespace` that `selector` matches."""
        if selector.match_labels:
            smallest = min(
                (self.by_label.get((namespace, *label), {}) for label in selector.match_labels.items()),
                key=len,
            )
            pods: Iterable[SimPod] = smallest.values()
        else:
            pods = self.by_namespace.get(namespace, {}).values()
        return [p for p in pods if selector.matches(p.labels)]

    def repelling(self, pod: SimPod) -> Iterable[SimPod]:
        """Pods whose anti-affinity terms may select `pod` (checked exactly by the caller)."""
        found = dict(self.repellers.get(None, {}))
        for label in pod.labels.items():
            for holder in self.repellers.get((pod.namespace, *label), {}).values():
                found[holder.key] = holder
        # Terms naming other namespaces list the pod's namespace in the index key of each of them.
        return found.values()

    # -- the filters ----------------------------------------------------------------------------------

    def _free_fraction_after(self, pod: SimPod, node: SimNode) -> float:
        """Share of the node's cpu and memory left after placing `pod`: lower is a tighter pack."""
        shares = []
        for resource in (CPU, MEMORY):
            capacity = node.allocatable.get(resource, 0)
            if capacity > 0:
                left = capacity - self.used[node.name][resource] - pod.requests.get(resource, 0)
                shares.append(left / capacity)
        return sum(shares) / len(shares) if shares else 0.0

    def _rejects(self, pod: SimPod, node: SimNode, rules: _PodRules) -> str:
        """Why `node` cannot take `pod` ("" when it can), in the order the scheduler's filters run."""
        if node.unschedulable and not _tolerated(pod, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        if not _matches_node(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        untolerated = next((t for t in node.taints if _blocks(t) and not _tolerated(pod, t)), None)
        if untolerated is not None:
            return f"node(s) had untolerated taint {{{untolerated.key}: {untolerated.value}}}"
        if pod.host_ports and any(
            port in other.host_ports for other in self.on_node[node.name].values() for port in pod.host_ports
        ):
            return "node(s) didn't have free ports for the requested pod ports"
        short = self._insufficient(pod, node)
        if short:
            return short
        if not rules.anti_affinity_allows(node):
            return "node(s) didn't match pod anti-affinity rules"
        if not rules.spread_allows(node):
            return "node(s) didn't match pod topology spread constraints"
        return ""

    def _insufficient(self, pod: SimPod, node: SimNode) -> str:
        used = self.used[node.name]
        if used[PODS] + 1 > node.allocatable.get(PODS, 110):
            return "Too many pods"
        for resource, amount in sorted(pod.requests.items()):
            if amount > 0 and used[resource] + amount > node.allocatable.get(resource, 0):
                return f"Insufficient {resource}"
        return ""


@dataclass(frozen=True, slots=True)
class _PodRules:
    """One pod's inter-pod rules, resolved once against the simulation before its nodes are tried."""

    blocked: tuple[tuple[str, frozenset[str]], ...]
    """(topology key, domains holding a pod the pod's own anti-affinity terms select)."""
    repelled: tuple[tuple[str, str], ...]
    """(topology key, domain) where a resident's anti-affinity term selects this pod."""
    spread: tuple[tuple[str, Mapping[str, int], int, int], ...]
    """(topology key, matching pods per eligible domain, the global minimum, max skew - self match)."""

    @classmethod
    def of(cls, pod: SimPod, sim: Simulation, excluded: frozenset[str]) -> _PodRules:
        def domain(node: str, key: str) -> str | None:
            return None if node in excluded else sim.nodes[node].labels.get(key)

        blocked = []
        for term in pod.anti_affinity:
            domains = {
                domain(sim.where[other.key], term.topology_key)
                for ns in term.namespaces
                for other in sim.selected(ns, term.selector)
            }
            blocked.append((term.topology_key, frozenset(d for d in domains if d is not None)))
        repelled = []
        for other in sim.repelling(pod):
            for term in other.anti_affinity:
                if _term_selects(term, pod):
                    d = domain(sim.where[other.key], term.topology_key)
                    if d is not None:
                        repelled.append((term.topology_key, d))
        spread = []
        for constraint in pod.spread:
            key = constraint.topology_key
            # Domains come from the nodes the pod may go to by affinity (taints are ignored).
            eligible = {
                name: value
                for name, node in sim.nodes.items()
                if name not in excluded
                and (value := node.labels.get(key)) is not None
                and _matches_node(pod, node)
            }
            counts: Counter[str] = Counter(dict.fromkeys(eligible.values(), 0))
            for other in sim.selected(pod.namespace, constraint.selector):
                where = sim.where[other.key]
                if where in eligible:
                    counts[eligible[where]] += 1
            minimum = min(counts.values()) if len(counts) >= constraint.min_domains and counts else 0
            self_match = 1 if constraint.selector.matches(pod.labels) else 0
            spread.append((key, counts, minimum, constraint.max_skew - self_match))
        return cls(blocked=tuple(blocked), repelled=tuple(repelled), spread=tuple(spread))

    def anti_affinity_allows(self, node: SimNode) -> bool:
        for key, domains in self.blocked:
            value = node.labels.get(key)
            if value is None or value in domains:
                return False  # no domain: the model does not guess how the scheduler treats it
        return not any(node.labels.get(key) == value for key, value in self.repelled)

    def spread_allows(self, node: SimNode) -> bool:
        for key, counts, minimum, allowed in self.spread:
            value = node.labels.get(key)
            if value is None or counts.get(value, 0) - minimum > allowed:
                return False
        return True


def _repeller_keys(pod: SimPod) -> set[tuple[str, str, str] | None]:
    keys: set[tuple[str, str, str] | None] = set()
    for term in pod.anti_affinity:
        if not term.selector.match_labels:
            keys.add(None)
            continue
        label = next(iter(sorted(term.selector.match_labels.items())))
        keys.update((ns, *label) for ns in term.namespaces)
    return keys


def _largest_first(pod: SimPod) -> tuple[int, int, str]:
    return (-pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.key)


def _unavailable(total: int, reasons: Counter[str]) -> str:
    if not total:
        return "0/0 nodes are available: no nodes."
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"0/{total} nodes are available: {parts}."


def _blocks(taint: Taint) -> bool:
    return taint.effect in ("NoSchedule", "NoExecute")


def _tolerated(pod: SimPod, taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in pod.tolerations)


def _matches_node(pod: SimPod, node: SimNode) -> bool:
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.node_affinity is None:
        return True
    return any(
        term.requirements and all(_requirement(r, node) for r in term.requirements)
        for term in pod.node_affinity
    )


def _requirement(req: NodeRequirement, node: SimNode) -> bool:
    value = (node.name if req.key == "metadata.name" else None) if req.field else node.labels.get(req.key)
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            try:
                have, bound = int(value or ""), int(req.values[0])
            except (ValueError, IndexError):
                return False
            return have > bound if req.operator == "Gt" else have < bound
    return False


def _term_selects(term: AffinityTerm, pod: SimPod) -> bool:
    return pod.namespace in term.namespaces and term.selector.matches(pod.labels)


# -- from the API's JSON -------------------------------------------------------------------------

RawObject = Mapping[str, Any]


def node_from_raw(raw: RawObject) -> SimNode:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    name = meta.get("name", "")
    # The kubelet sets the hostname label; a node without it (a bare kwok node) is given its name, so
    # per-node rules still count per node (stricter than the scheduler, which then counts nothing).
    labels = {HOSTNAME_KEY: name, **(meta.get("labels") or {})}
    return SimNode(
        name=name,
        allocatable=_resources(status.get("allocatable") or {}),
        labels=labels,
        taints=tuple(
            Taint(key=t.get("key", ""), effect=t.get("effect", ""), value=t.get("value") or "")
            for t in spec.get("taints") or ()
        ),
        unschedulable=bool(spec.get("unschedulable")),
    )


def pod_from_raw(raw: RawObject) -> SimPod:
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    namespace = meta.get("namespace", "")
    labels = dict(meta.get("labels") or {})
    unsupported: list[str] = []
    affinity = spec.get("affinity") or {}
    node_affinity = _node_affinity(affinity.get("nodeAffinity") or {})
    if (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        unsupported.append("required pod affinity")
    anti = []
    for raw_term in (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ():
        term, problem = _affinity_term(raw_term, namespace)
        if problem:
            unsupported.append(problem)
        elif term is not None:
            anti.append(term)
    spread = []
    for raw_constraint in spec.get("topologySpreadConstraints") or ():
        constraint, problem = _spread_constraint(raw_constraint, labels)
        if problem:
            unsupported.append(problem)
        elif constraint is not None:
            spread.append(constraint)
    for volume in spec.get("volumes") or ():
        if volume.get("persistentVolumeClaim") or volume.get("ephemeral"):
            unsupported.append(f"volume {volume.get('name', '')} may be bound to a zone")
    if spec.get("resourceClaims"):
        unsupported.append("dynamic resource claims")
    return SimPod(
        namespace=namespace,
        name=meta.get("name", ""),
        requests=effective_requests(spec),
        labels=labels,
        node_selector=dict(spec.get("nodeSelector") or {}),
        node_affinity=node_affinity,
        tolerations=tuple(
            Toleration(
                key=t.get("key") or "",
                operator=t.get("operator") or "Equal",
                value=t.get("value") or "",
                effect=t.get("effect") or "",
            )
            for t in spec.get("tolerations") or ()
        ),
        anti_affinity=tuple(anti),
        spread=tuple(spread),
        host_ports=tuple(
            (p.get("protocol") or "TCP", int(p["hostPort"]))
            for c in spec.get("containers") or ()
            for p in c.get("ports") or ()
            if p.get("hostPort")
        ),
        unsupported=tuple(unsupported),
        node=spec.get("nodeName") or "",
    )


def effective_requests(spec: RawObject) -> dict[str, int]:
    """The scheduler's view of a pod's requests.

    max(sum of app containers + restartable (sidecar) init containers, each regular init container +
    the sidecars started before it), plus the pod overhead.
    """
    total: Counter[str] = Counter()
    for container in spec.get("containers") or ():
        total.update(_container_requests(container))
    sidecars: Counter[str] = Counter()
    init_peak: Counter[str] = Counter()
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars.update(requests)
            continue
        for resource, amount in requests.items():
            init_peak[resource] = max(init_peak[resource], amount + sidecars[resource])
    total.update(sidecars)
    for resource, amount in init_peak.items():
        total[resource] = max(total[resource], amount)
    total.update(_resources(spec.get("overhead") or {}))
    return {k: v for k, v in total.items() if v}


def _container_requests(container: RawObject) -> Counter[str]:
    resources = container.get("resources") or {}
    # A container with limits and no requests is given requests equal to its limits.
    return Counter(_resources({**(resources.get("limits") or {}), **(resources.get("requests") or {})}))


def _resources(raw: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for name, value in raw.items():
        out[name] = parse_cpu_milli(value) if name == CPU else parse_quantity(value)
    return out


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

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

It reads the adapter's values: a node's `NodeInfo` (allocatable, labels, taints, cordon) and a
pod's `PodInfo` (its `scheduling` fields, labels, node). A node without the hostname label (a bare
kwok node) is given its name as one, so per-node rules still count per node (stricter than the
scheduler, which then counts nothing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from engine.domain.model import LabelSelector, NodeInfo, PodInfo, Taint
from engine.domain.scheduling import AffinityTerm, NodeRequirement

HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
CPU, MEMORY, PODS = "cpu", "memory", "pods"


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
    nodes: Sequence[NodeInfo],
    residents: Iterable[PodInfo],
    incoming: Sequence[PodInfo],
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
    A pod keeps the `node_name` it was listed with: where the simulation has it is `where`.
    """

    def __init__(self, nodes: Sequence[NodeInfo], residents: Iterable[PodInfo]) -> None:
        self.nodes = {n.name: _with_hostname(n) for n in nodes}
        self.used: dict[str, Counter[str]] = {n.name: Counter() for n in nodes}
        self.on_node: dict[str, dict[str, PodInfo]] = {n.name: {} for n in nodes}
        self.where: dict[str, str] = {}
        """pod key → node."""
        self.by_namespace: dict[str, dict[str, PodInfo]] = {}
        self.by_label: dict[tuple[str, str, str], dict[str, PodInfo]] = {}
        """(namespace, label, value) → pods: selectors look up their rarest label instead of scanning."""
        self.repellers: dict[tuple[str, str, str] | None, dict[str, PodInfo]] = {}
        """Pods with anti-affinity terms, by (namespace, label, value) of a term's first matchLabel
        (None: terms without matchLabels, checked against every newcomer)."""
        for pod in residents:
            if pod.node_name in self.nodes:
                self._bind(pod, pod.node_name)

    def place(
        self, incoming: Sequence[PodInfo], *, exclude: Collection[str] = (), all_or_nothing: bool = False
    ) -> Placement:
        excluded = frozenset(exclude)
        candidates = [n for n in self.nodes.values() if n.name not in excluded]
        assignments: dict[str, str] = {}
        unplaced: dict[str, str] = {}
        undo: list[tuple[PodInfo, str | None]] = []
        """(pod, where it was before this call) for every pod bound here, to roll back."""
        for pod in sorted(incoming, key=_largest_first):
            if pod.scheduling.unmodelled:
                unplaced[pod.key] = "not modelled, so not assumed to fit: " + "; ".join(
                    pod.scheduling.unmodelled
                )
                if all_or_nothing:
                    break
                continue
            before = self.where.get(pod.key)
            if before is not None:
                self._unbind(pod.key)
            rules = _PodRules.of(pod, self, excluded)
            reasons: Counter[str] = Counter()
            best: NodeInfo | None = None
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
                    self._bind(pod, before)
                unplaced[pod.key] = _unavailable(len(candidates), reasons)
                if all_or_nothing:
                    break
                continue
            self._bind(pod, best.name)
            undo.append((pod, before))
            assignments[pod.key] = best.name
        if unplaced and all_or_nothing:
            for pod, before in reversed(undo):
                self._unbind(pod.key)
                if before is not None:
                    self._bind(pod, before)
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

    def _bind(self, pod: PodInfo, node: str) -> None:
        self.used[node].update({**pod.scheduling.requests, PODS: 1})
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
        self.used[node].subtract({**pod.scheduling.requests, PODS: 1})
        self.by_namespace[pod.namespace].pop(key, None)
        for label in pod.labels.items():
            self.by_label[(pod.namespace, *label)].pop(key, None)
        for index in _repeller_keys(pod):
            self.repellers[index].pop(key, None)

    def selected(self, namespace: str, selector: LabelSelector) -> Iterable[PodInfo]:
        """The pods of `namespace` that `selector` matches."""
        if selector.match_labels:
            smallest = min(
                (self.by_label.get((namespace, *label), {}) for label in selector.match_labels.items()),
                key=len,
            )
            pods: Iterable[PodInfo] = smallest.values()
        else:
            pods = self.by_namespace.get(namespace, {}).values()
        return [p for p in pods if selector.matches(p.labels)]

    def repelling(self, pod: PodInfo) -> Iterable[PodInfo]:
        """Pods whose anti-affinity terms may select `pod` (checked exactly by the caller)."""
        found = dict(self.repellers.get(None, {}))
        for label in pod.labels.items():
            for holder in self.repellers.get((pod.namespace, *label), {}).values():
                found[holder.key] = holder
        # Terms naming other namespaces list the pod's namespace in the index key of each of them.
        return found.values()

    # -- the filters ----------------------------------------------------------------------------------

    def _free_fraction_after(self, pod: PodInfo, node: NodeInfo) -> float:
        """Share of the node's cpu and memory left after placing `pod`: lower is a tighter pack."""
        shares = []
        for resource in (CPU, MEMORY):
            capacity = node.allocatable.get(resource, 0)
            if capacity > 0:
                left = capacity - self.used[node.name][resource] - pod.scheduling.requests.get(resource, 0)
                shares.append(left / capacity)
        return sum(shares) / len(shares) if shares else 0.0

    def _rejects(self, pod: PodInfo, node: NodeInfo, rules: _PodRules) -> str:
        """Why `node` cannot take `pod` ("" when it can), in the order the scheduler's filters run."""
        if node.unschedulable and not _tolerated(pod, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        if not _matches_node(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        untolerated = next((t for t in node.taints if _blocks(t) and not _tolerated(pod, t)), None)
        if untolerated is not None:
            return f"node(s) had untolerated taint {{{untolerated.key}: {untolerated.value}}}"
        if pod.scheduling.host_ports and any(
            port in other.scheduling.host_ports
            for other in self.on_node[node.name].values()
            for port in pod.scheduling.host_ports
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

    def _insufficient(self, pod: PodInfo, node: NodeInfo) -> str:
        used = self.used[node.name]
        if used[PODS] + 1 > node.allocatable.get(PODS, 110):
            return "Too many pods"
        for resource, amount in sorted(pod.scheduling.requests.items()):
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
    def of(cls, pod: PodInfo, sim: Simulation, excluded: frozenset[str]) -> _PodRules:
        def domain(node: str, key: str) -> str | None:
            return None if node in excluded else sim.nodes[node].labels.get(key)

        blocked = []
        for term in pod.scheduling.anti_affinity:
            domains = {
                domain(sim.where[other.key], term.topology_key)
                for ns in term.namespaces
                for other in sim.selected(ns, term.selector)
            }
            blocked.append((term.topology_key, frozenset(d for d in domains if d is not None)))
        repelled = []
        for other in sim.repelling(pod):
            for term in other.scheduling.anti_affinity:
                if _term_selects(term, pod):
                    d = domain(sim.where[other.key], term.topology_key)
                    if d is not None:
                        repelled.append((term.topology_key, d))
        spread = []
        for constraint in pod.scheduling.spread:
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

    def anti_affinity_allows(self, node: NodeInfo) -> bool:
        for key, domains in self.blocked:
            value = node.labels.get(key)
            if value is None or value in domains:
                return False  # no domain: the model does not guess how the scheduler treats it
        return not any(node.labels.get(key) == value for key, value in self.repelled)

    def spread_allows(self, node: NodeInfo) -> bool:
        for key, counts, minimum, allowed in self.spread:
            value = node.labels.get(key)
            if value is None or counts.get(value, 0) - minimum > allowed:
                return False
        return True


def _with_hostname(node: NodeInfo) -> NodeInfo:
    """The node with its name as the hostname label when it has none (see the module's docstring)."""
    if HOSTNAME_KEY in node.labels:
        return node
    return replace(node, labels={HOSTNAME_KEY: node.name, **node.labels})


def _repeller_keys(pod: PodInfo) -> set[tuple[str, str, str] | None]:
    keys: set[tuple[str, str, str] | None] = set()
    for term in pod.scheduling.anti_affinity:
        if not term.selector.match_labels:
            keys.add(None)
            continue
        label = next(iter(sorted(term.selector.match_labels.items())))
        keys.update((ns, *label) for ns in term.namespaces)
    return keys


def _largest_first(pod: PodInfo) -> tuple[int, int, str]:
    return (-pod.scheduling.requests.get(CPU, 0), -pod.scheduling.requests.get(MEMORY, 0), pod.key)


def _unavailable(total: int, reasons: Counter[str]) -> str:
    if not total:
        return "0/0 nodes are available: no nodes."
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return f"0/{total} nodes are available: {parts}."


def _blocks(taint: Taint) -> bool:
    return taint.repels_pods


def _tolerated(pod: PodInfo, taint: Taint) -> bool:
    return pod.scheduling.tolerates(taint)


def _matches_node(pod: PodInfo, node: NodeInfo) -> bool:
    if any(node.labels.get(k) != v for k, v in pod.scheduling.node_selector.items()):
        return False
    if pod.scheduling.node_affinity is None:
        return True
    return any(
        term.requirements and all(_requirement(r, node) for r in term.requirements)
        for term in pod.scheduling.node_affinity
    )


def _requirement(req: NodeRequirement, node: NodeInfo) -> bool:
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


def _term_selects(term: AffinityTerm, pod: PodInfo) -> bool:
    return pod.namespace in term.namespaces and term.selector.matches(pod.labels)

"""Which nodes leave a pool that shrinks (but not to zero): scalebot's victim order.

Pure: no I/O, no clock. Owns the ranking of a pool's nodes for scale-down and the utilisation
figure used in it. Highest priority first; each rule only breaks the ties the previous ones left:

1. already being deleted (a deletionTimestamp): counting them first means no extra node is taken,
   as Cluster API's MachineSet does (priority 100);
2. marked `cluster.x-k8s.io/delete-machine` (on the Node, or on its Machine via `marked=`):
   someone already chose it (Cluster API priority 80);
3. unhealthy: Ready is not "True" (or the provider knows the Machine is unhealthy);
4. already cordoned (spec.unschedulable, scalebot's draining taint, or a cluster-autoscaler /
   Karpenter deletion taint): its pods are already on their way out;
5. fewest evictable pods: DaemonSet and mirror pods go with the node, finished and terminating
   pods are already done, so none of them counts;
6. least utilised: max(cpu requests / allocatable, memory requests / allocatable), the
   cluster-autoscaler figure; fewer pods to move and less capacity lost;
7. the pool's deletion policy: `Oldest`, `Newest`, or `Random` (a per-name RNG seeded with
   `seed`, so the draw does not depend on input order and can be logged and repeated);
8. node name (byte order), so the result is total and deterministic.

Note: engine-semantics §5.3 lists the policy before "fewest evictable pods"; this module follows
issue 4 ("already-drained/empty first, then the least utilised"), so that scaling down disrupts as
few pods as possible and the policy only decides between equally busy nodes.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.domain.model import (
    CA_DELETION_CANDIDATE_TAINT_KEY,
    CA_TO_BE_DELETED_TAINT_KEY,
    DRAINING_TAINT_KEY,
    KARPENTER_DISRUPTED_TAINT_KEY,
    UNSCHEDULABLE_TAINT_KEY,
    NodeInfo,
    PodInfo,
)

DeletionPolicy = Literal["Oldest", "Newest", "Random"]
POLICIES: tuple[DeletionPolicy, ...] = ("Oldest", "Newest", "Random")

DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
DELETING_TAINTS = {
    CA_TO_BE_DELETED_TAINT_KEY: "cluster-autoscaler is deleting it",
    KARPENTER_DISRUPTED_TAINT_KEY: "Karpenter is deleting it",
}
"""Taints another autoscaler puts on a node it drains and deletes, with who that is."""
AUTOSCALER_TAINTS = {
    **DELETING_TAINTS,
    CA_DELETION_CANDIDATE_TAINT_KEY: "cluster-autoscaler found it unneeded and will delete it itself",
}
"""Every taint by which another autoscaler claims a node's removal: scalebot plans none of these
nodes (removing one too would take a second node out of the pool when that autoscaler acts)."""
CORDON_TAINT_KEYS = frozenset({UNSCHEDULABLE_TAINT_KEY, DRAINING_TAINT_KEY, *DELETING_TAINTS})
"""Taints meaning "this node is being emptied": Karpenter drains leave spec.unschedulable false."""

_UNKNOWN_AGE = float("inf")


@dataclass(frozen=True, slots=True)
class VictimHints:
    """Node names a provider knows to be marked / deleting / unhealthy (from their Machines)."""

    marked: frozenset[str] = frozenset()
    deleting: frozenset[str] = frozenset()
    unhealthy: frozenset[str] = frozenset()


NO_HINTS = VictimHints()

SortKey = tuple[bool, bool, bool, bool, int, float, float, str]


def choose_victims(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    count: int,
    *,
    policy: DeletionPolicy = "Oldest",
    seed: int = 0,
    marked: Collection[str] = (),
    deleting: Collection[str] = (),
    unhealthy: Collection[str] = (),
) -> list[str]:
    """The names of the `count` nodes to remove, best victim first.

    `marked`, `deleting` and `unhealthy` name nodes whose Machine (or other provider object) is in
    that state, for providers that know more than the Node shows. Raises ValueError for a count
    outside 0..len(nodes), an unknown policy, or duplicate node names.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown deletion policy {policy!r}; use one of {', '.join(POLICIES)}")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError("duplicate node names in the pool")
    if not 0 <= count <= len(nodes):
        raise ValueError(f"cannot choose {count} nodes from a pool of {len(nodes)}")
    by_node = pods_by_node(pods)
    hints = VictimHints(frozenset(marked), frozenset(deleting), frozenset(unhealthy))

    def key(node: NodeInfo) -> SortKey:
        return victim_key(node, by_node.get(node.name, ()), policy=policy, seed=seed, hints=hints)

    return [n.name for n in sorted(nodes, key=key)[:count]]


def victim_key(
    node: NodeInfo,
    pods: Sequence[PodInfo],
    *,
    policy: DeletionPolicy,
    seed: int,
    hints: VictimHints = NO_HINTS,
) -> SortKey:
    """The sort key of one node: smaller sorts first (False before True)."""
    return (
        not (node.deletion_timestamp is not None or node.name in hints.deleting),
        not (DELETE_MACHINE_ANNOTATION in node.annotations or node.name in hints.marked),
        not (node.ready != "True" or node.name in hints.unhealthy),
        not is_emptying(node),
        evictable_count(pods),
        utilisation(node, pods),
        _policy_rank(node, policy, seed),
        node.name,
    )


def is_emptying(node: NodeInfo) -> bool:
    """Cordoned by anyone, or tainted by a tool that drains without cordoning."""
    return node.is_cordoned or any(t.key in CORDON_TAINT_KEYS for t in node.taints)


def claimed_by_autoscaler(node: NodeInfo) -> str:
    """Why another autoscaler owns this node's removal ("" when none does), naming the taint."""
    for taint in node.taints:
        if taint.key in AUTOSCALER_TAINTS:
            return f"{AUTOSCALER_TAINTS[taint.key]} (taint {taint.key})"
    return ""


def is_evictable(pod: PodInfo) -> bool:
    """A pod a drain would have to move: not a DaemonSet or mirror pod, not finished or leaving."""
    if pod.is_mirror or pod.is_finished or pod.is_terminating:
        return False
    return pod.controller is None or not pod.controller.is_daemonset


def evictable_count(pods: Sequence[PodInfo]) -> int:
    return sum(1 for p in pods if is_evictable(p))


def utilisation(node: NodeInfo, pods: Sequence[PodInfo]) -> float:
    """max(Σ cpu requests / cpu allocatable, Σ memory requests / memory allocatable) of `node`.

    Only pods bound to `node` that still hold resources count (finished pods do not); DaemonSet
    and mirror pods count, as in cluster-autoscaler's default. A resource whose allocatable is
    unknown (0) is left out rather than read as infinitely full.
    """
    live = [p for p in pods if p.node_name == node.name and not p.is_finished]
    cpu = _ratio(sum(p.cpu_request_milli for p in live), node.cpu_allocatable_milli)
    memory = _ratio(sum(p.memory_request_bytes for p in live), node.memory_allocatable_bytes)
    return max(cpu, memory)


def pods_by_node(pods: Sequence[PodInfo]) -> dict[str, list[PodInfo]]:
    grouped: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.node_name:
            grouped.setdefault(pod.node_name, []).append(pod)
    return grouped


def _ratio(requested: int, allocatable: int) -> float:
    return requested / allocatable if allocatable > 0 else 0.0


def _policy_rank(node: NodeInfo, policy: DeletionPolicy, seed: int) -> float:
    """Oldest: creation time ascending; Newest: descending; unknown age last in both."""
    if policy == "Random":
        # A string seed goes through SHA-512 (random's version 2 seeding): stable across runs,
        # platforms and Python versions, unlike hash().
        return random.Random(f"{seed}:{node.name}").random()
    if node.created_at is None:
        return _UNKNOWN_AGE
    stamp = node.created_at.timestamp()
    return stamp if policy == "Oldest" else -stamp

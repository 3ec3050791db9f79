"""The unattended policies: Evictor mode's proposals, and the empty-node clean-up.

The empty-node policy: nodes that ran only DaemonSet/mirror pods for the unneeded time (10 min, as
cluster-autoscaler's --scale-down-unneeded-time) are removed in bulk; nothing is removed within
`delay_after_add` (10 min) of a node joining the cluster (--scale-down-delay-after-add).

cluster-autoscaler's empty-node scale-down, unattended because the cluster's config says so (off by
default): every cycle lists the cluster once, remembers since when each node has been empty
(`engine.planning.consolidation.track_since`), and removes the nodes empty for the TTL, up to a batch (10,
cluster-autoscaler's default), no pool below its minimum:

1. lock the nodes and their pools like an operation would (a running operation wins: skip a cycle);
2. cordon and taint them (so nothing new lands), then list their pods again: a node that got a
   real pod between the listing and the cordon is given back (uncordoned) and forgotten;
3. remove the rest through the pool provider, one audit row per node, and one report per batch.

The "empty since" times live in memory: after a restart the TTL starts again, so a node is never
removed sooner than the TTL says, only later.

The batch's locks are its durable record: they are taken in SQLite before the cordon, under one
owner per cluster (`cleanup:<cluster>`), and released when the batch is done. A crash between the
cordon and the removal leaves them behind, and that is how the next cycle (a fresh process) tells
the nodes its own clean-up cordoned from those a person cordoned: a node that carries scalebot's
draining taint AND whose node lock is held by this cluster's clean-up. Such a node is judged as if
it were not cordoned: still empty and eligible, with room in its pool, it is removed now (its TTL
had passed before the crash); otherwise it is uncordoned and its taint removed. A node cordoned by
a person has no lock of ours and is never touched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from engine.domain.clock import Clock
from engine.domain.model import DRAINING_TAINT_KEY, NodeInfo
from engine.domain.operation import OperationRequest, OpKind, Outcome, Target
from engine.domain.settings import ConsolidationPolicy
from engine.drain import passes as drain
from engine.kube.api import SchedulingApi
from engine.operations.policy import EVICTOR
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, UserError
from engine.planning import consolidation
from engine.pools.base import StopsCluster
from engine.store.claims import LockConflict
from engine.store.ports import AuditTrail, PoolLocks

log = logging.getLogger(__name__)

ACTOR = "policy:empty-nodes"


@dataclass(frozen=True, slots=True)
class CleanupReport:
    cluster: str
    removed: tuple[tuple[str, str], ...]
    """(node, pool) removed in this batch."""
    given_back: tuple[str, ...] = ()
    """Nodes that got a pod between the listing and the cordon: uncordoned, kept."""
    released: tuple[str, ...] = ()
    """Nodes an interrupted batch left cordoned that are no longer due for removal: uncordoned."""

    def text(self, policy: ConsolidationPolicy) -> str:
        ttl = consolidation.minutes(policy.unneeded_time)
        parts = []
        if self.removed:
            names = ", ".join(f"{node} (pool {pool})" for node, pool in self.removed)
            parts.append(
                f"Removed {len(self.removed)} empty node{'s' if len(self.removed) != 1 else ''} on "
                f"{self.cluster} (only DaemonSet or mirror pods for {ttl} or more): {names}"
            )
        if self.given_back:
            parts.append(f"Kept, a pod landed on them meanwhile: {', '.join(self.given_back)}")
        if self.released:
            parts.append(
                "Uncordoned, left cordoned by an interrupted clean-up and no longer due for removal: "
                + ", ".join(self.released)
            )
        return ". ".join(parts)


class Cycling(Protocol):
    @property
    def name(self) -> str: ...

    def cycle(self) -> object: ...


class CleanerStore(PoolLocks, AuditTrail, Protocol):
    """What the empty-node clean-up uses of the store: its batch's locks and the audit."""


class EmptyNodeCleaner:
    """One cluster's empty-node policy; `cycle()` is called every `policy.interval` by the bot."""

    def __init__(
        self,
        handle: ClusterHandle,
        policy: ConsolidationPolicy,
        store: CleanerStore,
        clock: Clock,
        report: Callable[[CleanupReport], None],
    ) -> None:
        self.handle = handle
        self.policy = policy
        self.store = store
        self.clock = clock
        self.report = report
        self.since: dict[str, datetime] = {}
        # One owner per cluster, the same after a restart: its leftover locks name an interrupted batch.
        self.owner = f"cleanup:{handle.name}"

    @property
    def name(self) -> str:
        return self.handle.name

    def cycle(self) -> CleanupReport | None:
        api = self.handle.api
        if not isinstance(api, SchedulingApi):
            log.warning("empty-node policy needs a Kubernetes API server; %s is not one", self.handle.name)
            return None
        if isinstance(self.handle.pools, StopsCluster) and self.handle.pools.cluster_stopped():
            return None  # no node to clean up, and an API server not to be reached
        now = self.clock.now()
        pools = self.handle.pools.list_pools()
        nodes = api.list_nodes()
        interrupted = self._interrupted(nodes)
        snap = consolidation.snapshot(pools, as_uncordoned(nodes, interrupted), api.list_bound_pods())
        empty = consolidation.empty_nodes(snap, pools=pools, now=now, settings=self.policy.planning)
        self.since = consolidation.track_since(self.since, empty, now)
        for node in interrupted:
            if node in self.since:  # its TTL had passed before the batch was cut short
                self.since[node] = min(self.since[node], now - self.policy.unneeded_time)
        due = consolidation.due_empty(
            self.since,
            pools=pools,
            ttl=self.policy.unneeded_time,
            batch=self.policy.empty_node_batch,
            now=now,
        )
        if consolidation.scale_up_hold(snap.nodes, now, self.policy.delay_after_add):
            # Only a batch cut short, decided before, is finished; new removals wait.
            due = tuple(node for node in due if node in interrupted)
        released: tuple[str, ...] = ()
        if interrupted:
            released = drain.uncordon_nodes(
                api, sorted(set(interrupted) - set(due)), keep_cordoned=frozenset()
            )
        if not due:
            self.store.release_locks(self.owner)
            if not released:
                return None
            result = CleanupReport(cluster=self.handle.name, removed=(), released=released)
            self.report(result)
            return result
        pool_of = {node: pool.name for pool in pools for node in pool.nodes}
        keys = sorted(
            {f"pool:{self.handle.name}/{pool_of[n]}" for n in due}
            | {f"node:{self.handle.name}/{n}" for n in due}
        )
        try:
            self.store.acquire_locks(keys, self.owner, at=now)
        except LockConflict as exc:
            # Nothing was taken; an interrupted batch's locks stay, so the next cycle settles it.
            log.info("empty-node policy waits: %s is held by operation %s", exc.key, exc.op_id)
            return None
        # Released only once the batch is done: a failure or a crash leaves them as the record by
        # which the next cycle finds the nodes this batch cordoned.
        result = self._remove(due, pool_of, now)
        self.store.release_locks(self.owner)
        for node, _ in result.removed:
            self.since.pop(node, None)
        for node in result.given_back:
            self.since.pop(node, None)
        if released:
            result = replace(result, released=released)
        self.report(result)
        return result

    def _interrupted(self, nodes: Sequence[NodeInfo]) -> tuple[str, ...]:
        """Nodes an interrupted batch of ours cordoned: our taint, and our lock on the node."""
        ours = []
        for node in nodes:
            key = f"node:{self.handle.name}/{node.name}"
            tainted = any(t.key == DRAINING_TAINT_KEY for t in node.taints)
            if tainted and self.store.lock_holder([key]) == (key, self.owner):
                ours.append(node.name)
        return tuple(sorted(ours))

    def _remove(self, due: Sequence[str], pool_of: dict[str, str], now: datetime) -> CleanupReport:
        api = self.handle.api
        already = drain.cordon_nodes(api, due, now=now)
        # Between the listing and the cordon the scheduler may have bound a pod: look again.
        busy = sorted(
            {p.node_name for p in api.list_pods(node_names=due) if not consolidation.is_empty_node_pod(p)}
        )
        if busy:
            drain.uncordon_nodes(api, busy, keep_cordoned=already)
        removed: list[tuple[str, str]] = []
        by_pool: dict[str, list[str]] = {}
        for node in due:
            if node not in busy:
                by_pool.setdefault(pool_of[node], []).append(node)
        for pool, nodes in sorted(by_pool.items()):
            self.handle.pools.remove_nodes(pool, nodes)
            for node in nodes:
                self.store.audit(
                    at=self.clock.now(),
                    actor=ACTOR,
                    action="remove_empty_node",
                    cluster=self.handle.name,
                    detail=f"{node} (pool {pool}) empty since {self.since[node].isoformat()}",
                )
                removed.append((node, pool))
        return CleanupReport(cluster=self.handle.name, removed=tuple(removed), given_back=tuple(busy))


def as_uncordoned(nodes: Sequence[NodeInfo], names: Collection[str]) -> list[NodeInfo]:
    """The listing with `names` shown as they were before our cordon (no unschedulable, no taint
    of ours), so the usual rules judge whether they are still empty and eligible."""
    return [
        replace(
            node, unschedulable=False, taints=tuple(t for t in node.taints if t.key != DRAINING_TAINT_KEY)
        )
        if node.name in names
        else node
        for node in nodes
    ]


class Evictor:
    """Evictor mode for one cluster: every cycle, the consolidation plan; a new proposal only when it
    changed since the last one, and none while a proposal of ours is awaiting approval or running.
    A node is proposed only once it has been in every plan for the unneeded time, and nothing is
    planned within `delay_after_add` of a node joining (`Operations` answers "nothing to
    consolidate" then).

    Its proposals are ordinary `consolidate` requests by `policy:evictor` (approval as the policy
    says: `evictor_auto_approve`), so they run node by node with the fit re-checked like any other.
    A refusal (another autoscaler runs here) is reported once, not every cycle.
    """

    def __init__(
        self, ops: Operations, cluster: str, channel: str, report: Callable[[str, str], None]
    ) -> None:
        self.ops = ops
        self.cluster = cluster
        self.channel = channel
        self.report = report
        self.last_hash: str | None = None
        self.last_refusal = ""
        self.unneeded_since: dict[str, datetime] = {}
        """Since when each node has been in this cluster's plan (in memory: a restart starts again)."""

    @property
    def name(self) -> str:
        return self.cluster

    def cycle(self) -> Outcome | None:
        ours = [
            op
            for op in self.ops.list_operations(cluster=self.cluster, active_only=True)
            if op.requested_by == EVICTOR
        ]
        if ours:
            return None
        req = OperationRequest(
            kind=OpKind.CONSOLIDATE,
            target=Target(cluster=self.cluster),
            requested_by=EVICTOR,
            channel=self.channel,
            reason="Evictor mode",
        )
        try:
            plan = self.ops.plan(req)
        except UserError as exc:
            self.unneeded_since = {}  # no plan: no node is unneeded any more
            message = str(exc)
            if message.startswith("nothing to consolidate"):
                self.last_hash = None  # the next opportunity is news again
            elif message != self.last_refusal:
                self.last_refusal = message
                self.report(self.cluster, f"Evictor mode proposes nothing: {message}")
            return None
        self.last_refusal = ""
        now = self.ops.clock.now()
        self.unneeded_since = consolidation.track_since(self.unneeded_since, plan.nodes, now)
        unneeded_time = self.ops.policies[self.cluster].consolidation.unneeded_time
        if any(now - since < unneeded_time for since in self.unneeded_since.values()):
            return None  # cluster-autoscaler's --scale-down-unneeded-time: every node must stay unneeded
        if plan.plan_hash == self.last_hash:
            return None  # proposed already (and rejected or expired): the same card again is noise
        self.last_hash = plan.plan_hash
        return self.ops.request(req)


class PolicyLoop:
    """Runs each cleaner's `cycle()` every `interval` on one thread, on the injected clock.

    One cluster's failure (an API error) is logged and retried next cycle; it never stops the others.
    """

    def __init__(self, cleaners: Sequence[Cycling], clock: Clock, interval: float) -> None:
        self.cleaners = list(cleaners)
        self.clock = clock
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.cleaners and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="policies", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self.clock.wait(self._stop, self.interval):
            for cleaner in self.cleaners:
                try:
                    cleaner.cycle()
                except Exception:  # the loop's one catch-all: a cluster that fails now is retried later
                    log.exception("policy cycle failed on %s", cleaner.name)

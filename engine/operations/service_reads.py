"""The operations service's read-only views: operations and their history, a cluster's status, the
plan of a request (and the snapshot it is made from), previews and advice. Changes nothing but the
audit rows of refusals."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.collector import collector_paused
from engine.domain.model import PodInfo
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    OpState,
)
from engine.domain.settings import ConsolidationSettings
from engine.kube.api import KubeApi, PodListing, PodWatchApi, SchedulingApi
from engine.kube.errors import KubeError
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service_rules import (
    Advice,
    ClusterStatus,
    HistoryEntry,
    ProviderSchedules,
    Rules,
    UserError,
)
from engine.planning import advice, consolidation
from engine.planning import preflight as planning
from engine.pools.base import KeepsSchedules, Pool, PoolNotFound, StopsCluster
from engine.store.operations import JournalRow
from engine.store.ports import AuditTrail, SleepRecords
from engine.workloads.plan import is_owner_key

log = logging.getLogger(__name__)


class ReadsStore(AuditTrail, SleepRecords, Protocol):
    """What the reads read of the store: the operations, their journal and audit, and the sizes and
    workloads a sleep keeps (a plan's sizes to restore)."""

    def list_operations(
        self, *, cluster: str | None = None, states: Sequence[OpState] | None = None, limit: int = 50
    ) -> list[Operation]: ...

    def journal_rows(self, op_id: str) -> list[JournalRow]: ...

    def get_operation(self, op_id: str) -> Operation | None: ...


PodOffer = Callable[[str, Collection[str], Collection[PodInfo], str], None]
"""(cluster, nodes, pods, resourceVersion): a plan's pod listing offered to the drain that follows."""


class Reads:
    """Read-only views: operations and their history, cluster status, plans, advice."""

    def __init__(
        self,
        store: ReadsStore,
        rules: Rules,
        offer_pods: PodOffer,
        *,
        policies: Mapping[str, policy.ClusterPolicy],
        clock: Clock,
        next_event: Callable[[str], NextEvent | None] | None = None,
    ) -> None:
        """`offer_pods`: told of a plan's pod listing (`Runner.offer_pods`), for the drain that follows;
        `next_event`: a cluster's next scheduled sleep or wake, for its status."""
        self.store = store
        self.rules = rules
        self._offer_pods = offer_pods
        self.policies = policies
        self.clock = clock
        self._next_event = next_event

    def get(self, op_id: str) -> Operation | None:
        return self.store.get_operation(op_id)

    def list_operations(
        self, *, cluster: str | None = None, active_only: bool = False, limit: int = 20
    ) -> list[Operation]:
        states = [OpState.AWAITING_APPROVAL, OpState.RUNNING] if active_only else None
        return self.store.list_operations(cluster=cluster, states=states, limit=limit)

    def history(self, op_id: str) -> list[HistoryEntry]:
        entries = [
            HistoryEntry(r.at, r.actor, r.action, r.detail) for r in self.store.audit_rows(op_id=op_id)
        ]
        entries += [
            HistoryEntry(r.at, "scalebot", f"{r.step}: {r.event}", r.detail)
            for r in self.store.journal_rows(op_id)
        ]
        return sorted(entries, key=lambda e: e.at)

    def status(self, cluster: str) -> ClusterStatus:
        handle = self.rules.handle(cluster)
        return ClusterStatus(
            cluster=cluster,
            pools=handle.pools.list_pools(),
            running=self.list_operations(cluster=cluster, active_only=True),
            next_event=self._next_event(cluster) if self._next_event else None,
        )

    def provider_schedules(self, cluster: str) -> ProviderSchedules | None:
        """The schedules `cluster`'s pool system keeps itself; None when it keeps none."""
        pools = self.rules.handle(cluster).pools
        if not isinstance(pools, KeepsSchedules):
            return None
        try:
            return ProviderSchedules(cluster, pools.provider_schedules())
        except (KubeError, PoolNotFound) as exc:
            # One unreachable Shoot must not hide scalebot's own schedules.
            log.warning("could not read %s's own schedules: %s", cluster, exc)
            return ProviderSchedules(cluster, unreadable=str(exc))

    def plan(self, req: OperationRequest) -> OperationPlan:
        handle = self.rules.handle(req.target.cluster)
        stopped = _stopped(handle)
        if stopped and (req.kind is not OpKind.WAKE or req.target.pools or req.target.workloads_only):
            raise UserError(
                f"{stopped}: its API server cannot be reached while it is stopped; only a wake of the "
                "whole cluster starts it (every pool comes back with it)"
            )
        if req.kind is OpKind.CONSOLIDATE:
            return self._plan_consolidation(handle, req)
        # The collector paused over the listing and the plan together, not only page by page: the
        # pods of each page live on into the plan, so every collection between two pages scanned the
        # growing listing again (0.72x the time at 30,000 pods; docs/benchmarks.md).
        try:
            with collector_paused():
                if stopped:
                    snap = self._stopped_snapshot(handle)
                else:
                    snap = self.snapshot(
                        handle, with_workloads=req.target.workloads or req.target.workloads_only
                    )
                target = req.target
                if target.one_at_a_time is None:  # the request did not say: the cluster's policy decides
                    target = replace(target, one_at_a_time=self.policies[handle.name].drain_one_at_a_time)
                planned = planning.plan_operation(req.kind, target, snap, now=self.clock.now())
        except (planning.PlanError, PoolNotFound) as exc:
            raise UserError(str(exc)) from exc
        # The drain that may follow starts its pod feed from this listing, not a second one.
        self._offer_pods(handle.name, planned.nodes, snap.pods, snap.pods_resource_version)
        # Why a scale-up needs approval is said on the card (warnings are not part of the plan hash).
        ceiling = policy.beyond_ceiling(self.policies[handle.name], planned)
        return replace(planned, warnings=(*ceiling, *planned.warnings)) if ceiling else planned

    def _restore_sizes(self, handle: ClusterHandle, pools: Sequence[Pool]) -> dict[str, int]:
        """Sizes to restore: SQLite's records, else the ones on the pool objects."""
        restore = {r.pool: r.desired for r in self.store.restore_records(handle.name)}
        for pool in pools:
            if pool.restore is not None:
                restore.setdefault(pool.name, pool.restore.desired)
        return restore

    def _stopped_snapshot(self, handle: ClusterHandle) -> planning.ClusterSnapshot:
        """A stopped cluster as its provider and the store know it: its API server is not asked
        (no node runs, so no pod, budget or DaemonSet is listed); its pools and what to restore."""
        pools = handle.pools.list_pools()
        return planning.ClusterSnapshot(
            cluster=handle.name,
            pools=tuple(pools),
            nodes=(),
            pods=(),
            pdbs=(),
            restore_sizes=self._restore_sizes(handle, pools),
            workloads_asleep=len(self.store.workload_records(handle.name)),
        )

    def snapshot(self, handle: ClusterHandle, *, with_workloads: bool = False) -> planning.ClusterSnapshot:
        """One listing of each kind of object; sizes to restore from SQLite, else the pool objects.

        The listings go out together: the pods (the long one, its pages decoded while the next
        is on its way) alongside nodes, budgets and DaemonSets, and the pools on this thread.
        """
        api = handle.api
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="snapshot") as listings:
            pods = listings.submit(_pod_listing, api)
            nodes = listings.submit(api.list_nodes)
            pdbs = listings.submit(api.list_pdbs)
            daemonset_keys = listings.submit(api.list_daemonset_keys)
            pools = handle.pools.list_pools()
            restore = self._restore_sizes(handle, pools)
            sleeping = len(self.store.workload_records(handle.name))
            to_sleep, workload_notes = self._workloads_to_sleep(handle) if with_workloads else ((), ())
            return planning.ClusterSnapshot(
                cluster=handle.name,
                pools=tuple(pools),
                nodes=tuple(nodes.result()),
                pods=tuple(pods.result().pods),
                pdbs=tuple(pdbs.result()),
                pods_resource_version=pods.result().resource_version,
                daemonset_keys=daemonset_keys.result(),
                restore_sizes=restore,
                workloads_to_sleep=sum(1 for key in to_sleep if not is_owner_key(key)),
                workloads_asleep=sleeping,
                workload_keys=to_sleep,
                workload_notes=workload_notes,
            )

    def _plan_consolidation(self, handle: ClusterHandle, req: OperationRequest) -> OperationPlan:
        pol = self.policies[handle.name].consolidation
        snap = scheduling_snapshot(handle)
        if snap.autoscalers and not pol.allow_alongside_autoscaler:
            raise UserError(
                f"cluster {handle.name} already has an autoscaler that removes nodes: "
                + "; ".join(snap.autoscalers)
                + ". scalebot will not fight it; set clusters."
                + f"{handle.name}.consolidation.allow_alongside_autoscaler: true to consolidate anyway"
            )
        pools = handle.pools.list_pools()
        known = {p.name for p in pools}
        unknown = [p for p in req.target.pools if p not in known]
        if unknown:
            raise UserError(
                f"pool(s) not found in {handle.name}: {', '.join(unknown)}; pools: {', '.join(sorted(known))}"
            )
        now = self.clock.now()
        if req.requested_by == policy.EVICTOR:
            # cluster-autoscaler's --scale-down-delay-after-add, for the unattended proposals only.
            hold = consolidation.scale_up_hold(snap.nodes, now, pol.delay_after_add)
            if hold:
                raise UserError(f"nothing to consolidate on {handle.name} yet: {hold}")
        removable = frozenset(req.target.pools or known)
        plan = _consolidation_plan(
            handle, snap, pools, now=now, settings=pol.planning, removable_pools=removable
        )
        if not plan.remove:
            kept = "; ".join(f"{k.node}: {k.reason}" for k in plan.keep[:5])
            more = f" ... ({len(plan.keep) - 5} more)" if len(plan.keep) > 5 else ""
            raise UserError(f"nothing to consolidate on {handle.name}: every node stays ({kept}{more})")
        return consolidation.operation_plan(handle.name, plan, pools)

    @staticmethod
    def _workloads_to_sleep(handle: ClusterHandle) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The keys a sleep would change (GitOps owners it pauses included) and its GitOps notes."""
        if handle.workloads is None:
            raise UserError(f"cluster {handle.name} has no workloads provider configured")
        plan = handle.workloads.plan_sleep()
        keys = tuple(sorted(d.key for d in plan.decisions if d.category == "change"))
        pausing = tuple(f"{d.key}: {d.outcome.reason}" for d in plan.changes if is_owner_key(d.key))
        return keys, pausing + tuple(f"{n.key}: {n.reason}" for n in plan.gitops_notes)

    def visible_clusters(self, by: str, groups: Sequence[str] = ()) -> list[str]:
        return [c for c in self.rules.clusters() if self.rules.role(c, by, groups) is not None]

    def preview(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> OperationPlan:
        """`plan`, asked by a person: viewer role, and at most `plan_burst` per `plan_window` each,
        since every plan lists the whole cluster. Raises UserError with the refusal."""
        cluster, by = req.target.cluster, req.requested_by
        self.rules.allow_read(cluster, by=by, groups=groups, what="plan")
        return self.plan(req)

    def advise(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> Advice:
        """Scale-up advice for the pending pods and the underused nodes: a read, limited like `plan`."""
        self.rules.allow_read(cluster, by=by, groups=groups, what="advise")
        handle = self.rules.handle(cluster)
        api = _scheduling_api(handle, "scale-up advice")
        pools = handle.pools.list_pools()
        nodes, bound = handle.api.list_nodes(), api.list_bound_pods()
        snap = consolidation.snapshot(pools, nodes, bound)
        pol = self.policies[cluster].consolidation
        plan = _consolidation_plan(
            handle,
            snap,
            pools,
            now=self.clock.now(),
            settings=replace(pol.planning, max_nodes=len(nodes) or 1),
            removable_pools=frozenset(p.name for p in pools),
        )
        return Advice(
            cluster=cluster,
            scale_up=advice.advise(pools, nodes, bound, api.list_unbound_pods()),
            underused=consolidation.underused(snap, plan, now=self.clock.now(), rules=pol.rules),
            threshold=pol.rules.utilization_threshold,
        )

    def consolidation_preview(
        self, cluster: str, settings: ConsolidationSettings, *, by: str, groups: Sequence[str] = ()
    ) -> consolidation.ConsolidationPlan:
        """`plan consolidate`: which nodes could go because their pods fit on the others, where each
        pod would go and why every other node stays, under `settings`; the autoscalers that already
        remove nodes are noted, not refused (nothing is changed). A read, limited like `plan`."""
        self.rules.allow_read(cluster, by=by, groups=groups, what="plan")
        handle = self.rules.handle(cluster)
        api = _scheduling_api(handle, "consolidation")
        # Pool membership comes from the pool provider (labels or Cluster API), not from one label.
        pools = handle.pools.list_pools()
        snap = consolidation.snapshot(pools, handle.api.list_nodes(), api.list_bound_pods())
        snap = replace(snap, autoscalers=consolidation.other_consolidators(api.list_deployment_names()))
        return _consolidation_plan(handle, snap, pools, now=self.clock.now(), settings=settings)

    def scale_up_advice(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> advice.ScaleUpAdvice:
        """`plan advise`: which pool to grow for the unschedulable pods, and by how many nodes. A
        read, limited like `plan`."""
        self.rules.allow_read(cluster, by=by, groups=groups, what="advise")
        handle = self.rules.handle(cluster)
        api = _scheduling_api(handle, "scale-up advice")
        return advice.advise(
            handle.pools.list_pools(), handle.api.list_nodes(), api.list_bound_pods(), api.list_unbound_pods()
        )


def _consolidation_plan(
    handle: ClusterHandle,
    snap: consolidation.SchedulingSnapshot,
    pools: Sequence[Pool],
    *,
    now: datetime,
    settings: ConsolidationSettings,
    removable_pools: frozenset[str] | None = None,
) -> consolidation.ConsolidationPlan:
    """The consolidation plan over `snap`, with the cluster's budgets and DaemonSets, every pool kept
    at or above its minimum size and the other autoscalers `snap` found named in its notes."""
    return consolidation.plan_consolidation(
        snap.nodes,
        snap.pods,
        handle.api.list_pdbs(),
        pool_minimums={pool.name: pool.min_size for pool in pools},
        daemonset_keys=handle.api.list_daemonset_keys(),
        now=now,
        settings=settings,
        notes=snap.autoscalers,
        removable_pools=removable_pools,
    )


def _scheduling_api(handle: ClusterHandle, what: str) -> SchedulingApi:
    if not isinstance(handle.api, SchedulingApi):
        raise UserError(
            f"{what} models the scheduler from whole Node and Pod objects: cluster {handle.name} "
            "is not a Kubernetes API server (the simulated cluster cannot be consolidated or advised on)"
        )
    return handle.api


def _pod_listing(api: KubeApi) -> PodListing:
    """Every pod, with the listing's resourceVersion when the adapter can tell it."""
    if isinstance(api, PodWatchApi):
        return api.list_pods_at(node_names=None)
    return PodListing(pods=api.list_pods(), resource_version="")


def scheduling_snapshot(handle: ClusterHandle) -> consolidation.SchedulingSnapshot:
    """Nodes (with their pool, from the pool provider) and bound pods, whole, as the scheduler sees them."""
    api = _scheduling_api(handle, "consolidation")
    snap = consolidation.snapshot(handle.pools.list_pools(), handle.api.list_nodes(), api.list_bound_pods())
    return replace(snap, autoscalers=consolidation.other_consolidators(api.list_deployment_names()))


def _stopped(handle: ClusterHandle) -> str:
    """Why the cluster's API server is not to be reached (its provider stopped it); "" when it runs."""
    pools = handle.pools
    return pools.cluster_stopped() if isinstance(pools, StopsCluster) else ""

"""The application service shared by the Slack bot, the scheduler and the CLI.

Every way into scalebot ends here: `request` (plan, policy, lock, save, audit), `approve`,
`reject`, `cancel`, and read-only views. Each call returns an `Outcome` whose `reply` is the
sentence to show the person; refusals change nothing except an audit row.

Who is who: Slack users by their immutable IDs (`U…`); `cli:<login>` is someone holding the
cluster's kubeconfig at a terminal (acts as admin, no approval); `schedule:<name>` is a
schedule, which goes through exactly the same path as a human request.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    OpState,
    Outcome,
    ProgressEvent,
)
from engine.domain.reasons import AlreadyDecided, Busy, NeedsApprovalInstead, Reason, UnknownOperation
from engine.domain.settings import RunnerSettings, ScaleDownRules
from engine.drain import passes as drain
from engine.kube.api import KubeApi, PodListing, PodWatchApi, SchedulingApi
from engine.kube.errors import KubeError
from engine.operations import policy
from engine.operations.observers import ProgressListeners
from engine.operations.runner import ClusterHandle, Runner
from engine.planning import advice, consolidation
from engine.planning import preflight as planning
from engine.pools.base import KeepsSchedules, Pool, PoolNotFound, ProviderSchedule
from engine.store.claims import ClaimHeld, LockConflict
from engine.store.database import Store
from engine.workloads.plan import is_owner_key

log = logging.getLogger(__name__)


class UserError(ScalebotError, ValueError):
    """Bad input from a person: the message names the problem and the valid choices."""

    category = Category.USAGE


@dataclass(frozen=True, slots=True)
class Unshown:
    """Why a request's card is not in its channel: Slack's error for the first post
    (`not_in_channel`, `channel_not_found`, `is_archived`, or the post given up after retries)."""

    channel: str
    error: str

    def describe(self) -> str:
        return f"its card could not be posted in channel {self.channel} (Slack: {self.error})"


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: datetime
    actor: str
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class Advice:
    """`/scale advise`: which pool to grow for the pending pods, and the nodes under the threshold."""

    cluster: str
    scale_up: advice.ScaleUpAdvice
    underused: tuple[consolidation.Underused, ...]
    threshold: float = ScaleDownRules().utilization_threshold
    """The scale-down utilization threshold the underused nodes are measured against."""


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster: str
    pools: list[Pool]
    running: list[Operation]
    next_event: NextEvent | None = None


@dataclass(frozen=True, slots=True)
class ProviderSchedules:
    """The schedules a cluster's own system keeps (a Gardener Shoot's hibernation schedules)."""

    cluster: str
    schedules: tuple[ProviderSchedule, ...] = ()
    unreadable: str = ""
    """Why they could not be read (the API server's answer); empty when read."""


def new_operations(
    store: Store,
    clusters: Mapping[str, ClusterHandle],
    policies: Mapping[str, policy.ClusterPolicy],
    clock: Clock,
    *,
    settings: RunnerSettings | None = None,
    next_event: Callable[[str], NextEvent | None] | None = None,
    groups_of: Callable[[str], Sequence[str]] | None = None,
) -> Operations:
    """The service with its own runner over `clusters`, both telling the same listeners."""
    listeners = ProgressListeners()
    runner = Runner(store, clusters, clock, listeners.emit, settings or RunnerSettings())
    return Operations(store, runner, policies, clock, listeners, next_event=next_event, groups_of=groups_of)


class Operations:
    def __init__(
        self,
        store: Store,
        runner: Runner,
        policies: Mapping[str, policy.ClusterPolicy],
        clock: Clock,
        listeners: ProgressListeners,
        *,
        next_event: Callable[[str], NextEvent | None] | None = None,
        groups_of: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        """`runner` runs the operations on its clusters, and emits to `listeners`, which this service
        tells of state changes too. `groups_of`: a person's user groups (Slack's), for roles checked
        without a click from them: a schedule's pre-approvers at each run. May call Slack: never
        inside a transaction."""
        self.store = store
        self.runner = runner
        self.handles = dict(runner.clusters)
        self.policies = {
            name: policies.get(name, policy.ClusterPolicy(cluster=name)) for name in self.handles
        }
        runner.scale_down = {name: pol.consolidation.rules for name, pol in self.policies.items()}
        self.clock = clock
        self._listeners = listeners
        self._next_event = next_event
        self.groups_of: Callable[[str], Sequence[str]] = groups_of or (lambda user: ())
        self.plan_burst = 5
        self.plan_window = timedelta(minutes=1)
        self._plans: dict[str, list[datetime]] = {}
        self._plans_lock = threading.Lock()

    # -- progress ---------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        self._listeners.subscribe(listener)

    def unsubscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        self._listeners.unsubscribe(listener)

    def _emit(self, event: ProgressEvent) -> None:
        self._listeners.emit(event)

    def _emit_state(self, op: Operation, text: str, *, final: bool = False) -> None:
        self._emit(ProgressEvent(operation=op, kind="final" if final else "state", text=text, final=final))

    # -- reads ------------------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        return sorted(self.handles)

    def role(self, cluster: str, user: str, groups: Sequence[str] = ()) -> policy.Role | None:
        if user.startswith("cli:"):
            return policy.Role.ADMIN
        if user.startswith(("schedule:", "policy:")):
            return policy.Role.OPERATOR
        return policy.role_of(self.policies[cluster], user, groups) if cluster in self.policies else None

    def approvers(self, cluster: str, *, besides: str = "") -> policy.Approvers:
        """Who may approve on `cluster` (not `besides`, unless self-approval is allowed)."""
        pol = self.policies.get(cluster)
        return policy.approvers(pol, besides=besides) if pol is not None else policy.Approvers()

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
        handle = self._handle(cluster)
        return ClusterStatus(
            cluster=cluster,
            pools=handle.pools.list_pools(),
            running=self.list_operations(cluster=cluster, active_only=True),
            next_event=self._next_event(cluster) if self._next_event else None,
        )

    def provider_schedules(self, cluster: str) -> ProviderSchedules | None:
        """The schedules `cluster`'s pool system keeps itself; None when it keeps none."""
        pools = self._handle(cluster).pools
        if not isinstance(pools, KeepsSchedules):
            return None
        try:
            return ProviderSchedules(cluster, pools.provider_schedules())
        except (KubeError, PoolNotFound) as exc:
            # One unreachable Shoot must not hide scalebot's own schedules.
            log.warning("could not read %s's own schedules: %s", cluster, exc)
            return ProviderSchedules(cluster, unreadable=str(exc))

    def plan(self, req: OperationRequest) -> OperationPlan:
        handle = self._handle(req.target.cluster)
        if req.kind is OpKind.CONSOLIDATE:
            return self._plan_consolidation(handle, req)
        try:
            snap = self.snapshot(handle, with_workloads=req.target.workloads or req.target.workloads_only)
            target = req.target
            if target.one_at_a_time is None:  # the request did not say: the cluster's policy decides
                target = replace(target, one_at_a_time=self.policies[handle.name].drain_one_at_a_time)
            planned = planning.plan_operation(req.kind, target, snap, now=self.clock.now())
        except (planning.PlanError, PoolNotFound) as exc:
            raise UserError(str(exc)) from exc
        # The drain that may follow starts its pod feed from this listing, not a second one.
        self.runner.offer_pods(handle.name, planned.nodes, snap.pods, snap.pods_resource_version)
        # Why a scale-up needs approval is said on the card (warnings are not part of the plan hash).
        ceiling = policy.beyond_ceiling(self.policies[handle.name], planned)
        return replace(planned, warnings=(*ceiling, *planned.warnings)) if ceiling else planned

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
            restore = {r.pool: r.desired for r in self.store.restore_records(handle.name)}
            for pool in pools:
                if pool.restore is not None:
                    restore.setdefault(pool.name, pool.restore.desired)
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
        plan = consolidation.plan_consolidation(
            snap.nodes,
            snap.pods,
            handle.api.list_pdbs(),
            pool_minimums={p.name: p.min_size for p in pools},
            daemonset_keys=handle.api.list_daemonset_keys(),
            now=now,
            settings=pol.planning,
            notes=snap.autoscalers,
            removable_pools=frozenset(req.target.pools or known),
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

    # -- requests and decisions -------------------------------------------------------------------

    def request(
        self,
        req: OperationRequest,
        *,
        groups: Sequence[str] = (),
        planned: OperationPlan | None = None,
        pre_approver_groups: Mapping[str, Sequence[str]] | None = None,
        start_when_shown: bool = False,
    ) -> Outcome:
        """`planned`: a plan made just before for this very request, and `pre_approver_groups` the
        pre-approvers' user groups looked up just before (a schedule firing does both before its
        transaction, so no cluster listing and no Slack call run inside it).

        `start_when_shown`: an operation that needs no approval is not started here but by
        `start_shown`, once its card is in the channel (the bot could not tell whether it may post
        there); if the card cannot be posted, `cancel_unshown` ends it with nothing started."""
        cluster = req.target.cluster
        if cluster not in self.handles:
            return Outcome(False, f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        pol = self.policies[cluster]
        allowed = policy.can_request(pol, self.role(cluster, req.requested_by, groups), req.kind)
        if allowed.allowed:
            elsewhere = self.origin_refusal(cluster, by=req.requested_by, channel=req.channel, what="request")
            if elsewhere is not None:
                return elsewhere
        if not allowed.allowed:
            self._audit(req.requested_by, "refused_request", cluster=cluster, detail=allowed.reason)
            return Outcome(False, allowed.reason, reason=allowed.detail)
        try:
            op_plan = planned if planned is not None else self.plan(req)
        except UserError as exc:
            self._audit(req.requested_by, "refused_request", cluster=cluster, detail=str(exc))
            return Outcome(False, str(exc))
        initiated_by = tuple(dict.fromkeys((req.requested_by, *req.on_behalf_of)))
        needed = (
            0
            if req.requested_by.startswith("cli:")
            else policy.approvals_needed(pol, op_plan, requested_by=req.requested_by)
        )
        standing: list[str] = []
        if needed and req.pre_approvers:
            # Pre-approvals count only as far as their authors may still approve today.
            looked_up = (
                pre_approver_groups if pre_approver_groups is not None else self.pre_approver_groups(req)
            )
            roles = {u: self.role(cluster, u, looked_up.get(u, ())) for u in req.pre_approvers}
            standing = policy.standing_pre_approvers(pol, roles, initiated_by=initiated_by)
            if policy.pre_approval_covers(pol, needed, standing):
                needed = 0
        now = self.clock.now()
        op = Operation(
            id=f"op-{secrets.token_hex(4)}",
            kind=req.kind,
            target=req.target,
            state=OpState.AWAITING_APPROVAL if needed else OpState.RUNNING,
            requested_by=req.requested_by,
            created_at=now,
            updated_at=now,
            plan=op_plan,
            channel=req.channel,
            thread_ts=req.thread_ts,
            approval_id=secrets.token_urlsafe(16) if needed else "",
            approvals_required=needed,
            expires_at=now + pol.request_ttl if needed else None,
            initiated_by=initiated_by,
        )
        try:
            with self.store.transaction():
                self.store.acquire_locks(_lock_keys(op), op.id, at=now)
                self.store.insert_operation(op)
                self._audit(
                    req.requested_by, "request", op=op, detail=f"{req.kind.value}: {op_plan.summary()}"
                )
                if req.pre_approvers:
                    covered = "covers this run" if not needed else "does not cover this run"
                    self._audit(
                        req.requested_by,
                        "pre_approval",
                        op=op,
                        detail=f"standing pre-approvers: {', '.join(standing) or 'none'}; {covered}",
                    )
        except LockConflict as exc:
            busy = self._busy(exc)
            self._audit(req.requested_by, "refused_request", cluster=cluster, detail=_busy_text(busy))
            return Outcome(False, _busy_text(busy), reason=busy)
        # Every new operation is announced, so a card appears whoever asked (a person, the CLI, a schedule).
        self._emit_state(op, f"Requested by {req.requested_by}: {op_plan.summary()}")
        if op.state is OpState.RUNNING and start_when_shown:
            return Outcome(
                True,
                f"Operation {op.id} starts once its card is shown: {op_plan.summary()}",
                op,
                changed=True,
            )
        if op.state is OpState.RUNNING:
            self.runner.start(op.id)
            return Outcome(True, f"Operation {op.id} started: {op_plan.summary()}", op, changed=True)
        return Outcome(
            True,
            f"Operation {op.id} needs {needed} approval{'s' if needed > 1 else ''}: {op_plan.summary()}",
            op,
            changed=True,
        )

    def approve(self, approval_id: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> Outcome:
        """`channel`: where the click came from (the channel rule of the request applies to it)."""
        op = self.store.operation_by_approval(approval_id)
        if op is None:
            return Outcome(False, "unknown request: it may belong to another scalebot instance")
        elsewhere = self.origin_refusal(op.target.cluster, by=by, channel=channel, what="approve", op=op)
        if elsewhere is not None:
            return elsewhere
        early = self._check_decidable(op, by=by, groups=groups, action="approve")
        if early is not None:
            return early
        seen = frozenset(self._approvers(approval_id)) | {by}
        standing = self._standing_voters(op, by=by, groups=groups, note=False)
        with self.store.transaction():
            current = self.store.get_operation(op.id)
            assert current is not None
            if current.state is not OpState.AWAITING_APPROVAL:
                return self._already_decided(current)
            # A vote after the quorum is in adds nothing: the click joins the decision under way. A
            # vote another click committed since `standing` was looked up counts here for now (it is
            # checked below, outside the transaction), so two clicks at once store one vote.
            tentative = standing | (frozenset(self._approvers(approval_id)) - seen)
            quorum_in = len(self._counted(approval_id, tentative)) >= current.approvals_required
            added = not quorum_in and self.store.add_vote(approval_id, by, "approve", at=self.clock.now())
            if added:
                self._audit(by, "approve", op=current)
        # Others may have voted meanwhile: every vote is checked again, outside the transaction.
        standing = self._standing_voters(current, by=by, groups=groups)
        votes = self._counted(approval_id, standing)
        if len(votes) < current.approvals_required:
            if not added:
                return Outcome(True, "you have already approved this request", current)
            text = f"{len(votes)} of {current.approvals_required} approvals: " + ", ".join(votes)
            self._emit_state(current, text)
            return Outcome(True, text, current, changed=True)
        # With the quorum in, this click (or a repeated one, after a decision that could not plan)
        # decides: whichever decision commits first stands, the other is told it is already taken.
        return self._decide_approved(current, by=by, standing=standing)

    def _standing_voters(
        self, op: Operation, *, by: str, groups: Sequence[str], note: bool = True
    ) -> frozenset[str]:
        """Who among the request's approvers (and `by`, the clicker) may approve it now: every stored
        vote is re-checked against today's roles, user groups looked up again (a failed lookup grants
        none), as a schedule's pre-approvals are. Looked up outside any transaction (Slack calls);
        `note`: audit each stored vote that no longer counts (the card stops listing it)."""
        cluster = op.target.cluster
        roles = {u: self.role(cluster, u, self._groups_now(u)) for u in self._approvers(op.approval_id)}
        roles[by] = self.role(cluster, by, groups)
        initiated = (op.requested_by, *op.initiated_by)
        standing = policy.standing_pre_approvers(self.policies[cluster], roles, initiated_by=initiated)
        for voter in sorted(set(roles) - set(standing) - {by}) if note else ():
            self._audit(voter, "vote_not_counted", op=op, detail="no longer an approver on " + cluster)
        return frozenset(standing)

    def _groups_now(self, user: str) -> Sequence[str]:
        try:
            return tuple(self.groups_of(user))
        except Exception:  # fail closed: a vote that rests on a group nobody could confirm does not count
            log.warning("could not look up %s's user groups; their group roles count for nothing", user)
            return ()

    def _counted(self, approval_id: str, standing: frozenset[str]) -> list[str]:
        return [u for u in self._approvers(approval_id) if u in standing]

    def _decide_approved(self, op: Operation, *, by: str, standing: frozenset[str]) -> Outcome:
        """The quorum is in: plan again and start, or supersede. The new plan lists the cluster, so it
        is taken outside any transaction; the comparison and the move out of awaiting_approval are
        then one compare-and-set, so of two approvers completing the quorum together exactly one
        decides, and always on the plan check."""
        fresh = self.plan(_request_of(op))
        changed = fresh.plan_hash != op.plan.plan_hash
        with self.store.transaction():
            current = self.store.get_operation(op.id)
            assert current is not None
            if current.state is not OpState.AWAITING_APPROVAL:
                return self._already_decided(current)
            votes = self._counted(current.approval_id, standing)
            if changed:
                decided = self._finish(
                    current, OpState.SUPERSEDED, by=by, error="the cluster changed since the plan was shown"
                )
            else:
                decided = replace(current, state=OpState.RUNNING, updated_at=self.clock.now())
                if self.store.transition(decided, expected=OpState.AWAITING_APPROVAL):
                    self.store.journal(op.id, at=decided.updated_at, step=op.step, event=decided.state.value)
            assert decided is not None  # the write transaction is ours: the compare-and-set holds
        if changed:
            again = self.request(_request_of(current))
            text = "The cluster changed since this plan was shown; a new plan needs approval"
            self._emit_state(decided, text, final=True)
            return Outcome(
                False, f"{text} ({again.operation.id if again.operation else again.reply})", decided
            )
        self._emit_state(decided, "Approved by " + ", ".join(votes))
        self.runner.start(decided.id)
        return Outcome(True, f"Approved; operation {decided.id} is running", decided, changed=True)

    def pre_approver_groups(self, req: OperationRequest) -> dict[str, tuple[str, ...]]:
        """The user groups of a request's pre-approvers, now (Slack; a failed lookup grants none)."""
        return {u: tuple(self.groups_of(u)) for u in req.pre_approvers}

    def _approvers(self, approval_id: str) -> list[str]:
        return [u for u, v, _ in self.store.votes(approval_id) if v == "approve"]

    def reject(
        self, approval_id: str, *, by: str, groups: Sequence[str] = (), reason: str = "", channel: str = ""
    ) -> Outcome:
        op = self.store.operation_by_approval(approval_id)
        if op is None:
            return Outcome(False, "unknown request: it may belong to another scalebot instance")
        elsewhere = self.origin_refusal(op.target.cluster, by=by, channel=channel, what="reject", op=op)
        if elsewhere is not None:
            return elsewhere
        early = self._check_decidable(op, by=by, groups=groups, action="reject", allow_requester=True)
        if early is not None:
            return early
        with self.store.transaction():
            current = self.store.get_operation(op.id)
            assert current is not None
            if current.state is not OpState.AWAITING_APPROVAL:
                return self._already_decided(current)
            self.store.add_vote(approval_id, by, "reject", at=self.clock.now())
            done = self._finish(current, OpState.REJECTED, by=by, error=reason)
            assert done is not None  # we hold the write transaction
        self._emit_state(done, f"Rejected by {by}" + (f": {reason}" if reason else ""), final=True)
        return Outcome(True, f"Rejected operation {done.id}", done, changed=True)

    def cancel(self, op_id: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> Outcome:
        op = self.store.get_operation(op_id)
        if op is None:
            return Outcome(
                False,
                f"no operation {op_id}; the list of operations shows the recent ones",
                reason=UnknownOperation(op_id),
            )
        wrong_channel = self.origin_refusal(op.target.cluster, by=by, channel=channel, what="cancel", op=op)
        if wrong_channel is not None:
            return wrong_channel
        role = self.role(op.target.cluster, by, groups)
        if (
            by not in op.initiated_by
            and by != op.requested_by
            and (role is None or role < policy.Role.APPROVER)
        ):
            self._audit(by, "refused_cancel", op=op, detail="not the requester nor an approver")
            return Outcome(False, "only the requester or an approver can cancel this operation")
        if op.state.is_terminal:
            self._audit(by, "refused_cancel", op=op, detail=f"already {op.state.value}")
            return Outcome(False, f"operation {op_id} already finished ({op.state.value}); nothing to cancel")
        elsewhere = None if self.runner.is_running(op.id) else self.runner.held_elsewhere(op.id)
        if op.state is OpState.RUNNING and elsewhere is not None:
            # Finishing it here would race the runner that holds it (it would write over "cancelled").
            self._audit(by, "refused_cancel", op=op, detail=f"being run by {elsewhere.owner}")
            return Outcome(
                False,
                f"operation {op_id} is being run by {elsewhere.owner} (pid {elsewhere.pid} on "
                f"{elsewhere.host}): cancel it there (Slack, or the terminal that runs it)",
            )
        if op.state is OpState.AWAITING_APPROVAL or not self.runner.is_running(op.id):
            done = self._finish(op, OpState.CANCELLED, by=by)
            if done is None:  # decided, finished or started by someone else in the meantime
                current = self.store.get_operation(op_id)
                assert current is not None
                if current.state is OpState.RUNNING and self.runner.is_running(op_id):
                    return self.cancel(op_id, by=by, groups=groups, channel=channel)
                self._audit(by, "refused_cancel", op=current, detail=f"already {current.state.value}")
                return self._already_decided(current)
            self._emit_state(done, f"Cancelled by {by}", final=True)
            return Outcome(True, f"Cancelled operation {op_id}", done, changed=True)
        self._audit(by, "cancel", op=op, detail="requested: the current step finishes first")
        self.runner.cancel(op.id)
        return Outcome(
            True, f"Cancelling operation {op_id}: the current step finishes first", op, changed=True
        )

    def start_shown(self, op_id: str) -> bool:
        """Start an operation held by `request(start_when_shown=True)` now that its card is in the
        channel. False when there is nothing to start (decided, cancelled, started already)."""
        op = self.store.get_operation(op_id)
        if op is None or op.state is not OpState.RUNNING or op.step or self.runner.is_running(op_id):
            return False
        try:
            self.runner.start(op_id)
        except ClaimHeld:  # another live runner took it (a restart resumed it): it runs there
            return False
        return True

    def cancel_unshown(self, op_id: str, reason: Unshown) -> Outcome:
        """The system cancels a request whose card Slack refused to post (the bot is not in the
        channel, the channel is gone or archived): nobody could approve it or watch it run. Only
        what has not started is cancelled: a request awaiting approval, or an operation held until
        its card is shown. The final state, its audit row and the release of its locks are one
        write; the bot tells the requester privately."""
        op = self.store.get_operation(op_id)
        if op is None or op.state.is_terminal:
            return Outcome(False, f"operation {op_id} is already over", op)
        started = op.state is OpState.RUNNING and (bool(op.step) or self.runner.is_running(op_id))
        if started:
            self._audit(
                "scalebot", "refused_cancel", op=op, detail=f"card not shown ({reason.error}): started"
            )
            return Outcome(False, f"operation {op_id} has started; it is not cancelled", op)
        done = self._finish(op, OpState.CANCELLED, by="scalebot", error=reason.describe())
        if done is None:  # decided or cancelled in the meantime: that stands
            current = self.store.get_operation(op_id)
            return Outcome(False, f"operation {op_id} was decided meanwhile", current)
        self._emit_state(done, f"Cancelled by scalebot: {reason.describe()}", final=True)
        return Outcome(True, f"Cancelled operation {op_id}: {reason.describe()}", done, changed=True)

    def expire_stale(self) -> list[Operation]:
        """Mark approvals past their deadline as expired (their cards are updated)."""
        now = self.clock.now()
        expired = []
        for op in self.store.list_operations(states=[OpState.AWAITING_APPROVAL], limit=1000):
            if op.expires_at is not None and now >= op.expires_at:
                done = self._finish(op, OpState.EXPIRED, by="scalebot")
                if done is None:  # approved, rejected or cancelled just before: that decision stands
                    continue
                self._emit_state(done, "Expired: nobody approved in time", final=True)
                expired.append(done)
        return expired

    def cordon(
        self,
        cluster: str,
        nodes: Sequence[str],
        *,
        by: str,
        unschedulable: bool,
        groups: Sequence[str] = (),
        channel: str = "",
    ) -> Outcome:
        """Cordon or uncordon nodes by hand: operator role; refused on a protected cluster or where
        the policy lists the verb among what needs approval (ask for a `drain` instead, which is
        approved like any operation); refused while an operation holds the node or its pool."""
        handle = self._handle(cluster)
        verb = "cordon" if unschedulable else "uncordon"
        pol = self.policies[cluster]
        role = self.role(cluster, by, groups)
        if role is None or role < policy.Role.OPERATOR:
            return self.refuse(by, verb, cluster, f"{verb} needs the operator role on {cluster}")
        elsewhere = self.origin_refusal(cluster, by=by, channel=channel, what=verb)
        if elsewhere is not None:
            return elsewhere
        if not by.startswith("cli:") and (pol.protected or verb in pol.approval_required_for):
            why = "a protected cluster" if pol.protected else f"its policy lists {verb} as needing approval"
            instead = NeedsApprovalInstead(verb, cluster, why)
            return self.refuse(
                by,
                verb,
                cluster,
                f"{verb} on {cluster} needs approval ({why}); request a drain instead",
                instead,
            )
        known = {n.name for n in handle.api.list_nodes()}
        missing = [n for n in nodes if n not in known]
        if missing or not nodes:
            return self.refuse(
                by,
                verb,
                cluster,
                f"node(s) not found: {', '.join(missing) or '(none given)'}; "
                f"nodes: {', '.join(sorted(known)[:20])}",
            )
        pool_of = {n: p.name for p in handle.pools.list_pools() for n in p.nodes}
        keys = [f"node:{cluster}/{n}" for n in nodes] + [
            f"pool:{cluster}/{pool_of[n]}" for n in nodes if n in pool_of
        ]
        holder = self.store.lock_holder(keys)
        if holder is not None:
            busy = self._busy(LockConflict(*holder))
            return self.refuse(by, verb, cluster, _busy_text(busy), busy)
        if unschedulable:
            changed = [n for n in nodes if handle.api.set_unschedulable(n, True)]
        else:
            # Our draining taint goes too: a node left tainted would stay unusable after "uncordon".
            changed = [n for n in nodes if drain.uncordon_node(handle.api, n)]
        self._audit(by, verb, cluster=cluster, detail=", ".join(nodes))
        return Outcome(
            True,
            f"{verb}ed: {', '.join(changed) or 'nothing (already ' + verb + 'ed)'}",
            changed=bool(changed),
        )

    def origin_refusal(
        self, cluster: str, *, by: str, channel: str, what: str, op: Operation | None = None
    ) -> Outcome | None:
        """The channel rule for everything a person does from Slack on `cluster`, typed or clicked
        (a request, a cordon, Approve, Reject, Cancel, a schedule's buttons): only from the cluster's
        allowed channels, and a protected cluster never from a direct message. None: it may go on;
        otherwise the audited refusal. The CLI, schedules and policies are not in a channel."""
        if not _from_slack(by) or cluster not in self.policies:
            return None
        where = policy.channel_allowed(self.policies[cluster], channel)
        if where.allowed:
            return None
        self._audit(by, f"refused_{what}", op=op, cluster=cluster, detail=where.reason)
        return Outcome(False, where.reason, op, reason=where.detail)

    def may_view(self, cluster: str, *, by: str, groups: Sequence[str] = (), what: str = "status") -> str:
        """ "" when `by` may read `cluster` (any role there); otherwise the refusal, audited."""
        if cluster not in self.handles:
            return f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}'
        if self.role(cluster, by, groups) is not None:
            return ""
        return self.refuse(by, what, cluster, f"{what} needs at least the viewer role on {cluster}").reply

    def visible_clusters(self, by: str, groups: Sequence[str] = ()) -> list[str]:
        return [c for c in self.clusters() if self.role(c, by, groups) is not None]

    def preview(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> OperationPlan:
        """`plan`, asked by a person: viewer role, and at most `plan_burst` per `plan_window` each,
        since every plan lists the whole cluster. Raises UserError with the refusal."""
        cluster, by = req.target.cluster, req.requested_by
        refusal = self.may_view(cluster, by=by, groups=groups, what="plan")
        if refusal:
            raise UserError(refusal)
        self._limit_plans(by, cluster)
        return self.plan(req)

    def advise(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> Advice:
        """Scale-up advice for the pending pods and the underused nodes: a read, limited like `plan`."""
        refusal = self.may_view(cluster, by=by, groups=groups, what="advise")
        if refusal:
            raise UserError(refusal)
        self._limit_plans(by, cluster)
        handle = self._handle(cluster)
        api = _scheduling_api(handle, "scale-up advice")
        pools = handle.pools.list_pools()
        nodes, bound = api.list_nodes_json(), api.list_bound_pods_json()
        snap = consolidation.snapshot_from_raw(pools, nodes, bound)
        pol = self.policies[cluster].consolidation
        plan = consolidation.plan_consolidation(
            snap.nodes,
            snap.pods,
            handle.api.list_pdbs(),
            pool_minimums={p.name: p.min_size for p in pools},
            daemonset_keys=handle.api.list_daemonset_keys(),
            now=self.clock.now(),
            settings=replace(pol.planning, max_nodes=len(nodes) or 1),
            removable_pools=frozenset(p.name for p in pools),
        )
        return Advice(
            cluster=cluster,
            scale_up=advice.advise_from_raw(pools, nodes, bound, api.list_unbound_pods_json()),
            underused=consolidation.underused(snap, plan, now=self.clock.now(), rules=pol.rules),
            threshold=pol.rules.utilization_threshold,
        )

    def _limit_plans(self, by: str, cluster: str) -> None:
        """At most `plan_burst` plans per person per `plan_window` (each lists the whole cluster)."""
        now = self.clock.now()
        with self._plans_lock:
            recent = [t for t in self._plans.get(by, ()) if now - t < self.plan_window]
            if len(recent) >= self.plan_burst:
                wait = int((recent[0] + self.plan_window - now).total_seconds()) + 1
                self._plans[by] = recent
                limited = True
            else:
                self._plans[by] = [*recent, now]
                limited = False
        if limited:
            reply = f"too many plans: at most {self.plan_burst} per {self.plan_window}; try again in {wait}s"
            raise UserError(self.refuse(by, "plan", cluster, reply).reply)

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        self.store.set_message(op_id, channel=channel, ts=ts)

    def resume(self, *, wait_for_claims: bool = False) -> list[str]:
        """At start-up: expire stale approvals and continue every running operation.

        Raises `engine.store.claims.ClaimHeld` (nothing started) when another live runner holds one of
        them; `wait_for_claims` (a new leader) waits for such claims to lapse instead.
        """
        self.expire_stale()
        return self.runner.resume_all(wait_for_claims=wait_for_claims)

    # -- helpers ----------------------------------------------------------------------------------

    def _handle(self, cluster: str) -> ClusterHandle:
        if cluster not in self.handles:
            raise UserError(f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        return self.handles[cluster]

    def _check_decidable(
        self, op: Operation, *, by: str, groups: Sequence[str], action: str, allow_requester: bool = False
    ) -> Outcome | None:
        if op.state is not OpState.AWAITING_APPROVAL:
            return self._already_decided(op)
        now = self.clock.now()
        if op.expires_at is not None and now >= op.expires_at:
            done = self._finish(op, OpState.EXPIRED, by="scalebot")
            if done is None:
                current = self.store.get_operation(op.id)
                assert current is not None
                return self._already_decided(current)
            self._emit_state(done, "Expired: nobody approved in time", final=True)
            self._audit(by, f"refused_{action}", op=op, detail="expired")
            return Outcome(False, "this request has expired; ask for a new one", done)
        if allow_requester and by == op.requested_by:
            return None
        decision = policy.can_approve(
            self.policies[op.target.cluster],
            voter=by,
            voter_role=self.role(op.target.cluster, by, groups),
            requested_by=op.requested_by,
            expires_at=op.expires_at,
            now=now,
            initiated_by=op.initiated_by,
        )
        if not decision.allowed:
            self._audit(by, f"refused_{action}", op=op, detail=decision.reason)
            return Outcome(False, decision.reason, op)
        return None

    def _already_decided(self, op: Operation) -> Outcome:
        deciding = ("approve", "rejected", "cancel", "cancelled", "expired")
        who = [r for r in self.store.audit_rows(op_id=op.id) if r.action in deciding]
        state = op.state.value.replace("_", " ")
        decided = (
            AlreadyDecided(op.id, state, who[-1].actor, who[-1].at) if who else AlreadyDecided(op.id, state)
        )
        by = f" by {decided.by} at {decided.at:%H:%M} UTC" if decided.at is not None else ""
        return Outcome(True, f"operation {op.id} is already {state}{by}", op, reason=decided)

    def _finish(self, op: Operation, state: OpState, *, by: str, error: str = "") -> Operation | None:
        """Compare-and-set `op` (in the state it was read in) to a final state, releasing its locks in
        the same transaction; None when another path moved it first (nothing is written)."""
        new = replace(op, state=state, updated_at=self.clock.now(), error=error or op.error)
        with self.store.transaction():
            if not self.store.transition(new, expected=op.state):
                return None
            self.store.journal(op.id, at=new.updated_at, step=op.step, event=state.value)
            self._audit(by, state.value, op=new, detail=error)
        return new

    def _audit(
        self, actor: str, action: str, *, op: Operation | None = None, cluster: str = "", detail: str = ""
    ) -> None:
        self.store.audit(
            at=self.clock.now(),
            actor=actor,
            action=action,
            op_id=op.id if op else "",
            cluster=op.target.cluster if op else cluster,
            detail=detail,
        )

    def refuse(self, by: str, what: str, cluster: str, reason: str, detail: Reason | None = None) -> Outcome:
        """A refusal is audited like an action: who tried what, where, and why it was refused."""
        self._audit(by, f"refused_{what}", cluster=cluster, detail=reason)
        return Outcome(False, reason, reason=detail)

    def _busy(self, exc: LockConflict) -> Busy:
        holder = self.store.get_operation(exc.op_id)
        what = exc.key.split("/", 1)[-1]
        if holder is None:
            return Busy(what, exc.op_id)
        return Busy(
            what, holder.id, holder.kind.value, holder.requested_by, holder.state.value.replace("_", " ")
        )


def _busy_text(busy: Busy) -> str:
    if not busy.state:
        return f"{busy.what} is busy with operation {busy.op_id}"
    return (
        f"{busy.what} is busy: operation {busy.op_id} ({busy.kind}, requested by {busy.requested_by}, "
        f"{busy.state}) is using it; wait for it or cancel it"
    )


def _from_slack(actor: str) -> bool:
    """A person in Slack (not the CLI, not a schedule, whose channel was checked when it was saved)."""
    return not actor.startswith(("cli:", "schedule:", "policy:"))


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
    snap = consolidation.snapshot_from_raw(
        handle.pools.list_pools(), api.list_nodes_json(), api.list_bound_pods_json()
    )
    return replace(snap, autoscalers=consolidation.other_consolidators(api.list_deployment_names()))


def _lock_keys(op: Operation) -> list[str]:
    cluster = op.target.cluster
    # Nodes are locked too, so a manual drain of a node cannot race a zero-scale of its pool.
    keys = [f"pool:{cluster}/{p.pool}" for p in op.plan.pools]
    keys += [f"node:{cluster}/{n}" for n in op.plan.nodes]
    return sorted(keys)


def _request_of(op: Operation) -> OperationRequest:
    # Pre-approvals are deliberately not carried over: a superseded plan asks for approval again.
    return OperationRequest(
        kind=op.kind,
        target=op.target,
        requested_by=op.requested_by,
        channel=op.channel,
        thread_ts=op.thread_ts,
        on_behalf_of=tuple(u for u in op.initiated_by if u != op.requested_by),
    )

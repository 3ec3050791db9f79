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
from dataclasses import dataclass, replace
from datetime import datetime

from engine import drain, policy
from engine import plan as planning
from engine.clock import Clock
from engine.kube import events as kube_events
from engine.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpState,
    Outcome,
    ProgressEvent,
)
from engine.pools.base import Pool, PoolNotFound
from engine.runner import ClusterHandle, Runner, RunnerSettings
from engine.store import LockConflict, Store

log = logging.getLogger(__name__)


class UserError(ValueError):
    """Bad input from a person: the message names the problem and the valid choices."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: datetime
    actor: str
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster: str
    pools: list[Pool]
    running: list[Operation]
    next_event: str | None = None


class Operations:
    def __init__(
        self,
        store: Store,
        clusters: Mapping[str, ClusterHandle],
        policies: Mapping[str, policy.ClusterPolicy],
        clock: Clock,
        *,
        settings: RunnerSettings | None = None,
        next_event: Callable[[str], str | None] | None = None,
        recorder: kube_events.Recorder | None = None,
    ) -> None:
        self.store = store
        self.handles = dict(clusters)
        self.policies = {name: policies.get(name, policy.ClusterPolicy(cluster=name)) for name in clusters}
        self.clock = clock
        self._listeners: list[Callable[[ProgressEvent], None]] = []
        self._listeners_lock = threading.Lock()
        self._next_event = next_event
        self.runner = Runner(
            store, self.handles, clock, self._emit, settings or RunnerSettings(), recorder=recorder
        )

    # -- progress ---------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _emit(self, event: ProgressEvent) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not stop an operation
                log.exception("progress listener failed", extra={"operation": event.operation.id})

    def _emit_state(self, op: Operation, text: str, *, final: bool = False) -> None:
        self._emit(ProgressEvent(operation=op, kind="final" if final else "state", text=text, final=final))

    # -- reads ------------------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        return sorted(self.handles)

    def role(self, cluster: str, user: str, groups: Sequence[str] = ()) -> policy.Role | None:
        if user.startswith("cli:"):
            return policy.Role.ADMIN
        if user.startswith("schedule:"):
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

    def plan(self, req: OperationRequest) -> OperationPlan:
        handle = self._handle(req.target.cluster)
        try:
            snap = self.snapshot(handle, with_workloads=req.target.workloads or req.target.workloads_only)
            return planning.plan_operation(req.kind, req.target, snap, now=self.clock.now())
        except (planning.PlanError, PoolNotFound) as exc:
            raise UserError(str(exc)) from exc

    def snapshot(self, handle: ClusterHandle, *, with_workloads: bool = False) -> planning.ClusterSnapshot:
        """One listing of each kind of object; sizes to restore from SQLite, else the pool objects."""
        pools = handle.pools.list_pools()
        restore = {r.pool: r.desired for r in self.store.restore_records(handle.name)}
        for pool in pools:
            if pool.restore is not None:
                restore.setdefault(pool.name, pool.restore.desired)
        api = handle.api
        sleeping = len(self.store.workload_records(handle.name))
        return planning.ClusterSnapshot(
            cluster=handle.name,
            pools=tuple(pools),
            nodes=tuple(api.list_nodes()),
            pods=tuple(api.list_pods()),
            pdbs=tuple(api.list_pdbs()),
            daemonset_keys=api.list_daemonset_keys(),
            restore_sizes=restore,
            workloads_to_sleep=self._workloads_to_sleep(handle) if with_workloads else 0,
            workloads_asleep=sleeping,
        )

    @staticmethod
    def _workloads_to_sleep(handle: ClusterHandle) -> int:
        if handle.workloads is None:
            raise UserError(f"cluster {handle.name} has no workloads provider configured")
        return sum(1 for d in handle.workloads.plan_sleep().decisions if d.category == "change")

    # -- requests and decisions -------------------------------------------------------------------

    def request(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> Outcome:
        cluster = req.target.cluster
        if cluster not in self.handles:
            return Outcome(False, f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        pol = self.policies[cluster]
        allowed = policy.can_request(pol, self.role(cluster, req.requested_by, groups), req.kind)
        if not allowed.allowed:
            self._audit(req.requested_by, "refused_request", cluster=cluster, detail=allowed.reason)
            return Outcome(False, allowed.reason)
        try:
            op_plan = self.plan(req)
        except UserError as exc:
            return Outcome(False, str(exc))
        needed = (
            0
            if req.requested_by.startswith("cli:")
            else policy.approvals_needed(
                pol, op_plan, requested_by=req.requested_by, pre_approved=req.pre_approved
            )
        )
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
        )
        try:
            with self.store.transaction():
                self.store.acquire_locks(_lock_keys(op), op.id, at=now)
                self.store.insert_operation(op)
                self._audit(
                    req.requested_by, "request", op=op, detail=f"{req.kind.value}: {op_plan.summary()}"
                )
        except LockConflict as exc:
            return Outcome(False, self._busy_message(exc))
        # Every new operation is announced, so a card appears whoever asked (a person, the CLI, a schedule).
        self._emit_state(op, f"Requested by {req.requested_by}: {op_plan.summary()}")
        if op.state is OpState.RUNNING:
            self.runner.start(op.id)
            return Outcome(True, f"Operation {op.id} started: {op_plan.summary()}", op, changed=True)
        return Outcome(
            True,
            f"Operation {op.id} needs {needed} approval{'s' if needed > 1 else ''}: {op_plan.summary()}",
            op,
            changed=True,
        )

    def approve(self, approval_id: str, *, by: str, groups: Sequence[str] = ()) -> Outcome:
        op = self.store.operation_by_approval(approval_id)
        if op is None:
            return Outcome(False, "unknown request: it may belong to another scalebot instance")
        early = self._check_decidable(op, by=by, groups=groups, action="approve")
        if early is not None:
            return early
        votes = [u for u, v, _ in self.store.votes(approval_id) if v == "approve"]
        completes = len({*votes, by}) >= op.approvals_required
        fresh = self.plan(_request_of(op)) if completes else None  # a snapshot: outside the transaction
        with self.store.transaction():
            current = self.store.get_operation(op.id)
            assert current is not None
            if current.state is not OpState.AWAITING_APPROVAL:
                return self._already_decided(current)
            if not self.store.add_vote(approval_id, by, "approve", at=self.clock.now()):
                return Outcome(True, "you have already approved this request", current)
            self._audit(by, "approve", op=current)
            votes = [u for u, v, _ in self.store.votes(approval_id) if v == "approve"]
            if len(votes) < current.approvals_required:
                text = f"{len(votes)} of {current.approvals_required} approvals: " + ", ".join(
                    f"<@{u}>" for u in votes
                )
                self._emit_state(current, text)
                return Outcome(True, text, current, changed=True)
            if fresh is not None and fresh.plan_hash != current.plan.plan_hash:
                superseded = self._finish(
                    current, OpState.SUPERSEDED, by=by, error="the cluster changed since the plan was shown"
                )
            else:
                # In the deciding vote's transaction: a second approver clicking at the same moment
                # then finds the operation running and is told so, instead of deciding it again.
                started = self._transition(current, OpState.RUNNING)
        if fresh is not None and fresh.plan_hash != current.plan.plan_hash:
            again = self.request(_request_of(current))
            text = "The cluster changed since this plan was shown; a new plan needs approval"
            self._emit_state(superseded, text, final=True)
            return Outcome(
                False, f"{text} ({again.operation.id if again.operation else again.reply})", superseded
            )
        self._emit_state(started, "Approved by " + ", ".join(f"<@{u}>" for u in votes))
        self.runner.start(started.id)
        return Outcome(True, f"Approved; operation {started.id} is running", started, changed=True)

    def reject(self, approval_id: str, *, by: str, groups: Sequence[str] = (), reason: str = "") -> Outcome:
        op = self.store.operation_by_approval(approval_id)
        if op is None:
            return Outcome(False, "unknown request: it may belong to another scalebot instance")
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
        self._emit_state(done, f"Rejected by <@{by}>" + (f": {reason}" if reason else ""), final=True)
        return Outcome(True, f"Rejected operation {done.id}", done, changed=True)

    def cancel(self, op_id: str, *, by: str, groups: Sequence[str] = ()) -> Outcome:
        op = self.store.get_operation(op_id)
        if op is None:
            return Outcome(False, f"no operation {op_id}; `ops list` shows the recent ones")
        if op.state.is_terminal:
            return Outcome(False, f"operation {op_id} already finished ({op.state.value}); nothing to cancel")
        role = self.role(op.target.cluster, by, groups)
        if by != op.requested_by and (role is None or role < policy.Role.APPROVER):
            self._audit(by, "refused_cancel", op=op, detail="not the requester nor an approver")
            return Outcome(False, "only the requester or an approver can cancel this operation")
        self._audit(by, "cancel", op=op)
        if op.state is OpState.AWAITING_APPROVAL or not self.runner.is_running(op.id):
            done = self._finish(op, OpState.CANCELLED, by=by)
            self._emit_state(done, f"Cancelled by <@{by}>", final=True)
            return Outcome(True, f"Cancelled operation {op_id}", done, changed=True)
        self.runner.cancel(op.id)
        return Outcome(
            True, f"Cancelling operation {op_id}: the current step finishes first", op, changed=True
        )

    def expire_stale(self) -> list[Operation]:
        """Mark approvals past their deadline as expired (their cards are updated)."""
        now = self.clock.now()
        expired = []
        for op in self.store.list_operations(states=[OpState.AWAITING_APPROVAL], limit=1000):
            if op.expires_at is not None and now >= op.expires_at:
                done = self._finish(op, OpState.EXPIRED, by="scalebot")
                self._emit_state(done, "Expired: nobody approved in time", final=True)
                expired.append(done)
        return expired

    def cordon(
        self, cluster: str, nodes: Sequence[str], *, by: str, unschedulable: bool, groups: Sequence[str] = ()
    ) -> Outcome:
        handle = self._handle(cluster)
        role = self.role(cluster, by, groups)
        if role is None or role < policy.Role.OPERATOR:
            return Outcome(False, f"cordon needs the operator role on {cluster}")
        known = {n.name for n in handle.api.list_nodes()}
        missing = [n for n in nodes if n not in known]
        if missing or not nodes:
            return Outcome(
                False,
                f"node(s) not found: {', '.join(missing) or '(none given)'}; "
                f"nodes: {', '.join(sorted(known)[:20])}",
            )
        verb = "cordon" if unschedulable else "uncordon"
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

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        self.store.set_message(op_id, channel=channel, ts=ts)

    def resume(self) -> list[str]:
        """At start-up: expire stale approvals and continue every running operation."""
        self.expire_stale()
        return self.runner.resume_all()

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
        )
        if not decision.allowed:
            self._audit(by, f"refused_{action}", op=op, detail=decision.reason)
            return Outcome(False, decision.reason, op)
        return None

    def _already_decided(self, op: Operation) -> Outcome:
        deciding = ("approve", "rejected", "cancel", "cancelled", "expired")
        who = [r for r in self.store.audit_rows(op_id=op.id) if r.action in deciding]
        by = f" by <@{who[-1].actor}> at {who[-1].at.strftime('%H:%M')} UTC" if who else ""
        return Outcome(True, f"operation {op.id} is already {op.state.value.replace('_', ' ')}{by}", op)

    def _transition(self, op: Operation, state: OpState) -> Operation:
        new = replace(op, state=state, updated_at=self.clock.now())
        self.store.save_operation(new)
        self.store.journal(op.id, at=new.updated_at, step=op.step, event=state.value)
        return new

    def _finish(self, op: Operation, state: OpState, *, by: str, error: str = "") -> Operation:
        with self.store.transaction():
            new = replace(self._transition(op, state), error=error or op.error)
            self.store.save_operation(new)
            self.store.release_locks(op.id)
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

    def _busy_message(self, exc: LockConflict) -> str:
        holder = self.store.get_operation(exc.op_id)
        what = exc.key.split("/", 1)[-1]
        if holder is None:
            return f"{what} is busy with operation {exc.op_id}"
        return (
            f"{what} is busy: operation {holder.id} ({holder.kind.value}, requested by "
            f"{holder.requested_by}, {holder.state.value.replace('_', ' ')}) is using it; "
            f"wait for it or cancel it with `ops cancel {holder.id}`"
        )


def _lock_keys(op: Operation) -> list[str]:
    cluster = op.target.cluster
    # Nodes are locked too, so a manual drain of a node cannot race a zero-scale of its pool.
    keys = [f"pool:{cluster}/{p.pool}" for p in op.plan.pools]
    keys += [f"node:{cluster}/{n}" for n in op.plan.nodes]
    return sorted(keys)


def _request_of(op: Operation) -> OperationRequest:
    # pre_approved is deliberately not carried over: a superseded plan asks for approval again.
    return OperationRequest(
        kind=op.kind,
        target=op.target,
        requested_by=op.requested_by,
        channel=op.channel,
        thread_ts=op.thread_ts,
    )

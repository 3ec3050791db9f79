"""An in-memory OperationsPort for the Slack tests: the engine's policy rules, no cluster.

It keeps the real engine's contract where the bot depends on it (Outcome replies, state events on
decisions, audit actions "request" / "approve" / "reject" / "cancel" in `history`) and adds test
controls: `gate` (close it and `request` blocks until the test opens it, to prove ack-first),
`emit()` to push progress events, `fail_next` to make a call raise. The end-to-end test against
the real engine and control plane lives with the engine's tests.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import policy
from engine.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpKind,
    OpState,
    Outcome,
    PoolChange,
    ProgressEvent,
)
from engine.operations import ClusterStatus, HistoryEntry, UserError
from engine.pools.base import Pool

OPERATOR, APPROVER, APPROVER_2, VIEWER, ADMIN = "U0OPS", "U0APP", "U0APP2", "U0VIEW", "U0ADMIN"

POLICIES = {
    "dev-eu": policy.ClusterPolicy(
        cluster="dev-eu",
        users={
            OPERATOR: policy.Role.OPERATOR,
            APPROVER: policy.Role.APPROVER,
            APPROVER_2: policy.Role.APPROVER,
            VIEWER: policy.Role.VIEWER,
            ADMIN: policy.Role.ADMIN,
        },
    ),
    "prod": policy.ClusterPolicy(
        cluster="prod",
        users={
            OPERATOR: policy.Role.OPERATOR,
            APPROVER: policy.Role.APPROVER,
            APPROVER_2: policy.Role.APPROVER,
        },
        protected=True,
    ),
}

POOLS = {
    "dev-eu": {"web": ("web-1", "web-2", "web-3"), "batch": ("batch-1", "batch-2")},
    "prod": {"api": ("api-1", "api-2")},
}


@dataclass
class FakeOps:
    now: Callable[[], datetime] = lambda: datetime(2026, 3, 2, 14, 2, tzinfo=UTC)
    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    fail_next: Exception | None = None
    plan_changes_before_approval: bool = False
    """The next completing approval finds the cluster changed: superseded, re-requested."""
    ops: dict[str, Operation] = field(default_factory=dict)
    audit: dict[str, list[HistoryEntry]] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    messages: dict[str, tuple[str, str]] = field(default_factory=dict)
    listeners: list[Callable[[ProgressEvent], None]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.gate.set()

    # -- test controls ----------------------------------------------------------------------------

    def emit(self, event: ProgressEvent) -> None:
        for listener in list(self.listeners):
            listener(event)

    def progress(self, op_id: str, kind: str, text: str, *, condition: str = "", **changes: Any) -> Operation:
        """Move an operation on (state, result, step …) and emit the event the runner would."""
        with self.lock:
            op = replace(self.ops[op_id], updated_at=self.now(), **changes)
            self.ops[op_id] = op
        self.emit(
            ProgressEvent(operation=op, kind=kind, text=text, condition=condition, final=kind == "final")
        )  # type: ignore[arg-type]
        return op

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    def _audit(self, op_id: str, actor: str, action: str, detail: str = "") -> None:
        self.audit.setdefault(op_id, []).append(HistoryEntry(self.now(), actor, action, detail))

    # -- OperationsPort ---------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        return sorted(POLICIES)

    def role(self, cluster: str, user: str, groups: Sequence[str] = ()) -> policy.Role | None:
        if user.startswith("schedule:"):  # as the engine: schedules act as operators
            return policy.Role.OPERATOR
        return policy.role_of(POLICIES[cluster], user, groups) if cluster in POLICIES else None

    def plan(self, req: OperationRequest) -> OperationPlan:
        self._record("plan", req)
        cluster, target = req.target.cluster, req.target
        if cluster not in POOLS:
            raise UserError(f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        pools = POOLS[cluster]
        for name in target.pools:
            if name not in pools:
                raise UserError(f'pool "{name}" not found; known pools: {", ".join(sorted(pools))}')
        known_nodes = {n for nodes in pools.values() for n in nodes}
        missing = [n for n in target.nodes if n not in known_nodes]
        if missing:
            raise UserError(
                f"node(s) not found: {', '.join(missing)}; nodes: {', '.join(sorted(known_nodes))}"
            )
        chosen = target.pools or tuple(sorted(pools))
        if req.kind is OpKind.DRAIN:
            return OperationPlan(kind=req.kind, cluster=cluster, nodes=target.nodes)
        changes = []
        for name in chosen:
            nodes = pools[name]
            after = {OpKind.ZERO: 0, OpKind.WAKE: len(nodes), OpKind.SCALE: target.size or 0}[req.kind]
            before = 0 if req.kind is OpKind.WAKE else len(nodes)
            changes.append(PoolChange(name, before, after, nodes[after:] if after < before else ()))
        everything = req.kind is OpKind.ZERO and set(chosen) == set(pools)
        blockers = (
            (("shop/db-0", "PodDisruptionBudget db allows 0 disruptions"),) if req.kind is OpKind.ZERO else ()
        )
        return OperationPlan(
            kind=req.kind, cluster=cluster, pools=tuple(changes), force_phase=everything, blockers=blockers
        )

    def request(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> Outcome:
        self.entered.set()
        self.gate.wait(timeout=30)
        self._record("request", req)
        cluster = req.target.cluster
        if cluster not in POLICIES:
            return Outcome(False, f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        allowed = policy.can_request(
            POLICIES[cluster], self.role(cluster, req.requested_by, groups), req.kind
        )
        if not allowed.allowed:
            return Outcome(False, allowed.reason)
        try:
            plan = self.plan(req)
        except UserError as exc:
            return Outcome(False, str(exc))
        needed = policy.approvals_needed(POLICIES[cluster], plan, requested_by=req.requested_by)
        now = self.now()
        op = Operation(
            id=f"op-{secrets.token_hex(4)}",
            kind=req.kind,
            target=req.target,
            state=OpState.AWAITING_APPROVAL if needed else OpState.RUNNING,
            requested_by=req.requested_by,
            created_at=now,
            updated_at=now,
            plan=plan,
            channel=req.channel,
            thread_ts=req.thread_ts,
            approval_id=secrets.token_urlsafe(16) if needed else "",
            approvals_required=needed,
            expires_at=now + timedelta(minutes=30) if needed else None,
        )
        with self.lock:
            self.ops[op.id] = op
            self._audit(op.id, req.requested_by, "request", plan.summary())
        return Outcome(True, f"Operation {op.id}: {plan.summary()}", op, changed=True)

    def _by_approval(self, approval_id: str) -> Operation | None:
        return next((op for op in self.ops.values() if op.approval_id == approval_id), None)

    def _already(self, op: Operation) -> Outcome:
        who = [e for e in self.audit.get(op.id, []) if e.action in ("approve", "reject", "cancel")]
        by = f" by <@{who[-1].actor}> at {who[-1].at:%H:%M} UTC" if who else ""
        return Outcome(True, f"operation {op.id} is already {op.state.value.replace('_', ' ')}{by}", op)

    def approve(self, approval_id: str, *, by: str, groups: Sequence[str] = ()) -> Outcome:
        self._record("approve", approval_id, by)
        with self.lock:
            op = self._by_approval(approval_id)
            if op is None:
                return Outcome(False, "unknown request: it may belong to another scalebot instance")
            if op.state is not OpState.AWAITING_APPROVAL:
                return self._already(op)
            decision = policy.can_approve(
                POLICIES[op.target.cluster],
                voter=by,
                voter_role=self.role(op.target.cluster, by, groups),
                requested_by=op.requested_by,
                expires_at=op.expires_at,
                now=self.now(),
            )
            if not decision.allowed:
                return Outcome(False, decision.reason, op)
            voters = [e.actor for e in self.audit[op.id] if e.action == "approve"]
            if by in voters:
                return Outcome(True, "you have already approved this request", op)
            self._audit(op.id, by, "approve")
            voters.append(by)
            if len(voters) < op.approvals_required:
                text = f"{len(voters)} of {op.approvals_required} approvals"
                self.emit(ProgressEvent(operation=op, kind="state", text=text))
                return Outcome(True, text, op, changed=True)
            if self.plan_changes_before_approval:
                self.plan_changes_before_approval = False
                return self._supersede(op)
            op = replace(op, state=OpState.RUNNING, updated_at=self.now())
            self.ops[op.id] = op
        self.emit(
            ProgressEvent(
                operation=op, kind="state", text="Approved by " + ", ".join(f"<@{v}>" for v in voters)
            )
        )
        return Outcome(True, f"Approved; operation {op.id} is running", op, changed=True)

    def _supersede(self, op: Operation) -> Outcome:
        """As the engine does when a fresh plan's hash differs: finish this one, request again."""
        old = replace(op, state=OpState.SUPERSEDED, updated_at=self.now())
        self.ops[op.id] = old
        self._audit(op.id, "scalebot", "superseded")
        again = self.request(
            OperationRequest(kind=op.kind, target=op.target, requested_by=op.requested_by, channel=op.channel)
        )
        text = "The cluster changed since this plan was shown; a new plan needs approval"
        self.emit(ProgressEvent(operation=old, kind="final", text=text, final=True))
        return Outcome(False, f"{text} ({again.operation.id if again.operation else again.reply})", old)

    def reject(self, approval_id: str, *, by: str, groups: Sequence[str] = (), reason: str = "") -> Outcome:
        self._record("reject", approval_id, by)
        with self.lock:
            op = self._by_approval(approval_id)
            if op is None:
                return Outcome(False, "unknown request: it may belong to another scalebot instance")
            if op.state is not OpState.AWAITING_APPROVAL:
                return self._already(op)
            role = self.role(op.target.cluster, by, groups)
            if by != op.requested_by and (role is None or role < policy.Role.APPROVER):
                return Outcome(False, f"approving needs the approver role on {op.target.cluster}", op)
            self._audit(op.id, by, "reject")
            op = replace(op, state=OpState.REJECTED, updated_at=self.now())
            self.ops[op.id] = op
        self.emit(ProgressEvent(operation=op, kind="final", text=f"Rejected by <@{by}>", final=True))
        return Outcome(True, f"Rejected operation {op.id}", op, changed=True)

    def cancel(self, op_id: str, *, by: str, groups: Sequence[str] = ()) -> Outcome:
        self._record("cancel", op_id, by)
        with self.lock:
            op = self.ops.get(op_id)
            if op is None:
                return Outcome(False, f"no operation {op_id}; `ops list` shows the recent ones")
            if op.state.is_terminal:
                return Outcome(
                    False, f"operation {op_id} already finished ({op.state.value}); nothing to cancel"
                )
            self._audit(op.id, by, "cancel")
            op = replace(op, state=OpState.CANCELLED, updated_at=self.now())
            self.ops[op.id] = op
        self.emit(ProgressEvent(operation=op, kind="final", text=f"Cancelled by <@{by}>", final=True))
        return Outcome(True, f"Cancelled operation {op_id}", op, changed=True)

    def get(self, op_id: str) -> Operation | None:
        return self.ops.get(op_id)

    def list_operations(
        self, *, cluster: str | None = None, active_only: bool = False, limit: int = 20
    ) -> list[Operation]:
        ops = [o for o in self.ops.values() if cluster in (None, o.target.cluster)]
        ops = [o for o in ops if not (active_only and o.state.is_terminal)]
        return sorted(ops, key=lambda o: o.created_at, reverse=True)[:limit]

    def history(self, op_id: str) -> list[HistoryEntry]:
        self._record("history", op_id)
        with self.lock:
            return list(self.audit.get(op_id, []))

    def status(self, cluster: str) -> ClusterStatus:
        self._record("status", cluster)
        if cluster not in POOLS:
            raise UserError(f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        pools = [
            Pool(name=name, provider="labels", desired=len(nodes), nodes=nodes, ready_nodes=nodes)
            for name, nodes in sorted(POOLS[cluster].items())
        ]
        running = [o for o in self.ops.values() if o.target.cluster == cluster and not o.state.is_terminal]
        return ClusterStatus(cluster=cluster, pools=pools, running=running, next_event="Fri 19:00 CET: zero")

    def cordon(
        self, cluster: str, nodes: Sequence[str], *, by: str, unschedulable: bool, groups: Sequence[str] = ()
    ) -> Outcome:
        self._record("cordon", cluster, tuple(nodes), unschedulable)
        verb = "cordoned" if unschedulable else "uncordoned"
        return Outcome(True, f"{verb}: {', '.join(nodes)}", changed=True)

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        with self.lock:
            self.messages[op_id] = (channel, ts)
            if op_id in self.ops:
                self.ops[op_id] = replace(self.ops[op_id], channel=channel, message_ts=ts)

    def subscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        self.listeners.append(listener)

    # -- for assertions ---------------------------------------------------------------------------

    def mutations(self) -> list[str]:
        """Calls that would change something (reads excluded)."""
        return [
            name for name, _ in self.calls if name in ("request", "approve", "reject", "cancel", "cordon")
        ]

    def only_op(self) -> Operation:
        assert len(self.ops) == 1, self.ops
        return next(iter(self.ops.values()))

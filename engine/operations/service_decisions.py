"""The operations service's requests and the decisions on them: `request` (plan, policy, lock, save,
audit), `approve`, `reject`, `cancel`, expiry, starting an operation once its card is shown, and
`resume` at start-up."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from engine.domain.clock import Clock
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationRequest,
    OpState,
    Outcome,
    ProgressEvent,
)
from engine.domain.reasons import AlreadyDecided, UnknownOperation
from engine.operations import policy
from engine.operations.runner import Runner
from engine.operations.service_rules import Rules, Unshown, UserError, busy_text
from engine.store.claims import ClaimHeld, LockConflict
from engine.store.ports import AuditTrail, OperationRecords, PoolLocks, Transactions

log = logging.getLogger(__name__)


class DecisionsStore(OperationRecords, PoolLocks, AuditTrail, Transactions, Protocol):
    """What the decisions write: an operation, its votes and state changes with its locks and its
    audit rows, in one transaction."""


class Decisions:
    """Requests and the decisions on them: approve, reject, cancel, expiry, start and resume."""

    def __init__(
        self,
        store: DecisionsStore,
        rules: Rules,
        runner: Runner,
        *,
        policies: Mapping[str, policy.ClusterPolicy],
        clock: Clock,
        emit: Callable[[ProgressEvent], None],
        plan: Callable[[OperationRequest], OperationPlan],
        groups_of: Callable[[str], Sequence[str]],
    ) -> None:
        """`plan`: the plan of a request (`Reads.plan`: one listing of the cluster); `emit` tells
        the service's listeners of each state change; `groups_of`: a person's user groups."""
        self.store = store
        self.rules = rules
        self.runner = runner
        self.policies = policies
        self.clock = clock
        self._emit = emit
        self._plan = plan
        self.groups_of = groups_of

    def _emit_state(self, op: Operation, text: str, *, final: bool = False) -> None:
        self._emit(ProgressEvent(operation=op, kind="final" if final else "state", text=text, final=final))

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
            self.rules.audit(by, state.value, op=new, detail=error)
        return new

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
        if cluster not in self.rules.handles:
            return Outcome(
                False, f'unknown cluster "{cluster}"; clusters: {", ".join(self.rules.clusters())}'
            )
        pol = self.policies[cluster]
        allowed = policy.can_request(pol, self.rules.role(cluster, req.requested_by, groups), req.kind)
        if allowed.allowed:
            elsewhere = self.rules.origin_refusal(
                cluster, by=req.requested_by, channel=req.channel, what="request"
            )
            if elsewhere is not None:
                return elsewhere
        if not allowed.allowed:
            self.rules.audit(req.requested_by, "refused_request", cluster=cluster, detail=allowed.reason)
            return Outcome(False, allowed.reason, reason=allowed.detail)
        try:
            op_plan = planned if planned is not None else self._plan(req)
        except UserError as exc:
            self.rules.audit(req.requested_by, "refused_request", cluster=cluster, detail=str(exc))
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
            roles = {u: self.rules.role(cluster, u, looked_up.get(u, ())) for u in req.pre_approvers}
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
                self.rules.audit(
                    req.requested_by, "request", op=op, detail=f"{req.kind.value}: {op_plan.summary()}"
                )
                if req.pre_approvers:
                    covered = "covers this run" if not needed else "does not cover this run"
                    self.rules.audit(
                        req.requested_by,
                        "pre_approval",
                        op=op,
                        detail=f"standing pre-approvers: {', '.join(standing) or 'none'}; {covered}",
                    )
        except LockConflict as exc:
            busy = self.rules.busy(exc)
            self.rules.audit(req.requested_by, "refused_request", cluster=cluster, detail=busy_text(busy))
            return Outcome(False, busy_text(busy), reason=busy)
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
        op = self._decidable(approval_id, by=by, groups=groups, channel=channel, action="approve")
        if isinstance(op, Outcome):
            return op
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
                self.rules.audit(by, "approve", op=current)
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
        roles = {u: self.rules.role(cluster, u, self._groups_now(u)) for u in self._approvers(op.approval_id)}
        roles[by] = self.rules.role(cluster, by, groups)
        initiated = (op.requested_by, *op.initiated_by)
        standing = policy.standing_pre_approvers(self.policies[cluster], roles, initiated_by=initiated)
        for voter in sorted(set(roles) - set(standing) - {by}) if note else ():
            self.rules.audit(voter, "vote_not_counted", op=op, detail="no longer an approver on " + cluster)
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
        fresh = self._plan(_request_of(op))
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
        op = self._decidable(
            approval_id, by=by, groups=groups, channel=channel, action="reject", allow_requester=True
        )
        if isinstance(op, Outcome):
            return op
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
        wrong_channel = self.rules.origin_refusal(
            op.target.cluster, by=by, channel=channel, what="cancel", op=op
        )
        if wrong_channel is not None:
            return wrong_channel
        role = self.rules.role(op.target.cluster, by, groups)
        if (
            by not in op.initiated_by
            and by != op.requested_by
            and (role is None or role < policy.Role.APPROVER)
        ):
            self.rules.audit(by, "refused_cancel", op=op, detail="not the requester nor an approver")
            return Outcome(False, "only the requester or an approver can cancel this operation")
        if op.state.is_terminal:
            self.rules.audit(by, "refused_cancel", op=op, detail=f"already {op.state.value}")
            return Outcome(False, f"operation {op_id} already finished ({op.state.value}); nothing to cancel")
        elsewhere = None if self.runner.is_running(op.id) else self.runner.held_elsewhere(op.id)
        if op.state is OpState.RUNNING and elsewhere is not None:
            # Finishing it here would race the runner that holds it (it would write over "cancelled").
            self.rules.audit(by, "refused_cancel", op=op, detail=f"being run by {elsewhere.owner}")
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
                self.rules.audit(by, "refused_cancel", op=current, detail=f"already {current.state.value}")
                return self._already_decided(current)
            self._emit_state(done, f"Cancelled by {by}", final=True)
            return Outcome(True, f"Cancelled operation {op_id}", done, changed=True)
        self.rules.audit(by, "cancel", op=op, detail="requested: the current step finishes first")
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
            self.rules.audit(
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

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        self.store.set_message(op_id, channel=channel, ts=ts)

    def resume(self, *, wait_for_claims: bool = False) -> list[str]:
        """At start-up: expire stale approvals and continue every running operation.

        Raises `engine.store.claims.ClaimHeld` (nothing started) when another live runner holds one of
        them; `wait_for_claims` (a new leader) waits for such claims to lapse instead.
        """
        self.expire_stale()
        return self.runner.resume_all(wait_for_claims=wait_for_claims)

    def _decidable(
        self,
        approval_id: str,
        *,
        by: str,
        groups: Sequence[str],
        channel: str,
        action: str,
        allow_requester: bool = False,
    ) -> Operation | Outcome:
        """The operation a click on `approval_id` decides, or the answer refusing the click: an
        unknown ID, a click from outside the request's channels, a decision no longer possible."""
        op = self.store.operation_by_approval(approval_id)
        if op is None:
            return Outcome(False, "unknown request: it may belong to another scalebot instance")
        elsewhere = self.rules.origin_refusal(op.target.cluster, by=by, channel=channel, what=action, op=op)
        if elsewhere is not None:
            return elsewhere
        early = self._check_decidable(
            op, by=by, groups=groups, action=action, allow_requester=allow_requester
        )
        return op if early is None else early

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
            self.rules.audit(by, f"refused_{action}", op=op, detail="expired")
            return Outcome(False, "this request has expired; ask for a new one", done)
        if allow_requester and by == op.requested_by:
            return None
        decision = policy.can_approve(
            self.policies[op.target.cluster],
            voter=by,
            voter_role=self.rules.role(op.target.cluster, by, groups),
            requested_by=op.requested_by,
            expires_at=op.expires_at,
            now=now,
            initiated_by=op.initiated_by,
        )
        if not decision.allowed:
            self.rules.audit(by, f"refused_{action}", op=op, detail=decision.reason)
            return Outcome(False, decision.reason, op)
        return None


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

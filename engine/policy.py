"""Who may request and approve what, per cluster.

Pure: decisions from a `ClusterPolicy`, the person's user ID and groups, and `now`. Every
refusal carries the sentence the person will read, naming what is missing.

Rules (Slack approval lessons: authorise the clicker by immutable ID, separation of duties,
N-of-M, expiry):
- roles rise viewer < operator < approver < admin; a user's role is the highest of their
  direct grant and their groups' grants;
- operators may request anything; viewers only look;
- approvals are needed for the kinds listed in `approval_required_for` (and always for a
  forced phase 2 or anything on a protected cluster), by `approvals_required` distinct
  approvers (`protected_approvals` on protected clusters);
- the requester never approves their own request unless `allow_self_approval`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine.operation import OperationPlan, OpKind


class Role(enum.IntEnum):
    VIEWER = 1
    OPERATOR = 2
    APPROVER = 3
    ADMIN = 4

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class ClusterPolicy:
    cluster: str
    users: Mapping[str, Role] = field(default_factory=dict)
    groups: Mapping[str, Role] = field(default_factory=dict)
    approval_required_for: frozenset[str] = frozenset({"zero", "scale_down", "force"})
    """Kinds that need approval: drain, scale_down, scale_up, zero, wake, force."""
    approvals_required: int = 1
    allow_self_approval: bool = False
    protected: bool = False
    protected_approvals: int = 2
    request_ttl: timedelta = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


def role_of(policy: ClusterPolicy, user: str, groups: Iterable[str] = ()) -> Role | None:
    grants = [policy.users[user]] if user in policy.users else []
    grants += [policy.groups[g] for g in groups if g in policy.groups]
    return max(grants, default=None)


def can_request(policy: ClusterPolicy, role: Role | None, kind: OpKind) -> Decision:
    if role is None:
        return Decision(False, f"you have no role on cluster {policy.cluster}; ask an admin to add you")
    if role < Role.OPERATOR:
        return Decision(False, f"{kind.value} needs the operator role on {policy.cluster}; you are a viewer")
    return Decision(True)


def approval_tags(plan: OperationPlan) -> frozenset[str]:
    """The policy vocabulary that describes a plan: what kind of change it is."""
    tags = {plan.kind.value}
    if plan.kind is OpKind.SCALE:
        down = any(p.after < p.before for p in plan.pools)
        tags.add("scale_down" if down else "scale_up")
    if plan.kind is OpKind.ZERO:
        tags.add("scale_down")
    if plan.force_phase:
        tags.add("force")
    return frozenset(tags)


def approvals_needed(
    policy: ClusterPolicy, plan: OperationPlan, *, requested_by: str, pre_approved: bool = False
) -> int:
    """0 when the plan may run at once; otherwise the number of distinct approvers needed."""
    scheduled = requested_by.startswith("schedule:")
    if scheduled and pre_approved and not policy.protected:
        return 0  # an approver pre-approved every run when creating the schedule
    if policy.protected:
        return max(policy.protected_approvals, policy.approvals_required)
    if scheduled and plan.kind is not OpKind.WAKE:
        return max(1, policy.approvals_required)  # a per-run schedule asks at every sleep
    if approval_tags(plan) & policy.approval_required_for:
        return max(1, policy.approvals_required)
    return 0


def can_approve(
    policy: ClusterPolicy,
    *,
    voter: str,
    voter_role: Role | None,
    requested_by: str,
    expires_at: datetime | None,
    now: datetime,
) -> Decision:
    if expires_at is not None and now >= expires_at:
        return Decision(False, "this request has expired; ask for a new one")
    if voter == requested_by and not policy.allow_self_approval:
        return Decision(False, "you cannot approve your own request; another approver must")
    if voter_role is None or voter_role < Role.APPROVER:
        return Decision(False, f"approving needs the approver role on {policy.cluster}")
    return Decision(True)


@dataclass(frozen=True, slots=True)
class Approvers:
    """Who may approve on a cluster: user IDs and user group IDs with the approver role or above."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


def approvers(policy: ClusterPolicy, *, besides: str = "") -> Approvers:
    """The people to ask for an approval (not `besides`, the requester, unless they may approve
    their own requests); sorted, so a card renders the same every time."""

    def approving(grants: Mapping[str, Role]) -> tuple[str, ...]:
        return tuple(sorted(k for k, role in grants.items() if role >= Role.APPROVER))

    users = approving(policy.users)
    if besides and not policy.allow_self_approval:
        users = tuple(u for u in users if u != besides)
    return Approvers(users, approving(policy.groups))

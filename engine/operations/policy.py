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
- a cluster is operated from its own channels (its `allowed_channels`, else the channels mapped
  to it), one without any never from another cluster's, and a protected one never from a DM;
- the requester never approves their own request unless `allow_self_approval`; nor does anyone
  the request is made on behalf of (a schedule's creator, whoever clicked its "Run now");
- a schedule is pre-approved by the same quorum as each run would need (`approvals_required`
  distinct approvers, not its creator unless `allow_self_approval`); the pre-approvers' roles
  are checked again at every run, and a protected cluster always asks at every run; so are the
  stored votes of a request when its quorum is decided (a demoted approver's vote stops counting);
- a scale-up past a pool's ceiling (its maximum where the provider knows one, else
  `scale_up_ceiling` times its current size) needs approval like a scale-down.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine.domain.operation import OperationPlan, OpKind, PoolChange
from engine.domain.reasons import ChannelNotAllowed, Reason
from engine.domain.settings import ConsolidationPolicy

EVICTOR = "policy:evictor"
"""Who requests Evictor mode's consolidations (engine.operations.unattended.Evictor)."""


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
    """Kinds that need approval: drain, scale_down, scale_up, zero, wake, force, consolidate
    (a consolidation is a scale-down too)."""
    approvals_required: int = 1
    allow_self_approval: bool = False
    protected: bool = False
    protected_approvals: int = 2
    request_ttl: timedelta = timedelta(minutes=30)
    channels: frozenset[str] = frozenset()
    """Slack channels the cluster may be operated from: its `allowed_channels`, else the channels
    mapped to it (`bot.config.settings.cluster_policies`); empty: it has no channel of its own."""
    other_channels: frozenset[str] = frozenset()
    """The channels of the other clusters: a cluster without channels of its own is still never
    operated from them (a channel mapped to dev-eu does not reach prod)."""
    consolidation: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    drain_one_at_a_time: bool = False
    """Default for scale-downs and zero-scales: drain non-empty nodes one at a time (empty ones
    together), as cluster-autoscaler does; a request's --one-at-a-time / --all-at-once wins."""
    scale_up_ceiling: float = 2.0
    """A scale-up to more than this many times a pool's current size needs approval, where the pool
    system knows no maximum of its own (so a typo cannot buy a thousand nodes unasked)."""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    detail: Reason | None = None
    """The reason as data, when it names channels or people (the bot renders them)."""


def role_of(policy: ClusterPolicy, user: str, groups: Iterable[str] = ()) -> Role | None:
    grants = [policy.users[user]] if user in policy.users else []
    grants += [policy.groups[g] for g in groups if g in policy.groups]
    return max(grants, default=None)


def channel_allowed(policy: ClusterPolicy, channel: str) -> Decision:
    """Where a Slack request or click may act on the cluster: its own channels (`channels`) when it
    has some, else any channel but another cluster's. A protected cluster is never operated from a
    direct message (D…): its changes happen where the team sees them."""
    if policy.protected and channel.startswith("D"):
        return Decision(
            False, f"{policy.cluster} is protected: operate it from its channel, not a direct message"
        )
    if policy.channels and channel not in policy.channels:
        allowed = tuple(sorted(policy.channels))
        return Decision(
            False,
            f"{policy.cluster} is operated only from channel(s) {', '.join(allowed)}",
            ChannelNotAllowed(policy.cluster, allowed),
        )
    if not policy.channels and channel in policy.other_channels:
        return Decision(
            False,
            f"{policy.cluster} is not operated from another cluster's channel; give it channels of its "
            "own (default_channels or allowed_channels)",
        )
    return Decision(True)


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
    if plan.kind in (OpKind.ZERO, OpKind.CONSOLIDATE):
        tags.add("scale_down")
    if plan.force_phase or plan.forcing:  # any forcing option (--force, phase 2) is a forced run
        tags.add("force")
    return frozenset(tags)


def ceiling_of(policy: ClusterPolicy, change: PoolChange) -> int:
    """The largest size a scale-up may reach without approval: the pool's own maximum where its
    provider knows one, else `scale_up_ceiling` times its current size."""
    if change.max_size is not None:
        return change.max_size
    return int(change.before * policy.scale_up_ceiling)


def beyond_ceiling(policy: ClusterPolicy, plan: OperationPlan) -> tuple[str, ...]:
    """Why a scale-up needs approval: one sentence per pool it takes past its ceiling."""
    if plan.kind is not OpKind.SCALE:
        return ()
    return tuple(
        f"pool {c.pool}: {c.before} → {c.after} is beyond its ceiling of {ceiling_of(policy, c)} "
        + (
            "(its maximum size)"
            if c.max_size is not None
            else f"({policy.scale_up_ceiling:g} times its current size)"
        )
        + ", so it needs approval"
        for c in plan.pools
        if c.after > c.before and c.after > ceiling_of(policy, c)
    )


def approvals_needed(policy: ClusterPolicy, plan: OperationPlan, *, requested_by: str) -> int:
    """0 when the plan may run at once; otherwise the number of distinct approvers needed."""
    scheduled = requested_by.startswith("schedule:")
    if policy.protected:
        return max(policy.protected_approvals, policy.approvals_required)
    if requested_by == EVICTOR and plan.kind is OpKind.CONSOLIDATE:
        # Evictor mode proposes; it runs unasked only where the cluster's config says so.
        return 0 if policy.consolidation.evictor_auto_approve else max(1, policy.approvals_required)
    if scheduled and plan.kind is not OpKind.WAKE:
        return max(1, policy.approvals_required)  # a per-run schedule asks at every sleep
    if approval_tags(plan) & policy.approval_required_for:
        return max(1, policy.approvals_required)
    if beyond_ceiling(policy, plan):
        return max(1, policy.approvals_required)
    return 0


def standing_pre_approvers(
    policy: ClusterPolicy, roles: Mapping[str, Role | None], *, initiated_by: Iterable[str]
) -> list[str]:
    """The pre-approvers of a schedule who may still approve its runs today: approver role now, and
    not among the people behind the request unless self-approval is allowed."""
    barred = set() if policy.allow_self_approval else set(initiated_by)
    return sorted(
        u for u, role in roles.items() if role is not None and role >= Role.APPROVER and u not in barred
    )


def pre_approval_covers(policy: ClusterPolicy, needed: int, standing: Iterable[str]) -> bool:
    """True when a schedule's standing pre-approvals replace the per-run approvals."""
    return needed > 0 and not policy.protected and len(set(standing)) >= needed


def can_pre_approve(
    policy: ClusterPolicy, *, voter: str, voter_role: Role | None, created_by: str
) -> Decision:
    if voter == created_by and not policy.allow_self_approval:
        return Decision(False, "you cannot pre-approve a schedule you created; another approver must")
    if voter_role is None or voter_role < Role.APPROVER:
        return Decision(False, f"pre-approving a schedule needs the approver role on {policy.cluster}")
    return Decision(True)


def can_approve(
    policy: ClusterPolicy,
    *,
    voter: str,
    voter_role: Role | None,
    requested_by: str,
    expires_at: datetime | None,
    now: datetime,
    initiated_by: Iterable[str] = (),
) -> Decision:
    if expires_at is not None and now >= expires_at:
        return Decision(False, "this request has expired; ask for a new one")
    if voter == requested_by and not policy.allow_self_approval:
        return Decision(False, "you cannot approve your own request; another approver must")
    if voter in set(initiated_by) and not policy.allow_self_approval:
        return Decision(False, "you cannot approve a run you initiated; another approver must")
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

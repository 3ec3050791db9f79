"""What every part of the operations service (`engine.operations.service.Operations`) shares: the
values it answers with, and `Rules`, the checks and records each part makes (roles, the channel
rule, the plan rate limit, the audit, refusals, busy locks), given to each part it serves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.errors import Category, ScalebotError
from engine.domain.operation import (
    Operation,
    Outcome,
)
from engine.domain.reasons import Busy, Reason
from engine.domain.settings import ScaleDownRules
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.planning import advice, consolidation
from engine.pools.base import Pool, ProviderSchedule
from engine.store.claims import LockConflict
from engine.store.ports import AuditTrail

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


class RulesStore(AuditTrail, Protocol):
    """What the rules read and write of the store: the audit, and the operation holding a lock."""

    def get_operation(self, op_id: str) -> Operation | None: ...


class Rules:
    """What every part of the service checks and records: roles, the channel rule, the viewer rule and
    the plan rate limit of reads, the audit of actions and refusals, and who holds a busy lock."""

    def __init__(
        self,
        handles: Mapping[str, ClusterHandle],
        policies: Mapping[str, policy.ClusterPolicy],
        clock: Clock,
        store: RulesStore,
    ) -> None:
        """`handles` and `policies` are the service's own (one policy per cluster), read as they
        are at each call."""
        self.handles = handles
        self.policies = policies
        self.clock = clock
        self.store = store
        self.plan_burst = 5
        self.plan_window = timedelta(minutes=1)
        self._plans: dict[str, list[datetime]] = {}
        self._plans_lock = threading.Lock()

    def clusters(self) -> list[str]:
        return sorted(self.handles)

    def handle(self, cluster: str) -> ClusterHandle:
        """The cluster's handle; UserError naming the clusters when there is none."""
        if cluster not in self.handles:
            raise UserError(f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}')
        return self.handles[cluster]

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
        self.audit(by, f"refused_{what}", op=op, cluster=cluster, detail=where.reason)
        return Outcome(False, where.reason, op, reason=where.detail)

    def may_view(self, cluster: str, *, by: str, groups: Sequence[str] = (), what: str = "status") -> str:
        """ "" when `by` may read `cluster` (any role there); otherwise the refusal, audited."""
        if cluster not in self.handles:
            return f'unknown cluster "{cluster}"; clusters: {", ".join(self.clusters())}'
        if self.role(cluster, by, groups) is not None:
            return ""
        return self.refuse(by, what, cluster, f"{what} needs at least the viewer role on {cluster}").reply

    def allow_read(self, cluster: str, *, by: str, groups: Sequence[str], what: str) -> None:
        """A read a person asks for (a plan, advice, a preview): any role on `cluster`, and at most
        `plan_burst` per `plan_window`, since each lists the cluster. Raises UserError with the
        audited refusal."""
        refusal = self.may_view(cluster, by=by, groups=groups, what=what)
        if refusal:
            raise UserError(refusal)
        self._limit_plans(by, cluster)

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

    def audit(
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
        self.audit(by, f"refused_{what}", cluster=cluster, detail=reason)
        return Outcome(False, reason, reason=detail)

    def busy(self, exc: LockConflict) -> Busy:
        """Who holds the lock a request or an action by hand met."""
        holder = self.store.get_operation(exc.op_id)
        what = exc.key.split("/", 1)[-1]
        if holder is None:
            return Busy(what, exc.op_id)
        return Busy(
            what, holder.id, holder.kind.value, holder.requested_by, holder.state.value.replace("_", " ")
        )


def busy_text(busy: Busy) -> str:
    if not busy.state:
        return f"{busy.what} is busy with operation {busy.op_id}"
    return (
        f"{busy.what} is busy: operation {busy.op_id} ({busy.kind}, requested by {busy.requested_by}, "
        f"{busy.state}) is using it; wait for it or cancel it"
    )


def _from_slack(actor: str) -> bool:
    """A person in Slack (not the CLI, not a schedule, whose channel was checked when it was saved)."""
    return not actor.startswith(("cli:", "schedule:", "policy:"))

"""The one port the bot drives: the engine's operations service, as a Protocol.

Listeners, the progress reporter and the tests see only `OperationsPort`; `bot.slack.app` receives the
real `engine.operations.service.Operations` (the Slack tests too, over an in-memory cluster). The value types
come from the engine's pure modules; `UserError`, `HistoryEntry` and `ClusterStatus` are the
engine service's own small values (and `ProviderSchedules`), re-exported here so bot modules import one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from engine.domain.operation import Operation, OperationPlan, OperationRequest, Outcome, ProgressEvent
from engine.operations.policy import Approvers, Role
from engine.operations.service import (
    Advice,
    ClusterStatus,
    HistoryEntry,
    ProviderSchedules,
    Unshown,
    UserError,
)
from engine.operations.service_nodes import Cordoned

__all__ = [
    "Advice",
    "ClusterStatus",
    "HistoryEntry",
    "OperationsPort",
    "ProviderSchedules",
    "Unshown",
    "UserError",
]


class OperationsPort(Protocol):
    """What the bot may ask of the engine. Every call is short except `request`, `plan` and
    `status`, which take a cluster snapshot and therefore run off Bolt's listener threads."""

    def request(
        self, req: OperationRequest, *, groups: Sequence[str] = (), start_when_shown: bool = False
    ) -> Outcome: ...

    def plan(self, req: OperationRequest) -> OperationPlan:
        """Raises UserError naming the unknown cluster, pool or node and the valid names."""
        ...

    def preview(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> OperationPlan:
        """`plan` asked by a person: viewer role and a per-user rate limit; raises UserError."""
        ...

    def may_view(self, cluster: str, *, by: str, groups: Sequence[str] = (), what: str = "status") -> str:
        """ "" when `by` may read `cluster`; otherwise the refusal (audited)."""
        ...

    def visible_clusters(self, by: str, groups: Sequence[str] = ()) -> list[str]: ...

    def advise(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> Advice:
        """Scale-up advice and underused nodes (viewer role, rate-limited like `preview`)."""
        ...

    def approve(
        self, approval_id: str, *, by: str, groups: Sequence[str] = (), channel: str = ""
    ) -> Outcome: ...

    def reject(
        self, approval_id: str, *, by: str, groups: Sequence[str] = (), reason: str = "", channel: str = ""
    ) -> Outcome: ...

    def cancel(self, op_id: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> Outcome: ...

    def origin_refusal(
        self, cluster: str, *, by: str, channel: str, what: str, op: Operation | None = None
    ) -> Outcome | None:
        """The channel rule shared by typed commands and clicks: None, or the audited refusal."""
        ...

    def get(self, op_id: str) -> Operation | None: ...

    def list_operations(
        self, *, cluster: str | None = None, active_only: bool = False, limit: int = 20
    ) -> list[Operation]: ...

    def history(self, op_id: str) -> list[HistoryEntry]: ...

    def status(self, cluster: str) -> ClusterStatus: ...

    def provider_schedules(self, cluster: str) -> ProviderSchedules | None:
        """The schedules `cluster`'s pool system keeps itself (a Gardener Shoot's hibernation);
        None when it keeps none. Reads the cluster: off Bolt's listener threads."""
        ...

    def clusters(self) -> list[str]: ...

    def role(self, cluster: str, user: str, groups: Sequence[str] = ()) -> Role | None: ...

    def approvers(self, cluster: str, *, besides: str = "") -> Approvers:
        """Users and user groups who may approve on `cluster`, for the card to mention."""
        ...

    def cordon(
        self,
        cluster: str,
        nodes: Sequence[str],
        *,
        by: str,
        unschedulable: bool,
        groups: Sequence[str] = (),
        channel: str = "",
    ) -> Cordoned: ...

    def refuse(self, by: str, what: str, cluster: str, reason: str) -> Outcome:
        """Audit a refusal decided outside the engine (a request from another workspace)."""
        ...

    def start_shown(self, op_id: str) -> bool:
        """Start an operation held until its card is in the channel."""
        ...

    def cancel_unshown(self, op_id: str, reason: Unshown) -> Outcome:
        """The system cancels a request whose card Slack refused to post (nothing started)."""
        ...

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        """Remember where an operation's card / progress message lives (for restarts)."""
        ...

    def subscribe(self, listener: Callable[[ProgressEvent], None]) -> None: ...


if TYPE_CHECKING:
    from engine.operations.service import Operations

    def _the_engine_fits(ops: Operations) -> OperationsPort:
        """mypy proves here that the real service satisfies the port."""
        return ops

"""The application service shared by the Slack bot, the scheduler and the CLI.

Every way into scalebot ends here: `request` (plan, policy, lock, save, audit), `approve`,
`reject`, `cancel`, and read-only views. Each call returns an `Outcome` whose `reply` is the
sentence to show the person; refusals change nothing except an audit row.

Who is who: Slack users by their immutable IDs (`U…`); `cli:<login>` is someone holding the
cluster's kubeconfig at a terminal (acts as admin, no approval); `schedule:<name>` is a
schedule, which goes through exactly the same path as a human request.

`Operations` is a facade over collaborating parts, each given its collaborators (and the narrow
ports of the store it uses, `engine.store.ports`) in its constructor, none calling another through
`self`:

    service_rules      Rules: roles, the channel rule, the viewer rule and plan rate limit of reads,
                       the audit of actions and refusals, busy locks (every other part is given it)
    service_reads      Reads: views, plans, snapshots, advice (the runner is told of a plan's pods)
    service_decisions  Decisions: requests, approvals, rejections, cancels, expiry, start and
                       resume (given `Reads.plan` to plan with, the runner to start and cancel)
    service_nodes      NodeActions: cordon, the CLI's kubectl-style drain with its preview

Every caller holds one `Operations`, so a rule added to a part holds for every front door (Slack,
the console, the CLI, schedules); the values it answers with are `service_rules`'s and
`service_nodes`'s, and are importable from here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from engine.domain import force_scope
from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.model import NodeInfo
from engine.domain.operation import (
    DrainProgress,
    Operation,
    OperationPlan,
    OperationRequest,
    Outcome,
    ProgressEvent,
)
from engine.domain.reasons import Reason
from engine.domain.settings import ConsolidationSettings, DrainSettings, RunnerSettings
from engine.operations import policy
from engine.operations.observers import ProgressListeners
from engine.operations.runner import ClusterHandle, Runner
from engine.operations.service_decisions import Decisions
from engine.operations.service_nodes import (
    Cordoned,
    DrainFlags,
    DrainOutcome,
    DrainPreview,
    DrainReport,
    DryRunLine,
    NodeActions,
)
from engine.operations.service_reads import Reads, scheduling_snapshot
from engine.operations.service_rules import (
    Advice,
    ClusterStatus,
    HistoryEntry,
    ProviderSchedules,
    Rules,
    Unshown,
    UserError,
)
from engine.planning import advice, consolidation
from engine.planning import preflight as planning
from engine.store.database import Store

__all__ = [
    "Advice",
    "ClusterStatus",
    "HistoryEntry",
    "Operations",
    "ProviderSchedules",
    "Unshown",
    "UserError",
    "new_operations",
    "scheduling_snapshot",
]


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
    """The operations service: the front door over its parts (see the module docstring). Each
    method is the part's; the attributes are what the callers read (the store, the runner, the
    clusters' handles and policies, the clock)."""

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
        """One policy per cluster, shared by every part (a change here holds for all of them)."""
        runner.scale_down = {name: pol.consolidation.rules for name, pol in self.policies.items()}
        self._listeners = listeners
        self._clock = clock
        self.rules = Rules(self.handles, self.policies, clock, store)
        self.reads = Reads(
            store, self.rules, runner, policies=self.policies, clock=clock, next_event=next_event
        )
        self.decisions = Decisions(
            store,
            self.rules,
            runner,
            policies=self.policies,
            clock=clock,
            emit=listeners.emit,
            plan=self.reads.plan,
            groups_of=groups_of or (lambda user: ()),
        )
        self.nodes = NodeActions(store, self.rules, policies=self.policies, clock=clock)

    # -- what the callers set and read ------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        """Every part reads the new clock from its next call on."""
        self._clock = clock
        for part in (self.rules, self.reads, self.decisions, self.nodes):
            part.clock = clock

    @property
    def groups_of(self) -> Callable[[str], Sequence[str]]:
        """A person's user groups (Slack's), looked up for roles checked without a click from them."""
        return self.decisions.groups_of

    @groups_of.setter
    def groups_of(self, groups_of: Callable[[str], Sequence[str]]) -> None:
        self.decisions.groups_of = groups_of

    @property
    def plan_burst(self) -> int:
        """How many plans a person may ask for per `plan_window` (each lists the whole cluster)."""
        return self.rules.plan_burst

    @property
    def plan_window(self) -> timedelta:
        return self.rules.plan_window

    # -- progress ---------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        self._listeners.subscribe(listener)

    def unsubscribe(self, listener: Callable[[ProgressEvent], None]) -> None:
        self._listeners.unsubscribe(listener)

    # -- rules (service_rules) --------------------------------------------------------------------

    def clusters(self) -> list[str]:
        return self.rules.clusters()

    def role(self, cluster: str, user: str, groups: Sequence[str] = ()) -> policy.Role | None:
        return self.rules.role(cluster, user, groups)

    def approvers(self, cluster: str, *, besides: str = "") -> policy.Approvers:
        return self.rules.approvers(cluster, besides=besides)

    def origin_refusal(
        self, cluster: str, *, by: str, channel: str, what: str, op: Operation | None = None
    ) -> Outcome | None:
        return self.rules.origin_refusal(cluster, by=by, channel=channel, what=what, op=op)

    def may_view(self, cluster: str, *, by: str, groups: Sequence[str] = (), what: str = "status") -> str:
        return self.rules.may_view(cluster, by=by, groups=groups, what=what)

    def refuse(self, by: str, what: str, cluster: str, reason: str, detail: Reason | None = None) -> Outcome:
        return self.rules.refuse(by, what, cluster, reason, detail)

    # -- decisions (service_decisions) ------------------------------------------------------------

    def request(
        self,
        req: OperationRequest,
        *,
        groups: Sequence[str] = (),
        planned: OperationPlan | None = None,
        pre_approver_groups: Mapping[str, Sequence[str]] | None = None,
        start_when_shown: bool = False,
    ) -> Outcome:
        return self.decisions.request(
            req,
            groups=groups,
            planned=planned,
            pre_approver_groups=pre_approver_groups,
            start_when_shown=start_when_shown,
        )

    def approve(self, approval_id: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> Outcome:
        return self.decisions.approve(approval_id, by=by, groups=groups, channel=channel)

    def pre_approver_groups(self, req: OperationRequest) -> dict[str, tuple[str, ...]]:
        return self.decisions.pre_approver_groups(req)

    def reject(
        self, approval_id: str, *, by: str, groups: Sequence[str] = (), reason: str = "", channel: str = ""
    ) -> Outcome:
        return self.decisions.reject(approval_id, by=by, groups=groups, reason=reason, channel=channel)

    def cancel(self, op_id: str, *, by: str, groups: Sequence[str] = (), channel: str = "") -> Outcome:
        return self.decisions.cancel(op_id, by=by, groups=groups, channel=channel)

    def start_shown(self, op_id: str) -> bool:
        return self.decisions.start_shown(op_id)

    def cancel_unshown(self, op_id: str, reason: Unshown) -> Outcome:
        return self.decisions.cancel_unshown(op_id, reason)

    def expire_stale(self) -> list[Operation]:
        return self.decisions.expire_stale()

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None:
        self.decisions.set_message(op_id, channel=channel, ts=ts)

    def resume(self, *, wait_for_claims: bool = False) -> list[str]:
        return self.decisions.resume(wait_for_claims=wait_for_claims)

    # -- nodes by hand (service_nodes) ------------------------------------------------------------

    def cordon(
        self,
        cluster: str,
        nodes: Sequence[str],
        *,
        by: str,
        unschedulable: bool,
        groups: Sequence[str] = (),
        channel: str = "",
    ) -> Cordoned:
        return self.nodes.cordon(
            cluster, nodes, by=by, unschedulable=unschedulable, groups=groups, channel=channel
        )

    def select_nodes(
        self, cluster: str, names: Sequence[str], selector: str | None, *, by: str, groups: Sequence[str] = ()
    ) -> list[NodeInfo]:
        return self.nodes.select_nodes(cluster, names, selector, by=by, groups=groups)

    def drain_preview(
        self,
        cluster: str,
        nodes: Sequence[NodeInfo],
        flags: DrainFlags,
        *,
        by: str,
        groups: Sequence[str] = (),
    ) -> DrainPreview:
        return self.nodes.drain_preview(cluster, nodes, flags, by=by, groups=groups)

    def drain_server_dry_run(
        self,
        cluster: str,
        nodes: Sequence[NodeInfo],
        flags: DrainFlags,
        *,
        by: str,
        groups: Sequence[str] = (),
    ) -> list[DryRunLine]:
        return self.nodes.drain_server_dry_run(cluster, nodes, flags, by=by, groups=groups)

    def drain_nodes(
        self,
        cluster: str,
        nodes: Sequence[str],
        flags: DrainFlags,
        settings: DrainSettings,
        *,
        by: str,
        groups: Sequence[str] = (),
        approved: force_scope.ForceScope | None = None,
        on_report: Callable[[DrainReport], None] | None = None,
        on_progress: Callable[[DrainProgress, DrainReport], None] | None = None,
        cancel: threading.Event | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> DrainOutcome:
        return self.nodes.drain_nodes(
            cluster,
            nodes,
            flags,
            settings,
            by=by,
            groups=groups,
            approved=approved,
            on_report=on_report,
            on_progress=on_progress,
            cancel=cancel,
            on_start=on_start,
        )

    # -- reads (service_reads) --------------------------------------------------------------------

    def get(self, op_id: str) -> Operation | None:
        return self.store.get_operation(op_id)

    def list_operations(
        self, *, cluster: str | None = None, active_only: bool = False, limit: int = 20
    ) -> list[Operation]:
        return self.reads.list_operations(cluster=cluster, active_only=active_only, limit=limit)

    def history(self, op_id: str) -> list[HistoryEntry]:
        return self.reads.history(op_id)

    def status(self, cluster: str) -> ClusterStatus:
        return self.reads.status(cluster)

    def provider_schedules(self, cluster: str) -> ProviderSchedules | None:
        return self.reads.provider_schedules(cluster)

    def plan(self, req: OperationRequest) -> OperationPlan:
        return self.reads.plan(req)

    def snapshot(self, handle: ClusterHandle, *, with_workloads: bool = False) -> planning.ClusterSnapshot:
        return self.reads.snapshot(handle, with_workloads=with_workloads)

    def visible_clusters(self, by: str, groups: Sequence[str] = ()) -> list[str]:
        return self.reads.visible_clusters(by, groups)

    def preview(self, req: OperationRequest, *, groups: Sequence[str] = ()) -> OperationPlan:
        return self.reads.preview(req, groups=groups)

    def advise(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> Advice:
        return self.reads.advise(cluster, by=by, groups=groups)

    def consolidation_preview(
        self, cluster: str, settings: ConsolidationSettings, *, by: str, groups: Sequence[str] = ()
    ) -> consolidation.ConsolidationPlan:
        return self.reads.consolidation_preview(cluster, settings, by=by, groups=groups)

    def scale_up_advice(self, cluster: str, *, by: str, groups: Sequence[str] = ()) -> advice.ScaleUpAdvice:
        return self.reads.scale_up_advice(cluster, by=by, groups=groups)

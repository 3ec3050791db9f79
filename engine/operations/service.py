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

The facade builds them and hands out their public methods as its own (bound in `__init__`, so each
signature is written once, in its part). Every caller holds one `Operations`, so a rule added to a
part holds for every front door (Slack, the console, the CLI, schedules); the values it answers
with are `service_rules`'s and `service_nodes`'s, and are importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.settings import RunnerSettings
from engine.operations import policy
from engine.operations.observers import ProgressListeners
from engine.operations.runner import ClusterHandle, Runner
from engine.operations.service_decisions import Decisions
from engine.operations.service_nodes import NodeActions
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
    """The operations service: its parts wired together, their public methods as one object (see
    the module docstring); the attributes are what the callers read (the store, the runner, the
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
        self._clock = clock
        self.rules = Rules(self.handles, self.policies, clock, store)
        self.reads = Reads(
            store, self.rules, runner.offer_pods, policies=self.policies, clock=clock, next_event=next_event
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

        # Rules every part checks (roles, the channel rule, refusals).
        self.clusters = self.rules.clusters
        self.role = self.rules.role
        self.approvers = self.rules.approvers
        self.origin_refusal = self.rules.origin_refusal
        self.may_view = self.rules.may_view
        self.refuse = self.rules.refuse
        # Requests and the decisions on them.
        self.request = self.decisions.request
        self.approve = self.decisions.approve
        self.pre_approver_groups = self.decisions.pre_approver_groups
        self.reject = self.decisions.reject
        self.cancel = self.decisions.cancel
        self.start_shown = self.decisions.start_shown
        self.cancel_unshown = self.decisions.cancel_unshown
        self.expire_stale = self.decisions.expire_stale
        self.set_message = self.decisions.set_message
        self.resume = self.decisions.resume
        # Nodes by hand.
        self.cordon = self.nodes.cordon
        self.select_nodes = self.nodes.select_nodes
        self.drain_preview = self.nodes.drain_preview
        self.drain_server_dry_run = self.nodes.drain_server_dry_run
        self.drain_nodes = self.nodes.drain_nodes
        # Reads.
        self.get = self.reads.get
        self.list_operations = self.reads.list_operations
        self.history = self.reads.history
        self.status = self.reads.status
        self.provider_schedules = self.reads.provider_schedules
        self.plan = self.reads.plan
        self.snapshot = self.reads.snapshot
        self.visible_clusters = self.reads.visible_clusters
        self.preview = self.reads.preview
        self.advise = self.reads.advise
        self.consolidation_preview = self.reads.consolidation_preview
        self.scale_up_advice = self.reads.scale_up_advice
        # Progress.
        self.subscribe = listeners.subscribe
        self.unsubscribe = listeners.unsubscribe

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

"""The application service shared by the Slack bot, the scheduler and the CLI.

Every way into scalebot ends here: `request` (plan, policy, lock, save, audit), `approve`,
`reject`, `cancel`, and read-only views. Each call returns an `Outcome` whose `reply` is the
sentence to show the person; refusals change nothing except an audit row.

Who is who: Slack users by their immutable IDs (`U…`); `cli:<login>` is someone holding the
cluster's kubeconfig at a terminal (acts as admin, no approval); `schedule:<name>` is a
schedule, which goes through exactly the same path as a human request.

`Operations` stays one class, composed of one mixin per concern over
`engine.operations.service_base.OperationsBase` (the shared state, roles, the channel rule, the plan
rate limit, the audit, refusals and final states): `service_decisions` (requests, approvals,
rejections, cancels, expiry, start and resume), `service_nodes` (what a person does to nodes outside
an operation: cordon, and the CLI's kubectl-style drain with its preview) and `service_reads` (views,
plans, snapshots, advice). As in `engine.store` and `engine.schedules`, every caller holds one
`Operations`, so a rule added to the service holds for every front door (Slack, the console, the
CLI, schedules); the values it answers with are `service_base`'s and are importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.domain.settings import RunnerSettings
from engine.operations import policy
from engine.operations.observers import ProgressListeners
from engine.operations.runner import ClusterHandle, Runner
from engine.operations.service_base import (
    Advice,
    ClusterStatus,
    HistoryEntry,
    OperationsBase,
    ProviderSchedules,
    Unshown,
    UserError,
)
from engine.operations.service_decisions import Decisions
from engine.operations.service_nodes import NodeActions
from engine.operations.service_reads import Reads, scheduling_snapshot
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


class Operations(Decisions, NodeActions, Reads, OperationsBase):
    """The operations service: one class composed of one mixin per concern (see the module docstring)."""

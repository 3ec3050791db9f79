"""What a step is given and what it returns: the runner's public face to its steps.

A step is `Step`: a function of a `StepContext`, the operation as persisted and the cluster (its
ports fenced by the runner's claim), returning a `StepResult` the runner persists before anything
else happens. `StepContext` is all a step may reach of the runner, and
`engine.operations.runner.Runner` implements it; never the runner's workers, claims or locks.

Each step declares the part of it that it uses, so it is given nothing else: every step has the
`Basics` (the clock, the settings, `emit`); `WithSleepRecords` adds what a sleep keeps for its wake
(`engine.store.ports.SleepRecords`), `WithAuditTrail` the audit (phase 2's write-ahead rows),
`WithPodFeed` the operation's pod feed, `WithEvictions` the cluster's eviction executors and gate,
`WithScaleDownRules` each cluster's cluster-autoscaler rules. No step reaches the whole `Store`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol

from engine.domain.clock import Clock
from engine.domain.operation import (
    Operation,
    OperationProgress,
    OperationSummary,
    OpState,
    ProgressEvent,
    ProgressKind,
)
from engine.domain.settings import RunnerSettings, ScaleDownRules
from engine.domain.wake_waves import WakeWaves
from engine.drain.concurrency import AdaptiveGate
from engine.drain.pod_feed import PodFeed
from engine.drain.report import Style as ReportStyle
from engine.kube import events as kube_events
from engine.kube.api import KubeApi
from engine.operations.flows import Outcome
from engine.pools.base import PoolProvider, StopsCluster
from engine.store.ports import AuditTrail, SleepRecords
from engine.workloads import WorkloadScaler


@dataclass(frozen=True, slots=True)
class ClusterHandle:
    name: str
    api: KubeApi
    pools: PoolProvider
    workloads: WorkloadScaler | None = None
    """Puts Deployments, StatefulSets, CronJobs and KEDA ScaledObjects to sleep; None if not configured."""
    events: kube_events.Recorder = field(default_factory=kube_events.NullRecorder)
    """Kubernetes Events on the objects scalebot changes in this cluster (so `kubectl describe` there
    shows what happened); written through this cluster's own API server."""
    drain_report: ReportStyle = "current"
    """Layout of the drain reports: Cluster API's per-Pod condition message (v1.9+), or "legacy"."""
    wake_waves: WakeWaves = field(default_factory=WakeWaves)
    """The order pools wake in (`engine.domain.wake_waves`); empty: every pool at once."""


@dataclass(slots=True)
class StepResult:
    then: Outcome | None = None
    """How the step ended, for the flow's table (`engine.operations.flows`): NEXT, a named outcome, or None to
    run the same step again (after `wait`)."""
    progress: OperationProgress | None = None
    """The operation's progress from now on (built from the one the step read); None: unchanged."""
    wait: float = 0.0
    state: OpState | None = None
    events: list[tuple[ProgressKind, str, str]] = field(default_factory=list)
    """(kind, text, condition message) to emit once the result is persisted."""
    summary: OperationSummary | None = None
    error: str = ""


class Basics(Protocol):
    """What every step is given: the clock, the settings and `emit`."""

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> RunnerSettings: ...

    @property
    def emit(self) -> Callable[[ProgressEvent], None]:
        """Sends a progress event now (a status line), before the step's result is persisted."""
        ...


class WithSleepRecords(Basics, Protocol):
    """A step that records, reads or clears what a sleep keeps for its wake."""

    @property
    def sleep_records(self) -> SleepRecords: ...


class WithAuditTrail(Basics, Protocol):
    """A step that writes audit rows of its own (phase 2's write-ahead intents) and reads them back."""

    @property
    def audit_trail(self) -> AuditTrail: ...


class WithPodFeed(Basics, Protocol):
    """A step that reads the pods of the operation's nodes (listed once, then watched)."""

    def pod_feed(self, op_id: str, api: KubeApi, nodes: Collection[str], *, cluster: str = "") -> PodFeed:
        """The operation's pod feed for these nodes (a new one when the nodes changed; it starts
        from `cluster`'s plan listing when one was offered, see `Runner.offer_pods`)."""
        ...


class WithEvictions(Basics, Protocol):
    """A step that cordons, evicts or deletes: through its cluster's executors, never its own threads."""

    def evictions(self, cluster: str) -> Executor:
        """The cluster's executor for cordons, uncordons and force-deletions (`parallel_evictions`
        in flight at most, within the process-wide cap every cluster shares)."""
        ...

    def eviction_executor(self, h: ClusterHandle) -> Executor:
        """The cluster's executor for evictions: its own admission (the eviction gate's limit),
        within the process-wide cap, never behind another cluster's evictions."""
        ...

    def eviction_gate(self, h: ClusterHandle) -> AdaptiveGate | None:
        """The cluster's adaptive eviction limit (None when the settings turn it off)."""
        ...


class WithScaleDownRules(Basics, Protocol):
    """A step that re-checks a consolidation as cluster-autoscaler would."""

    @property
    def scale_down(self) -> Mapping[str, ScaleDownRules]:
        """Each cluster's cluster-autoscaler rules, for a consolidation's re-check."""
        ...


class StepContext(WithSleepRecords, WithAuditTrail, WithPodFeed, WithEvictions, WithScaleDownRules, Protocol):
    """All a step may reach of the runner that runs it (`engine.operations.runner.Runner`): each
    step is typed with the parts of it that it uses."""


Step = Callable[[StepContext, Operation, ClusterHandle], StepResult]


def whole_cluster_stop(op: Operation, h: ClusterHandle) -> StopsCluster | None:
    """The provider, when this zero ends with its cluster's stop instead of each pool's removal:
    every pool goes to zero (phase 2 applies, not withdrawn) and the cluster stops whole (AKS)."""
    if not op.plan.force_phase or op.progress.drain.force_withdrawn:
        return None
    return h.pools if isinstance(h.pools, StopsCluster) else None


def stopped_cluster(h: ClusterHandle) -> StopsCluster | None:
    """The provider, when its cluster is stopped now (its API server is not to be reached)."""
    return h.pools if isinstance(h.pools, StopsCluster) and h.pools.cluster_stopped() else None

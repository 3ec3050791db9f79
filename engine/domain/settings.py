"""The engine's settings in one place: how a drain paces and how many evictions it keeps in flight,
how the runner times an operation's steps, and how consolidation plans and what it runs unattended.

Grouped here, as `bot.config.settings` groups the service's, so one module shows every knob the
engine has and its default. `bot.config.settings` reads the YAML into these values; each engine
package takes the ones it uses (the drain `DrainSettings`, `PassPacing` and `AimdSettings`, the
planners `ConsolidationSettings`, the operations `RunnerSettings` and `ConsolidationPolicy`).

Pure values with their defaults (the bottom layer, so every engine package may read them); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

MAX_EVICTIONS_IN_FLIGHT = 64
"""The most evictions a drain keeps in flight to one API server (the fixed limit and the adaptive
limit's ceiling, `RunnerSettings.parallel_evictions` and `max_parallel_evictions` below): the
real client (`engine.kube.client`) keeps that many connections open, and more, so an eviction
never opens one only to throw it away."""


ADAPTIVE_EVICTIONS_START = 16
"""Where the adaptive eviction limit starts (`RunnerSettings.adaptive_evictions`), or at the fixed
limit if that is set lower."""


@dataclass(frozen=True, slots=True)
class PassPacing:
    interval: timedelta = timedelta(seconds=20)
    """Longest gap between two passes (Cluster API requeues a drain every 20 s)."""
    settle: timedelta = timedelta(seconds=5)
    """Nothing left counts only this long after the last eviction (Karpenter's MinDrainTime): a
    pod bound to a cordoned node by a scheduler race or `spec.nodeName` must be seen first."""


@dataclass(frozen=True, slots=True)
class DrainSettings:
    interval: timedelta = timedelta(seconds=20)
    """Longest gap between two passes (Cluster API requeues a drain every 20 s)."""
    settle: timedelta = timedelta(seconds=5)
    """An empty listing counts only this long after the last eviction (Karpenter's MinDrainTime)."""
    timeout: timedelta | None = None
    """Give up after this long (from the persisted start); None waits for ever, like kubectl."""
    parallel: int = 16
    """Evictions in flight at once; the client's rate limiter still applies."""

    @property
    def pacing(self) -> PassPacing:
        return PassPacing(interval=self.interval, settle=self.settle)


@dataclass(frozen=True, slots=True)
class AimdSettings:
    initial: int = 8
    minimum: int = 2
    maximum: int = 64
    window: int = 16
    """Answers per judgement (at least the limit in flight: one round of requests)."""
    backoff: float = 0.5
    """Multiplicative decrease on a throttle or a latency rise."""
    latency_rise: float = 3.0
    """A window whose median latency exceeds the baseline by this factor counts as queueing.
    Not 2: on the local control plane the bare eviction loop's median went from 162 ms at 8 in
    flight to 366 ms at 64 while its throughput still grew from 44 to 146 evictions/s
    (docs/benchmarks.md); a factor of 2 would have held the drain near 32 in flight, at 81 % of that."""
    slow_start: bool = True
    """Double (rather than add one) per flat window until the first decrease."""
    baseline_windows: int = 8
    """Judged windows the latency baseline is the minimum of (at a limit of 16, some 130 answers,
    one or two seconds of a drain). Long enough to remember the latency from before a rise that
    our own growing limit causes (slow start reaches 64 from 16 in two windows); short enough
    that a server busy for reasons of its own stops holding the limit at its floor within seconds."""

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.initial <= self.maximum:
            raise ValueError(
                f"need 1 <= minimum <= initial <= maximum, got {self.minimum}, {self.initial}, {self.maximum}"
            )
        if not 0 < self.backoff < 1 or self.latency_rise <= 1 or self.window < 1 or self.baseline_windows < 1:
            raise ValueError(
                "backoff must be in (0, 1), latency_rise above 1, window and baseline_windows at least 1"
            )

    def bounded(self, maximum: int) -> AimdSettings:
        """The same settings under a lower ceiling (the client's burst)."""
        top = max(1, min(self.maximum, maximum))
        return AimdSettings(
            initial=min(self.initial, top),
            minimum=min(self.minimum, top),
            maximum=top,
            window=self.window,
            backoff=self.backoff,
            latency_rise=self.latency_rise,
            slow_start=self.slow_start,
            baseline_windows=self.baseline_windows,
        )


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    graceful_window: timedelta = timedelta(minutes=5)
    """Phase 1 of a zero-scale: evictions that honour PDBs, before phase 2 force-deletes."""
    drain_timeout: timedelta | None = timedelta(hours=1)
    """A drain that is not a full shutdown gives up (and fails) after this long."""
    verify_timeout: timedelta = timedelta(minutes=10)
    """How long after the removal the pools may take to report their target size."""
    ready_timeout: timedelta = timedelta(minutes=15)
    """How long wake waits for nodes to become Ready before reporting what is not."""
    workloads_return_timeout: timedelta = timedelta(minutes=5)
    """How long a wake, its nodes Ready, follows the Deployments and StatefulSets not yet available
    before it reports which are still not back and why (kube-scheduler retries an unschedulable pod
    within 5 minutes at the latest)."""
    workloads_leave_timeout: timedelta = timedelta(seconds=120)
    """How long a sleep with workloads, its nodes cordoned, waits for the pods of the Deployments
    and StatefulSets it scaled to zero to leave those nodes (their controllers delete them) before
    the drain: an eviction of such a pod is wasted (and refused while a PodDisruptionBudget holds
    it). Pods still there after it are drained like any other."""
    pass_interval: timedelta = timedelta(seconds=20)
    settle: timedelta = timedelta(seconds=5)
    parallel_evictions: int = MAX_EVICTIONS_IN_FLIGHT
    """Evictions in flight at once on one cluster (never more than `max_parallel_evictions`); a
    429 or 5xx is retried after its Retry-After, else with exponential backoff and jitter
    (`engine.drain.passes`). Also how many nodes are cordoned, uncordoned or force-deleted from at
    once. A fixed 64 drained 100 nodes in 0.77x the time of the adaptive limit on the local control
    plane (median of three alternating pairs: docs/benchmarks.md, "The eviction limit")."""
    adaptive_evictions: bool = False
    """Instead of the fixed limit, grow the evictions in flight from `ADAPTIVE_EVICTIONS_START` while
    their latency stays flat (doubling until the first decrease, then one at a time), halve them
    on a 429/5xx from the server or a latency rise (AIMD, engine.drain.concurrency), between 2 and
    `max_parallel_evictions` and never above the client's burst. Off: measured slower (above)."""
    max_parallel_evictions: int = MAX_EVICTIONS_IN_FLIGHT
    """The most evictions in flight on one cluster (`runner.max_evictions_per_cluster`): the fixed
    limit's cap, the adaptive limit's ceiling; the real client's connection pool is sized for it."""
    max_evictions_in_flight: int = 2 * MAX_EVICTIONS_IN_FLIGHT
    """Evictions, cordons and force-deletions in flight at once over every cluster (the threads
    that send them): each cluster within its own limit, the clusters served in turn. Above one
    cluster's ceiling, so a cluster whose evictions hang never holds them all."""
    eviction_processes: int = 0
    """Worker processes that send the evictions and pod deletions (`runner.eviction_processes`,
    `engine.kube.offload`); 0: this process sends them. Each eviction costs about 1 ms of client
    CPU, in an interpreter that uses one core: with workers, this process spends about a fifth of
    that per eviction and the workers the rest, on other cores."""
    workers: int = 32
    """Threads that run steps. A step holds one while it acts (a drain pass while its evictions
    are answered); an operation waiting between steps holds none."""
    max_operations: int = 200
    """Operations in progress at once in this process (waiting ones included); more wait their
    turn, claimed, in the order they came."""
    max_operations_per_cluster: int = 8
    """Operations in progress at once on one cluster (each on its own pools: the locks)."""

    def __post_init__(self) -> None:
        if min(self.workers, self.max_operations, self.max_operations_per_cluster) < 1:
            raise ValueError("workers, max_operations and max_operations_per_cluster must be at least 1")
        if min(self.parallel_evictions, self.max_parallel_evictions, self.max_evictions_in_flight) < 1:
            raise ValueError("the eviction limits must be at least 1")
        if self.eviction_processes < 0:
            raise ValueError("eviction_processes must be 0 or more")

    @property
    def pacing(self) -> PassPacing:
        return PassPacing(interval=self.pass_interval, settle=self.settle)


@dataclass(frozen=True, slots=True)
class ScaleDownRules:
    """cluster-autoscaler's scale-down settings scalebot honours, with cluster-autoscaler's defaults."""

    utilization_threshold: float = 0.5
    """--scale-down-utilization-threshold: a node whose requests exceed this share of allocatable
    (the higher of cpu and memory) stays."""
    gpu_utilization_threshold: float = 0.5
    """--scale-down-gpu-utilization-threshold: the same for a GPU node, on its GPUs alone."""
    ignore_daemonsets_utilization: bool = False
    """--ignore-daemonsets-utilization: leave DaemonSet pods out of the figure (and their requests
    out of allocatable)."""
    skip_nodes_with_system_pods: bool = True
    """--skip-nodes-with-system-pods: a kube-system pod no PodDisruptionBudget covers keeps its node
    (DaemonSet and mirror pods excepted) ..."""
    system_pod_disruption_timeout: timedelta = timedelta(hours=1)
    """... until it is older than this (--blocking-system-pod-distruption-timeout, since 1.33)."""
    skip_nodes_with_local_storage: bool = True
    """--skip-nodes-with-local-storage: a pod with a hostPath or disk-backed emptyDir volume not
    listed in `safe-to-evict-local-volumes` keeps its node."""
    skip_nodes_with_custom_controller_pods: bool = True
    """--skip-nodes-with-custom-controller-pods: a pod whose controller is not a ReplicaSet,
    StatefulSet, Job or ReplicationController keeps its node."""


@dataclass(frozen=True, slots=True)
class ConsolidationSettings:
    node_grace: timedelta = timedelta(minutes=5)
    """Nodes younger than this are left alone (they may be there for pods still arriving)."""
    max_nodes: int = 10
    """Nodes one plan removes at most."""
    rules: ScaleDownRules = ScaleDownRules()


@dataclass(frozen=True, slots=True)
class ConsolidationPolicy:
    """Per cluster (settings `consolidation:`): how consolidation plans, and what runs unattended."""

    node_grace: timedelta = timedelta(minutes=5)
    max_nodes: int = 10
    allow_alongside_autoscaler: bool = False
    """Plan and run consolidations although cluster-autoscaler, Karpenter or CAST AI run here too."""
    empty_nodes: bool = False
    """Remove nodes that ran only DaemonSet/mirror pods for `unneeded_time`, without asking."""
    unneeded_time: timedelta = timedelta(minutes=10)
    """--scale-down-unneeded-time: how long the unattended policies see a node removable (empty, or
    in Evictor mode's plan) before they act on it."""
    delay_after_add: timedelta = timedelta(minutes=10)
    """--scale-down-delay-after-add: the unattended policies remove nothing for this long after a
    node joined the cluster (scalebot reads a scale-up from the newest node's age)."""
    rules: ScaleDownRules = ScaleDownRules()
    empty_node_batch: int = 10
    """Empty nodes removed at once at most (cluster-autoscaler's --max-empty-bulk-delete default)."""
    interval: timedelta = timedelta(seconds=60)
    """How often the unattended policies look at the cluster."""
    evictor: bool = False
    """Evictor mode: every cycle, propose the consolidation plan when it changed (one card)."""
    evictor_auto_approve: bool = False
    """Evictor mode's proposals run without an approval (never on a protected cluster)."""

    @property
    def planning(self) -> ConsolidationSettings:
        return ConsolidationSettings(node_grace=self.node_grace, max_nodes=self.max_nodes, rules=self.rules)

"""Operations as values: what was asked, its plan, its state, and the events it emits.

Pure: frozen dataclasses and enums, no I/O. `engine.operations.service` (the service) creates and moves
them; `engine.store.database` persists them; the bot, the scheduler and the CLI only read them.

States: awaiting_approval → running → succeeded | failed, plus rejected, expired, superseded and
cancelled. An operation that needs no approval starts in running.

One module over 600 lines on purpose: the request, plan, progress, summary and events are the parts
of one `Operation` value, persisted and rendered together.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from engine.domain.drain_state import DrainState
from engine.domain.force_scope import ForceScope
from engine.domain.force_scope import describe as describe_scope
from engine.domain.force_scope import heading as force_heading
from engine.domain.node_removal import NodeRemoval
from engine.domain.reasons import Reason
from engine.domain.wake_waves import WaveProgress


class OpKind(enum.StrEnum):
    DRAIN = "drain"
    SCALE = "scale"
    ZERO = "zero"
    WAKE = "wake"
    CONSOLIDATE = "consolidate"


class OpState(enum.StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self not in (OpState.AWAITING_APPROVAL, OpState.RUNNING)


@dataclass(frozen=True, slots=True)
class Target:
    cluster: str
    pools: tuple[str, ...] = ()
    """Empty for `zero`/`wake` means every pool of the cluster."""
    nodes: tuple[str, ...] = ()
    size: int | None = None
    """Target size for `scale`."""
    force: bool = False
    """Drain with --force semantics (bare pods, opt-outs)."""
    disable_eviction: bool = False
    """Drain by DELETE instead of eviction, bypassing PodDisruptionBudgets (kubectl
    --disable-eviction): a forcing option, approved like --force."""
    workloads: bool = False
    """Also put workloads to sleep / wake them (the workloads provider)."""
    workloads_only: bool = False
    """Only workloads: no node pool changes (clusters whose autoscaler empties the nodes itself)."""
    wake_for_seconds: int | None = None
    """Temporary wake: put back to sleep after this long."""
    one_at_a_time: bool | None = None
    """Drain non-empty nodes one at a time (empty ones together); None: the cluster's policy."""

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "pools": list(self.pools),
            "nodes": list(self.nodes),
            "size": self.size,
            "force": self.force,
            "disable_eviction": self.disable_eviction,
            "workloads": self.workloads,
            "workloads_only": self.workloads_only,
            "wake_for_seconds": self.wake_for_seconds,
            "one_at_a_time": self.one_at_a_time,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Target:
        return cls(
            cluster=data["cluster"],
            pools=tuple(data.get("pools") or ()),
            nodes=tuple(data.get("nodes") or ()),
            size=data.get("size"),
            force=bool(data.get("force")),
            disable_eviction=bool(data.get("disable_eviction")),
            workloads=bool(data.get("workloads")),
            workloads_only=bool(data.get("workloads_only")),
            wake_for_seconds=data.get("wake_for_seconds"),
            one_at_a_time=data.get("one_at_a_time"),
        )


@dataclass(frozen=True, slots=True)
class OperationRequest:
    kind: OpKind
    target: Target
    requested_by: str
    """A Slack user ID (`U…`), `cli:<login>`, or `schedule:<name>`."""
    channel: str = ""
    """Where the request came from and where progress goes ("" for the CLI)."""
    thread_ts: str = ""
    """Post progress into this existing thread (a schedule's announcement), if set."""
    reason: str = ""
    pre_approvers: tuple[str, ...] = ()
    """Set only by engine.schedules.service: the people who pre-approved the schedule's current definition.
    `Operations.request` re-checks their roles now; they stand in for the quorum only if enough of
    them still may approve."""
    on_behalf_of: tuple[str, ...] = ()
    """People behind a request made under another name (a schedule's creator, who clicked "Run
    now"): like the requester, none of them may approve it unless self-approval is allowed."""


@dataclass(frozen=True, slots=True)
class PoolChange:
    pool: str
    before: int
    after: int
    nodes_to_remove: tuple[str, ...] = ()
    """Nodes to drain and take out of the pool (what happens to them: `removal`)."""
    min_size: int = 0
    max_size: int | None = None
    removal: NodeRemoval = NodeRemoval.MACHINE
    removal_reason: str = ""
    not_drained: tuple[str, ...] = ()
    """Of nodes_to_remove, those removed without a drain (their Machine excludes draining)."""
    drain_timeout_seconds: int | None = None
    """The pool's nodeDrainTimeout: past it, its nodes stop draining and removal goes on."""
    detach_wait: tuple[str, ...] = ()
    """Of the drained nodes, those whose volumes must detach before removal."""
    detach_timeout_seconds: int | None = None
    hooked: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Of nodes_to_remove, (node, pre-drain hooks) left to Cluster API: it runs the hooks, then
    drains; scalebot removes the Machine and waits for it to go."""
    machines_picked_by: str = ""
    """Who picks the machines that go when the pool shrinks, if not scalebot (see Pool)."""

    @property
    def hooked_nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.hooked)

    @property
    def empties_only(self) -> bool:
        """The nodes are cordoned and drained but stay: nothing behind them would stop the machine."""
        return self.removal is NodeRemoval.EMPTY and bool(self.nodes_to_remove)


def emptied_not_removed(change: PoolChange) -> str:
    """The plan's and the operation's words for a pool whose nodes are emptied but kept."""
    n = len(change.nodes_to_remove)
    return (
        f"pool {change.pool}: {n} node{'s' if n != 1 else ''} will be emptied (cordoned and drained), "
        f"not removed: {change.removal_reason or 'nothing behind them stops the machines'}. "
        "An autoscaler (or you) removes the empty nodes; their Node objects stay"
    )


def drain_rules(change: PoolChange) -> list[str]:
    """The pool's own drain rules (Cluster API's Machine deletion rules) and who picks the machines
    that go, as the plan states them."""
    lines = []
    if change.not_drained:
        lines.append(
            f"not drained: {', '.join(change.not_drained)} (their Machines have "
            "machine.cluster.x-k8s.io/exclude-node-draining; removed with their Pods, as Cluster API does)"
        )
    for node, hooks in change.hooked:
        lines.append(
            f"{node}: its Machine has pre-drain hook(s) {', '.join(hooks)}; Cluster API runs them, then "
            "drains the node: scalebot removes the Machine and waits for it, reporting the hooks"
        )
    if change.machines_picked_by and 0 < change.after < change.before:
        who = change.machines_picked_by
        lines.append(
            f"{who} picks the machines to remove when the worker's minimum/maximum is lowered; scalebot "
            f"cannot choose them: it drains {', '.join(change.nodes_to_remove) or 'no node'} first, and "
            f"a machine {who} removes instead is drained by {who}"
        )
    if change.drain_timeout_seconds and change.nodes_to_remove:
        lines.append(
            f"nodeDrainTimeout {format_seconds(change.drain_timeout_seconds)}: after it the drain of these "
            "nodes stops and their Machines are removed anyway, as Cluster API does"
        )
    return lines


def format_seconds(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest}s" if minutes and rest else f"{minutes}m" if minutes else f"{rest}s"


@dataclass(frozen=True, slots=True)
class OperationPlan:
    """What an operation will do; the approval binds to its hash."""

    kind: OpKind
    cluster: str
    pools: tuple[PoolChange, ...] = ()
    nodes: tuple[str, ...] = ()
    """Nodes to cordon and drain."""
    blockers: tuple[tuple[str, str], ...] = ()
    """(pod, why) pairs that will hold phase 1 / a normal drain."""
    force_phase: bool = False
    """True when every pool of the cluster goes to zero: phase 2 force-deletes what remains."""
    workloads: int = 0
    """Workloads that will be scaled (sleep) or restored (wake)."""
    warnings: tuple[str, ...] = ()
    workload_keys: tuple[str, ...] = ()
    """`Kind/namespace/name` of each workload a sleep will scale down: part of what is approved."""
    moves: tuple[tuple[str, str, str], ...] = ()
    """Consolidation: (node removed, pod, node it is expected to land on), as the approver saw them."""
    one_at_a_time: bool = False
    """Non-empty nodes are drained one at a time, empty ones together (cluster-autoscaler's caution)."""
    forcing: tuple[str, ...] = ()
    """The forcing options of the run (`engine.domain.force_scope`: "force", "phase2"): each may remove
    what a plain drain refuses, so any of them makes it a forced run (tagged `force`)."""
    force_scope: ForceScope | None = None
    """What a forced run may evict or force-delete, as approved (None when nothing is forced)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "cluster": self.cluster,
            "pools": [
                {
                    "pool": p.pool,
                    "before": p.before,
                    "after": p.after,
                    "nodes_to_remove": list(p.nodes_to_remove),
                    "min_size": p.min_size,
                    "max_size": p.max_size,
                    "removal": p.removal.value,
                    "removal_reason": p.removal_reason,
                    "not_drained": list(p.not_drained),
                    "drain_timeout_seconds": p.drain_timeout_seconds,
                    "hooked": {node: list(hooks) for node, hooks in p.hooked},
                    "detach_wait": list(p.detach_wait),
                    "detach_timeout_seconds": p.detach_timeout_seconds,
                    "machines_picked_by": p.machines_picked_by,
                }
                for p in self.pools
            ],
            "nodes": list(self.nodes),
            "blockers": [list(b) for b in self.blockers],
            "force_phase": self.force_phase,
            "workloads": self.workloads,
            "warnings": list(self.warnings),
            "workload_keys": list(self.workload_keys),
            "moves": [list(m) for m in self.moves],
            "one_at_a_time": self.one_at_a_time,
            "forcing": list(self.forcing),
            "force_scope": self.force_scope.to_json() if self.force_scope is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OperationPlan:
        return cls(
            kind=OpKind(data["kind"]),
            cluster=data["cluster"],
            pools=tuple(
                PoolChange(
                    pool=p["pool"],
                    before=p["before"],
                    after=p["after"],
                    nodes_to_remove=tuple(p.get("nodes_to_remove") or ()),
                    min_size=p.get("min_size", 0),
                    max_size=p.get("max_size"),
                    removal=NodeRemoval(p.get("removal") or NodeRemoval.MACHINE.value),
                    removal_reason=str(p.get("removal_reason") or ""),
                    not_drained=tuple(p.get("not_drained") or ()),
                    drain_timeout_seconds=p.get("drain_timeout_seconds"),
                    hooked=tuple((n, tuple(h)) for n, h in sorted((p.get("hooked") or {}).items())),
                    detach_wait=tuple(p.get("detach_wait") or ()),
                    detach_timeout_seconds=p.get("detach_timeout_seconds"),
                    machines_picked_by=str(p.get("machines_picked_by") or ""),
                )
                for p in data.get("pools") or ()
            ),
            nodes=tuple(data.get("nodes") or ()),
            blockers=tuple((b[0], b[1]) for b in data.get("blockers") or ()),
            force_phase=bool(data.get("force_phase")),
            workloads=int(data.get("workloads") or 0),
            warnings=tuple(data.get("warnings") or ()),
            workload_keys=tuple(data.get("workload_keys") or ()),
            moves=tuple((m[0], m[1], m[2]) for m in data.get("moves") or ()),
            one_at_a_time=bool(data.get("one_at_a_time")),
            forcing=tuple(data.get("forcing") or ()),
            force_scope=ForceScope.from_json(data["force_scope"]) if data.get("force_scope") else None,
        )

    @property
    def plan_hash(self) -> str:
        """Stable over what matters for consent: pools, sizes, nodes, whether force applies, and the
        workloads a sleep scales down (a Deployment created since the card was shown changes it).

        Blocker lists and warnings are left out on purpose: a pod that became Ready does not
        change what the approver agreed to. A forced run adds its forcing options and its force
        scope (owners and budgets, not Pod names: a replacement Pod keeps the approval).
        """
        essence: dict[str, Any] = {
            "kind": self.kind.value,
            "cluster": self.cluster,
            "pools": sorted(
                (p.pool, p.before, p.after, sorted(p.nodes_to_remove), p.removal.value) for p in self.pools
            ),
            "nodes": sorted(self.nodes),
            "force_phase": self.force_phase,
            "workloads": self.workloads,
            "workload_keys": sorted(self.workload_keys),
        }
        if self.one_at_a_time:  # (absent when off, so plans approved before it keep their hash)
            essence["one_at_a_time"] = True
        if self.forcing:  # (absent when nothing is forced, so unforced plans keep their hash)
            # An approval of the unforced plan must not authorise the forced one, nor a wider scope.
            essence["forcing"] = sorted(self.forcing)
            essence["force_scope"] = (self.force_scope or ForceScope()).essence()
        if self.kind is OpKind.CONSOLIDATE:
            # The approver agreed to these pods landing there: a different packing is a new plan.
            essence["moves"] = sorted(self.moves)
        return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:16]

    def to_text(self) -> str:
        """The plan as a person reads it (CLI, console); Slack renders the same facts as blocks."""
        lines = [f"Plan: {self.kind.value} on {self.cluster}: {self.summary()}"]
        for p in self.pools:
            verb = "empty" if p.empties_only else "remove"
            removal = f" ({verb} {', '.join(p.nodes_to_remove)})" if p.nodes_to_remove else ""
            lines.append(f"  pool {p.pool}: {p.before} → {p.after}{removal}")
            if p.empties_only:
                lines.append(f"    {emptied_not_removed(p)}")
            lines.extend(f"    {line}" for line in drain_rules(p))
        if self.nodes and self.kind is OpKind.DRAIN:
            lines.append(f"  nodes: {', '.join(self.nodes)}")
        for node, pod, destination in self.moves:
            lines.append(f"  {pod}: {node} → {destination}")
        if self.one_at_a_time and self.nodes:
            lines.append("  non-empty nodes are drained one at a time; empty nodes together")
        if self.force_phase:
            lines.append(
                "  every pool goes to 0: phase 1 evicts gracefully (PDBs respected), then phase 2 "
                "force-deletes what is left with grace 0"
            )
        if self.forcing:
            lines.append(f"  {force_heading(self.forcing)}:")
            lines.extend(f"    {line}" for line in describe_scope(self.force_scope or ForceScope()))
        if self.blockers:
            lines.append(
                f"  {len(self.blockers)} pod(s) will block {'phase 1' if self.force_phase else 'the drain'}:"
            )
            lines.extend(f"    {pod}: {why}" for pod, why in self.blockers[:20])
            if len(self.blockers) > 20:
                lines.append(f"    ... ({len(self.blockers) - 20} more)")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: "3 pools, 24 nodes → 0" / "pool web 5 → 2" / "drain 2 nodes"."""
        if self.kind is OpKind.DRAIN:
            return (
                f"drain {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}: {', '.join(self.nodes)}"
            )
        if self.kind is OpKind.CONSOLIDATE:
            n = len(self.nodes)
            if not n:
                return "no node can be removed now"
            nodes = ", ".join(self.nodes)
            return f"remove {n} node{'s' if n != 1 else ''} ({nodes}), {len(self.moves)} pod(s) move"
        before = sum(p.before for p in self.pools)
        after = sum(p.after for p in self.pools)
        if len(self.pools) == 1:
            p = self.pools[0]
            return f"pool {p.pool} {p.before} → {p.after}"
        return f"{len(self.pools)} pools, {before} nodes → {after}"


# -- what the steps remember, and what an operation ended with ------------------------------------
#
# Written by the runner's steps, read by the renderers (Slack, CLI), the schedules and the metrics.
# Persisted with msgspec (`engine.store.database`); a field added later needs a default, so older rows read.


@dataclass(frozen=True, slots=True)
class Released:
    """What a failed or cancelled drain gave back: nodes it uncordoned, and those cordoned before it."""

    uncordoned: tuple[str, ...] = ()
    kept_cordoned: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DrainProgress:
    """The drain of an operation's nodes: cordon, passes, phase 2 of a full zero-scale."""

    state: DrainState | None = None
    """None before the cordon (and, in a consolidation, between two nodes)."""
    phase1_started_at: datetime | None = None
    """The latest cordon: the 5-minute window of phase 1 and the settle time count from it."""
    evicted: int = 0
    last_message: str | None = None
    """The last condition message reported, so an unchanged report is not posted again (None: no
    report yet; "" is the message of a completed drain)."""
    timeouts_reported: tuple[str, ...] = ()
    """Pools whose nodeDrainTimeout expired and was reported."""
    force_withdrawn: str = ""
    """Why phase 2 was withdrawn ("" while it still applies)."""
    force_deleted: tuple[str, ...] = ()
    """`namespace/name` of each pod phase 2 force-deleted."""
    force_unconfirmed: tuple[str, ...] = ()
    released: Released | None = None
    # What the last pass found, for the progress figures (`engine.domain.progress_figures`).
    nodes_total: int = 0
    """Nodes being drained; 0 before the first pass."""
    busy_nodes: tuple[str, ...] = ()
    """Of them, those with pods still holding them back."""
    pods_remaining: int = 0
    """Pods still to evict (not yet asked to leave, or refused)."""
    pods_terminating: int = 0
    pods_forced: int = 0
    """Pods phase 2 deleted that phase 1 had not evicted (the figures count each pod once)."""
    blocking: tuple[str, ...] = ()
    """A few of the pods that hold the drain back, with why (`ns/name: reason`)."""
    samples: tuple[tuple[datetime, int], ...] = ()
    """(pass time, pods evicted so far) over about the last minute: the current rate."""


@dataclass(frozen=True, slots=True)
class RemovalProgress:
    """Removal of the drained nodes, and the check that every pool reached its target."""

    joined: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Pool → nodes that joined it while it went to zero (drained too)."""
    join_rounds: int = 0
    pool_changes: tuple[str, ...] = ()
    """Sentences about pools that changed during the operation."""
    nodes_removed: int = 0
    nodes_emptied: int = 0
    removed_at: datetime | None = None
    target_refused: Mapping[str, str] = field(default_factory=dict)
    """Pool → why its provider refused the target size."""
    verify: tuple[str, ...] = ()
    """What the last check found not at its target."""
    hooks_reported: str = ""
    detach_started_at: datetime | None = None
    detach_reported: str = ""
    detach_expired: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadCount:
    available: int
    total: int


@dataclass(frozen=True, slots=True)
class WakeProgress:
    """Pools resized up, nodes waited for, workloads restored."""

    resized_at: datetime | None = None
    ready: int | None = None
    wanted: int | None = None
    """None until the first look at the nodes (a workloads-only wake never looks)."""
    provisioned: int | None = None
    """Nodes provisioned from demand (Karpenter); None when no pool sizes itself so."""
    not_ready: tuple[str, ...] = ()
    """What was still not Ready when the wait timed out."""
    kept_cordoned: tuple[str, ...] = ()
    """Nodes back in their pool that stay cordoned: someone else had cordoned them before scalebot
    emptied them."""
    waves: tuple[WaveProgress, ...] = ()
    """The waves the pools wake in (`engine.domain.wake_waves`), decided at the first resize; empty
    in rows written before waves (one wave of every pool)."""
    wave: int = 0
    """The index of the wave being woken."""


@dataclass(frozen=True, slots=True)
class WorkloadsProgress:
    headline: str = ""
    """The sleep's or wake's report headline ("61/61 workloads restored"); "" before it ran."""
    available: WorkloadCount | None = None
    """After a wake: Deployments and StatefulSets available again."""
    restored: tuple[str, ...] = ()
    """`Kind/namespace/name` of each workload a wake scaled back (it follows them, with those the
    sleep displaced with its nodes)."""
    followed_since: datetime | None = None
    """When a wake first looked at the workloads with its nodes Ready (it follows those not back)."""
    not_back: tuple[str, ...] = ()
    """`Kind/namespace/name: why`, for each workload still not available when the wake stopped
    following them (`RunnerSettings.workloads_return_timeout`)."""
    orders_done: tuple[str, ...] = ()
    """A wake in order (`engine.workloads.order`): the wake orders restored so far ("10", "last")."""
    waking: tuple[str, ...] = ()
    """The keys of the wake order restored last, followed until they are available."""
    waking_order: str = ""
    waking_since: datetime | None = None
    to_restore: int = 0
    """Workloads the wake orders so far were meant to restore (the headline's "restored/to_restore")."""
    scaled_to_zero: tuple[str, ...] = ()
    """A sleep: `Kind/namespace/name` of the Deployments and StatefulSets it scaled to zero (their
    controllers delete their pods: the drain waits for them rather than evict them)."""
    leaving_since: datetime | None = None
    """A sleep, its nodes cordoned: when it began waiting for those pods to leave its nodes."""
    leaving: int = 0
    """Their pods on the drained nodes when that wait began."""
    left: int = 0
    """Of them, the pods that left with their workload (no eviction) before the drain."""


@dataclass(frozen=True, slots=True)
class ConsolidationProgress:
    """A consolidation goes node by node: the one being drained, those done and those skipped."""

    current: str = ""
    removed: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Node → why it was skipped (its pods no longer fit elsewhere, the pool at its minimum)."""
    evicted_before: int = 0
    """Pods evicted from the nodes already removed."""


@dataclass(frozen=True, slots=True)
class OperationProgress:
    """Everything an operation's steps remember between calls (and across restarts)."""

    drain: DrainProgress = DrainProgress()
    removal: RemovalProgress = RemovalProgress()
    wake: WakeProgress = WakeProgress()
    workloads: WorkloadsProgress = WorkloadsProgress()
    consolidation: ConsolidationProgress = ConsolidationProgress()
    provider_progress: Mapping[str, str] = field(default_factory=dict)
    """Pool → its provider's own progress line, as last reported."""
    last_error: str = ""
    step_failures: int = 0
    """Consecutive failed attempts of the current step (API errors), for the retry backoff."""


@dataclass(frozen=True, slots=True)
class PoolSizes:
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class OperationSummary:
    """What an operation ended with: the final message's figures, for Slack, the CLI and schedules."""

    duration_seconds: int
    pods_evicted: int = 0
    pods_force_deleted: int = 0
    nodes_removed: int = 0
    nodes_emptied: int = 0
    pools: Mapping[str, PoolSizes] = field(default_factory=dict)
    workloads: WorkloadCount | None = None
    """Workloads available after a wake."""
    nodes_ready: tuple[int, int] | None = None
    """(Ready, wanted) after a wake or scale-up."""
    nodes_provisioned: int | None = None
    removed: tuple[str, ...] = ()
    """Consolidation: the nodes removed."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Consolidation: node → why it stayed."""


@dataclass(frozen=True, slots=True)
class Operation:
    id: str
    kind: OpKind
    target: Target
    state: OpState
    requested_by: str
    created_at: datetime
    updated_at: datetime
    plan: OperationPlan
    channel: str = ""
    step: str = ""
    """The current step of the state machine (see engine.operations.flows and engine.operations.steps)."""
    progress: OperationProgress = OperationProgress()
    approval_id: str = ""
    approvals_required: int = 0
    expires_at: datetime | None = None
    message_ts: str = ""
    """The Slack message this operation is rendered into (card, then progress)."""
    thread_ts: str = ""
    summary: OperationSummary | None = None
    """Set when the operation ended (succeeded, or failed after its last step)."""
    error: str = ""
    initiated_by: tuple[str, ...] = ()
    """`requested_by` and everyone it acts on behalf of: none of them may approve it (unless the
    policy allows self-approval)."""

    @property
    def pools_locked(self) -> tuple[str, ...]:
        return tuple(sorted(p.pool for p in self.plan.pools))


ProgressKind = Literal["state", "phase", "report", "final"]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Something a human should see: emitted by the runner, rendered by the bot or the CLI."""

    operation: Operation
    kind: ProgressKind
    text: str
    """A plain sentence ("Phase 2: force-deleting 3 Pods") or a condition message."""
    condition: str = ""
    """The DrainingSucceeded-style message, when this event carries a drain report."""
    final: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to a request or a click: what changed, and what to tell the person."""

    ok: bool
    reply: str
    operation: Operation | None = None
    changed: bool = False
    reason: Reason | None = None
    """What `reply` says, as data, for the bot and the CLI to render (when it names people,
    channels or commands)."""

"""The PoolProvider port: node pools the engine can shrink, remove machines from, and restore.

A provider answers for one kind of pool (Cluster API MachineDeployments, nodes grouped by a
label, ...). Adding a cloud provider (EKS/GKE/AKS node groups) means one more small module that
implements this Protocol; the operations never know which kind they drive.

Contract every provider keeps:
- `set_size` is absolute and idempotent (safe to repeat after a crash);
- sizes to restore are written ON the pool's own object (`record_restore`) before the first
  change, and an existing record is never overwritten: a second scale-down during the night must
  not replace the day-time size with the night-time one;
- `remove_nodes` is called only for nodes the engine has already drained; it removes exactly
  those (not "any k nodes"), so the pool never loses a node that still runs pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from engine.domain.errors import Category, ScalebotError
from engine.domain.node_removal import NodeRemoval
from engine.pools.victims import NO_HINTS, DeletionPolicy, VictimHints

RESTORE_ANNOTATION = "scalebot.io/restore"
"""JSON on the pool object: the sizes to restore at wake (survives a lost database)."""
POOL_LABEL = "scalebot.io/pool"
"""Default node label naming a node's pool for the label provider."""


class PoolNotFound(ScalebotError, LookupError):
    category = Category.USAGE

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f'pool "{name}" not found; known pools: {", ".join(self.known) or "none"}')


class PoolSizeError(ScalebotError, ValueError):
    """A requested size outside the pool's limits (min size reached, above max)."""

    category = Category.USAGE


@dataclass(frozen=True, slots=True)
class RestoreRecord:
    desired: int
    min_size: int
    max_size: int | None
    recorded_at: datetime
    operation_id: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific state needed to restore (e.g. node templates, autoscaler annotations)."""


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    provider: str
    desired: int
    """The size the pool is asked to have (replicas, or node count for label pools)."""
    min_size: int = 0
    max_size: int | None = None
    nodes: tuple[str, ...] = ()
    """Nodes that belong to the pool now, sorted."""
    ready_nodes: tuple[str, ...] = ()
    restore: RestoreRecord | None = None
    emptied: tuple[str, ...] = ()
    """Nodes scalebot emptied and kept (NodeRemoval.EMPTY): not in `nodes`, uncordoned on wake
    unless someone else had cordoned them before (`kept_cordoned`)."""
    kept_cordoned: tuple[str, ...] = ()
    """Nodes of `nodes` someone else had cordoned before scalebot emptied them: wake returned them
    to the pool still cordoned (their cordon is not scalebot's to undo)."""
    removal: NodeRemoval = NodeRemoval.MACHINE
    """What removing a node does here (the plan and `/scale status` say it)."""
    deletion_order: DeletionPolicy = "Oldest"
    """The pool's own order among equally good victims (a MachineDeployment's deletion order)."""
    victim_hints: VictimHints = NO_HINTS
    """Nodes whose machine is marked for deletion, deleting or unhealthy: chosen first."""
    drain_excluded: frozenset[str] = frozenset()
    """Nodes removed without a drain (Cluster API `machine.cluster.x-k8s.io/exclude-node-draining`)."""
    drain_timeout_seconds: int | None = None
    """After this long a drain stops and removal goes on (Cluster API nodeDrainTimeout); None: never."""
    progress: str = ""
    """The provider's own account of work under way on the pool (a Gardener Shoot's last operation,
    Cluster API's drain of a deleting Machine); the runner follows its changes into the thread."""
    detach_wait: frozenset[str] = frozenset()
    """Drained nodes whose volumes must detach before removal (Cluster API waits for it, unless
    `machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach`)."""
    detach_timeout_seconds: int | None = None
    """nodeVolumeDetachTimeout: past it, removal goes on with volumes attached; None: never."""
    settling: bool = False
    """The provider has not finished the last change (a Shoot whose operation is still running);
    an operation's verify waits for it."""
    pre_drain_hooks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(node, hook annotations) for nodes whose Machine carries Cluster API pre-drain hooks: its
    controller runs them, then drains; scalebot leaves those nodes to it and waits."""
    removal_reason: str = ""
    """Why, in one phrase (e.g. "nodes managed by kwok")."""
    machines_picked_by: str = ""
    """Who picks the machines that go when the pool shrinks, if not scalebot (a Gardener worker:
    "Gardener's machine controller"): scalebot drains the nodes it chose, but cannot promise those
    are the ones removed. Empty: exactly the drained nodes go."""
    sizes_from_demand: bool = False
    """The pool has no size to ask for: its nodes come from pending pods (a Karpenter NodePool).
    It can go to 0 and come back, never to a number; `desired` is then the nodes it holds now."""
    pending_pods: int = 0
    """Demand-sized pools only: pods in the cluster waiting for a node, which may still make the
    pool grow (capacity is back once none is left and the pool's nodes are Ready)."""

    @property
    def size(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True, slots=True)
class ProviderSchedule:
    """A sleep/wake schedule the pools' own system keeps and runs (a Gardener Shoot's
    `spec.hibernation.schedules[]`). scalebot shows it beside its own schedules, read-only: it
    neither runs nor changes it, and one of the two may undo what the other did."""

    system: str
    """Who runs it: "Gardener"."""
    owner: str
    """The object it is kept on: "Shoot garden-dev/eu1"."""
    start: str = ""
    """Cron spec at which the cluster is put to sleep (hibernated); empty: never."""
    end: str = ""
    """Cron spec at which it is woken; empty: never."""
    location: str = ""
    """IANA time zone the cron specs are evaluated in, as written on the object (empty: not set)."""


@runtime_checkable
class KeepsSchedules(Protocol):
    """A PoolProvider whose system has schedules of its own (optional: most have none)."""

    def provider_schedules(self) -> tuple[ProviderSchedule, ...]: ...


@runtime_checkable
class TakesBackRemoval(Protocol):
    """A PoolProvider whose `prepare_removal` leaves marks that outlive a failed scale-down
    (optional: the others mark nothing, or nothing that a later scale-down would act on)."""

    def cancel_removal(self, pool: str, nodes: Sequence[str]) -> tuple[str, ...]:
        """Undo `prepare_removal` for these nodes (only what it wrote); returns the machines changed."""
        ...


@runtime_checkable
class StopsCluster(Protocol):
    """A PoolProvider whose cluster can be stopped whole (optional: an AKS managed cluster, whose
    System pool keeps at least one node). A zero of every pool is then the cluster's stop, after the
    two-phase drain, and the wake its start. While the cluster is stopped its API server is not to
    be reached: `cluster_stopped` says so, and the engine plans from the provider alone."""

    def cluster_stopped(self) -> str:
        """ "" while the cluster runs; else one line saying it is stopped (or stopping, starting)."""
        ...

    def prepare_stop(self, pools: Sequence[str]) -> None:
        """Refuse, before anything is drained, a stop that would take more than these pools."""
        ...

    def stop_cluster(self) -> None:
        """Stop the cluster (its nodes go; its state, config and disks stay). Idempotent."""
        ...

    def start_cluster(self) -> None:
        """Start it again and wait until its API server answers. Idempotent."""
        ...


class PoolProvider(Protocol):
    name: str
    """Short provider name shown to users: "labels", "capi", ..."""

    def list_pools(self) -> list[Pool]: ...

    def get_pool(self, name: str) -> Pool:
        """Raises PoolNotFound (listing the known pools)."""
        ...

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        """Write the restore record on the pool object unless one exists; True if written."""
        ...

    def clear_restore(self, pool: str) -> None: ...

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        """Mark the chosen machines before draining (Cluster API: the delete-machine annotation)."""
        ...

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        """Remove exactly these drained nodes and lower the desired size by as many. Idempotent."""
        ...

    def set_size(self, pool: str, size: int) -> None:
        """Ask for `size` nodes (wake / scale up). Absolute and idempotent.

        A demand-sized pool takes 0 (stop provisioning) or more (provision again from demand).
        """
        ...

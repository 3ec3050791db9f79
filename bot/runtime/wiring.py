"""Builds cluster handles (Kubernetes client + pool provider + workloads) from CLI or config values.

The only place (with `bot.slack.app` and the provider registry `bot.config.providers`) that knows the concrete
adapters; everything else receives ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.config import providers
from engine.domain.clock import Clock, SystemClock
from engine.domain.errors import Category, ScalebotError
from engine.kube.fake import FakeCluster
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from engine.operations.runner import ClusterHandle
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store

if TYPE_CHECKING:
    from engine.workloads import WorkloadConfig
    from engine.workloads.gitops import GitOpsMode


SIM_CLUSTER, SIM_POOLS = "cluster", "pools"
"""The parts of a simulated cluster's saved state: its Kubernetes objects, its pools' records."""


class WiringError(ScalebotError, ValueError):
    """A cluster cannot be connected; the message says what to fix."""

    category = Category.CONFIGURATION


def connect_cluster(
    name: str,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    provider: str = providers.DEFAULT_PROVIDER,
    options: Mapping[str, str] | None = None,
    namespace: str = "scalebot",
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    workloads: WorkloadConfig | None = None,
    gitops: GitOpsMode = "warn",
) -> ClusterHandle:
    """`provider` names an entry of `bot.config.providers.PROVIDERS`; `options` are its own settings
    (validated here again, so the CLI and the config file fail the same way). `gitops` is the
    cluster's setting for workloads a GitOps owner applies (when `workloads` is not given)."""
    from engine.kube.config import KubeConfigError
    from engine.workloads import WorkloadConfig, WorkloadScaler

    try:
        spec = providers.spec(provider)
        resolved = spec.resolve(options or {})
    except providers.ProviderOptionError as exc:
        raise WiringError(f"pool provider: {exc}") from exc
    connection = providers.Connection(
        cluster=name,
        kubeconfig=kubeconfig,
        context=context,
        options=resolved,
        namespace=namespace,
        qps=qps,
        burst=burst,
    )
    try:
        connected = spec.connect(connection)
    except (KubeConfigError, providers.ProviderOptionError) as exc:
        raise WiringError(str(exc)) from exc
    scaler = WorkloadScaler.from_kube_client(
        connected.api, workloads or WorkloadConfig(own_namespace=namespace, gitops=gitops)
    )
    return ClusterHandle(name, connected.api, connected.pools, scaler)


def simulated_cluster(
    name: str = "simulated", *, clock: Clock | None = None, store: Store | None = None
) -> tuple[ClusterHandle, FakeCluster]:
    """The built-in simulated cluster (see bot.runtime.demo_cluster), clearly not a real one.

    With a `store`, its state lives in that SQLite file (the `simulation` table): loaded here (the
    demo's pools the first time) and saved after every call that changed it, so separate commands
    on the same file act on one cluster. Without one it lives in memory only."""
    from bot.runtime import demo_cluster as demo

    clock = clock or SystemClock()
    saved = store.simulation(name) if store is not None else {}
    if SIM_CLUSTER in saved:
        fake = FakeCluster.from_state(saved[SIM_CLUSTER], now=clock.now)
    else:
        fake = FakeCluster(now=clock.now)
        demo.populate(fake)
    pools = SimulatedPoolProvider(fake)
    if SIM_POOLS in saved:
        pools.load_state(saved[SIM_POOLS])
    if store is not None:
        fake.on_change = lambda: store.save_simulation(name, SIM_CLUSTER, fake.to_state(), at=clock.now())
        pools.on_change = lambda: store.save_simulation(name, SIM_POOLS, pools.to_state(), at=clock.now())
        if not saved:
            fake.on_change()
            pools.on_change()
    return ClusterHandle(name, fake, pools), fake

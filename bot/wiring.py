"""Builds cluster handles (Kubernetes client + pool provider + workloads) from CLI or config values.

The only place (with `bot.app` and the provider registry `bot.providers`) that knows the concrete
adapters; everything else receives ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot import providers
from engine.clock import Clock, SystemClock
from engine.kube.fake import FakeCluster
from engine.pools.simulated import SimulatedPoolProvider
from engine.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from engine.runner import ClusterHandle

if TYPE_CHECKING:
    from engine.workloads import WorkloadConfig


class WiringError(ValueError):
    """A cluster cannot be connected; the message says what to fix."""


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
) -> ClusterHandle:
    """`provider` names an entry of `bot.providers.PROVIDERS`; `options` are its own settings
    (validated here again, so the CLI and the config file fail the same way)."""
    from engine.kube.client import KubeConfigError
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
        connected.api, workloads or WorkloadConfig(own_namespace=namespace)
    )
    return ClusterHandle(name, connected.api, connected.pools, scaler)


def simulated_cluster(
    name: str = "simulated", *, clock: Clock | None = None
) -> tuple[ClusterHandle, FakeCluster]:
    """The built-in simulated cluster: in memory, clearly not a real one (see bot.demo)."""
    from bot import demo

    clock = clock or SystemClock()
    fake = FakeCluster(now=clock.now)
    demo.populate(fake)
    return ClusterHandle(name, fake, SimulatedPoolProvider(fake)), fake

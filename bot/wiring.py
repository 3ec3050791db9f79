"""Builds cluster handles (Kubernetes client + pool provider + workloads) from CLI or config values.

The only place (with `bot.app`) that knows the concrete adapters; everything else receives ports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.clock import Clock, SystemClock
from engine.kube.fake import FakeCluster
from engine.pools.base import POOL_LABEL
from engine.pools.simulated import SimulatedPoolProvider
from engine.runner import ClusterHandle

if TYPE_CHECKING:
    from engine.workloads import WorkloadConfig

PROVIDERS = ("labels", "capi")


class WiringError(ValueError):
    """A cluster cannot be connected; the message says what to fix."""


def connect_cluster(
    name: str,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    provider: str = "labels",
    pool_label: str = POOL_LABEL,
    namespace: str = "scalebot",
    qps: float = 50.0,
    burst: int = 100,
    workloads: WorkloadConfig | None = None,
) -> ClusterHandle:
    from engine.kube.client import KubeClient, KubeConfigError
    from engine.workloads import WorkloadConfig, WorkloadScaler

    if provider not in PROVIDERS:
        raise WiringError(f'unknown pool provider "{provider}"; choose one of: {", ".join(PROVIDERS)}')
    try:
        api = KubeClient.from_config(kubeconfig=kubeconfig, context=context, qps=qps, burst=burst)
    except KubeConfigError as exc:
        raise WiringError(str(exc)) from exc
    scaler = WorkloadScaler.from_kube_client(api, workloads or WorkloadConfig(own_namespace=namespace))
    if provider == "capi":
        from engine.pools.capi import ClusterApiPoolProvider

        return ClusterHandle(name, api, ClusterApiPoolProvider(api.api_client, node_api=api), scaler)
    from engine.pools.labels import LabelPoolProvider

    pools = LabelPoolProvider(api, api.api_client, label=pool_label, namespace=namespace)
    return ClusterHandle(name, api, pools, scaler)


def simulated_cluster(
    name: str = "simulated", *, clock: Clock | None = None
) -> tuple[ClusterHandle, FakeCluster]:
    """The built-in simulated cluster: in memory, clearly not a real one (see bot.demo)."""
    from bot import demo

    clock = clock or SystemClock()
    fake = FakeCluster(now=clock.now)
    demo.populate(fake)
    return ClusterHandle(name, fake, SimulatedPoolProvider(fake)), fake

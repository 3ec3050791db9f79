"""Builds cluster handles (Kubernetes client + pool provider) from command-line or config values.

The only place (with `bot.app`) that knows the concrete adapters; everything else receives ports.
"""

from __future__ import annotations

from engine.clock import Clock, SystemClock
from engine.kube.fake import FakeCluster
from engine.pools.base import POOL_LABEL
from engine.pools.simulated import SimulatedPoolProvider
from engine.runner import ClusterHandle

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
) -> ClusterHandle:
    from engine.kube.client import KubeClient, KubeConfigError

    try:
        api = KubeClient.from_config(kubeconfig=kubeconfig, context=context, qps=qps, burst=burst)
    except KubeConfigError as exc:
        raise WiringError(str(exc)) from exc
    if provider == "labels":
        from engine.pools.labels import LabelPoolProvider

        return ClusterHandle(
            name, api, LabelPoolProvider(api, api.api_client, label=pool_label, namespace=namespace)
        )
    if provider == "capi":
        from engine.pools.capi import ClusterApiPoolProvider

        return ClusterHandle(name, api, ClusterApiPoolProvider(api.api_client))
    raise WiringError(f'unknown pool provider "{provider}"; choose one of: {", ".join(PROVIDERS)}')


def simulated_cluster(
    name: str = "simulated", *, clock: Clock | None = None
) -> tuple[ClusterHandle, FakeCluster]:
    """The built-in simulated cluster: in memory, clearly not a real one (see bot.demo)."""
    from bot import demo

    clock = clock or SystemClock()
    fake = FakeCluster(now=clock.now)
    demo.populate(fake)
    return ClusterHandle(name, fake, SimulatedPoolProvider(fake)), fake

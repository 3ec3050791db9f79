"""Adaptive eviction concurrency meets a real API server that answers 429.

API Priority and Fairness is configured (as the admin) to give scalebot's evictions in this
test's namespace their own priority level with the smallest share and `Reject` on overflow: the
kube-apiserver itself answers 429 (no PodDisruptionBudget cause) to evictions beyond its few
seats. One drain pass with the adaptive gate, starting at 16 in flight, must shrink on them; the
refused pods are left for a retry (never an end of the node's drain). Both objects are deleted by
the fixture, also on failure.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.settings import AimdSettings
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.concurrency import AdaptiveGate, AimdController
from engine.kube.client import KubeClient
from localcluster import objects, waits
from tests.e2e import support

pytestmark = pytest.mark.e2e

PODS = 48


def test_evictions_answered_429_by_the_server_shrink_the_concurrency(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    throttled_evictions: str,
) -> None:
    group = support.group(unique_name)
    nodes = node_pool(4, labels=group)
    objects.create_deployment(admin_api, namespace, "web", PODS, node_selector=group, grace=1)
    waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=120)
    gate = AdaptiveGate(
        AimdController(AimdSettings(initial=16, minimum=2, maximum=64, window=16)), SystemClock().monotonic
    )
    # No client-side limit: the server's answers are the only brake.
    with KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig), qps=0) as kube:
        drain.cordon_nodes(kube, nodes, now=SystemClock().now())
        with ThreadPoolExecutor(max_workers=64) as pool:
            result = drain.run_pass(
                kube,
                nodes=nodes,
                state=drain.DrainState(started_at=SystemClock().now()),
                options=filters.DrainOptions.machine(),
                now=SystemClock().now(),
                executor=pool,
                rng=random.Random(1),
                gate=gate,
                clock=SystemClock().now,
            )
    refused = sum(len(pods) for pods in result.report.failed.values())
    print(
        f"\nevicted {len(result.report.evicted)}, refused {refused}, limit changes {gate.controller.history}"
    )
    assert refused > 0, "the priority level rejected some evictions with 429"
    assert ("throttled", 8) in gate.controller.history, gate.controller.history
    assert gate.controller.limit < 16
    assert not result.state.failed_nodes, "a 429 from the server ends no node's drain: it is retried"
    assert result.retry_at is not None

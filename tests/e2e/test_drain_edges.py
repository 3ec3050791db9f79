"""Drains at the edges, on the real control plane as scalebot's ServiceAccount (issue 14).

Covers: uncordon (CLI and the Slack/operations path) removes scalebot's draining taint as well as
`spec.unschedulable`; a filter refusal ends that node's drain at once, kubectl's wording, exit 1,
nothing evicted from it, while another node of the same command drains; `--grace-period -1` uses
the pod's own grace period.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.model import DRAINING_TAINT_KEY
from localcluster import builders
from tests.e2e.test_cli import scalebot

pytestmark = pytest.mark.e2e


def node_spec(admin_api: Any, node: str) -> dict[str, Any]:
    spec: dict[str, Any] = builders.get(admin_api, builders.node_path(node))["spec"]
    return spec


def draining_taints(admin_api: Any, node: str) -> list[dict[str, Any]]:
    return [t for t in node_spec(admin_api, node).get("taints") or () if t["key"] == DRAINING_TAINT_KEY]


def test_uncordon_removes_the_draining_taint(
    admin_api: Any, scalebot_kubeconfig: Path, node_pool: Callable[..., list[str]]
) -> None:
    [node] = node_pool(1)
    drained = scalebot("drain", node, "--interval", "1s", kubeconfig=scalebot_kubeconfig)
    assert drained.returncode == 0, drained.stderr
    assert len(draining_taints(admin_api, node)) == 1
    assert node_spec(admin_api, node).get("unschedulable") is True

    result = scalebot("uncordon", node, kubeconfig=scalebot_kubeconfig)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"node/{node} uncordoned"]
    assert draining_taints(admin_api, node) == []
    assert not node_spec(admin_api, node).get("unschedulable")


def test_operations_uncordon_removes_the_draining_taint(
    admin_api: Any, scalebot_kubeconfig: Path, node_pool: Callable[..., list[str]], tmp_path: Path
) -> None:
    """`/scale uncordon` goes through `Operations.cordon(unschedulable=False)`."""
    from engine.clock import SystemClock
    from engine.kube.client import KubeClient
    from engine.operations import Operations
    from engine.pools.labels import LabelPoolProvider
    from engine.runner import ClusterHandle
    from engine.store import Store

    [node] = node_pool(1)
    drained = scalebot("drain", node, "--interval", "1s", kubeconfig=scalebot_kubeconfig)
    assert drained.returncode == 0, drained.stderr
    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    try:
        provider = LabelPoolProvider(
            kube, kube.api_client, label="none.scalebot.test/pool", namespace="scalebot"
        )
        ops = Operations(
            Store(tmp_path / "ops.db"), {"e2e": ClusterHandle("e2e", kube, provider)}, {}, SystemClock()
        )
        outcome = ops.cordon("e2e", [node], by="cli:sre", unschedulable=False)
    finally:
        kube.close()

    assert outcome.ok, outcome.reply
    assert outcome.reply == f"uncordoned: {node}"
    assert draining_taints(admin_api, node) == []
    assert not node_spec(admin_api, node).get("unschedulable")

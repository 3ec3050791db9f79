"""Drains at the edges, on the real control plane as scalebot's ServiceAccount (issue 14).

Covers: uncordon (CLI and the Slack/operations path) removes scalebot's draining taint as well as
`spec.unschedulable`; a filter refusal ends that node's drain at once, kubectl's wording, exit 1,
nothing evicted from it, while another node of the same command drains; `--grace-period -1` uses
the pod's own grace period.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.domain.model import DRAINING_TAINT_KEY
from engine.domain.settings import DrainSettings
from localcluster import objects, rest, waits
from tests.e2e import support
from tests.e2e.test_cli import scalebot

pytestmark = pytest.mark.e2e


def node_spec(admin_api: Any, node: str) -> dict[str, Any]:
    spec: dict[str, Any] = rest.get(admin_api, rest.node_path(node))["spec"]
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
    from engine.domain.clock import SystemClock
    from engine.kube.client import KubeClient
    from engine.operations.runner import ClusterHandle
    from engine.operations.service import new_operations
    from engine.pools.labels import LabelPoolProvider
    from engine.store.database import Store

    [node] = node_pool(1)
    drained = scalebot("drain", node, "--interval", "1s", kubeconfig=scalebot_kubeconfig)
    assert drained.returncode == 0, drained.stderr
    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    try:
        provider = LabelPoolProvider(
            kube, kube.api_client, label="none.scalebot.test/pool", namespace="scalebot"
        )
        ops = new_operations(
            Store(tmp_path / "ops.db"), {"e2e": ClusterHandle("e2e", kube, provider)}, {}, SystemClock()
        )
        outcome = ops.cordon("e2e", [node], by="cli:sre", unschedulable=False).outcome
    finally:
        kube.close()

    assert outcome.ok, outcome.reply
    assert outcome.reply == f"uncordoned: {node}"
    assert draining_taints(admin_api, node) == []
    assert not node_spec(admin_api, node).get("unschedulable")


def pods_by_name(admin_api: Any, node: str, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in rest.pods_on_node(admin_api, node, namespace=namespace)}


def test_bare_pod_ends_that_nodes_drain_at_once_and_the_other_node_drains(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    refused_group = {"scalebot.test/group": f"{unique_name}-r"}
    free_group = {"scalebot.test/group": f"{unique_name}-f"}
    [refused] = node_pool(1, labels=refused_group)
    [free] = node_pool(1, labels=free_group)
    objects.create_deployment(admin_api, namespace, "kept", 1, node_selector=refused_group, grace=1)
    objects.create_deployment(admin_api, namespace, "moved", 1, node_selector=free_group, grace=1)
    objects.create_bare_pod(admin_api, namespace, "bare", node=refused)
    waits.wait_for_pods_running(admin_api, namespace, count=3)
    before = pods_by_name(admin_api, refused, namespace)
    assert len(before) == 2

    started = time.monotonic()
    result = scalebot("drain", refused, free, "--interval", "1s", kubeconfig=scalebot_kubeconfig, timeout=60)
    elapsed = time.monotonic() - started

    assert result.returncode == 1, result.stdout + result.stderr
    assert elapsed < 30, elapsed
    assert (
        f'error: unable to drain node "{refused}" due to error: cannot delete Pods that declare no '
        f"controller (use --force to override): {namespace}/bare, continuing command..."
    ) in result.stderr.splitlines()
    assert f"There are pending nodes to be drained:\n {refused}" in result.stderr
    assert result.stdout.splitlines()[-1] == f"node/{free} drained"
    assert f"node/{refused} drained" not in result.stdout
    # All or nothing on the refused node: both pods still there, same UIDs, none terminating.
    after = pods_by_name(admin_api, refused, namespace)
    assert sorted(after) == sorted(before)
    for name, pod in after.items():
        assert pod["metadata"]["uid"] == before[name]["metadata"]["uid"]
        assert "deletionTimestamp" not in pod["metadata"]
    assert rest.pods_on_node(admin_api, free, namespace=namespace) == []


def test_pod_under_two_budgets_ends_that_nodes_drain(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    """The API server answers 500 for a pod under two PDBs; no retry changes that (kubectl fails)."""
    refused_group = {"scalebot.test/group": f"{unique_name}-r"}
    free_group = {"scalebot.test/group": f"{unique_name}-f"}
    [refused] = node_pool(1, labels=refused_group)
    [free] = node_pool(1, labels=free_group)
    objects.create_deployment(admin_api, namespace, "guarded", 1, node_selector=refused_group, grace=1)
    objects.create_deployment(admin_api, namespace, "moved", 1, node_selector=free_group, grace=1)
    for pdb in ("one", "two"):
        support.budget(admin_api, namespace, pdb, app="guarded", max_unavailable=1, expected_pods=1)
    waits.wait_for_pods_running(admin_api, namespace, count=2)

    started = time.monotonic()
    result = scalebot("drain", refused, free, "--interval", "1s", kubeconfig=scalebot_kubeconfig, timeout=60)
    elapsed = time.monotonic() - started

    assert result.returncode == 1, result.stdout + result.stderr
    assert elapsed < 30, elapsed
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: unable to drain")]
    assert line.startswith(f'error: unable to drain node "{refused}" due to error: ')
    assert "more than one PodDisruptionBudget" in line
    assert result.stdout.splitlines()[-1] == f"node/{free} drained"
    [guarded] = rest.pods_on_node(admin_api, refused, namespace=namespace)
    assert "deletionTimestamp" not in guarded["metadata"]


def test_grace_period_minus_one_uses_the_pods_own_grace_period(
    admin_api: Any, scalebot_kubeconfig: Path, namespace: str, node_pool: Callable[..., list[str]]
) -> None:
    """kubectl: `--grace-period -1` sends no grace period, so the pod's own (here 30 s) applies."""
    [node] = node_pool(1)
    objects.create_pod_with_finalizer(admin_api, namespace, "held", node=node, grace=30)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    try:
        result = scalebot(
            "drain",
            node,
            "--force",
            "--yes",
            "--grace-period",
            "-1",
            "--timeout",
            "3s",
            "--interval",
            "1s",
            kubeconfig=scalebot_kubeconfig,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        pod = rest.get(admin_api, rest.pod_path(namespace, "held"))
        assert "deletionTimestamp" in pod["metadata"]
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    finally:
        objects.remove_finalizers(admin_api, namespace, "held")


def test_drain_order_is_per_node(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    """A node held by a budget does not hold back the critical pods of another node (Cluster API)."""
    from datetime import timedelta

    from engine.domain.clock import SystemClock
    from engine.drain import driver as drainer
    from engine.drain import filters
    from engine.kube.client import KubeClient

    held_group = {"scalebot.test/group": f"{unique_name}-h"}
    free_group = {"scalebot.test/group": f"{unique_name}-f"}
    [held] = node_pool(1, labels=held_group)
    [free] = node_pool(1, labels=free_group)
    objects.create_deployment(admin_api, namespace, "guarded", 1, node_selector=held_group, grace=1)
    support.budget(admin_api, namespace, "guarded", app="guarded", max_unavailable=0, expected_pods=1)
    objects.create_deployment(
        admin_api,
        namespace,
        "critical",
        1,
        node_selector=free_group,
        grace=1,
        priority_class="system-cluster-critical",
    )
    waits.wait_for_pods_running(admin_api, namespace, count=2)
    [critical] = rest.pods_on_node(admin_api, free, namespace=namespace)

    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    try:
        outcome = drainer.drain_nodes(
            kube,
            [held, free],
            options=filters.DrainOptions.kubectl(),
            clock=SystemClock(),
            settings=DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=6)),
        )
    finally:
        kube.close()

    assert outcome.timed_out
    assert outcome.report.later == ()
    [(_, pods)] = outcome.report.failed.items()
    assert len(pods) == 1 and pods[0].startswith(f"{namespace}/guarded-")
    left = [
        p
        for p in rest.pods_on_node(admin_api, free, namespace=namespace)
        if p["metadata"]["uid"] == critical["metadata"]["uid"] and "deletionTimestamp" not in p["metadata"]
    ]
    assert left == [], "the critical pod on the free node was evicted"


def test_a_kind_named_daemonset_in_another_group_is_an_ordinary_controller(
    admin_api: Any, scalebot_kubeconfig: Path, namespace: str, node_pool: Callable[..., list[str]]
) -> None:
    """Only apps/v1 DaemonSet pods are skipped (or refused as orphans); others are evicted."""
    [node] = node_pool(1)
    owner = {
        "apiVersion": "agents.example.com/v1",
        "kind": "DaemonSet",
        "name": "collector",
        "uid": "00000000-0000-4000-8000-000000000001",
        "controller": True,
    }
    objects.create_bare_pod(
        admin_api, namespace, "collector-x1", node=node, grace=1, owner_references=[owner]
    )
    waits.wait_for_pods_running(admin_api, namespace, count=1)

    result = scalebot("drain", node, "--interval", "1s", "--timeout", "30s", kubeconfig=scalebot_kubeconfig)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"node/{node} drained"
    assert rest.pods_on_node(admin_api, node, namespace=namespace) == []


def test_a_node_that_vanished_is_done_not_retried(
    admin_api: Any, scalebot_kubeconfig: Path, node_pool: Callable[..., list[str]]
) -> None:
    """Cluster API skips the drain of a missing Node; the other node drains and the drain ends."""
    from datetime import timedelta

    from engine.domain.clock import SystemClock
    from engine.drain import driver as drainer
    from engine.drain import filters
    from engine.kube.client import KubeClient

    gone, present = node_pool(2)
    objects.delete_nodes(admin_api, [gone])
    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    try:
        outcome = drainer.drain_nodes(
            kube,
            [gone, present],
            options=filters.DrainOptions.machine(),
            clock=SystemClock(),
            settings=DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=20)),
        )
    finally:
        kube.close()

    assert outcome.completed and not outcome.timed_out
    assert outcome.report.failed == {}
    assert outcome.report.nodes == (present,), "the vanished node is not reported as drained"
    assert node_spec(admin_api, present).get("unschedulable") is True


def test_an_empty_node_is_settled_before_it_counts_as_drained(
    admin_api: Any, scalebot_kubeconfig: Path, namespace: str, node_pool: Callable[..., list[str]]
) -> None:
    """A pod bound by `spec.nodeName` after the first (empty) pass is still found and evicted."""
    from datetime import timedelta

    from engine.domain.clock import SystemClock
    from engine.drain import driver as drainer
    from engine.drain import filters
    from engine.drain.report import DrainReport
    from engine.kube.client import KubeClient

    [node] = node_pool(1)
    passes: list[DrainReport] = []

    def bind_a_pod_after_the_first_pass(report: DrainReport) -> None:
        passes.append(report)
        if len(passes) == 1:
            assert report.completed, "the first pass found the node empty"
            objects.create_bare_pod(admin_api, namespace, "late", node=node, grace=1)

    kube = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    try:
        outcome = drainer.drain_nodes(
            kube,
            [node],
            options=filters.DrainOptions.machine(),
            clock=SystemClock(),
            settings=DrainSettings(
                interval=timedelta(seconds=1), settle=timedelta(seconds=3), timeout=timedelta(seconds=40)
            ),
            on_report=bind_a_pod_after_the_first_pass,
        )
    finally:
        kube.close()

    assert outcome.completed
    assert outcome.state.evicted_total == 1
    assert rest.pods_on_node(admin_api, node, namespace=namespace) == []

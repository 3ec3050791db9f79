"""kubectl's drain flags on the real control plane, as scalebot's ServiceAccount.

`--dry-run=server` sends each eviction with dryRun=All: the API server answers a PDB that allows
nothing with its 429 and the command exits 1, and nothing changes (the node stays schedulable, the
pods stay). `--disable-eviction` deletes what the budget would refuse, and asks like `--force`: in
a pipe without `--yes` it exits 2 and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster import objects, rest, waits
from tests.e2e import support
from tests.e2e.test_cli import scalebot, unschedulable

pytestmark = pytest.mark.e2e


def guarded_node(admin_api: Any, namespace: str, node_pool: Callable[..., list[str]]) -> str:
    group = support.group(namespace)
    [node] = node_pool(1, labels=group)
    objects.create_deployment(admin_api, namespace, "guarded", 1, node_selector=group, grace=1)
    support.budget(admin_api, namespace, "guarded", app="guarded", max_unavailable=0, expected_pods=1)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    return node


def pod_names(admin_api: Any, namespace: str) -> list[str]:
    listed = rest.get(admin_api, f"/api/v1/namespaces/{namespace}/pods")
    return sorted(p["metadata"]["name"] for p in listed["items"])


def test_server_dry_run_sends_the_evictions_and_changes_nothing(
    admin_api: Any, scalebot_kubeconfig: Path, namespace: str, node_pool: Callable[..., list[str]]
) -> None:
    node = guarded_node(admin_api, namespace, node_pool)
    before = pod_names(admin_api, namespace)

    result = scalebot("drain", node, "--dry-run=server", kubeconfig=scalebot_kubeconfig)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"node/{node} cordoned (server dry run)" in result.stdout
    assert "(server dry run): " in result.stderr
    assert "Cannot evict pod as it would violate the pod's disruption budget." in result.stderr
    assert not unschedulable(admin_api, node)
    assert pod_names(admin_api, namespace) == before


def test_disable_eviction_needs_yes_in_a_pipe_then_deletes_past_the_budget(
    admin_api: Any, scalebot_kubeconfig: Path, namespace: str, node_pool: Callable[..., list[str]]
) -> None:
    node = guarded_node(admin_api, namespace, node_pool)
    before = pod_names(admin_api, namespace)

    refused = scalebot("drain", node, "--disable-eviction", kubeconfig=scalebot_kubeconfig)

    assert refused.returncode == 2
    assert "drain --disable-eviction" in refused.stderr and "confirm with --yes" in refused.stderr
    assert not unschedulable(admin_api, node)
    assert pod_names(admin_api, namespace) == before

    done = scalebot(
        "drain",
        node,
        "--disable-eviction",
        "--yes",
        "--timeout",
        "60s",
        "--interval",
        "1s",
        kubeconfig=scalebot_kubeconfig,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert unschedulable(admin_api, node)
    assert before[0] not in pod_names(admin_api, namespace)

"""The "cluster state at failure" reader (tests/cluster_state.py) on the real control plane.

Covers: a pod the scheduler cannot place is listed as Pending, unbound, with the scheduler's reason;
the namespace's FailedScheduling event is there; the test's own nodes are listed (a cordoned one as
cordoned) and no one else's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from localcluster import objects, rest, waits
from tests.cluster_state import read_cluster_state

pytestmark = pytest.mark.e2e


def test_the_reader_says_why_a_pod_is_pending_and_which_nodes_the_test_has(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], unique_name: str
) -> None:
    ready, cordoned = node_pool(2, name=f"{unique_name}-a")

    def untainted() -> bool:
        # The node lifecycle controller lifts the not-ready taint a moment after kwok reports the
        # node Ready; until then the scheduler names that taint, not the selector, as the reason.
        return not (rest.get(admin_api, rest.node_path(ready)).get("spec") or {}).get("taints")

    waits.wait_until(untainted, 60, "the not-ready taint to leave the Ready node")
    rest.patch(admin_api, rest.node_path(cordoned), {"spec": {"unschedulable": True}})
    objects.create_deployment(admin_api, namespace, "web", 1, node_selector={"scalebot.test/nowhere": "x"})

    def unschedulable() -> bool:
        pods = rest.list_pods(admin_api, namespace)
        conditions = [c for p in pods for c in (p.get("status") or {}).get("conditions") or ()]
        return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    waits.wait_until(unschedulable, 60, "the scheduler to find web's pod unschedulable")

    def event_recorded() -> bool:
        # The scheduler's event is written by its event broadcaster after the pod's condition, so
        # it can lag the condition by a moment (seen under load).
        events = rest.list_items(admin_api, f"/api/v1/namespaces/{namespace}/events")
        return any(e.get("reason") == "FailedScheduling" for e in events)

    waits.wait_until(event_recorded, 60, "the scheduler's FailedScheduling event")
    state = read_cluster_state(admin_api, namespace, unique_name)
    lines = state.splitlines()
    [pod] = [line for line in lines if line.startswith("pod web-")]
    assert ": Pending on unbound; PodScheduled=False (Unschedulable " in pod, state
    assert "didn't match Pod's node affinity/selector" in pod, state
    assert any(" Warning FailedScheduling Pod/web-" in line for line in lines), state
    nodes = sorted(line for line in lines if line.startswith("node "))
    assert len(nodes) == 2, state
    assert nodes[0].startswith(f"node {ready}: Ready=True") and nodes[1].startswith(
        f"node {cordoned}: cordoned"
    ), state

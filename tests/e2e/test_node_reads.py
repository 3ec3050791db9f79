"""How often scalebot reads each Node, against the real API server, as scalebot's ServiceAccount.

Covers: a zero-scale of label pools reads its nodes in listings (the pool provider's, the cordon's,
each drain pass's), never one GET per node; and the cordon of many nodes, which patches each node
from one listing guarded by the resourceVersion listed, keeps a taint someone else added between
that listing and the patch: the API server answers 409, that one node is read again, and the
patch that follows carries their taint and ours. Counts are scalebot's own client's
(`KubeClient.request_counts`), which every request of its identity passes through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from engine.domain.clock import SystemClock
from engine.domain.model import DRAINING_TAINT_KEY
from engine.domain.operation import OpKind, OpState
from engine.drain.passes import cordon_nodes
from engine.kube.client import KubeClient
from localcluster import rest
from tests.e2e.support import deployment, group, operations, pools, request, run

pytestmark = pytest.mark.e2e

NODES_PER_POOL = 5
THEIR_TAINT = {"key": "example.com/maintenance", "value": "window-7", "effect": "PreferNoSchedule"}


def test_a_zero_scale_of_label_pools_reads_no_node_by_itself(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=NODES_PER_POOL, b=NODES_PER_POOL)
    nodes = [n for names in made.values() for n in names]
    deployment(admin_api, namespace, "web", len(nodes), node_selector=group(unique_name))

    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        op = run(ops, request(OpKind.ZERO))
    assert op.state is OpState.SUCCEEDED, op.error
    assert sorted(op.plan.nodes) == sorted(nodes)
    assert not [n for n in kube.list_nodes() if n.name in nodes], "every node of both pools is gone"

    counts = {k: v for k, v in kube.request_counts.items() if k[0] in ("get", "list", "watch")}
    print(
        f"\n{len(nodes)} nodes, node reads: get {counts.get(('get', 'nodes'), 0)}, "
        f"list {counts.get(('list', 'nodes'), 0)}; all reads per node {sum(counts.values()) / len(nodes):.2f}"
    )
    # Three GETs a node before (two by the pool provider's removal, one by the cordon). Listings
    # are per step and per drain pass, not per node; a GET is left only for a node someone wrote
    # between a listing and scalebot's patch (kwok's own status writes can be such a one).
    assert counts.get(("get", "nodes"), 0) <= 1, counts


def _add_their_taint(admin_api: Any, node_name: str) -> str:
    """Another writer's read-modify-write of the node's taints, guarded by the resourceVersion it
    read; the resourceVersion it wrote over. A young node's own controllers (the node lifecycle
    controller lifting `not-ready`, kwok's status) may write in between: like any such writer, it
    reads again after a 409."""
    for _ in range(10):
        node = rest.get(admin_api, rest.node_path(node_name))
        taints = [*(node["spec"].get("taints") or ()), THEIR_TAINT]
        version = str(node["metadata"]["resourceVersion"])
        body = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
        try:
            rest.patch(admin_api, rest.node_path(node_name), body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            continue
        return version
    raise AssertionError(f"node {node_name} kept changing: their taint was never written")


def test_a_cordon_meeting_a_concurrent_writer_keeps_its_taint(
    admin_api: Any, kube: KubeClient, node_pool: Callable[..., list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = node_pool(6)
    target = nodes[0]
    send = kube.transport.read
    lock = threading.Lock()
    written: list[str] = []

    def write_theirs_first(verb: str, resource: str, call: Any, *args: Any, **kwargs: Any) -> bytes:
        """Before scalebot's first patch of `target` goes out, someone else adds a taint to it."""
        if (verb, resource) == ("patch", "nodes") and args and args[0] == target:
            with lock:
                if not written:
                    written.append(_add_their_taint(admin_api, target))
        return send(verb, resource, call, *args, **kwargs)

    monkeypatch.setattr(kube.transport, "read", write_theirs_first)
    with ThreadPoolExecutor(max_workers=4) as pool:
        already = cordon_nodes(kube, nodes, now=SystemClock().now(), executor=pool)

    assert written, "the other writer wrote between the listing and the patch"
    assert already == frozenset()
    node = rest.get(admin_api, rest.node_path(target))
    keys = [t["key"] for t in node["spec"].get("taints") or ()]
    assert THEIR_TAINT["key"] in keys, "their taint survived scalebot's patch"
    assert DRAINING_TAINT_KEY in keys and node["spec"].get("unschedulable") is True
    for name in nodes:
        spec = rest.get(admin_api, rest.node_path(name))["spec"]
        assert spec.get("unschedulable") is True and DRAINING_TAINT_KEY in [t["key"] for t in spec["taints"]]
    counts = kube.request_counts
    # One listing; a write a node; each conflict cost one GET (of that node) and one write more.
    # Ours is one conflict; kwok's own status writes to a young node can add others.
    assert counts[("list", "nodes")] == 1, counts
    assert counts[("get", "nodes")] >= 1, counts
    assert counts[("patch", "nodes")] == len(nodes) + counts[("get", "nodes")], counts

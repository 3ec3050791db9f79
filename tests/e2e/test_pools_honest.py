"""Label pools say what removing a node really does, against the real control plane, as scalebot.

A label pool's Node objects are deleted only where something stops the machine behind them
(Karpenter's termination finalizer, a Cluster API Machine, kwok) or the config opts in. Here the
nodes stand for kubelet-backed VMs of a cloud: kwok still answers for their kubelets (it selects
nodes by the `type=kwok` label), but they carry no kwok annotation and a cloud providerID, exactly
what such a node shows scalebot. `plan zero` must say they will be emptied, not removed; `zero`
must delete no Node object; `wake` returns the same nodes to service.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.domain.node_removal import NodeRemoval
from engine.drain.passes import cordon_nodes
from engine.kube.client import KubeClient
from engine.pools.base import POOL_LABEL, PoolSizeError, RestoreRecord
from engine.pools.labels import EMPTIED_ANNOTATION, KWOK_ANNOTATION, LabelPoolProvider
from localcluster import objects, rest, waits
from tests.e2e.support import REPO, deployment, scalebot_args

pytestmark = pytest.mark.e2e


def cloud_nodes(
    admin_api: Any, node_pool: Callable[..., list[str]], pool: str, pool_key: str, count: int
) -> list[str]:
    """Nodes that look like cloud VMs to scalebot: no kwok annotation, an AWS providerID."""
    names = node_pool(count, name=pool, labels={pool_key: pool})
    for index, name in enumerate(names):
        rest.patch(
            admin_api,
            rest.node_path(name),
            {
                "metadata": {"annotations": {KWOK_ANNOTATION: None}},
                "spec": {"providerID": f"aws:///eu-west-1a/i-0{index:016x}"},
            },
        )
    return names


def cli(*args: str, kubeconfig: Path, db: Path, pool_key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args, *scalebot_args(kubeconfig, db, pool_key, graceful_window="5s")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_unbacked_nodes_are_emptied_not_removed_and_wake_returns_them(
    admin_api: Any,
    kube: KubeClient,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-vm"
    names = cloud_nodes(admin_api, node_pool, pool, pool_key, 2)
    uids = {n: rest.get(admin_api, rest.node_path(n))["metadata"]["uid"] for n in names}
    deployment(admin_api, namespace, "web", 2, node_selector={pool_key: pool}, grace=1)
    db = tmp_path / "scalebot.db"

    plan = cli("plan", "zero", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"pool {pool}: 2 nodes will be emptied (cordoned and drained), not removed" in plan.stdout
    assert "nothing stops the machine behind 2 of 2 node(s)" in plan.stdout
    assert f"(empty {', '.join(sorted(names))})" in plan.stdout

    zero = cli("zero", "--yes", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    assert zero.returncode == 0, zero.stdout + zero.stderr
    assert f"pool {pool}: 2 nodes were emptied (cordoned and drained), not removed" in zero.stdout
    assert "Removed 0 nodes; emptied 2 nodes without removing them" in zero.stdout
    assert "0 nodes removed; 2 nodes emptied, not removed" in zero.stdout
    for name in names:
        node = rest.get(admin_api, rest.node_path(name))
        assert node["metadata"]["uid"] == uids[name], f"{name} was deleted and re-created"
        assert node["spec"].get("unschedulable") is True
        assert EMPTIED_ANNOTATION in node["metadata"]["annotations"]
    assert not [p for p in kube.list_pods(node_names=names) if p.namespace == namespace]
    provider = LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    after = provider.get_pool(pool)
    assert (after.desired, after.nodes, after.emptied) == (0, (), tuple(sorted(names)))
    assert after.removal is NodeRemoval.EMPTY

    wake = cli("wake", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    assert wake.returncode == 0, wake.stdout + wake.stderr
    assert "2/2 nodes Ready" in wake.stdout
    for name in names:
        node = rest.get(admin_api, rest.node_path(name))
        assert node["metadata"]["uid"] == uids[name]
        assert not node["spec"].get("unschedulable")
        assert EMPTIED_ANNOTATION not in (node["metadata"].get("annotations") or {})
        assert not [t for t in node["spec"].get("taints") or () if t["key"].startswith("scalebot.io/")]
    waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=90)


def test_wake_leaves_a_node_cordoned_by_someone_else_before_the_zero_cordoned_and_names_it(
    admin_api: Any,
    kube: KubeClient,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """An emptied pool's wake undoes only scalebot's own cordons: a node a person had cordoned
    before the zero-scale comes back to the pool still cordoned (scalebot's taint and marks go),
    and the wake's final line names it with the command that uncordons it."""
    pool = f"{unique_name}-vm"
    names = cloud_nodes(admin_api, node_pool, pool, pool_key, 3)
    theirs = names[1]
    objects.cordon(admin_api, theirs)  # a person's cordon, before scalebot comes
    db = tmp_path / "scalebot.db"

    zero = cli("zero", "--yes", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    assert zero.returncode == 0, zero.stdout + zero.stderr
    assert "emptied 3 nodes without removing them" in zero.stdout, zero.stdout

    wake = cli("wake", kubeconfig=scalebot_kubeconfig, db=db, pool_key=pool_key)
    assert wake.returncode == 0, wake.stdout + wake.stderr
    assert "3/3 nodes Ready" in wake.stdout, wake.stdout
    assert (
        f"still cordoned, as they were before scalebot emptied them: {theirs} (`scalebot uncordon {theirs}`"
        in wake.stdout
    ), wake.stdout
    for name in names:
        node = rest.get(admin_api, rest.node_path(name))
        annotations = node["metadata"].get("annotations") or {}
        assert bool(node["spec"].get("unschedulable")) is (name == theirs), name
        assert not [t for t in node["spec"].get("taints") or () if t["key"].startswith("scalebot.io/")], name
        assert not [k for k in annotations if k.startswith("scalebot.io/")], (name, annotations)
    provider = LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    assert provider.get_pool(pool).nodes == tuple(sorted(names)), "all three are back in the pool"


def test_opted_in_node_deletion_deletes_but_never_fakes_a_real_node_back(
    admin_api: Any,
    kube: KubeClient,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
) -> None:
    """`node_removal: delete-node` deletes the Node objects; wake refuses to re-create Nodes that
    had a real machine behind them (a Node without a kubelet would be a lie)."""
    # The admission policy lets scalebot delete only nodes of a label pool it knows (scalebot.io/pool
    # here) that scalebot's own cordon tainted: the pool uses that key, and the nodes are cordoned as
    # a drain cordons them.
    pool = f"{unique_name}-vm"
    names = cloud_nodes(admin_api, node_pool, pool, POOL_LABEL, 2)
    provider = LabelPoolProvider(
        kube, kube.api_client, label=POOL_LABEL, namespace="scalebot", node_removal="delete-node"
    )
    before = provider.get_pool(pool)
    assert (before.removal, before.removal_reason) == (NodeRemoval.NODE, "node_removal: delete-node")
    record = RestoreRecord(2, 0, None, datetime(2026, 3, 27, 19, 0, tzinfo=UTC), "op-1")
    provider.record_restore(pool, record)
    provider.prepare_removal(pool, names)
    cordon_nodes(kube, names, now=datetime(2026, 3, 27, 19, 0, tzinfo=UTC))
    provider.remove_nodes(pool, names)
    assert not [n for n in kube.list_nodes() if n.name in names]
    with pytest.raises(PoolSizeError, match="had real machines behind them"):
        provider.set_size(pool, 2)
    assert not [n for n in kube.list_nodes() if n.name in names], "no Node object was invented"

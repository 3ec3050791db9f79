"""`scalebot drain` goes through the operations service, so the service's rules hold for the CLI as
they do for Slack: against the real control plane, as scalebot's ServiceAccount.

Covers: a drain of a node an operation holds (here a drain request awaiting approval in the same
database) is refused, one line, exit 2, nothing cordoned, the refusal audited; a drain is recorded
in the audit log (who, which nodes, how it ended); a forced drain removes what a plain drain refuses
only within the force scope it started with: a bare Pod bound to the node after the cordon is
refused, naming its owner, and stays.

The database is named by `$SCALEBOT_DB`, which the node commands read like the pool commands.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.kube.client import KubeClient
from engine.operations import policy
from engine.operations.service import new_operations
from engine.store.database import Store
from localcluster import objects, rest, waits
from tests.e2e.support import REPO, label_cluster

pytestmark = pytest.mark.e2e

CLUSTER = "default"
"""The name the CLI gives a cluster without `--context` or `--cluster`: the one its locks are under."""
OPERATOR = "U0OPERATOR"


def scalebot(*args: str, kubeconfig: Path) -> list[str]:
    return [sys.executable, "-m", "bot", *args, "--kubeconfig", str(kubeconfig)]


def environment(db: Path) -> dict[str, str]:
    """The command's environment: this checkout, and its database in `$SCALEBOT_DB`."""
    return {**os.environ, "PYTHONPATH": str(REPO), "SCALEBOT_DB": str(db)}


def run(args: list[str], db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        env=environment(db),
    )


def node_running(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], name: str, **pdb: int
) -> str:
    """A node of its own running one pod of Deployment `name`, under a budget when `pdb` says so."""
    group = {"scalebot.test/group": namespace}
    [node] = node_pool(1, labels=group)
    objects.create_deployment(admin_api, namespace, name, 1, node_selector=group, grace=1)
    if pdb:
        objects.create_pdb(admin_api, namespace, name, match_labels={"app": name}, **pdb)
        waits.wait_for_pdb_observed(admin_api, namespace, name, expected_pods=1)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    return node


def unschedulable(admin_api: Any, node: str) -> bool:
    return bool(rest.get(admin_api, rest.node_path(node))["spec"].get("unschedulable"))


def test_a_cli_drain_of_a_node_an_operation_holds_is_refused_and_audited(
    admin_api: Any,
    kube: KubeClient,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    tmp_path: Path,
) -> None:
    db = tmp_path / "scalebot.db"
    [node] = node_pool(1, labels={pool_key: "web"})
    rules = policy.ClusterPolicy(
        cluster=CLUSTER,
        users={OPERATOR: policy.Role.OPERATOR},
        approval_required_for=frozenset({"drain"}),
    )
    ops = new_operations(
        Store(db), {CLUSTER: label_cluster(kube, pool_key, name=CLUSTER)}, {CLUSTER: rules}, SystemClock()
    )
    asked = ops.request(OperationRequest(OpKind.DRAIN, Target(CLUSTER, nodes=(node,)), requested_by=OPERATOR))
    assert asked.operation is not None and asked.operation.state is OpState.AWAITING_APPROVAL, asked.reply

    result = run(scalebot("drain", node, "--yes", kubeconfig=scalebot_kubeconfig), db)

    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {node} is busy: operation {asked.operation.id} (drain, requested by "), (
        line
    )
    assert result.stdout == ""
    assert not unschedulable(admin_api, node), "nothing was cordoned"
    refused = [r for r in Store(db).audit_rows() if r.action == "refused_drain"]
    assert [(r.actor, r.cluster) for r in refused] == [(f"cli:{getpass.getuser()}", CLUSTER)]


def test_a_cli_drain_is_recorded_in_the_audit_log(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    tmp_path: Path,
) -> None:
    db = tmp_path / "scalebot.db"
    node = node_running(admin_api, namespace, node_pool, "web")

    result = run(scalebot("drain", node, "--interval", "1s", kubeconfig=scalebot_kubeconfig), db)

    assert result.returncode == 0, result.stderr
    rows = [(r.actor, r.action, r.cluster, r.detail) for r in Store(db).audit_rows()]
    user = f"cli:{getpass.getuser()}"
    assert rows == [
        (user, "drain", CLUSTER, node),
        (user, "drain_finished", CLUSTER, f"drained: {node}"),
    ]


def test_a_forced_cli_drain_does_not_force_a_bare_pod_bound_after_it_started(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    tmp_path: Path,
) -> None:
    db = tmp_path / "scalebot.db"
    # A budget that allows nothing keeps the drain going while the bare Pod lands.
    node = node_running(admin_api, namespace, node_pool, "guarded", max_unavailable=0)
    args = scalebot(
        "drain", node, "--force", "--yes", "--timeout", "60s", "--interval", "1s",
        kubeconfig=scalebot_kubeconfig,
    )  # fmt: skip
    child = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        text=True,
        env=environment(db),
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first == f"node/{node} cordoned\n", first
        # Bound by name after the cordon: the drain's force scope was fixed before it began.
        objects.create_bare_pod(admin_api, namespace, "late", node=node, grace=1)
        out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert child.returncode == 1, out + err
    refusal = "cannot delete Pods outside the approved force scope"
    assert f'error: unable to drain node "{node}" due to error: {refusal}' in err
    assert f"Pod/{namespace}/late was not in the approved force scope" in err
    names = [p["metadata"]["name"] for p in rest.pods_on_node(admin_api, node, namespace=namespace)]
    assert "late" in names, "the bare Pod was not forced"
    [started] = [r for r in Store(db).audit_rows() if r.action == "drain"]
    assert started.detail == f"{node}; forced (force) within the scope: no unit"

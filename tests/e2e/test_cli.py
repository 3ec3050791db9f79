"""The `scalebot` command line against the real control plane.

Covers: `drain` prints the kubectl-style lines and the changed condition messages and exits 0;
on a terminal it draws one live panel with the drain's figures instead, then a summary table;
`--timeout` exits 1 with the final message (a budget that allows nothing is retried until then);
`--dry-run` and `plan drain -o json` change nothing;
bad input (unknown node, invalid selector, missing context or kubeconfig, a forbidden call) is one
line naming the problem, exit 2, and nothing changed in the cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster import objects, rest, waits
from tests.e2e import support
from tests.unit.bot.cli.test_cli_live import ANSI, on_a_terminal_stdout

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def scalebot(
    *args: str, kubeconfig: Path | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "bot", *args]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    return subprocess.run(
        cmd,
        check=False,
        stdin=subprocess.DEVNULL,  # never a terminal: a destructive command must get --yes
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def unschedulable(admin_api: Any, node: str) -> bool:
    return bool(rest.get(admin_api, rest.node_path(node))["spec"].get("unschedulable"))


def node_with_two_pods(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], group_name: str
) -> str:
    """A node running two pods of a Deployment (grace 2 s), and a second node where they can go."""
    group = support.group(group_name)
    [node] = node_pool(1, labels=group)
    support.deployment(admin_api, namespace, "web", 2, node_selector=group, grace=2)
    node_pool(1, labels=group)
    return node


def test_drain_prints_progress_and_exits_zero(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    node = node_with_two_pods(admin_api, namespace, node_pool, unique_name)
    result = scalebot("drain", node, "--interval", "2s", kubeconfig=scalebot_kubeconfig)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"node/{node} cordoned"
    assert ": deletionTimestamp set, but still not removed from the Node" in result.stdout
    assert lines[-2:] == ["Drain completed", f"node/{node} drained"]


def test_drain_on_a_terminal_draws_the_live_panel_and_a_summary_table(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
) -> None:
    node = node_with_two_pods(admin_api, namespace, node_pool, unique_name)

    code, out = on_a_terminal_stdout(
        ["drain", node, "--interval", "2s", "--kubeconfig", str(scalebot_kubeconfig)],
        {**os.environ, "PYTHONPATH": str(REPO)},
    )

    assert code == 0, out
    text = ANSI.sub("", out)
    assert f"node/{node} cordoned" in text and f"node/{node} drained" in text
    assert f"drain · 1 node · {node}" in text
    assert "1/1 drained" in text and "2 evicted · 0 remaining · 2 total" in text, text
    assert "Drain not completed yet" in text, "the panel's status while the evicted pods terminate"
    assert "deletionTimestamp set" not in text, "no condition messages between the redraws"
    [row] = [line for line in text.splitlines() if line.startswith(f"│ {node}")]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[1] == "drained" and cells[3:] == ["1/1", "2", "0"], cells
    assert rest.pods_on_node(admin_api, node, namespace=namespace) == [], "the node is empty"


def test_drain_timeout_exits_one_with_the_blocking_message(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
) -> None:
    group = support.group(namespace)
    [node] = node_pool(1, labels=group)
    # A budget that allows no disruption: refused with 429, retried until the timeout.
    objects.create_deployment(admin_api, namespace, "guarded", 1, node_selector=group, grace=1)
    support.budget(admin_api, namespace, "guarded", app="guarded", max_unavailable=0, expected_pods=1)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    result = scalebot("drain", node, "--timeout", "3s", "--interval", "1s", kubeconfig=scalebot_kubeconfig)
    assert result.returncode == 1
    assert "error: drain did not complete within 3s:" in result.stderr
    assert ": cannot evict pod as it would violate the pod's disruption budget." in result.stderr
    assert "guarded needs 1 healthy pods and has 1 currently" in result.stderr


def test_dry_run_and_plan_change_nothing(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
) -> None:
    [node] = node_pool(1)
    objects.create_bare_pod(admin_api, namespace, "bare", node=node)
    dry = scalebot("drain", node, "--dry-run", kubeconfig=scalebot_kubeconfig)
    assert dry.returncode == 0 and "Nothing was changed (plan only)." in dry.stdout
    plan = scalebot("plan", "drain", node, "-o", "json", kubeconfig=scalebot_kubeconfig)
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    assert data["can_complete"] is False
    assert {
        "pod": f"{namespace}/bare",
        "node": node,
        "action": "block",
        "reason": "Pods that declare no controller (use --force to override)",
    } in data["pods"]
    assert not unschedulable(admin_api, node)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("drain", "no-such-node"), "error: node(s) not found: no-such-node; known nodes:"),
        (("drain", "-l", "a in (b"), 'error: invalid selector "a in (b":'),
        (
            ("drain", "-l", "scalebot.test/none=here"),
            'error: no node matches the selector "scalebot.test/none=here"',
        ),
        (("drain", "--timeout", "soon", "x"), 'error: --timeout: invalid duration "soon"'),
        (("cordon",), "error: name at least one node, or select nodes with -l/--selector"),
    ],
    ids=["unknown-node", "bad-selector", "empty-selection", "bad-duration", "no-node"],
)
def test_bad_input_is_one_line_exit_two(
    scalebot_kubeconfig: Path, args: tuple[str, ...], expected: str
) -> None:
    result = scalebot(*args, kubeconfig=scalebot_kubeconfig)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(expected), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_context_and_kubeconfig_are_named(scalebot_kubeconfig: Path, tmp_path: Path) -> None:
    result = scalebot("cordon", "x", "--context", "nope", kubeconfig=scalebot_kubeconfig)
    assert result.returncode == 2 and "nope" in result.stderr and len(result.stderr.splitlines()) == 1
    missing = scalebot("cordon", "x", kubeconfig=tmp_path / "absent.yaml")
    assert missing.returncode == 2 and "absent.yaml" in missing.stderr


def test_forbidden_call_is_reported_and_changes_nothing(
    admin_api: Any,
    control_plane: Any,
    node_pool: Callable[..., list[str]],
    tmp_path: Path,
) -> None:
    [node] = node_pool(1)
    # An identity with only the built-in `view` role (no access to nodes): RBAC must refuse the cordon.
    reader = tmp_path / "reader.kubeconfig"
    reader.write_text(control_plane.scalebot_kubeconfig.read_text())
    rest.create(admin_api, "/api/v1/namespaces/scalebot/serviceaccounts", {"metadata": {"name": "reader"}})
    rest.create(
        admin_api,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "scalebot-e2e-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "scalebot"}],
        },
    )
    token = rest.create(
        admin_api,
        "/api/v1/namespaces/scalebot/serviceaccounts/reader/token",
        {"spec": {"expirationSeconds": 600}},
    )["status"]["token"]
    text = reader.read_text()
    old_token = next(
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("token:")
    )
    reader.write_text(text.replace(old_token, token))
    try:
        result = scalebot("cordon", node, kubeconfig=reader)
        assert result.returncode == 1, "refused by the cluster: kubectl's exit 1"
        assert result.stderr.startswith("error: forbidden:") and "manifests/base/rbac.yaml" in result.stderr
        assert not unschedulable(admin_api, node)
    finally:
        rest.delete(admin_api, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/scalebot-e2e-reader")
        rest.delete(admin_api, "/api/v1/namespaces/scalebot/serviceaccounts/reader")


def test_names_complete_from_the_real_cluster_as_scalebots_serviceaccount(
    scalebot_kubeconfig: Path, node_pool: Callable[..., list[str]], unique_name: str
) -> None:
    """`scalebot __complete` (what `drain <TAB>` and `zero <TAB>` ask) lists the cluster's nodes and
    its label pools through scalebot's own client, filtered by what is typed."""
    pool = f"{unique_name}-cpl"
    nodes = node_pool(2, name=pool)

    listed = scalebot("__complete", "nodes", "--prefix", pool, kubeconfig=scalebot_kubeconfig)
    pools = scalebot("__complete", "pools", "--prefix", unique_name, kubeconfig=scalebot_kubeconfig)

    assert listed.returncode == pools.returncode == 0, listed.stderr + pools.stderr
    assert listed.stdout.split() == sorted(nodes)
    assert pool in pools.stdout.split()

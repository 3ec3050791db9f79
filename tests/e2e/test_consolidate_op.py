"""Consolidation as an operation, against the real control plane, as scalebot's ServiceAccount.

Four 4-CPU nodes each run two 900m pods of one Deployment (half empty); a PodDisruptionBudget
(minAvailable 7 of 8) lets one pod go at a time. Consolidation removes two nodes, one after the
other, through the label pool provider: every pod is Running afterwards on the two that stay, and
every eviction went through the eviction API (PDB respected: the budget is healthy at the end and
no pod was deleted by force).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from bot.slack.blocks.operations import ACTION_ADVISED_SCALE, ACTION_APPROVE
from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.domain.settings import ConsolidationPolicy
from engine.kube.client import KubeClient
from engine.operations.flows import NEXT
from engine.operations.policy import ClusterPolicy, Role
from engine.operations.service import new_operations
from engine.operations.steps import consolidate
from engine.store.database import Store
from localcluster import bodies, objects, rest, waits
from tests.e2e import support
from tests.e2e.test_cli import scalebot
from tests.e2e.test_slack_run import APPROVER, CHANNEL, OPERATOR, SECRET, scalebot_run
from tests.slack.harness import Signer, SlackApiServer, all_text, buttons_of, post

pytestmark = pytest.mark.e2e

NODES = 4
REPLICAS = 8


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.close()


def half_empty_pool(
    admin_api: Any, namespace: str, node_pool: Callable[..., list[str]], pool: str, pool_key: str
) -> list[str]:
    """4 nodes, 8 pods of 900m (2 per node), a PDB that lets one pod go at a time.

    The scheduler packs (two nodes would take all eight pods), so the pods are placed two at a time
    with every other node cordoned: the half-empty layout a scale-down is for.
    """
    nodes = node_pool(NODES, name=pool, labels={pool_key: pool}, cpu="4")
    for node in nodes[1:]:
        objects.cordon(admin_api, node)
    support.deployment(admin_api, namespace, "web", 2, node_selector={pool_key: pool}, cpu="900m", grace=1)
    for previous, node in itertools.pairwise(nodes):
        objects.cordon(admin_api, previous)
        objects.uncordon(admin_api, node)
        replicas = 2 * (nodes.index(node) + 1)
        rest.patch(
            admin_api,
            f"/apis/apps/v1/namespaces/{namespace}/deployments/web",
            {"spec": {"replicas": replicas}},
        )
        waits.wait_for_deployment_available(admin_api, namespace, "web")
    for node in nodes:
        objects.uncordon(admin_api, node)
    objects.create_pdb(admin_api, namespace, "web", match_labels={"app": "web"}, min_available=REPLICAS - 1)
    waits.wait_for_pdb_observed(admin_api, namespace, "web", expected_pods=REPLICAS)
    assert sorted(pods_per_node(admin_api, namespace).values()) == [2] * NODES
    return nodes


def pods_per_node(admin_api: Any, namespace: str) -> Counter[str]:
    pods = rest.list_pods(admin_api, namespace)
    return Counter(
        p["spec"].get("nodeName", "") for p in pods if p["metadata"].get("deletionTimestamp") is None
    )


def assert_consolidated(admin_api: Any, namespace: str, nodes: list[str]) -> list[str]:
    """Two nodes left, every pod Running on them, the PDB healthy; returns the removed nodes."""
    remaining = [n for n in nodes if rest.get_or_none(admin_api, rest.node_path(n)) is not None]
    assert len(remaining) == NODES - 2, remaining
    waits.wait_for_deployment_available(admin_api, namespace, "web")
    pods = [p for p in rest.list_pods(admin_api, namespace) if p["metadata"].get("deletionTimestamp") is None]
    assert len(pods) == REPLICAS
    assert all(waits.pod_is_running(p) for p in pods), [p["status"].get("phase") for p in pods]
    assert {p["spec"]["nodeName"] for p in pods} <= set(remaining)
    pdb = rest.get(admin_api, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/web")
    assert pdb["status"]["currentHealthy"] >= pdb["status"]["desiredHealthy"] == REPLICAS - 1
    return sorted(set(nodes) - set(remaining))


def test_cli_consolidate_removes_two_of_four_half_empty_nodes(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool, pool_key = f"{unique_name}-c", f"{unique_name}.scalebot.test/pool"
    nodes = half_empty_pool(admin_api, namespace, node_pool, pool, pool_key)

    result = scalebot(
        "consolidate", pool, "--provider", "labels", "--pool-label", pool_key, "--node-grace", "0s",
        "--db", str(tmp_path / "db.sqlite"),
        kubeconfig=scalebot_kubeconfig, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    removed = assert_consolidated(admin_api, namespace, nodes)
    assert f"2 of 2 nodes removed: {', '.join(removed)}" in result.stdout
    assert "force-deleted" not in result.stdout


def test_cli_consolidate_never_drains_or_removes_a_node_cluster_autoscaler_is_deleting(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    """cluster-autoscaler tainted a Ready, uncordoned node ToBeDeletedByClusterAutoscaler (as it does
    with --cordon-node-before-terminating=false): scalebot plans around it, says why, touches nothing on it.

    Its one small pod makes it the cheapest node to empty, so without the rule it would go first."""
    pool, pool_key = f"{unique_name}-t", f"{unique_name}.scalebot.test/pool"
    tainted, first, second = node_pool(3, name=pool, labels={pool_key: pool}, cpu="4")
    selector = {pool_key: pool}
    # One Deployment per node, placed with the other two nodes cordoned.
    for node, deployment, cpu in ((tainted, "small", "100m"), (first, "web-a", "1"), (second, "web-b", "1")):
        for other in {tainted, first, second} - {node}:
            objects.cordon(admin_api, other)
        objects.uncordon(admin_api, node)
        objects.create_deployment(
            admin_api, namespace, deployment, 1, node_selector=selector, cpu=cpu, grace=1
        )
        waits.wait_for_deployment_available(admin_api, namespace, deployment)
    for node in (tainted, first, second):
        objects.uncordon(admin_api, node)
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": str(int(time.time())), "effect": "NoSchedule"}
    rest.patch(admin_api, rest.node_path(tainted), {"spec": {"taints": [taint]}})
    on_tainted = [
        (p["metadata"]["name"], p["metadata"]["uid"]) for p in rest.pods_on_node(admin_api, tainted)
    ]
    assert [name for name, _ in on_tainted if name.startswith("small-")], on_tainted

    db = tmp_path / "db.sqlite"
    result = scalebot(
        "consolidate", pool, "--provider", "labels", "--pool-label", pool_key, "--node-grace", "0s",
        "--allow-alongside-autoscaler", "--db", str(db),
        kubeconfig=scalebot_kubeconfig, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    why = "cluster-autoscaler is deleting it (taint ToBeDeletedByClusterAutoscaler)"
    [operation] = Store(str(db)).list_operations()
    assert (f"node {tainted}", why) in operation.plan.blockers
    assert tainted not in operation.plan.nodes
    assert "1 of 1 nodes removed" in result.stdout
    # The tainted node: still there, never cordoned or tainted by scalebot, its pod never evicted.
    node = rest.get(admin_api, rest.node_path(tainted))
    assert not node["spec"].get("unschedulable")
    assert [t["key"] for t in node["spec"]["taints"]] == ["ToBeDeletedByClusterAutoscaler"]
    after = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in rest.pods_on_node(admin_api, tainted)]
    assert after == on_tainted


def test_cli_consolidate_refuses_the_simulated_cluster_and_changes_nothing(tmp_path: Path) -> None:
    result = scalebot("consolidate", "--simulated", "--node-grace", "0s")
    assert result.returncode != 0
    assert "the simulated cluster cannot be consolidated" in result.stderr


def test_slack_consolidate_card_approval_and_progress_remove_two_of_four_nodes(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
    slack: SlackApiServer,
) -> None:
    pool, pool_key = f"{unique_name}-c", f"{unique_name}.scalebot.test/pool"
    nodes = half_empty_pool(admin_api, namespace, node_pool, pool, pool_key)
    cluster = {
        "kubeconfig": str(scalebot_kubeconfig),
        "context": "",
        "provider": "labels",
        "pool_label": pool_key,
        "default_channels": [CHANNEL],
        "policy": {"users": {OPERATOR: "operator", APPROVER: "approver"}},
        "consolidation": {"node_grace": "0s"},
    }
    signer = Signer(SECRET)
    with scalebot_run(slack, tmp_path, {"dev": cluster}) as (url, _):
        body = signer.slash_command(
            "consolidate", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
        )
        assert post(f"{url}/slack/events", body, signer.headers(body)).status == 200
        # The default policy asks approval for a scale-down, which a consolidation is.
        card = slack.wait_for_call("chat.postMessage", lambda c: ACTION_APPROVE in str(c.body), timeout=60)
        text = all_text(card)
        assert "Consolidation" in text and "Where their pods go" in text
        planned = [n for n in nodes if f"{n}: {namespace}/web-" in text]
        assert len(planned) == 2, text
        assert "Nodes that stay, and why" in text
        [approve] = [b for b in buttons_of(card) if b["action_id"] == ACTION_APPROVE]
        card_ts = card.response["ts"]
        click = signer.block_actions(
            ACTION_APPROVE,
            approve["value"],
            user_id=APPROVER,
            channel_id=CHANNEL,
            message_ts=card_ts,
            response_url=slack.response_url("ok"),
        )
        assert post(f"{url}/slack/events", click, signer.headers(click)).status == 200
        final = slack.wait_for_call(
            "chat.postMessage",
            lambda c: c.body.get("thread_ts") == card_ts and "Completed" in all_text(c),
            timeout=240,
        )
    removed = assert_consolidated(admin_api, namespace, nodes)
    assert removed == sorted(planned)
    assert f"2 of 2 nodes removed: {', '.join(planned)}" in all_text(final)
    thread = [all_text(c) for c in slack.calls_to("chat.postMessage") if c.body.get("thread_ts") == card_ts]
    assert not any("Removed " in text for text in thread[:-1]), "each node removed edits the card"


def test_slack_advise_names_the_least_waste_pool_and_its_click_requests_that_scale_up(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
    slack: SlackApiServer,
) -> None:
    pool_key = f"{unique_name}.scalebot.test/pool"
    small, big = f"{unique_name}-small", f"{unique_name}-big"
    group = support.group(unique_name)
    nodes = node_pool(1, name=small, labels={**group, pool_key: small}, cpu="2", memory="4Gi")
    nodes += node_pool(1, name=big, labels={**group, pool_key: big}, cpu="8", memory="32Gi")
    for node in nodes:  # full, as far as the scheduler is concerned: only a new node would help
        objects.cordon(admin_api, node)
    objects.create_deployment(admin_api, namespace, "web", 1, node_selector=group, cpu="1500m", memory="1Gi")

    def unschedulable() -> bool:
        pods = rest.list_pods(admin_api, namespace)
        return bool(pods) and any(
            c.get("reason") == "Unschedulable" for c in (pods[0].get("status") or {}).get("conditions") or ()
        )

    waits.wait_until(unschedulable, 30, "the pod to be marked Unschedulable")
    cluster = {
        "kubeconfig": str(scalebot_kubeconfig),
        "context": "",
        "provider": "labels",
        "pool_label": pool_key,
        "default_channels": [CHANNEL],
        "policy": {
            "users": {OPERATOR: "operator", APPROVER: "approver"},
            "approval_required_for": ["scale_up"],
        },
    }
    signer = Signer(SECRET)
    with scalebot_run(slack, tmp_path, {"dev": cluster}) as (url, _):
        body = signer.slash_command(
            "advise", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("advise")
        )
        assert post(f"{url}/slack/events", body, signer.headers(body)).status == 200
        shown = slack.wait_for_call("response_url", lambda c: "/response/advise" in c.path, timeout=60)
        text = all_text(shown)
        assert shown.body.get("response_type", "ephemeral") == "ephemeral"
        assert f"Grow pool {small} by 1 node" in text
        # cluster-autoscaler's own lines, least waste first.
        assert text.index(f"Expanding Node Group {small} would waste 25.00% CPU, 75.00% Memory") < text.index(
            f"Expanding Node Group {big} would waste 81.25% CPU"
        )
        assert "Nodes at or under 50% of allocatable requested" in text
        [button] = [b for b in buttons_of(shown) if b["action_id"] == ACTION_ADVISED_SCALE]
        click = signer.block_actions(
            ACTION_ADVISED_SCALE,
            button["value"],
            user_id=OPERATOR,
            channel_id=CHANNEL,
            message_ts="",
            response_url=slack.response_url("click"),
        )
        assert post(f"{url}/slack/events", click, signer.headers(click)).status == 200
        # An ordinary scale request by the clicker: the policy wants approval for a scale-up.
        card = slack.wait_for_call("chat.postMessage", lambda c: ACTION_APPROVE in str(c.body), timeout=60)
    assert f"pool {small} 1 → 2" in all_text(card)
    assert card.body["channel"] == CHANNEL


def test_a_node_whose_pods_no_longer_fit_when_its_turn_comes_is_skipped_not_cordoned(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    pool, pool_key = f"{unique_name}-c", f"{unique_name}.scalebot.test/pool"
    nodes = half_empty_pool(admin_api, namespace, node_pool, pool, pool_key)
    handle = wiring.connect_cluster(
        "dev",
        kubeconfig=str(scalebot_kubeconfig),
        context="",
        provider="labels",
        options={"pool_label": pool_key},
    )
    rules = ClusterPolicy(
        cluster="dev",
        users={"U0OPS": Role.OPERATOR},
        consolidation=ConsolidationPolicy(node_grace=timedelta(0)),
    )
    ops = new_operations(Store(str(tmp_path / "db.sqlite")), {"dev": handle}, {"dev": rules}, SystemClock())
    try:
        outcome = ops.request(
            OperationRequest(kind=OpKind.CONSOLIDATE, target=Target(cluster="dev"), requested_by="U0OPS")
        )
        assert outcome.ok and outcome.operation is not None
        op = outcome.operation
        assert len(op.plan.nodes) == 2
        # After the plan (and its approval), the nodes that stay fill up: the moves no longer fit.
        for index, node in enumerate(sorted(set(nodes) - set(op.plan.nodes))):
            filler = {
                "metadata": {"name": f"filler-{index}"},
                "spec": bodies.pod_spec(node=node, cpu="2", grace=0),
            }
            rest.create(admin_api, rest.pod_path(namespace), filler)
        running = replace(op, state=OpState.RUNNING, step="fit")
        first = consolidate.step_fit(ops.runner, running, handle)
        node = op.plan.nodes[0]
        assert first.progress is not None
        skipped = first.progress.consolidation.skipped
        assert first.then == "node_skipped" and list(skipped) == [node]
        assert "no longer fits on the nodes that stay" in skipped[node]
        assert first.events[0][1].startswith(f"Skipped {node}: ")
        # The skipped node stays, so it is room again: the second node's pods fit there now.
        second = consolidate.step_fit(ops.runner, replace(running, progress=first.progress), handle)
        assert second.progress is not None
        assert second.then == NEXT and second.progress.consolidation.current == op.plan.nodes[1]
        assert f"still fit on {node}" in second.events[0][1]
        final = consolidate.step_consolidated(ops.runner, replace(running, progress=first.progress), handle)
        assert final.state is OpState.SUCCEEDED
        assert f"0 of 2 nodes removed; 0 Pods evicted; skipped: {node} (" in final.events[-1][1]
        # Nothing was cordoned, drained or removed.
        assert all(exists_uncordoned(admin_api, n) for n in nodes)
        assert sorted(pods_per_node(admin_api, namespace).values()) == [2, 2, 3, 3]
    finally:
        ops.runner.stop(timeout=10)
        if isinstance(handle.api, KubeClient):
            handle.api.close()


def exists_uncordoned(admin_api: Any, node: str) -> bool:
    found = rest.get_or_none(admin_api, rest.node_path(node))
    return found is not None and not found["spec"].get("unschedulable")

"""The drain engine against the real API server, as scalebot's ServiceAccount (shipped RBAC).

Covers: a PDB that allows nothing (reported with the server's reason, completes once relaxed);
DaemonSet and mirror pods stay; a finalizer keeps a pod under "deletionTimestamp" until removed;
a bare pod blocks without force and goes with it; a pod under two PDBs is reported and retried
only once per pass; a terminating namespace; an unreachable node (1 s grace); 20 nodes at once;
a drain restarted mid-way ends in the same state; decisions equal `kubectl drain --dry-run=server`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.report import DrainReport
from engine.kube.client import KubeClient
from localcluster import faults, objects, rest, waits
from tests.e2e import support

pytestmark = pytest.mark.e2e

FAST = DrainSettings(
    interval=timedelta(seconds=2), settle=timedelta(seconds=1), timeout=timedelta(seconds=90)
)


def run_drain(
    kube: KubeClient,
    nodes: list[str],
    options: filters.DrainOptions,
    settings: DrainSettings = FAST,
    until: Callable[[DrainReport], None] | None = None,
) -> tuple[drainer.DrainOutcome, list[DrainReport]]:
    reports: list[DrainReport] = []

    def seen(report: DrainReport) -> None:
        reports.append(report)
        if until is not None:
            until(report)

    outcome = drainer.drain_nodes(
        kube, nodes, options=options, clock=SystemClock(), settings=settings, on_report=seen
    )
    return outcome, reports


@pytest.fixture
def group(unique_name: str) -> dict[str, str]:
    """A label shared by the nodes of one test (drained and spare), so its pods stay on them."""
    return support.group(unique_name)


def deployment_on(
    admin_api: Any, namespace: str, name: str, replicas: int, group: dict[str, str], *, grace: int = 2
) -> None:
    support.deployment(admin_api, namespace, name, replicas, node_selector=group, grace=grace)


def test_pdb_allowing_nothing_reports_server_reason_then_completes_when_relaxed(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
    eviction_route: str,
) -> None:
    """Also with the evictions sent by a worker process: the same TLS, token and answers."""
    nodes = node_pool(2, labels=group)
    deployment_on(admin_api, namespace, "web", 2, group)
    support.budget(admin_api, namespace, "web-pdb", app="web", min_available=2)
    spare = node_pool(2, labels=group)  # somewhere for the replacements to go
    assert spare

    def relax_once_blocked(report: DrainReport) -> None:
        if any("web-pdb" in key for key in report.failed):
            rest.patch(
                admin_api,
                f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/web-pdb",
                {"spec": {"minAvailable": 1}},
            )

    outcome, reports = run_drain(kube, nodes, filters.DrainOptions.machine(), until=relax_once_blocked)
    blocked = next(r for r in reports if r.failed)
    message = blocked.condition_message("legacy")
    assert (
        "* Pods with eviction failed:\n  * Cannot evict pod as it would violate the pod's disruption budget. "
        "The disruption budget web-pdb needs 2 healthy pods and has 2 currently: " in message
    )
    assert outcome.completed, outcome.report.condition_message()
    assert rest.list_pods(admin_api, namespace) and all(
        p["spec"].get("nodeName") not in nodes for p in rest.list_pods(admin_api, namespace)
    ), "replacements never land on the cordoned nodes"


def test_daemonset_and_mirror_pods_stay_and_bare_pod_needs_force(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    [node] = node_pool(1, labels=group)
    objects.create_daemonset(admin_api, namespace, "agent", node_selector=group)
    objects.create_mirror_like_pod(admin_api, namespace, "static-web", node=node)
    objects.create_bare_pod(admin_api, namespace, "bare", node=node, grace=1)
    waits.wait_for_pods_running(admin_api, namespace, count=3)

    outcome, _ = run_drain(
        kube,
        [node],
        filters.DrainOptions.kubectl(ignore_daemonsets=True),
        DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=5)),
    )
    # No retry changes a filter's refusal: the node's drain ends at once, like kubectl's.
    assert not outcome.timed_out and not outcome.completed
    assert outcome.report.failed == {
        "cannot delete Pods that declare no controller (use --force to override)": (f"{namespace}/bare",)
    }
    assert outcome.failed_nodes == {
        node: f"cannot delete Pods that declare no controller (use --force to override): {namespace}/bare"
    }
    assert len(rest.list_pods(admin_api, namespace)) == 3, "kubectl semantics: nothing on the node evicted"

    forced, _ = run_drain(kube, [node], filters.DrainOptions.kubectl(ignore_daemonsets=True, force=True))
    assert forced.completed
    names = sorted(p["metadata"]["name"] for p in rest.list_pods(admin_api, namespace))
    assert names[0].startswith("agent-") and names[1:] == ["static-web"]


def test_finalizer_keeps_pod_under_deletion_timestamp_until_removed(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    [node] = node_pool(1, labels=group)
    objects.create_pod_with_finalizer(admin_api, namespace, "held", node=node, grace=1, owner_references=())
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    options = filters.DrainOptions.machine()
    state = drain.DrainState(started_at=SystemClock().now())
    with ThreadPoolExecutor(4) as pool:
        first = drain.run_pass(
            kube, nodes=[node], state=state, options=options, now=SystemClock().now(), executor=pool
        )
        assert first.report.evicted == (f"{namespace}/held",)
        waits.wait_until(
            lambda: rest.get(admin_api, rest.pod_path(namespace, "held"))["metadata"].get(
                "deletionTimestamp"
            ),
            10,
            "deletionTimestamp set",
        )
        waits.assert_stays(
            lambda: rest.get_or_none(admin_api, rest.pod_path(namespace, "held")) is not None,
            3,
            "a pod with a finalizer outlives its grace period",
        )
        later = drain.run_pass(
            kube, nodes=[node], state=first.state, options=options, now=SystemClock().now(), executor=pool
        )
        assert later.report.terminating == (f"{namespace}/held",)
        message = later.report.condition_message()
        assert message.startswith("Drain not completed yet (started at ")
        assert message.endswith(
            f"):\n* Pod {namespace}/held: deletionTimestamp set, but still not removed from the Node"
        )
        assert later.report.evicted == (), "a terminating pod is never evicted twice"
    objects.remove_finalizers(admin_api, namespace, "held")
    outcome, _ = run_drain(kube, [node], options)
    assert outcome.completed


def test_pod_under_two_pdbs_is_reported_and_ends_that_nodes_drain(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    nodes = node_pool(1, labels=group)
    deployment_on(admin_api, namespace, "ledger", 1, group)
    for name in ("ledger-a", "ledger-b"):
        support.budget(admin_api, namespace, name, app="ledger", max_unavailable=1)
    settings = DrainSettings(interval=timedelta(seconds=2), timeout=timedelta(seconds=8))
    outcome, _ = run_drain(kube, nodes, filters.DrainOptions.machine(), settings)
    # The 500 is final (kubectl fails the node): reported once, never waited out to the timeout.
    assert not outcome.timed_out and not outcome.completed
    [(node, reason)] = outcome.failed_nodes.items()
    assert node == nodes[0] and "more than one PodDisruptionBudget" in reason
    [(key, pods)] = outcome.report.failed.items()
    assert (
        key
        == "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )
    assert len(pods) == 1 and pods[0].startswith(f"{namespace}/ledger-")
    assert kube.request_counts[("create", "pods/eviction")] == 1, "a 500 for two budgets is not retried"


def test_terminating_namespace_is_waited_for_not_failed(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    [node] = node_pool(1, labels=group)
    objects.create_pod_with_finalizer(admin_api, namespace, "stuck", node=node, grace=1)
    waits.wait_for_pods_running(admin_api, namespace, count=1)
    faults.make_namespace_terminating(admin_api, namespace)
    settings = DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=4))
    outcome, _ = run_drain(kube, [node], filters.DrainOptions.machine(), settings)
    # The namespace controller already deletes the pod; the finalizer keeps it: terminating, not failed.
    assert outcome.report.terminating == (f"{namespace}/stuck",)
    assert not outcome.report.failed
    faults.release_namespace(admin_api, namespace)


def test_unreachable_node_is_drained_with_one_second_grace(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    nodes = node_pool(1, labels=group)
    deployment_on(admin_api, namespace, "web", 1, group, grace=600)
    node_pool(1, labels=group)  # room for the replacement (created after, so the pod is on nodes[0])
    faults.make_node_unreachable(admin_api, nodes[0])
    waits.wait_until(lambda: kube.get_node(nodes[0]).is_unreachable, 20, "Ready=Unknown seen by scalebot")
    state = drain.DrainState(started_at=SystemClock().now())
    with ThreadPoolExecutor(2) as pool:
        result = drain.run_pass(
            kube,
            nodes=nodes,
            state=state,
            options=filters.DrainOptions.machine(),
            now=SystemClock().now(),
            executor=pool,
        )
    [evicted] = result.report.evicted
    pod = rest.get(admin_api, rest.pod_path(namespace, evicted.split("/")[1]))
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 1
    # Nothing deletes pods on a lost node; once deleted more than 1 s ago they no longer hold the drain.
    outcome, _ = run_drain(kube, nodes, filters.DrainOptions.machine())
    assert outcome.completed
    # ... but they may still run on the lost node: the report names them.
    assert outcome.report.left_unreachable == (evicted,)
    assert outcome.report.summary_line() == (
        f"Drain completed (Pod {evicted} left terminating on an unreachable node, not waited for)"
    )


def test_twenty_nodes_drain_at_once_with_one_listing_per_pass(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    nodes = node_pool(20, labels=group)
    deployment_on(admin_api, namespace, "fleet", 40, group)
    node_pool(4, labels=group)  # where replacements go
    outcome, reports = run_drain(kube, nodes, filters.DrainOptions.machine())
    assert outcome.completed
    assert outcome.state.evicted_total == 40
    passes = kube.request_counts[("list", "pods")]
    assert passes <= len(reports) + 10, "one listing per pass, not one per node"
    assert kube.request_counts[("create", "pods/eviction")] == 40, "one eviction per pod"


def test_restarted_drain_ends_in_the_same_state(
    admin_api: Any,
    kube: KubeClient,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
) -> None:
    nodes = node_pool(3, labels=group)
    deployment_on(admin_api, namespace, "web", 6, group, grace=3)
    node_pool(2, labels=group)
    already = {nodes[0]}
    objects.cordon(admin_api, nodes[0])
    state = drain.DrainState(
        started_at=SystemClock().now(),
        already_cordoned=drain.cordon_nodes(kube, nodes, now=SystemClock().now()),
    )
    assert state.already_cordoned == already
    with ThreadPoolExecutor(4) as pool:
        first = drain.run_pass(
            kube,
            nodes=nodes,
            state=state,
            options=filters.DrainOptions.machine(),
            now=SystemClock().now(),
            executor=pool,
        )
    saved = json.loads(json.dumps(first.state.to_json()))  # the process dies here; SQLite kept this
    fresh = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    outcome = drainer.drain_nodes(
        fresh,
        nodes,
        options=filters.DrainOptions.machine(),
        clock=SystemClock(),
        settings=FAST,
        state=drain.DrainState.from_json(saved),
    )
    fresh.close()
    assert outcome.completed
    assert outcome.state.already_cordoned == already
    assert all(p["spec"].get("nodeName") not in nodes for p in rest.list_pods(admin_api, namespace))
    assert fresh.request_counts[("create", "pods/eviction")] == 0 or outcome.state.evicted_total == 6


@pytest.mark.parametrize("force", [False, True], ids=["no-force", "force"])
def test_decisions_match_kubectl_dry_run_server(
    admin_api: Any,
    kube: KubeClient,
    control_plane: Any,
    namespace: str,
    node_pool: Callable[..., list[str]],
    group: dict[str, str],
    force: bool,
) -> None:
    nodes = node_pool(2, labels=group)
    deployment_on(admin_api, namespace, "web", 4, group)
    objects.create_daemonset(admin_api, namespace, "agent", node_selector=group)
    objects.create_bare_pod(admin_api, namespace, "bare", node=nodes[0])
    objects.create_mirror_like_pod(admin_api, namespace, "static", node=nodes[1])
    waits.wait_for_pods_running(admin_api, namespace, count=8)
    options = filters.DrainOptions.kubectl(force=force, ignore_daemonsets=True, delete_emptydir_data=True)
    ctx = filters.DrainContext(
        options=options, now=SystemClock().now(), daemonset_keys=kube.list_daemonset_keys()
    )
    ours: dict[str, set[str]] = {}
    for node in nodes:
        classified = filters.classify_pods(kube.list_pods(node_names=[node]), ctx)
        refused = filters.blocked_nodes(classified)
        evict = {
            p.key
            for p, v in classified
            if v.action in (filters.Action.EVICT, filters.Action.DELETE) and node not in refused
        }
        ours[node] = {k for k in evict if k.startswith(namespace + "/")}
    for node in nodes:
        args = ["drain", node, "--dry-run=server", "--ignore-daemonsets", "--delete-emptydir-data"]
        if force:
            args.append("--force")
        result = control_plane.kubectl(*args, identity="admin")
        theirs = {
            f"{ns}/{name}"
            for ns, name in re.findall(
                r"evicting pod (\S+)/(\S+) \(server dry run\)", result.stdout + result.stderr
            )
        }
        theirs = {k for k in theirs if k.startswith(namespace + "/")}
        assert ours[node] == theirs, (node, result.stdout, result.stderr)
        kubectl_refused = "cannot delete" in result.stderr
        assert kubectl_refused == (not force and node == nodes[0]), result.stderr

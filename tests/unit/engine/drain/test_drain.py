"""The drain pass and the drain loop, on the in-memory cluster and virtual time.

Covers: cordon-first and "already cordoned" memory, one pod listing per pass, PDB refusals
grouped by the server's reason and retried after the backoff, kubectl's all-or-nothing rule per
node, drain order (critical pods last), unreachable nodes (1 s grace), resume from a saved state,
timeout and cancel. How Kubernetes itself behaves is proven in tests/e2e, not here.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from engine.domain.model import DRAINING_TAINT_KEY, PodInfo
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.report import DrainReport
from engine.kube import errors
from engine.kube.fake import FakeCluster
from tests import builders
from tests.builders import owner

START = datetime(2026, 3, 27, 19, 0, 5, tzinfo=UTC)


@pytest.fixture
def cluster() -> FakeCluster:
    c = FakeCluster()
    for name in ("w-1", "w-2", "spare"):
        c.add_node(name, labels={"scalebot.io/pool": "spare" if name == "spare" else "web"})
    return c


@pytest.fixture
def pool() -> ThreadPoolExecutor:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


def one_pass(
    cluster: FakeCluster, nodes: list[str], state: drain.DrainState | None = None, **kw: object
) -> drain.PassResult:
    options = kw.pop("options", filters.DrainOptions.machine())
    assert isinstance(options, filters.DrainOptions)
    state = state or drain.DrainState(started_at=cluster.clock.now() if cluster.clock else START)
    with ThreadPoolExecutor(max_workers=4) as executor:
        return drain.run_pass(
            cluster,
            nodes=nodes,
            state=state,
            options=options,
            now=cluster.clock.now() if cluster.clock else START,
            executor=executor,
            rng=random.Random(1),
        )


def test_cordon_remembers_nodes_a_human_had_cordoned(cluster: FakeCluster) -> None:
    cluster.set_unschedulable("w-2", True)
    already = drain.cordon_nodes(cluster, ["w-1", "w-2"], now=START)
    assert already == frozenset({"w-2"})
    assert all(cluster.get_node(n).is_cordoned for n in ("w-1", "w-2"))
    drain.uncordon_nodes(cluster, ["w-1", "w-2"], keep_cordoned=already)
    assert not cluster.get_node("w-1").unschedulable
    assert cluster.get_node("w-2").unschedulable, "a node cordoned by a human stays cordoned"
    assert not any(t.key == DRAINING_TAINT_KEY for n in ("w-1", "w-2") for t in cluster.get_node(n).taints)


def test_pass_lists_pods_once_for_many_nodes(cluster: FakeCluster) -> None:
    for i in range(6):
        cluster.add_pod(
            "shop", f"web-{i}", node=f"w-{i % 2 + 1}", controller_kind="ReplicaSet", controller_name="web"
        )
    result = one_pass(cluster, ["w-1", "w-2"])
    assert cluster.request_counts[("list", "pods")] == 1
    assert cluster.request_counts[("create", "pods/eviction")] == 6
    assert len(result.report.evicted) == 6
    assert set(result.report.terminating) == {f"shop/web-{i}" for i in range(6)}


def test_pdb_refusal_is_grouped_by_server_reason_and_retried_after_backoff(cluster: FakeCluster) -> None:
    for i in range(3):
        cluster.add_pod(
            "shop",
            f"web-{i}",
            node="w-1",
            controller_kind="ReplicaSet",
            controller_name="web",
            labels={"app": "web"},
        )
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=1)
    first = one_pass(cluster, ["w-1"])
    assert first.report.evicted == ("shop/web-0",)
    [(key, pods)] = first.report.failed.items()
    assert key.startswith(
        "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web-pdb"
    )
    assert pods == ("shop/web-1", "shop/web-2")
    assert first.next_retry_at is not None and first.next_retry_at > cluster.clock.now()
    evictions = cluster.request_counts[("create", "pods/eviction")]
    # Before the retry time, a new pass re-reports the refusal without asking the server again.
    again = one_pass(cluster, ["w-1"], first.state)
    assert cluster.request_counts[("create", "pods/eviction")] == evictions
    assert again.report.failed == first.report.failed
    assert again.report.condition_message() == first.report.condition_message()


def test_kubectl_preset_evicts_nothing_on_a_node_with_a_bare_pod(cluster: FakeCluster) -> None:
    cluster.add_pod("shop", "bare", node="w-1")
    cluster.add_pod("shop", "web-0", node="w-1", controller_kind="ReplicaSet", controller_name="web")
    cluster.add_pod("shop", "web-1", node="w-2", controller_kind="ReplicaSet", controller_name="web")
    result = one_pass(cluster, ["w-1", "w-2"], options=filters.DrainOptions.kubectl(ignore_daemonsets=True))
    assert result.report.evicted == ("shop/web-1",)
    assert list(result.report.failed) == [
        "cannot delete Pods that declare no controller (use --force to override)"
    ]
    assert not result.report.completed
    forced = one_pass(cluster, ["w-1"], options=filters.DrainOptions.kubectl(force=True))
    assert set(forced.report.evicted) == {"shop/bare", "shop/web-0"}


def test_critical_pods_are_evicted_after_the_others_are_gone(cluster: FakeCluster) -> None:
    cluster.add_pod(
        "kube-system",
        "dns",
        node="w-1",
        controller_kind="ReplicaSet",
        controller_name="dns",
        priority_class="system-cluster-critical",
        grace=2,
    )
    cluster.add_pod("shop", "web", node="w-1", controller_kind="ReplicaSet", controller_name="web", grace=2)
    first = one_pass(cluster, ["w-1"])
    assert first.report.evicted == ("shop/web",)
    assert first.report.later == ("kube-system/dns",)
    cluster.advance(3)
    second = one_pass(cluster, ["w-1"], first.state)
    assert second.report.evicted == ("kube-system/dns",)


def test_unreachable_node_is_drained_with_one_second_grace(cluster: FakeCluster) -> None:
    cluster.add_pod("shop", "web", node="w-1", controller_kind="ReplicaSet", controller_name="web", grace=600)
    cluster.set_node_ready("w-1", "Unknown")
    one_pass(cluster, ["w-1"])
    pod = cluster.get_pod("shop", "web")
    assert pod is not None and pod.deletion_timestamp == cluster.clock.now() + timedelta(seconds=1)


def test_transport_error_is_retried_not_taken_for_gone(cluster: FakeCluster) -> None:
    cluster.add_pod("shop", "web", node="w-1", controller_kind="ReplicaSet", controller_name="web")
    cluster.fail_next("create", errors.TransportError(message="connection reset by peer"))
    first = one_pass(cluster, ["w-1"])
    assert first.report.failed == {"connection reset by peer": ("shop/web",)}
    assert not first.report.completed
    cluster.advance(5)
    second = one_pass(cluster, ["w-1"], first.state)
    assert second.report.evicted == ("shop/web",)


def test_state_round_trips_through_json(cluster: FakeCluster) -> None:
    cluster.add_pod(
        "shop",
        "web-0",
        node="w-1",
        controller_kind="ReplicaSet",
        controller_name="web",
        labels={"app": "web"},
    )
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    result = one_pass(
        cluster, ["w-1"], drain.DrainState(started_at=START, already_cordoned=frozenset({"w-1"}))
    )
    assert drain.DrainState.from_json(result.state.to_json()) == result.state


def drain_all(
    cluster: FakeCluster, nodes: list[str], **kw: object
) -> tuple[drainer.DrainOutcome, list[DrainReport]]:
    reports: list[DrainReport] = []
    assert cluster.clock is not None
    outcome = drainer.drain_nodes(
        cluster,
        nodes,
        options=kw.pop("options", filters.DrainOptions.machine()),  # type: ignore[arg-type]
        clock=cluster.clock,
        on_report=reports.append,
        **kw,  # type: ignore[arg-type]
    )
    return outcome, reports


def test_drain_completes_once_terminating_pods_are_gone_and_reports_only_changes(
    cluster: FakeCluster,
) -> None:
    for i in range(3):
        cluster.add_pod(
            "shop",
            f"web-{i}",
            node="w-1",
            controller_kind="ReplicaSet",
            controller_name="web",
            grace=30,
            labels={"app": "web"},
        )
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=3)
    cluster.add_pod("ops", "agent", node="w-1", controller_kind="DaemonSet", controller_name="agent")
    cluster.add_daemonset("ops", "agent")
    outcome, reports = drain_all(cluster, ["w-1"])
    assert outcome.completed
    assert outcome.report.condition_message() == ""
    assert cluster.get_pod("ops", "agent") is not None, "DaemonSet pods stay"
    messages = [r.condition_message() for r in reports]
    assert messages[0].startswith(
        "Drain not completed yet (started at 2026-01-01T00:00:00Z):\n* Pods shop/web-0"
    )
    assert messages[0].endswith(": deletionTimestamp set, but still not removed from the Node")
    assert len(messages) == len(set(messages)), "an unchanged state is never reported twice"
    elapsed = cluster.clock.now() - outcome.state.started_at
    assert timedelta(seconds=30) <= elapsed <= timedelta(seconds=40), elapsed


def test_drain_times_out_with_the_blocking_message(cluster: FakeCluster) -> None:
    cluster.add_pod(
        "shop", "db-0", node="w-1", controller_kind="StatefulSet", controller_name="db", labels={"app": "db"}
    )
    cluster.add_pdb("shop", "db-pdb", match_labels={"app": "db"}, disruptions_allowed=0)
    outcome, _ = drain_all(cluster, ["w-1"], settings=DrainSettings(timeout=timedelta(minutes=2)))
    assert outcome.timed_out and not outcome.completed
    assert ": cannot evict pod as it would violate the pod's disruption budget." in (
        outcome.report.condition_message()
    )
    assert "db-pdb" in outcome.report.condition_message()
    # kubectl retries a PDB refusal every 5 s; over 2 minutes that is about 24 attempts, not thousands.
    assert 15 <= cluster.request_counts[("create", "pods/eviction")] <= 30


def test_resumed_drain_keeps_its_start_and_already_cordoned_memory(cluster: FakeCluster) -> None:
    cluster.add_pod("shop", "web", node="w-1", controller_kind="ReplicaSet", controller_name="web", grace=10)
    saved = drain.DrainState(started_at=cluster.clock.now(), already_cordoned=frozenset())
    drain.cordon_nodes(cluster, ["w-1"], now=cluster.clock.now())  # the crashed run had cordoned it
    outcome, _ = drain_all(cluster, ["w-1"], state=saved)
    assert outcome.completed
    assert outcome.state.started_at == saved.started_at
    assert outcome.state.already_cordoned == frozenset(), "our own cordon is not mistaken for a human's"


def test_cancel_stops_the_loop(cluster: FakeCluster) -> None:
    # A budget that allows nothing: the drain waits (a bare pod would end it at once).
    cluster.add_pod(
        "shop",
        "web-1",
        node="w-1",
        controller_kind="ReplicaSet",
        controller_name="web",
        labels={"app": "web"},
    )
    cluster.add_pdb("shop", "web", match_labels={"app": "web"}, disruptions_allowed=0)
    cancel = threading.Event()
    cancel.set()
    outcome, _ = drain_all(cluster, ["w-1"], options=filters.DrainOptions.kubectl(), cancel=cancel)
    assert outcome.cancelled
    assert cluster.get_node("w-1").unschedulable, "cancel leaves the cordon; uncordon is explicit"


def test_evictions_are_interleaved_across_controllers_so_concurrent_ones_rarely_share_a_pdb() -> None:
    def pod(name: str, controller: str) -> tuple[PodInfo, filters.Action]:
        return builders.pod(name, controller=owner("ReplicaSet", controller)), filters.Action.EVICT

    due = [
        pod("a-0", "a"),
        pod("a-1", "a"),
        pod("a-2", "a"),
        pod("b-0", "b"),
        pod("c-0", "c"),
        pod("c-1", "c"),
    ]
    order = [p.name for p, _ in drain.interleave_by_controller(due)]
    assert order == ["a-0", "b-0", "c-0", "a-1", "c-1", "a-2"]
    assert sorted(order) == sorted(p.name for p, _ in due), "nothing lost or duplicated"


def test_next_pass_is_due_when_freshly_evicted_pods_should_be_gone(cluster: FakeCluster) -> None:
    cluster.add_pod("shop", "web", node="w-1", controller_kind="ReplicaSet", controller_name="web", grace=3)
    result = one_pass(cluster, ["w-1"])
    assert result.report.evicted == ("shop/web",)
    assert result.next_retry_at == cluster.clock.now() + timedelta(seconds=3)  # type: ignore[union-attr]


def test_a_long_pass_reports_progress_every_n_answers_from_the_callers_thread(cluster: FakeCluster) -> None:
    for i in range(7):
        cluster.add_pod("shop", f"web-{i}", node="w-1", controller_kind="ReplicaSet", controller_name="web")
    calls: list[tuple[int, int, str]] = []
    with ThreadPoolExecutor(max_workers=4) as executor:
        drain.run_pass(
            cluster,
            nodes=["w-1"],
            state=drain.DrainState(started_at=START),
            options=filters.DrainOptions.machine(),
            now=START,
            executor=executor,
            on_progress=lambda done, due: calls.append((done, due, threading.current_thread().name)),
            progress_every=3,
        )
    # Every third answer, never the last one (the pass's own report follows at once).
    assert [(done, due) for done, due, _ in calls] == [(3, 7), (6, 7)]
    assert {name for *_, name in calls} == {threading.current_thread().name}


def test_cordon_of_many_nodes_is_one_listing_and_one_write_a_node(
    cluster: FakeCluster, pool: ThreadPoolExecutor
) -> None:
    cluster.set_unschedulable("spare", True)
    before = dict(cluster.request_counts)
    already = drain.cordon_nodes(cluster, ["w-1", "w-2", "spare", "gone"], now=START, executor=pool)
    assert already == frozenset({"spare"})
    sent = {k: v - before.get(k, 0) for k, v in cluster.request_counts.items() if v != before.get(k, 0)}
    assert sent == {("list", "nodes"): 1, ("patch", "nodes"): 3}, "no read per node; a gone node is skipped"
    assert all(
        any(t.key == DRAINING_TAINT_KEY for t in cluster.get_node(n).taints) for n in ("w-1", "w-2", "spare")
    )


class SlowEvictions(FakeCluster):
    """Each eviction answer takes one virtual second, as a long pass spreads them over minutes."""

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        super().evict_pod(pod, grace_seconds=grace_seconds)
        assert self.clock is not None
        self.clock.advance(1)


def test_retries_and_expected_ends_count_from_each_pods_own_answer_not_the_pass_start() -> None:
    cluster = SlowEvictions()
    cluster.add_node("w-1")
    for i in range(3):
        cluster.add_pod(
            "shop", f"web-{i}", node="w-1", controller_kind="ReplicaSet", controller_name="web", grace=30
        )
    assert cluster.clock is not None
    start = cluster.clock.now()
    with ThreadPoolExecutor(max_workers=1) as executor:
        result = drain.run_pass(
            cluster,
            nodes=["w-1"],
            state=drain.DrainState(started_at=start),
            options=filters.DrainOptions.machine(),
            now=start,
            executor=executor,
            clock=cluster.clock.now,
        )
    assert len(result.report.evicted) == 3
    # The first pod was answered after one second: its grace period ends 31 s after the pass start.
    assert result.next_retry_at == start + timedelta(seconds=31)
    # Settling counts from the last answer, three seconds in.
    assert result.state.last_eviction_at == start + timedelta(seconds=3)
    assert result.awaiting == {p.uid for p in cluster.list_pods(node_names=["w-1"])}

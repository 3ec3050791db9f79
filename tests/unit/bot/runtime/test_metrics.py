"""bot.runtime.metrics: the series derived from the runner's events, the Slack counters, the exposition.

Covers: operations counted once per state (also when two events carry the same terminal state,
and when a final event is repeated); evictions by result from the growth of the drain totals,
failures classified by the server's message (PDB, two PDBs, API Priority and Fairness, other);
a resumed operation is not counted again for what happened before this process saw it; drain and
operation durations from the operation's own timestamps; force-deleted pods; the Slack client
wrapper and the sender's hooks; schedule gauges set and removed; no token ever in the exposition;
an operation whose drain has not started counts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from bot.runtime import metrics
from engine.domain.announcement import NextEvent
from engine.domain.drain_state import DrainState, PodFailure
from engine.domain.operation import (
    DrainProgress,
    Operation,
    OperationPlan,
    OperationProgress,
    OpKind,
    OpState,
    ProgressEvent,
    ProgressKind,
    Target,
    WakeProgress,
)
from engine.kube import errors
from engine.pools.base import Pool, RestoreRecord
from tests.builders import node

T0 = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
PDB_KEY = (
    "Cannot evict pod as it would violate the pod's disruption budget. "
    "The disruption budget web-pdb needs 3 healthy pods and has 3 currently"
)
APF_KEY = "Too many requests, please try again later."


def operation(
    *,
    state: OpState = OpState.RUNNING,
    kind: OpKind = OpKind.DRAIN,
    at: float = 0.0,
    drain: DrainState | None = None,
    force_deleted: tuple[str, ...] = (),
) -> Operation:
    return Operation(
        id="op-1",
        kind=kind,
        target=Target(cluster="prod", nodes=("n1",)),
        state=state,
        requested_by="U123",
        created_at=T0,
        updated_at=T0 + timedelta(seconds=at),
        plan=OperationPlan(kind=kind, cluster="prod", nodes=("n1",)),
        progress=OperationProgress(drain=DrainProgress(state=drain, force_deleted=force_deleted)),
    )


def drain_data(*, evicted: int = 0, failures: dict[str, tuple[str, int]] | None = None) -> DrainState:
    return DrainState(
        started_at=T0 + timedelta(seconds=10),
        evicted_total=evicted,
        failures={
            uid: PodFailure(key=key, retry_at=T0 + timedelta(minutes=5), attempts=attempts)
            for uid, (key, attempts) in (failures or {}).items()
        },
    )


def event(
    op: Operation, kind: ProgressKind = "report", text: str = "", *, final: bool = False
) -> ProgressEvent:
    return ProgressEvent(operation=op, kind=kind, text=text, final=final)


def value(m: metrics.Metrics, name: str, **labels: str) -> float:
    sample = m.registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


@pytest.fixture
def m() -> metrics.Metrics:
    return metrics.Metrics()


def test_a_drain_counts_states_evictions_and_durations(m: metrics.Metrics) -> None:
    m.observe_event(event(operation(), "state", "Started"))
    m.observe_event(event(operation(at=5, drain=drain_data()), "phase", "Cordoned 1 node; draining"))
    failures = {"a": (PDB_KEY, 1), "b": (errors.MULTIPLE_PDBS_MESSAGE + " x", 1)}
    m.observe_event(event(operation(at=30, drain=drain_data(evicted=3, failures=failures))))
    failures = {"a": (PDB_KEY, 3), "b": (errors.MULTIPLE_PDBS_MESSAGE + " x", 1), "c": (APF_KEY, 1)}
    m.observe_event(event(operation(at=60, drain=drain_data(evicted=5, failures=failures))))
    done = operation(state=OpState.SUCCEEDED, at=100, drain=drain_data(evicted=7, failures=failures))
    m.observe_event(event(done, "phase", "Drain completed"))
    m.observe_event(event(done, "final", "Completed in 1m40s", final=True))

    assert value(m, "scalebot_operations_total", cluster="prod", kind="drain", state="running") == 1
    assert value(m, "scalebot_operations_total", cluster="prod", kind="drain", state="succeeded") == 1
    assert value(m, "scalebot_evictions_total", cluster="prod", result="evicted") == 7
    assert value(m, "scalebot_evictions_total", cluster="prod", result="pdb_blocked") == 3
    assert value(m, "scalebot_evictions_total", cluster="prod", result="multi_pdb") == 1
    assert value(m, "scalebot_evictions_total", cluster="prod", result="rate_limited") == 1
    assert value(m, "scalebot_evictions_total", cluster="prod", result="error") == 0
    assert value(m, "scalebot_drain_duration_seconds_count", cluster="prod") == 1
    assert (
        value(m, "scalebot_drain_duration_seconds_sum", cluster="prod") == 90
    )  # from started_at (22:00:10) to 22:01:40
    assert value(m, "scalebot_operation_duration_seconds_count", cluster="prod", kind="drain") == 1
    assert value(m, "scalebot_operation_duration_seconds_sum", cluster="prod", kind="drain") == 100


def test_a_repeated_final_event_counts_nothing_twice(m: metrics.Metrics) -> None:
    done = operation(state=OpState.FAILED, at=20, drain=drain_data(evicted=2))
    m.observe_event(event(operation(), "state"))
    for _ in range(3):
        m.observe_event(event(done, "final", "Failed", final=True))
    assert value(m, "scalebot_operations_total", cluster="prod", kind="drain", state="failed") == 1
    assert value(m, "scalebot_operation_duration_seconds_count", cluster="prod", kind="drain") == 1


def test_a_resumed_operation_counts_only_what_happens_after_it_is_first_seen(m: metrics.Metrics) -> None:
    before = drain_data(evicted=10, failures={"a": (PDB_KEY, 4)})
    m.observe_event(event(operation(at=300, drain=before)))
    assert value(m, "scalebot_evictions_total", cluster="prod", result="evicted") == 0
    assert value(m, "scalebot_evictions_total", cluster="prod", result="pdb_blocked") == 0
    after = drain_data(evicted=12, failures={"a": (PDB_KEY, 5)})
    m.observe_event(event(operation(at=330, drain=after)))
    assert value(m, "scalebot_evictions_total", cluster="prod", result="evicted") == 2
    assert value(m, "scalebot_evictions_total", cluster="prod", result="pdb_blocked") == 1


def test_force_deleted_pods_are_counted_by_growth(m: metrics.Metrics) -> None:
    m.observe_event(event(operation(kind=OpKind.ZERO), "phase"))
    m.observe_event(event(operation(kind=OpKind.ZERO, force_deleted=("ns/a", "ns/b")), "phase"))
    m.observe_event(event(operation(kind=OpKind.ZERO, force_deleted=("ns/a", "ns/b", "ns/c")), "phase"))
    assert value(m, "scalebot_force_deleted_pods_total", cluster="prod") == 3


def test_an_operation_whose_drain_has_not_started_counts_nothing(m: metrics.Metrics) -> None:
    m.observe_event(event(operation()))
    m.observe_event(event(operation(), "phase", "Drain completed"))
    assert value(m, "scalebot_drain_duration_seconds_count", cluster="prod") == 0
    assert value(m, "scalebot_evictions_total", cluster="prod", result="evicted") == 0


@pytest.mark.parametrize(
    ("key", "result"),
    [
        (PDB_KEY, "pdb_blocked"),
        (errors.MULTIPLE_PDBS_MESSAGE, "multi_pdb"),
        (APF_KEY, "rate_limited"),
        ("etcdserver: request timed out", "error"),
    ],
)
def test_eviction_failures_are_classified_by_the_server_message(key: str, result: str) -> None:
    assert metrics.eviction_result(key) == result


class FakeSlack:
    """The sender's SlackApi port, answering from a script."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def api_call(self, api_method: str, *, json: dict[str, Any] | None = None) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def slack_error(status: int, error: str) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.com/api/chat.update",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=status,
    )
    return SlackApiError(error, response)


def test_slack_calls_are_counted_by_outcome(m: metrics.Metrics) -> None:
    client = metrics.InstrumentedSlackApi(
        FakeSlack(
            {"ok": True}, slack_error(429, "ratelimited"), slack_error(200, "channel_not_found"), OSError()
        ),
        m,
    )
    assert client.api_call("chat.update", json={}) == {"ok": True}
    for _ in range(3):
        with pytest.raises((SlackApiError, OSError)):
            client.api_call("chat.update", json={})
    assert value(m, "scalebot_slack_api_calls_total", method="chat.update", outcome="ok") == 1
    assert value(m, "scalebot_slack_api_calls_total", method="chat.update", outcome="rate_limited") == 1
    assert value(m, "scalebot_slack_api_calls_total", method="chat.update", outcome="error") == 2


def test_sender_hooks_count_errors_retries_and_coalesced_updates(m: metrics.Metrics) -> None:
    hooks = m.sender_hooks()
    hooks.call("chat.postMessage")  # counted by the client wrapper, not twice here
    hooks.error("chat.postMessage", "channel_not_found")
    hooks.rate_limited("chat.update", 30.0)
    hooks.coalesced("op:1")
    assert (
        value(m, "scalebot_slack_api_errors_total", method="chat.postMessage", error="channel_not_found") == 1
    )
    assert value(m, "scalebot_slack_api_retries_total", method="chat.update", reason="rate_limited") == 1
    assert value(m, "scalebot_slack_updates_coalesced_total") == 1
    assert value(m, "scalebot_slack_api_calls_total", method="chat.postMessage", outcome="ok") == 0


def test_no_token_ever_reaches_the_exposition(m: metrics.Metrics) -> None:
    token = "xoxb-1234-5678-abcdefSECRET"
    m.observe_slack_retry(f"pasted {token}", "rate_limited")
    m.observe_slack_error("chat.update", f"invalid_auth {token}")
    text = generate_latest(m.registry).decode()
    assert "abcdefSECRET" not in text and "xoxb-***" in text


def test_the_module_function_feeds_the_process_registry() -> None:
    op = replace(operation(state=OpState.REJECTED, kind=OpKind.WAKE), id="module-level")
    before = value(
        metrics.DEFAULT, "scalebot_operations_total", cluster="prod", kind="wake", state="rejected"
    )
    durations = value(
        metrics.DEFAULT, "scalebot_operation_duration_seconds_count", cluster="prod", kind="wake"
    )
    metrics.observe_event(event(op, "final", final=True))
    assert (
        value(metrics.DEFAULT, "scalebot_operations_total", cluster="prod", kind="wake", state="rejected")
        == before + 1
    )
    assert (
        value(metrics.DEFAULT, "scalebot_operation_duration_seconds_count", cluster="prod", kind="wake")
        == durations
    ), "a rejected operation never ran: no duration"


def test_no_created_series_are_exposed(m: metrics.Metrics) -> None:
    m.observe_event(event(operation(), "state"))
    m.observe_slack_error("chat.update", "channel_not_found")
    text = generate_latest(m.registry).decode()
    assert "scalebot_operations_total{" in text
    assert "_created" not in text


def test_a_wake_short_of_its_size_is_counted_once_and_a_full_one_not(m: metrics.Metrics) -> None:
    def wake(op_id: str, ready: int, wanted: int) -> Operation:
        op = operation(kind=OpKind.WAKE, state=OpState.SUCCEEDED, at=60)
        progress = replace(op.progress, wake=WakeProgress(ready=ready, wanted=wanted))
        return replace(op, id=op_id, progress=progress)

    m.observe_event(event(wake("short", 2, 3), "final", final=True))
    m.observe_event(event(wake("short", 2, 3), "final", final=True))
    m.observe_event(event(wake("full", 3, 3), "final", final=True))
    assert value(m, "scalebot_wakes_short_total", cluster="prod") == 1


def test_losing_the_lease_is_counted(m: metrics.Metrics) -> None:
    m.set_leader(False)  # a standby that never led lost nothing
    m.set_leader(True)
    m.set_leader(False)
    assert value(m, "scalebot_leader_lost_total") == 1
    assert value(m, "scalebot_leader") == 0


def test_pool_nodes_count_each_node_once_and_what_a_wake_brings_back() -> None:
    nodes = {
        "a": node("a"),
        "b": node("b", unschedulable=True),
        "c": node("c", ready="False"),
        "d": node("d", ready="False", unschedulable=True),
    }
    pool = Pool(name="web", provider="labels", desired=5, nodes=("a", "b", "c", "d", "unlisted"))
    assert metrics.pool_nodes(pool, nodes) == metrics.PoolNodes(ready=1, not_ready=2, cordoned=2, asleep=0)
    restore = RestoreRecord(desired=3, min_size=0, max_size=None, recorded_at=T0, operation_id="op-1")
    asleep = Pool(name="web", provider="labels", desired=0, restore=restore)
    assert metrics.pool_nodes(asleep, nodes) == metrics.PoolNodes(asleep=3)


class State:
    """A StateSource with fixed answers; `reads` counts the pool listings."""

    def __init__(self, active: Sequence[Operation]) -> None:
        self.active = active
        self.reads = 0
        self.fail = False

    def clusters(self) -> Sequence[str]:
        return ["prod"]

    def pools(self, cluster: str) -> Mapping[str, metrics.PoolNodes]:
        self.reads += 1
        if self.fail:
            raise OSError("connection refused")
        return {"web": metrics.PoolNodes(ready=2, cordoned=1, asleep=1)}

    def active_operations(self) -> Sequence[Operation]:
        return self.active

    def next_event(self, cluster: str) -> NextEvent | None:
        return NextEvent(action="sleep", schedule="nightly", at=T0 + timedelta(hours=1), tz="UTC")


def test_the_present_state_is_read_at_scrape_time_with_cluster_and_pool_labels() -> None:
    m = metrics.Metrics()
    waiting = replace(operation(state=OpState.AWAITING_APPROVAL, at=30), id="op-2")
    state = State([operation(at=10), operation(at=20), waiting])
    clock = [0.0]
    collector = metrics.StateCollector(state, refresh_seconds=30, monotonic=lambda: clock[0])
    m.prime(state.clusters())
    m.registry.register(collector)
    ops = {"cluster": "prod", "kind": "drain"}
    assert value(m, "scalebot_operations_active", **ops, state="running") == 2
    assert value(m, "scalebot_operations_active", **ops, state="awaiting_approval") == 1
    assert m.registry.get_sample_value("scalebot_operations_active", {**ops, "state": "failed"}) is None
    assert (
        m.registry.get_sample_value(
            "scalebot_operations_active", {"cluster": "prod", "kind": "zero", "state": "running"}
        )
        == 0
    )
    oldest = m.registry.get_sample_value(
        "scalebot_operation_oldest_update_timestamp_seconds", {"cluster": "prod", "state": "running"}
    )
    assert oldest == (T0 + timedelta(seconds=10)).timestamp()
    pool = {"cluster": "prod", "pool": "web"}
    assert value(m, "scalebot_pool_nodes", **pool, state="ready") == 2
    assert value(m, "scalebot_pool_nodes", **pool, state="cordoned") == 1
    assert value(m, "scalebot_pool_nodes", **pool, state="asleep") == 1
    assert value(m, "scalebot_pool_nodes", **pool, state="not_ready") == 0
    event_labels = {"cluster": "prod", "schedule": "nightly", "action": "sleep"}
    assert (
        value(m, "scalebot_next_scheduled_event_timestamp_seconds", **event_labels)
        == (T0 + timedelta(hours=1)).timestamp()
    )
    reads = state.reads
    generate_latest(m.registry)
    assert state.reads == reads, "pools are listed at most once per refresh interval"
    clock[0] = 31.0
    state.fail = True
    assert value(m, "scalebot_pool_nodes", **pool, state="ready") == 2, (
        "an unreadable cluster keeps its last counts"
    )
    assert state.reads == reads + 1
    # Counters concerning a cluster exist from the start, at zero.
    assert (
        m.registry.get_sample_value("scalebot_evictions_total", {"cluster": "prod", "result": "evicted"}) == 0
    )
    assert m.registry.get_sample_value("scalebot_wakes_short_total", {"cluster": "prod"}) == 0


README = Path(__file__).resolve().parents[4] / "README.md"
_ROW = re.compile(r"^\| `(scalebot_[a-z_]+)` \| (counter|gauge|histogram) \| ([^|]*) \| [^|]+ \|$")


def fed() -> metrics.Metrics:
    """Metrics in which every series has a sample (each one is fed once)."""
    m = metrics.Metrics()
    m.watch(State([operation()]))
    m.observe_event(
        event(operation(state=OpState.SUCCEEDED, drain=drain_data(evicted=1)), "final", final=True)
    )
    m.observe_slack_call("chat.update", "ok")
    m.observe_slack_error("chat.update", "channel_not_found")
    m.observe_slack_retry("chat.update", "rate_limited")
    m.slack_coalesced.inc()
    m.set_leader(True)
    return m


def test_the_readme_metrics_reference_lists_exactly_the_exposed_metrics() -> None:
    """Every metric with its type and labels."""
    m = fed()
    exposed = {}
    for family in m.registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = {label for sample in family.samples for label in sample.labels} - {"le"}
        exposed[name] = (family.type, frozenset(labels))
    documented = {}
    for line in README.read_text().splitlines():
        found = _ROW.match(line)
        if found:
            labels = frozenset(re.findall(r"`([a-z_]+)`", found.group(3)))
            documented[found.group(1)] = (found.group(2), labels)
    assert len(documented) > 10
    assert documented == exposed

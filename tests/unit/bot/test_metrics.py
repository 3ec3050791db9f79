"""bot.metrics: the series derived from the runner's events, the Slack counters, the exposition.

Covers: operations counted once per state (also when two events carry the same terminal state,
and when a final event is repeated); evictions by result from the growth of the drain totals,
failures classified by the server's message (PDB, two PDBs, API Priority and Fairness, other);
a resumed operation is not counted again for what happened before this process saw it; drain and
operation durations from the operation's own timestamps; force-deleted pods; the Slack client
wrapper and the sender's hooks; schedule gauges set and removed; no token ever in the exposition;
an operation whose drain has not started counts nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from slack_sdk.errors import SlackApiError
from slack_sdk.web import SlackResponse

from bot import metrics
from engine.drain_state import DrainState, PodFailure
from engine.kube import errors
from engine.operation import (
    DrainProgress,
    Operation,
    OperationPlan,
    OperationProgress,
    OpKind,
    OpState,
    ProgressEvent,
    ProgressKind,
    Target,
)

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

    assert value(m, "scalebot_operations_total", kind="drain", state="running") == 1
    assert value(m, "scalebot_operations_total", kind="drain", state="succeeded") == 1
    assert value(m, "scalebot_evictions_total", result="evicted") == 7
    assert value(m, "scalebot_evictions_total", result="pdb_blocked") == 3
    assert value(m, "scalebot_evictions_total", result="multi_pdb") == 1
    assert value(m, "scalebot_evictions_total", result="rate_limited") == 1
    assert value(m, "scalebot_evictions_total", result="error") == 0
    assert value(m, "scalebot_drain_duration_seconds_count") == 1
    assert value(m, "scalebot_drain_duration_seconds_sum") == 90  # from started_at (22:00:10) to 22:01:40
    assert value(m, "scalebot_operation_duration_seconds_count", kind="drain") == 1
    assert value(m, "scalebot_operation_duration_seconds_sum", kind="drain") == 100


def test_a_repeated_final_event_counts_nothing_twice(m: metrics.Metrics) -> None:
    done = operation(state=OpState.FAILED, at=20, drain=drain_data(evicted=2))
    m.observe_event(event(operation(), "state"))
    for _ in range(3):
        m.observe_event(event(done, "final", "Failed", final=True))
    assert value(m, "scalebot_operations_total", kind="drain", state="failed") == 1
    assert value(m, "scalebot_operation_duration_seconds_count", kind="drain") == 1


def test_a_resumed_operation_counts_only_what_happens_after_it_is_first_seen(m: metrics.Metrics) -> None:
    before = drain_data(evicted=10, failures={"a": (PDB_KEY, 4)})
    m.observe_event(event(operation(at=300, drain=before)))
    assert value(m, "scalebot_evictions_total", result="evicted") == 0
    assert value(m, "scalebot_evictions_total", result="pdb_blocked") == 0
    after = drain_data(evicted=12, failures={"a": (PDB_KEY, 5)})
    m.observe_event(event(operation(at=330, drain=after)))
    assert value(m, "scalebot_evictions_total", result="evicted") == 2
    assert value(m, "scalebot_evictions_total", result="pdb_blocked") == 1


def test_force_deleted_pods_are_counted_by_growth(m: metrics.Metrics) -> None:
    m.observe_event(event(operation(kind=OpKind.ZERO), "phase"))
    m.observe_event(event(operation(kind=OpKind.ZERO, force_deleted=("ns/a", "ns/b")), "phase"))
    m.observe_event(event(operation(kind=OpKind.ZERO, force_deleted=("ns/a", "ns/b", "ns/c")), "phase"))
    assert value(m, "scalebot_force_deleted_pods_total") == 3


def test_an_operation_whose_drain_has_not_started_counts_nothing(m: metrics.Metrics) -> None:
    m.observe_event(event(operation()))
    m.observe_event(event(operation(), "phase", "Drain completed"))
    assert value(m, "scalebot_drain_duration_seconds_count") == 0
    assert value(m, "scalebot_evictions_total", result="evicted") == 0


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


def test_schedule_gauge_is_set_and_removed(m: metrics.Metrics) -> None:
    at = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
    m.set_next_scheduled_event("nightly", "zero", at)
    assert value(m, "scalebot_next_scheduled_event_timestamp_seconds", schedule="nightly", action="zero") == (
        at.timestamp()
    )
    m.set_next_scheduled_event("nightly", "zero", None)
    m.set_next_scheduled_event("never-set", "wake", None)
    assert (
        m.registry.get_sample_value(
            "scalebot_next_scheduled_event_timestamp_seconds", {"schedule": "nightly", "action": "zero"}
        )
        is None
    )


def test_no_token_ever_reaches_the_exposition(m: metrics.Metrics) -> None:
    token = "xoxb-1234-5678-abcdefSECRET"
    m.set_next_scheduled_event(f"pasted {token}", "zero", T0)
    m.observe_slack_error("chat.update", f"invalid_auth {token}")
    text = generate_latest(m.registry).decode()
    assert "abcdefSECRET" not in text and "xoxb-***" in text


def test_every_documented_series_is_exposed(m: metrics.Metrics) -> None:
    m.set_leader(True)
    text = generate_latest(m.registry).decode()
    for name in (
        "scalebot_operations_total",
        "scalebot_evictions_total",
        "scalebot_drain_duration_seconds",
        "scalebot_operation_duration_seconds",
        "scalebot_force_deleted_pods_total",
        "scalebot_slack_api_calls_total",
        "scalebot_slack_api_errors_total",
        "scalebot_slack_api_retries_total",
        "scalebot_next_scheduled_event_timestamp_seconds",
        "scalebot_leader",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    for result in metrics.EVICTION_RESULTS:
        assert f'scalebot_evictions_total{{result="{result}"}} 0.0' in text
    assert "scalebot_leader 1.0" in text


def test_the_module_function_feeds_the_process_registry() -> None:
    op = replace(operation(state=OpState.REJECTED, kind=OpKind.WAKE), id="module-level")
    before = value(metrics.DEFAULT, "scalebot_operations_total", kind="wake", state="rejected")
    durations = value(metrics.DEFAULT, "scalebot_operation_duration_seconds_count", kind="wake")
    metrics.observe_event(event(op, "final", final=True))
    assert value(metrics.DEFAULT, "scalebot_operations_total", kind="wake", state="rejected") == before + 1
    assert value(metrics.DEFAULT, "scalebot_operation_duration_seconds_count", kind="wake") == durations, (
        "a rejected operation never ran: no duration"
    )

"""The "cluster state at failure" section of a failed e2e test: what it says, and when it appears."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.child_pytest import run_child_pytest
from tests.cluster_state import MAX_EVENTS, describe

PENDING = {
    "metadata": {"name": "web-1"},
    "spec": {},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 node(s) were unschedulable.",
            }
        ],
    },
}
RUNNING = {
    "metadata": {"name": "web-2", "deletionTimestamp": "2026-03-02T19:00:00Z"},
    "spec": {"nodeName": "pool-a-0"},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}
CORDONED = {
    "metadata": {"name": "pool-a-0", "creationTimestamp": "2026-03-02T18:00:00Z"},
    "spec": {"unschedulable": True, "taints": [{"key": "scalebot.io/draining", "effect": "NoSchedule"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def event(second: int, reason: str) -> dict[str, object]:
    return {
        "type": "Warning",
        "reason": reason,
        "involvedObject": {"kind": "Pod", "name": "web-1"},
        "lastTimestamp": f"2026-03-02T19:00:{second:02d}Z",
        "message": f"message {second}",
    }


def test_each_pod_node_and_event_gets_a_line_saying_why_it_is_where_it_is() -> None:
    text = describe([PENDING, RUNNING], [event(5, "FailedScheduling")], [CORDONED])
    assert "pod web-1: Pending on unbound; PodScheduled=False (Unschedulable 0/3 nodes are available" in text
    assert "pod web-2: Running deleting on pool-a-0; Ready=True" in text
    assert "FailedScheduling Pod/web-1 (x1): message 5" in text
    assert "node pool-a-0: cordoned Ready=True; taints scalebot.io/draining:NoSchedule" in text


def test_only_the_newest_events_are_listed_oldest_first() -> None:
    events = [event(s, f"R{s}") for s in reversed(range(MAX_EVENTS + 5))]
    lines = describe([], events, []).splitlines()
    listed = [line for line in lines if " Warning R" in line]
    assert len(listed) == MAX_EVENTS
    assert " R5 " in listed[0] and f" R{MAX_EVENTS + 4} " in listed[-1]


def test_a_failed_e2e_test_reports_the_cluster_state_and_a_passing_one_does_not(tmp_path: Path) -> None:
    # The child stands in for the cluster read (no control plane here) and keeps the hook's real
    # selection: a failed call phase of a test that has the admin client.
    test_file = tmp_path / "test_child.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import pytest
            import tests.cluster_state as cluster_state

            cluster_state.read_cluster_state = lambda api, ns, prefix: f"STATE-OF {ns} {prefix}"

            @pytest.fixture
            def admin_api():
                return object()

            @pytest.fixture
            def namespace():
                return "ns-of-the-test"

            def test_fails(admin_api, namespace):
                assert False, "deliberate"

            def test_passes(admin_api, namespace):
                pass

            def test_fails_without_a_cluster():
                assert False, "no admin client here"
            """
        )
    )
    _code, output = run_child_pytest(test_file)
    assert "2 failed, 1 passed" in output, output
    assert output.count("cluster state at failure") == 1, output
    assert "STATE-OF ns-of-the-test None" in output, output


def test_a_slow_return_after_a_wake_is_noted_with_the_cluster_state_and_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from localcluster import waits
    from tests import cluster_state, conftest
    from tests.e2e import support

    timeouts: list[float] = []

    def wait(api: object, namespace: str, name: str, *, timeout: float) -> dict[str, object]:
        timeouts.append(timeout)
        if len(timeouts) == 1:
            raise waits.WaitTimeout("not yet")
        return {"status": {"availableReplicas": 3}}

    notes: list[str] = []
    monkeypatch.setattr(waits, "wait_for_deployment_available", wait)
    monkeypatch.setattr(cluster_state, "read_cluster_state", lambda api, ns, prefix: f"STATE {ns} {prefix}")
    monkeypatch.setattr(conftest, "note_in_summary", notes.append)
    back = support.wait_for_return(object(), "ns", "web", node_prefix="pool")
    assert back == {"status": {"availableReplicas": 3}}
    assert timeouts == [
        support.PROMPT_RETURN_SECONDS,
        support.SCHEDULER_RETRY_BOUND_SECONDS - support.PROMPT_RETURN_SECONDS,
    ]
    [note] = notes
    assert "Deployment ns/web was not available 60 s after a wake" in note and note.endswith("STATE ns pool")

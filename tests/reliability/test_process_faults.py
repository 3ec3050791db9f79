"""Process faults: SIGKILL in the middle of each step that changes the cluster, and SIGTERM.

Covers (tests/e2e/test_operations.py already kills during phase 1 and during wake):
- one full zero-scale (every pool → 0, so phase 2 applies) through `scalebot zero`/`resume`,
  killed three times — half-way through cordon (exactly one of two nodes cordoned, the other's
  write refused by an admission policy of the test, the step not saved), in phase 2
  after a grace-0 DELETE took effect but before its answer arrived, and during Node removal — and
  resumed each time: every node gone, each blocked pod force-deleted and audited exactly once
  and named in the report, scalebot's own cordons never mistaken for a human's, a continuous
  journal (every step in order, a `resumed` row after each kill);
- `scalebot run` with Slack: SIGKILL while Slack holds a card's post (the restart finds it and
  edits it: one card); SIGKILL while a thread reply is in flight, SIGTERM while a drain pass
  talks to the API server (exit 0, the pass finished and was saved), SIGKILL during the last
  step and a restart that finishes the operation at once: one card, no thread reply twice, the
  final reply exactly once, nothing left in the outbox.

Requests go through the fault proxy with latency only, so that each step lasts long enough to be
interrupted where the test wants. Every wait is a poll with a deadline; every process is killed
at teardown if still alive.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.domain.operation import OperationProgress
from localcluster import objects, rest, waits
from tests.e2e.support import scalebot_args
from tests.reliability.faultproxy import FaultProxy
from tests.reliability.support import (
    CHANNEL,
    OPERATOR,
    SIGNING_SECRET,
    Processes,
    journal,
    last_step,
    operations,
    poll,
    proxied_kubeconfig,
    run_setup,
    slack_server,
    start_run,
    steps_in_order,
    wait_healthy,
)
from tests.slack.harness import Signer, all_text, post

pytestmark = pytest.mark.e2e


def _cli(kubeconfig: Path, db: Path, pool_key: str) -> list[str]:
    return scalebot_args(kubeconfig, db, pool_key, graceful_window="3s")


SCALEBOT_USER = "system:serviceaccount:scalebot:scalebot"


@contextlib.contextmanager
def _writes_refused(admin_api: Any, control_plane: Any, node: str, name: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy (the test's, not scalebot's) refuses scalebot's writes to `node`.

    Yields once scalebot's own dry-run patch of the node is refused, and returns once it is allowed
    again, so the policy is in force exactly inside the block.
    """
    policy = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/hold-{name}"
    binding = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/hold-{name}"
    rest.create(
        admin_api,
        policy.rsplit("/", 1)[0],
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"hold-{name}"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": (
                            f"object.metadata.name != '{node}' "
                            f"|| request.userInfo.username != '{SCALEBOT_USER}'"
                        ),
                        "message": "held by the test",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
    )
    rest.create(
        admin_api,
        binding.rsplit("/", 1)[0],
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"hold-{name}"},
            "spec": {"policyName": f"hold-{name}", "validationActions": ["Deny"]},
        },
    )
    scalebot = control_plane.scalebot_api_client()

    def refused() -> bool:
        answer = rest.send_request(
            scalebot,
            "PATCH",
            rest.node_path(node),
            # A change scalebot's own field policy allows (the cordon field, unchanged), so only
            # the test's hold policy can refuse it.
            body={"spec": {"unschedulable": False}},
            query={"dryRun": "All"},
            content_type="application/merge-patch+json",
        )
        return int(answer.status) == 403

    try:
        waits.wait_until(refused, 30, "the admission policy to be in force")
        yield
    finally:
        rest.delete(admin_api, binding)
        rest.delete(admin_api, policy)
        waits.wait_until(lambda: not refused(), 30, "the admission policy to be gone")
        scalebot.close()


def _step_failures(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT step_data FROM operations").fetchall()
    return sum(msgspec.json.decode(raw, type=OperationProgress).step_failures for (raw,) in rows if raw)


def _progress(db: Path, op_id: str) -> OperationProgress:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (raw,) = conn.execute("SELECT step_data FROM operations WHERE id = ?", (op_id,)).fetchone()
    return msgspec.json.decode(raw, type=OperationProgress)


def test_sigkill_during_cordon_force_and_node_removal_then_resume(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    control_plane: Any,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-a"
    nodes = node_pool(2, name=pool, labels={pool_key: pool, "scalebot.test/group": unique_name})
    group = {"scalebot.test/group": unique_name}
    objects.create_deployment(admin_api, namespace, "web", 2, node_selector=group, grace=1)
    waits.wait_for_deployment_available(admin_api, namespace, "web")
    objects.create_pdb(admin_api, namespace, "web-pdb", match_labels={"app": "web"}, min_available=2)
    waits.wait_for_pdb_observed(admin_api, namespace, "web-pdb")
    web_pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rest.list_pods(admin_api, namespace)}
    assert len(web_pods) == 2

    db = tmp_path / "scalebot.db"

    def cordoned() -> list[str]:
        return [
            n for n in nodes if (rest.get(admin_api, rest.node_path(n))["spec"] or {}).get("unschedulable")
        ]

    def pods_left() -> list[str]:
        """The original web pods still there (their ReplicaSet recreates Pending copies at once)."""
        return [
            p["metadata"]["name"]
            for p in rest.list_pods(admin_api, namespace)
            if p["metadata"]["name"] in web_pods
        ]

    with FaultProxy(control_plane.api_port) as proxy:
        # Latency only: every request and answer waits 0.15 s, so a step takes a second or more.
        proxy.set(latency=0.15)
        kubeconfig = proxied_kubeconfig(scalebot_kubeconfig, proxy.port, tmp_path / "proxied.kubeconfig")
        args = _cli(kubeconfig, db, pool_key)

        # During cordon: the first node is cordoned, the second refused (an admission policy of
        # the test holds scalebot's writes to it), so the step's result is not persisted.
        with _writes_refused(admin_api, control_plane, nodes[1], unique_name):
            first = procs.scalebot("zero", "--yes", *args, name="zero")
            poll(
                lambda: last_step(db) == "cordon" and _step_failures(db) >= 1,
                60,
                "the cordon step to be half done",
            )
            first.kill9()
        assert cordoned() == [nodes[0]], "exactly one of the two nodes was cordoned"
        [(op_id, _, _, _)] = journal(db)[:1]
        assert operations(db)[op_id] == ("running", "cordon"), "killed before cordon finished"

        second = procs.scalebot("resume", *args, name="resume-1")
        # During phase 2: a DELETE with grace 0 has taken effect, its answer is still on the way.
        poll(lambda: last_step(db) == "force" and len(pods_left()) < 2, 90, "phase 2 to delete a pod")
        second.kill9()
        assert operations(db)[op_id] == ("running", "force")

        third = procs.scalebot("resume", *args, name="resume-2")
        poll(lambda: last_step(db) == "remove", 60, "node removal to start")
        third.kill9()
        assert operations(db)[op_id] == ("running", "remove")

        last = procs.scalebot("resume", *args, name="resume-3")
        assert last.wait(120) == 0, last.output()
    out = last.output()
    assert f"resumed: {op_id}" in out

    assert operations(db)[op_id] == ("succeeded", "verify")
    rows = journal(db, op_id)
    assert steps_in_order(rows) == ["record", "cordon", "drain", "force", "remove", "verify"], rows
    resumed_at = [step for _, step, event, _ in rows if event == "resumed"]
    assert resumed_at == ["cordon", "force", "remove"], rows
    assert rows[-1][2] == "succeeded"

    # The end state: every node of the (only) pool is gone, each web pod was force-deleted once.
    assert not [n for n in rest.list_items(admin_api, rest.node_path()) if n["metadata"]["name"] in nodes]
    data = _progress(db, op_id)
    assert sorted(data.drain.force_deleted) == sorted(f"{namespace}/{name}" for name in web_pods), data
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        audited = [
            d
            for (d,) in conn.execute(
                "SELECT detail FROM audit WHERE action = 'force_delete_pod' AND op_id = ?", (op_id,)
            )
        ]
    for name, uid in web_pods.items():
        assert sum(f"uid={uid}" in d for d in audited) == 1, (name, audited)
    assert data.drain.state is not None
    assert data.drain.state.already_cordoned == frozenset(), "scalebot's own cordons are not a human's"


def test_run_sigkill_while_a_slack_reply_is_in_flight_then_sigterm_mid_step(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    control_plane: Any,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    """`scalebot run` with Slack: kill -9 while a thread reply is in flight; restart; SIGTERM while a
    drain pass runs (exit 0, the pass is saved); restart; kill -9 in the last step; restart, and
    the operation ends at once: one parent message, no reply twice, the final reply exactly once,
    a continuous journal."""
    group = {"scalebot.test/group": unique_name}
    pool_a, pool_b = f"{unique_name}-a", f"{unique_name}-b"
    nodes_a = node_pool(2, name=pool_a, labels={pool_key: pool_a, **group})
    objects.create_deployment(admin_api, namespace, "web", 2, node_selector=group, grace=1)
    waits.wait_for_deployment_available(admin_api, namespace, "web")
    nodes_b = node_pool(1, name=pool_b, labels={pool_key: pool_b, **group})  # after: web runs on pool a
    objects.create_pdb(admin_api, namespace, "web-pdb", match_labels={"app": "web"}, min_available=2)
    waits.wait_for_pdb_observed(admin_api, namespace, "web-pdb")
    db = tmp_path / "scalebot.db"

    with slack_server() as slack, FaultProxy(control_plane.api_port) as proxy:
        proxy.set(latency=0.1)  # a drain pass lasts about a second: long enough to SIGTERM inside one
        kubeconfig = proxied_kubeconfig(scalebot_kubeconfig, proxy.port, tmp_path / "proxied.kubeconfig")
        setup = run_setup(
            tmp_path, name="run", kubeconfig=kubeconfig, pool_key=pool_key, slack_url=slack.url, db=db
        )
        # The first thread reply of the operation is "processed" by Slack only 8 s after it arrives.
        op_id = _zero_killed_while_held(procs, setup, slack, pool_a, _is_reply, 8)
        assert operations(db)[op_id][0] == "running"
        parent = slack.wait_for_call("chat.postMessage", lambda c: not c.body.get("thread_ts"), timeout=5)
        parent_ts = str(parent.response["ts"])

        second = start_run(procs, setup, name="run-2")
        wait_healthy(setup.url, second)
        poll(lambda: last_step(db) == "drain", 60, "the resumed operation to be draining")
        # SIGTERM while a drain pass is talking to the API server (a request just went out).
        sent = proxy.counts["chunks_up"]
        before_request = datetime.now(UTC)
        poll(lambda: proxy.counts["chunks_up"] > sent, 30, "the next drain pass")
        second.popen.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, second.output()[-3000:]
        assert "finishing the current steps" in second.output()
        assert operations(db)[op_id] == ("running", "drain")
        # The pass that sent that request was saved: after the signal when it was still under way
        # (a step under way finishes), or just before it when it ended first (waits between passes
        # hold no thread, so the signal then ends the wait at once, and that pass's save stands).
        assert _updated_at(db, op_id) >= before_request, "the pass under way finished and was saved"

        third = start_run(procs, setup, name="run-3")
        wait_healthy(setup.url, third)
        poll(lambda: sum(e == "resumed" for _, _, e, _ in journal(db, op_id)) == 2, 60, "the second resume")
        # Nothing blocks any more: the blocked pods go away (the next pass finds the nodes empty).
        rest.delete(admin_api, f"/apis/apps/v1/namespaces/{namespace}/deployments/web", grace=0)
        for pod in rest.list_pods(admin_api, namespace):
            rest.delete(admin_api, rest.pod_path(namespace, pod["metadata"]["name"]), grace=0)
        # SIGKILL during the last step, then a restart without latency: the resumed operation
        # ends within milliseconds, while the new process is still starting its Slack side
        # (auth.test answers slowly), and its final message must still reach the thread.
        poll(lambda: last_step(db) == "verify", 60, "the verify step")
        third.kill9()
        assert operations(db)[op_id] == ("running", "verify")
        proxy.set()
        slack.hold(lambda method, _: method == "auth.test", 1.5)  # and Slack is slow at this start
        fourth = start_run(procs, setup, name="run-4")
        wait_healthy(setup.url, fourth)
        slack.wait_for_call("chat.postMessage", lambda c: _is_final(c, parent_ts) and c.status == 200, 30)
        assert operations(db)[op_id] == ("succeeded", "verify")
        # The reply held when the first process died is "processed" by Slack too: wait for it.
        held = slack.held_bodies[0]
        slack.wait_for(lambda cs: any(c.body == held for c in cs), 15, "the held reply")
        fourth.popen.send_signal(signal.SIGTERM)
        assert fourth.wait(30) == 0, fourth.output()[-3000:]

    rows = journal(db, op_id)
    assert steps_in_order(rows) == ["record", "cordon", "drain", "remove", "verify"], rows
    resumed = [s for _, s, e, _ in rows if e == "resumed"]
    assert len(resumed) == 3 and resumed[1:] == ["drain", "verify"], rows
    posts = [c for c in slack.calls_to("chat.postMessage") if c.status == 200]
    assert [c for c in posts if not c.body.get("thread_ts")] == [parent], "one parent message"
    replies = [all_text(c) for c in posts if c.body.get("thread_ts") == parent_ts]
    assert len(replies) == len(set(replies)), f"duplicate thread replies: {replies}"
    assert sum("Completed" in r for r in replies) == 1, replies
    updates = [c for c in slack.calls_to("chat.update", ok_only=True) if c.body.get("ts") == parent_ts]
    assert updates and "Completed" in all_text(updates[-1])
    assert _count(db, "SELECT COUNT(*) FROM outbox") == 0, "nothing is still owed to Slack"
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & set(nodes_a) and set(nodes_b) <= names
    for proc in procs.started:
        assert "Traceback" not in proc.output(), proc.output()[-3000:]


def test_run_sigkill_while_slack_holds_the_card_post_then_the_restart_finds_it(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    """kill -9 while Slack holds a request's card post (Slack posts it 20 s later, after the
    process died, as it does with a call whose sender went away); the restarted process resumes
    the request, looks for the card (by the metadata key the dead process recorded before the
    call, 2 x the 15 s client timeout after it left) and edits it instead of posting it again:
    one card in the channel."""
    pool = f"{unique_name}-a"
    node_pool(1, name=pool, labels={pool_key: pool})
    db = tmp_path / "scalebot.db"
    with slack_server() as slack:
        setup = run_setup(
            tmp_path,
            name="run",
            kubeconfig=scalebot_kubeconfig,
            pool_key=pool_key,
            slack_url=slack.url,
            db=db,
            approval_required_for=["zero"],
        )
        op_id = _zero_killed_while_held(procs, setup, slack, pool, lambda m, b: not _is_reply(m, b), 20)
        assert operations(db)[op_id][0] == "awaiting_approval"
        assert _column(db, "SELECT key FROM post_attempts") == [f"op:{op_id}"]

        second = start_run(procs, setup, name="run-2")
        wait_healthy(setup.url, second)
        # Slack posts the held card; the new process then finds it and edits it.
        card = slack.wait_for_call("chat.postMessage", lambda c: c.status == 200, timeout=30)
        card_ts = str(card.response["ts"])
        lookup = slack.wait_for_call("conversations.history", timeout=60)
        edit = slack.wait_for_call("chat.update", lambda c: c.body.get("ts") == card_ts, timeout=30)
        assert lookup.body["channel"] == CHANNEL and edit.status == 200
        assert _column(db, "SELECT message_ts FROM operations WHERE id = ?", op_id) == [card_ts]
        assert _column(db, "SELECT key FROM post_attempts") == [], "settled: nothing left to look for"
        second.popen.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0, second.output()[-3000:]

    cards = [c for c in slack.calls_to("chat.postMessage") if not c.body.get("thread_ts")]
    assert [c.status for c in cards] == [200], "the card is posted once: the held call, by Slack"
    assert "an earlier process was posting" in second.output()
    for proc in procs.started:
        assert "Traceback" not in proc.output(), proc.output()[-3000:]


def _zero_killed_while_held(
    procs: Processes,
    setup: Any,
    slack: Any,
    pool: str,
    held: Callable[[str, dict[str, Any]], bool],
    seconds: float,
) -> str:
    """Start `scalebot run`, request `zero pool` in Slack, and kill -9 the process while Slack holds
    the first chat.postMessage that `held` matches (Slack processes it `seconds` after it arrived).
    Returns the operation's ID."""
    first = start_run(procs, setup, name="run-1")
    wait_healthy(setup.url, first)
    slack.hold(lambda method, body: method == "chat.postMessage" and held(method, body), seconds)
    signer = Signer(SIGNING_SECRET)
    body = signer.slash_command(
        f"zero {pool}", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
    )
    assert post(f"{setup.url}/slack/events", body, signer.headers(body)).status == 200
    slack.wait_held(60)
    first.kill9()
    [op_id] = operations(setup.db)
    return op_id


def _is_reply(method: str, body: dict[str, Any]) -> bool:
    return bool(body.get("thread_ts"))


def _is_final(call: Any, parent_ts: str) -> bool:
    return call.body.get("thread_ts") == parent_ts and "Completed" in all_text(call)


def _updated_at(db: Path, op_id: str) -> datetime:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (value,) = conn.execute("SELECT updated_at FROM operations WHERE id = ?", (op_id,)).fetchone()
    return datetime.fromisoformat(value)


def _column(db: Path, sql: str, *args: str) -> list[str]:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [str(value) for (value,) in conn.execute(sql, args)]


def _count(db: Path, sql: str) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute(sql).fetchone()[0])

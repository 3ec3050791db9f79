"""Two `scalebot run` instances, one database file, one cluster, leader election on.

Both run with `--leader-election`, distinct identities (POD_NAME scalebot-a / scalebot-b), POD_NAMESPACE
scalebot and the scalebot ServiceAccount's kubeconfig (the Lease Role of manifests/), against the
same SQLite file and the same local Slack. Each has its own bot token, so every recorded Slack call
says which instance made it.

Proves: only the Lease holder acts — it alone serves Slack, runs the operation and posts; the
standby makes no Slack call and no journal row while the leader lives (each row names the runner
that wrote it); `scalebot resume` beside the leader (as `kubectl exec` would run it) is refused and
writes nothing; SIGKILL of the leader in the
middle of an operation → the standby takes the Lease within the lease duration (15 s, the default,
not shortened) plus one retry period, resumes the operation from the database (one `resumed` row)
and finishes it in the same Slack thread; a SIGTERM of the new leader during the operation's
last step still delivers the final reply (once, by the new leader) before the process exits 0 (a
signal that lands before that step's turn began ends the run first; the next start finishes it).
Kubernetes traffic goes through the fault proxy with 0.1 s of latency so that step is long
enough to be interrupted.

The Lease mechanics alone (expiry, release, stale writes) are in tests/e2e/test_leader_election.py.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import rest
from tests.e2e import support
from tests.reliability.faultproxy import FaultProxy
from tests.reliability.support import (
    CHANNEL,
    OPERATOR,
    SIGNING_SECRET,
    Proc,
    Processes,
    journal,
    last_step,
    operations,
    poll,
    proxied_kubeconfig,
    run_setup,
    runners,
    slack_server,
    start_run,
    steps_in_order,
)
from tests.slack.harness import Call, Signer, all_text, get, post

pytestmark = pytest.mark.e2e

LEASE = "/apis/coordination.k8s.io/v1/namespaces/scalebot/leases/scalebot"
LEASE_SECONDS, RETRY_SECONDS = 15.0, 2.0
TOKENS = {"scalebot-a": "xoxb-1-instance-a", "scalebot-b": "xoxb-1-instance-b"}


@pytest.fixture
def fresh_lease(admin_api: Any) -> Iterator[None]:
    """scalebot's Lease (its default name) starts absent and is removed afterwards."""
    rest.delete(admin_api, LEASE)
    yield
    rest.delete(admin_api, LEASE)


def _holder(admin_api: Any) -> str:
    lease = rest.get_or_none(admin_api, LEASE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _by(call: Call) -> str:
    auth = call.headers.get("authorization", "")
    return next((who for who, token in TOKENS.items() if auth == f"Bearer {token}"), "?")


def test_only_the_leader_acts_and_the_standby_takes_over_after_a_kill(
    admin_api: Any,
    control_plane: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    fresh_lease: None,
    tmp_path: Path,
) -> None:
    pool_a = f"{unique_name}-a"
    nodes_a = node_pool(1, name=pool_a, labels={pool_key: pool_a})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b"})
    support.deployment(admin_api, namespace, "web", 1, node_selector={pool_key: pool_a}, grace=1)
    support.budget(admin_api, namespace, "web-pdb", app="web", min_available=1)
    db = tmp_path / "scalebot.db"

    with slack_server() as slack, FaultProxy(control_plane.api_port) as proxy:
        proxy.set(latency=0.1)  # each step lasts long enough to be interrupted where the test wants
        kubeconfig = proxied_kubeconfig(scalebot_kubeconfig, proxy.port, tmp_path / "proxied.kubeconfig")
        setups = {
            who: run_setup(
                tmp_path,
                name=who,
                kubeconfig=kubeconfig,
                pool_key=pool_key,
                slack_url=slack.url,
                db=db,
                bot_token=token,
                env={"POD_NAME": who, "POD_NAMESPACE": "scalebot"},
            )
            for who, token in TOKENS.items()
        }
        running: dict[str, Proc] = {
            who: start_run(procs, setup, name=who, leader_election=True) for who, setup in setups.items()
        }
        leader = poll(lambda: _holder(admin_api), 60, "a leader", interval=0.2)
        standby = next(who for who in TOKENS if who != leader)
        poll(lambda: _serving(setups[leader].url), 60, "the leader to serve Slack", interval=0.2)
        poll(lambda: _serving(setups[standby].health_url), 60, "the standby's health port", interval=0.2)
        assert not _serving(setups[standby].url), "the standby does not take Slack traffic"

        signer = Signer(SIGNING_SECRET)
        body = signer.slash_command(
            f"zero {pool_a}", user_id=OPERATOR, channel_id=CHANNEL, response_url=slack.response_url("cmd")
        )
        assert post(f"{setups[leader].url}/slack/events", body, signer.headers(body)).status == 200
        poll(lambda: last_step(db) == "drain", 60, "the operation to be draining (its PDB blocks it)")
        [op_id] = operations(db)
        parent = slack.wait_for_call("chat.postMessage", lambda c: not c.body.get("thread_ts"), timeout=30)
        parent_ts = str(parent.response["ts"])
        # Every replica checks its Slack credentials at start (auth.test): a standby with a bad
        # token must fail its start, not its takeover. Beyond that, only the leader talks to Slack.
        start_checks = {"auth.test", "apps.connections.open"}
        talked = {_by(c) for c in slack.calls if c.method not in start_checks}
        assert talked == {leader}, "only the leader talks to Slack"
        assert "leading:" not in running[standby].output()
        # The standby wrote nothing: every journal row so far is the leader's runner's.
        writers = runners(db, op_id)
        assert writers and set(writers) == {leader}, writers
        # `kubectl exec … scalebot resume` beside the leader: refused, nothing started or written.
        resume = procs.scalebot(
            "resume",
            "--kubeconfig",
            str(kubeconfig),
            "--db",
            str(db),
            "--pool-label",
            pool_key,
            "--cluster",
            "dev",
            name="resume-beside-run",
            env={"POD_NAME": leader},
        )
        assert resume.wait(60) == 1, resume.output()
        assert f"operation {op_id} is being run by {leader}" in resume.output(), resume.output()
        assert runners(db, op_id) == writers

        running[leader].kill9()
        killed_at = time.monotonic()
        poll(lambda: _holder(admin_api) == standby, LEASE_SECONDS + 10, "the standby to take the Lease")
        poll(lambda: any(e == "resumed" for _, _, e, _ in journal(db, op_id)), 30, "the operation to resume")
        took = time.monotonic() - killed_at
        assert took <= LEASE_SECONDS + RETRY_SECONDS * 1.2 + 3.0, f"took over after {took:.1f} s"
        assert "leading: resumed 1 operation(s)" in running[standby].output()
        print(f"takeover: Lease and operation resumed {took:.1f} s after the SIGKILL")

        # Unblock the drain: the pod goes away, the new leader finishes from the database.
        rest.delete(admin_api, f"/apis/apps/v1/namespaces/{namespace}/deployments/web", grace=0)
        for pod in rest.list_pods(admin_api, namespace):
            rest.delete(admin_api, rest.pod_path(namespace, pod["metadata"]["name"]), grace=0)
        # SIGTERM the new leader during the operation's last step: a step under way finishes while
        # the process shuts down, and its final message still goes out before it exits. The signal
        # follows the first request after the step began (each chunk now waits 0.3 s in the proxy,
        # so the step is still under way when it lands). That request is the verify step's, or,
        # rarely, the Lease's renewal before the verify turn began: then the signal ends the run
        # before its step (nothing half-done) and the next start finishes the operation.
        proxy.set(latency=0.3)
        poll(lambda: last_step(db) == "verify", 60, "the verify step")
        sent = proxy.counts["chunks_up"]
        poll(lambda: proxy.counts["chunks_up"] > sent, 30, "the verify step's first request", interval=0.005)
        signalled_at = time.monotonic()
        running[standby].popen.send_signal(signal.SIGTERM)
        assert running[standby].wait(30) == 0, running[standby].output()[-3000:]
        restarts, again = 0, None
        if operations(db)[op_id] == ("running", "verify"):
            print("the signal came before the verify turn began: the next start finishes the operation")
            restarts = 1
            again = start_run(procs, setups[standby], name=f"{standby}-again", leader_election=True)
        final = slack.wait_for_call(
            "chat.postMessage",
            lambda c: c.body.get("thread_ts") == parent_ts and "Completed" in all_text(c),
            timeout=60 if restarts else 5,
        )
        assert final.at >= signalled_at, "the operation ended during the shutdown (or after it)"
        if again is not None:
            again.popen.send_signal(signal.SIGTERM)
            assert again.wait(30) == 0, again.output()[-3000:]

    assert operations(db)[op_id] == ("succeeded", "verify")
    rows = journal(db, op_id)
    assert steps_in_order(rows) == ["record", "cordon", "drain", "remove", "verify"], rows
    assert [e for _, _, e, _ in rows].count("resumed") == 1 + restarts
    writers = runners(db, op_id)
    taken = writers.index(standby)
    assert set(writers[:taken]) == {leader} and set(writers[taken:]) == {standby}, writers
    assert _by(final) == standby
    assert {_by(c) for c in slack.calls if c.at > killed_at} == {standby}, "one instance at a time"
    replies = [all_text(c) for c in slack.calls_to("chat.postMessage", ok_only=True)]
    assert sum("Completed" in r for r in replies) == 1
    assert len([c for c in slack.calls_to("chat.postMessage") if not c.body.get("thread_ts")]) == 1
    updates = [c for c in slack.calls_to("chat.update", ok_only=True) if c.body.get("ts") == parent_ts]
    assert _by(updates[-1]) == standby and "Completed" in all_text(updates[-1]), "the same card, edited"
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & set(nodes_a)


def _serving(url: str) -> bool:
    try:
        return get(f"{url}/healthz", timeout=1).status == 200
    except OSError:
        return False

"""The real Bolt app over its real HTTP server, driven with requests signed exactly like Slack's.

Covers: usage errors as the ephemeral ack (nothing changes); a request posts an approval card;
the requester's own Approve is refused ephemerally with no chat.update; an approver's click
updates the card in place (buttons gone, "Approved by"); double clicks are idempotent; forged
signatures, stale timestamps and malformed bodies change nothing (401 / 400); acks arrive within
Slack's deadline while the operations service is blocked; a 429 on chat.update is retried after
Retry-After and the final state still arrives; unknown buttons get an answer; a failing call
gives a short ephemeral with an incident ID, never a trace; auth.test happens once.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from bot.slack.dispatch import Invocation, answer
from bot.text.commands import SubcommandArgs
from engine.domain.operation import OperationSummary, OpState, PoolSizes
from engine.pools.base import POOL_LABEL
from tests.slack.conftest import APPROVER, APPROVER_2, CHANNEL, OPERATOR, VIEWER, RunningBot
from tests.slack.harness import all_text, buttons_of, get, post

SLACK_DEADLINE = 3.0


def test_usage_error_is_the_ephemeral_ack_and_nothing_changes(bot: RunningBot) -> None:
    result, _ = bot.command("stauts")

    assert result.status == 200
    ack = result.json()
    assert ack["response_type"] == "ephemeral"
    assert "Did you mean `status`?" in json.dumps(ack)
    bot.settle()
    bot.assert_unchanged(no_reads=True)
    assert [c.method for c in bot.api.calls if c.method != "auth.test"] == []


def test_a_duration_without_a_unit_is_refused_in_the_ephemeral_ack(bot: RunningBot) -> None:
    result, _ = bot.command("wake for 30")

    ack = result.json()
    assert ack["response_type"] == "ephemeral"
    assert "`for 30`: a duration needs a unit — 30s or 30m?" in json.dumps(ack, ensure_ascii=False)
    bot.settle()
    bot.assert_unchanged(no_reads=True)


def test_injection_looking_names_are_refused_in_the_ack(bot: RunningBot) -> None:
    result, _ = bot.command("drain web-1;reboot")

    assert "web-1;reboot" in json.dumps(result.json())
    bot.settle()
    bot.assert_unchanged()


def test_help_is_answered_in_the_ack(bot: RunningBot) -> None:
    result, _ = bot.command("help")

    text = json.dumps(result.json())
    assert "/scale zero" in text and "/scale ops" in text


def test_request_posts_an_approval_card_in_the_channel(bot: RunningBot) -> None:
    result, _ = bot.command("zero dev-eu")

    assert result.status == 200 and "Planning zero of dev-eu" in result.json()["text"]
    card = bot.card()
    op = bot.only_op()
    assert card.body["channel"] == CHANNEL
    assert op.state is OpState.AWAITING_APPROVAL
    approve = next(b for b in buttons_of(card) if b["action_id"] == blocks.ACTION_APPROVE)
    assert approve["value"] == op.approval_id and approve["style"] == "primary" and "confirm" in approve
    assert "Zero-scale" in all_text(card) and "<@U0OPS>" in all_text(card)
    bot.settle()
    stored = bot.ops.get(op.id)
    assert stored is not None and (stored.channel, stored.message_ts) == (CHANNEL, card.response["ts"])
    # remembered for restarts


def test_unknown_pool_is_answered_ephemerally_with_the_valid_names(bot: RunningBot) -> None:
    _, response_url = bot.command("zero nosuchpool")

    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral"
    assert "batch, web" in reply.body["text"]
    bot.settle()
    assert bot.api.calls_to("chat.postMessage") == []


def test_requester_cannot_approve_their_own_request(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()

    result, response_url = bot.click(blocks.ACTION_APPROVE, approve["value"], user=OPERATOR)

    assert result.status == 200
    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral" and reply.body["replace_original"] is False
    assert "cannot approve your own request" in reply.body["text"]
    bot.settle()
    assert bot.api.calls_to("chat.update") == []
    assert bot.only_op().state is OpState.AWAITING_APPROVAL
    assert bot.audit_actions() == ["request", "refused_approve"]


def test_viewer_cannot_approve(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()

    _, response_url = bot.click(blocks.ACTION_APPROVE, approve["value"], user=VIEWER)

    assert "approver role" in bot.wait_reply(response_url).body["text"]
    bot.settle()
    assert bot.api.calls_to("chat.update") == []


def test_approver_click_updates_the_card_in_place(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    card = bot.card()
    approve = bot.approve_button()
    bot.settle()

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)

    update = bot.api.wait_for_call("chat.update", lambda c: "Approved by" in all_text(c))
    posted_ts = bot.only_op().message_ts
    assert update.body["channel"] == CHANNEL and update.body["ts"] == posted_ts
    assert "Approved by <@U0APP> at <!date^" in all_text(update)
    assert blocks.ACTION_APPROVE not in json.dumps(update.body["blocks"])
    assert [b["action_id"] for b in buttons_of(update)] == [blocks.ACTION_CANCEL]
    assert {b["block_id"] for b in update.body["blocks"]}.isdisjoint(
        {b["block_id"] for b in card.body["blocks"]}
    )


def test_double_click_is_idempotent_and_answered(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)
    bot.api.wait_for_call("chat.update", lambda c: "Approved by" in all_text(c))
    bot.settle()
    updates = len(bot.api.calls_to("chat.update"))

    _, response_url = bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER_2)

    said = bot.wait_reply(response_url).body["text"]
    assert "already running by <@U0APP> at <!date^" in said, "who and when, in the reader's own zone"
    bot.settle()
    assert len(bot.api.calls_to("chat.update")) == updates
    assert bot.audit_actions().count("approve") == 1  # asked twice, decided once


def test_reject_by_approver_is_final_and_removes_buttons(bot: RunningBot) -> None:
    bot.command("scale web 1")
    approve = bot.approve_button()

    bot.reject(approve["value"], user=APPROVER)

    update = bot.api.wait_for_call("chat.update", lambda c: "Rejected by <@U0APP>" in all_text(c))
    assert buttons_of(update) == []
    bot.settle()
    assert bot.outbox.pending() == []
    # What Slack shows: an edit without `blocks` would have kept the old Approve / Reject.
    shown = bot.api.shown(CHANNEL, update.body["ts"])
    assert "Rejected by <@U0APP>" in json.dumps(shown["blocks"], ensure_ascii=False)
    assert not [e for b in shown["blocks"] for e in b.get("elements", []) if e.get("type") == "button"]


def test_forged_signature_is_401_and_nothing_happens(bot: RunningBot) -> None:
    body = bot.signer.slash_command(
        "zero dev-eu", user_id=OPERATOR, channel_id=CHANNEL, response_url=bot.api.response_url()
    )
    forged = bot.signer.headers(body, signature="v0=" + "0" * 64)

    assert post(bot.events_url, body, forged).status == 401
    tampered = bot.signer.headers(body)
    assert post(bot.events_url, body.replace(b"dev-eu", b"prod"), tampered).status == 401
    bot.settle()
    bot.assert_unchanged(no_reads=True)
    assert [c.method for c in bot.api.calls if c.method != "auth.test"] == []


def test_timestamp_older_than_five_minutes_is_401_and_nothing_happens(bot: RunningBot) -> None:
    body = bot.signer.slash_command(
        "zero dev-eu", user_id=OPERATOR, channel_id=CHANNEL, response_url=bot.api.response_url()
    )
    stale = bot.signer.headers(body, timestamp=int(bot.signer.clock()) - 301)
    junk = {**bot.signer.headers(body), "X-Slack-Request-Timestamp": "yesterday"}

    assert post(bot.events_url, body, stale).status == 401
    assert post(bot.events_url, body, junk).status == 401
    bot.settle()
    bot.assert_unchanged(no_reads=True)


def test_malformed_bodies_are_400_and_change_nothing(bot: RunningBot) -> None:
    for body in (b"payload=%7Bnot-json", b"payload=%5B1%2C2%5D", b"\xff\xfe", b"[1, 2, 3]"):
        assert post(bot.events_url, body, bot.signer.headers(body)).status == 400, body
    bot.settle()
    bot.assert_unchanged(no_reads=True)


def test_malformed_click_payload_is_answered_and_changes_nothing(bot: RunningBot) -> None:
    response_url = bot.api.response_url()
    payload = bot.signer.block_actions_payload(
        blocks.ACTION_APPROVE,
        "x",
        user_id=APPROVER,
        channel_id=CHANNEL,
        message_ts="1.2",
        response_url=response_url,
    )
    del payload["user"]
    body = ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()

    assert post(bot.events_url, body, bot.signer.headers(body)).status == 200
    assert "nothing changed" in bot.wait_reply(response_url).body["text"]
    bot.settle()
    bot.assert_unchanged()


def test_unknown_button_is_answered_and_changes_nothing(bot: RunningBot) -> None:
    _, response_url = bot.click("somebody.elses_button", "whatever", user=APPROVER)

    assert "not one scalebot handles" in bot.wait_reply(response_url).body["text"]
    bot.settle()
    bot.assert_unchanged()


def test_ack_arrives_within_the_deadline_while_operations_are_blocked(bot: RunningBot) -> None:
    bot.cluster.gate.clear()  # every listing of the cluster now blocks until the test opens the gate
    try:
        # The first request's work starts once its ack is out (acks first), so the test waits until
        # that work is inside the blocked listing before the other eleven are sent: their acks are
        # then measured while an operation is blocked, not before any work began.
        sent = [bot.command("scale web 0")]
        assert bot.cluster.entered.wait(timeout=10), "the first request's work never reached the cluster"
        with ThreadPoolExecutor(max_workers=11) as pool:
            sent += list(pool.map(lambda i: bot.command(f"scale web {i % 3}"), range(1, 12)))
        assert [r.status for r, _ in sent] == [200] * 12
        assert max(r.elapsed for r, _ in sent) < SLACK_DEADLINE / 2
        assert bot.api.calls_to("chat.postMessage") == []
    finally:
        bot.cluster.gate.set()
    # One request takes the pool's lock and gets a card; every other one is told it is busy.
    bot.card(timeout=10)
    bot.api.wait_for(lambda cs: sum(c.method == "response_url" for c in cs) >= 11, timeout=10)
    bot.settle()
    replies = [r for _, url in sent for r in bot.replies_to(url)]
    assert len(bot.api.calls_to("chat.postMessage")) == 1
    assert len(replies) == 11 and all("is busy" in r.body["text"] for r in replies)


def test_rate_limited_update_is_retried_after_retry_after_and_final_state_delivered(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()
    bot.api.fail("chat.update", times=1, status=429, retry_after=1)

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)
    bot.api.wait_for(lambda cs: any(c.method == "chat.update" and c.status == 429 for c in cs), 10)
    op = bot.only_op()
    bot.play(
        op.id,
        "final",
        "Completed in 4m05s",
        state=OpState.SUCCEEDED,
        step="finish",
        summary=OperationSummary(
            duration_seconds=245,
            pods_evicted=12,
            pods_force_deleted=1,
            nodes_removed=5,
            pools={"web": PoolSizes(3, 0), "batch": PoolSizes(2, 0)},
        ),
    )

    updates = bot.api.wait_for(
        lambda cs: any(
            c.method == "chat.update" and c.status == 200 and "Completed" in all_text(c) for c in cs
        ),
        10,
    )
    limited = next(c for c in updates if c.method == "chat.update" and c.status == 429)
    delivered = bot.api.calls_to("chat.update", ok_only=True)
    assert delivered[0].at - limited.at >= 1.0
    assert "Completed" in all_text(delivered[-1]) and buttons_of(delivered[-1]) == []
    final = bot.api.wait_for_call("chat.postMessage", lambda c: bool(c.body.get("thread_ts")))
    assert "12" in all_text(final) and "Pods evicted" in all_text(final)
    bot.settle()
    assert bot.outbox.pending() == []


def test_a_failing_operation_call_gives_an_incident_not_a_trace(bot: RunningBot) -> None:
    bot.cluster.error = RuntimeError("kaboom xoxb-test-token")

    _, response_url = bot.command("zero dev-eu")

    text = bot.wait_reply(response_url).body["text"]
    assert "Something failed" in text and "incident" in text
    assert "kaboom" not in text and "Traceback" not in text and "xoxb" not in text


def test_status_and_whoami_are_ephemeral_views(bot: RunningBot) -> None:
    _, status_url = bot.command("status")
    _, whoami_url = bot.command("whoami", user=APPROVER)

    status = bot.wait_reply(status_url)
    assert status.body["response_type"] == "ephemeral"
    assert "Cluster dev-eu" in all_text(status)
    assert "approver" in all_text(bot.wait_reply(whoami_url))


def test_cordon_is_announced_in_channel(bot: RunningBot) -> None:
    _, response_url = bot.command("cordon web-1 web-2")

    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "in_channel" and "<@U0OPS>" in reply.body["text"]
    nodes = {n.name: n.unschedulable for n in bot.cluster.list_nodes()}
    assert nodes == {"batch-1": False, "batch-2": False, "web-1": True, "web-2": True, "web-3": False}
    assert bot.audit_actions() == ["cordon"]


def test_auth_test_is_called_once(bot: RunningBot) -> None:
    for text in ("help", "status", "zero dev-eu"):
        bot.command(text)
    bot.card()
    bot.settle()

    assert len(bot.api.calls_to("auth.test")) == 1


def test_healthz_answers(bot: RunningBot) -> None:
    assert bot.http is not None
    result = get(f"http://127.0.0.1:{bot.http.port}/healthz")
    assert result.status == 200 and result.body == "ok\n"


def test_two_approvers_clicking_at_once_decide_once(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    barrier = threading.Barrier(2)

    def click(user: str) -> str:
        barrier.wait()
        _, response_url = bot.click(blocks.ACTION_APPROVE, approve["value"], user=user)
        return response_url

    with ThreadPoolExecutor(max_workers=2) as pool:
        urls = list(pool.map(click, (APPROVER, APPROVER_2)))
    bot.settle()

    assert bot.only_op().state is OpState.RUNNING
    assert bot.audit_actions(bot.only_op().id).count("approve") == 1
    answered = [u for u in urls if bot.replies_to(u)]
    assert len(answered) == 1 and "already" in bot.replies_to(answered[0])[0].body["text"]


def test_http_edges_change_nothing(bot: RunningBot) -> None:
    base = bot.events_url.rsplit("/slack/events", 1)[0]
    assert get(bot.events_url).status == 405
    assert post(f"{base}/elsewhere", b"x", {}).status == 404
    assert _status_of_announced_body(bot, 4 * 1024 * 1024 + 1) == 413  # refused before it is read
    bot.settle()
    bot.assert_unchanged(no_reads=True)


def _status_of_announced_body(bot: RunningBot, length: int) -> int:
    """Send only the headers of a POST announcing `length` bytes; read the server's answer."""
    assert bot.http is not None
    with socket.create_connection(("127.0.0.1", bot.http.port), timeout=5) as conn:
        head = (
            f"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n\r\n"
        )
        conn.sendall(head.encode())
        status_line = conn.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def test_plan_is_ephemeral_and_changes_nothing(bot: RunningBot) -> None:
    _, response_url = bot.command("plan zero dev-eu")

    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral"
    assert "nothing was changed" in all_text(reply) and "shop/db-0" in all_text(reply)
    bot.settle()
    bot.assert_unchanged()
    assert bot.api.calls_to("chat.postMessage") == []


def test_ops_list_show_and_cancel(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    bot.card()
    op = bot.only_op()

    _, list_url = bot.command("ops")
    _, show_url = bot.command(f"ops show {op.id}")
    assert op.id in all_text(bot.wait_reply(list_url))
    shown = all_text(bot.wait_reply(show_url))
    assert "awaiting approval" in shown and "U0OPS: request" in shown

    _, cancel_url = bot.command(f"ops cancel {op.id}")

    assert "Cancelled operation" in bot.wait_reply(cancel_url).body["text"]
    update = bot.api.wait_for_call("chat.update", lambda c: "Cancelled by <@U0OPS>" in all_text(c))
    assert buttons_of(update) == []
    _, missing_url = bot.command("ops show op-00000000")
    assert "No operation `op-00000000`" in bot.wait_reply(missing_url).body["text"]


def test_a_listener_crash_is_answered_by_the_error_boundary(
    bot: RunningBot, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("parser bug xoxb-test-token")

    monkeypatch.setattr("bot.text.commands.parse", explode)

    result, _ = bot.command("status")

    assert result.status == 200
    ack = result.json()
    assert ack["response_type"] == "ephemeral" and "Something failed" in ack["text"]
    assert "parser bug" not in ack["text"] and "xoxb" not in ack["text"]
    assert any(r.exc_info and "parser bug" in str(r.exc_info[1]) for r in caplog.records)
    bot.settle()
    bot.assert_unchanged(no_reads=True)


def test_a_stale_plan_is_superseded_and_a_new_card_asks_again(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    old_card = bot.card()
    approve = bot.approve_button()
    bot.settle()
    bot.cluster.add_node("web-4", labels={POOL_LABEL: "web"})  # the cluster moved on since the card

    _, response_url = bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)

    assert "cluster changed" in bot.wait_reply(response_url).body["text"]
    update = bot.api.wait_for_call("chat.update", lambda c: c.body["ts"] == old_card.response["ts"])
    assert buttons_of(update) == [] and "♻️" in all_text(update)
    new_card = bot.api.wait_for_call(
        "chat.postMessage", lambda c: c.response.get("ts") != old_card.response["ts"] and bool(buttons_of(c))
    )
    [new_op] = bot.ops.list_operations(active_only=True)
    assert next(b for b in buttons_of(new_card) if b["action_id"] == blocks.ACTION_APPROVE)["value"] == (
        new_op.approval_id
    )


def test_schedule_work_plugs_in_subcommands_and_buttons(make_bot: Callable[..., RunningBot]) -> None:
    seen: list[tuple[str, object]] = []

    def schedule(args: SubcommandArgs, inv: Invocation) -> None:
        seen.append(("schedule", args.args))
        answer(inv, views.text_message("3 schedules"))

    def skip(value: str, inv: Invocation) -> None:
        seen.append(("skip", (value, inv.user, inv.channel)))
        answer(inv, views.text_message("skipped tonight"))

    bot = make_bot(subcommands={"schedule": schedule}, clicks={blocks.ACTION_SKIP: skip})

    _, list_url = bot.command("schedule list")
    _, skip_url = bot.click(blocks.ACTION_SKIP, "occ-2026-03-02-sleep", user=APPROVER)

    assert bot.wait_reply(list_url).body["text"] == "3 schedules"
    assert bot.wait_reply(skip_url).body["text"] == "skipped tonight"
    assert seen == [("schedule", ("list",)), ("skip", ("occ-2026-03-02-sleep", APPROVER, CHANNEL))]


def test_schedule_without_its_handler_says_so(bot: RunningBot) -> None:
    _, response_url = bot.command("schedule list")
    assert "not available" in bot.wait_reply(response_url).body["text"]

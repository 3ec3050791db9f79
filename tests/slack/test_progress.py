"""Live progress through the real sender against the local Web API.

Covers: 50 rapid progress events cost a bounded number of chat.update calls and unchanged
renderings cost none; phase changes edit the card, while blocker lists (DrainingSucceeded,
preformatted) and the final summary of a person's request go to the operation's thread in order,
and a schedule's operation that succeeds posts nothing after its card; a final state that Slack kept refusing
(500s) is delivered by the next process from the outbox; server errors are retried without
duplicate thread replies; an operation started in a thread (a schedule's announcement) keeps
its message in that thread.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.config.settings import SenderSettings
from bot.slack.delivery.outbox import MemoryOutbox
from engine.domain.operation import OperationSummary, OpState, PoolSizes
from tests.slack.conftest import CHANNEL, OPERATOR, RunningBot
from tests.slack.harness import Call, all_text

CONDITION = "\n".join(
    [
        "Drain not completed yet (started at 2026-03-02T14:02:00Z):",
        "* Pods with deletionTimestamp that still exist: shop/cart-5d9f, shop/cart-7a1b",
        "* Pods with eviction failed:",
        "  * Cannot evict pod as it would violate the pod's disruption budget. "
        "The disruption budget db needs 1 healthy pods and has 1 currently: shop/db-0",
    ]
)


def _start_drain(bot: RunningBot) -> tuple[str, str]:
    bot.command("drain web-1")  # drains need no approval on dev-eu: the progress parent is posted at once
    parent = bot.card()
    op = bot.only_op()
    assert op.state is OpState.RUNNING
    return op.id, str(parent.response["ts"])


def _replies(bot: RunningBot, ts: str) -> list[Call]:
    return [c for c in bot.api.calls_to("chat.postMessage", ok_only=True) if c.body.get("thread_ts") == ts]


def test_fifty_rapid_events_cost_a_bounded_number_of_updates(make_bot: Callable[..., RunningBot]) -> None:
    bot = make_bot(sender=SenderSettings(update_interval=0.5, updates_per_minute=600, posts_per_second=100))
    op_id, ts = _start_drain(bot)
    bot.settle()

    for left in range(50, 0, -1):
        bot.play(op_id, "report", f"Draining web-1: {left} Pods left")

    bot.api.wait_for(
        lambda cs: any(c.method == "chat.update" and "1 Pods left" in all_text(c) for c in cs), timeout=5
    )
    bot.settle()
    updates = bot.api.calls_to("chat.update")
    assert 1 <= len(updates) <= 3, [all_text(u)[:80] for u in updates]
    assert all(u.body["ts"] == ts for u in updates)
    assert "1 Pods left" in all_text(updates[-1])


def test_unchanged_renderings_send_nothing(bot: RunningBot) -> None:
    op_id, _ = _start_drain(bot)
    bot.play(op_id, "report", "Draining web-1: 3 Pods left")
    bot.api.wait_for(lambda cs: any("3 Pods left" in all_text(c) for c in cs if c.method == "chat.update"))
    bot.settle()
    before = len(bot.api.calls)

    for _ in range(20):
        bot.play(op_id, "report", "Draining web-1: 3 Pods left")
    bot.settle()

    assert len(bot.api.calls) == before


def test_phases_edit_the_card_and_only_blockers_and_the_final_summary_go_to_the_thread(
    bot: RunningBot,
) -> None:
    op_id, ts = _start_drain(bot)

    bot.play(op_id, "phase", "Cordoned 1 node", step="cordon")
    bot.settle()
    assert "Cordoned 1 node" in all_text(bot.api.calls_to("chat.update", ok_only=True)[-1])
    bot.play(op_id, "report", "Draining web-1: 3 Pods left", condition=CONDITION, step="drain")
    bot.play(op_id, "phase", "Phase 2: force-deleting 1 Pod", step="force")
    bot.play(
        op_id,
        "final",
        "Completed in 4m05s",
        state=OpState.SUCCEEDED,
        step="finish",
        summary=OperationSummary(
            duration_seconds=245,
            pods_evicted=3,
            pods_force_deleted=1,
            nodes_removed=1,
            pools={"web": PoolSizes(3, 2)},
        ),
    )

    bot.api.wait_for(lambda cs: len([c for c in cs if c.body.get("thread_ts") == ts]) == 2)
    bot.settle()
    replies = _replies(bot, ts)
    texts = [all_text(r) for r in replies]
    assert len(texts) == 2, "a phase change is an edit of the card, not a reply"
    assert "```" in texts[0] and "Pods with eviction failed" in texts[0] and "shop/db-0" in texts[0]
    # The requester (a person) is told in the thread: a mention in an edit would notify nobody.
    assert "Completed" in texts[1] and "Pods evicted* 3" in texts[1] and "Force-deleted* 1" in texts[1]
    assert all(r.body["channel"] == CHANNEL for r in replies)
    last_parent = bot.api.calls_to("chat.update", ok_only=True)[-1]
    assert "✅" in all_text(last_parent) and "Cancel" not in all_text(last_parent)
    assert "Completed in 4m05s" in all_text(last_parent)


def test_a_late_progress_event_never_overwrites_the_final_state(bot: RunningBot) -> None:
    op_id, _ = _start_drain(bot)
    bot.play(op_id, "final", "Completed in 12s", state=OpState.SUCCEEDED, step="finish")
    bot.api.wait_for(
        lambda cs: any("Completed in 12s" in all_text(c) for c in cs if c.method == "chat.update")
    )
    bot.settle()
    updates = len(bot.api.calls_to("chat.update"))

    bot.play(op_id, "report", "Draining web-1: 1 Pods left", state=OpState.RUNNING)
    bot.settle()

    assert len(bot.api.calls_to("chat.update")) == updates


def test_final_state_refused_by_slack_is_delivered_after_a_restart(
    make_bot: Callable[..., RunningBot],
) -> None:
    outbox = MemoryOutbox()
    first = make_bot(outbox=outbox)
    op_id, ts = _start_drain(first)
    first.settle()
    first.api.fail("chat.update", times=1000, status=500)
    first.api.fail("chat.postMessage", times=1000, status=500)

    first.play(
        op_id,
        "final",
        "Completed in 1m02s",
        state=OpState.SUCCEEDED,
        step="finish",
        summary=OperationSummary(duration_seconds=62, pods_evicted=4),
    )
    first.api.wait_for(lambda cs: any(c.method == "chat.update" and c.status == 500 for c in cs))
    first.executor.wait_idle()
    assert first.progress.flush(5)
    assert not first.sender.stop(timeout=0.2)  # undelivered: the process "dies" here
    assert {i.kind for i in outbox.pending()} == {"message", "reply"}
    first.api.clear_faults()

    second = make_bot(outbox=outbox)

    second.api.wait_for(
        lambda cs: any(
            c.method == "chat.update" and c.status == 200 and "Completed in 1m02s" in all_text(c) for c in cs
        )
    )
    final_reply = second.api.wait_for_call(
        "chat.postMessage", lambda c: c.status == 200 and c.body.get("thread_ts") == ts
    )
    assert "Pods evicted* 4" in all_text(final_reply)
    second.settle()
    assert outbox.pending() == []


def test_server_errors_are_retried_without_duplicate_replies(bot: RunningBot) -> None:
    op_id, ts = _start_drain(bot)
    bot.settle()
    bot.api.fail("chat.postMessage", times=2, status=500)

    bot.play(op_id, "report", "Draining web-1: 3 Pods left", condition=CONDITION, step="drain")
    bot.play(op_id, "final", "Failed: the drain timed out", state=OpState.FAILED, error="drain timed out")

    bot.api.wait_for(
        lambda cs: len([c for c in cs if c.status == 200 and c.body.get("thread_ts") == ts]) == 2, 10
    )
    bot.settle()
    texts = [all_text(r) for r in _replies(bot, ts)]
    assert len(texts) == 2 and "shop/db-0" in texts[0] and "Failed" in texts[1]


def test_an_operation_started_in_a_thread_keeps_its_message_there(bot: RunningBot) -> None:
    from engine.domain.operation import OperationRequest, OpKind, Target

    outcome = bot.ops.request(
        OperationRequest(
            kind=OpKind.DRAIN,
            target=Target(cluster="dev-eu", nodes=("web-2",)),
            requested_by="schedule:nightly",
            channel=CHANNEL,
            thread_ts="1699999999.000100",
        )
    )
    assert outcome.operation is not None
    bot.progress.show(outcome.operation)

    parent = bot.api.wait_for_call("chat.postMessage", lambda c: c.status == 200)
    assert parent.body["thread_ts"] == "1699999999.000100"
    assert "schedule *nightly*" in all_text(parent)
    bot.play(outcome.operation.id, "report", "Draining web-2: 3 Pods left", condition=CONDITION)
    reply = bot.api.wait_for_call("chat.postMessage", lambda c: "shop/db-0" in all_text(c))
    assert reply.body["thread_ts"] == "1699999999.000100"


def test_a_schedules_operation_that_succeeds_posts_nothing_after_its_card(bot: RunningBot) -> None:
    """A fleet's night: phases and the summary edit the card; no reply (every post counts against
    the workspace's budget, and nobody has to act)."""
    from engine.domain.operation import OperationRequest, OpKind, Target

    outcome = bot.ops.request(
        OperationRequest(
            kind=OpKind.DRAIN,
            target=Target(cluster="dev-eu", nodes=("web-2",)),
            requested_by="schedule:nightly",
            channel=CHANNEL,
            thread_ts="1699999999.000100",
        )
    )
    assert outcome.operation is not None
    op_id = outcome.operation.id
    bot.progress.show(outcome.operation)
    bot.api.wait_for_call("chat.postMessage", lambda c: c.status == 200)
    bot.settle()

    bot.play(op_id, "phase", "Cordoned 1 node", step="cordon")
    bot.play(op_id, "phase", "Drain completed", step="drain")
    bot.play(op_id, "phase", "Removed 1 node", step="remove")
    summary = OperationSummary(duration_seconds=12, pods_evicted=3, nodes_removed=1)
    bot.play(op_id, "final", "Completed in 12s", state=OpState.SUCCEEDED, step="finish", summary=summary)
    bot.api.wait_for(
        lambda cs: any("Completed in 12s" in all_text(c) for c in cs if c.method == "chat.update")
    )
    bot.settle()

    assert len(bot.api.calls_to("chat.postMessage")) == 1, "only the card was posted"
    assert "✅" in all_text(bot.api.calls_to("chat.update", ok_only=True)[-1])


def test_the_status_line_carries_the_bar_and_figures_of_a_real_drain(
    make_bot: Callable[..., RunningBot],
) -> None:
    bot = make_bot(run=True)
    for i in range(3):  # evicted at once; shop/db-0 (its budget allows no disruption) holds web-1
        bot.cluster.add_pod(
            "shop", f"cart-{i}", node="web-1", controller_kind="ReplicaSet", controller_name="cart", grace=0
        )
    bot.command("drain web-1")
    ts = str(bot.card().response["ts"])

    update = bot.api.wait_for_call("chat.update", lambda c: "▰" in all_text(c) or "▱" in all_text(c))
    assert "▱▱▱▱▱▱▱▱ 0/1 nodes · 3/4 pods · " in all_text(update), all_text(update)
    blockers = bot.api.wait_for_call(
        "chat.postMessage", lambda c: c.body.get("thread_ts") == ts and "shop/db-0" in all_text(c)
    )
    assert "Pod shop/db-0: cannot evict pod as it would violate" in all_text(blockers)
    assert "▱" not in all_text(blockers)

    bot.ops.cancel(bot.only_op().id, by=OPERATOR, channel=CHANNEL)
    assert bot.wait_finished().state is OpState.CANCELLED
    bot.settle()
    assert "▱" not in all_text(bot.api.calls_to("chat.update")[-1]), "a final rendering has no bar"

"""The fleet digest (`fleet_digest_channel`): the operations schedules started in the same minute
get one summary message there, edited as they end, through the real Progress worker and sender
against the local Web API.

Covers: one post for the minute, then edits; a line per cluster with its outcome (done, needs
attention while its drain is held up or after a cancel, failed), each linking to its card's
permalink (chat.getPermalink); the last rendering counts every outcome and is a final one
(nothing left in the outbox); an operation no schedule started is not in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from bot.slack.delivery.progress import message_key
from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, Target
from tests.slack.conftest import CHANNEL, RunningBot
from tests.slack.harness import Call, all_text, wait_until

DIGEST = "C0DIGEST"
HELD_UP = "Drain not completed yet:\n* Pods with eviction failed: shop/db-0"


def _scheduled(bot: RunningBot, cluster: str, node: str, n: int) -> Operation:
    outcome = bot.ops.request(
        OperationRequest(
            kind=OpKind.DRAIN,
            target=Target(cluster=cluster, nodes=(node,)),
            requested_by=f"schedule:nights-{n}",
            channel=CHANNEL,
        )
    )
    assert outcome.operation is not None, outcome.reply
    op = replace(outcome.operation, state=OpState.RUNNING)  # this engine runs nothing: the test plays it
    bot.ops.store.save_operation(op)
    bot.progress.show(op)
    return op


def _digest_updates(bot: RunningBot) -> list[Call]:
    return _updates_in(bot.api.calls_to("chat.update", ok_only=True))


def _updates_in(calls: list[Call]) -> list[Call]:
    return [
        c for c in calls if c.method == "chat.update" and c.status == 200 and c.body.get("channel") == DIGEST
    ]


def test_the_digest_of_a_minutes_schedules_is_edited_to_its_final_state(
    make_bot: Callable[..., RunningBot],
) -> None:
    bot = make_bot(digest_channel=DIGEST)
    # The three requests go in one clock minute (the digest groups by the minute they were made in).
    wait_until(lambda: datetime.now(UTC).second < 50, 15, "a minute with room for three requests")
    done = _scheduled(bot, "dev-eu", "web-1", 1)
    failing = _scheduled(bot, "dev-eu", "web-2", 2)
    cancelled = _scheduled(bot, "dev-eu", "batch-1", 3)
    bot.command("drain web-3")  # a person's request: not a schedule's, not in the digest
    bot.api.wait_for_call("chat.postMessage", lambda c: c.body.get("channel") == DIGEST)
    bot.settle()

    bot.play(failing.id, "report", "Draining web-2: 1 Pod left", condition=HELD_UP, step="drain")
    bot.settle()
    assert "1 needs attention" in all_text(_digest_updates(bot)[-1])

    bot.play(done.id, "final", "Completed in 12s", state=OpState.SUCCEEDED, step="finish")
    bot.play(failing.id, "final", "Failed: the drain timed out", state=OpState.FAILED, error="timed out")
    bot.play(cancelled.id, "final", "Cancelled", state=OpState.CANCELLED)
    bot.api.wait_for(lambda cs: any("1 done" in all_text(c) for c in _updates_in(cs)))
    bot.settle()

    posts = [c for c in bot.api.calls_to("chat.postMessage") if c.body.get("channel") == DIGEST]
    assert len(posts) == 1, "one digest for the minute, edited afterwards"
    final = all_text(_digest_updates(bot)[-1])
    assert "Fleet: 3 scheduled runs" in final
    assert "1 done · 1 needs attention · 1 failed" in final and "running" not in final
    for op, outcome in ((done, "done"), (failing, "failed"), (cancelled, "needs attention")):
        where = bot.outbox.lookup(message_key(op.id))
        assert where is not None
        link = f"https://scalebot-test.slack.com/archives/{where[0]}/p{where[1].replace('.', '')}"
        assert f"<{link}|dev-eu> · {outcome}" in final, final
    assert bot.outbox.pending() == [], "the digest's last rendering was a final one, delivered"

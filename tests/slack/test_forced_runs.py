"""Forced runs in Slack, over signed HTTP with the real engine and the local Web API recorder.

A `--force` drain by an operator waits for an approval under the default policy, and its card
names each Pod it would force with why a plain drain refuses it. A Pod that appears after the
approval, outside the approved force scope, is not force-deleted in phase 2: the thread says
what appeared (Pod, owner, why it blocks) and how to approve it.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.slack.blocks import operations as blocks
from engine.domain.operation import OpState, ProgressEvent
from tests.slack.conftest import APPROVER, RunningBot
from tests.slack.harness import all_text, buttons_of


def test_a_forced_drain_waits_for_approval_and_its_card_names_each_pod_it_forces(bot: RunningBot) -> None:
    bot.cluster.add_pod("shop", "bare", node="web-2")
    bot.cluster.add_pod(
        "shop",
        "pinned",
        node="web-2",
        controller_kind="ReplicaSet",
        controller_name="pin",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
    )

    bot.command("drain web-2 --force")

    card = bot.card()
    text = all_text(card)
    assert "Forced run (--force)" in text, text
    assert "shop/bare (Pod/shop/bare): bare Pod (no controller): nothing recreates it" in text
    assert "shop/pinned (ReplicaSet/shop/pin): annotated karpenter.sh/do-not-disrupt=true" in text
    assert blocks.ACTION_APPROVE in [b["action_id"] for b in buttons_of(card)]
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.AWAITING_APPROVAL and op.approvals_required == 1
    assert bot.engine.held == [], "nothing started before an approval"


def test_a_pod_outside_the_approved_scope_is_not_force_deleted_and_the_thread_asks(
    make_bot: Callable[..., RunningBot],
) -> None:
    bot = make_bot(run=True)
    added: list[str] = []

    def after_the_click(event: ProgressEvent) -> None:
        if not added and event.text.startswith("Cordoned"):
            added.append("cache-0")  # a StatefulSet Pod under a budget allowing no disruption
            bot.cluster.add_pod(
                "shop",
                "cache-0",
                node="web-3",
                controller_kind="StatefulSet",
                controller_name="cache",
                labels={"app": "cache"},
            )
            bot.cluster.add_pdb("shop", "cache", match_labels={"app": "cache"}, disruptions_allowed=0)

    bot.ops.subscribe(after_the_click)
    bot.command("zero dev-eu")
    approve = bot.approve_button()

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)

    assert bot.wait_finished().state is OpState.FAILED
    reply = bot.api.wait_for_call(
        "chat.postMessage",
        lambda c: bool(c.body.get("thread_ts")) and "Nothing was force-deleted" in all_text(c),
        timeout=10,
    )
    said = all_text(reply)
    assert "StatefulSet/shop/cache was not in the approved force scope" in said
    assert "request the operation again" in said, "the thread offers the new approval"
    assert "shop/cache-0 (owner StatefulSet/shop/cache" in said
    assert added == ["cache-0"] and bot.cluster.get_pod("shop", "cache-0") is not None
    assert bot.cluster.get_pod("shop", "db-0") is not None, "the approved blocker stays too: no node goes"

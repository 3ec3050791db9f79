"""No dead ends in a schedule, in Slack: Bolt under a real HTTP server with signed requests, the
local Web API recorder, the real Operations, Schedules and SQLite, the real timer on a FakeClock.

A scheduled zero of pools web and batch, with a Pod on web whose owner opted out of disruption,
is announced with what it needs (the Pod, its owner, its pool, why) and the choices: Approve with
force, Leave out web, Skip. Left alone it does not start (no operation failing in 0 s); approved
by another approver it runs forced with exactly the scope shown; with web left out, batch runs.
Clicks re-check the clicker (the schedule's creator cannot approve its force without
self-approval) and re-parse the button value.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.slack.blocks import schedules as schedule_blocks
from engine.domain.operation import OpState
from tests.slack.conftest import APPROVER, APPROVER_2, CHANNEL, OPERATOR, VIEWER
from tests.slack.harness import Call, all_text, buttons_of, wait_until
from tests.slack.markup import foreign_tokens
from tests.slack.test_schedules_slack import World, command, slack_api, utc, world
from tests.unit.engine.domain.test_force_scope import pinned

__all__ = ["slack_api", "world"]  # the schedule tests' fixtures

KEY = "nights:2026-03-02:sleep"
PIN = "ReplicaSet/shop/pin"
ADD = (
    "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m,10m "
    "approval=pre pools=web,batch <#C0DEV|platform>"
)


def announced(world: World, *, before: Callable[[], None] = lambda: None) -> Call:
    """The schedule (created by APPROVER, pre-approved by APPROVER_2) announced at its 60-minute lead,
    with a third pool left awake (so nothing reaches phase 2) and a do-not-disrupt Pod on web;
    `before` runs just before the announcement."""
    assert world.cluster is not None
    world.cluster.add_node("gpu-0", labels={"scalebot.io/pool": "gpu"})
    pinned(world.cluster, "pin-1", "web-1")
    _, reply = command(world, ADD)
    assert "Schedule saved" in all_text(reply), all_text(reply)
    _, approved = command(world, "schedule approve nights", user=APPROVER_2)
    assert "Pre-approved schedule nights" in all_text(approved), all_text(approved)
    before()
    world.at(utc(2, 18))
    world.tick()
    return world.announcement()


def button(card: Call, action: str) -> dict[str, str]:
    [found] = [b for b in buttons_of(card) if b["action_id"] == action]
    return found


def click(world: World, card: Call, action: str, user: str, value: str | None = None) -> str:
    value = value if value is not None else button(card, action)["value"]
    result, url = world.bot.click(action, value, user=user, message_ts=card.response["ts"])
    assert result.status == 200
    return url


def edited(world: World, card: Call, fragment: str) -> Call:
    ts = card.response["ts"]
    return world.bot.api.wait_for_call(
        "chat.update", lambda c: c.body.get("ts") == ts and fragment in all_text(c), timeout=10
    )


def test_a_scheduled_zero_with_a_do_not_disrupt_pod_is_announced_with_the_choice_not_run_to_a_certain_failure(
    world: World,
) -> None:
    card = announced(world)
    text = all_text(card)
    assert "This run needs force." in text and "Without it, it fails at once" in text
    assert "`shop/pin-1` (owner ReplicaSet/shop/pin, pool web): annotated karpenter.sh/do-not-disrupt" in text
    actions = [b["action_id"] for b in buttons_of(card)]
    assert actions[:2] == [schedule_blocks.ACTION_FORCE_APPROVE, schedule_blocks.exclude_action(0)]
    assert button(card, schedule_blocks.exclude_action(0))["text"]["text"] == "Leave out web"
    assert schedule_blocks.choice_of(button(card, schedule_blocks.ACTION_FORCE_APPROVE)["value"]) is not None

    world.at(utc(2, 19))
    world.tick()

    update = edited(world, card, "did not start")
    assert f"no approved force scope covers {PIN}" in all_text(update) and buttons_of(update) == []
    assert world.ops.list_operations() == [], "no operation is started only to fail in 0 s"
    assert world.schedules.store.get_occurrence(KEY).state == "missed"  # type: ignore[union-attr]


def test_approving_force_lets_it_run_with_exactly_that_scope_and_clicks_are_rechecked(world: World) -> None:
    card = announced(world)
    # The schedule's creator cannot approve its force (self-approval is off); a forged value is no choice.
    url = click(world, card, schedule_blocks.ACTION_FORCE_APPROVE, APPROVER)
    assert "you cannot approve force for a schedule you created" in all_text(world.bot.wait_reply(url))
    forged = schedule_blocks.choice_value(KEY, "0123456789abcdef")
    url = click(world, card, schedule_blocks.ACTION_FORCE_APPROVE, APPROVER_2, value=forged)
    assert "the force scope has changed since that card was shown" in all_text(world.bot.wait_reply(url))
    url = click(world, card, schedule_blocks.ACTION_FORCE_APPROVE, APPROVER_2, value="cnot-base64")
    assert "does not name a scheduled event" in all_text(world.bot.wait_reply(url))
    url = click(world, card, schedule_blocks.ACTION_FORCE_APPROVE, OPERATOR)
    assert "needs the approver role on dev-eu" in all_text(world.bot.wait_reply(url))
    assert world.schedules.store.force_decisions("nights", key=KEY)[0].kind == "needed"
    assert len(world.schedules.store.force_decisions("nights", key=KEY)) == 1, "no refused click recorded"

    click(world, card, schedule_blocks.ACTION_FORCE_APPROVE, APPROVER_2)

    update = edited(world, card, "Force approved for this run by")
    assert f"<@{APPROVER_2}>" in all_text(update)
    assert schedule_blocks.ACTION_FORCE_APPROVE not in [b["action_id"] for b in buttons_of(update)]
    world.at(utc(2, 19))
    world.tick()
    [op] = world.ops.list_operations()
    assert op.target.force and op.plan.forcing == ("force",)
    assert op.plan.force_scope is not None and op.plan.force_scope.units == (PIN,)
    wait_until(lambda: world.ops.get(op.id).state.is_terminal, 20, "the forced sleep to finish")  # type: ignore[union-attr]
    assert world.ops.get(op.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
    assert world.cluster is not None and world.cluster.get_pod("shop", "pin-1") is None


def test_leaving_the_pool_out_runs_the_others(world: World) -> None:
    card = announced(world)

    click(world, card, schedule_blocks.exclude_action(0), OPERATOR)

    update = edited(world, card, "Pool web is left out of this run")
    assert f"<@{OPERATOR}>" in all_text(update)
    world.at(utc(2, 19))
    world.tick()
    [op] = world.ops.list_operations()
    assert op.target.pools == ("batch",) and not op.target.force
    wait_until(lambda: world.ops.get(op.id).state.is_terminal, 20, "the sleep of batch to finish")  # type: ignore[union-attr]
    assert world.ops.get(op.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
    assert world.cluster is not None and world.cluster.get_pod("shop", "pin-1") is not None


def test_a_standing_force_scope_is_set_by_another_approver_shown_and_used_at_the_run(world: World) -> None:
    typed = f"schedule force nights --force-scope={PIN}"

    def set_scope() -> None:
        _, own = command(world, typed, user=APPROVER)  # the schedule's creator
        assert "you cannot approve force for a schedule you created" in all_text(own)
        assert own.body["response_type"] == "ephemeral"
        _, bad = command(
            world, "schedule force nights --force-scope=Deployment/shop/Not_A_Name", user=APPROVER_2
        )
        assert "`Deployment/shop/Not_A_Name` is not an owner: write Kind/namespace/name" in all_text(bad)
        _, done = command(world, typed, user=APPROVER_2)
        assert f"Standing force scope of schedule nights: {PIN}" in all_text(done)
        assert done.body["response_type"] == "in_channel"
        _, shown = command(world, "schedule show nights", user=VIEWER)
        assert f"standing force scope: {PIN} (approved by <@{APPROVER_2}>)" in all_text(shown)

    card = announced(world, before=set_scope)

    assert "The schedule's standing force scope covers them" in all_text(card)
    assert schedule_blocks.ACTION_FORCE_APPROVE not in [b["action_id"] for b in buttons_of(card)]
    world.at(utc(2, 19))
    world.tick()
    [op] = world.ops.list_operations()
    assert op.plan.force_scope is not None and op.plan.force_scope.units == (PIN,)
    actions = [(r.actor, r.action) for r in world.ops.store.audit_rows()]
    assert (APPROVER_2, "schedule_force_scope") in actions
    assert (APPROVER, "refused_schedule_force_scope") in actions


def test_names_from_the_cluster_on_the_announcement_are_text_not_markup(world: World) -> None:
    assert world.cluster is not None
    world.cluster.add_pod(
        "shop",
        "odd-1",
        node="web-2",
        controller_kind="ReplicaSet",
        controller_name="<!channel> <@U0EVIL> <https://evil.example|x>",
        annotations={"karpenter.sh/do-not-disrupt": "true"},
    )

    card = announced(world)

    assert "&lt;!channel&gt;" in all_text(card)
    world.at(utc(2, 19))
    world.tick()
    edited(world, card, "did not start")
    calls = [c for c in world.bot.api.calls if c.method in ("chat.postMessage", "chat.update")]
    assert calls and foreign_tokens(calls, users=(APPROVER, APPROVER_2, OPERATOR), channels=(CHANNEL,)) == []

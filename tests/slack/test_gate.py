"""The approval gate at its edges, over the real Bolt app (signed requests, the local Web API) and the
real Operations and SQLite.

- a click obeys the channel rules a typed request obeys (allowed channels; a protected cluster never
  from a direct message): refused privately, nothing voted or cancelled;
- channels separate clusters by default: a cluster's requests and approvals come only from its own
  channels, so dev-eu's channel reaches neither prod's requests nor its approvals;
- a stored vote counts only while its author may still approve (roles and user groups looked up
  again when the quorum is decided; a failed group lookup grants nothing);
- the advice card's scale button is read like the typed `scale` command: a tampered size or pool
  is refused as the command would be;
- `whoami @someone` needs a role, and shows only the clusters the asker may see;
- sizes are ASCII digits; a scale-up past a pool's ceiling needs approval, and the card says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace

from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from engine.domain.operation import OpState
from engine.operations import policy
from tests.slack.conftest import (
    ADMIN,
    APPROVER,
    APPROVER_2,
    CHANNEL,
    OPERATOR,
    PROD_CHANNEL,
    VIEWER,
    RunningBot,
)
from tests.slack.harness import all_text, buttons_of

ELSEWHERE = "C0ELSEWHERE"
DIRECT = "D0DIRECT"
GROUPED = "U0GROUPED"
"""An approver through the user group S0SRE only."""
STRANGER = "U0NOBODY"


def _reply_text(bot: RunningBot, response_url: str) -> str:
    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral", reply.body
    return all_text(reply)


def test_a_click_obeys_the_channel_rules_of_the_command(bot: RunningBot) -> None:
    dev = bot.ops.policies["dev-eu"]
    bot.ops.policies["dev-eu"] = replace(dev, channels=frozenset({CHANNEL}))
    bot.command("zero dev-eu", user=OPERATOR)
    approve = bot.approve_button()
    bot.settle()
    op = bot.only_op()
    updates = len(bot.api.calls_to("chat.update"))

    # An approver clicks the card's buttons from a channel the cluster is not operated from.
    _, approved = bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER, channel=ELSEWHERE)
    assert f"dev-eu is operated only from <#{CHANNEL}>" in _reply_text(bot, approved)
    _, cancelled = bot.click(blocks.ACTION_CANCEL, op.id, user=APPROVER, channel=ELSEWHERE)
    assert f"dev-eu is operated only from <#{CHANNEL}>" in _reply_text(bot, cancelled)
    # Reject asks why first; the rejection its dialog submits is refused the same way.
    bot.click(blocks.ACTION_REJECT, approve["value"], user=APPROVER, channel=ELSEWHERE)
    dialog = bot.api.wait_for_call("views.open")
    view = dialog.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    reason = {"type": "plain_text_input", "value": None}
    bot.submit_view(view, {blocks.REJECT_REASON: {blocks.REJECT_REASON: reason}}, user=APPROVER)
    told = bot.api.wait_for_call("chat.postEphemeral", lambda c: c.body.get("user") == APPROVER)
    assert f"dev-eu is operated only from <#{CHANNEL}>" in all_text(told)
    bot.settle()

    assert bot.only_op().state is OpState.AWAITING_APPROVAL
    assert bot.ops.store.votes(op.approval_id) == []
    assert len(bot.api.calls_to("chat.update")) == updates, "the card did not change"
    refused = [r.action for r in bot.ops.store.audit_rows() if r.action.startswith("refused_")]
    assert refused == ["refused_approve", "refused_cancel", "refused_reject"]

    # A protected cluster is never operated from a direct message: not by a click either.
    bot.command("zero prod", user=OPERATOR, channel=PROD_CHANNEL)
    bot.settle()
    [prod_op] = [o for o in bot.ops.list_operations() if o.target.cluster == "prod"]
    _, from_dm = bot.click(blocks.ACTION_APPROVE, prod_op.approval_id, user=APPROVER, channel=DIRECT)
    assert "prod is protected: operate it from its channel, not a direct message" in _reply_text(bot, from_dm)
    bot.settle()
    assert bot.ops.store.votes(prod_op.approval_id) == []


def test_channels_separate_clusters_by_default(bot: RunningBot) -> None:
    """No `allowed_channels` anywhere: dev-eu's channel can neither request a zero of prod nor count
    towards its approvals; prod's own channel can, and cannot reach dev-eu either."""
    _, from_dev = bot.command("zero prod", user=OPERATOR, channel=CHANNEL)
    assert f"prod is operated only from <#{PROD_CHANNEL}>" in _reply_text(bot, from_dev)
    bot.settle()
    assert bot.ops.list_operations() == [] and bot.audit_actions() == ["refused_request"]
    _, into_dev = bot.command("zero dev-eu", user=OPERATOR, channel=PROD_CHANNEL)
    assert f"dev-eu is operated only from <#{CHANNEL}>" in _reply_text(bot, into_dev)
    bot.settle()
    assert bot.ops.list_operations() == []

    bot.command("zero prod", user=OPERATOR, channel=PROD_CHANNEL)
    approve = bot.approve_button()
    bot.settle()
    op = bot.only_op()
    for approver in (APPROVER, APPROVER_2):  # the two approvals prod needs, clicked from dev-eu's channel
        _, elsewhere = bot.click(blocks.ACTION_APPROVE, approve["value"], user=approver, channel=CHANNEL)
        assert f"prod is operated only from <#{PROD_CHANNEL}>" in _reply_text(bot, elsewhere)
    bot.settle()
    assert bot.ops.store.votes(op.approval_id) == [] and bot.only_op().state is OpState.AWAITING_APPROVAL
    for approver in (APPROVER, APPROVER_2):
        bot.click(blocks.ACTION_APPROVE, approve["value"], user=approver, channel=PROD_CHANNEL)
        bot.settle()
    assert {u for u, _, _ in bot.ops.store.votes(op.approval_id)} == {APPROVER, APPROVER_2}
    assert bot.only_op().state is OpState.RUNNING and bot.engine.held == [op.id]


def _with_groups(bot: RunningBot, lookup: Callable[[str], Sequence[str]]) -> None:
    prod = bot.ops.policies["prod"]
    bot.ops.policies["prod"] = replace(prod, groups={"S0SRE": policy.Role.APPROVER})
    bot.ops.groups_of = lookup


def test_a_stored_vote_counts_only_while_its_author_may_still_approve(
    make_bot: Callable[..., RunningBot],
) -> None:
    groups_up = [True]

    def slack_groups(user: str) -> Sequence[str]:
        if not groups_up[0]:
            raise ConnectionError("usergroups.list: Slack is down")
        return ("S0SRE",) if user == GROUPED else ()

    # The clicker's own groups come from the bot's resolver; the stored voters' from the engine's.
    bot = make_bot(groups=lambda user: ("S0SRE",) if user == GROUPED else ())
    _with_groups(bot, slack_groups)
    bot.command("zero prod", user=OPERATOR, channel=PROD_CHANNEL)  # protected: two approvers
    approve = bot.approve_button()
    bot.settle()

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER, channel=PROD_CHANNEL)
    bot.settle()
    # APPROVER is demoted to viewer: the vote they gave no longer counts.
    prod = bot.ops.policies["prod"]
    bot.ops.policies["prod"] = replace(prod, users={**prod.users, APPROVER: policy.Role.VIEWER})
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=GROUPED, channel=PROD_CHANNEL)
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.AWAITING_APPROVAL, "a demoted approver's vote completed the quorum"
    assert bot.engine.held == []

    # Slack's user groups cannot be read now: the vote that rests on a group counts for nothing.
    groups_up[0] = False
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER_2, channel=PROD_CHANNEL)
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.AWAITING_APPROVAL, "a vote resting on an unconfirmed group counted"
    assert bot.engine.held == []
    assert {u for u, v, _ in bot.ops.store.votes(op.approval_id)} == {APPROVER, GROUPED, APPROVER_2}
    not_counted = [(r.actor, r.action) for r in bot.ops.store.audit_rows(op_id=op.id)]
    assert (APPROVER, "vote_not_counted") in not_counted and (GROUPED, "vote_not_counted") in not_counted
    # The card counts what counts.
    card = all_text(bot.api.calls_to("chat.update")[-1])
    assert "1 of 2 approvals: " in card, card
    assert card.split("1 of 2 approvals: ")[1].split("\n")[0].startswith(f"<@{APPROVER_2}>")

    # Groups readable again and a second real approver: the quorum is in.
    groups_up[0] = True
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=GROUPED, channel=PROD_CHANNEL)
    bot.settle()
    assert bot.only_op().state is OpState.RUNNING
    assert bot.engine.held == [op.id]


def test_a_tampered_advice_button_is_refused_like_the_typed_command(bot: RunningBot) -> None:
    for value, why in (
        (views.advised_scale_value("dev-eu", "web", 10**15), "is not a pool size"),
        (views.advised_scale_value("dev-eu", "nope", 4), "nope"),
        (views.advised_scale_value("staging", "web", 4), "Unknown cluster `staging`"),
        (views.advised_scale_value("dev-eu", "web 4 cluster=prod", 4), "Unexpected argument"),
        (views.advised_scale_value("dev-eu cluster=prod", "api", 4), "not one scalebot handles"),
    ):
        assert value is not None
        _, url = bot.click(blocks.ACTION_ADVISED_SCALE, value, user=OPERATOR)
        assert why in _reply_text(bot, url), why
        bot.settle()
    assert bot.ops.list_operations(limit=100) == []
    assert bot.cluster.writes() == 0

    # The same button with a value scalebot would make is an ordinary scale request.
    good = views.advised_scale_value("dev-eu", "web", 4)
    assert good is not None
    bot.click(blocks.ACTION_ADVISED_SCALE, good, user=OPERATOR)
    bot.settle()
    [op] = bot.ops.list_operations(limit=100)
    assert (op.target.cluster, op.target.pools, op.target.size) == ("dev-eu", ("web",), 4)


def test_whoami_about_someone_else_needs_a_role_and_shows_only_visible_clusters(bot: RunningBot) -> None:
    _, stranger = bot.command(f"whoami <@{APPROVER}>", user=STRANGER)
    refused = _reply_text(bot, stranger)
    assert "needs a role on at least one cluster" in refused
    assert "prod" not in refused and "approver" not in refused

    _, viewer = bot.command(f"whoami <@{APPROVER}>", user=VIEWER)  # a viewer on dev-eu only
    shown = _reply_text(bot, viewer)
    assert "dev-eu" in shown and "approver" in shown
    assert "prod" not in shown

    _, asked = bot.command(f"whoami prod <@{APPROVER}>", user=VIEWER)
    assert "needs at least the viewer role on prod" in _reply_text(bot, asked)

    # One's own roles, and an admin's look at a colleague, are unchanged.
    _, own = bot.command("whoami", user=STRANGER)
    assert "dev-eu" in _reply_text(bot, own)
    _, admin = bot.command(f"whoami dev-eu <@{OPERATOR}>", user=ADMIN)
    assert "operator" in _reply_text(bot, admin)
    bot.settle()
    assert [r.action for r in bot.ops.store.audit_rows()] == ["refused_whoami", "refused_whoami"]


def test_sizes_are_ascii_digits_and_a_scale_up_past_the_ceiling_needs_approval(bot: RunningBot) -> None:
    result, _ = bot.command("scale web \uff13", user=OPERATOR)  # a fullwidth three
    assert "is not a pool size" in result.json()["text"]
    bot.settle()
    assert bot.ops.list_operations(limit=100) == []

    # batch has 2 nodes: 4 is its ceiling (2 times its size) and goes without approval.
    bot.command("scale batch 4", user=OPERATOR)
    bot.settle()
    [within] = bot.ops.list_operations(limit=100)
    assert within.state is OpState.RUNNING and within.approvals_required == 0

    # web has 3: 7 is past 6, so it waits for an approver like a scale-down, and the card says why.
    bot.command("scale web 7", user=OPERATOR)
    bot.settle()
    [beyond] = [o for o in bot.ops.list_operations(limit=100) if o.target.pools == ("web",)]
    assert beyond.state is OpState.AWAITING_APPROVAL and beyond.approvals_required == 1
    card = next(c for c in bot.api.calls_to("chat.postMessage") if beyond.id in all_text(c))
    assert "pool web: 3 → 7 is beyond its ceiling of 6 (2 times its current size)" in all_text(card)
    assert [b["action_id"] for b in buttons_of(card)][:2] == [blocks.ACTION_APPROVE, blocks.ACTION_REJECT]

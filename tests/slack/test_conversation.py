"""Who is asked and who is told, over signed HTTP with the real engine.

Covers: the approval card mentions every user with the approver role on the cluster (not the
requester, not viewers) and shows its expiry as a Slack date every reader sees in their own
time zone; the requester is mentioned in the thread when the operation finishes; a failure is
broadcast to the channel; a schedule's approval card inside its announcement's thread is
broadcast so approvers see it. A request in a channel the bot is not in is refused privately
before anything is created; when Slack cannot say (no channels:read), a card Slack refuses
cancels the request by the system (locks released, nothing started) and the requester is told
in a direct message, and an operation without approval starts only once its card is posted.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import replace

from bot.slack.blocks import operations as blocks
from bot.slack.dispatch import no_groups
from bot.slack.home import HomeTab
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from tests.slack.conftest import ADMIN, APPROVER, APPROVER_2, CHANNEL, OPERATOR, VIEWER, RunningBot
from tests.slack.harness import Call, all_text, post

SLACK_DATE = re.compile(r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|\d{4}-\d\d-\d\d \d\d:\d\d UTC>")


def test_the_card_mentions_who_can_approve_and_dates_its_expiry(bot: RunningBot) -> None:
    bot.command("zero dev-eu")

    text = all_text(bot.card())

    [line] = [line for line in text.splitlines() if line.startswith("*Approvers:*")]
    assert set(re.findall(r"<@(U\w+)>", line)) == {APPROVER, APPROVER_2, ADMIN}
    assert f"<@{OPERATOR}>" not in line and f"<@{VIEWER}>" not in line
    assert re.search(r"expires " + SLACK_DATE.pattern, text)


def test_the_requester_is_told_when_the_operation_finishes(make_bot: Callable[..., RunningBot]) -> None:
    bot = make_bot(run=True)
    bot.command("zero dev-eu")
    approve = bot.approve_button()

    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)

    assert bot.wait_finished().state is OpState.SUCCEEDED
    final = bot.api.wait_for_call("chat.postMessage", lambda c: "Completed" in all_text(c), timeout=10)
    assert final.body["thread_ts"] and f"<@{OPERATOR}>: your operation finished" in all_text(final)
    assert "reply_broadcast" not in final.body, "a success stays in the thread"
    decided = bot.api.calls_to("chat.update")[-1]
    assert SLACK_DATE.search(all_text(decided)), "approved at … is a Slack date"


def test_a_failure_is_broadcast_to_the_channel_and_names_the_requester(bot: RunningBot) -> None:
    bot.command("drain web-2")
    bot.card()
    op = bot.only_op()

    bot.play(op.id, "final", "Failed: the drain timed out", state=OpState.FAILED, error="drain timed out")

    final = bot.api.wait_for_call("chat.postMessage", lambda c: "Failed" in all_text(c))
    assert final.body["reply_broadcast"] is True and final.body["thread_ts"]
    assert f"<@{OPERATOR}>: your operation failed" in all_text(final)


def test_a_schedules_approval_card_in_a_thread_is_broadcast(bot: RunningBot) -> None:
    outcome = bot.ops.request(
        OperationRequest(
            kind=OpKind.ZERO,
            target=Target(cluster="dev-eu"),
            requested_by="schedule:nights",
            channel=CHANNEL,
            thread_ts="1699999999.000100",
        )
    )
    assert outcome.operation is not None and outcome.operation.state is OpState.AWAITING_APPROVAL

    bot.progress.show(outcome.operation)

    card = bot.card_in_thread("1699999999.000100")
    assert card.body["reply_broadcast"] is True
    assert f"<@{APPROVER}>" in all_text(card)


def test_a_request_in_a_channel_without_the_bot_is_explained_privately_and_creates_nothing(
    bot: RunningBot,
) -> None:
    bot.api.members = {"C0ELSEWHERE"}

    result, response_url = bot.command("zero dev-eu")

    assert result.status == 200
    reply = bot.wait_reply(response_url)
    assert reply.body["response_type"] == "ephemeral"
    assert "/invite @scalebot" in reply.body["text"] and "nothing was requested" in reply.body["text"]
    bot.settle()
    bot.assert_unchanged(no_reads=True)
    assert bot.ops.store.db["locks"].count == 0
    assert bot.api.calls_to("chat.postMessage") == []

    bot.api.members.add(CHANNEL)  # /invite @scalebot: the next request goes through at once
    bot.command("zero dev-eu")
    assert bot.card().body["channel"] == CHANNEL


def _cannot_tell(bot: RunningBot, *, member: bool) -> None:
    """The token lacks channels:read: conversations.info cannot say whether the bot is in CHANNEL."""
    bot.api.members = {CHANNEL} if member else {"C0ELSEWHERE"}
    bot.api.fail("conversations.info", times=5, status=200, error="missing_scope")


def _told_privately(bot: RunningBot, user: str) -> Call:
    """The ephemeral is tried first and refused (it needs the bot in the channel): a DM follows."""
    dm = bot.api.wait_for_call("chat.postMessage", lambda c: c.body.get("channel") == user)
    [ephemeral] = bot.api.calls_to("chat.postEphemeral")
    assert (ephemeral.body["channel"], ephemeral.body["user"]) == (CHANNEL, user)
    assert ephemeral.response == {"ok": False, "error": "not_in_channel"}
    return dm


def test_a_refused_card_cancels_the_request_by_the_system_and_tells_the_requester(bot: RunningBot) -> None:
    _cannot_tell(bot, member=False)

    result, _ = bot.command("zero dev-eu")

    assert result.status == 200
    text = all_text(_told_privately(bot, OPERATOR))
    assert "/invite @scalebot" in text and "nothing was started" in text and "zero-scale of dev-eu" in text
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.CANCELLED and "not_in_channel" in op.error
    assert bot.ops.store.db["locks"].count == 0, "its locks went with the final state"
    assert bot.engine.held == [] and bot.cluster.writes() == 0, "nothing was started"
    rows = [(r.actor, r.action) for r in bot.ops.store.audit_rows(op_id=op.id)]
    assert rows == [(OPERATOR, "request"), ("scalebot", "cancelled")]
    assert bot.ops.approve(op.approval_id, by=APPROVER, channel=CHANNEL).reply.startswith(
        f"operation {op.id} is already cancelled"
    )


def test_an_operation_without_approval_does_not_run_when_its_card_is_refused(bot: RunningBot) -> None:
    _cannot_tell(bot, member=False)

    bot.command("drain web-1")  # drains need no approval on dev-eu

    _told_privately(bot, OPERATOR)
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.CANCELLED and op.step == ""
    assert bot.engine.held == [], "never handed to the runner"
    assert bot.cluster.writes() == 0 and bot.ops.store.db["locks"].count == 0


def test_an_operation_without_approval_starts_once_its_card_is_in_the_channel(bot: RunningBot) -> None:
    _cannot_tell(bot, member=True)
    seen: list[str] = []

    def start(op_id: str) -> None:
        current = bot.ops.get(op_id)
        seen.append(current.message_ts if current else "")

    bot.ops.runner.start = start  # type: ignore[method-assign]

    bot.command("drain web-1")

    card = bot.card()
    bot.settle()
    assert seen == [card.response["ts"]], "started once, after its card was posted"
    assert bot.only_op().state is OpState.RUNNING
    assert bot.api.calls_to("chat.postEphemeral") == []


def test_a_public_channel_is_fine_with_the_opt_in_chat_write_public_scope(bot: RunningBot) -> None:
    bot.api.members = set()
    bot.api.scopes = "commands,chat:write,chat:write.public"

    bot.command("zero dev-eu")

    assert bot.card().status == 200 and bot.only_op().state is OpState.AWAITING_APPROVAL


def test_a_request_is_answered_at_once_while_it_plans(bot: RunningBot) -> None:
    bot.cluster.gate.clear()  # planning cannot finish
    try:
        result, _ = bot.command("zero dev-eu")
        assert result.json()["response_type"] == "ephemeral"
        assert "Planning zero of dev-eu" in result.json()["text"]
        assert bot.api.calls_to("chat.postMessage") == []
    finally:
        bot.cluster.gate.set()
    bot.card()


def test_reject_asks_why_and_the_reason_is_on_the_card_and_in_the_audit(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()

    result = bot.reject(approve["value"], user=APPROVER, reason="the  release\nfreeze ends Friday")

    assert result.status == 200 and result.body == ""  # the dialog closes
    dialog = bot.api.calls_to("views.open")[0]
    assert dialog.body["trigger_id"]
    update = bot.api.wait_for_call("chat.update", lambda c: "Rejected by" in all_text(c))
    assert f"Rejected by <@{APPROVER}>" in all_text(update)
    assert "the release freeze ends Friday" in all_text(update)
    bot.settle()
    [rejected] = [r for r in bot.ops.store.audit_rows() if r.action == "rejected"]
    assert rejected.actor == APPROVER and rejected.detail == "the release freeze ends Friday"


def test_a_refused_reject_from_the_dialog_is_told_privately(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()

    bot.reject(approve["value"], user=VIEWER, reason="no")

    told = bot.api.wait_for_call("chat.postEphemeral")
    assert told.body["user"] == VIEWER and "approver role" in told.body["text"]
    bot.settle()
    assert bot.only_op().state is OpState.AWAITING_APPROVAL


def home_text(published: Call) -> str:
    view = published.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    return all_text(replace(published, body={"blocks": view["blocks"]}))


def test_the_home_tab_shows_the_users_clusters_role_and_running_operation(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)
    bot.settle()
    op = bot.only_op()
    assert op.state is OpState.RUNNING

    body = bot.signer.event({"type": "app_home_opened", "user": APPROVER, "channel": "D0APP", "tab": "home"})
    headers = {**bot.signer.headers(body), "Content-Type": "application/json"}
    assert post(bot.events_url, body, headers).status == 200

    published = bot.api.wait_for_call("views.publish", timeout=10)
    assert published.body["user_id"] == APPROVER and published.body["view"]["type"] == "home"
    text = home_text(published)
    assert "*dev-eu* · you are approver" in text and "*prod* · you are approver" in text
    assert "web" in text and "batch" in text and "api" in text, "the pools of both clusters"
    [line] = [line for line in text.splitlines() if op.id in line]
    assert "🔄" in line and f"/archives/{CHANNEL}/p{op.message_ts.replace('.', '')}|thread>" in line


def test_the_home_tab_of_someone_without_a_role_says_so(bot: RunningBot) -> None:
    body = bot.signer.event({"type": "app_home_opened", "user": "U0NOBODY", "channel": "D0X", "tab": "home"})
    post(bot.events_url, body, {**bot.signer.headers(body), "Content-Type": "application/json"})

    published = bot.api.wait_for_call("views.publish", timeout=10)
    assert "no role on any cluster" in home_text(published)
    bot.settle()
    assert bot.engine.clusters["dev-eu"].reads() == 0, "nothing of a cluster is shown to them"


def test_homes_follow_operation_changes_at_most_once_per_interval(bot: RunningBot) -> None:
    home = HomeTab(bot.ops, bot.app.client, bot.executor, groups=no_groups, min_interval=0.5)
    bot.ops.subscribe(home.on_event)
    home.opened(APPROVER)
    bot.api.wait_for_call("views.publish")

    bot.command("zero dev-eu")  # a new operation: a state event
    approve = bot.approve_button()
    bot.click(blocks.ACTION_APPROVE, approve["value"], user=APPROVER)  # another one, right after

    op = bot.only_op()
    bot.api.wait_for(
        lambda cs: any(
            c.method == "views.publish" and op.id in home_text(c) and "🔄" in home_text(c) for c in cs
        ),
        timeout=10,
    )
    times = [c.at for c in bot.api.calls_to("views.publish") if c.body["user_id"] == APPROVER]
    assert all(b - a >= 0.45 for a, b in itertools.pairwise(times)), times
    assert len(times) <= 4, "changes in between are folded into one publish"


def test_a_busy_pool_names_who_holds_it_and_the_slash_command_to_cancel(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    bot.card()
    holder = bot.only_op()

    _, response_url = bot.command("scale web 1", user=APPROVER)

    said = bot.wait_reply(response_url).body["text"]
    assert f"requested by <@{OPERATOR}>" in said and f"`/scale ops cancel {holder.id}`" in said
    assert len(bot.ops.list_operations(limit=10)) == 1


def test_ops_show_names_the_people_in_its_history_and_escapes_their_names(bot: RunningBot) -> None:
    # The history is preformatted, where a mention cannot show: people appear by their Slack name,
    # which is their own text (escaped); someone Slack does not know stays an ID.
    bot.api.people = {
        APPROVER: {"id": APPROVER, "profile": {"display_name": "Ann <!channel>", "real_name": "x"}}
    }
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()
    bot.reject(approve["value"], user=APPROVER, reason="not now")
    bot.settle()
    [op] = bot.ops.list_operations(cluster="dev-eu")

    _, url = bot.command(f"ops show {op.id}", user=OPERATOR)
    shown = all_text(bot.wait_reply(url))

    assert "Ann &lt;!channel&gt;: rejected" in shown, shown
    assert f"{APPROVER}: rejected" not in shown
    assert f"{OPERATOR}: request" in shown, "users.info does not know them: the ID is shown"
    assert [c.body["user"] for c in bot.api.calls_to("users.info")].count(APPROVER) == 1

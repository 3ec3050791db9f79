"""Text from outside reaches Slack as text, never as markup, over signed HTTP with the real engine.

An admission webhook's denial (a server message scalebot passes on) carrying a user-group ping, a
mention, a date link, a link and `<!channel>` runs through a real drain: the card, the thread's
progress, the failure broadcast to the channel and every fallback `text`, as the local Web API
recorded them, carry no token scalebot did not build (`tests.slack.markup`). A reject reason is
escaped exactly once, on the card and in its fallback.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.domain.operation import OpState
from engine.kube import errors
from tests.slack.conftest import ADMIN, APPROVER, APPROVER_2, CHANNEL, OPERATOR, VIEWER, RunningBot
from tests.slack.harness import Call, all_text
from tests.slack.markup import foreign_tokens, texts

KNOWN_USERS = (OPERATOR, APPROVER, APPROVER_2, VIEWER, ADMIN)
HOSTILE = (
    'admission webhook "deny.evil.example" denied the request: on call <!subteam^S0ONCALL> '
    "and <@U0EVIL>, due <!date^1700000000^{date}^https://evil.example/d|tomorrow>, "
    "see <https://evil.example/phish|click here> <!channel> & co"
)
MARK = "deny.evil.example"


def _posted(bot: RunningBot) -> list[Call]:
    methods = ("chat.postMessage", "chat.update", "chat.postEphemeral", "response_url")
    return [c for c in bot.api.calls if c.method in methods]


def test_a_hostile_webhook_denial_reaches_slack_with_no_live_token(
    make_bot: Callable[..., RunningBot],
) -> None:
    bot = make_bot(run=True)
    bot.cluster.add_pod("shop", "cart-1", node="web-2", controller_kind="ReplicaSet", controller_name="cart")
    denial = errors.Forbidden(status=403, message=HOSTILE, reason="Forbidden")
    bot.cluster.fail_next("create", denial, resource="pods/eviction")

    bot.command("drain web-2")  # dev-eu: a drain needs no approval
    bot.card()

    assert bot.wait_finished().state is OpState.FAILED
    bot.settle()
    calls = _posted(bot)
    carrying = [c for c in calls if MARK in all_text(c)]
    # The message did reach Slack: on the card, in a reply broadcast to the channel, in fallbacks.
    assert any(c.method == "chat.update" and not c.body.get("thread_ts") for c in carrying), "card"
    assert any(c.body.get("reply_broadcast") for c in carrying), "the failure broadcast"
    assert any(MARK in str(c.body.get("text") or "") for c in carrying), "a fallback text"
    assert foreign_tokens(calls, users=KNOWN_USERS, channels=(CHANNEL,)) == []
    for call in carrying:
        for text in texts(call):
            assert "&amp;lt;" not in text and "&amp;amp;" not in text, text  # escaped once


def test_a_reject_reason_is_escaped_exactly_once(bot: RunningBot) -> None:
    bot.command("zero dev-eu")
    approve = bot.approve_button()
    bot.settle()

    bot.reject(approve["value"], user=APPROVER, reason="<b>& <@U0EVIL>")

    update = bot.api.wait_for_call("chat.update", lambda c: "Rejected by" in all_text(c))
    [line] = [t for t in texts(update) if "Rejected by" in t]
    assert line.endswith(": &lt;b&gt;&amp; &lt;@U0EVIL&gt;"), line
    bot.settle()
    assert foreign_tokens(_posted(bot), users=KNOWN_USERS, channels=(CHANNEL,)) == []

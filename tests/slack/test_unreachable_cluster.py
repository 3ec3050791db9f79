"""With the cluster's API server down, Slack names the cause as the CLI does, and nothing changes.

The in-memory cluster fails every request as the HTTP adapter fails when no answer comes
(`engine.kube.errors.TransportError`); the person reads "cannot reach the Kubernetes API server"
in an ephemeral reply, not an incident ID, and no operation is recorded.
"""

from __future__ import annotations

import pytest

from tests.slack.conftest import APPROVER, RunningBot
from tests.slack.harness import all_text


@pytest.mark.parametrize("text", ["status dev-eu", "zero dev-eu", "scale web 1"])
def test_an_unreachable_api_server_is_named_and_nothing_is_changed(bot: RunningBot, text: str) -> None:
    bot.cluster.unreachable = True

    _, response_url = bot.command(text, user=APPROVER)

    reply = bot.wait_reply(response_url)
    said = all_text(reply)
    assert "Cannot reach the Kubernetes API server" in said, said
    assert "Connection refused" in said, said
    assert "Nothing was changed" in said, said
    assert "incident" not in said, said
    assert reply.body.get("response_type") == "ephemeral"
    bot.settle()
    assert bot.cluster.writes() == 0
    assert bot.api.calls_to("chat.postMessage") == []  # no operation card


def test_a_cordon_that_fails_part_way_says_which_nodes_it_had_cordoned(
    bot: RunningBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API server goes away after the first node's cordon: "nothing was changed" would be false.
    cluster = bot.cluster
    cordon_one = cluster.set_unschedulable

    def then_the_server_goes(node: str, unschedulable: bool) -> bool:
        changed = cordon_one(node, unschedulable)
        cluster.unreachable = True
        return changed

    monkeypatch.setattr(cluster, "set_unschedulable", then_the_server_goes)

    _, response_url = bot.command("cordon web-1 web-2")

    said = all_text(bot.wait_reply(response_url))
    assert "Cannot reach the Kubernetes API server" in said, said
    assert "Nothing was changed" not in said, said
    assert "already cordoned before the failure: web-1" in said, said
    bot.settle()
    cluster.unreachable = False
    nodes = {n.name: n.unschedulable for n in cluster.list_nodes()}
    assert nodes["web-1"] is True and nodes["web-2"] is False
    assert bot.audit_actions() == ["cordon"]  # the part that was done is on the record

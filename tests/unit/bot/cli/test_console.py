"""`scalebot console` driven through StringIO over the simulated cluster, in virtual time.

Covers: the plan card of a zero-scale ("Needs 1 approval"), self-approval refused as a private
reply, another user's approval followed by live progress (card edits, DrainingSucceeded
conditions, phase 2, the final summary), wake, help, garbage answered with the same usage
text Slack shows and nothing changed, a viewer refused, the SIMULATED label, the interactive
prompt, and the mrkdwn-to-text rendering.

The cluster and the runner share a FakeClock, so the 12-second phase 1 and the pods' grace
periods pass in virtual time; `wait` blocks on the runner finishing, never on a timer.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bot.cli.console import SIMULATED_BANNER, run_console, simulated_operations
from bot.cli.console_screen import message_lines, mrkdwn_lines
from bot.slack.blocks import views
from bot.text import commands
from engine.domain.clock import FakeClock
from engine.domain.operation import OpKind, OpState
from engine.operations.service import Operations

START = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
CLUSTER = "simulated"
ARROW = "\u203a"
"""The prompt's arrow, escaped so no lint mistakes it for ">"."""


@pytest.fixture
def ops() -> Iterator[Operations]:
    o = simulated_operations(clock=FakeClock(START))
    yield o
    o.runner.stop()


def console(ops: Operations, script: str, *, simulated: bool = True) -> str:
    out = io.StringIO()
    code = run_console(
        ops=ops,
        default_cluster=CLUSTER,
        users=None,
        stdin=io.StringIO(script),
        stdout=out,
        simulated=simulated,
        schedule_timer=False,  # the FakeClock moves only through the runner and `fast-forward`
    )
    assert code == 0
    return out.getvalue()


def node_count(ops: Operations) -> int:
    return len(ops.handles[CLUSTER].api.list_nodes())


def test_zero_scale_needs_another_users_approval_then_shows_progress_to_completion(
    ops: Operations,
) -> None:
    out = console(ops, "zero\napprove\nas bob\napprove\nwait\n")

    asked, refused, approved = out.split(f"{ARROW} approve\n")
    assert "┌─ op-" in asked and "⏳ Zero-scale · simulated" in asked
    assert "@alice asks to zero cluster simulated: 3 pools, 8 nodes → 0" in asked
    assert "Needs 1 approval" in asked
    assert "[Approve] [Reject]  (type: approve / reject)" in asked
    assert refused.startswith("(only you) ⚠️ you cannot approve your own request; another approver must\n")
    assert "You are now @bob (approver on simulated)." in refused

    assert "✅ Approved by @bob at 2026-03-02 14:00 UTC" in approved
    assert "  ↳ op-" in approved and ": 13 Pods remaining (DrainingSucceeded)\n" in approved
    assert "Drain not completed yet (DrainingSucceeded): Drain not completed yet" not in approved, (
        "no doubled header"
    )
    assert "          Drain not completed yet (started at 2026-03-02T14:00" in approved  # preformatted
    assert ": cannot evict pod as it would violate the pod's disruption budget." in approved
    # 7, not 8: the drain order is per node, so the critical pod of a node nothing holds is evicted
    # in phase 1 instead of waiting on the other nodes' blocked pods.
    assert "Phase 2: force-deleted 7 Pods with grace 0" in approved
    assert "(final): ✅ Zero-scale · simulated" in approved
    assert "✅ Completed · Duration 12s · Pods evicted 6 · Force-deleted 7 · Nodes removed 8" in approved
    assert approved.rstrip().endswith("succeeded")

    (op,) = ops.list_operations()
    assert op.state is OpState.SUCCEEDED and op.message_ts, "the card's place is recorded, as in Slack"
    assert node_count(ops) == 0


def test_wake_after_zero_restores_every_pool(ops: Operations) -> None:
    console(ops, "zero\nas bob\napprove\nwait\n")
    assert node_count(ops) == 0

    out = console(ops, "wake\nwait\nstatus\n")

    assert "🔄 Wake-up · simulated" in out, "wake needs no approval under the console policy"
    assert "8/8 nodes Ready" in out
    assert "Completed" in out
    assert node_count(ops) == 8
    latest = ops.list_operations()[0]
    assert latest.kind is OpKind.WAKE and latest.state is OpState.SUCCEEDED


def test_help_lists_the_slash_commands_and_the_console_ones(ops: Operations) -> None:
    out = console(ops, "help\n")

    assert "(only you) scalebot drains nodes and scales node pools, with approvals." in out
    assert "`/scale zero [CLUSTER | POOL…] [--workloads] [--force] [--one-at-a-time]`" in out
    assert "as USER        switch user (alice (operator), bob (approver), carol (viewer))" in out
    assert "approve [OP]" in out and "wait" in out


@pytest.mark.parametrize("garbage", ["frobnicate", "zero web; rm -rf /", "scale web many"])
def test_bad_input_gets_the_slack_usage_text_and_changes_nothing(ops: Operations, garbage: str) -> None:
    with pytest.raises(commands.UsageError) as err:
        commands.parse(garbage, default_cluster=CLUSTER, clusters=[CLUSTER])
    slack = views.usage_error(err.value.message, err.value.hint)
    expected = message_lines(slack.text, slack.block_dicts(), {})

    out = console(ops, garbage + "\n")

    assert f"(only you) {expected[0]}\n" in out
    assert all(line in out for line in expected)
    assert ops.list_operations() == []
    assert node_count(ops) == 8


def test_a_viewer_cannot_request_a_zero_scale(ops: Operations) -> None:
    out = console(ops, "as carol\nzero\n")

    assert "You are now @carol (viewer on simulated)." in out
    assert "(only you) ⚠️ zero needs the operator role on simulated; you are a viewer" in out
    assert ops.list_operations() == []


def test_console_only_commands_explain_what_they_could_not_do(ops: Operations) -> None:
    out = console(ops, "approve\nwait\nas dave\napprove op-nope\ncancel\n")

    assert "(only you) No operation is waiting for approval" in out
    assert "(only you) Nothing is running." in out
    assert "(only you) Unknown user `dave`; users: alice (operator), bob (approver), carol (viewer)" in out
    assert "(only you) No operation `op-nope`" in out
    assert "(only you) No operation is running" in out


def test_the_simulated_cluster_is_labelled_on_every_screen(ops: Operations) -> None:
    out = console(ops, "status\n")

    assert out.startswith(f"*** {SIMULATED_BANNER} ***\n")
    assert f"scalebot [SIMULATED] [as @alice] {ARROW} status\n" in out
    real = console(ops, "status\n", simulated=False)
    assert SIMULATED_BANNER not in real and "[SIMULATED]" not in real


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_an_interactive_terminal_gets_a_prompt_and_no_echo(ops: Operations) -> None:
    out = io.StringIO()
    run_console(
        ops=ops, default_cluster=CLUSTER, users=None, stdin=_Tty("whoami\n"), stdout=out, simulated=False
    )

    text = out.getvalue()
    assert f"scalebot [as @alice] {ARROW} (only you) Roles of @alice:\n" in text
    assert f"{ARROW} whoami" not in text, "the terminal itself echoes what was typed"


def test_mrkdwn_becomes_plain_terminal_text() -> None:
    text = (
        "*Bold* and _italic_ by <@U0BOB> at <!date^1772460120^{time}|14:02 UTC> in <#C1>: a &lt; b\n"
        "```\n* Pods with eviction failed: shop/web-0 &amp; more\n```"
    )

    assert mrkdwn_lines(text, {"U0BOB": "bob"}) == [
        "Bold and italic by @bob at 14:02 UTC in #C1: a < b",
        "    * Pods with eviction failed: shop/web-0 & more",
    ]


def test_ops_show_names_the_people_in_its_history_by_their_console_names(ops: Operations) -> None:
    out = console(ops, "zero\nas bob\nreject\nops list\n")
    op_id = out.split("┌─ ", 1)[1].split()[0]

    shown = console(ops, f"ops show {op_id}\n")

    assert "@alice: request" in shown and "@bob: rejected" in shown, shown
    assert "U0ALICE" not in shown and "U0BOB" not in shown

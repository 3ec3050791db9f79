"""Block Kit renderers: shapes, limits and determinism.

Covers: the approval card (buttons carry only the approval ID, Approve is primary with a confirm
dialog on destructive kinds), the decided card (no buttons), the progress parent (Cancel while
running), decision lines rebuilt from history; and limits with hostile sizes: 10,000 pods,
1,000 nodes with 253-character names, 300 pools, 5,000 history rows. Every rendering passes
slack_sdk validation (`to_dict()`), stays within 50 blocks, 3,000 characters per section and a
cumulative text under 12,000, and long lists end in "... (N more)". Identical input renders
identical blocks; a change renders new block IDs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.slack.blocks import kit as blockkit
from bot.slack.blocks import operations as blocks
from bot.slack.blocks import views
from bot.slack.blocks.kit import Message
from bot.text import messages
from bot.text.mrkdwn import Mrkdwn
from engine.domain.announcement import NextEvent
from engine.domain.node_removal import NodeRemoval
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationSummary,
    OpKind,
    OpState,
    PoolChange,
    PoolSizes,
    Target,
)
from engine.operations.policy import ClusterPolicy, Role, approvers
from engine.pools.base import Pool, RestoreRecord

NOW = datetime(2026, 3, 2, 14, 2, tzinfo=UTC)
LONG = "n" * 240 + "-{:05d}.x"  # 253 characters: the longest valid node name


def assert_within_limits(message: Message) -> list[dict[str, Any]]:
    dicts = message.block_dicts()  # slack_sdk validation: raises SlackObjectFormationError
    assert 0 < len(dicts) <= blockkit.MAX_BLOCKS
    assert blockkit.text_length(dicts) < 12_000
    for block in dicts:
        text = block.get("text")
        if block["type"] == "section":
            assert len(text["text"]) <= 3_000
        if block["type"] == "header":
            assert len(text["text"]) <= 150
    assert len(message.text) <= blockkit.FALLBACK_CHARS
    json.dumps(dicts)
    return dicts


def op(
    *,
    kind: OpKind = OpKind.ZERO,
    state: OpState = OpState.AWAITING_APPROVAL,
    plan: OperationPlan | None = None,
    **changes: Any,
) -> Operation:
    plan = plan or OperationPlan(
        kind=kind,
        cluster="dev-eu",
        pools=(
            PoolChange("web", 3, 0, ("web-1", "web-2", "web-3")),
            PoolChange("batch", 2, 0, ("b-1", "b-2")),
        ),
        force_phase=True,
        blockers=(("shop/db-0", "PDB db allows 0 disruptions"), ("shop/cache-0", "do-not-disrupt")),
    )
    base = Operation(
        id="op-1a2b3c4d",
        kind=kind,
        target=Target(cluster="dev-eu"),
        state=state,
        requested_by="U0OPS",
        created_at=NOW,
        updated_at=NOW,
        plan=plan,
        channel="C0DEV",
        approval_id="Zm9vYmFyYmF6cXV4MTIzNA",
        approvals_required=2,
        expires_at=NOW + timedelta(minutes=30),
    )
    return replace(base, **changes)


def buttons(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in dicts if b["type"] == "actions" for e in b["elements"]]


@dataclass(frozen=True)
class Entry:
    at: datetime
    actor: str
    action: str
    detail: str = ""


# -- shapes --------------------------------------------------------------------------------------


def test_approval_card_buttons_carry_only_the_approval_id() -> None:
    dicts = assert_within_limits(blocks.approval_card(op()))

    approve, reject = buttons(dicts)
    assert approve == {
        "type": "button",
        "text": {"type": "plain_text", "text": "Approve"},
        "action_id": blocks.ACTION_APPROVE,
        "value": "Zm9vYmFyYmF6cXV4MTIzNA",
        "style": "primary",
        "confirm": {
            "title": {"type": "plain_text", "text": "Approve this zero-scale?"},
            "text": {
                "type": "plain_text",
                "text": "Zero-scale on dev-eu: 2 pools, 5 nodes → 0. This changes the cluster.",
            },
            "confirm": {"type": "plain_text", "text": "Approve"},
            "deny": {"type": "plain_text", "text": "Back"},
        },
    }
    assert reject == {
        "type": "button",
        "text": {"type": "plain_text", "text": "Reject"},
        "action_id": blocks.ACTION_REJECT,
        "value": "Zm9vYmFyYmF6cXV4MTIzNA",
    }


def test_approval_card_shows_the_plan() -> None:
    text = json.dumps(assert_within_limits(blocks.approval_card(op())), ensure_ascii=False)

    assert "<@U0OPS> asks to *zero* cluster *dev-eu*: 2 pools, 5 nodes → 0" in text
    assert re.search(r"web +3 → +0", text)
    assert "*Nodes to remove* (5): web-1, web-2, web-3, b-1, b-2" in text
    assert "force-deleted" in text  # phase 2 warning
    assert "* PDB db allows 0 disruptions: shop/db-0" in text
    assert "Needs 2 approvals" in text and "expires <!date^" in text


def test_wake_card_has_no_confirm_dialog() -> None:
    plan = OperationPlan(kind=OpKind.WAKE, cluster="dev-eu", pools=(PoolChange("web", 0, 3),))
    approve = buttons(assert_within_limits(blocks.approval_card(op(kind=OpKind.WAKE, plan=plan))))[0]
    assert "confirm" not in approve


def test_decided_card_has_no_buttons() -> None:
    message = blocks.decided_card(
        op(state=OpState.REJECTED), decision=Mrkdwn("🚫 Rejected by <@U0APP> at 14:02")
    )
    dicts = assert_within_limits(message)
    assert buttons(dicts) == []
    assert "Rejected by <@U0APP> at 14:02" in json.dumps(dicts, ensure_ascii=False)


def test_progress_parent_offers_cancel_only_while_running() -> None:
    running = assert_within_limits(
        blocks.progress_parent(op(state=OpState.RUNNING), status="Draining 5 nodes")
    )
    done = assert_within_limits(
        blocks.progress_parent(op(state=OpState.SUCCEEDED), status="Completed in 4m05s")
    )

    cancel = buttons(running)
    assert [(b["action_id"], b["value"], b["style"]) for b in cancel] == [
        (blocks.ACTION_CANCEL, "op-1a2b3c4d", "danger")
    ]
    assert "🔄 Draining 5 nodes" in json.dumps(running, ensure_ascii=False)
    assert buttons(done) == []
    assert "✅ Completed in 4m05s" in json.dumps(done, ensure_ascii=False)


def test_rendering_is_deterministic_and_revisions_get_new_block_ids() -> None:
    first = blocks.progress_parent(op(state=OpState.RUNNING), status="Draining: 3 Pods left").block_dicts()
    again = blocks.progress_parent(op(state=OpState.RUNNING), status="Draining: 3 Pods left").block_dicts()
    later = blocks.progress_parent(op(state=OpState.RUNNING), status="Draining: 2 Pods left").block_dicts()

    assert first == again
    assert {b["block_id"] for b in first}.isdisjoint({b["block_id"] for b in later})


def test_decision_lines_come_from_history() -> None:
    awaiting = op()
    votes = [Entry(NOW, "U0OPS", "request"), Entry(NOW, "U0APP", "approve")]
    assert blocks.decision_from_history(awaiting, votes) == "☑️ 1 of 2 approvals: <@U0APP>"

    running = op(state=OpState.RUNNING)
    both = [*votes, Entry(NOW + timedelta(minutes=1), "U0APP2", "approve")]
    line = blocks.decision_from_history(running, both)
    assert line is not None and line.startswith("✅ Approved by <@U0APP>, <@U0APP2> at <!date^")
    assert line.endswith("^{date_short_pretty} {time}|2026-03-02 14:03 UTC>")

    rejected = [*votes, Entry(NOW, "U0APP2", "rejected"), Entry(NOW, "scalebot", "expired")]
    assert (blocks.decision_from_history(op(state=OpState.REJECTED), rejected) or "").startswith(
        "🚫 Rejected by <@U0APP2>"
    )
    assert blocks.decision_from_history(running, [Entry(NOW, "U0OPS", "request")]) is None


def test_outside_text_is_escaped_whole_and_only_scalebots_own_text_keeps_tokens() -> None:
    assert blockkit.esc("a <b> & c") == "a &lt;b&gt; &amp; c"
    # Tokens inside text from outside are text, whatever they look like.
    assert blockkit.esc("<@U1> said <script> & <!date^1^{time}|x>") == (
        "&lt;@U1&gt; said &lt;script&gt; &amp; &lt;!date^1^{time}|x&gt;"
    )
    ours = Mrkdwn("<@U1> approved")
    assert blockkit.esc(ours) == "<@U1> approved"


def test_final_reply_reports_the_outcome() -> None:
    done = op(
        state=OpState.SUCCEEDED,
        summary=OperationSummary(
            duration_seconds=245,
            pods_evicted=120,
            pods_force_deleted=3,
            nodes_removed=5,
            pools={"web": PoolSizes(3, 0), "batch": PoolSizes(2, 0)},
        ),
    )
    text = json.dumps(
        assert_within_limits(blocks.final_reply(done, "Completed in 4m05s")), ensure_ascii=False
    )

    for fragment in ("*Duration* 4m05s", "*Pods evicted* 120", "*Force-deleted* 3", "*Nodes removed* 5"):
        assert fragment in text
    assert re.search(r"batch +2 → +0", text) and re.search(r"web +3 → +0", text)


# -- limits --------------------------------------------------------------------------------------


def test_card_with_ten_thousand_blockers_and_a_thousand_long_nodes_stays_within_limits() -> None:
    nodes = tuple(LONG.format(i) for i in range(1_000))
    pools = tuple(PoolChange(f"pool-{i:03d}-" + "p" * 200, 10, 0, nodes[i::300]) for i in range(300))
    blockers = tuple(
        (f"namespace-{i % 50}/pod-{i:05d}-" + "x" * 200, f"reason {i % 7}") for i in range(10_000)
    )
    plan = OperationPlan(
        kind=OpKind.ZERO,
        cluster="dev-eu",
        pools=pools,
        force_phase=True,
        blockers=blockers,
        warnings=tuple("w" * 3000 for _ in range(20)),
    )

    dicts = assert_within_limits(blocks.approval_card(op(plan=plan)))

    text = json.dumps(dicts)
    assert "more)" in text
    assert [b["action_id"] for b in buttons(dicts)] == [blocks.ACTION_APPROVE, blocks.ACTION_REJECT]


@pytest.mark.parametrize("shape", ["one-line", "many-lines"])
def test_blockers_reply_with_ten_thousand_pods_stays_within_limits(shape: str) -> None:
    pods = [f"shop/{LONG.format(i)}" for i in range(10_000)]
    if shape == "one-line":
        condition = "Drain not completed yet:\n* Pods with eviction failed:\n  * PDB db: " + ", ".join(pods)
    else:
        condition = "Drain not completed yet:\n" + "\n".join(f"* {p}: eviction failed" for p in pods)

    dicts = assert_within_limits(
        blocks.blockers_reply(op(state=OpState.RUNNING), condition, summary="10000 left")
    )

    text = json.dumps(dicts)
    assert "```" in text
    assert "more)" in text or "more lines)" in text


@dataclass(frozen=True)
class Status:
    """What `/scale status` renders for one cluster (Operations.status's view)."""

    cluster: str
    pools: list[Pool]
    running: list[Operation]
    next_event: NextEvent | None


def test_views_with_huge_inputs_stay_within_limits() -> None:
    pools = [
        Pool(
            name=f"pool-{i}-" + "q" * 200,
            provider="labels",
            desired=0 if i % 2 else 5,
            nodes=tuple(f"n{i}-{j}" for j in range(5)),
            restore=RestoreRecord(5, 0, None, NOW, "op-1") if i % 2 else None,
        )
        for i in range(500)
    ]
    ops = [replace(op(state=OpState.RUNNING), id=f"op-{i:08d}") for i in range(100)]
    history = [Entry(NOW, "U0OPS", "drain: evicted", "x" * 500) for _ in range(5_000)]

    assert_within_limits(
        views.status_view(Status("dev-eu", pools, ops, NextEvent("sleep", "n" * 63, NOW, "Europe/Berlin")))
    )
    assert_within_limits(views.statuses_view([Status(f"c{i}", pools, ops, None) for i in range(20)]))
    assert_within_limits(views.ops_list(ops))
    assert_within_limits(views.ops_show(op(error="e" * 5000), history))
    assert_within_limits(views.whoami_view("U1", {f"cluster-{i}": Role.APPROVER for i in range(300)}))
    assert_within_limits(views.help_view())
    assert_within_limits(views.usage_error("x" * 5000, "/scale help"))
    assert_within_limits(views.text_message("y" * 20_000))
    assert_within_limits(
        blocks.final_reply(
            op(
                state=OpState.FAILED,
                error="boom " * 2000,
                summary=OperationSummary(
                    duration_seconds=1, pools={f"p{i}": PoolSizes(i, 0) for i in range(2000)}
                ),
            )
        )
    )


def test_cut_list_line_counts_what_it_leaves_out() -> None:
    line = ", ".join(f"pod-{i}" for i in range(100))
    cut = blockkit.cut_list_line(line, 60)
    assert len(cut) <= 60 and cut.startswith("pod-0, pod-1") and cut.endswith(" more)")
    shown = cut.count("pod-")
    assert cut.endswith(f"... ({100 - shown} more)")


def test_status_shows_each_pools_provider_and_what_zero_really_does() -> None:
    pools = [
        Pool(
            "cloud", "labels", 0, emptied=("n1", "n2"), removal=NodeRemoval.EMPTY, removal_reason="no backing"
        ),
        Pool(
            "sim",
            "labels",
            2,
            nodes=("s1", "s2"),
            removal=NodeRemoval.NODE,
            removal_reason="nodes managed by kwok",
        ),
        Pool("md", "capi", 3, nodes=("m1", "m2", "m3")),
    ]
    text = json.dumps([b.to_dict() for b in views.status_view(Status("dev", pools, [], None)).blocks])
    assert "cloud                labels" in text
    assert (
        "zero empties the nodes (cordon + drain), removes none (no backing); 2 emptied, not removed" in text
    )
    assert "zero deletes the Node objects (nodes managed by kwok)" in text
    assert "md                   capi" in text and "zero removes the machines" in text


def test_plan_of_a_pool_that_can_only_be_emptied_says_so() -> None:
    change = PoolChange(
        "cloud", 2, 0, nodes_to_remove=("n1", "n2"), removal=NodeRemoval.EMPTY, removal_reason="no backing"
    )
    plan = OperationPlan(kind=OpKind.ZERO, cluster="dev", pools=(change,), nodes=("n1", "n2"))
    text = json.dumps([b.to_dict() for b in views.plan_view(plan).blocks])
    assert "Nodes to empty, not remove" in text and "Nodes to remove" not in text
    assert "will be emptied (cordoned and drained), not removed: no backing" in text
    assert OperationPlan.from_json(plan.to_json()) == plan
    removed = replace(change, removal=NodeRemoval.MACHINE)
    assert replace(plan, pools=(removed,)).plan_hash != plan.plan_hash, "consent binds to what removal does"


def test_the_card_asks_users_and_user_groups_with_the_approver_role() -> None:
    pol = ClusterPolicy(
        cluster="prod",
        users={"U1": Role.APPROVER, "U2": Role.OPERATOR, "U3": Role.ADMIN, "U4": Role.VIEWER},
        groups={"S0SRE": Role.APPROVER, "S0DEV": Role.OPERATOR},
    )
    asked = approvers(pol, besides="U3")

    assert asked.users == ("U1",) and asked.groups == ("S0SRE",)
    assert messages.approvers_line(asked.users, asked.groups) == "*Approvers:* <@U1>, <!subteam^S0SRE>"
    assert "nobody has the approver role" in messages.approvers_line((), ())
    assert approvers(replace(pol, allow_self_approval=True), besides="U3").users == ("U1", "U3")


@pytest.mark.parametrize("kind", list(OpKind))
def test_every_operation_kind_has_its_words(kind: OpKind) -> None:
    assert messages.KIND_TITLE[kind]
    assert messages.planning(kind, "dev", plan_only=False).startswith("Planning ")
    assert "dev" in messages.request_line("U1", kind, "dev", "summary")
    assert messages.confirm_text(kind, "dev", "summary")


def test_the_advice_button_value_round_trips_and_refuses_anything_else() -> None:
    value = views.advised_scale_value("dev.eu-1", "web-a", 12)
    assert value is not None and re.fullmatch(r"[A-Za-z0-9_-]{1,200}", value)
    assert views.parse_advised_scale(value) == ("dev.eu-1", "web-a", 12)
    assert views.parse_advised_scale("op-1234") is None
    assert views.parse_advised_scale("WyJhIiwiYiIsImMiXQ") is None  # ["a","b","c"]: no size
    assert views.advised_scale_value("c", "p" * 200, 1) is None


def test_schedule_list_shows_a_pool_systems_own_schedules_as_theirs_and_an_unreadable_one() -> None:
    from bot.slack.blocks import schedules as schedule_blocks
    from engine.operations.service import ProviderSchedules
    from engine.pools.base import ProviderSchedule

    kept = ProviderSchedules(
        "dev-eu",
        (
            ProviderSchedule(
                "Gardener", "Shoot garden-dev/eu1", "00 19 * * 1-5", "00 07 * * 1-5", "Europe/Berlin"
            ),
            ProviderSchedule("Gardener", "Shoot garden-dev/eu1", end="00 06 * * 1"),
        ),
    )
    broken = ProviderSchedules("prod", unreadable="Forbidden: shoots.core.gardener.cloud is forbidden")
    message = schedule_blocks.schedule_list([], provider=[kept, broken, ProviderSchedules("empty")])
    text = "\n".join(b["text"]["text"] for b in assert_within_limits(message) if b.get("text"))
    assert "No schedules yet" in text  # scalebot's own: none
    assert "*Gardener's own schedules on dev-eu* (Shoot garden-dev/eu1; read-only" in text
    assert "🌙 hibernate `00 19 * * 1-5`, wake `00 07 * * 1-5` (Europe/Berlin)" in text
    assert "🌙 wake `00 06 * * 1` (UTC, not set)" in text
    assert "*prod*: its own schedules could not be read: Forbidden" in text
    assert "empty" not in text, "a cluster whose system keeps no schedule adds nothing"
    assert message.text == "2 schedules"


def test_a_gardener_workers_card_and_plan_say_gardener_picks_the_machines() -> None:
    picker = "Gardener's machine controller"
    lowered = PoolChange("batch", 3, 1, ("batch-1", "batch-2"), machines_picked_by=picker)
    plan = OperationPlan(kind=OpKind.SCALE, cluster="dev-eu", pools=(lowered,))
    stored = OperationPlan.from_json(json.loads(json.dumps(plan.to_json())))  # as the card re-renders it
    card = json.dumps(
        assert_within_limits(blocks.approval_card(op(kind=OpKind.SCALE, plan=stored))), ensure_ascii=False
    )
    line = (
        "Gardener's machine controller picks the machines to remove when the worker's minimum/maximum is "
        "lowered; scalebot cannot choose them: it drains batch-1, batch-2 first"
    )
    assert line in card, card
    assert line in plan.to_text()
    # To 0 every machine goes: nothing to pick, nothing said.
    zero = replace(lowered, after=0, nodes_to_remove=("batch-1", "batch-2", "batch-3"))
    assert "picks the machines" not in replace(plan, pools=(zero,)).to_text()


def test_a_failed_operations_headline_says_what_failed_and_what_next() -> None:
    failed = op(
        kind=OpKind.ZERO, state=OpState.FAILED, error="pool web: node web-2 could not be deleted (403)"
    )

    texts = [
        b["text"]["text"]
        for b in blocks.progress_parent(failed, status="🔹 Cordoned 5 nodes; draining").block_dicts()
        if b["type"] == "section"
    ]

    status = next(t for t in texts if "Failed" in t)
    assert (
        "Failed: pool web: node web-2 could not be deleted (403). Next: what was scaled down stays down"
        in status
    )
    assert "`/scale ops show op-1a2b3c4d` has each step" in status
    assert not [t for t in texts if "Cordoned 5 nodes" in t], "not the last progress line"


def test_whoami_names_the_person_as_a_mention_in_the_notification_text_too() -> None:
    # The fallback text is what a notification shows: a bare ID there is unreadable.
    shown = views.whoami_view("U0ANN", {"dev-eu": Role.OPERATOR})
    assert shown.text == "Roles of <@U0ANN>"
    assert views.whoami_view("cli:ann", {}).text == "Roles of ann (CLI)"


def test_the_fleet_digest_counts_outcomes_orders_attention_first_and_escapes_names() -> None:
    at = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
    entries = [
        blocks.DigestEntry("dev-a", "done", True, "https://x.slack.com/archives/C1/p1?thread_ts=1.1&cid=C1"),
        blocks.DigestEntry("<!channel> & co", "failed", True),
        blocks.DigestEntry("dev-b", "attention", False),
        blocks.DigestEntry("dev-c", "running", False),
    ]
    text = json.dumps(blocks.fleet_digest(at, entries).block_dicts(), ensure_ascii=False)

    assert "Fleet: 4 scheduled runs fired together at" in text
    assert "1 done · 1 needs attention · 1 failed · 1 running" in text
    assert "<!channel>" not in text and "&lt;!channel&gt; &amp; co" in text
    assert "<https://x.slack.com/archives/C1/p1?thread_ts=1.1&amp;cid=C1|dev-a> · done" in text
    lines = json.loads(text)[2]["text"]["text"].splitlines()
    assert [line.split(" ")[0] for line in lines] == ["❌", "⚠️", "🔄", "✅"]

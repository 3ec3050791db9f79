"""A wake in waves, as its Slack thread shows it: through the real sender, Progress worker and
renderers against the local Web API.

Covers: each wave's start and end is the card's status line (an edit, not a reply), and the final
reply of a wake that failed (broadcast to the channel, as every failure is) names what the
timed-out wave waited for (pool, nodes Ready x/y) and carries the table of the waves, which the
card that ended shows too. The runner's events are played as the runner emits them (its
texts are the engine's, `engine.planning.wake_waves`), so the test is about their delivery.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from bot.text import messages
from engine.domain.operation import OperationSummary, OpState, WakeProgress
from engine.domain.wake_waves import WaveProgress
from engine.planning import wake_waves as ww
from tests.slack.conftest import RunningBot
from tests.slack.harness import all_text


def test_a_timed_out_waves_failure_is_told_in_the_thread_with_the_waves(bot: RunningBot) -> None:
    bot.command("drain web-1")  # any running operation's message: the waves are played onto it
    parent = bot.card()
    op = bot.only_op()
    ts = str(parent.response["ts"])
    t0 = op.created_at
    first = ww.ended(
        WaveProgress(("system",), started_at=t0), ww.WaveLook(2, 2, 0, "ready"), now=t0 + timedelta(seconds=3)
    )
    late = ww.WaveLook(1, 2, 0, "timed_out", ("pool data: nodes Ready 1/2 (data-01: no Ready condition)",))
    second = ww.ended(
        WaveProgress(("data",), started_at=t0 + timedelta(seconds=3)), late, now=t0 + timedelta(seconds=63)
    )
    waves = (first, second, WaveProgress(("apps",)))
    progress = replace(op.progress, wake=WakeProgress(waves=waves, wave=2))

    bot.play(op.id, "phase", ww.started_text(waves, 0, "pool system 0 → 2"), step="wait_ready")
    bot.play(op.id, "phase", ww.ended_text(waves, 0, now=t0 + timedelta(seconds=3)), step="resize")
    bot.play(op.id, "phase", ww.ended_text(waves, 1, now=t0 + timedelta(seconds=63)), step="resize")
    done = replace(waves[2], started_at=t0 + timedelta(seconds=63), ended_at=t0 + timedelta(seconds=65))
    ended = (*waves[:2], replace(done, outcome="ready", ready=3, wanted=3))
    bot.play(
        op.id,
        "final",
        "Completed in 1m05s; 6/7 nodes Ready; " + ww.summary_text(ended),
        state=OpState.FAILED,
        step="finish",
        progress=replace(progress, wake=replace(progress.wake, waves=ended)),
        error="; ".join(ww.timed_out(ended)),
        summary=OperationSummary(duration_seconds=65, nodes_ready=(6, 7)),
    )

    bot.api.wait_for(lambda cs: len([c for c in cs if c.body.get("thread_ts") == ts]) == 1)
    bot.settle()
    replies = [c for c in bot.api.calls_to("chat.postMessage", ok_only=True) if c.body.get("thread_ts") == ts]
    assert len(replies) == 1, "each wave's start and end edits the card; only the failure is a reply"
    final = all_text(replies[0])
    assert "Wave 2/3 (data) timed out: pool data: nodes Ready 1/2" in final  # the error
    rows = messages.wave_rows(ended)
    assert len(rows) == 4 and all(row in final for row in rows), rows  # the table of the waves
    assert "Ready in 2s" in final and "*Nodes Ready* 6/7" in final
    assert replies[0].body.get("reply_broadcast") is True
    card = bot.api.calls_to("chat.update", ok_only=True)[-1]
    assert all(row in all_text(card) for row in rows), "the card that ended shows the waves too"


def test_each_waves_start_and_end_is_the_cards_status_line(bot: RunningBot) -> None:
    bot.command("drain web-1")
    parent = bot.card()
    op = bot.only_op()
    ts = str(parent.response["ts"])
    t0 = op.created_at
    waves = (WaveProgress(("system",), started_at=t0), WaveProgress(("data",)))

    bot.play(op.id, "phase", ww.started_text(waves, 0, "pool system 0 → 2"), step="wait_ready")
    bot.settle()
    card = bot.api.calls_to("chat.update", ok_only=True)[-1]
    assert card.body["ts"] == ts
    assert "Wave 1/2 (system): requested pool system 0 → 2" in all_text(card)
    assert [c for c in bot.api.calls_to("chat.postMessage") if c.body.get("thread_ts") == ts] == []

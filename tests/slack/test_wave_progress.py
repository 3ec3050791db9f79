"""A wake in waves, as its Slack thread shows it: through the real sender, Progress worker and
renderers against the local Web API.

Covers: each wave's start and end is a thread reply, a timed-out wave's reply names what it waited
for (pool, nodes Ready x/y), and the final reply (broadcast to the channel, as every failure is)
carries the table of the waves. The runner's events are played as the runner emits them (its
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


def test_each_wave_and_a_timed_out_one_are_told_in_the_thread(bot: RunningBot) -> None:
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

    bot.api.wait_for(lambda cs: len([c for c in cs if c.body.get("thread_ts") == ts]) == 4)
    bot.settle()
    replies = [c for c in bot.api.calls_to("chat.postMessage", ok_only=True) if c.body.get("thread_ts") == ts]
    texts = [all_text(r) for r in replies]
    assert (
        "Wave 1/3 (system): requested pool system 0 → 2; waiting for all of its nodes to be Ready" in texts[0]
    )
    assert "Wave 1/3 (system): 2/2 nodes Ready after 3s; waking wave 2/3 (data)" in texts[1]
    assert (
        "Wave 2/3 (data) timed out after 1m00s waiting for pool data: nodes Ready 1/2 "
        "(data-01: no Ready condition); waking wave 3/3 (apps)"
    ) in texts[2]
    final = texts[3]
    assert "Wave 2/3 (data) timed out: pool data: nodes Ready 1/2" in final  # the error
    rows = messages.wave_rows(ended)
    assert len(rows) == 4 and all(row in final for row in rows), rows  # the table of the waves
    assert "Ready in 2s" in final and "*Nodes Ready* 6/7" in final
    assert replies[3].body.get("reply_broadcast") is True

"""A wake in waves, as its final thread reply shows it (bot.slack.blocks.operations.final_reply
with bot.text.messages.wave_rows): one row per wave with its pools, nodes Ready and how it ended; a
wave that timed out names what it waited for; a wake of one wave shows no table.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from bot.slack.blocks import operations as blocks
from bot.text import messages
from engine.domain.operation import (
    Operation,
    OperationPlan,
    OperationProgress,
    OpKind,
    OpState,
    PoolChange,
    Target,
    WakeProgress,
)
from engine.domain.wake_waves import WaveProgress

T0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


def woken(*waves: WaveProgress) -> Operation:
    return Operation(
        id="op-wave",
        kind=OpKind.WAKE,
        target=Target(cluster="dev-eu"),
        state=OpState.FAILED,
        requested_by="schedule:nights",
        created_at=T0,
        updated_at=T0 + timedelta(minutes=2),
        plan=OperationPlan(
            kind=OpKind.WAKE,
            cluster="dev-eu",
            pools=(PoolChange("system", 0, 2), PoolChange("data", 0, 2), PoolChange("apps", 0, 3)),
        ),
        progress=OperationProgress(wake=WakeProgress(waves=waves)),
        error="Wave 2/3 (data) timed out: pool data: nodes Ready 1/2 (data-01: no Ready condition)",
    )


def test_the_final_reply_lists_each_wave_and_what_a_timed_out_one_waited_for() -> None:
    waves = (
        WaveProgress(
            ("system",), started_at=T0, ended_at=T0 + timedelta(seconds=4), outcome="ready", ready=2, wanted=2
        ),
        WaveProgress(
            ("data",),
            started_at=T0 + timedelta(seconds=4),
            ended_at=T0 + timedelta(seconds=64),
            outcome="timed_out",
            ready=1,
            wanted=2,
            waited_for=("pool data: nodes Ready 1/2 (data-01: no Ready condition)",),
        ),
        WaveProgress(
            ("apps",),
            started_at=T0 + timedelta(seconds=64),
            ended_at=T0 + timedelta(seconds=70),
            outcome="ready",
            ready=3,
            wanted=3,
        ),
    )
    text = json.dumps(
        blocks.final_reply(woken(*waves), "Completed in 1m10s").block_dicts(), ensure_ascii=False
    )
    rows = messages.wave_rows(waves)
    assert len(rows) == 4
    assert rows[1].split()[:3] == ["1", "system", "2/2"] and rows[1].endswith("Ready in 4s")
    assert rows[2].endswith("timed out after 1m00s: pool data: nodes Ready 1/2 (data-01: no Ready condition)")
    assert rows[3].split()[:3] == ["3", "apps", "3/3"]
    for row in rows:
        assert row in text


def test_a_wake_of_one_wave_shows_no_wave_table() -> None:
    one = WaveProgress(("system", "data"), started_at=T0, ended_at=T0, outcome="ready", ready=4, wanted=4)
    assert messages.wave_rows((one,)) == []
    assert "outcome" not in json.dumps(blocks.final_reply(woken(one), "").block_dicts())

"""`clusters.<name>.wake_waves`: the order pools wake in, read through the real settings loader.

Covers: the short form (a list of pool names) and the long one (pools, ready_share as a percentage
or a fraction, timeout, workloads_available); the default (no waves); every bad input refused with
a message naming the key (not a list, an empty wave, a pool in two waves, a share out of range or
no number, a timeout of zero, an unknown key, a pool list that is not text, a flag that is not
true or false).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.settings import SettingsError, load
from engine.domain.wake_waves import WakeWaves, WaveSpec

ENV = {"SLACK_BOT_TOKEN": "xoxb-1-secret", "SLACK_SIGNING_SECRET": "s3cr3t-signing"}


def cluster_waves(tmp_path: Path, waves: str) -> WakeWaves:
    path = tmp_path / "scalebot.yaml"
    path.write_text(f"clusters:\n  prod:\n    wake_waves: {waves}\n", encoding="utf-8")
    return load(path, ENV).clusters["prod"].wake_waves


def test_waves_short_and_long_form(tmp_path: Path) -> None:
    waves = cluster_waves(
        tmp_path,
        "[[system], {pools: [data, cache], ready_share: 50%, timeout: 10m, workloads_available: true},"
        " {pools: apps, ready_share: 0.25}]",
    )
    assert waves == WakeWaves(
        (
            WaveSpec(("system",)),
            WaveSpec(("data", "cache"), 0.5, 600.0, workloads_available=True),
            WaveSpec(("apps",), 0.25),
        )
    )


def test_no_waves_by_default(tmp_path: Path) -> None:
    path = tmp_path / "scalebot.yaml"
    path.write_text("clusters:\n  prod: {}\n", encoding="utf-8")
    assert load(path, ENV).clusters["prod"].wake_waves == WakeWaves()


@pytest.mark.parametrize(
    ("waves", "message"),
    [
        ("system", "clusters.prod.wake_waves: expected a list of waves"),
        ("[]", "clusters.prod.wake_waves: expected a list of waves"),
        ("[[]]", "clusters.prod.wake_waves[0].pools: expected the names of the pools"),
        ("[[system], [data, system]]", "clusters.prod.wake_waves[1]: pool 'system' is already in wave 1"),
        (
            "[{pools: [a], ready_share: 0%}]",
            "clusters.prod.wake_waves[0].ready_share: expected a share above 0",
        ),
        ("[{pools: [a], ready_share: 150%}]", "clusters.prod.wake_waves[0].ready_share: expected a share"),
        ("[{pools: [a], ready_share: most}]", "clusters.prod.wake_waves[0].ready_share: expected a share"),
        ("[{pools: [a], ready_share: true}]", "clusters.prod.wake_waves[0].ready_share: expected a share"),
        (
            "[{pools: [a], timeout: 0s}]",
            "clusters.prod.wake_waves[0].timeout: expected a duration above zero",
        ),
        ("[{pools: [a], wait: 5m}]", "clusters.prod.wake_waves[0].wait: unknown setting"),
        (
            "[{pools: [a], workloads_available: yes please}]",
            "clusters.prod.wake_waves[0].workloads_available: expected",
        ),
        ("[[{a: 1}]]", "clusters.prod.wake_waves[0].pools: expected a list of text values"),
    ],
)
def test_bad_waves_are_refused_naming_the_key(tmp_path: Path, waves: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        cluster_waves(tmp_path, waves)
    assert str(caught.value).startswith(message), str(caught.value)

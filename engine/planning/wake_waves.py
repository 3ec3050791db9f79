"""The decisions of a wake in waves: which pools each wave wakes, whether a wave is done or timed
out, what a timed-out wave waited for, and how the thread words it.

Pure: values in (`engine.domain.wake_waves`), values out. The runner's resize and wait_ready steps
apply them (engine.operations.steps.wake); the configuration comes from the cluster's `wake_waves`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from engine.domain.durations import format_duration
from engine.domain.wake_waves import WakeWaves, WaveOutcome, WaveProgress


def plan_waves(
    pools: Sequence[str], config: WakeWaves, *, default_timeout: timedelta
) -> tuple[WaveProgress, ...]:
    """The waves of a wake of `pools`, in order. A configured wave none of whose pools this wake
    touches is left out; pools no wave names wake together last (all of their nodes Ready, the
    default timeout). A pool named in two waves wakes in the first."""
    wanted = list(dict.fromkeys(pools))
    placed: set[str] = set()
    waves: list[WaveProgress] = []
    for spec in config.waves:
        members = tuple(p for p in dict.fromkeys(spec.pools) if p in wanted and p not in placed)
        if not members:
            continue
        placed.update(members)
        timeout = spec.timeout_seconds
        waves.append(
            WaveProgress(
                pools=members,
                ready_share=spec.ready_share,
                timeout_seconds=default_timeout.total_seconds() if timeout is None else timeout,
                workloads_available=spec.workloads_available,
            )
        )
    rest = tuple(p for p in wanted if p not in placed)
    if rest or not waves:
        waves.append(WaveProgress(pools=rest, timeout_seconds=default_timeout.total_seconds()))
    return tuple(waves)


def needed(share: float, wanted: int) -> int:
    """Nodes that must be Ready for a wave of `wanted` nodes to be done: at least one of a wave that
    asks for any (a share never rounds a wave down to nothing)."""
    if wanted <= 0:
        return 0
    return max(1, min(wanted, math.ceil(share * wanted - 1e-9)))


@dataclass(frozen=True, slots=True)
class PoolReadiness:
    """One pool of a wave at a look: nodes Ready and asked for, and what is not Ready yet."""

    ready: int
    wanted: int
    not_ready: tuple[str, ...] = ()
    pending_pods: int = 0
    """Pods still pending for a pool sized from demand (Karpenter): its capacity is not back."""


@dataclass(frozen=True, slots=True)
class WaveLook:
    """The wave's figures at one look, and its verdict."""

    ready: int
    wanted: int
    pending_pods: int
    outcome: WaveOutcome
    waited_for: tuple[str, ...] = field(default=())


def nodes_back(wave: WaveProgress, pools: Mapping[str, PoolReadiness]) -> bool:
    """Whether ceil(share x its nodes) are Ready and no pod waits for capacity from its pools."""
    mine = [pools[p] for p in wave.pools if p in pools]
    pending = max((p.pending_pods for p in mine), default=0)
    return sum(p.ready for p in mine) >= needed(wave.ready_share, sum(p.wanted for p in mine)) and not pending


def look(
    wave: WaveProgress,
    pools: Mapping[str, PoolReadiness],
    *,
    now: datetime,
    workloads_not_back: Sequence[tuple[str, str]] = (),
) -> WaveLook:
    """Is the wave done ("ready"), out of time ("timed_out"), or still waiting ("")?

    Done once its nodes are back (`nodes_back`) and, for a wave that waits for its workloads, none of
    `workloads_not_back` ((key, why) of the workloads the sleep displaced from its pools that are not
    available) is left; timed out `timeout_seconds` after its pools were resized (a wave not started
    yet waits).
    """
    mine = [pools[p] for p in wave.pools if p in pools]
    ready = sum(p.ready for p in mine)
    wanted = sum(p.wanted for p in mine)
    pending = max((p.pending_pods for p in mine), default=0)
    workloads = workloads_not_back if wave.workloads_available else ()
    if nodes_back(wave, pools) and not workloads:
        return WaveLook(ready, wanted, pending, "ready")
    started = wave.started_at
    if started is not None and now >= started + timedelta(seconds=wave.timeout_seconds):
        missing = (*waited_for(wave, pools), *(f"{key}: {why}" for key, why in workloads))
        return WaveLook(ready, wanted, pending, "timed_out", missing)
    return WaveLook(ready, wanted, pending, "")


def waited_for(wave: WaveProgress, pools: Mapping[str, PoolReadiness]) -> tuple[str, ...]:
    """One phrase per pool of the wave short of Ready nodes: what the wave waited for."""
    phrases = []
    for name in wave.pools:
        pool = pools.get(name)
        if pool is None or (pool.ready >= pool.wanted and not pool.pending_pods):
            continue
        phrase = f"pool {name}: nodes Ready {pool.ready}/{pool.wanted}"
        if pool.pending_pods:
            phrase += f", {pool.pending_pods} pod(s) pending"
        if pool.not_ready:
            phrase += f" ({'; '.join(sorted(pool.not_ready)[:5])})"
        phrases.append(phrase)
    return tuple(phrases)


def next_wave(waves: Sequence[WaveProgress], current: int) -> int | None:
    """The index of the wave after `current`; None when `current` is the last."""
    return current + 1 if current + 1 < len(waves) else None


def ended(wave: WaveProgress, seen: WaveLook, *, now: datetime) -> WaveProgress:
    """The wave as it ended at this look."""
    return replace(
        wave,
        ended_at=now,
        outcome=seen.outcome,
        ready=seen.ready,
        wanted=seen.wanted,
        waited_for=seen.waited_for,
    )


def seen_at(wave: WaveProgress, seen: WaveLook) -> WaveProgress:
    """The wave with its figures at this look, still waiting."""
    return replace(wave, ready=seen.ready, wanted=seen.wanted)


# -- words ------------------------------------------------------------------------------------------


def title(waves: Sequence[WaveProgress], index: int) -> str:
    """ "Wave 2/3 (data, db)"."""
    return f"Wave {index + 1}/{len(waves)} ({', '.join(waves[index].pools)})"


def share_text(share: float) -> str:
    return f"{share * 100:.0f}%" if share * 100 == round(share * 100) else f"{share * 100:.1f}%"


def started_text(waves: Sequence[WaveProgress], index: int, requested: str) -> str:
    wave = waves[index]
    what = "all of its nodes" if wave.ready_share >= 1 else f"{share_text(wave.ready_share)} of its nodes"
    text = f"{title(waves, index)}: requested {requested}; waiting for {what} to be Ready"
    if wave.workloads_available:
        text += " and the workloads its sleep displaced to be available"
    return text


def status_text(
    waves: Sequence[WaveProgress],
    index: int,
    seen: WaveLook,
    workloads_not_back: Sequence[tuple[str, str]] = (),
) -> str:
    wave = waves[index]
    line = f"{title(waves, index)}: {seen.ready}/{seen.wanted} nodes Ready"
    if wave.ready_share < 1:
        line += f" ({needed(wave.ready_share, seen.wanted)} needed)"
    if seen.pending_pods:
        line += f", {seen.pending_pods} pod(s) pending"
    if workloads_not_back:
        keys = [key for key, _ in workloads_not_back]
        line += f"; waiting for its workloads: {', '.join(keys[:5])}"
        line += f" and {len(keys) - 5} more" if len(keys) > 5 else ""
    return line


def ended_text(waves: Sequence[WaveProgress], index: int, *, now: datetime) -> str:
    """What the thread says when a wave ends: done, or timed out naming what it waited for; and
    which wave comes next."""
    wave = waves[index]
    took = format_duration(now - wave.started_at) if wave.started_at is not None else "0s"
    if wave.outcome == "timed_out":
        text = (
            f"{title(waves, index)} timed out after {took} waiting for "
            f"{'; '.join(wave.waited_for) or 'its nodes'}"
        )
    else:
        text = f"{title(waves, index)}: {wave.ready}/{wave.wanted} nodes Ready after {took}"
    after = next_wave(waves, index)
    if after is not None:
        text += f"; waking wave {after + 1}/{len(waves)} ({', '.join(waves[after].pools)})"
    return text


def summary_text(waves: Sequence[WaveProgress]) -> str:
    """The final line's account of the waves: "waves: 1 (system) ready in 4s; 2 (data) timed out …"."""
    parts = []
    for i, wave in enumerate(waves):
        took = (
            format_duration(wave.ended_at - wave.started_at)
            if wave.ended_at is not None and wave.started_at is not None
            else "?"
        )
        name = f"{i + 1} ({', '.join(wave.pools)})"
        if wave.outcome == "timed_out":
            parts.append(f"{name} timed out after {took}: {'; '.join(wave.waited_for) or 'its nodes'}")
        else:
            parts.append(f"{name} {wave.ready}/{wave.wanted} Ready in {took}")
    return "waves: " + "; ".join(parts)


def timed_out(waves: Sequence[WaveProgress]) -> tuple[str, ...]:
    """The error of a wake whose waves timed out: one phrase per such wave."""
    return tuple(
        f"{title(waves, i)} timed out: {'; '.join(w.waited_for) or 'its nodes were not Ready'}"
        for i, w in enumerate(waves)
        if w.outcome == "timed_out"
    )

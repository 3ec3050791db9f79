"""Wakes in waves: which pools wake together, and what each wave waits for before the next.

A cluster's `wake_waves` setting lists waves of pool names; a wake resizes the pools of one wave,
waits until `ready_share` of that wave's nodes are Ready, and (`workloads_available`) the workloads
the sleep displaced from them are available again (or its timeout passes: the thread says what it
waited for, and the wake goes on with the next wave), then the next. Pools no wave names
wake together in a last wave. Without the setting a wake is one wave of every pool, as before.

Pure values: `WaveSpec` / `WakeWaves` are the configuration, `WaveProgress` what a running wake
remembers of each wave (persisted with the operation, so a restart resumes mid-wave).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

WaveOutcome = Literal["", "ready", "timed_out"]
"""A wave still waiting (""), one that reached its share of Ready nodes, one whose timeout passed."""


@dataclass(frozen=True, slots=True)
class WaveSpec:
    """One configured wave: its pools, the share of their nodes that must be Ready, its timeout."""

    pools: tuple[str, ...]
    ready_share: float = 1.0
    """0 < share <= 1: the wave is done once ceil(share x its nodes) are Ready."""
    timeout_seconds: float | None = None
    """How long the wave waits before reporting and going on; None: the wake's ready timeout."""
    workloads_available: bool = False
    """Also wait until the Deployments and StatefulSets the sleep displaced from this wave's pools
    (their pods were on the nodes it emptied) are available again."""


@dataclass(frozen=True, slots=True)
class WakeWaves:
    """A cluster's wake order. Empty: every pool wakes at once (one wave)."""

    waves: tuple[WaveSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class WaveProgress:
    """One wave of a running wake, as decided at its start and as last seen."""

    pools: tuple[str, ...]
    ready_share: float = 1.0
    timeout_seconds: float = 900.0
    workloads_available: bool = False
    started_at: datetime | None = None
    """When its pools were resized; None while an earlier wave still runs."""
    ended_at: datetime | None = None
    outcome: WaveOutcome = ""
    ready: int = 0
    wanted: int = 0
    """Its nodes Ready and asked for, at the last look."""
    waited_for: tuple[str, ...] = ()
    """At a timeout: what it waited for, one phrase per pool short of Ready nodes
    ("pool data: nodes Ready 0/2 (data-00: no Ready condition)") and per workload not available
    ("Deployment/shop/db: 0/2 replicas available")."""

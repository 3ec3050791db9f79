"""Drive drain passes until the nodes are empty, the timeout is reached or the drain is cancelled.

The loop owns the waiting that `engine.drain.passes.run_pass` refuses to do: it wakes for the next pass
at the earliest of the pass interval (20 s, as Cluster API requeues), the moment a refused pod may
be retried, or the moment a terminating pod's grace period ends. Time comes from an injected
`Clock`, so tests run it on virtual time.

A drain counts as complete only when a listing at least `settle` after the last eviction finds
nothing left (pods can be bound to a cordoned node by a scheduler race or by `spec.nodeName`).
The timeout is measured from the persisted `DrainState.started_at`, so it survives restarts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from engine.domain.clock import Clock
from engine.domain.settings import DrainSettings
from engine.drain import filters
from engine.drain import passes as drain
from engine.drain.pacing import PassFacts, next_pass
from engine.drain.pod_feed import PodFeed
from engine.drain.report import DrainReport
from engine.kube.api import KubeApi

CANCEL_CHECK_SECONDS = 1.0
"""How often a wait for the next pass looks at the cancel event (it sleeps on the feed's cue)."""


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    report: DrainReport
    state: drain.DrainState
    completed: bool
    """Every node drained. False when a node's drain ended with a refusal (see `failed_nodes`)."""
    timed_out: bool = False
    cancelled: bool = False

    @property
    def failed_nodes(self) -> Mapping[str, str]:
        """Node → the refusal that ended its drain (kubectl's "unable to drain node")."""
        return self.state.failed_nodes


def drain_nodes(
    api: KubeApi,
    nodes: Sequence[str],
    *,
    options: filters.DrainOptions,
    clock: Clock,
    settings: DrainSettings = DrainSettings(),
    state: drain.DrainState | None = None,
    on_report: Callable[[DrainReport], None] | None = None,
    on_pass: Callable[[drain.PassResult, datetime], None] | None = None,
    cancel: threading.Event | None = None,
    pod_filters: Sequence[filters.PodFilter] | None = None,
) -> DrainOutcome:
    """Cordon, then drain `nodes` in passes. Pass a saved `state` to resume an interrupted drain.
    `pod_filters`: the pass's filters instead of the defaults (a forced drain's scope guard first).

    `on_report` is called with each pass's report whose condition message changed; `on_pass` with
    every pass's result and time (the live progress figures move with each pass).

    The pods come from a `PodFeed` (one listing, then a pod watch where the API offers one), which
    also wakes the loop as soon as the pods a pass left terminating are gone.
    """
    cancel = cancel or threading.Event()
    last_message: str | None = None
    wake = threading.Event()
    feed = PodFeed(api, nodes, on_change=wake.set, name="drain-pod-watch")
    with (
        ThreadPoolExecutor(max_workers=max(1, settings.parallel), thread_name_prefix="evict") as pool,
        contextlib.closing(feed),
    ):
        already = drain.cordon_nodes(api, nodes, now=clock.now(), executor=pool)
        if state is None:
            state = drain.DrainState(started_at=clock.now(), already_cordoned=already)
        failed_before = len(state.failed_nodes)
        while True:
            now = clock.now()
            wake.clear()
            result = drain.run_pass(
                api,
                nodes=nodes,
                state=state,
                options=options,
                pod_filters=pod_filters,
                now=now,
                executor=pool,
                pods_of=feed.pods,
                clock=clock.now,
            )
            feed.await_gone(result.awaiting)
            state, report = result.state, result.report
            if on_pass is not None:
                on_pass(result, now)
            message = report.condition_message()
            if on_report is not None and message != last_message:
                on_report(report)
            last_message = message
            # An empty node settles too: a pod bound to it by a scheduler race or `spec.nodeName`
            # right after the cordon must still be found before the node counts as drained.
            newly_failed = len(state.failed_nodes) > failed_before
            failed_before = len(state.failed_nodes)
            if not result.draining_nodes and state.failed_nodes:
                # Every node's drain ended with a refusal: nothing left to wait for.
                return DrainOutcome(report=report, state=state, completed=False)
            decision = next_pass(
                settings.pacing,
                PassFacts(
                    now=now,
                    completed=report.completed,
                    settled_from=max(state.started_at, state.last_eviction_at or state.started_at),
                    next_retry_at=result.wake_at(watched=feed.live),
                    deadline=state.started_at + settings.timeout if settings.timeout else None,
                    # This pass's report still holds a newly refused node's pods; the next pass
                    # goes on with the other nodes alone.
                    again_at_once=newly_failed,
                ),
            )
            if decision.done:
                return DrainOutcome(report=report, state=state, completed=not state.failed_nodes)
            if decision.deadline_reached:
                return DrainOutcome(report=report, state=state, completed=False, timed_out=True)
            if _wait_for_pass(clock, cancel, wake, decision.wait_seconds(clock.now())):
                return DrainOutcome(report=report, state=state, completed=False, cancelled=True)


def _wait_for_pass(clock: Clock, cancel: threading.Event, wake: threading.Event, seconds: float) -> bool:
    """Sleep until the next pass is due or the feed calls for one; True when cancelled."""
    remaining = seconds
    while remaining > 0:
        if cancel.is_set():
            return True
        step = min(CANCEL_CHECK_SECONDS, remaining)
        if clock.wait(wake, step):
            break
        remaining -= step
    return cancel.is_set()

"""The `resize`, `wait_ready` and `finish` steps of a scale-up or a wake, in waves.

The waves (`engine.domain.wake_waves`) are decided at the first resize and kept in the
operation's progress; each round resizes one wave's pools and waits for its share of Ready nodes
(or its timeout, reported) before the next. `finish` ends the wake and clears what it restored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.domain.durations import format_duration
from engine.domain.operation import Operation, OpKind, OpState, PoolChange, ProgressKind
from engine.domain.wake_waves import WakeWaves, WaveProgress
from engine.operations.flows import NEXT, Outcome
from engine.operations.steps.context import ClusterHandle, StepResult, WithSleepRecords, stopped_cluster
from engine.operations.steps.report import final_event, provider_progress, summary_of
from engine.operations.steps.restore import clear_restore, ends_sleep, record_restore, records_restore
from engine.planning import wake_waves
from engine.pools.base import Pool


def _waves(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> tuple[WaveProgress, ...]:
    """The waves of this operation: as persisted, else decided now (a wake follows the cluster's
    `wake_waves`; a scale-up, and a row written before waves, is one wave of every pool)."""
    wake = op.progress.wake
    if wake.waves:
        return wake.waves
    pools = [c.pool for c in op.plan.pools]
    config = h.wake_waves if op.kind is OpKind.WAKE and not wake.resized_at else WakeWaves()
    waves = wake_waves.plan_waves(pools, config, default_timeout=ctx.settings.ready_timeout)
    if wake.resized_at is not None:  # resized before waves were persisted: every pool at once
        waves = (replace(waves[0], started_at=wake.resized_at),)
    return waves


def step_resize(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """Resize the pools of the current wave (every pool, when the wake is one wave)."""
    waves = _waves(ctx, op, h)
    index = op.progress.wake.wave
    wave = waves[index]
    changes = [c for c in op.plan.pools if c.pool in wave.pools]
    events: list[tuple[ProgressKind, str, str]] = []
    stopped = stopped_cluster(h)
    if stopped is not None:
        # A stopped cluster's API server does not answer: it is started first, and its pools come
        # back at the sizes they kept through the stop (then set to the wake's, as for any wake).
        why = stopped.cluster_stopped()
        stopped.start_cluster()
        events.append(("phase", f"Started the cluster ({why}); its pools come back with it", ""))
    for change in changes:
        size = change.after
        if size == 0 and (op.kind is OpKind.WAKE or records_restore(op)):
            pool = h.pools.get_pool(change.pool)
            if pool.sizes_from_demand and op.kind is OpKind.WAKE:
                # A demand-sized pool asleep with no nodes: any size above 0 means "provision
                # again" (PoolProvider.set_size); 0 would keep it capped.
                size = 1
            elif pool.sizes_from_demand:
                # Going to sleep with no nodes still caps it: record first, so wake finds it asleep.
                record_restore(ctx, op, h, pool)
        h.pools.set_size(change.pool, size)
    now = ctx.clock.now()
    started = (*waves[:index], replace(wave, started_at=wave.started_at or now), *waves[index + 1 :])
    if len(waves) == 1:
        text = f"Requested {op.plan.summary()}; waiting for nodes to be Ready"
    else:
        requested = replace(op.plan, pools=tuple(changes)).summary()
        text = wake_waves.started_text(started, index, requested)
    wake = replace(op.progress.wake, resized_at=op.progress.wake.resized_at or now, waves=started)
    events.append(("phase", text, ""))
    return StepResult(then=NEXT, progress=replace(op.progress, wake=wake), events=events)


def _readiness(
    op: Operation, h: ClusterHandle, changes: Sequence[PoolChange], pools: Sequence[Pool]
) -> tuple[dict[str, wake_waves.PoolReadiness], int | None]:
    """Each woken pool's nodes Ready and asked for, what is not Ready, and (demand-sized pools) the
    nodes provisioned from demand (None when no pool sizes itself so)."""
    nodes = {n.name: n for n in h.api.list_nodes()}
    readiness: dict[str, wake_waves.PoolReadiness] = {}
    provisioned: int | None = None
    for change, pool in zip(changes, pools, strict=True):
        not_ready = [
            f"{name}: {nodes[name].ready_reason or 'not Ready'}"
            for name in pool.nodes
            if name not in pool.ready_nodes and name in nodes
        ]
        if pool.sizes_from_demand:
            provisioned = (provisioned or 0) + len(pool.nodes)
            launching = pool.desired - len(pool.nodes)
            if launching > 0:
                not_ready.append(f"{change.pool}: {launching} node(s) launching")
            # A sleeping pool is not waiting for anything.
            pending = pool.pending_pods if op.kind is OpKind.WAKE else 0
            readiness[change.pool] = wake_waves.PoolReadiness(
                len(pool.ready_nodes), pool.desired, tuple(not_ready), pending
            )
            continue
        missing = change.after - len(pool.nodes)
        if missing > 0:
            not_ready.append(f"{change.pool}: {missing} node(s) not registered yet")
        readiness[change.pool] = wake_waves.PoolReadiness(
            min(len(pool.ready_nodes), change.after), change.after, tuple(not_ready)
        )
    return readiness, provisioned


def _wave_workloads_not_back(
    ctx: WithSleepRecords, h: ClusterHandle, wave: WaveProgress
) -> tuple[tuple[str, str], ...]:
    """(key, why) of the workloads the sleep displaced from the wave's pools that are not available
    yet; () for a wave that does not wait for its workloads."""
    if not wave.workloads_available or h.workloads is None:
        return ()
    keys = ctx.sleep_records.displaced(h.name, set(wave.pools))
    return tuple(h.workloads.availability(keys=keys).not_ready) if keys else ()


def step_wait_ready(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    """Wait for the current wave's nodes to be Ready (a share of them, as configured), then go on
    with the next wave; after the last, with the workloads. A wave out of time says what it waited
    for and the wake goes on.

    A demand-sized pool (Karpenter) has no node count to wait for: its capacity is back once no pod
    is left pending and every node it provisioned is Ready; those nodes count as wanted.
    """
    now = ctx.clock.now()
    waves = _waves(ctx, op, h)
    index = min(op.progress.wake.wave, len(waves) - 1)
    awake = {p for wave in waves[: index + 1] for p in wave.pools}
    changes = [c for c in op.plan.pools if c.pool in awake]
    pools = [h.pools.get_pool(change.pool) for change in changes]
    followed, progress = provider_progress(op, pools)
    readiness, provisioned = _readiness(op, h, changes, pools)
    ready = sum(r.ready for r in readiness.values())
    wanted = sum(r.wanted for r in readiness.values())
    pending = max((r.pending_pods for r in readiness.values()), default=0)
    not_ready_all = sorted(
        [n for r in readiness.values() for n in r.not_ready]
        + ([f"{pending} pod(s) pending"] if pending else [])
    )
    line = f"{ready}/{wanted} nodes Ready"
    if provisioned is not None:
        line += f", {provisioned} provisioned from demand"
        line += f", {pending} pod(s) pending" if pending else ""
    missing = _wave_workloads_not_back(ctx, h, waves[index])
    seen = wake_waves.look(waves[index], readiness, now=now, workloads_not_back=missing)
    after: Outcome = NEXT if op.plan.workloads else "no_workloads"
    woke = replace(op.progress.wake, ready=ready, wanted=wanted, wave=index)
    kept = sorted(n for pool in pools for n in pool.kept_cordoned)
    if kept:  # back in the pool, but someone else had cordoned them before scalebot emptied them
        woke = replace(woke, kept_cordoned=tuple(kept))
    if provisioned is not None:
        woke = replace(woke, provisioned=provisioned)
    if not seen.outcome:
        previous = waves[index]
        waves = (*waves[:index], wake_waves.seen_at(previous, seen), *waves[index + 1 :])
        events: list[tuple[ProgressKind, str, str]] = list(progress)
        if len(waves) == 1:
            if (op.progress.wake.ready, op.progress.wake.wanted) != (ready, wanted):
                events.append(("report", line, ""))
        elif (previous.ready, previous.wanted) != (seen.ready, seen.wanted) or not op.progress.wake.waves:
            events.append(("report", wake_waves.status_text(waves, index, seen, missing), ""))
        data = replace(op.progress, wake=replace(woke, waves=waves), provider_progress=followed)
        return StepResult(progress=data, wait=2.0, events=events)
    waves = (*waves[:index], wake_waves.ended(waves[index], seen, now=now), *waves[index + 1 :])
    woke = replace(woke, waves=waves)
    later = wake_waves.next_wave(waves, index)
    if len(waves) > 1:
        ended: tuple[ProgressKind, str, str] = ("phase", wake_waves.ended_text(waves, index, now=now), "")
        if later is not None:
            data = replace(op.progress, wake=replace(woke, wave=later), provider_progress=followed)
            return StepResult(then="next_wave", progress=data, events=[*progress, ended])
        progress = [*progress, ended]
    data = replace(op.progress, wake=woke, provider_progress=followed)
    if ready >= wanted and not pending:
        return StepResult(then=after, progress=data, events=[*progress, ("phase", line, "")])
    started = waves[index].started_at or now
    if seen.outcome == "timed_out" or now >= started + ctx.settings.ready_timeout:
        detail = "; ".join(not_ready_all[:10])
        return StepResult(
            then=after,
            progress=replace(data, wake=replace(woke, not_ready=tuple(not_ready_all))),
            events=[*progress, ("phase", f"{line} after {format_duration(now - started)}: {detail}", "")],
        )
    # The last wave reached its share with nodes of the wake still not Ready: name them and go on.
    detail = "; ".join(not_ready_all[:10])
    return StepResult(
        then=after,
        progress=replace(data, wake=replace(woke, not_ready=tuple(not_ready_all))),
        events=[*progress, ("phase", f"{line}: {detail}" if detail else line, "")],
    )


def step_finish(ctx: WithSleepRecords, op: Operation, h: ClusterHandle) -> StepResult:
    now = ctx.clock.now()
    wake = op.progress.wake
    late = wake_waves.timed_out(wake.waves)
    # Configured waves: each wave's share decides (a 50% wave is done with half its nodes).
    # One wave of every pool, as before waves: all of the nodes.
    configured = len(wake.waves) > 1 or any(w.ready_share < 1 for w in wake.waves)
    ok = not late if configured else (wake.ready or 0) >= (wake.wanted or 0)
    if op.kind is OpKind.WAKE or (ok and ends_sleep(op)):
        clear_restore(ctx, op, h)
    state = OpState.SUCCEEDED if ok else OpState.FAILED
    error = ""
    if not ok:
        error = "; ".join(late) if len(wake.waves) > 1 else f"only {wake.ready}/{wake.wanted} nodes Ready"
    return StepResult(
        state=state,
        error=error,
        events=[final_event(op, op.progress, now)],
        summary=summary_of(op, op.progress, now),
    )

"""The requests a schedule's runs make: a sleep's, a wake's, and a sleep's forced variant. Each is made
exactly like a human request (`requested_by="schedule:<name>"`), with the schedule's pre-approvers and
on behalf of its creator (and whoever clicked "Run now").

Pure: values in, an `OperationRequest` out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import overload

from engine.domain.operation import OperationRequest, OpKind, Target
from engine.schedules.core.model import Schedule


@overload
def sleep_request(
    sched: Schedule, *, thread_ts: str = "", on_behalf: tuple[str, ...] = ()
) -> OperationRequest: ...


@overload
def sleep_request(
    sched: Schedule, *, thread_ts: str = "", on_behalf: tuple[str, ...] = (), pools: tuple[str, ...] | None
) -> OperationRequest | None: ...


def sleep_request(
    sched: Schedule,
    *,
    thread_ts: str = "",
    on_behalf: tuple[str, ...] = (),
    pools: tuple[str, ...] | None = None,
) -> OperationRequest | None:
    """The sleep's request; `pools`: the pools this run acts on when some were left out of it
    (None: the schedule's target as it is; empty: nothing is left, no request)."""
    target = sched.target
    if target.kind == "workloads":
        workloads_only = Target(cluster=sched.cluster, workloads_only=True)
        return operation_request(OpKind.ZERO, workloads_only, sched, thread_ts, on_behalf=on_behalf)
    if pools is not None:
        if not pools:
            return None
        target = replace(target, kind="pools", pools=pools) if target.kind == "cluster" else target
        target = replace(target, pools=pools)
    if target.kind == "scale":
        return operation_request(
            OpKind.SCALE,
            Target(cluster=sched.cluster, pools=target.pools, size=target.size, workloads=target.workloads),
            sched,
            thread_ts,
            on_behalf=on_behalf,
        )
    zero = Target(cluster=sched.cluster, pools=target.pools, workloads=target.workloads)
    return operation_request(OpKind.ZERO, zero, sched, thread_ts, on_behalf=on_behalf)


def wake_request(
    sched: Schedule, asleep: set[str], *, workloads_asleep: bool, on_behalf: tuple[str, ...] = ()
) -> OperationRequest | None:
    """The wake's request: the schedule's pools that are asleep, and the workloads when its sleeps
    scale them (restored from their records even once the pools are up); None: nothing is asleep."""
    wanted = asleep if sched.target.kind == "cluster" else asleep & set(sched.target.pools)
    workloads = sched.target.kind == "workloads" or sched.target.workloads
    if not wanted and not (workloads and workloads_asleep):
        return None
    pools = () if sched.target.kind == "cluster" else tuple(sorted(wanted))
    wake = Target(
        cluster=sched.cluster, pools=pools, workloads=sched.target.workloads, workloads_only=not wanted
    )
    return operation_request(OpKind.WAKE, wake, sched, "", on_behalf=on_behalf)


def operation_request(
    kind: OpKind, target: Target, sched: Schedule, thread_ts: str, *, on_behalf: tuple[str, ...] = ()
) -> OperationRequest:
    return OperationRequest(
        kind=kind,
        target=target,
        requested_by=sched.requester,
        channel=sched.channel,
        thread_ts=thread_ts,
        reason=f"schedule {sched.name}",
        pre_approvers=sched.approvers if sched.approval_mode == "pre_approved" else (),
        # Its creator stands behind every run, whoever clicked "Run now" behind that one.
        on_behalf_of=tuple(dict.fromkeys(u for u in (sched.created_by, *on_behalf) if u)),
    )


def forced(request: OperationRequest) -> OperationRequest:
    return replace(request, target=replace(request.target, force=True))

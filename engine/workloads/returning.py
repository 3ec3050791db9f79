"""Which workloads a wake has not brought back yet, and why: pure functions over listed objects.

A wake's nodes can all be Ready while a Deployment is still not available: its pods wait for the
scheduler (which retries an unschedulable pod on the next node event that could help it, or
within its 5-minute flush), for an image, for a volume. The wake follows such workloads for a
bounded time and then names each one still not back with the reason its pods give.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from engine.domain.model import PodInfo

MAX_NAMED = 10
"""Workloads named in one report line; the rest are counted."""


def owned_by(pod: PodInfo, key: str) -> bool:
    """Whether `pod` belongs to the workload `Kind/namespace/name` (a Deployment's pods through
    its ReplicaSets, named `name-<template hash>`)."""
    kind, _, rest = key.partition("/")
    namespace, _, name = rest.partition("/")
    if pod.namespace != namespace or pod.controller is None:
        return False
    if kind == "Deployment":
        owner, _, suffix = pod.controller.name.rpartition("-")
        return pod.controller.kind == "ReplicaSet" and owner == name and bool(suffix)
    return pod.controller.kind == kind and pod.controller.name == name


def workload_of(pod: PodInfo) -> str | None:
    """The `Kind/namespace/name` of the Deployment or StatefulSet `pod` belongs to (None for any
    other pod): the inverse of `owned_by`, for the workloads a sleep displaces with its nodes."""
    owner = pod.controller
    if owner is None:
        return None
    if owner.kind == "StatefulSet":
        return f"StatefulSet/{pod.namespace}/{owner.name}"
    deployment, _, suffix = owner.name.rpartition("-")
    if owner.kind == "ReplicaSet" and deployment and suffix:
        return f"Deployment/{pod.namespace}/{deployment}"
    return None


def leaving_with(scaled_to_zero: Collection[str], pods: Iterable[PodInfo]) -> list[PodInfo]:
    """The pods of the workloads (`Kind/namespace/name`) scaled to zero: their controllers delete
    them, terminating or not yet, so a drain that evicts them only duplicates that (or is refused
    by their PodDisruptionBudget until it is done)."""
    return [pod for pod in pods if workload_of(pod) in scaled_to_zero]


def displaced_by(nodes: Mapping[str, str], pods: Iterable[PodInfo]) -> dict[str, frozenset[str]]:
    """Pool → the workloads with a pod on one of its `nodes` (node → pool) that is still running
    there: the workloads a sleep that empties those nodes sends elsewhere, or nowhere."""
    found: dict[str, set[str]] = {}
    for pod in pods:
        pool = nodes.get(pod.node_name)
        key = workload_of(pod)
        if pool is not None and key is not None and not pod.is_finished:
            found.setdefault(pool, set()).add(key)
    return {pool: frozenset(keys) for pool, keys in found.items()}


def why_not_back(not_ready: Sequence[tuple[str, str]], pods: Iterable[PodInfo]) -> tuple[str, ...]:
    """`Kind/namespace/name: reason` for each workload not available, with the reason of its first
    pod the scheduler has not placed (its PodScheduled condition) when there is one."""
    listed = [p for p in pods if p.phase == "Pending" and not p.is_terminating]
    lines = []
    for key, availability in not_ready:
        reason = availability
        pending = sorted((p for p in listed if owned_by(p, key)), key=lambda p: p.name)
        if pending:
            first = pending[0]
            why = first.unscheduled_reason or (
                "scheduled, not running yet" if first.node_name else "not scheduled"
            )
            reason += f"; {len(pending)} pod(s) Pending ({first.name}: {why})"
        lines.append(f"{key}: {reason}")
    return tuple(lines)


def named(lines: Sequence[str]) -> str:
    """At most MAX_NAMED lines joined, and how many more."""
    more = f"; … ({len(lines) - MAX_NAMED} more)" if len(lines) > MAX_NAMED else ""
    return "; ".join(lines[:MAX_NAMED]) + more

"""The drain's side of a forced run: a Pod measured against a plain drain.

What a plain drain refuses (and why, one phrase per rule), which Pods need force, and the guard a
forced drain runs first so that a Pod only force removes is refused unless the approved force scope
(`engine.domain.force_scope`) covers it.

Pure: functions over `engine.domain` values and `engine.drain.filters`; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from engine.domain.force_scope import ForcedPod, ForceScope, unit_of
from engine.domain.model import PodInfo
from engine.drain import filters


def plain_drain(*, opt_outs_wait: bool = False) -> filters.DrainOptions:
    """The plain drain a forced run is measured against: `/scale drain NODE` without --force
    (kubectl drain --ignore-daemonsets --delete-emptydir-data). `opt_outs_wait`: phase 1 of a
    full zero-scale, where opted-out Pods wait for phase 2 instead of being refused."""
    plain = filters.DrainOptions.kubectl(ignore_daemonsets=True, delete_emptydir_data=True)
    return replace(plain, opt_outs_wait=opt_outs_wait)


def refusals(pod: PodInfo, plain: filters.DrainContext) -> list[str]:
    """Why a plain drain (options in `plain`) refuses `pod`, one phrase per rule; [] when it does not."""
    reasons = []
    verdict = filters.daemonset_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK and pod.controller is not None:
        gone = pod.controller.name
        reasons.append(f"orphaned DaemonSet Pod (DaemonSet {gone} is gone): nothing recreates it")
    verdict = filters.local_storage_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK:
        reasons.append("emptyDir local storage: its data is lost")
    verdict = filters.unreplicated_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK:
        reasons.append("bare Pod (no controller): nothing recreates it")
    annotation = filters.opt_out_annotation(pod)
    verdict = filters.opt_out_pods(pod, plain)
    if verdict is not None and verdict.action is filters.Action.BLOCK and annotation is not None:
        reasons.append(f"annotated {annotation}: its owner opted out of disruption")
    return reasons


def may_refuse(pod: PodInfo) -> bool:
    """False when the plain drain (`plain_drain`) cannot refuse `pod`: it has a controller that is
    not a DaemonSet and no opt-out annotation (the plain drain deletes emptyDir data; see
    `refusals`). Only the other Pods need classifying against it; at 30,000 Pods that is a few."""
    if pod.controller is None or pod.controller.is_daemonset:
        return True
    return filters.opt_out_annotation(pod) is not None


def needing_force(
    pods: Iterable[PodInfo], plain: filters.DrainContext, forced: filters.DrainContext
) -> list[ForcedPod]:
    """The Pods the plain drain refuses and the forced one removes, with why each needs force."""
    out = []
    for pod in pods:
        if filters.classify(pod, plain).action is not filters.Action.BLOCK:
            continue
        if filters.classify(pod, forced).action is filters.Action.BLOCK:
            continue  # force does not help (another refusal stands): it is a blocker, not forced
        out.append(ForcedPod(pod.key, unit_of(pod), "; ".join(refusals(pod, plain))))
    return out


def scope_guard(scope: ForceScope, plain: filters.DrainOptions) -> filters.PodFilter:
    """A filter that runs first in a forced drain: a Pod only force removes (the `plain` drain
    refuses it) and that the scope does not cover is refused, naming its unit and why, instead
    of being evicted without anyone having approved it."""

    def guard(pod: PodInfo, ctx: filters.DrainContext) -> filters.Verdict | None:
        unforced = replace(ctx, options=plain)
        if filters.classify(pod, unforced).action is not filters.Action.BLOCK:
            return None
        why = scope.outside(pod)
        if not why:
            return None
        refused = "; ".join(refusals(pod, unforced)) or "refused by a plain drain"
        return filters.Verdict(
            filters.Action.BLOCK,
            f"Pods outside the approved force scope ({why}; a plain drain refuses it: {refused}); "
            "request the run again to approve them",
        )

    return guard

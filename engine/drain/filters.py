"""Pod classification for a drain: which pods to evict, delete, skip, wait for, or refuse.

Owns the drain rules, each registered once in `RULES`: its filter (a small function turning a pod
into a `Verdict`) and, for a rule a flag or an approved force scope lifts, its `Override` (why a
plain drain refuses the pod, Cluster API's warning when it is evicted anyway, a cheap test of
whether the rule may refuse it). Also the option presets (`DrainOptions.kubectl()`,
`DrainOptions.machine()`) that select kubectl's or Cluster API's behaviour, and a pod measured
against a plain drain (`plain_drain`): which pods need force (`needing_force`) and the guard a forced
drain runs first (`scope_guard`). Used by the drain pass (`engine.drain.passes`), the plan preview
(`engine.planning.preflight`) and the forced runs of the operations.

Pure: no I/O, no clock. Everything a filter needs (the DaemonSets that exist, the unreachable nodes,
`now`) arrives in a `DrainContext`, fetched beforehand by the caller; kubectl's DaemonSet filter calls
the API from inside the filter, which is exactly what this module must never do.

Filter order (first verdict wins; `None` means "no opinion, ask the next filter"), mirroring
kubectl `pkg/drain/filters.go` `makeFilters` and Cluster API `drain.go` `GetPodsForEviction`:

    1. skip_deleted        SKIP   deletionTimestamp older than N s (kubectl and CAPI: first)
    2. daemonset_pods      SKIP / BLOCK (kubectl) or None for orphans under force
    3. mirror_pods         SKIP   static pods, even finished ones (kubectl skips them in every phase)
    4. local_storage_pods  BLOCK  emptyDir without delete_emptydir_data
    5. unreplicated_pods   BLOCK  no controller without force
    6. drain_label         SKIP / WAIT  `cluster.x-k8s.io/drain` (CAPI runs it after the kubectl filters)
    7. finished_pods       DELETE Succeeded/Failed
    8. opt_out_pods        BLOCK / WAIT  ecosystem "do not disrupt" annotations (scalebot)
    9. evict_in_order      EVICT  default, with the drain order and Cluster API's warnings

Why this order:
- A filter error (BLOCK) wins over the drain label: in kubectl an error stops the chain before any
  additional filter runs, so a bare pod labelled `drain=skip` still refuses the node without --force.
  With the `machine` preset those filters never block (force and delete-emptydir are on), so the label
  decides, as in Cluster API.
- Finished pods pass the DaemonSet, local-storage and unreplicated rules (each upstream filter starts
  with "any finished pod can be removed"), but not skip-deleted or mirror, which upstream apply in every
  phase, nor `drain=skip`, which Cluster API honours for them. They come before the opt-outs: the
  annotations protect running work, and a finished pod has none left.
- kubectl and Cluster API keep going after a warning ("deleting Pods with local storage"); here those
  filters return None and `evict_in_order` rebuilds the warnings, so a later filter (an opt-out, the
  drain label) can still change the outcome exactly as upstream's chain does.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engine.domain import model
from engine.domain.force_scope import ForcedPod, ForceScope, unit_of
from engine.domain.model import LabelSelector, PodInfo

# kubectl's texts for a refused pod (pkg/drain/filters.go). The drain pass reports them as
# "cannot delete <reason>", which is how kubectl prints them.
DAEMONSET_FATAL = "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
LOCAL_STORAGE_FATAL = "Pods with local storage (use --delete-emptydir-data to override)"
UNMANAGED_FATAL = "Pods that declare no controller (use --force to override)"

# Cluster API's texts for pods it skips or evicts with a warning (machine/drain/filters.go).
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pod"
DAEMONSET_ORPHANED_WARNING = "evicting orphaned DaemonSet-managed Pod"
LOCAL_STORAGE_WARNING = "evicting Pod with local storage"
UNMANAGED_WARNING = "evicting Pod that has no controller"

# No upstream tool prints a reason for these; kept short and in the same voice.
MIRROR_REASON = "ignoring static (mirror) Pod"
FINISHED_REASON = "deleting finished Pod"

UNREACHABLE_SKIP_WAIT_SECONDS = 1
"""Cluster API ignores pods terminating for more than 1 s on an unreachable node: the kubelet that
would finish them is gone, so waiting would never end."""

DAEMONSET_KIND = "DaemonSet"
ORDER_DEFAULT = 0
ORDER_CRITICAL = 1

# (annotation, value that opts the pod out), in the order their names appear in a BLOCK reason.
OPT_OUT_ANNOTATIONS: tuple[tuple[str, str], ...] = (
    (model.SAFE_TO_EVICT_ANNOTATION, "false"),
    (model.KARPENTER_DO_NOT_DISRUPT_ANNOTATION, "true"),
    (model.SCALEBOT_DO_NOT_DISRUPT_ANNOTATION, "true"),
)
_OPT_OUT_KEYS = frozenset(key for key, _ in OPT_OUT_ANNOTATIONS)


NOT_SELECTED_REASON = "not selected by --pod-selector"
EVICTION_DISABLED_REASON = "deleted, not evicted (--disable-eviction: PodDisruptionBudgets bypassed)"


class Action(enum.Enum):
    """What the drain does with a pod."""

    EVICT = "evict"
    """Through the eviction API, so PodDisruptionBudgets apply."""
    DELETE = "delete"
    """Finished pods: a plain DELETE. The eviction API would not consult PDBs for them anyway."""
    SKIP = "skip"
    """Leave it; it never holds the drain back."""
    BLOCK = "block"
    """kubectl would refuse the pod, and with it the whole node, until a flag overrides the rule."""
    WAIT = "wait"
    """Leave it running; the drain is not complete until it finishes (Cluster API's WaitCompleted)."""


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str = ""
    """Upstream-compatible text: kubectl's message for BLOCK, Cluster API's warning for EVICT."""
    order: int = ORDER_DEFAULT
    """Drain order: the lowest order present is evicted first, the rest wait ("later")."""


@dataclass(frozen=True)
class DrainOptions:
    force: bool = False
    """Evict pods without a controller, orphaned DaemonSet pods and opted-out pods (kubectl --force)."""
    ignore_daemonsets: bool = True
    """Leave live DaemonSet pods alone instead of refusing the node (kubectl --ignore-daemonsets)."""
    delete_emptydir_data: bool = True
    """Evict pods with emptyDir volumes, losing their data (kubectl --delete-emptydir-data)."""
    opt_outs_wait: bool = False
    """Phase 1 of a zero-scale: wait for opted-out pods to finish instead of refusing or evicting them."""
    evict_opt_outs: bool | None = None
    """Evict pods whose owners opted out of disruption; None follows `force` (kubectl --force).
    A machine drain forces bare pods but not opt-outs: only an explicit, approved force (or phase 2
    of a full zero-scale) removes those."""
    grace_period_seconds: int | None = None
    """Sent with each eviction; None uses the pod's own. Passed through, not used by the filters."""
    skip_wait_for_delete_timeout_seconds: int = 0
    """Ignore pods whose deletionTimestamp is older than this (kubectl --skip-wait-for-delete-timeout);
    0 waits for them however long they take."""
    pod_selector: LabelSelector | None = None
    """Only pods matching it are drained; the others stay and do not hold the drain (kubectl
    --pod-selector)."""
    disable_eviction: bool = False
    """Delete instead of evict, bypassing PodDisruptionBudgets (kubectl --disable-eviction): as
    disruptive as --force, and asked for like it."""

    @classmethod
    def kubectl(
        cls,
        *,
        force: bool = False,
        ignore_daemonsets: bool = False,
        delete_emptydir_data: bool = False,
        grace_period_seconds: int | None = None,
        skip_wait_for_delete_timeout_seconds: int = 0,
    ) -> DrainOptions:
        """`kubectl drain` with its defaults: every override flag off, as for a manual `/scale drain`."""
        return cls(
            force=force,
            ignore_daemonsets=ignore_daemonsets,
            delete_emptydir_data=delete_emptydir_data,
            grace_period_seconds=grace_period_seconds,
            skip_wait_for_delete_timeout_seconds=skip_wait_for_delete_timeout_seconds,
        )

    @classmethod
    def machine(
        cls,
        *,
        opt_outs_wait: bool = False,
        evict_opt_outs: bool = False,
        grace_period_seconds: int | None = None,
    ) -> DrainOptions:
        """Cluster API's machine drain: force, ignore DaemonSets and delete emptyDir data all on.

        Opted-out pods still block (as cluster-autoscaler and Karpenter honour them) unless
        `evict_opt_outs` says an approved force applies.
        """
        return cls(
            force=True,
            ignore_daemonsets=True,
            delete_emptydir_data=True,
            opt_outs_wait=opt_outs_wait,
            evict_opt_outs=evict_opt_outs,
            grace_period_seconds=grace_period_seconds,
        )


@dataclass(frozen=True)
class DrainContext:
    options: DrainOptions
    now: datetime
    daemonset_keys: frozenset[str]
    """`namespace/name` of the DaemonSets that exist, listed before classifying."""
    unreachable_nodes: frozenset[str] = frozenset()
    """Nodes whose Ready condition is Unknown."""


PodFilter = Callable[[PodInfo, DrainContext], Verdict | None]


def skip_deleted(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """A pod deleted long ago that is still listed will not go away by waiting; stop counting it.

    N is 1 s on an unreachable node (Cluster API), else the skip-wait option; 0 turns the rule off.
    Whole seconds, strictly greater, as upstream's `int(time.Since(ts).Seconds()) > N`.
    """
    if pod.deletion_timestamp is None:
        return None
    if pod.node_name in ctx.unreachable_nodes:
        timeout = UNREACHABLE_SKIP_WAIT_SECONDS
    else:
        timeout = ctx.options.skip_wait_for_delete_timeout_seconds
    if timeout <= 0 or int((ctx.now - pod.deletion_timestamp).total_seconds()) <= timeout:
        return None
    # kubectl's own words for this case (printed by its wait loop).
    reason = f'pod "{pod.name}" has DeletionTimestamp older than {timeout} seconds, skipping'
    return Verdict(Action.SKIP, reason)


def daemonset_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """The DaemonSet controller would recreate its pod on this node at once, so evicting it is pointless.

    An orphan (its DaemonSet is gone) would not come back: kubectl refuses it without --force, with
    the API's NotFound text; with force it is evicted like any other pod (warning added later).
    """
    if pod.controller is None or not pod.controller.is_daemonset or pod.is_finished:
        return None
    if _is_orphaned_daemonset_pod(pod, ctx):
        if ctx.options.force:
            return None
        return Verdict(Action.BLOCK, f'daemonsets.apps "{pod.controller.name}" not found')
    if not ctx.options.ignore_daemonsets:
        return Verdict(Action.BLOCK, DAEMONSET_FATAL)
    return Verdict(Action.SKIP, DAEMONSET_WARNING)


def mirror_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """Static pods belong to the kubelet; deleting the API mirror only makes the kubelet recreate it."""
    return Verdict(Action.SKIP, MIRROR_REASON) if pod.is_mirror else None


def local_storage_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """emptyDir data dies with the pod, so kubectl wants --delete-emptydir-data (Memory medium too)."""
    if not pod.has_empty_dir or pod.is_finished or ctx.options.delete_emptydir_data:
        return None
    return Verdict(Action.BLOCK, LOCAL_STORAGE_FATAL)


def unreplicated_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """Nothing recreates a pod without a controller: once evicted it is gone for good, hence --force."""
    if pod.controller is not None or pod.is_finished or ctx.options.force:
        return None
    return Verdict(Action.BLOCK, UNMANAGED_FATAL)


def drain_label(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """Cluster API's per-pod switch `cluster.x-k8s.io/drain`: `skip`, or `wait-completed`.

    Matched as Cluster API does: case-insensitive, and only the first '-' is optional
    ("WaitCompleted", "Wait-Completed"). Other values are ignored. A finished pod has already
    completed, so `wait-completed` has nothing left to wait for and it is deleted like any other
    (Cluster API would hold the drain until the pod object is garbage collected).
    """
    value = pod.labels.get(model.CAPI_DRAIN_LABEL)
    if value is None:
        return None
    reason = f"Skip evicting Pod, because Pod has {model.CAPI_DRAIN_LABEL} label with {value} value"
    if value.lower() == "skip":
        return Verdict(Action.SKIP, reason)
    if value.replace("-", "", 1).lower() == "waitcompleted" and not pod.is_finished:
        return Verdict(Action.WAIT, reason)
    return None


def finished_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """Succeeded and Failed pods hold no work: delete them, no flag and no budget needed."""
    return Verdict(Action.DELETE, FINISHED_REASON) if pod.is_finished else None


def opt_out_pods(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
    """Owners said "do not disrupt" through an autoscaler annotation; honour it like a kubectl rule.

    Refused without force; in phase 1 of a zero-scale (`opt_outs_wait`) left to finish instead.
    Beyond every upstream drain: kubectl and Cluster API ignore these annotations.
    """
    annotation = opt_out_annotation(pod)
    if annotation is None:
        return None
    if ctx.options.opt_outs_wait:
        return Verdict(Action.WAIT, f"waiting for completion: Pod annotated {annotation}")
    evict = ctx.options.force if ctx.options.evict_opt_outs is None else ctx.options.evict_opt_outs
    if not evict:
        return Verdict(Action.BLOCK, f"Pods annotated {annotation} (use --force to override)")
    return None


def evict_in_order(pod: PodInfo, ctx: DrainContext) -> Verdict:
    """Everything else is evicted; system-critical pods last, since the others may depend on them.

    The reason carries the warnings Cluster API would log, joined with ", " as it does.
    """
    order = ORDER_CRITICAL if pod.is_critical else ORDER_DEFAULT
    return Verdict(Action.EVICT, ", ".join(_eviction_warnings(pod, ctx)), order)


@dataclass(frozen=True, slots=True)
class Override:
    """How a rule's refusal is lifted: by a flag (kubectl's --force or --delete-emptydir-data, all on
    in Cluster API's machine drain) or, for a forced run, by an approved force scope."""

    refusal: Callable[[PodInfo], str]
    """Why the plain drain (`plain_drain`) refuses a pod this rule blocks, and what removing it
    costs: the phrase a forced run's plan, card and scope guard show."""
    warning: Callable[[PodInfo, DrainContext], str]
    """Cluster API's warning for a pod of this rule's kind evicted anyway ("" for another pod)."""
    may_refuse: Callable[[PodInfo, DrainOptions], bool]
    """A cheap necessary condition of this rule blocking the pod under `options` (no context
    needed): a forced plan classifies against the plain drain only the pods some rule may refuse."""


@dataclass(frozen=True, slots=True)
class DrainRule:
    """One drain rule, registered once in `RULES`: its filter and, when a flag or a force scope can
    lift its refusal, how (`Override`)."""

    check: PodFilter
    override: Override | None = None


def _orphan_refusal(pod: PodInfo) -> str:
    gone = pod.controller.name if pod.controller is not None else ""
    return f"orphaned DaemonSet Pod (DaemonSet {gone} is gone): nothing recreates it"


def _orphan_warning(pod: PodInfo, ctx: DrainContext) -> str:
    return DAEMONSET_ORPHANED_WARNING if _is_orphaned_daemonset_pod(pod, ctx) else ""


def _opt_out_refusal(pod: PodInfo) -> str:
    return f"annotated {opt_out_annotation(pod)}: its owner opted out of disruption"


def _opt_out_warning(pod: PodInfo, ctx: DrainContext) -> str:
    annotation = opt_out_annotation(pod)
    return "" if annotation is None else f"evicting Pod annotated {annotation}"


RULES: tuple[DrainRule, ...] = (
    DrainRule(skip_deleted),
    DrainRule(
        daemonset_pods,
        Override(
            refusal=_orphan_refusal,
            warning=_orphan_warning,
            may_refuse=lambda pod, options: pod.controller is not None and pod.controller.is_daemonset,
        ),
    ),
    DrainRule(mirror_pods),
    DrainRule(
        local_storage_pods,
        Override(
            refusal=lambda pod: "emptyDir local storage: its data is lost",
            warning=lambda pod, ctx: LOCAL_STORAGE_WARNING if pod.has_empty_dir else "",
            may_refuse=lambda pod, options: pod.has_empty_dir and not options.delete_emptydir_data,
        ),
    ),
    DrainRule(
        unreplicated_pods,
        Override(
            refusal=lambda pod: "bare Pod (no controller): nothing recreates it",
            warning=lambda pod, ctx: UNMANAGED_WARNING if pod.controller is None else "",
            may_refuse=lambda pod, options: pod.controller is None and not options.force,
        ),
    ),
    DrainRule(drain_label),
    DrainRule(finished_pods),
    DrainRule(
        opt_out_pods,
        Override(
            refusal=_opt_out_refusal,
            warning=_opt_out_warning,
            may_refuse=lambda pod, options: opt_out_annotation(pod) is not None,
        ),
    ),
    DrainRule(evict_in_order),
)
"""Every drain rule, in upstream order (see the module docstring for why each sits where it
does). A new rule is one filter function and its entry here."""

_FILTERS = tuple(rule.check for rule in RULES)
_OVERRIDDEN = tuple((rule.check, rule.override) for rule in RULES if rule.override is not None)
"""The rules a flag or a force scope lifts, with their `Override`, in chain order."""


def default_filters() -> tuple[PodFilter, ...]:
    """The chain in upstream order: the filter of each rule in `RULES`."""
    return _FILTERS


def classify(pod: PodInfo, ctx: DrainContext, filters: Sequence[PodFilter] | None = None) -> Verdict:
    """The first verdict in the chain; EVICT (with its order) if no filter has an opinion.

    kubectl applies --pod-selector to the pod listing, before every rule; --disable-eviction turns
    each eviction into a DELETE after them."""
    selector = ctx.options.pod_selector
    if selector is not None and not selector.matches(pod.labels):
        return Verdict(Action.SKIP, NOT_SELECTED_REASON)
    # A plain loop, not next() over a generator: a plan classifies every pod of the drained
    # nodes (30,000 at full size), and the generator's frame per pod was a fifth of it.
    verdict = None
    for pod_filter in default_filters() if filters is None else filters:
        verdict = pod_filter(pod, ctx)
        if verdict is not None:
            break
    if verdict is None:
        verdict = evict_in_order(pod, ctx)
    if ctx.options.disable_eviction and verdict.action is Action.EVICT:
        why = ", ".join(r for r in (verdict.reason, EVICTION_DISABLED_REASON) if r)
        return Verdict(Action.DELETE, why, verdict.order)
    return verdict


def classify_pods(
    pods: Iterable[PodInfo], ctx: DrainContext, filters: Sequence[PodFilter] | None = None
) -> list[tuple[PodInfo, Verdict]]:
    """Every pod with its verdict, sorted by `namespace/name` so passes and messages are deterministic."""
    return [(pod, classify(pod, ctx, filters)) for pod in sorted(pods, key=lambda p: p.key)]


def blocked_nodes(classified: Iterable[tuple[PodInfo, Verdict]]) -> frozenset[str]:
    """Nodes with a refused pod. kubectl drains a node all or nothing: none of its pods may be evicted."""
    return frozenset(pod.node_name for pod, verdict in classified if verdict.action is Action.BLOCK)


def _is_orphaned_daemonset_pod(pod: PodInfo, ctx: DrainContext) -> bool:
    """Controlled by a DaemonSet that no longer exists (deleted with `--cascade=orphan`)."""
    ref = pod.controller
    if ref is None or not ref.is_daemonset:
        return False
    return f"{pod.namespace}/{ref.name}" not in ctx.daemonset_keys


def opt_out_annotation(pod: PodInfo) -> str | None:
    """`key=value` of the first opt-out annotation the pod carries, for the reason text."""
    if _OPT_OUT_KEYS.isdisjoint(pod.annotations):  # most pods: one set operation, asked 3x a pod
        return None
    for key, value in OPT_OUT_ANNOTATIONS:
        if pod.annotations.get(key) == value:
            return f"{key}={value}"
    return None


def _eviction_warnings(pod: PodInfo, ctx: DrainContext) -> list[str]:
    """Cluster API's warnings for a pod it evicts anyway, in its filter order."""
    if pod.is_finished:
        return []  # upstream's filters all pass finished pods without a word
    return [warning for _, override in _OVERRIDDEN if (warning := override.warning(pod, ctx))]


# --------------------------------------------------------------------------------------------------
# A pod measured against a plain drain: what a forced run removes, and the guard it runs first so
# that a pod only force removes is refused unless the approved force scope
# (`engine.domain.force_scope`) covers it.


def plain_drain(*, opt_outs_wait: bool = False) -> DrainOptions:
    """The plain drain a forced run is measured against: `/scale drain NODE` without --force
    (kubectl drain --ignore-daemonsets --delete-emptydir-data). `opt_outs_wait`: phase 1 of a
    full zero-scale, where opted-out Pods wait for phase 2 instead of being refused."""
    plain = DrainOptions.kubectl(ignore_daemonsets=True, delete_emptydir_data=True)
    return replace(plain, opt_outs_wait=opt_outs_wait)


_PLAIN = plain_drain()


def refusals(pod: PodInfo, plain: DrainContext) -> list[str]:
    """Why a plain drain (options in `plain`) refuses `pod`, one phrase per rule; [] when it does not."""
    reasons = []
    for check, override in _OVERRIDDEN:
        verdict = check(pod, plain)
        if verdict is not None and verdict.action is Action.BLOCK:
            reasons.append(override.refusal(pod))
    return reasons


def may_refuse(pod: PodInfo) -> bool:
    """False when the plain drain (`plain_drain`) cannot refuse `pod`: no rule's `may_refuse` holds
    (today: it has a controller that is not a DaemonSet and no opt-out annotation; the plain drain
    deletes emptyDir data). Only the other Pods need classifying against it; at 30,000 Pods that is
    a few."""
    return any(override.may_refuse(pod, _PLAIN) for _, override in _OVERRIDDEN)


def needing_force(pods: Iterable[PodInfo], plain: DrainContext, forced: DrainContext) -> list[ForcedPod]:
    """The Pods the plain drain refuses and the forced one removes, with why each needs force."""
    out = []
    for pod in pods:
        if classify(pod, plain).action is not Action.BLOCK:
            continue
        if classify(pod, forced).action is Action.BLOCK:
            continue  # force does not help (another refusal stands): it is a blocker, not forced
        out.append(ForcedPod(pod.key, unit_of(pod), "; ".join(refusals(pod, plain))))
    return out


def scope_guard(scope: ForceScope, plain: DrainOptions) -> PodFilter:
    """A filter that runs first in a forced drain: a Pod only force removes (the `plain` drain
    refuses it) and that the scope does not cover is refused, naming its unit and why, instead
    of being evicted without anyone having approved it."""

    def guard(pod: PodInfo, ctx: DrainContext) -> Verdict | None:
        unforced = replace(ctx, options=plain)
        if classify(pod, unforced).action is not Action.BLOCK:
            return None
        why = scope.outside(pod)
        if not why:
            return None
        refused = "; ".join(refusals(pod, unforced)) or "refused by a plain drain"
        return Verdict(
            Action.BLOCK,
            f"Pods outside the approved force scope ({why}; a plain drain refuses it: {refused}); "
            "request the run again to approve them",
        )

    return guard

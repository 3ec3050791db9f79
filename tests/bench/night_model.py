"""The anchors of the realistic night, as models: kube-downscaler's loop plus cluster-autoscaler
(its defaults, and tuned), or plus Karpenter's empty-node consolidation.

What teams run today without scalebot: kube-downscaler (or kube-green) scales the workloads to zero
when its loop finds the clock inside the downtime window, and cluster-autoscaler (or Karpenter)
removes the nodes once they are empty; in the morning the downscaler restores the replicas, the
pods go Pending and the autoscaler asks the cloud for nodes. The downscaler half is run for real by
the benchmark (`tests.bench.downscaler`, pinned to one release); the autoscalers cannot be built
into this harness at full size, so their half is this model: a pure function of their defaults
(each parameter below names its flag or field) and of named cloud assumptions. Every phase says
whether it was measured, follows from a flag, or is assumed.

cluster-autoscaler (kubernetes/autoscaler cluster-autoscaler/config/flags/flags.go and
config/const.go, the loop in loop/trigger.go, scale-down budgets in
core/scaledown/budgets/budgets.go, FAQ.md; release 1.35 and later):

  --scan-interval 10s                  how often the cluster is re-evaluated when nothing happens
  --frequent-loops-enabled true        (default since 1.35) after a productive loop (it scaled up
                                       or deleted nodes) the next one starts at once; otherwise
                                       it waits --scan-interval, or until a pod turns unschedulable
  --scale-down-unneeded-time 10m       how long a node must be unneeded before it may be removed
  --scale-down-delay-after-add 10m     no scale-down evaluation this long after a scale-up
  --scale-down-delay-after-delete 0s   no wait after a deletion (the FAQ's "defaults to
                                       scan-interval" is stale)
  --max-scale-down-parallelism 10      nodes deleted in parallel; deletions still in flight count
                                       against it (`DeletionsInProgress`). --max-empty-bulk-delete,
                                       which it replaced, is gone from flags.go (1.33)
  --node-delete-delay-after-taint 5s   wait between tainting an empty node and deleting it
  --max-node-provision-time 15m        how long CA waits for a requested node to register
  --parallel-scale-up false            one node group scaled up per loop
  --new-pod-scale-up-delay 0s          pods are considered for scale-up at once

  The tuned column sets --scale-down-unneeded-time 1m and --max-scale-down-parallelism 100.

Karpenter (kubernetes-sigs/karpenter v1.14.1: pkg/apis/v1/nodepool.go,
pkg/controllers/disruption/controller.go, emptiness.go, consolidation.go, validation.go):

  consolidateAfter 0s                  the CRD's default: an empty node is a candidate at once
  budgets [{nodes: 10%}]               the default budget, per NodePool, rounded up; nodes being
                                       disrupted count against it until they are gone
  disruption polling 10s               `pollingPeriod`: the loop's wait when it did nothing
  command validation 15s               `commandValidationDelay`: an emptiness command is checked
                                       again after 15 s before it is carried out
  provisioning batch 1s idle / 10s max `BATCH_IDLE_DURATION` / `BATCH_MAX_DURATION`

kube-downscaler (caas-team/py-kube-downscaler v26.4.0 kube_downscaler/cmd.py):

  --interval 30                        its loop interval in seconds
  --max-retries-on-conflict 0          an update that meets a conflict waits for the next cycle
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Source = Literal["measured", "flag", "assumption"]


@dataclass(frozen=True)
class DownscalerDefaults:
    interval_seconds: float = 30.0
    """kube-downscaler's `--interval`: the loop acts at its first tick inside (or after) the window."""


@dataclass(frozen=True)
class AutoscalerDefaults:
    """cluster-autoscaler's flags (1.35 and later), and how long one loop takes."""

    scan_interval: float = 10.0
    scale_down_unneeded_time: float = 600.0
    scale_down_delay_after_add: float = 600.0
    scale_down_delay_after_delete: float = 0.0
    max_scale_down_parallelism: int = 10
    node_delete_delay_after_taint: float = 5.0
    max_node_provision_time: float = 900.0
    parallel_scale_up: bool = False
    frequent_loops: bool = True
    loop_seconds: float = 2.0
    """An assumption: one loop (list, simulate, act) takes 1-3 s at this size; the middle is taken."""


TUNED_CA = AutoscalerDefaults(scale_down_unneeded_time=60.0, max_scale_down_parallelism=100)
"""cluster-autoscaler as a team tunes it for nights: --scale-down-unneeded-time 1m,
--max-scale-down-parallelism 100, the rest at its defaults."""


@dataclass(frozen=True)
class KarpenterDefaults:
    """Karpenter v1.14.1's empty-node consolidation and provisioning, at their defaults."""

    consolidate_after: float = 0.0
    budget_percent: float = 10.0
    polling_period: float = 10.0
    validation_delay: float = 15.0
    batch_idle_seconds: float = 1.0


@dataclass(frozen=True)
class CloudAssumptions:
    """What no flag says: the cloud's own times. Both are assumptions, named in the report, and
    apply to scalebot's pools as much as to cluster-autoscaler's node groups."""

    delete_call_seconds: float = 2.0
    """A node-group delete call (e.g. one TerminateInstanceInAutoScalingGroup) until it returns."""
    node_gone_seconds: float = 60.0
    """From the delete call to the instance stopped and its Node object removed."""
    provision_seconds: float = 180.0
    """From the scale-up request to a Ready node pods can be scheduled on: the FAQ says "on GCE it
    usually takes 3 to 4 minutes from CA request to when pods can be scheduled on newly created
    nodes"; the low end is taken (favourable to the anchor)."""


@dataclass(frozen=True)
class Anchor:
    """The anchor's settings: the tools' defaults, the cloud's assumed times, and whether every
    periodic loop is just missed (`worst`) or waited for half an interval (typical)."""

    downscaler: DownscalerDefaults = DownscalerDefaults()
    ca: AutoscalerDefaults = AutoscalerDefaults()
    karpenter: KarpenterDefaults = KarpenterDefaults()
    cloud: CloudAssumptions = CloudAssumptions()
    worst: bool = False


@dataclass(frozen=True)
class Measured:
    """What the real downscaler run measured for one half of the night."""

    cycle_seconds: float
    """Its cycles' time in all (listing and updating every workload)."""
    after_cycle_seconds: float
    """From the last cycle's end until every workload pod was gone (night) or every workload
    Available (morning, on nodes that were there)."""
    cycles: int = 1
    """Cycles run: more than one when updates met a conflict and waited for the next tick."""


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    source: Source
    why: str


@dataclass(frozen=True)
class Timeline:
    phases: tuple[Phase, ...]

    @property
    def total(self) -> float:
        return sum(p.seconds for p in self.phases)

    def of(self, source: Source) -> float:
        return sum(p.seconds for p in self.phases if p.source == source)


def _tick_wait(interval: float, worst: bool) -> float:
    """The wait until a periodic loop next runs after an event at a random moment: half the
    interval on average, the whole of it at worst."""
    return interval if worst else interval / 2.0


def deletion_batches(nodes: int, ca: AutoscalerDefaults) -> int:
    return max(1, math.ceil(nodes / max(1, ca.max_scale_down_parallelism)))


def batch_period(ca: AutoscalerDefaults, cloud: CloudAssumptions) -> float:
    """Seconds between the starts of two deletion batches.

    A batch in flight (the taint delay and the delete call) holds its places in
    `--max-scale-down-parallelism` until it returns, and `--scale-down-delay-after-delete` must
    have passed. With frequent loops the loop after a productive one starts at once; one that
    finds no place free deletes nothing, so the next waits `--scan-interval`. Without them a
    plain ticker runs a loop every `--scan-interval`."""
    needed = max(
        ca.scale_down_delay_after_delete, ca.node_delete_delay_after_taint + cloud.delete_call_seconds
    )
    if not ca.frequent_loops:
        return max(ca.scan_interval, needed)
    start = ca.loop_seconds  # the loop right after the productive one
    while start < needed:
        start += ca.loop_seconds + ca.scan_interval  # an idle loop, then the wait
    return start


def _ca_wait(ca: AutoscalerDefaults, worst: bool, *, unschedulable: bool = False) -> float:
    """The wait until cluster-autoscaler's next loop looks: a pod turning unschedulable starts one
    at once with frequent loops (after the loop under way); else the scan interval's tick."""
    if unschedulable and ca.frequent_loops:
        return _tick_wait(ca.loop_seconds, worst)
    return _tick_wait(ca.scan_interval, worst)


def _next_tick(downscaler: DownscalerDefaults, worst: bool) -> Phase:
    return Phase(
        "kube-downscaler's next loop",
        _tick_wait(downscaler.interval_seconds, worst),
        "flag",
        f"--interval {downscaler.interval_seconds:g}s: {'a whole' if worst else 'half an'} interval",
    )


def _retries(cycles: int, downscaler: DownscalerDefaults) -> Phase:
    """Updates that met a conflict wait for the loop's next tick (`--max-retries-on-conflict` 0)."""
    return Phase(
        f"kube-downscaler's retries: {max(0, cycles - 1)} more cycle(s) for conflicting updates",
        max(0, cycles - 1) * downscaler.interval_seconds,
        "flag",
        f"--interval {downscaler.interval_seconds:g}s each, --max-retries-on-conflict 0",
    )


def night(*, nodes: int, measured: Measured, anchor: Anchor = Anchor()) -> Timeline:
    """From the start of the downtime window to the last node gone.

    The measured inputs come from the real downscaler run: its cycle (listing and patching every
    workload) and the time until the last workload pod was gone (nodes then hold DaemonSet pods
    only, which cluster-autoscaler treats as empty). No scale-up is assumed in the ten minutes
    before (`--scale-down-delay-after-add` would add to the wait otherwise)."""
    downscaler, ca, cloud = anchor.downscaler, anchor.ca, anchor.cloud
    batches = deletion_batches(nodes, ca)
    period = batch_period(ca, cloud)
    return Timeline(
        (
            _next_tick(downscaler, anchor.worst),
            Phase(
                "kube-downscaler's cycle (list, patch every workload)", measured.cycle_seconds, "measured", ""
            ),
            _retries(measured.cycles, downscaler),
            Phase("until the last workload pod is gone", measured.after_cycle_seconds, "measured", ""),
            Phase(
                "cluster-autoscaler's next loop finds the nodes unneeded",
                _ca_wait(ca, anchor.worst),
                "flag",
                f"--scan-interval {ca.scan_interval:g}s",
            ),
            Phase(
                "nodes unneeded long enough",
                ca.scale_down_unneeded_time,
                "flag",
                f"--scale-down-unneeded-time {ca.scale_down_unneeded_time:g}s",
            ),
            Phase(
                f"{batches} deletion batch(es) of {ca.max_scale_down_parallelism}, one per {period:g} s",
                (batches - 1) * period,
                "flag",
                f"--max-scale-down-parallelism {ca.max_scale_down_parallelism} (in-flight deletions count), "
                f"--scale-down-delay-after-delete {ca.scale_down_delay_after_delete:g}s, "
                + (
                    f"frequent loops ({ca.loop_seconds:g} s a loop, assumed; an idle loop waits "
                    f"--scan-interval {ca.scan_interval:g}s)"
                    if ca.frequent_loops
                    else f"--scan-interval {ca.scan_interval:g}s"
                ),
            ),
            Phase(
                "the last batch: taint, then delete",
                ca.node_delete_delay_after_taint + cloud.delete_call_seconds,
                "flag",
                f"--node-delete-delay-after-taint {ca.node_delete_delay_after_taint:g}s "
                f"+ delete call {cloud.delete_call_seconds:g}s (assumed)",
            ),
            Phase("instances stopped, Node objects gone", cloud.node_gone_seconds, "assumption", "cloud"),
        )
    )


def morning(*, pools: int, measured: Measured, anchor: Anchor = Anchor()) -> Timeline:
    """From the end of the downtime window to every workload Available again.

    Measured inputs (the real downscaler run): its restore cycle, and the time from its end until
    every workload was Available with nodes present (scheduling and starting the pods). Modelled:
    the pods go Pending, cluster-autoscaler's next scan asks for nodes, one node group per loop
    (`--parallel-scale-up` false; the benchmark pins each workload to its pool, so every pool is a
    node group of its own to grow), and the cloud provisions them."""
    downscaler, ca, cloud = anchor.downscaler, anchor.ca, anchor.cloud
    groups = max(1, pools)
    loops = 1 if ca.parallel_scale_up else groups
    return Timeline(
        (
            _next_tick(downscaler, anchor.worst),
            Phase("kube-downscaler's restore cycle", measured.cycle_seconds, "measured", ""),
            _retries(measured.cycles, downscaler),
            Phase(
                "cluster-autoscaler's next loop sees the Pending pods",
                _ca_wait(ca, anchor.worst, unschedulable=True),
                "flag",
                (
                    "frequent loops: an unschedulable pod starts a loop at once (after the one under way)"
                    if ca.frequent_loops
                    else f"--scan-interval {ca.scan_interval:g}s"
                )
                + ", --new-pod-scale-up-delay 0s",
            ),
            Phase(
                f"{groups} node group(s) scaled up, one per loop",
                (loops - 1) * (ca.loop_seconds if ca.frequent_loops else ca.scan_interval),
                "flag",
                f"--parallel-scale-up {'true' if ca.parallel_scale_up else 'false'}, "
                + (
                    f"a productive loop starts the next at once ({ca.loop_seconds:g} s a loop, assumed)"
                    if ca.frequent_loops
                    else f"one loop per --scan-interval {ca.scan_interval:g}s"
                ),
            ),
            Phase(
                "the cloud provisions the last group's nodes",
                min(cloud.provision_seconds, ca.max_node_provision_time),
                "assumption",
                f"FAQ: 3-4 min on GCE; capped by --max-node-provision-time {ca.max_node_provision_time:g}s",
            ),
            Phase(
                "pods scheduled and started, every workload Available",
                measured.after_cycle_seconds,
                "measured",
                "",
            ),
        )
    )


def karpenter_rounds(nodes: int, pools: int, karpenter: KarpenterDefaults) -> int:
    """Emptiness rounds to remove `nodes` spread evenly over `pools` NodePools: each round takes
    the budget's share of every pool (rounded up), in parallel over the pools."""
    per_pool = max(1, math.ceil(nodes / max(1, pools)))
    allowed = max(1, math.ceil(per_pool * karpenter.budget_percent / 100.0))
    return math.ceil(per_pool / allowed)


def karpenter_round_period(karpenter: KarpenterDefaults, cloud: CloudAssumptions) -> float:
    """Seconds between two emptiness rounds: the command's validation wait, then the loop finds
    the budget taken by the nodes still terminating (delete call, instance gone) and polls again
    until they are gone."""
    terminating = cloud.delete_call_seconds + cloud.node_gone_seconds
    return karpenter.validation_delay + karpenter.polling_period * math.ceil(
        terminating / karpenter.polling_period
    )


def karpenter_night(*, nodes: int, pools: int, measured: Measured, anchor: Anchor = Anchor()) -> Timeline:
    """From the start of the downtime window to the last node gone, Karpenter removing the empty
    nodes (consolidation policy WhenEmpty or WhenEmptyOrUnderutilized: emptiness comes first)."""
    downscaler, karpenter, cloud = anchor.downscaler, anchor.karpenter, anchor.cloud
    rounds = karpenter_rounds(nodes, pools, karpenter)
    period = karpenter_round_period(karpenter, cloud)
    return Timeline(
        (
            _next_tick(downscaler, anchor.worst),
            Phase(
                "kube-downscaler's cycle (list, patch every workload)", measured.cycle_seconds, "measured", ""
            ),
            _retries(measured.cycles, downscaler),
            Phase("until the last workload pod is gone", measured.after_cycle_seconds, "measured", ""),
            Phase(
                "Karpenter's next disruption loop, consolidateAfter",
                _tick_wait(karpenter.polling_period, anchor.worst) + karpenter.consolidate_after,
                "flag",
                f"polling {karpenter.polling_period:g}s, consolidateAfter {karpenter.consolidate_after:g}s",
            ),
            Phase(
                f"{rounds} emptiness round(s) of {karpenter.budget_percent:g} % of each NodePool, "
                f"one per {period:g} s",
                (rounds - 1) * period,
                "flag",
                f"budget nodes {karpenter.budget_percent:g}% (terminating nodes count), validation "
                f"{karpenter.validation_delay:g}s, polling {karpenter.polling_period:g}s; termination "
                f"{cloud.delete_call_seconds + cloud.node_gone_seconds:g} s (assumed)",
            ),
            Phase(
                "the last round: validation, then delete",
                karpenter.validation_delay + cloud.delete_call_seconds,
                "flag",
                f"validation {karpenter.validation_delay:g}s "
                f"+ delete call {cloud.delete_call_seconds:g}s (assumed)",
            ),
            Phase("instances stopped, Node objects gone", cloud.node_gone_seconds, "assumption", "cloud"),
        )
    )


def karpenter_morning(*, measured: Measured, anchor: Anchor = Anchor()) -> Timeline:
    """From the end of the downtime window to every workload Available again, Karpenter
    provisioning for the Pending pods: one batch for every pool, closed a second after the last."""
    downscaler, karpenter, cloud = anchor.downscaler, anchor.karpenter, anchor.cloud
    return Timeline(
        (
            _next_tick(downscaler, anchor.worst),
            Phase("kube-downscaler's restore cycle", measured.cycle_seconds, "measured", ""),
            _retries(measured.cycles, downscaler),
            Phase(
                "Karpenter's batch of Pending pods closes",
                karpenter.batch_idle_seconds,
                "flag",
                f"BATCH_IDLE_DURATION {karpenter.batch_idle_seconds:g}s after the last Pending pod",
            ),
            Phase(
                "the cloud provisions the nodes (every pool at once)",
                cloud.provision_seconds,
                "assumption",
                "FAQ: 3-4 min on GCE (the same assumption as cluster-autoscaler's)",
            ),
            Phase(
                "pods scheduled and started, every workload Available",
                measured.after_cycle_seconds,
                "measured",
                "",
            ),
        )
    )


def scalebot_in_the_cloud(
    *, zero_nodes_seconds: float, available_seconds: float, cloud: CloudAssumptions = CloudAssumptions()
) -> tuple[float, float]:
    """scalebot's measured night and morning with the same cloud assumptions added: on the local
    control plane a deleted Node is gone at once and a re-created one is Ready in about a second,
    so the instances' stop and the provisioning are added (the provisioning once: every pool is
    resized in the same step). Kept apart from the measured figures in the report."""
    return zero_nodes_seconds + cloud.node_gone_seconds, available_seconds + cloud.provision_seconds

"""The anchor of the realistic night, as a model: kube-downscaler's loop plus cluster-autoscaler.

What teams run today without scalebot: kube-downscaler (or kube-green) scales the workloads to zero
when its loop finds the clock inside the downtime window, and cluster-autoscaler removes the nodes
once they are empty; in the morning the downscaler restores the replicas, the pods go Pending and
cluster-autoscaler asks the cloud for nodes. The downscaler half is run for real by the benchmark
(`tests.bench.downscaler`); cluster-autoscaler cannot be built here, so its half is this model: a
pure function of its documented defaults (each parameter below names its flag) and of two named
cloud assumptions. Every phase says whether it was measured, follows from a flag, or is assumed.

Sources of the defaults (kubernetes/autoscaler cluster-autoscaler/FAQ.md, "What are the parameters
to CA?", "How does scale-down work?", "How does scale-up work?", "How fast is HPA when combined
with CA?", and the flag definitions in cluster-autoscaler's main.go / config flags;
py-kube-downscaler kube_downscaler/cmd.py):

  --scan-interval 10s                  how often the cluster is re-evaluated for scale up or down
  --scale-down-unneeded-time 10m       how long a node must be unneeded before it may be removed
  --scale-down-delay-after-add 10m     no scale-down evaluation this long after a scale-up
  --scale-down-delay-after-delete      defaults to --scan-interval
  --max-empty-bulk-delete 10           empty nodes deleted at the same time (deprecated for:)
  --max-scale-down-parallelism 10      nodes (empty or drained) deleted in parallel
  --node-delete-delay-after-taint 5s   wait between tainting a node and deleting it
  --max-node-provision-time 15m        how long CA waits for a requested node to register
  --parallel-scale-up false            one node group scaled up per loop
  --new-pod-scale-up-delay 0s          pods are considered for scale-up at once
  kube-downscaler --interval 30        its loop interval in seconds (py-kube-downscaler's default;
                                       the original hjacobs/kube-downscaler documented 300 s, its
                                       later chart 60 s: 30 s is the most favourable to the anchor)
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
    scan_interval: float = 10.0
    scale_down_unneeded_time: float = 600.0
    scale_down_delay_after_add: float = 600.0
    scale_down_delay_after_delete: float | None = None
    """None: the scan interval (cluster-autoscaler's own default)."""
    max_scale_down_parallelism: int = 10
    """Also `--max-empty-bulk-delete`'s default (10), the flag it replaces."""
    node_delete_delay_after_taint: float = 5.0
    max_node_provision_time: float = 900.0
    parallel_scale_up: bool = False


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
    """Seconds between the starts of two deletion batches: the next scale-down evaluation waits
    `--scale-down-delay-after-delete` and the next loop; a batch in flight (taint delay and the delete
    call) holds its places in `--max-scale-down-parallelism` until it returns."""
    after_delete = (
        ca.scan_interval if ca.scale_down_delay_after_delete is None else ca.scale_down_delay_after_delete
    )
    return max(ca.scan_interval, after_delete, ca.node_delete_delay_after_taint + cloud.delete_call_seconds)


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
                "cluster-autoscaler's next scan finds the nodes unneeded",
                _tick_wait(ca.scan_interval, anchor.worst),
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
                f"--max-scale-down-parallelism {ca.max_scale_down_parallelism}, "
                "--scale-down-delay-after-delete = --scan-interval",
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
                "cluster-autoscaler's next scan sees the Pending pods",
                _tick_wait(ca.scan_interval, anchor.worst),
                "flag",
                f"--scan-interval {ca.scan_interval:g}s, --new-pod-scale-up-delay 0s",
            ),
            Phase(
                f"{groups} node group(s) scaled up, one per loop",
                (loops - 1) * ca.scan_interval,
                "flag",
                f"--parallel-scale-up {'true' if ca.parallel_scale_up else 'false'}",
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


def scalebot_in_the_cloud(
    *, zero_nodes_seconds: float, available_seconds: float, cloud: CloudAssumptions = CloudAssumptions()
) -> tuple[float, float]:
    """scalebot's measured night and morning with the same cloud assumptions added: on the local
    control plane a deleted Node is gone at once and a re-created one is Ready in about a second,
    so the instances' stop and the provisioning are added (the provisioning once: every pool is
    resized in the same step). Kept apart from the measured figures in the report."""
    return zero_nodes_seconds + cloud.node_gone_seconds, available_seconds + cloud.provision_seconds

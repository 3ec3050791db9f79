"""Which steps an operation goes through, in which order: the runner's transition table.

Pure. Each operation follows one flow, chosen once from its kind, target and plan (so a resumed
operation follows the same flow from its persisted step). A step never names the step after it:
it ends with NEXT (the following step of its flow), an outcome named in the flow's `jumps`, or
nothing (the same step again, after a wait). `engine.operations.steps` holds the steps (`STEPS`, by
name) and `engine.operations.runner` applies this table.

    sleep_workloads: workloads_sleep → record → cordon → workloads_leave → drain → force → remove
                     → verify
    shrink:          record → cordon → drain → force → remove → verify
    grow:            (resize → wait_ready)* → workloads_wake → workloads_return → finish
                     (one resize and wait per wave of pools: `engine.domain.wake_waves`)
    wake_workloads:  workloads_wake → workloads_return → finish
    drain:           cordon → drain
    consolidate:     fit → cordon → drain → remove_node → consolidated  (node by node)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from engine.domain.operation import Operation, OpKind

NEXT: Final = "next"
"""A step's outcome: go on with the following step of the flow."""

FEED_STEPS: Final = frozenset({"workloads_leave", "drain"})
"""The steps that read the drained nodes' pods from the operation's pod feed: it stays open (one
watch) from one to the next, and closes as the operation leaves them."""

Outcome = Literal[
    "next",
    "drained",  # every node is drained: skip phase 2 (shrink) / remove the node (consolidate)
    "nodes_joined",  # nodes joined a pool going to zero: cordon and drain them too
    "nothing_to_shrink",  # the workloads slept and no pool goes down
    "no_workloads",  # the nodes are Ready and no workload is asleep
    "node_skipped",  # the next node's pods no longer fit elsewhere: try the one after
    "all_nodes_done",  # every planned node was removed or skipped
    "node_removed",  # the drained node is gone: fit the next one
    "next_wave",  # a wave of a wake is Ready (or timed out): resize the next wave's pools
]
FlowName = Literal["sleep_workloads", "shrink", "grow", "wake_workloads", "drain", "consolidate"]


@dataclass(frozen=True, slots=True)
class Flow:
    steps: tuple[str, ...]
    """The order: NEXT from one step is the step after it; the first is where an operation starts."""
    jumps: Mapping[tuple[str, Outcome], str] = field(default_factory=dict)
    """(step, outcome) → the step it leads to."""

    def after(self, step: str, outcome: Outcome) -> str:
        if outcome == NEXT:
            return self.steps[self.steps.index(step) + 1]
        return self.jumps[(step, outcome)]


_SHRINK_JUMPS: Mapping[tuple[str, Outcome], str] = {
    ("drain", "drained"): "remove",
    ("remove", "nodes_joined"): "cordon",
}

FLOWS: Mapping[FlowName, Flow] = {
    "sleep_workloads": Flow(
        ("workloads_sleep", "record", "cordon", "workloads_leave", "drain", "force", "remove", "verify"),
        {**_SHRINK_JUMPS, ("workloads_sleep", "nothing_to_shrink"): "verify"},
    ),
    "shrink": Flow(("record", "cordon", "drain", "force", "remove", "verify"), _SHRINK_JUMPS),
    "grow": Flow(
        ("resize", "wait_ready", "workloads_wake", "workloads_return", "finish"),
        {("wait_ready", "no_workloads"): "workloads_return", ("wait_ready", "next_wave"): "resize"},
    ),
    "wake_workloads": Flow(("workloads_wake", "workloads_return", "finish")),
    "drain": Flow(("cordon", "drain")),
    "consolidate": Flow(
        ("fit", "cordon", "drain", "remove_node", "consolidated"),
        {
            ("fit", "node_skipped"): "fit",
            ("fit", "all_nodes_done"): "consolidated",
            ("drain", "drained"): "remove_node",
            ("remove_node", "node_removed"): "fit",
        },
    ),
}


def flow_name(op: Operation) -> FlowName:
    """The flow an operation follows, from what does not change while it runs."""
    if op.kind is OpKind.CONSOLIDATE:
        return "consolidate"
    if op.kind is OpKind.DRAIN:
        return "drain"
    if op.kind is not OpKind.WAKE and (op.target.workloads_only or op.target.workloads):
        return "sleep_workloads"
    if op.kind is OpKind.WAKE and op.target.workloads_only:
        return "wake_workloads"
    if op.kind is OpKind.WAKE or all(p.after >= p.before for p in op.plan.pools):
        return "grow" if op.plan.pools else "wake_workloads"
    return "shrink"


def flow_of(op: Operation) -> Flow:
    return FLOWS[flow_name(op)]


def first_step(op: Operation) -> str:
    return flow_of(op).steps[0]


def step_after(op: Operation, step: str, outcome: Outcome | None) -> str:
    """The step an operation runs after `step` ended with `outcome` (None: the same step again)."""
    return step if outcome is None else flow_of(op).after(step, outcome)

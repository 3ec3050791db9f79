"""The steps of the operations' flows, one module per kind of step, and the table naming them.

`engine.operations.flows` says which step follows which; this package says what each step does;
`engine.operations.runner` persists each step's result and applies the flow. A step reaches the
runner only through the parts of `context.StepContext` it declares (never its workers, claims or
locks; of the store only the `SleepRecords` and `AuditTrail` ports), acts through the cluster's
fenced ports, and is safe to repeat (a crash re-runs it from its persisted progress).

    restore       record (the sizes wake comes back to), and when they are cleared
    cordon_drain  cordon, drain (phase 1), and giving the nodes back when an operation stops
    force         force (phase 2 of a full zero-scale, within the approved force scope)
    removal       remove, verify
    wake          resize, wait_ready (in waves), finish
    workloads     workloads_sleep, workloads_leave, workloads_wake, workloads_return
    consolidate   fit, remove_node, consolidated
    report        the summary and final line an operation ends with (shared, pure)
    context       StepContext and its parts (Basics, WithSleepRecords, WithAuditTrail, WithPodFeed,
                  WithEvictions, WithScaleDownRules), StepResult, ClusterHandle

It must not import the runner or the service: they sit above it (import-linter enforces it).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.operations.steps.consolidate import step_consolidated, step_fit, step_remove_node
from engine.operations.steps.context import Step
from engine.operations.steps.cordon_drain import step_cordon, step_drain
from engine.operations.steps.force import step_force
from engine.operations.steps.removal import step_remove, step_verify
from engine.operations.steps.restore import step_record
from engine.operations.steps.wake import step_finish, step_resize, step_wait_ready
from engine.operations.steps.workloads import (
    step_workloads_leave,
    step_workloads_return,
    step_workloads_sleep,
    step_workloads_wake,
)

STEPS: Mapping[str, Step] = {
    "fit": step_fit,
    "remove_node": step_remove_node,
    "consolidated": step_consolidated,
    "record": step_record,
    "cordon": step_cordon,
    "drain": step_drain,
    "force": step_force,
    "remove": step_remove,
    "verify": step_verify,
    "resize": step_resize,
    "wait_ready": step_wait_ready,
    "workloads_sleep": step_workloads_sleep,
    "workloads_leave": step_workloads_leave,
    "workloads_wake": step_workloads_wake,
    "workloads_return": step_workloads_return,
    "finish": step_finish,
}
"""Each step of `engine.operations.flows.FLOWS` by name: what the runner calls for it."""

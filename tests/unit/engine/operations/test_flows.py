"""engine.operations.flows: the runner's transition table.

Covers: every step of every flow is a step the runner has, and every step it has is in a flow;
the step each kind of operation starts with; every transition a step can ask for, as the steps
named them before the table existed (so an operation saved mid-flow resumes on the same path).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.domain.operation import Operation, OperationPlan, OpKind, OpState, PoolChange, Target
from engine.operations import flows, steps
from engine.operations.flows import NEXT

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def op(kind: OpKind, *pools: PoolChange, workloads: bool = False, workloads_only: bool = False) -> Operation:
    return Operation(
        id="op-1",
        kind=kind,
        target=Target(cluster="dev", workloads=workloads, workloads_only=workloads_only),
        state=OpState.RUNNING,
        requested_by="cli:alice",
        created_at=T0,
        updated_at=T0,
        plan=OperationPlan(kind=kind, cluster="dev", pools=pools),
    )


DOWN = PoolChange("web", 3, 0, ("web-0", "web-1", "web-2"))
UP = PoolChange("web", 0, 3)


def test_the_flows_name_exactly_the_runners_steps() -> None:
    named = {step for flow in flows.FLOWS.values() for step in flow.steps}
    assert named == set(steps.STEPS)
    for name, flow in flows.FLOWS.items():
        assert len(set(flow.steps)) == len(flow.steps), name
        for (step, _), to in flow.jumps.items():
            assert step in flow.steps and to in flow.steps, (name, step, to)


@pytest.mark.parametrize(
    ("operation", "first"),
    [
        (op(OpKind.ZERO, DOWN), "record"),
        (op(OpKind.SCALE, PoolChange("web", 3, 1, ("web-2", "web-1"))), "record"),
        (op(OpKind.ZERO, DOWN, workloads=True), "workloads_sleep"),
        (op(OpKind.ZERO, workloads_only=True), "workloads_sleep"),
        (op(OpKind.WAKE, UP), "resize"),
        (op(OpKind.WAKE, UP, workloads_only=True), "workloads_wake"),
        (op(OpKind.WAKE), "workloads_wake"),
        (op(OpKind.SCALE, PoolChange("web", 1, 3)), "resize"),
        (op(OpKind.DRAIN), "cordon"),
        (op(OpKind.CONSOLIDATE, DOWN), "fit"),
    ],
)
def test_where_each_kind_of_operation_starts(operation: Operation, first: str) -> None:
    assert flows.first_step(operation) == first


@pytest.mark.parametrize(
    ("operation", "step", "outcome", "to"),
    [
        (op(OpKind.ZERO, DOWN, workloads=True), "workloads_sleep", NEXT, "record"),
        (op(OpKind.ZERO, workloads_only=True), "workloads_sleep", "nothing_to_shrink", "verify"),
        (op(OpKind.ZERO, DOWN), "record", NEXT, "cordon"),
        (op(OpKind.ZERO, DOWN), "cordon", NEXT, "drain"),
        (op(OpKind.ZERO, DOWN, workloads=True), "cordon", NEXT, "workloads_leave"),
        (op(OpKind.ZERO, DOWN, workloads=True), "workloads_leave", NEXT, "drain"),
        (op(OpKind.ZERO, DOWN, workloads=True), "workloads_leave", None, "workloads_leave"),
        (op(OpKind.ZERO, DOWN), "drain", NEXT, "force"),
        (op(OpKind.ZERO, DOWN), "drain", "drained", "remove"),
        (op(OpKind.ZERO, DOWN), "drain", None, "drain"),
        (op(OpKind.ZERO, DOWN), "force", NEXT, "remove"),
        (op(OpKind.ZERO, DOWN), "remove", NEXT, "verify"),
        (op(OpKind.ZERO, DOWN), "remove", "nodes_joined", "cordon"),
        (op(OpKind.ZERO, DOWN, workloads=True), "remove", "nodes_joined", "cordon"),
        (op(OpKind.WAKE, UP), "resize", NEXT, "wait_ready"),
        (op(OpKind.WAKE, UP), "wait_ready", NEXT, "workloads_wake"),
        (op(OpKind.WAKE, UP), "wait_ready", "no_workloads", "workloads_return"),
        (op(OpKind.WAKE, UP), "workloads_wake", NEXT, "workloads_return"),
        (op(OpKind.WAKE, UP), "workloads_return", NEXT, "finish"),
        (op(OpKind.WAKE), "workloads_wake", NEXT, "workloads_return"),
        (op(OpKind.DRAIN), "cordon", NEXT, "drain"),
        (op(OpKind.CONSOLIDATE, DOWN), "fit", NEXT, "cordon"),
        (op(OpKind.CONSOLIDATE, DOWN), "fit", "node_skipped", "fit"),
        (op(OpKind.CONSOLIDATE, DOWN), "fit", "all_nodes_done", "consolidated"),
        (op(OpKind.CONSOLIDATE, DOWN), "cordon", NEXT, "drain"),
        (op(OpKind.CONSOLIDATE, DOWN), "drain", "drained", "remove_node"),
        (op(OpKind.CONSOLIDATE, DOWN), "remove_node", "node_removed", "fit"),
    ],
)
def test_each_transition_leads_where_the_steps_used_to_lead(
    operation: Operation, step: str, outcome: flows.Outcome | None, to: str
) -> None:
    assert flows.step_after(operation, step, outcome) == to


def test_an_outcome_the_flow_does_not_know_is_an_error() -> None:
    with pytest.raises(KeyError):
        flows.step_after(op(OpKind.DRAIN), "drain", "drained")

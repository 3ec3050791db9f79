"""No dead ends in a schedule: a scheduled sleep whose plan already needs force (engine.schedules
.service with engine.schedules.core.force), on the real Operations, runner and SQLite, virtual time.

A scheduled zero of some pools that a do-not-disrupt Pod holds used to be announced, approved and
then fail in 0 s every night. Now the announcement says so ahead (each Pod, its owner, its pool,
why) and offers the choices; without one the sleep does not start (and says why) instead of
failing; an approver's "Approve with force" runs it forced with exactly the scope shown; leaving
the pool out runs the others; a standing force scope set by an approver covers the nights it
names, and a target change voids it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

import pytest

from engine.domain.clock import FakeClock
from engine.domain.operation import OpState
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.core.model import ScheduleTarget
from tests.unit.engine.domain.test_force_scope import pinned
from tests.unit.engine.schedules import test_schedules
from tests.unit.engine.schedules.test_schedules import (
    APPROVER,
    APPROVER2,
    OPERATOR,
    VIEWER,
    World,
    add,
    at,
    ops_by,
    utc,
)

if TYPE_CHECKING:
    from engine.domain.announcement import ForceNotice

clock, cluster, world = test_schedules.clock, test_schedules.cluster, test_schedules.world
"""The schedule tests' fixtures: pools web (web-0..2) and batch (batch-0..1) of dev-eu."""

KEY = "nights:2026-03-02:sleep"
PIN = "ReplicaSet/shop/pin"


@pytest.fixture
def pools(cluster: FakeCluster) -> SimulatedPoolProvider:
    """The schedule tests' cluster, plus a pool `gpu` the schedule leaves awake (so zeroing web and
    batch is not a full zero-scale: nothing reaches phase 2) and a Pod of ReplicaSet shop/pin,
    whose owner opted out of disruption, on web-1."""
    cluster.add_node("gpu-0", labels={"scalebot.io/pool": "gpu"})
    pinned(cluster, "pin-1", "web-1")
    return SimulatedPoolProvider(cluster)


def nights(world: World) -> None:
    out = add(world.schedules, target=ScheduleTarget.zero_pools("web", "batch"))
    assert out.ok, out.reply


def announced(world: World, clock: FakeClock) -> ForceNotice:
    nights(world)
    [outcome] = world.schedules.run_due(at(clock, utc(2, 18)))
    note = outcome.announcement
    assert note is not None and note.upcoming is not None
    notice: ForceNotice | None = getattr(note.upcoming, "force", None)
    assert notice is not None, "the announcement says the run needs force"
    return notice


def fire(world: World, clock: FakeClock, when: datetime | None = None) -> None:
    outcomes = world.schedules.run_due(at(clock, when or utc(2, 19)))
    assert [o.key for o in outcomes] == [KEY]


def test_a_scheduled_zero_with_a_do_not_disrupt_pod_is_announced_with_the_choice_not_run_to_a_certain_failure(
    world: World, clock: FakeClock, cluster: FakeCluster
) -> None:
    notice = announced(world, clock)
    [pod] = notice.pods
    assert (pod.pod, pod.owner, pod.pool) == ("shop/pin-1", PIN, "web")
    assert "karpenter.sh/do-not-disrupt" in pod.reason
    assert notice.unresolved and notice.excludable == ("web",) and notice.approved_by == ()

    [outcome] = world.schedules.run_due(at(clock, utc(2, 19)))

    assert not outcome.ok and outcome.operation is None
    assert ops_by(world) == [], "no operation is started only to fail"
    assert f"no approved force scope covers {PIN}" in outcome.reply
    assert "shop/pin-1 (owner ReplicaSet/shop/pin)" in outcome.reply
    assert f"schedule force nights --force-scope={PIN}" in outcome.reply
    row = world.schedules.store.get_occurrence(KEY)
    assert row is not None and row.state == "missed"
    assert cluster.get_pod("shop", "pin-1") is not None
    assert [n.name for n in cluster.list_nodes() if n.unschedulable] == [], "nothing was cordoned"


def test_approving_force_for_the_run_lets_it_run_with_exactly_that_scope(
    world: World, clock: FakeClock, cluster: FakeCluster
) -> None:
    notice = announced(world, clock)
    own = world.schedules.approve_force(KEY, notice.digest, by=APPROVER)  # the schedule's creator
    assert not own.ok and "you cannot approve force for a schedule you created" in own.reply
    operator = world.schedules.approve_force(KEY, notice.digest, by=OPERATOR)
    assert not operator.ok and "needs the approver role on dev-eu" in operator.reply
    stale = world.schedules.approve_force(KEY, "0123456789abcdef", by=APPROVER2)
    assert not stale.ok and "the force scope has changed since that card was shown" in stale.reply

    approved = world.schedules.approve_force(KEY, notice.digest, by=APPROVER2)

    assert approved.ok, approved.reply
    after = approved.announcement.upcoming.force  # type: ignore[union-attr]
    assert after is not None and after.approved_by == (APPROVER2,) and not after.unresolved
    fire(world, clock)
    [op] = ops_by(world)
    assert op.target.force and op.target.pools == ("batch", "web")
    assert op.plan.forcing == ("force",)
    assert op.plan.force_scope is not None and op.plan.force_scope.units == (PIN,)
    assert op.state is OpState.RUNNING and op.approvals_required == 0, "its force approver stands in"
    world.settle()
    assert world.ops.get(op.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
    assert cluster.get_pod("shop", "pin-1") is None, "the approved owner's Pod was evicted"
    actions = [(r.actor, r.action) for r in world.ops.store.audit_rows()]
    assert (APPROVER2, "schedule_force_approve") in actions
    assert (APPROVER, "refused_schedule_force_approve") in actions


def test_leaving_the_pool_out_runs_the_others(world: World, clock: FakeClock, cluster: FakeCluster) -> None:
    announced(world, clock)
    viewer = world.schedules.exclude_pool(KEY, "web", by=VIEWER)
    assert not viewer.ok and "needs the operator role" in viewer.reply
    other = world.schedules.exclude_pool(KEY, "gpu", by=OPERATOR)
    assert not other.ok and "the pools offered are web" in other.reply

    left_out = world.schedules.exclude_pool(KEY, "web", by=OPERATOR)

    assert left_out.ok, left_out.reply
    after = left_out.announcement.upcoming.force  # type: ignore[union-attr]
    assert after is not None and after.excluded == ("web",) and not after.unresolved
    fire(world, clock)
    [op] = ops_by(world)
    assert op.target.pools == ("batch",) and not op.target.force and op.plan.forcing == ()
    world.settle()
    assert world.ops.get(op.id).state is OpState.SUCCEEDED  # type: ignore[union-attr]
    assert cluster.get_pod("shop", "pin-1") is not None, "the left-out pool's Pod stays"


def test_a_standing_force_scope_is_set_by_an_approver_and_voided_by_a_target_change(
    world: World, clock: FakeClock
) -> None:
    nights(world)
    own = world.schedules.set_force_scope("nights", PIN, by=APPROVER)
    assert not own.ok and "you cannot approve force for a schedule you created" in own.reply
    bad = world.schedules.set_force_scope("nights", "pin", by=APPROVER2)
    assert not bad.ok and "is not an owner: write Kind/namespace/name" in bad.reply
    narrow = world.schedules.set_force_scope("nights", "Pod/shop/other", by=APPROVER2)
    assert narrow.ok, narrow.reply
    [outcome] = world.schedules.run_due(at(clock, utc(2, 18)))
    assert outcome.announcement.upcoming.force.unresolved  # type: ignore[union-attr]

    assert world.schedules.set_force_scope("nights", PIN, by=APPROVER2).ok
    shown = world.schedules.show("nights")
    assert shown is not None and shown.force_units == (PIN,) and shown.force_by == (APPROVER2,)
    fire(world, clock)
    [op] = ops_by(world)
    assert op.plan.force_scope is not None and op.plan.force_scope.units == (PIN,)

    # The same schedule acting on other pools: its standing scope no longer binds.
    with world.schedules.store.transaction():
        world.schedules.store.db.table("schedules").update(
            "nights", {"target": '{"kind": "pools", "pools": ["web"], "size": null}'}
        )
    voided = world.schedules.show("nights")
    assert voided is not None and voided.force_units == () and voided.force_by == ()


def test_a_force_approver_demoted_before_the_run_no_longer_stands_in_for_its_approval(
    world: World, clock: FakeClock
) -> None:
    notice = announced(world, clock)
    assert world.schedules.approve_force(KEY, notice.digest, by=APPROVER2).ok
    rules = world.ops.policies["dev-eu"]
    world.ops.policies["dev-eu"] = replace(rules, users={**rules.users, APPROVER2: policy.Role.OPERATOR})
    [reminder] = world.schedules.run_due(at(clock, utc(2, 18, 50)))
    again = getattr(reminder.announcement.upcoming, "force", None)  # type: ignore[union-attr]
    assert again is not None and again.approved_by == () and again.unresolved, "the card no longer claims it"

    fire(world, clock)

    [op] = ops_by(world)
    assert op.state is OpState.AWAITING_APPROVAL and op.approvals_required == 1
    assert op.plan.forcing == ("force",) and op.plan.force_scope is not None
    assert op.plan.force_scope.units == (PIN,), "the card asks for exactly the approved scope"

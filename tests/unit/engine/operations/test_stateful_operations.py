"""A stateful property test: random nights over the real Operations, runner, schedules and SQLite.

Hypothesis drives requests, approvals, rejections, cancels, schedule firings, hand cordons, pod
and node churn, process restarts (the store reopened, running operations resumed, also after a
crash right after a request), Slack going down and API errors, against the in-memory cluster and
virtual time. The schedule follows a calendar of days off (Tuesday the 3rd and Thursday the 5th
stay asleep), so the nights meet holidays in between. After every step the invariants below must
hold. The examples are bounded with a fixed seed (derandomized) in CI, 25 examples of 12 steps; the
soak raises it (`SCALEBOT_STATEFUL_EXAMPLES`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.domain.clock import FakeClock
from engine.domain.force_scope import ForceScope
from engine.domain.model import DRAINING_TAINT_KEY, PdbIndex, PodInfo
from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube import errors
from engine.kube.fake import FakeCluster
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.operations.steps.cordon_drain import drained_nodes
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.calendars import Calendars, load_calendar
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store

CLUSTER = "dev"
OPERATOR, APPROVER, APPROVER2 = "U0OPER", "U0APPR", "U0APPR2"
START = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)  # a Monday
POOLS = {"web": 3, "batch": 2}
NODES = [f"{pool}-{i}" for pool, n in POOLS.items() for i in range(n)]
EXAMPLES = int(os.environ.get("SCALEBOT_STATEFUL_EXAMPLES", "25"))
STEPS = int(os.environ.get("SCALEBOT_STATEFUL_STEPS", "12"))
LIVE = (OpState.AWAITING_APPROVAL, OpState.RUNNING)
DAYS_OFF = ("2026-03-03", "2026-03-05")
FREEZE_ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//team//freeze//EN
BEGIN:VEVENT
UID:tue@team
DTSTAMP:20260101T000000Z
SUMMARY:Freeze
DTSTART;VALUE=DATE:20260303
END:VEVENT
BEGIN:VEVENT
UID:thu@team
DTSTAMP:20260101T000000Z
SUMMARY:Offsite
DTSTART;VALUE=DATE:20260305
END:VEVENT
END:VCALENDAR
"""


class WatchedCluster(FakeCluster):
    """The in-memory cluster, remembering every force delete (grace 0) scalebot sent."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(now=clock.now)
        self.force_deleted: list[PodInfo] = []

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        super().delete_pod(pod, grace_seconds=grace_seconds)
        if grace_seconds == 0:
            self.force_deleted.append(pod)

    def by_hand_delete(self, pod: PodInfo) -> None:
        FakeCluster.delete_pod(self, pod)


class Nights(RuleBasedStateMachine):
    """One scalebot process at a time over one SQLite file and one cluster that outlives it."""

    @initialize()
    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="scalebot-stateful-"))
        self.clock = FakeClock(START)
        self.cluster = WatchedCluster(self.clock)
        for node in NODES:
            self.cluster.add_node(node, labels={"scalebot.io/pool": node.rsplit("-", 1)[0]})
            self.cluster.add_pod(
                "shop",
                f"{node}-app",
                node=node,
                controller_kind="ReplicaSet",
                controller_name="app",
                grace=10,
            )
        # A budget that never allows an eviction: drains of its node wait, fail at their timeout
        # and give the node back; a whole-cluster zero force-deletes its pod in phase 2.
        self.cluster.add_pdb("shop", "guarded", match_labels={"app": "guarded"}, disruptions_allowed=0)
        self.cluster.add_pod(
            "shop",
            "guarded-0",
            node="web-0",
            controller_kind="ReplicaSet",
            controller_name="guarded",
            labels={"app": "guarded"},
        )
        self.pools = SimulatedPoolProvider(self.cluster)
        self.cancel_next_drain = False
        self.newcomer_during_drain = False
        self.finals: Counter[str] = Counter()
        self.recorded: dict[str, int] = {}
        """Pool → the size its last successful zero-scale recorded (what a wake restores)."""
        self.slack_down = False
        self.pods = 0
        self.ops = self._process(run=True)
        ics = self.dir / "freeze.ics"
        ics.write_text(FREEZE_ICS)
        self.calendars = Calendars({"freeze": load_calendar("freeze", ics, around=START.year)})
        self.schedules = Schedules(self.ops.store, self.ops, self.clock, calendars=self.calendars)
        out = self.schedules.add(
            name="nights",
            cluster=CLUSTER,
            target=ScheduleTarget.whole_cluster(),
            sleep="Mon-Fri 20:00",
            wake="Mon-Fri 07:00",
            tz="Europe/Berlin",
            lead_times="10m",
            channel="C0DEV",
            approval_mode="pre_approved",
            calendar="freeze",
            by=APPROVER,
        )
        assert out.ok, out
        assert self.schedules.pre_approve("nights", by=APPROVER2).ok

    def _process(self, *, run: bool) -> Operations:
        rules = policy.ClusterPolicy(
            cluster=CLUSTER,
            users={
                OPERATOR: policy.Role.OPERATOR,
                APPROVER: policy.Role.APPROVER,
                APPROVER2: policy.Role.APPROVER,
            },
        )
        handle = ClusterHandle(name=CLUSTER, api=self.cluster, pools=self.pools)
        ops = new_operations(
            Store(self.dir / "scalebot.db"),
            {CLUSTER: handle},
            {CLUSTER: rules},
            self.clock,
            settings=RunnerSettings(
                workers=2,
                parallel_evictions=4,
                graceful_window=timedelta(minutes=1),
                drain_timeout=timedelta(minutes=2),
                workloads_return_timeout=timedelta(0),
            ),
        )
        if not run:  # a crash right after a request: saved as running, nothing executes
            ops.runner.start = lambda op_id, **_: None  # type: ignore[method-assign]
        ops.subscribe(self._record)
        ops.subscribe(self._slack)
        ops.subscribe(self._midway)
        return ops

    def _record(self, event: ProgressEvent) -> None:
        if event.final:
            self.finals[event.operation.id] += 1
            op = event.operation
            if op.state is OpState.SUCCEEDED and op.kind is OpKind.ZERO:
                self.recorded |= {c.pool: c.before for c in op.plan.pools if c.before > 0}

    def _midway(self, event: ProgressEvent) -> None:
        """While a drain is under way (from the runner's own thread): someone presses Cancel, or a
        pod the approval did not cover lands on a node being drained."""
        op = event.operation
        if op.step != "drain" or op.state is not OpState.RUNNING:
            return
        if self.cancel_next_drain:
            self.cancel_next_drain = False
            self.ops.cancel(op.id, by=OPERATOR)
        if self.newcomer_during_drain and drained_nodes(op):
            self.newcomer_during_drain = False
            self.pod_churn(drained_nodes(op)[0], add=True, guarded=True)

    def _slack(self, event: ProgressEvent) -> None:
        if self.slack_down:
            raise ConnectionError("Slack does not answer")

    def _settle(self) -> None:
        assert self.ops.runner.wait_idle(30), "operations did not finish"

    def _ops(self, *states: OpState) -> list[Operation]:
        return self.ops.store.list_operations(states=list(states), limit=1000)

    def teardown(self) -> None:
        if hasattr(self, "ops"):
            self.ops.runner.stop()
            self.ops.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- what people and the cluster do ----------------------------------------------------------

    @rule(
        kind=st.sampled_from([OpKind.ZERO, OpKind.SCALE, OpKind.WAKE, OpKind.DRAIN, None]),
        pool=st.sampled_from(list(POOLS)),
        size=st.integers(0, 4),
        node=st.sampled_from(NODES),
    )
    def request(self, kind: OpKind | None, pool: str, size: int, node: str) -> None:
        """None: a zero-scale of the whole cluster (a force phase, within the scope it is approved with)."""
        target = {
            None: Target(cluster=CLUSTER),
            OpKind.ZERO: Target(cluster=CLUSTER, pools=(pool,)),
            OpKind.SCALE: Target(cluster=CLUSTER, pools=(pool,), size=size),
            OpKind.WAKE: Target(cluster=CLUSTER),
            OpKind.DRAIN: Target(cluster=CLUSTER, nodes=(node,)),
        }[kind]
        # A failed planning call is answered at once and starts nothing (the caller says so).
        with contextlib.suppress(errors.KubeError):
            self.ops.request(OperationRequest(kind=kind or OpKind.ZERO, target=target, requested_by=OPERATOR))
        self._settle()

    @precondition(lambda self: bool(self._ops(OpState.AWAITING_APPROVAL)))
    @rule(data=st.data(), approve=st.booleans(), newcomer=st.booleans())
    def decide(self, data: st.DataObject, approve: bool, newcomer: bool) -> None:
        """Approve or reject; `newcomer`: a guarded pod appears on its nodes while it drains."""
        op = data.draw(st.sampled_from(self._ops(OpState.AWAITING_APPROVAL)))
        assert op.approval_id
        self.newcomer_during_drain = newcomer
        if approve:
            self.ops.approve(op.approval_id, by=APPROVER)
        else:
            self.ops.reject(op.approval_id, by=APPROVER, reason="not tonight")
        self._settle()

    @rule(pool=st.sampled_from(list(POOLS)))
    def zero_then_wake(self, pool: str) -> None:
        """A pool zero-scaled (approved at once) and woken again."""
        with contextlib.suppress(errors.KubeError):
            out = self.ops.request(
                OperationRequest(
                    kind=OpKind.ZERO, target=Target(cluster=CLUSTER, pools=(pool,)), requested_by=OPERATOR
                )
            )
            if out.operation is not None and out.operation.approval_id:
                self.ops.approve(out.operation.approval_id, by=APPROVER)
            self._settle()
            self.ops.request(
                OperationRequest(kind=OpKind.WAKE, target=Target(cluster=CLUSTER), requested_by=OPERATOR)
            )
        self._settle()

    @rule(node=st.sampled_from(NODES))
    def cancel_a_running_drain(self, node: str) -> None:
        self.cancel_next_drain = True
        with contextlib.suppress(errors.KubeError):
            self.ops.request(
                OperationRequest(
                    kind=OpKind.DRAIN, target=Target(cluster=CLUSTER, nodes=(node,)), requested_by=OPERATOR
                )
            )
        self._settle()
        self.cancel_next_drain = False

    @precondition(lambda self: bool(self._ops(*LIVE)))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(self._ops(*LIVE)))
        self.ops.cancel(op.id, by=OPERATOR)
        self._settle()

    @rule()
    def fire_schedule(self) -> None:
        """Time moves on to the schedule's next event (an announcement, the sleep or the wake)."""
        [upcoming, *_] = self.schedules.next_wakeups(self.clock.now())
        self.clock.advance(max(0.0, (upcoming - self.clock.now()).total_seconds()))
        # A fire whose planning call failed raises to the timer's catch-all
        # (bot/runtime/apscheduler_timer.py).
        with contextlib.suppress(errors.KubeError):
            self.schedules.run_due(self.clock.now())
        self._settle()

    @rule(node=st.sampled_from(NODES), cordoned=st.booleans())
    def hand_cordon(self, node: str, cordoned: bool) -> None:
        # A person's kubectl meets the injected API errors too; they retry later.
        if any(n.name == node for n in self.cluster.list_nodes()):
            with contextlib.suppress(errors.KubeError):
                self.cluster.set_unschedulable(node, cordoned)

    @rule(node=st.sampled_from(NODES), ready=st.booleans())
    def node_churn(self, node: str, ready: bool) -> None:
        if any(n.name == node for n in self.cluster.list_nodes()):
            self.cluster.set_node_ready(node, "True" if ready else "False")

    @rule(node=st.sampled_from(NODES), add=st.booleans(), guarded=st.booleans())
    def pod_churn(self, node: str, add: bool, guarded: bool) -> None:
        if add and any(n.name == node for n in self.cluster.list_nodes()):
            self.pods += 1
            app = "guarded" if guarded else "extra"
            self.cluster.add_pod(
                "shop",
                f"{app}-{self.pods}",
                node=node,
                controller_kind="ReplicaSet",
                # Each guarded pod its own controller: one added after a plan is outside its force scope.
                controller_name=f"{app}-{self.pods}" if guarded else app,
                labels={"app": app},
            )
        elif not add:
            pods = [p for p in self.cluster.all_pods() if p.node_name == node and not p.is_terminating]
            if pods:
                with contextlib.suppress(errors.KubeError):
                    self.cluster.by_hand_delete(pods[0])

    @rule(verb=st.sampled_from([("create", "pods/eviction"), ("patch", "nodes"), ("list", "pods")]))
    def api_error(self, verb: tuple[str, str]) -> None:
        self.cluster.fail_next(
            verb[0], errors.ServerError(status=500, message="etcd leader changed"), resource=verb[1]
        )

    @rule(down=st.booleans())
    def slack(self, down: bool) -> None:
        self.slack_down = down

    @rule(crash_after_request=st.booleans(), pool=st.sampled_from(list(POOLS)))
    def restart(self, crash_after_request: bool, pool: str) -> None:
        """The process stops (or crashes right after saving a request); the next one resumes."""
        if crash_after_request:
            self.ops.runner.stop()
            self.ops.store.close()
            crashed = self._process(run=False)
            with contextlib.suppress(errors.KubeError):
                crashed.request(
                    OperationRequest(
                        kind=OpKind.SCALE,
                        target=Target(cluster=CLUSTER, pools=(pool,), size=1),
                        requested_by=APPROVER,
                    )
                )
            self.ops = crashed
        self.ops.runner.stop()
        self.ops.store.close()
        self.ops = self._process(run=True)
        self.schedules = Schedules(self.ops.store, self.ops, self.clock, calendars=self.calendars)
        self.ops.resume()
        self._settle()

    # -- what must always hold -------------------------------------------------------------------

    @invariant()
    def nothing_runs_on_a_day_off(self) -> None:
        """Through restarts, missed runs and API errors, no sleep or wake of a day off ever ran."""
        if not hasattr(self, "ops"):
            return
        ran = self.ops.store.list_occurrences(schedule="nights", states=("running", "done", "missed"))
        assert not [r.key for r in ran if r.local_date in DAYS_OFF]

    @invariant()
    def marked_nodes_belong_to_a_live_drain_or_were_released(self) -> None:
        if not hasattr(self, "ops"):
            return
        # Held: a running operation's nodes; a finished drain's (its result is cordoned nodes); a
        # phase 2 stopped for pods outside its force scope (it leaves them cordoned, on purpose,
        # for the person who decides: re-request or uncordon, engine.operations.steps.force._outside_scope).
        holders = {
            n
            for op in self.ops.store.list_operations(limit=1000)
            if op.state is OpState.RUNNING
            or (op.state is OpState.SUCCEEDED and op.kind is OpKind.DRAIN)
            or (op.state is OpState.FAILED and op.step == "force" and "the nodes stay cordoned" in op.error)
            for n in drained_nodes(op)
        }
        marked = {
            n.name for n in self.cluster.list_nodes() if any(t.key == DRAINING_TAINT_KEY for t in n.taints)
        }
        assert marked <= holders, f"scalebot's taint left on {sorted(marked - holders)} by no live operation"

    @invariant()
    def every_lock_has_a_live_owner(self) -> None:
        if not hasattr(self, "ops"):
            return
        live = {op.id for op in self._ops(*LIVE)}
        owners = {row["op_id"] for row in self.ops.store.db.table("locks").rows}
        assert owners <= live, f"locks held by finished operations: {sorted(owners - live)}"

    @invariant()
    def force_deletes_only_in_an_approved_force_scope(self) -> None:
        if not hasattr(self, "ops"):
            return
        approved = [
            op
            for op in self.ops.store.list_operations(limit=1000)
            if op.plan.force_phase and op.state not in (OpState.AWAITING_APPROVAL, OpState.REJECTED)
        ]
        pdbs = PdbIndex(self.cluster.list_pdbs())

        def in_scope(pod: PodInfo, op: Operation) -> bool:
            scope = op.plan.force_scope or ForceScope()
            covered = pod.is_finished or not scope.outside(pod, [b.key for b in pdbs.for_pod(pod)])
            return covered and pod.node_name in drained_nodes(op)

        outside = [p.key for p in self.cluster.force_deleted if not any(in_scope(p, op) for op in approved)]
        assert not outside, f"force-deleted outside an approved force scope: {outside}"

    @invariant()
    def a_woken_pool_is_back_at_its_recorded_size(self) -> None:
        if not hasattr(self, "ops"):
            return
        for op in self._ops(OpState.SUCCEEDED):
            if (
                op.kind is not OpKind.WAKE
                or self.finals[op.id] == 0
                or getattr(self, "_checked", set()) >= {op.id}
            ):
                continue
            for change in op.plan.pools:
                if change.pool in self.recorded:
                    assert change.after == self.recorded[change.pool], (change, self.recorded)
                    size = len(self.pools.get_pool(change.pool).nodes)
                    assert size == self.recorded[change.pool], f"pool {change.pool} woke to {size} nodes"
            self._checked = getattr(self, "_checked", set()) | {op.id}

    @invariant()
    def each_finished_operation_has_its_final_message_once(self) -> None:
        if not hasattr(self, "ops"):
            return
        assert all(n == 1 for n in self.finals.values()), {k: n for k, n in self.finals.items() if n != 1}
        for op in self._ops(OpState.SUCCEEDED, OpState.FAILED):
            assert self.finals[op.id] == 1, (
                f"{op.id} ({op.kind.value}, {op.state.value}) ended without its final"
            )

    @invariant()
    def the_audit_chain_verifies(self) -> None:
        if not hasattr(self, "ops"):
            return
        _rows, problems = self.ops.store.verify_audit()
        assert not problems, problems


Nights.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    phases=[Phase.explicit, Phase.generate]
    + ([Phase.shrink] if os.environ.get("SCALEBOT_STATEFUL_SHRINK") else []),
)
TestNights = Nights.TestCase


def test_an_announcement_whose_planning_call_fails_still_goes_out() -> None:
    """Found by the state machine: one API error while an announcement listed the cluster made
    `run_due` raise, so the announcement (and anything due after it) was not handled."""
    machine = Nights()
    try:
        machine.start()
        machine.api_error(("list", "pods"))
        [upcoming, *_] = machine.schedules.next_wakeups(machine.clock.now())
        machine.clock.advance((upcoming - machine.clock.now()).total_seconds())
        [announced] = machine.schedules.run_due(machine.clock.now())
        assert announced.ok and announced.announcement is not None
        upcoming_sleep = announced.announcement.upcoming
        assert upcoming_sleep is not None
        assert (
            upcoming_sleep.summary
            == "cannot plan it now (the Kubernetes API server answered: etcd leader changed)"
        )
    finally:
        machine.teardown()


def test_a_pod_landing_during_a_full_zero_outside_its_force_scope_is_not_forced() -> None:
    """The force-scope invariant's own scenario, pinned: a guarded pod lands on a node while the
    approved whole-cluster zero drains it; phase 2 stops for it instead of force-deleting it."""
    machine = Nights()
    try:
        machine.start()
        machine.request(None, "web", 0, "web-0")
        [op] = machine._ops(OpState.AWAITING_APPROVAL)
        assert op.plan.force_phase and op.approval_id
        machine.newcomer_during_drain = True
        assert machine.ops.approve(op.approval_id, by=APPROVER).ok
        machine._settle()
        done = machine.ops.get(op.id)
        assert done is not None and done.state is OpState.FAILED
        assert "outside the approved force scope: shop/guarded-1" in done.error
        assert [p.key for p in machine.cluster.force_deleted] == [], "phase 2 stopped before any force delete"
        machine.force_deletes_only_in_an_approved_force_scope()
    finally:
        machine.teardown()

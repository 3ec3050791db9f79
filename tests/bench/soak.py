"""`python -m tests.bench.soak`: a randomized soak of scalebot on the real local control plane.

    python -m tests.bench.soak [--minutes 10] [--seed 1] [--work-dir DIR]

A benchmark-tier run, not part of the test suite. It starts its own control plane
(`localcluster`), builds two kwok label pools (`web` 3 nodes, `batch` 2) running Deployments
pinned to them, one pod under a PodDisruptionBudget that never allows an eviction, and runs the
real `Operations`, runner and SQLite in this process as scalebot's ServiceAccount. Then, until the
time is up, seeded random steps: zero-scales of a pool or the whole cluster (approved, or rejected),
wakes, drains of a node, cancels while a drain runs, process restarts in the middle of an operation
(the runner stopped, the store reopened, the operations resumed), kube-apiserver killed and started
again under a running operation, Slack down (every delivery raises), hand cordons and uncordons.

After every step, once no operation runs, the invariants of the stateful test
(tests/unit/engine/operations/test_stateful_operations.py) are checked against the real cluster:
- scalebot's draining taint is only on nodes of a live operation (or of a phase 2 stopped for pods
  outside its force scope, which leaves them cordoned on purpose);
- no node is cordoned that no live operation, succeeded drain or person cordoned;
- every lock has a live owner; no operation is left running without a runner (none lost), and every
  operation requested is stored;
- no pod was force-deleted (grace 0) outside an approved force scope;
- a woken pool is back at the size its zero-scale recorded;
- each finished operation had its final message exactly once;
- the audit chain verifies.

It prints the figures (steps, operations, faults, invariant checks, violations) and exits 1 on a
violation. The results are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from engine.domain.clock import SystemClock
from engine.domain.force_scope import ForceScope
from engine.domain.model import DRAINING_TAINT_KEY, PdbIndex, PodInfo
from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube import errors
from engine.kube.client import KubeClient
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.operations.steps.cordon_drain import drained_nodes
from engine.pools.labels import LabelPoolProvider
from engine.store.base import StoreError
from engine.store.database import Store
from localcluster import objects, rest, waits
from localcluster.binaries import ensure_binaries
from localcluster.controlplane import ControlPlane

CLUSTER = "soak"
NAMESPACE = "soak"
POOL_KEY = "scalebot.io/pool"
POOLS = {"web": 3, "batch": 2}
OPERATOR, APPROVER = "U0SOAKOPER", "U0SOAKAPPR"
LIVE = (OpState.AWAITING_APPROVAL, OpState.RUNNING)
SETTLE_SECONDS = 240.0
"""Longest a step may take to end (a drain held by the PDB fails at its 30 s timeout)."""
SETTINGS = RunnerSettings(
    graceful_window=timedelta(seconds=8),
    pass_interval=timedelta(seconds=2),
    settle=timedelta(seconds=1),
    drain_timeout=timedelta(seconds=30),
    ready_timeout=timedelta(seconds=60),
    verify_timeout=timedelta(seconds=60),
    workers=2,
    workloads_return_timeout=timedelta(seconds=20),
)


@dataclass
class Figures:
    steps: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    operations: Counter[str] = field(default_factory=Counter)
    """Operations by `kind state` as they ended."""

    def render(self) -> str:
        ops = sum(self.operations.values())
        lines = [
            f"duration {self.seconds / 60:.1f} min, {sum(self.steps.values())} steps, {ops} operations, "
            f"{sum(self.faults.values())} faults, {self.checks} invariant checks, "
            f"{len(self.violations)} violations",
            "steps: " + ", ".join(f"{k} {n}" for k, n in sorted(self.steps.items())),
            "faults: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())),
            "operations: " + ", ".join(f"{k} {n}" for k, n in sorted(self.operations.items())),
        ]
        lines += [f"VIOLATION: {v}" for v in self.violations]
        return "\n".join(lines)


class Soak:
    """One scalebot process at a time (in this process) over one SQLite file and one real cluster."""

    def __init__(self, cp: ControlPlane, work: Path, rng: random.Random, figures: Figures) -> None:
        self.cp = cp
        self.work = work
        self.rng = rng
        self.figures = figures
        self.admin = cp.admin_api_client(pool_size=8)
        self.finals: Counter[str] = Counter()
        self.force_deleted: list[PodInfo] = []
        self.hand_cordoned: set[str] = set()
        self.requested: set[str] = set()
        self.recorded: dict[str, int] = {}
        """Pool → the size its last successful zero-scale recorded (what a wake restores)."""
        self.slack_down = False
        self.cancel_at_drain = False
        self.kube: KubeClient | None = None
        self.ops = self._process()

    # -- set-up ------------------------------------------------------------------------------------

    def build_cluster(self) -> None:
        objects.create_namespace(self.admin, NAMESPACE)
        for pool, size in POOLS.items():
            objects.create_node_pool(self.admin, pool, size, labels={POOL_KEY: pool})
            objects.create_deployment(
                self.admin, NAMESPACE, pool, 2 * size, node_selector={POOL_KEY: pool}, grace=1
            )
        # One pod no eviction may remove: a drain of its node waits, fails at its timeout and
        # gives the node back; a whole-cluster zero force-deletes it in phase 2 (within its scope).
        objects.create_deployment(
            self.admin, NAMESPACE, "guarded", 1, node_selector={POOL_KEY: "web"}, grace=1
        )
        objects.create_pdb(self.admin, NAMESPACE, "guarded", match_labels={"app": "guarded"}, min_available=1)
        for name in (*POOLS, "guarded"):
            waits.wait_for_deployment_available(self.admin, NAMESPACE, name, timeout=120)
        waits.wait_for_pdb_observed(self.admin, NAMESPACE, "guarded")

    def _process(self) -> Operations:
        if self.kube is not None:
            self.kube.close()
        kube = KubeClient.from_config(kubeconfig=str(self.cp.scalebot_kubeconfig))
        deletes = kube.delete_pod

        def delete_pod(pod: PodInfo, *, grace_seconds: int | None = None) -> None:
            deletes(pod, grace_seconds=grace_seconds)
            if grace_seconds == 0:
                self.force_deleted.append(pod)

        kube.delete_pod = delete_pod  # type: ignore[method-assign]
        self.kube = kube
        handle = ClusterHandle(
            CLUSTER, kube, LabelPoolProvider(kube, kube.api_client, label=POOL_KEY, namespace="scalebot")
        )
        rules = policy.ClusterPolicy(
            cluster=CLUSTER, users={OPERATOR: policy.Role.OPERATOR, APPROVER: policy.Role.APPROVER}
        )
        ops = new_operations(
            Store(self.work / "scalebot.db"),
            {CLUSTER: handle},
            {CLUSTER: rules},
            SystemClock(),
            settings=SETTINGS,
        )
        ops.subscribe(self._on_event)
        return ops

    def _on_event(self, event: ProgressEvent) -> None:
        op = event.operation
        if event.final:
            self.finals[op.id] += 1
            self.figures.operations[f"{op.kind.value} {op.state.value}"] += 1
            if op.state is OpState.SUCCEEDED and op.kind is OpKind.ZERO:
                self.recorded |= {c.pool: c.before for c in op.plan.pools if c.before > 0}
        if self.cancel_at_drain and op.step == "drain" and op.state is OpState.RUNNING:
            self.cancel_at_drain = False
            self.ops.cancel(op.id, by=OPERATOR)
        if self.slack_down:
            raise ConnectionError("Slack does not answer")

    def close(self) -> None:
        self.ops.runner.stop()
        self.ops.store.close()
        if self.kube is not None:
            self.kube.close()
        self.admin.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _nodes(self) -> list[dict[str, Any]]:
        return rest.list_items(self.admin, rest.node_path(), label_selector=POOL_KEY)

    def _ops(self, *states: OpState) -> list[Operation]:
        return self.ops.store.list_operations(states=list(states), limit=10_000)

    def _settle(self) -> None:
        if not self.ops.runner.wait_idle(SETTLE_SECONDS):
            self.figures.violations.append(f"operations still running after {SETTLE_SECONDS:.0f} s")

    def _request(self, kind: OpKind, target: Target, *, approve: bool = True) -> Operation | None:
        try:
            out = self.ops.request(OperationRequest(kind=kind, target=target, requested_by=OPERATOR))
        except errors.KubeError:
            return None  # its planning call failed: answered at once, nothing started
        if out.operation is None:
            return None
        self.requested.add(out.operation.id)
        if out.operation.approval_id:
            if approve:
                self.ops.approve(out.operation.approval_id, by=APPROVER)
            else:
                self.ops.reject(out.operation.approval_id, by=APPROVER, reason="not tonight")
        return out.operation

    def _wait_for_step(self, op_id: str, step: str, timeout: float = 60.0) -> bool:
        """Poll the store until the operation reaches `step` (False if it ended or time ran out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            op = self.ops.get(op_id)
            if op is None or op.state is not OpState.RUNNING:
                return False
            if op.step == step:
                return True
            self.ops.runner.wait_idle(0.2)
        return False

    # -- steps -------------------------------------------------------------------------------------

    def zero(self) -> None:
        whole = self.rng.random() < 0.3
        pools = () if whole else (self.rng.choice(list(POOLS)),)
        self._request(OpKind.ZERO, Target(cluster=CLUSTER, pools=pools), approve=self.rng.random() < 0.85)
        self._settle()

    def wake(self) -> None:
        op = self._request(OpKind.WAKE, Target(cluster=CLUSTER))
        self._settle()
        if op is None:
            return
        done = self.ops.get(op.id)
        if done is None or done.state is not OpState.SUCCEEDED:
            return
        by_pool = Counter(n["metadata"]["labels"][POOL_KEY] for n in self._nodes())
        for change in done.plan.pools:
            if change.pool in self.recorded and by_pool[change.pool] != self.recorded[change.pool]:
                self.figures.violations.append(
                    f"wake {op.id}: pool {change.pool} has {by_pool[change.pool]} nodes, "
                    f"its zero-scale recorded {self.recorded[change.pool]}"
                )

    def drain(self) -> None:
        nodes = [n["metadata"]["name"] for n in self._nodes()]
        if not nodes:
            return
        node = self.rng.choice(nodes)
        op = self._request(OpKind.DRAIN, Target(cluster=CLUSTER, nodes=(node,)))
        self._settle()
        done = self.ops.get(op.id) if op else None
        if done is not None and done.state is OpState.SUCCEEDED:
            self.hand_cordoned.add(node)  # a drain's result is a cordoned node, the person's now

    def cancel(self) -> None:
        """A zero-scale cancelled from its drain: the nodes are given back."""
        self.cancel_at_drain = True
        self._request(OpKind.ZERO, Target(cluster=CLUSTER, pools=(self.rng.choice(list(POOLS)),)))
        self._settle()
        self.cancel_at_drain = False

    def restart(self) -> None:
        """The process stops in the middle of a zero-scale; the next one resumes it."""
        op = self._request(OpKind.ZERO, Target(cluster=CLUSTER, pools=(self.rng.choice(list(POOLS)),)))
        if op is not None:
            self._wait_for_step(op.id, self.rng.choice(["cordon", "drain", "remove", "verify"]))
        self.ops.runner.stop()
        self.ops.store.close()
        self.ops = self._process()
        self.ops.resume()
        self.figures.faults["process restart"] += 1
        self._settle()

    def apiserver_restart(self) -> None:
        """kube-apiserver killed under a running operation, started again a few seconds later."""
        kind = self.rng.choice([OpKind.ZERO, OpKind.WAKE])
        target = Target(cluster=CLUSTER, pools=(self.rng.choice(list(POOLS)),) if kind is OpKind.ZERO else ())
        op = self._request(kind, target)
        if op is not None:
            self._wait_for_step(op.id, "drain" if kind is OpKind.ZERO else "wait_ready")
        self.cp.stop_apiserver()
        self.figures.faults["apiserver kill"] += 1
        self.ops.runner.wait_idle(self.rng.uniform(1.0, 5.0))  # the outage: the runner meets it or not
        self.cp.start_apiserver()
        self._settle()

    def slack(self) -> None:
        self.slack_down = not self.slack_down
        if self.slack_down:
            self.figures.faults["slack down"] += 1

    def hand_cordon(self) -> None:
        nodes = [n["metadata"]["name"] for n in self._nodes()]
        if not nodes:
            return
        node = self.rng.choice(nodes)
        if self.rng.random() < 0.5:
            objects.cordon(self.admin, node)
            self.hand_cordoned.add(node)
        else:
            objects.uncordon(self.admin, node)
            self.hand_cordoned.discard(node)

    STEPS: ClassVar[dict[str, tuple[float, Callable[[Soak], None]]]] = {
        "zero": (3, zero),
        "wake": (3, wake),
        "drain": (1.5, drain),
        "cancel": (1, cancel),
        "restart": (1, restart),
        "apiserver_restart": (0.7, apiserver_restart),
        "slack": (0.7, slack),
        "hand_cordon": (1, hand_cordon),
    }

    def step(self) -> None:
        names = list(self.STEPS)
        name = self.rng.choices(names, weights=[self.STEPS[n][0] for n in names])[0]
        self.STEPS[name][1](self)
        self.figures.steps[name] += 1
        self.check(after=name)

    # -- invariants --------------------------------------------------------------------------------

    def check(self, *, after: str) -> None:
        found: list[str] = []
        for invariant in (
            self._taints_belong_to_live_operations,
            self._no_node_left_cordoned,
            self._locks_have_live_owners,
            self._no_operation_lost,
            self._force_deletes_in_scope,
            self._finals_once,
            self._audit_verifies,
        ):
            self.figures.checks += 1
            with contextlib.suppress(StoreError):
                found += [f"after {after}: {v}" for v in invariant()]
        self.figures.violations += found

    def _holders(self) -> set[str]:
        """Nodes scalebot may keep cordoned and tainted: a running operation's, a finished drain's
        (its result is a cordoned node), a phase 2's stopped for pods outside its force scope."""
        return {
            n
            for op in self.ops.store.list_operations(limit=10_000)
            if op.state is OpState.RUNNING
            or (op.state is OpState.SUCCEEDED and op.kind is OpKind.DRAIN)
            or (op.state is OpState.FAILED and op.step == "force" and "the nodes stay cordoned" in op.error)
            for n in drained_nodes(op)
        }

    def _taints_belong_to_live_operations(self) -> list[str]:
        marked = {
            n["metadata"]["name"]
            for n in self._nodes()
            if any(t.get("key") == DRAINING_TAINT_KEY for t in n["spec"].get("taints") or ())
        }
        stray = marked - self._holders()
        return [f"scalebot's taint left on {sorted(stray)} by no live operation"] if stray else []

    def _no_node_left_cordoned(self) -> list[str]:
        cordoned = {n["metadata"]["name"] for n in self._nodes() if n["spec"].get("unschedulable")}
        stray = cordoned - self._holders() - self.hand_cordoned
        return [f"{sorted(stray)} left cordoned by a finished operation"] if stray else []

    def _locks_have_live_owners(self) -> list[str]:
        live = {op.id for op in self._ops(*LIVE)}
        owners = {row["op_id"] for row in self.ops.store.db.table("locks").rows}
        return [f"locks held by finished operations: {sorted(owners - live)}"] if owners - live else []

    def _no_operation_lost(self) -> list[str]:
        stored = {op.id for op in self.ops.store.list_operations(limit=10_000)}
        running = [op.id for op in self._ops(OpState.RUNNING) if not self.ops.runner.is_running(op.id)]
        lost = sorted(self.requested - stored)
        return ([f"requested but not stored: {lost}"] if lost else []) + (
            [f"running with no runner: {running}"] if running else []
        )

    def _force_deletes_in_scope(self) -> list[str]:
        approved = [
            op
            for op in self.ops.store.list_operations(limit=10_000)
            if op.plan.force_phase and op.state not in (OpState.AWAITING_APPROVAL, OpState.REJECTED)
        ]
        assert self.kube is not None
        pdbs = PdbIndex(self.kube.list_pdbs())

        def in_scope(pod: PodInfo, op: Operation) -> bool:
            scope = op.plan.force_scope or ForceScope()
            covered = pod.is_finished or not scope.outside(pod, [b.key for b in pdbs.for_pod(pod)])
            return covered and pod.node_name in drained_nodes(op)

        outside = [p.key for p in self.force_deleted if not any(in_scope(p, op) for op in approved)]
        return [f"force-deleted outside an approved force scope: {outside}"] if outside else []

    def _finals_once(self) -> list[str]:
        twice = {k: n for k, n in self.finals.items() if n != 1}
        missing = [op.id for op in self._ops(OpState.SUCCEEDED, OpState.FAILED) if self.finals[op.id] != 1]
        return ([f"final message more than once: {twice}"] if twice else []) + (
            [f"finished without their final message: {missing}"] if missing else []
        )

    def _audit_verifies(self) -> list[str]:
        _rows, problems = self.ops.store.verify_audit()
        return [f"audit chain: {problems}"] if problems else []


def run(minutes: float, seed: int, work: Path, echo: Callable[[str], None]) -> Figures:
    figures = Figures()
    rng = random.Random(seed)
    with ControlPlane(ensure_binaries(), install_capi_crds=False, echo=echo) as cp:
        soak = Soak(cp, work, rng, figures)
        try:
            soak.build_cluster()
            started = time.monotonic()
            deadline = started + minutes * 60
            while time.monotonic() < deadline:
                soak.step()
                minutes_in = (time.monotonic() - started) / 60
                echo(f"[{minutes_in:5.1f} min] {sum(figures.steps.values())} steps, {figures.checks} checks")
            figures.seconds = time.monotonic() - started
        finally:
            soak.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=None, help="kept afterwards (default: a temp dir)")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="scalebot-soak-"))
    work.mkdir(parents=True, exist_ok=True)

    def echo(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        figures = run(args.minutes, args.seed, work, echo)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(figures.render())
    return 1 if figures.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())

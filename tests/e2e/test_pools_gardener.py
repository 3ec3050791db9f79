"""Gardener Shoots: a pool is a worker, zero of every worker is hibernation, wake ends it.

Gardener itself cannot run here: the Shoot API is the CRD of `gardener_standin.py`, and its small
stand-in controller (reconciling in a thread) turns each worker's minimum, or hibernation, into kwok
Nodes and plays status.lastOperation. The garden and the shoot cluster are the same local API
server; scalebot connects to both as its own ServiceAccount through `bot.runtime.wiring` with the
`gardener` provider, granted only the shipped manifests/grants/gardener-shoots (`get`/`patch` on
this test's Shoot in its namespace). Also: `/scale schedule list` shows the Shoot's own hibernation
schedules beside scalebot's, and the plan says Gardener's machine controller picks the machines.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.runtime import wiring
from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.store.database import Store
from localcluster import rest, waits
from localcluster.controlplane import ControlPlane
from tests.e2e import grants
from tests.e2e.gardener_standin import GROUP, VERSION, ShootStandIn, install_crd, standin_loop, worker
from tests.e2e.test_schedules_e2e import slack_world
from tests.slack.conftest import APPROVER, VIEWER
from tests.slack.harness import all_text

pytestmark = pytest.mark.e2e

FAST = RunnerSettings(
    graceful_window=timedelta(seconds=5),
    pass_interval=timedelta(seconds=1),
    settle=timedelta(seconds=1),
    drain_timeout=timedelta(seconds=60),
    workers=2,
    # A wake follows workloads not yet back this long (the default 5 min outlasts the test's
    # waits).
    workloads_return_timeout=timedelta(seconds=30),
)
SCHEDULE = {"start": "00 19 * * 1-5", "end": "00 07 * * 1-5", "location": "Europe/Berlin"}


@pytest.fixture
def shoot(control_plane: ControlPlane, admin_api: Any, namespace: str) -> Iterator[ShootStandIn]:
    install_crd(admin_api)
    standin = ShootStandIn(admin_api, admin_api, namespace, f"s{namespace[-6:]}")
    # The shipped grant (manifests/grants/gardener-shoots), on this test's namespace and Shoot; the
    # garden is this control plane, reached as scalebot's own ServiceAccount.
    applied = grants.apply_grant(
        control_plane, grants.GARDENER_SHOOTS, namespace, [standin.name], subject=grants.SCALEBOT_SA
    )
    yield standin
    # Now, not with the namespace's deletion, which takes a while: nothing else may stay bound to
    # scalebot's ServiceAccount (test_manifests checks exactly what is).
    grants.remove_grant(control_plane, applied)
    standin.cleanup()


def _run(ops: Operations, kind: OpKind, *pools: str, size: int | None = None) -> Any:
    target = Target(cluster="shoot", pools=pools, size=size)
    out = ops.request(OperationRequest(kind=kind, target=target, requested_by="cli:e2e"))
    assert out.ok, out.reply
    assert ops.runner.wait_idle(120), "operation did not finish in time"
    op = ops.get(out.operation.id)
    assert op is not None
    return op


def _workers(standin: ShootStandIn) -> dict[str, tuple[int, int]]:
    spec = standin.shoot()["spec"]
    return {w["name"]: (w["minimum"], w["maximum"]) for w in spec["provider"]["workers"]}


def test_scale_a_worker_then_hibernate_and_wake(
    shoot: ShootStandIn, scalebot_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    shoot.create([worker("system", 1, 3), worker("batch", 3, 5)], schedules=[SCHEDULE])
    handle = wiring.connect_cluster(
        "shoot",
        kubeconfig=str(scalebot_kubeconfig),
        provider="gardener",
        options={"shoot": f"{namespace}/{shoot.name}", "shoot_kubeconfig": str(scalebot_kubeconfig)},
    )
    pools = {p.name: p for p in handle.pools.list_pools()}
    assert {n: (p.desired, p.max_size, len(p.nodes)) for n, p in pools.items()} == {
        "batch": (3, 5, 3),
        "system": (1, 3, 1),
    }
    assert (
        "hibernate: start 00 19 * * 1-5, end 00 07 * * 1-5 (Europe/Berlin)" in pools["batch"].removal_reason
    )

    loop = standin_loop(shoot).start()
    ops = new_operations(Store(tmp_path / "db.sqlite"), {"shoot": handle}, {}, SystemClock(), settings=FAST)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    try:
        target = Target(cluster="shoot", pools=("batch",), size=1)
        plan = ops.plan(OperationRequest(kind=OpKind.SCALE, target=target, requested_by="cli:e2e"))
        assert (
            "Gardener's machine controller picks the machines to remove when the worker's minimum/maximum "
            "is lowered; scalebot cannot choose them" in plan.to_text()
        ), plan.to_text()
        scaled = _run(ops, OpKind.SCALE, "batch", size=1)
        assert scaled.state is OpState.SUCCEEDED, scaled.error
        assert _workers(shoot)["batch"] == (1, 5), "minimum edited, maximum kept"
        waits.wait_until(lambda: len(shoot.node_names("batch")) == 1, 30, "batch down to one node")

        zero = _run(ops, OpKind.ZERO)
        assert zero.state is OpState.SUCCEEDED, zero.error
        spec = shoot.shoot()["spec"]
        assert spec["hibernation"]["enabled"] is True, "the last active worker hibernates the Shoot"
        assert _workers(shoot) == {"batch": (0, 0), "system": (1, 3)}
        # The operation ends when Gardener's does: status.lastOperation Succeeded for this generation.
        status = shoot.shoot()["status"]
        assert status["lastOperation"]["state"] == "Succeeded" and status["hibernated"] is True
        assert status["observedGeneration"] == shoot.shoot()["metadata"]["generation"]
        assert not shoot.node_names()
        assert any(t.startswith("pool system: Shoot Reconcile ") for t in texts), texts

        woken = _run(ops, OpKind.WAKE)
        assert woken.state is OpState.SUCCEEDED, woken.error
        assert shoot.shoot()["spec"]["hibernation"]["enabled"] is False
        assert _workers(shoot) == {"batch": (1, 5), "system": (1, 3)}
        assert woken.summary.nodes_ready == (2, 2)
    finally:
        ops.runner.stop()
        loop.stop()
    assert not shoot.errors, shoot.errors


def test_schedule_list_shows_the_shoots_own_hibernation_schedules_beside_scalebots(
    shoot: ShootStandIn, scalebot_kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    """`/scale schedule list` over the real HTTP Bolt app: scalebot's schedule, then the Shoot's
    `spec.hibernation.schedules` read as the ServiceAccount, labelled as Gardener's and read-only."""
    shoot.create(
        [worker("system", 1, 2)],
        schedules=[SCHEDULE, {"start": "00 22 * * 5"}],  # the second: no location (Gardener: UTC)
    )
    handle = wiring.connect_cluster(
        "dev-eu",
        kubeconfig=str(scalebot_kubeconfig),
        provider="gardener",
        options={"shoot": f"{namespace}/{shoot.name}", "shoot_kubeconfig": str(scalebot_kubeconfig)},
    )
    version = shoot.shoot()["metadata"]["resourceVersion"]
    with slack_world(handle, tmp_path / "scalebot.db") as world:
        result, url = world.bot.command(
            "schedule add nights sleep=Mon-Fri 20:00 wake=Mon-Fri 07:00 tz=Europe/Berlin lead=60m "
            "<#C0DEV|platform>",
            user=APPROVER,
        )
        assert result.status == 200 and "Schedule saved" in all_text(world.bot.wait_reply(url))
        result, url = world.bot.command("schedule list", user=VIEWER)
        listed = world.bot.wait_reply(url)
    text = all_text(listed)
    assert listed.body["response_type"] == "ephemeral"
    assert "nights: dev-eu, every pool to 0" in text, text
    assert (
        f"Gardener's own schedules on dev-eu* (Shoot {namespace}/{shoot.name}; read-only: "
        "Gardener runs them, change them there)" in text
    ), text
    assert "🌙 hibernate `00 19 * * 1-5`, wake `00 07 * * 1-5` (Europe/Berlin)" in text, text
    assert "🌙 hibernate `00 22 * * 5` (UTC, not set)" in text, text
    assert shoot.shoot()["metadata"]["resourceVersion"] == version, "listing changed the Shoot"


def test_the_shoots_namespace_is_read_from_its_project(
    control_plane: ControlPlane,
    shoot: ShootStandIn,
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
) -> None:
    """`project:` names the Gardener project and `shoot:` the Shoot alone: the namespace is the
    Project's spec.namespace (here deliberately not garden-<project>), read as the ServiceAccount;
    without `get` on the Project the start fails saying what to grant."""
    shoot.create([worker("system", 1, 2)])
    project = f"p{namespace[-6:]}"
    projects = f"/apis/{GROUP}/{VERSION}/projects"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Project", "metadata": {"name": project}}
    rest.create(admin_api, projects, {**body, "spec": {"namespace": namespace}})
    options = {"project": project, "shoot": shoot.name, "shoot_kubeconfig": str(scalebot_kubeconfig)}

    def connect() -> ClusterHandle:
        return wiring.connect_cluster(
            "shoot", kubeconfig=str(scalebot_kubeconfig), provider="gardener", options=options
        )

    applied: list[Any] = []
    try:
        with pytest.raises(wiring.WiringError, match=rf"project: reading Project {project} was refused"):
            connect()
        applied = grants.apply_grant(
            control_plane, grants.GARDENER_PROJECT, None, [project], subject=grants.SCALEBOT_SA
        )
        handle = connect()
        assert [p.name for p in handle.pools.list_pools()] == ["system"]
        assert handle.pools.namespace == namespace  # type: ignore[attr-defined]
        with pytest.raises(wiring.WiringError, match="the Shoot's name alone with project"):
            wiring.connect_cluster(
                "shoot",
                kubeconfig=str(scalebot_kubeconfig),
                provider="gardener",
                options={**options, "shoot": f"{namespace}/{shoot.name}"},
            )
    finally:
        if applied:
            grants.remove_grant(control_plane, applied)
        rest.delete(admin_api, f"{projects}/{project}")

"""Cluster API as it is deployed: Machines in a management cluster, Nodes in a workload cluster.

Two real control planes: the session's (the workload cluster: kwok Nodes, Pods, the drain) and a
second one started here (the management cluster: Cluster API CRDs holding two Clusters, `alpha`
and `beta`, in one namespace). Cluster API's controllers are replaced by the test-only stand-in
(`capi_standin.py`), reconciling in a thread: it creates and deletes alpha's and beta's Machines in
the management cluster and their Nodes in the workload cluster. scalebot connects as its own
ServiceAccount on both planes, through `bot.runtime.wiring` with the `capi` provider's options, and reads
the workload kubeconfig from the Secret `alpha-kubeconfig` (key `value`) as clusterctl does.

Proves: pools are only alpha's MachineDeployments; a zero-scale drains alpha's nodes in the
workload cluster, takes alpha to 0 and wake brings it back, while beta (same namespace, same
management cluster) keeps its replicas, Machines and annotations; a cancelled zero-scale takes
back the delete-machine marks it wrote and leaves one placed by hand.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.runtime import wiring
from engine.domain.clock import SystemClock
from engine.domain.operation import OperationRequest, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.kube import errors
from engine.kube.client import KubeClient
from engine.kube.inline_kubeconfig import parse_inline_kubeconfig
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.base import RESTORE_ANNOTATION
from engine.pools.capi import OWN_MARK_ANNOTATION
from engine.pools.victims import DELETE_MACHINE_ANNOTATION
from engine.store.database import Store
from localcluster import objects, rest, waits
from localcluster.controlplane import ControlPlane
from tests.e2e import grants, support
from tests.e2e.capi_standin import Reconciler, StandIn, path

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


@pytest.fixture(scope="module")
def management(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A second control plane holding only Cluster API objects (about 6 s to start)."""
    plane = ControlPlane(control_plane.cache_dir, install_capi_crds=True, echo=lambda _: None)
    with plane:
        yield plane


@pytest.fixture(scope="module")
def management_admin(management: ControlPlane) -> Iterator[Any]:
    api = management.admin_api_client(pool_size=8)
    from kubernetes.client.exceptions import ApiException

    for plural in ("clusters", "machinedeployments", "machinesets", "machines"):
        waits.wait_until(
            lambda plural=plural: rest.get(api, f"/apis/cluster.x-k8s.io/v1beta2/{plural}"),
            60,
            f"{plural} served",
            ignore=(ApiException,),
        )
    yield api
    api.close()


@pytest.fixture
def capi_namespace(management_admin: Any, unique_name: str) -> Iterator[str]:
    rest.create(management_admin, "/api/v1/namespaces", {"metadata": {"name": unique_name}})
    yield unique_name
    rest.delete(management_admin, f"/api/v1/namespaces/{unique_name}", propagation="Background")


def _secret_for_scalebot(
    plane: ControlPlane, api: Any, namespace: str, cluster: str, kubeconfig: Path | str
) -> None:
    """The kubeconfig Secret Cluster API writes, and the shipped grant on it (manifests/grants)."""
    name = f"{cluster}-kubeconfig"
    secret = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": _encoded(kubeconfig.read_text() if isinstance(kubeconfig, Path) else kubeconfig)},
    }
    rest.create(api, f"/api/v1/namespaces/{namespace}/secrets", secret)
    grants.apply_grant(plane, grants.CAPI_KUBECONFIG, namespace, [name])


def _encoded(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass(frozen=True)
class Site:
    """Both planes of one test: the management cluster with alpha and beta, the workload cluster."""

    management: ControlPlane
    management_admin: Any
    workload: ControlPlane
    workload_admin: Any
    namespace: str
    """The workload cluster's namespace for this test's Pods."""
    capi_namespace: str
    alpha: StandIn
    beta: StandIn
    db: Path

    def connect(self) -> ClusterHandle:
        """alpha, as scalebot connects it from a config entry (kubeconfig of the management cluster)."""
        return wiring.connect_cluster(
            "alpha",
            kubeconfig=str(self.management.scalebot_kubeconfig),
            provider="capi",
            options={"capi_cluster": f"{self.capi_namespace}/alpha"},
        )

    def operations(self, handle: ClusterHandle) -> Operations:
        return new_operations(Store(self.db), {"alpha": handle}, {}, SystemClock(), settings=FAST)

    def grant_kubeconfig_secret(self) -> None:
        _secret_for_scalebot(
            self.management,
            self.management_admin,
            self.capi_namespace,
            "alpha",
            self.workload.scalebot_kubeconfig,
        )


@pytest.fixture
def site(
    management: ControlPlane,
    management_admin: Any,
    control_plane: ControlPlane,
    admin_api: Any,
    namespace: str,
    capi_namespace: str,
    unique_name: str,
    tmp_path: Path,
) -> Iterator[Site]:
    labels = {"capi-mgmt-test": unique_name}
    alpha, beta = (
        StandIn(
            management_admin,
            capi_namespace,
            name,
            f"{name}-md",
            node_labels=labels,
            node_api=admin_api,
            endpoint=("127.0.0.1", control_plane.api_port),
        )
        for name in ("alpha", "beta")
    )
    yield Site(
        management,
        management_admin,
        control_plane,
        admin_api,
        namespace,
        capi_namespace,
        alpha,
        beta,
        tmp_path / "db.sqlite",
    )
    for standin in (alpha, beta):
        standin.cleanup()


def _request(kind: OpKind) -> OperationRequest:
    return OperationRequest(kind=kind, target=Target(cluster="alpha"), requested_by="cli:e2e")


def _run(ops: Operations, kind: OpKind) -> Any:
    out = ops.request(_request(kind))
    assert out.ok, out.reply
    assert ops.runner.wait_idle(120), "operation did not finish in time"
    op = ops.get(out.operation.id)
    assert op is not None
    return op


def _run_with_standin(site: Site, ops: Operations, kind: OpKind, *standins: StandIn) -> Any:
    """Run one operation while the stand-in controller reconciles; wait for its Machines to follow."""
    reconciler = Reconciler(list(standins)).start()
    try:
        op = _run(ops, kind)
        waits.wait_until(
            lambda: all(len(s.machines()) == s.replicas() for s in standins), 30, "Machines follow"
        )
    finally:
        reconciler.stop()
    assert not reconciler.errors, reconciler.errors
    return op


def test_zero_and_wake_of_one_cluster_leave_the_other_untouched(site: Site) -> None:
    alpha, beta, workload = site.alpha, site.beta, site.workload_admin
    alpha_nodes = alpha.create(2)
    beta.create(2)
    beta_before = {m["metadata"]["name"]: m["metadata"]["uid"] for m in beta.machines()}
    site.grant_kubeconfig_secret()
    on_alpha = {"scalebot.io/pool": "alpha-md"}
    objects.create_deployment(workload, site.namespace, "web", 2, node_selector=on_alpha, grace=1)
    waits.wait_for_deployment_available(workload, site.namespace, "web")

    handle = site.connect()
    assert [p.name for p in handle.pools.list_pools()] == ["alpha-md"]
    assert set(handle.pools.get_pool("alpha-md").nodes) == set(alpha_nodes)
    assert {n.name for n in handle.api.list_nodes()} >= set(alpha_nodes), "the workload cluster's Nodes"

    ops = site.operations(handle)
    try:
        zero = _run_with_standin(site, ops, OpKind.ZERO, alpha, beta)
        assert zero.state is OpState.SUCCEEDED, zero.error
        assert zero.summary.pods_evicted == 2, "the drain ran in the workload cluster"
        assert alpha.replicas() == 0 and not alpha.machines()
        pods = rest.list_items(workload, f"/api/v1/namespaces/{site.namespace}/pods")
        assert not {p["spec"].get("nodeName") for p in pods} & set(alpha_nodes)

        wake = _run_with_standin(site, ops, OpKind.WAKE, alpha, beta)
        assert wake.state is OpState.SUCCEEDED, wake.error
        assert wake.summary.nodes_ready == (2, 2)
        assert alpha.replicas() == 2
    finally:
        ops.runner.stop()

    assert beta.replicas() == 2
    assert {m["metadata"]["name"]: m["metadata"]["uid"] for m in beta.machines()} == beta_before
    beta_md = rest.get(site.management_admin, path(site.capi_namespace, "machinedeployments", "beta-md"))
    assert RESTORE_ANNOTATION not in (beta_md["metadata"].get("annotations") or {})
    for machine in beta.machines():
        assert "cluster.x-k8s.io/delete-machine" not in (machine["metadata"].get("annotations") or {})


def test_an_unreadable_kubeconfig_secret_is_a_clear_error(site: Site) -> None:
    refused = (
        rf"reading Secret {site.capi_namespace}/alpha-kubeconfig was refused .*grant scalebot `get` on it"
    )
    with pytest.raises(wiring.WiringError, match=refused):
        site.connect()


EXEC_PLUGIN = "client.authentication.k8s.io/v1"


def _kubeconfig_running(plane: ControlPlane, marker: Path) -> str:
    """The workload kubeconfig with its token replaced by an exec credential plugin that writes
    `marker` and then hands over the real token, so a client that runs it connects."""
    config = yaml.safe_load(plane.scalebot_kubeconfig.read_text())
    token = config["users"][0]["user"]["token"]
    credential = {"apiVersion": EXEC_PLUGIN, "kind": "ExecCredential", "status": {"token": token}}
    script = f"touch {marker} && echo '{json.dumps(credential)}'"
    for user in config["users"]:
        user["user"] = {
            "exec": {"apiVersion": EXEC_PLUGIN, "command": "/bin/sh", "args": ["-c", script]},
        }
    return yaml.safe_dump(config)


def test_a_kubeconfig_secret_with_an_exec_plugin_is_refused_and_the_plugin_never_runs(
    site: Site, tmp_path: Path
) -> None:
    """Whoever can write `<cluster>-kubeconfig` must not run a command inside scalebot: the Secret
    is refused by name and field, the command never runs; Cluster API's own kubeconfig then works."""
    nodes = site.alpha.create(1)
    marker = tmp_path / "exec-plugin-ran"
    kubeconfig = _kubeconfig_running(site.workload, marker)
    _secret_for_scalebot(site.management, site.management_admin, site.capi_namespace, "alpha", kubeconfig)
    refused = (
        rf"Secret {site.capi_namespace}/alpha-kubeconfig: kubeconfig field users\[[^]]+\]\.user\.exec "
        r"refused \(a credential plugin runs a command inside scalebot\)"
    )
    with pytest.raises(wiring.WiringError, match=refused):
        site.connect()
    assert not marker.exists(), "the exec plugin ran"

    secret = f"/api/v1/namespaces/{site.capi_namespace}/secrets/alpha-kubeconfig"
    valid = site.workload.scalebot_kubeconfig.read_text()
    rest.patch(site.management_admin, secret, {"data": {"value": _encoded(valid)}})
    handle = site.connect()
    try:
        assert {n.name for n in handle.api.list_nodes()} >= set(nodes), "Cluster API's own kubeconfig works"
    finally:
        handle.api.close()
    assert not marker.exists()


def test_a_program_put_into_the_secret_after_the_start_is_refused_at_the_reread(
    site: Site, tmp_path: Path
) -> None:
    """The Secret is read again on each 401: an exec plugin written into it then is refused the
    same way, the 401 names the field, and the command never runs."""
    site.alpha.create(1)
    holder = f"{site.capi_namespace}-first"
    first = _kubeconfig_with(site.workload, _bound_token(site.workload_admin, holder))
    _secret_for_scalebot(site.management, site.management_admin, site.capi_namespace, "alpha", first)
    handle = site.connect()
    try:
        assert handle.api.list_nodes(), "connected with the Secret's credentials"
        marker = tmp_path / "exec-plugin-ran"
        secret = f"/api/v1/namespaces/{site.capi_namespace}/secrets/alpha-kubeconfig"
        program = _encoded(_kubeconfig_running(site.workload, marker))
        rest.patch(site.management_admin, secret, {"data": {"value": program}})
        _revoke(site, holder, first)

        with pytest.raises(errors.KubeError) as refused:
            handle.api.list_nodes()
        assert refused.value.status == 401
        assert "reloading the credentials failed" in str(refused.value)
        assert "user.exec refused (a credential plugin runs a command inside scalebot)" in str(refused.value)
        assert not marker.exists(), "the exec plugin ran"
    finally:
        handle.api.close()


def test_a_kubeconfig_secret_naming_another_server_is_refused(site: Site) -> None:
    """The Secret may only name the Cluster's own spec.controlPlaneEndpoint: pointed at another API
    server (here the management cluster's), scalebot refuses to send anything there."""
    site.alpha.create(1)
    elsewhere = _kubeconfig_with(site.management, "not-sent")
    _secret_for_scalebot(site.management, site.management_admin, site.capi_namespace, "alpha", elsewhere)
    refused = (
        rf"the kubeconfig's server https://127.0.0.1:{site.management.api_port} is not Cluster "
        rf"{site.capi_namespace}/alpha's spec.controlPlaneEndpoint \(127.0.0.1:{site.workload.api_port}\)"
    )
    with pytest.raises(wiring.WiringError, match=refused):
        site.connect()


def _alpha_with_blocked_pods(site: Site) -> tuple[list[str], ClusterHandle]:
    """alpha with 2 nodes running pods that a PodDisruptionBudget allows no eviction of."""
    nodes = site.alpha.create(2)
    site.grant_kubeconfig_secret()
    workload, namespace = site.workload_admin, site.namespace
    support.deployment(workload, namespace, "db", 2, node_selector={"scalebot.io/pool": "alpha-md"}, grace=1)
    support.budget(workload, namespace, "db-pdb", app="db", min_available=2)
    return nodes, site.connect()


def test_a_cancelled_scale_down_takes_back_its_delete_machine_marks_and_leaves_a_hand_placed_one(
    site: Site,
) -> None:
    """cluster-autoscaler clears its marks when a scale-down fails: a mark left behind would make
    the MachineSet delete that Machine first at its next scale-down, whoever asks for it."""
    nodes, handle = _alpha_with_blocked_pods(site)
    machine_of = {m["status"]["nodeRef"]["name"]: m["metadata"]["name"] for m in site.alpha.machines()}
    by_hand, ours = (path(site.capi_namespace, "machines", machine_of[n]) for n in nodes)
    rest.patch(
        site.management_admin, by_hand, {"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "yes"}}}
    )
    # Phase 1 long enough that the PDB holds the drain until the cancel (no forced phase 2).
    settings = replace(FAST, graceful_window=timedelta(minutes=5), drain_timeout=timedelta(minutes=5))
    ops = new_operations(Store(site.db), {"alpha": handle}, {}, SystemClock(), settings=settings)
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))

    def annotations(machine: str) -> dict[str, str]:
        return dict(rest.get(site.management_admin, machine)["metadata"].get("annotations") or {})

    try:
        out = ops.request(_request(OpKind.ZERO))
        assert out.ok and out.operation is not None, out.reply
        op_id = out.operation.id
        waits.wait_until(
            lambda: (op := ops.get(op_id)) is not None and op.step == "drain", 60, "the drain under way"
        )
        assert DELETE_MACHINE_ANNOTATION in annotations(ours), "marked at the cordon step"
        assert ops.cancel(op_id, by="cli:e2e").ok
        assert ops.runner.wait_idle(60), "the cancel did not finish"
    finally:
        ops.runner.stop()
    op = ops.get(op_id)
    assert op is not None and op.state is OpState.CANCELLED, op and op.error
    assert site.alpha.replicas() == 2
    assert DELETE_MACHINE_ANNOTATION not in annotations(ours)
    assert OWN_MARK_ANNOTATION not in annotations(ours)
    assert annotations(by_hand)[DELETE_MACHINE_ANNOTATION] == "yes", "a mark scalebot did not write stays"
    assert f"Took back the deletion marks this operation put on: {machine_of[nodes[1]]}." in "\n".join(texts)


def test_exclude_node_draining_removes_the_machine_without_a_drain(site: Site) -> None:
    nodes, handle = _alpha_with_blocked_pods(site)
    for machine in site.alpha.machines():
        rest.patch(
            site.management_admin,
            path(site.capi_namespace, "machines", machine["metadata"]["name"]),
            {"metadata": {"annotations": {"machine.cluster.x-k8s.io/exclude-node-draining": ""}}},
        )
    ops = site.operations(handle)
    plan = ops.plan(_request(OpKind.ZERO))
    assert plan.nodes == () and sorted(plan.pools[0].not_drained) == sorted(nodes)
    assert "machine.cluster.x-k8s.io/exclude-node-draining" in plan.to_text()
    try:
        zero = _run_with_standin(site, ops, OpKind.ZERO, site.alpha)
    finally:
        ops.runner.stop()
    assert zero.state is OpState.SUCCEEDED, zero.error
    assert (zero.summary.pods_evicted, zero.summary.pods_force_deleted) == (0, 0)
    assert site.alpha.replicas() == 0 and not site.alpha.machines()


def test_node_drain_timeout_stops_the_drain_and_removal_goes_on(site: Site) -> None:
    """A full zero-scale would force-delete the blocked pods after the 5 s phase 1; the pool's
    3 s nodeDrainTimeout ends the drain first, and the Machines go as Cluster API lets them."""
    _, handle = _alpha_with_blocked_pods(site)
    rest.patch(
        site.management_admin,
        path(site.capi_namespace, "machinedeployments", "alpha-md"),
        {"spec": {"template": {"spec": {"deletion": {"nodeDrainTimeoutSeconds": 3}}}}},
    )
    ops = site.operations(handle)
    events: list[str] = []
    ops.subscribe(lambda event: events.append(event.text))
    assert ops.plan(_request(OpKind.ZERO)).pools[0].drain_timeout_seconds == 3
    try:
        zero = _run_with_standin(site, ops, OpKind.ZERO, site.alpha)
    finally:
        ops.runner.stop()
    assert zero.state is OpState.SUCCEEDED, zero.error
    assert "pool alpha-md: nodeDrainTimeout 3s expired; continuing as Cluster API does" in "\n".join(events)
    assert zero.summary.pods_force_deleted == 0, "the timeout, not phase 2, ended the drain"
    assert site.alpha.replicas() == 0


def op_state(ops: Operations, op_id: str) -> OpState | None:
    op = ops.get(op_id)
    return op.state if op else None


def test_a_pre_drain_hook_is_waited_for_and_reported(site: Site) -> None:
    """The hooked Machine is left to Cluster API (hooks, then its drain); the operation waits,
    says which hook holds it, and ends once the hook's owner removed it."""
    nodes = site.alpha.create(2)
    site.grant_kubeconfig_secret()
    hooked_machine = next(m for m in site.alpha.machines() if m["status"]["nodeRef"]["name"] == nodes[0])
    hook = "pre-drain.delete.hook.machine.cluster.x-k8s.io/etcd-member"
    machine_path = path(site.capi_namespace, "machines", hooked_machine["metadata"]["name"])
    rest.patch(site.management_admin, machine_path, {"metadata": {"annotations": {hook: "kcp"}}})
    ops = site.operations(site.connect())
    plan = ops.plan(_request(OpKind.ZERO))
    assert plan.nodes == (nodes[1],), "scalebot drains only the node without a hook"
    assert f"{nodes[0]}: its Machine has pre-drain hook(s) {hook}" in plan.to_text()
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    reconciler = Reconciler([site.alpha]).start()
    try:
        out = ops.request(_request(OpKind.ZERO))
        assert out.ok, out.reply
        waiting = f"Waiting for Cluster API: node {nodes[0]}: Machine waits for pre-drain hook(s) {hook}"
        waits.wait_until(lambda: waiting in texts, 60, "the hook reported in the thread")
        waits.wait_until(
            lambda: rest.get(site.management_admin, machine_path)["metadata"].get("deletionTimestamp"),
            30,
            "the Machine deleted (scalebot lowered the replicas) and held by its hook",
        )
        assert op_state(ops, out.operation.id) is OpState.RUNNING, "the operation waits for the hook"
        condition = (
            f"Deleting True (WaitingForPreDrainHook: Waiting for pre-drain hooks to succeed (hooks: {hook}))"
        )
        waits.wait_until(
            lambda: any(condition in t for t in texts), 30, "the Machine's own condition in the thread"
        )
        rest.patch(site.management_admin, machine_path, {"metadata": {"annotations": {hook: None}}})
        assert ops.runner.wait_idle(60), "operation did not finish once the hook was removed"
    finally:
        ops.runner.stop()
        reconciler.stop()
    op = ops.get(out.operation.id)
    assert op is not None and op.state is OpState.SUCCEEDED, op and op.error
    assert site.alpha.replicas() == 0 and not site.alpha.machines()


def test_removal_waits_for_volumes_to_detach(site: Site) -> None:
    """Cluster API deletes a drained Machine only once its Node's status.volumesAttached is empty
    (the attach/detach controller clears it); so does scalebot's removal."""
    nodes = site.alpha.create(2)
    site.grant_kubeconfig_secret()
    attached = {
        "status": {
            "volumesAttached": [{"name": "kubernetes.io/csi/ebs.csi.aws.com^vol-0a1", "devicePath": ""}]
        }
    }
    rest.patch(site.workload_admin, rest.node_path(nodes[0]) + "/status", attached)
    ops = site.operations(site.connect())
    assert ops.plan(_request(OpKind.ZERO)).pools[0].detach_wait == tuple(sorted(nodes))
    texts: list[str] = []
    ops.subscribe(lambda event: texts.append(event.text))
    reconciler = Reconciler([site.alpha]).start()
    try:
        out = ops.request(_request(OpKind.ZERO))
        assert out.ok, out.reply
        waiting = (
            f"Waiting for volumes to detach before removal, as Cluster API does: {nodes[0]} (1 attached)"
        )
        waits.wait_until(lambda: waiting in texts, 60, "the wait for the volume reported in the thread")
        assert site.alpha.replicas() == 2, "nothing removed while a volume is attached"
        rest.patch(
            site.workload_admin, rest.node_path(nodes[0]) + "/status", {"status": {"volumesAttached": None}}
        )
        assert ops.runner.wait_idle(60), "operation did not finish once the volume detached"
    finally:
        ops.runner.stop()
        reconciler.stop()
    op = ops.get(out.operation.id)
    assert op is not None and op.state is OpState.SUCCEEDED, op and op.error
    assert site.alpha.replicas() == 0


def _bound_token(admin: Any, holder: str) -> str:
    """A token for scalebot's ServiceAccount that the API server rejects once the Secret `holder`
    (in scalebot's namespace) is deleted: credentials that can be revoked, as a rotation does."""
    secret = rest.create(admin, "/api/v1/namespaces/scalebot/secrets", {"metadata": {"name": holder}})
    ref = {"kind": "Secret", "apiVersion": "v1", "name": holder, "uid": secret["metadata"]["uid"]}
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
    path = "/api/v1/namespaces/scalebot/serviceaccounts/scalebot/token"
    issued = rest.create(admin, path, {**request, "spec": {"boundObjectRef": ref}})
    return str(issued["status"]["token"])


def _kubeconfig_with(plane: ControlPlane, token: str) -> str:
    config = yaml.safe_load(plane.scalebot_kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    return yaml.safe_dump(config)


def _revoke(site: Site, holder: str, kubeconfig: str) -> None:
    """Delete the token's holder and wait until the API server answers its token with 401."""
    rest.delete(site.workload_admin, f"/api/v1/namespaces/scalebot/secrets/{holder}")
    inline = parse_inline_kubeconfig(kubeconfig, where="the revoked token")
    revoked = KubeClient.from_inline_kubeconfig(inline)

    def rejected() -> bool:
        try:
            revoked.list_nodes(label_selector="scalebot.test/none")
        except errors.KubeError as exc:
            return exc.status == 401
        return False

    try:
        waits.wait_until(rejected, 30, f"the token bound to {holder} is rejected")
    finally:
        revoked.close()


def test_rotated_workload_credentials_are_read_again_from_the_secret_after_a_401(site: Site) -> None:
    """Cluster API rotates the workload kubeconfig in `<cluster>-kubeconfig`; the credentials scalebot
    connected with stop working (401). The workload client reads the Secret again once and goes on;
    when the Secret's credentials are dead too, the 401 is an error after that one re-read."""
    nodes = site.alpha.create(1)
    holders = [f"{site.capi_namespace}-first", f"{site.capi_namespace}-second"]
    first, second = (_kubeconfig_with(site.workload, _bound_token(site.workload_admin, h)) for h in holders)
    _secret_for_scalebot(site.management, site.management_admin, site.capi_namespace, "alpha", first)
    handle = site.connect()
    try:
        assert handle.api.list_nodes(), "connected with the first credentials"
        secret = f"/api/v1/namespaces/{site.capi_namespace}/secrets/alpha-kubeconfig"
        rest.patch(site.management_admin, secret, {"data": {"value": _encoded(second)}})  # the rotation
        _revoke(site, holders[0], first)

        listed = {n.name for n in handle.api.list_nodes()}
        assert listed >= set(nodes), "the Secret was read again after the 401"

        _revoke(site, holders[1], second)  # dead credentials in the Secret as well
        with pytest.raises(errors.KubeError) as refused:
            handle.api.list_nodes()
        assert refused.value.status == 401
    finally:
        handle.api.close()

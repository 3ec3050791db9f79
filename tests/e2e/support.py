"""Set-up shared by the e2e and reliability suites on the real control plane.

A cluster here is this test's own label pools (its `pool_key` fixture, from tests/conftest.py, as
is `kube`, scalebot's own client): `pools()` makes them (all under the selector `group()`),
`operations()` gives the real Operations over them (cluster "e2e") for a block, its runner stopped
when the block ends; `deployment()` / `budget()` put workloads and their PodDisruptionBudgets there
and wait until the controllers have seen them; `request()` / `run()` ask for an operation and wait
for its end, `finish()` / `wait_for_step()` wait for one already asked for; `cloud_operations()` /
`run_on()` do the same for a cloud provider's cluster (eks, gke, aks) against its stand-in;
`scalebot_args()` is the command line of `python -m bot` against the same cluster, and `journal()` reads the
operations' journal as a second reader would.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from engine.domain.clock import SystemClock
from engine.domain.operation import Operation, OperationRequest, OpKind, OpState, Target
from engine.domain.settings import RunnerSettings
from engine.kube.client import KubeClient
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.labels import LabelPoolProvider
from engine.store.database import Store
from engine.workloads import WorkloadConfig, WorkloadScaler
from localcluster import objects, rest, waits

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "e2e"
FAST = RunnerSettings(
    graceful_window=timedelta(seconds=8),
    pass_interval=timedelta(seconds=2),
    settle=timedelta(seconds=1),
    drain_timeout=timedelta(seconds=60),
    workers=2,
    workloads_return_timeout=timedelta(seconds=90),
)


GROUP_LABEL = "scalebot.test/group"
"""Every node `pools()` makes carries it with the test's unique name: the test's pods select it."""


def group(unique_name: str) -> dict[str, str]:
    """The node selector of all the test's pools (and of no other test's nodes)."""
    return {GROUP_LABEL: unique_name}


def label_cluster(kube: KubeClient, pool_key: str, *, name: str = CLUSTER) -> ClusterHandle:
    """The test's label pools as one cluster, as scalebot's ServiceAccount sees it."""
    return ClusterHandle(
        name, kube, LabelPoolProvider(kube, kube.api_client, label=pool_key, namespace="scalebot")
    )


def with_workloads(kube: KubeClient, pool_key: str, namespace: str, **changes: Any) -> ClusterHandle:
    """`label_cluster` whose workloads provider scales the Deployments and StatefulSets of
    `namespace`; `changes` sets other fields of the handle (e.g. `wake_waves`)."""
    scaler = WorkloadScaler.from_kube_client(kube, WorkloadConfig(namespaces=(namespace,)))
    return dataclasses.replace(label_cluster(kube, pool_key), workloads=scaler, **changes)


@contextmanager
def operations(
    kube: KubeClient,
    pool_key: str,
    db: Path,
    settings: RunnerSettings = FAST,
    *,
    handle: ClusterHandle | None = None,
) -> Iterator[Operations]:
    """The real Operations over the test's cluster (`handle`, by default its label pools), whose
    runner is stopped when the block ends, whether the test passed or not."""
    cluster = handle if handle is not None else label_cluster(kube, pool_key)
    ops = new_operations(Store(db), {CLUSTER: cluster}, {}, SystemClock(), settings=settings)
    try:
        yield ops
    finally:
        ops.runner.stop()


def pools(
    node_pool: Callable[..., list[str]], pool_key: str, unique_name: str, **sizes: int
) -> dict[str, list[str]]:
    """One kwok node pool per keyword (`a=2`: pool `<unique_name>-a` of 2 nodes), all in one group."""
    made = {}
    for name, count in sizes.items():
        full = f"{unique_name}-{name}"
        made[name] = node_pool(count, name=full, labels={pool_key: full, **group(unique_name)})
    return made


def deployment(
    admin_api: Any, namespace: str, name: str, replicas: int, *, grace: int = 1, **kwargs: Any
) -> dict[str, Any]:
    """A Deployment of pause pods (selector app=<name>), once it is available; `kwargs` go to
    `objects.create_deployment` (node_selector, pod_annotations, ...)."""
    objects.create_deployment(admin_api, namespace, name, replicas, grace=grace, **kwargs)
    return waits.wait_for_deployment_available(admin_api, namespace, name)


def budget(
    admin_api: Any,
    namespace: str,
    name: str,
    *,
    app: str,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    expected_pods: int | None = None,
) -> dict[str, Any]:
    """A PodDisruptionBudget over the pods app=<app>, once the disruption controller has observed
    it (with `expected_pods`: once it counts that many); until then it refuses every eviction."""
    objects.create_pdb(
        admin_api,
        namespace,
        name,
        match_labels={"app": app},
        min_available=min_available,
        max_unavailable=max_unavailable,
    )
    return waits.wait_for_pdb_observed(admin_api, namespace, name, expected_pods=expected_pods)


def request(kind: OpKind, *pool_names: str, requested_by: str = "cli:e2e", **target: Any) -> OperationRequest:
    """An operation on the test's cluster: its pools (none: all of them) and other `Target` fields
    (size, force, workloads, workloads_only, ...)."""
    return OperationRequest(
        kind=kind, target=Target(cluster=CLUSTER, pools=pool_names, **target), requested_by=requested_by
    )


def finish(ops: Operations, op_id: str, timeout: float = 120) -> Operation:
    """Wait for the end of the operation already requested; return it as stored."""
    assert ops.runner.wait_idle(timeout), "operation did not finish in time"
    op = ops.get(op_id)
    assert op is not None
    return op


def run(ops: Operations, req: OperationRequest, timeout: float = 120) -> Any:
    """Request, wait for the end, return the operation as stored."""
    out = ops.request(req)
    assert out.ok, out.reply
    return finish(ops, out.operation.id, timeout)


CLOUD_FAST = dataclasses.replace(
    FAST,
    graceful_window=timedelta(seconds=5),
    pass_interval=timedelta(seconds=1),
    # A wake follows workloads not yet back this long (a keeper pinned to a node the wake does not
    # bring back must not hold the test for long).
    workloads_return_timeout=timedelta(seconds=10),
)
"""The pacing of the cloud providers' tests (eks, gke, aks) against their stand-ins."""


def cloud_operations(db: Path, handle: ClusterHandle) -> Operations:
    """The real Operations over one cloud provider's cluster (named as its handle) at CLOUD_FAST;
    the test stops its runner."""
    return new_operations(Store(db), {handle.name: handle}, {}, SystemClock(), settings=CLOUD_FAST)


def run_on(ops: Operations, cluster: str, kind: OpKind, *pools: str, size: int | None = None) -> Operation:
    """An operation on `cluster`'s pools (none: all of them) requested as the CLI, run to its end
    (the cloud stand-ins' operations take a few reconcile rounds each); returned as stored."""
    req = OperationRequest(
        kind=kind, target=Target(cluster=cluster, pools=pools, size=size), requested_by="cli:e2e"
    )
    return run(ops, req, timeout=180)


def pod_uids(admin_api: Any, namespace: str, app: str) -> dict[str, str]:
    """uid -> node of the pods of Deployment `app` (created by `objects.create_deployment`)."""
    return {
        p["metadata"]["uid"]: p["spec"].get("nodeName", "")
        for p in rest.list_pods(admin_api, namespace)
        if p["metadata"].get("labels", {}).get("app") == app
    }


def wait_for_step(ops: Operations, op_id: str, step: str, timeout: float = 60) -> None:
    """Wait until the operation is running its `step` (e.g. "drain": phase 1 under way)."""

    def there() -> bool:
        op = ops.get(op_id)
        return op is not None and op.state is OpState.RUNNING and op.step == step

    waits.wait_until(there, timeout, f"the operation to reach {step}")


def scalebot_args(kubeconfig: Path, db: Path, pool_key: str, *, graceful_window: str = "") -> list[str]:
    """The options of `python -m bot <command>` that point it at the test's cluster and database."""
    args = ["--kubeconfig", str(kubeconfig), "--db", str(db), "--pool-label", pool_key, "--cluster", CLUSTER]
    return [*args, "--graceful-window", graceful_window] if graceful_window else args


def journal(db: Path) -> list[tuple[str, str, str]]:
    """(op_id, step, event) of every journal row, in order; [] before the schema is committed."""
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT op_id, step, event FROM journal ORDER BY id").fetchall()
        except sqlite3.OperationalError as exc:  # the file exists, its schema is not committed yet
            if "no such table" in str(exc):
                return []
            raise


class Reconciler(Protocol):
    """A test harness stand-in for a controller: one reconcile pass, and the errors it met."""

    errors: list[Exception]

    def reconcile(self) -> None: ...


class StandInLoop:
    """Runs a stand-in's reconcile every `interval` seconds in a thread until stopped.

    Errors are kept on the stand-in for the test to report; the loop goes on, as a controller does.
    """

    def __init__(self, standin: Reconciler, *, name: str, interval: float) -> None:
        self.standin = standin
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> StandInLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.standin.reconcile()
            except Exception as exc:
                self.standin.errors.append(exc)


PROMPT_RETURN_SECONDS = 60.0
SCHEDULER_RETRY_BOUND_SECONDS = 300.0
"""kube-scheduler's podMaxInUnschedulablePodsDuration: a pod it found unschedulable is retried on
the next node or pod event that could help it, and in any case within these 5 minutes."""


def wait_for_return(admin_api: Any, namespace: str, name: str, *, node_prefix: str) -> dict[str, Any]:
    """The Deployment `name` available again after a wake brought its nodes back.

    Usually that takes seconds: the re-created nodes' events send its pending pods to the scheduler
    again and kwok runs them. Once in a full CI run it took longer than 90 s, cause not captured. A
    return slower than PROMPT_RETURN_SECONDS is noted at the end of the run (also when the test then
    passes) with the pods, events and nodes as they were then; the test fails only past the
    scheduler's own retry bound.
    """
    from localcluster.waits import WaitTimeout, wait_for_deployment_available
    from tests.cluster_state import read_cluster_state
    from tests.conftest import note_in_summary

    try:
        return wait_for_deployment_available(admin_api, namespace, name, timeout=PROMPT_RETURN_SECONDS)
    except WaitTimeout:
        state = read_cluster_state(admin_api, namespace, node_prefix)
    note_in_summary(
        f"Deployment {namespace}/{name} was not available {PROMPT_RETURN_SECONDS:.0f} s after a wake; "
        f"the cluster then:\n{state}"
    )
    remaining = SCHEDULER_RETRY_BOUND_SECONDS - PROMPT_RETURN_SECONDS
    return wait_for_deployment_available(admin_api, namespace, name, timeout=remaining)


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KEDA_CRD_NAME = "scaledobjects.keda.sh"
PRESERVE_UNKNOWN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
KEDA_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": KEDA_CRD_NAME},
    "spec": {
        "group": "keda.sh",
        "scope": "Namespaced",
        "names": {
            "kind": "ScaledObject",
            "listKind": "ScaledObjectList",
            "plural": "scaledobjects",
            "singular": "scaledobject",
        },
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": PRESERVE_UNKNOWN},
            }
        ],
    },
}
"""A minimal ScaledObject CRD (no KEDA operator here: only the API matters to scalebot)."""


def install_crd(api: Any, crd: dict[str, Any]) -> None:
    """Create `crd` (after any earlier copy is fully gone) and wait until it is served."""
    name = crd["metadata"]["name"]
    waits.wait_until(lambda: rest.get_or_none(api, f"{CRDS}/{name}") is None, 60, f"no CRD {name}")
    rest.create(api, CRDS, crd)

    def established() -> bool:
        conditions = rest.get(api, f"{CRDS}/{name}").get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    waits.wait_until(established, 30.0, f"the CRD {name} to be Established")


def remove_crd(api: Any, name: str) -> None:
    """Delete it and wait until it is gone, so the next test can create it again."""
    rest.delete(api, f"{CRDS}/{name}")
    waits.wait_until(lambda: rest.get_or_none(api, f"{CRDS}/{name}") is None, 60, f"CRD {name} gone")


def install_keda_crd(api: Any) -> None:
    install_crd(api, KEDA_CRD)


def remove_keda_crd(api: Any) -> None:
    remove_crd(api, KEDA_CRD_NAME)


FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


@contextmanager
def evictions_rejected_beyond_one_share(admin_api: Any, namespace: str, name: str) -> Iterator[str]:
    """API Priority and Fairness (configured as the admin) gives scalebot's evictions in `namespace`
    a priority level `name` of their own: one nominal share of the server's 600 seats (about 3),
    nothing lent or borrowed, `Reject` beyond them, so the kube-apiserver itself answers 429 (no
    budget cause) to what it cannot seat. Everything else scalebot sends, and every other test's
    evictions, keep their usual level. Both objects are removed when the block ends, also on failure."""
    level = {
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 1,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,  # unset, the level would borrow from the lenders unbounded
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    scalebot = {"kind": "ServiceAccount", "serviceAccount": {"name": "scalebot", "namespace": "scalebot"}}
    evictions = {
        "verbs": ["create"],
        "apiGroups": [""],
        "resources": ["pods/eviction"],
        "namespaces": [namespace],
    }
    schema = {
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 100,  # before the built-in service-accounts schema (9000)
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [scalebot], "resourceRules": [evictions]}],
        },
    }
    rest.create(admin_api, f"{FLOWCONTROL}/prioritylevelconfigurations", level)
    try:
        rest.create(admin_api, f"{FLOWCONTROL}/flowschemas", schema)
        yield name
    finally:
        rest.delete(admin_api, f"{FLOWCONTROL}/flowschemas/{name}")
        rest.delete(admin_api, f"{FLOWCONTROL}/prioritylevelconfigurations/{name}")

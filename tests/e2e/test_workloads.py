"""The workloads provider against the real control plane, run as scalebot's ServiceAccount.

Fixtures are created as the admin; the scaler runs with scalebot's kubeconfig, so every list and
patch it sends is checked by the shipped RBAC (plus the rules marked TODO(rbac) below, which the
manifests do not have yet). Proves: sleep writes 0 replicas / suspend / paused-replicas together
with `scalebot.io/original` in one patch under field manager "scalebot"; exclusions (configured
namespace, namespace annotation, workload annotation, future and expired dates) hold; wake restores
exact values from the database records or, with the database lost, from the annotations; objects
at rest before sleep stay so; objects changed while asleep are skipped and reported unless forced;
a KEDA ScaledObject's pre-existing paused-replicas comes back; availability figures match.
Synchronisation is by deadline-bound polling only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.kube.client import KubeClient
from engine.workloads import (
    KEDA_PAUSED_ANNOTATION,
    ORIGINAL_ANNOTATION,
    SYSTEM_NAMESPACES,
    Outcome,
    WorkloadConfig,
    WorkloadRecord,
    WorkloadScaler,
)
from engine.workloads.config import DEFAULT_OWN_NAMESPACE
from engine.workloads.kube import KubeWorkloadApi
from engine.workloads.model import ORIGINALS_CONFIGMAP as CONFIGMAP
from localcluster import bodies, objects, rest, waits
from tests.e2e import support

pytestmark = pytest.mark.e2e

Json = dict[str, Any]
NodePool = Callable[..., list[str]]
RUN_LABEL = "scalebot.test/workloads-run"

# -- fixtures ------------------------------------------------------------------------------------


def _can(api: Any, group: str, resource: str, verb: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": group, "resource": resource, "verb": verb}},
    }
    return bool(
        rest.create(api, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)["status"][
            "allowed"
        ]
    )


@pytest.fixture(scope="module")
def workload_rbac(scalebot_api: Any) -> None:
    """The shipped RBAC alone must let scalebot read HPAs and pause KEDA ScaledObjects."""
    assert _can(scalebot_api, "autoscaling", "horizontalpodautoscalers", "list")
    assert _can(scalebot_api, "keda.sh", "scaledobjects", "patch")


@pytest.fixture
def kube(scalebot_kubeconfig: Path, workload_rbac: None) -> Iterator[KubeClient]:
    """scalebot's own client, from the ServiceAccount kubeconfig."""
    client = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    yield client
    client.close()


class Cluster:
    """The test's namespaces (labelled for this run only) and a kwok pool for their pods."""

    def __init__(self, admin: Any, main: str, pool: str) -> None:
        self.admin, self.main, self.pool = admin, main, pool
        self.extra: list[str] = []
        self.run = main  # unique per test: the label value that selects this test's namespaces
        rest.patch(admin, f"/api/v1/namespaces/{main}", {"metadata": {"labels": {RUN_LABEL: self.run}}})

    def config(self, **kwargs: Any) -> WorkloadConfig:
        return WorkloadConfig(namespace_selector=f"{RUN_LABEL}={self.run}", **kwargs)

    def namespace(self, suffix: str, **annotations: str) -> str:
        name = f"{self.main}-{suffix}"
        objects.create_namespace(self.admin, name, labels={RUN_LABEL: self.run})
        self.extra.append(name)
        if annotations:
            rest.patch(self.admin, f"/api/v1/namespaces/{name}", {"metadata": {"annotations": annotations}})
        return name

    def deployment(self, name: str, replicas: int, *, ns: str = "", **annotations: str) -> None:
        ns = ns or self.main
        objects.create_deployment(
            self.admin, ns, name, replicas, node_selector={bodies.POOL_LABEL: self.pool}, cpu="10m"
        )
        if annotations:
            rest.patch(self.admin, _path("Deployment", ns, name), {"metadata": {"annotations": annotations}})

    def statefulset(self, name: str, replicas: int) -> None:
        objects.create_statefulset(
            self.admin, self.main, name, replicas, node_selector={bodies.POOL_LABEL: self.pool}, cpu="10m"
        )

    def cronjob(self, name: str, *, suspend: bool) -> None:
        container = {"name": "job", "image": bodies.PAUSE_IMAGE}
        body = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name},
            "spec": {
                "schedule": "0 3 * * *",
                "suspend": suspend,
                "jobTemplate": {
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
                },
            },
        }
        rest.create(self.admin, f"/apis/batch/v1/namespaces/{self.main}/cronjobs", body)

    def get(self, kind: str, name: str, ns: str = "") -> Json:
        return rest.get(self.admin, _path(kind, ns or self.main, name))

    def stored(self, kind: str, name: str) -> dict[str, Any] | None:
        """scalebot's record of one object in its ConfigMap `scalebot-workloads` (None: no record)."""
        cm = rest.get_or_none(
            self.admin, f"/api/v1/namespaces/{DEFAULT_OWN_NAMESPACE}/configmaps/{CONFIGMAP}"
        )
        text = ((cm or {}).get("data") or {}).get(f"{kind.lower()}.{self.main}.{name}")
        return None if text is None else dict(json.loads(text))

    def set_replicas(self, name: str, replicas: int) -> None:
        """Another writer (a person, GitOps) changes a sleeping workload."""
        rest.patch(self.admin, _path("Deployment", self.main, name), {"spec": {"replicas": replicas}})


@pytest.fixture
def cluster(admin_api: Any, namespace: str, node_pool: NodePool, unique_name: str) -> Iterator[Cluster]:
    pool = f"{unique_name}-wl"
    node_pool(2, name=pool)
    env = Cluster(admin_api, namespace, pool)
    yield env
    for name in env.extra:
        objects.delete_namespace(admin_api, name)


_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
    "CronJob": "/apis/batch/v1/namespaces/{ns}/cronjobs/{name}",
    "ScaledObject": "/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects/{name}",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}",
}


def _path(kind: str, ns: str, name: str) -> str:
    return _PATHS[kind].format(ns=ns, name=name)


def _annotations(obj: Json) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def _original(obj: Json) -> dict[str, Any] | None:
    text = _annotations(obj).get(ORIGINAL_ANNOTATION)
    return None if text is None else dict(json.loads(text))


def _stored_values(record: dict[str, Any] | None) -> tuple[Any, Any] | None:
    """(original, target) of a ConfigMap record."""
    return None if record is None else (record["original"], record["target"])


def _keys(outcomes: tuple[Outcome, ...]) -> list[str]:
    return [o.key for o in outcomes]


def _reasons(outcomes: tuple[Outcome, ...]) -> dict[str, str]:
    return {o.key: o.reason for o in outcomes}


def _patches(kube: KubeClient) -> int:
    """PATCH requests scalebot's client has sent so far (the client counts every request)."""
    return sum(n for (verb, _), n in kube.request_counts.items() if verb == "patch")


def _wait_available(scaler: WorkloadScaler, available: int, total: int) -> None:
    waits.wait_until(
        lambda: scaler.availability()[:2] == (available, total),
        90.0,
        f"{available}/{total} workloads available",
    )


# -- tests ---------------------------------------------------------------------------------------


def test_sleep_and_wake_round_trip_with_exclusions(cluster: Cluster, kube: KubeClient) -> None:
    main = cluster.main
    quiet = cluster.namespace("quiet", **{"scalebot.io/exclude": "true"})
    protected = cluster.namespace("protected")
    cluster.deployment("web", 3)
    cluster.statefulset("db", 2)
    cluster.deployment("idle", 0)
    cluster.deployment("keep", 2, **{"scalebot.io/exclude": "true"})
    cluster.deployment("stale", 2, **{"scalebot.io/exclude-until": "2020-01-01"})
    cluster.deployment("later", 1, **{"downscaler/exclude-until": "2099-01-01"})
    cluster.deployment("q", 1, ns=quiet)
    cluster.deployment("p", 1, ns=protected)
    cluster.cronjob("nightly", suspend=False)
    cluster.cronjob("paused", suspend=True)
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }
    rest.create(cluster.admin, f"/apis/autoscaling/v2/namespaces/{main}/horizontalpodautoscalers", hpa)
    scaler = WorkloadScaler.from_kube_client(
        kube, cluster.config(excluded_namespaces=(*SYSTEM_NAMESPACES, protected))
    )
    # web, db, keep, stale, later in main and q in quiet; `protected` is not counted.
    _wait_available(scaler, 6, 6)
    assert scaler.snapshot().keda_available is False  # no KEDA CRD in this cluster: no error either

    recorded: list[WorkloadRecord] = []
    report = scaler.sleep(record=recorded.append)

    assert report.headline == "4/4 workloads put to sleep", report.render()
    assert _reasons(report.changed) == {
        f"CronJob/{main}/nightly": "suspend=false → suspend=true",
        f"Deployment/{main}/stale": "2 replicas → 0 replicas",
        f"Deployment/{main}/web": "3 replicas → 0 replicas",
        f"StatefulSet/{main}/db": "2 replicas → 0 replicas",
    }
    assert _reasons(report.unchanged) == {
        f"CronJob/{main}/paused": "already suspended before sleep; stays suspended after wake",
        f"Deployment/{main}/idle": "already at 0 replicas before sleep; stays at 0 after wake",
    }
    assert _reasons(report.excluded) == {
        f"Deployment/{main}/keep": "annotation scalebot.io/exclude=true",
        f"Deployment/{main}/later": (
            "annotation downscaler/exclude-until=2099-01-01 (excluded until 2099-01-01T00:00:00Z)"
        ),
        f"Deployment/{protected}/p": f"namespace {protected} is excluded by configuration",
        f"Deployment/{quiet}/q": "namespace annotation scalebot.io/exclude=true",
    }
    assert report.skipped == report.errors == ()
    assert report.notes == (
        Outcome(
            f"Deployment/{main}/stale", "scalebot.io/exclude-until=2020-01-01 expired at 2020-01-01T00:00:00Z"
        ),
        Outcome(
            f"HorizontalPodAutoscaler/{main}/web",
            f"targets Deployment/{main}/web: left as it is; with 0 replicas the HPA reports ScalingDisabled "
            "and stops scaling until wake restores the replicas",
        ),
    )
    # The database copy was handed over before each patch, and equals what the report returns.
    assert (
        sorted(r.key for r in recorded)
        == sorted(r.key for r in report.records)
        == sorted(_keys(report.changed))
    )

    # Replicas changed through the scale subresource (this ServiceAccount may not patch the
    # Deployment itself, test_manifests); the originals are in scalebot's ConfigMap, nothing is
    # written on the objects themselves.
    web = cluster.get("Deployment", "web")
    assert web["spec"]["replicas"] == 0
    assert _original(web) is None
    assert _stored_values(cluster.stored("Deployment", "web")) == (3, 0)
    db = cluster.get("StatefulSet", "db")
    assert (_original(db), _stored_values(cluster.stored("StatefulSet", "db"))) == (None, (2, 0))
    assert cluster.get("Deployment", "stale")["spec"]["replicas"] == 0
    nightly = cluster.get("CronJob", "nightly")
    assert nightly["spec"]["suspend"] is True
    assert _original(nightly) is None
    assert _stored_values(cluster.stored("CronJob", "nightly")) == (False, True)
    for kind, name, ns, replicas_or_suspend in [
        ("CronJob", "paused", main, True),
        ("Deployment", "idle", main, 0),
        ("Deployment", "keep", main, 2),
        ("Deployment", "later", main, 1),
        ("Deployment", "q", quiet, 1),
        ("Deployment", "p", protected, 1),
    ]:
        obj = cluster.get(kind, name, ns)
        field = "suspend" if kind == "CronJob" else "replicas"
        assert (obj["spec"][field], _original(obj)) == (replicas_or_suspend, None), f"{kind}/{ns}/{name}"

    # Upstream behaviour the report promises: the HPA stays, reports ScalingDisabled, scales nothing.
    def scaling_disabled() -> bool:
        conditions = cluster.get("HorizontalPodAutoscaler", "web").get("status", {}).get("conditions") or []
        return any(c["type"] == "ScalingActive" and c["reason"] == "ScalingDisabled" for c in conditions)

    waits.wait_until(scaling_disabled, 90.0, "HPA web to report ScalingDisabled")

    # A second sleep in the same night writes nothing and keeps the day-time values.
    before = _patches(kube)
    again = scaler.sleep()
    assert again.headline == "0/0 workloads put to sleep"
    assert _reasons(again.unchanged)[f"Deployment/{main}/web"] == "already asleep (3 replicas to restore)"
    assert _patches(kube) == before
    assert _stored_values(cluster.stored("Deployment", "web")) == (3, 0)

    woken = scaler.wake(recorded)

    assert woken.headline == "4/4 workloads restored", woken.render()
    assert _reasons(woken.restored) == {
        f"CronJob/{main}/nightly": "suspend=true → suspend=false",
        f"Deployment/{main}/stale": "0 replicas → 2 replicas",
        f"Deployment/{main}/web": "0 replicas → 3 replicas",
        f"StatefulSet/{main}/db": "0 replicas → 2 replicas",
    }
    for kind, name, field, value in [
        ("Deployment", "web", "replicas", 3),
        ("StatefulSet", "db", "replicas", 2),
        ("Deployment", "stale", "replicas", 2),
        ("Deployment", "idle", "replicas", 0),
        ("CronJob", "nightly", "suspend", False),
        ("CronJob", "paused", "suspend", True),
    ]:
        obj = cluster.get(kind, name)
        assert (obj["spec"][field], _original(obj)) == (value, None), f"{kind}/{name}"
        assert cluster.stored(kind, name) is None, f"{kind}/{name}: its record is dropped on wake"

    _wait_available(scaler, 6, 6)
    assert scaler.availability() == (6, 6, [])


def test_availability_reports_what_is_not_available(cluster: Cluster, kube: KubeClient) -> None:
    cluster.deployment("web", 2)
    # No node carries this pool label: the pod stays Pending.
    objects.create_deployment(
        cluster.admin, cluster.main, "nowhere", 1, node_selector={bodies.POOL_LABEL: "no-such-pool"}
    )
    scaler = WorkloadScaler.from_kube_client(kube, cluster.config())

    waits.wait_until(
        lambda: (a := scaler.availability()).available == 1 and a.not_ready[0][1] != "0/1 replicas available",
        90.0,
        "web available and the Deployment controller's verdict on nowhere",
    )
    available, total, not_ready = scaler.availability()
    assert (available, total) == (1, 2)
    assert not_ready == [
        (
            f"Deployment/{cluster.main}/nowhere",
            "0/1 replicas available "
            "(MinimumReplicasUnavailable: Deployment does not have minimum availability.)",
        )
    ]
    assert scaler.availability().headline == "1/2 workloads available"
    assert scaler.availability([cluster.main + "-none"]) == (0, 0, [])


def test_modified_while_asleep_is_skipped_and_reported_unless_forced(
    cluster: Cluster, kube: KubeClient
) -> None:
    main = cluster.main
    cluster.deployment("web", 3)
    cluster.deployment("api", 2)
    cluster.deployment("plain", 1)
    scaler = WorkloadScaler.from_kube_client(kube, cluster.config())
    slept = scaler.sleep()
    assert slept.headline == "3/3 workloads put to sleep", slept.render()
    records = slept.records
    cluster.set_replicas("web", 5)
    cluster.set_replicas("api", 1)

    woken = scaler.wake(records)

    assert woken.headline == "1/3 workloads restored", woken.render()
    assert _reasons(woken.restored) == {f"Deployment/{main}/plain": "0 replicas → 1 replica"}
    assert _reasons(woken.skipped) == {
        f"Deployment/{main}/api": (
            "modified while asleep: now 1 replica, scalebot had set 0 replicas; "
            "left as it is (original: 2 replicas; force restore applies it)"
        ),
        f"Deployment/{main}/web": (
            "modified while asleep: now 5 replicas, scalebot had set 0 replicas; "
            "left as it is (original: 3 replicas; force restore applies it)"
        ),
    }
    assert f"  * Deployment/{main}/web: modified while asleep: now 5 replicas" in woken.render()
    for name, replicas in [("web", 5), ("api", 1), ("plain", 1)]:
        obj = cluster.get("Deployment", name)
        assert (obj["spec"]["replicas"], _original(obj)) == (replicas, None), name

    (api_record,) = [r for r in records if r.name == "api"]
    forced = scaler.wake([api_record], force_restore=True)
    assert forced.headline == "1/1 workloads restored"
    assert _reasons(forced.restored) == {
        f"Deployment/{main}/api": "1 replica → 2 replicas (forced: modified while asleep)"
    }
    assert cluster.get("Deployment", "api")["spec"]["replicas"] == 2


def test_wake_without_database_restores_from_the_configmap(
    cluster: Cluster, kube: KubeClient, scalebot_kubeconfig: Path
) -> None:
    main = cluster.main
    cluster.deployment("web", 3)
    cluster.statefulset("db", 2)
    cluster.deployment("idle", 0)
    cluster.cronjob("nightly", suspend=False)
    cluster.cronjob("paused", suspend=True)
    slept = WorkloadScaler.from_kube_client(kube, cluster.config()).sleep()  # its records are lost
    assert slept.headline == "3/3 workloads put to sleep", slept.render()
    assert _original(cluster.get("Deployment", "web")) is None  # only the ConfigMap has it
    assert _stored_values(cluster.stored("Deployment", "web")) == (3, 0)

    with KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig)) as fresh:
        woken = WorkloadScaler.from_kube_client(fresh, cluster.config()).wake(None)

    assert woken.headline == "3/3 workloads restored", woken.render()
    assert _keys(woken.restored) == [
        f"CronJob/{main}/nightly",
        f"Deployment/{main}/web",
        f"StatefulSet/{main}/db",
    ]
    for kind, name, field, value in [
        ("Deployment", "web", "replicas", 3),
        ("StatefulSet", "db", "replicas", 2),
        ("Deployment", "idle", "replicas", 0),
        ("CronJob", "nightly", "suspend", False),
        ("CronJob", "paused", "suspend", True),
    ]:
        obj = cluster.get(kind, name)
        assert (obj["spec"][field], _original(obj)) == (value, None), f"{kind}/{name}"
        assert cluster.stored(kind, name) is None, f"{kind}/{name}"


def test_a_workload_put_to_sleep_by_the_previous_version_wakes(cluster: Cluster, kube: KubeClient) -> None:
    """Earlier versions kept the original in `scalebot.io/original` on the object itself."""
    main = cluster.main
    legacy = '{"replicas":3,"set":0,"at":"2026-05-04T18:00:00Z"}'
    cluster.deployment("web", 0, **{ORIGINAL_ANNOTATION: legacy})
    cluster.statefulset("db", 0)
    rest.patch(
        cluster.admin,
        _path("StatefulSet", main, "db"),
        {"metadata": {"annotations": {ORIGINAL_ANNOTATION: '{"replicas":2,"set":0}'}}},
    )
    scaler = WorkloadScaler.from_kube_client(kube, cluster.config())

    woken = scaler.wake(None)

    assert woken.headline == "2/2 workloads restored", woken.render()
    assert cluster.get("Deployment", "web")["spec"]["replicas"] == 3
    assert cluster.get("StatefulSet", "db")["spec"]["replicas"] == 2
    # scalebot may not patch the objects any more: the annotation stays, reported once with the
    # command that removes it, and marked used in the ConfigMap so it is never restored again.
    assert _original(cluster.get("Deployment", "web")) is not None
    notes = _reasons(woken.notes)
    assert notes[f"Deployment/{main}/web"].endswith(
        f"remove it with kubectl annotate -n {main} deployment/web {ORIGINAL_ANNOTATION}-"
    )
    assert f"StatefulSet/{main}/db" in notes
    cluster.set_replicas("web", 0)  # its owner now wants it at 0

    again = scaler.wake(None)

    assert again.headline == "0/0 workloads restored", again.render()
    assert again.notes == ()
    assert cluster.get("Deployment", "web")["spec"]["replicas"] == 0
    # The next sleep records the live day-time value, not the stale annotation's.
    slept = scaler.sleep()
    assert _reasons(slept.changed) == {f"StatefulSet/{main}/db": "2 replicas → 0 replicas"}
    assert _reasons(slept.unchanged)[f"Deployment/{main}/web"] == (
        "already at 0 replicas before sleep; stays at 0 after wake"
    )


def test_second_sleep_keeps_the_day_time_original(cluster: Cluster, kube: KubeClient) -> None:
    main = cluster.main
    cluster.deployment("web", 3)
    scaler = WorkloadScaler.from_kube_client(kube, cluster.config())
    slept = scaler.sleep()
    assert slept.headline == "1/1 workloads put to sleep", slept.render()
    first = cluster.stored("Deployment", "web")
    cluster.set_replicas("web", 4)  # GitOps brought it back during the night

    again = scaler.sleep()

    assert _reasons(again.changed) == {
        f"Deployment/{main}/web": "4 replicas → 0 replicas again (3 replicas to restore, recorded before)"
    }
    web = cluster.get("Deployment", "web")
    assert web["spec"]["replicas"] == 0
    assert cluster.stored("Deployment", "web") == first and _stored_values(first) == (3, 0)
    assert scaler.wake(None).headline == "1/1 workloads restored"
    assert cluster.get("Deployment", "web")["spec"]["replicas"] == 3


# -- KEDA ----------------------------------------------------------------------------------------


@pytest.fixture
def keda_crd(admin_api: Any) -> Iterator[Callable[[], None]]:
    """Installs a minimal ScaledObject CRD on demand (no KEDA operator: only the API matters here)."""
    installed: list[bool] = []

    def install() -> None:
        support.install_keda_crd(admin_api)
        installed.append(True)

    yield install
    if installed:
        support.remove_keda_crd(admin_api)


def _scaledobject(cluster: Cluster, name: str, target: str, paused: str | None) -> None:
    metadata: Json = {"name": name}
    if paused is not None:
        metadata["annotations"] = {KEDA_PAUSED_ANNOTATION: paused}
    body = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"name": target},
            "minReplicaCount": 0,
            "maxReplicaCount": 5,
            "triggers": [],
        },
    }
    rest.create(cluster.admin, f"/apis/keda.sh/v1alpha1/namespaces/{cluster.main}/scaledobjects", body)


def test_keda_paused_replicas_round_trip(
    cluster: Cluster, kube: KubeClient, keda_crd: Callable[[], None]
) -> None:
    main = cluster.main
    api = KubeWorkloadApi(kube)
    assert api.has_keda() is False
    keda_crd()
    waits.wait_until(api.has_keda, 30.0, "keda.sh/v1alpha1 in scalebot's discovery")
    cluster.deployment("worker", 2)
    cluster.deployment("consumer", 1)
    cluster.deployment("web", 1)
    _scaledobject(cluster, "queue", "worker", None)
    _scaledobject(cluster, "events", "consumer", "2")
    scaler = WorkloadScaler.from_kube_client(kube, cluster.config())

    report = scaler.sleep()

    assert report.headline == "3/3 workloads put to sleep", report.render()
    assert _reasons(report.changed) == {
        f"Deployment/{main}/web": "1 replica → 0 replicas",
        f"ScaledObject/{main}/events": 'paused-replicas="2" → paused-replicas="0"',
        f"ScaledObject/{main}/queue": 'no paused-replicas → paused-replicas="0"',
    }
    assert _reasons(report.unchanged) == {
        f"Deployment/{main}/consumer": (
            f"scaled by KEDA ScaledObject/{main}/events; paused through the ScaledObject instead"
        ),
        f"Deployment/{main}/worker": (
            f"scaled by KEDA ScaledObject/{main}/queue; paused through the ScaledObject instead"
        ),
    }
    queue, events = cluster.get("ScaledObject", "queue"), cluster.get("ScaledObject", "events")
    assert _annotations(queue)[KEDA_PAUSED_ANNOTATION] == "0"
    assert (_original(queue), _stored_values(cluster.stored("ScaledObject", "queue"))) == (None, (None, "0"))
    assert _annotations(events)[KEDA_PAUSED_ANNOTATION] == "0"
    assert (_original(events), _stored_values(cluster.stored("ScaledObject", "events"))) == (None, ("2", "0"))
    # KEDA owns its targets' replicas: scalebot left them alone.
    assert cluster.get("Deployment", "worker")["spec"]["replicas"] == 2
    assert cluster.get("Deployment", "consumer")["spec"]["replicas"] == 1

    woken = scaler.wake(report.records)

    assert woken.headline == "3/3 workloads restored", woken.render()
    queue, events = cluster.get("ScaledObject", "queue"), cluster.get("ScaledObject", "events")
    assert KEDA_PAUSED_ANNOTATION not in _annotations(queue)
    assert ORIGINAL_ANNOTATION not in _annotations(queue)
    assert _annotations(events)[KEDA_PAUSED_ANNOTATION] == "2"
    assert ORIGINAL_ANNOTATION not in _annotations(events)
    assert cluster.get("Deployment", "web")["spec"]["replicas"] == 1

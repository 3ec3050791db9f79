"""The field-level admission policy (manifests/base/admission-policy.yaml) on the real API server.

The control plane installs it with scalebot's RBAC (localcluster.controlplane.SCALEBOT_MANIFESTS),
so every e2e test acting as scalebot's ServiceAccount runs under it. Here, a table: for each kind
scalebot patches, as the ServiceAccount, the change scalebot makes is admitted and a whole-object
patch of a field it does not own is refused with the policy's message naming that field. Every
request is a server-side dry run (`dryRun=All`: authorisation and admission exactly as for a real
write, nothing stored), so each row starts from the same object. Without the policy the refused
rows would be admitted: RBAC alone grants `patch` on the whole object.

The CRDs: Cluster API's and Karpenter's NodePool are the real ones (from the pinned modules, as the
harness installs them); Gardener's Shoot is the stand-in's CRD; KEDA's ScaledObject and the GitOps
owners (Argo CD's Application, Flux's Kustomization and HelmRelease) minimal CRDs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from engine.kube import admission
from localcluster import bodies, rest, waits
from localcluster.objects import cordon
from tests.e2e import capi_standin, gardener_standin, gitops_standin, grants, support

if TYPE_CHECKING:
    from engine.kube.client import KubeClient
    from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

Json = dict[str, Any]
POLICY_FILE = Path(__file__).resolve().parents[2] / "manifests" / "base" / "admission-policy.yaml"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODE_DELETE = "scalebot may delete only a node of a label pool (scalebot.io/pool) that carries its taint"
REMOVING = "scalebot.io/removing"
FIELDS = "scalebot-fields"
SHOOTS = "scalebot-shoots"
"""The gardener-shoots grant's own policy (manifests/grants/gardener-shoots/admission-policy.yaml)."""
ALLOWED = ""
DRAINING = {"key": "scalebot.io/draining", "value": "1764230400", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Row:
    kind: str
    what: str
    path: Callable[[Objects], str]
    body: Callable[[Objects], Any]
    refused_field: str
    """"" (ALLOWED): admitted; otherwise the field path the refusal must name."""
    method: str = "PATCH"
    policy: str = FIELDS
    """The policy whose refusal it is."""


@dataclass
class Objects:
    namespace: str
    node: str
    cordoned_node: str
    marked_node: str
    """In a label pool, with scalebot's draining taint and removal mark: what a label pool deletes."""
    foreign_node: str
    """In no pool (no pool label), with the same taint and mark."""
    node_taints: list[Json]
    cronjob: str
    scaledobject: str
    machinedeployment: str
    machine: str
    nodepool: str
    shoot: str
    shoot_workers: list[Json]
    record: str


def _ns(o: Objects, plural: str, name: str, group: str = "") -> str:
    prefix = f"/apis/{group}" if group else "/api/v1"
    return f"{prefix}/namespaces/{o.namespace}/{plural}/{name}"


def _worker(o: Objects, **changes: Any) -> list[Json]:
    first, *others = o.shoot_workers
    return [{**first, **changes}, *others]


def _node(o: Objects) -> str:
    return f"/api/v1/nodes/{o.node}"


def _cronjob(o: Objects) -> str:
    return _ns(o, "cronjobs", o.cronjob, "batch/v1")


def _scaledobject(o: Objects) -> str:
    return _ns(o, "scaledobjects", o.scaledobject, "keda.sh/v1alpha1")


def _md(o: Objects) -> str:
    return capi_standin.path(o.namespace, "machinedeployments", o.machinedeployment)


def _machine(o: Objects) -> str:
    return capi_standin.path(o.namespace, "machines", o.machine)


def _nodepool(o: Objects) -> str:
    return f"{NODEPOOLS}/{o.nodepool}"


def _shoot(o: Objects) -> str:
    return gardener_standin.shoots_path(o.namespace, o.shoot)


def _application(o: Objects) -> str:
    return gitops_standin.path(gitops_standin.ARGO, o.namespace, "shop")


def _kustomization(o: Objects) -> str:
    return gitops_standin.path(gitops_standin.KUSTOMIZE, o.namespace, "apps")


def _helmrelease(o: Objects) -> str:
    return gitops_standin.path(gitops_standin.HELM, o.namespace, "jobs")


def _annotate(**annotations: str | None) -> Callable[[Objects], Json]:
    return lambda o: {"metadata": {"annotations": annotations}}


def _record_path(_: Objects) -> str:
    return "/api/v1/namespaces/scalebot/configmaps"


def _shoot_row(what: str, body: Callable[[Objects], Any], refused_field: str) -> Row:
    return Row("Shoot", what, _shoot, body, refused_field, policy=SHOOTS)


ROWS = [
    # -- Nodes: cordon, scalebot's taint and marks; delete only a node being emptied
    Row("Node", "cordon", _node, lambda o: {"spec": {"unschedulable": True}}, ALLOWED),
    Row(
        "Node", "scalebot's taint", _node, lambda o: {"spec": {"taints": [*o.node_taints, DRAINING]}}, ALLOWED
    ),
    Row("Node", "emptied mark", _node, _annotate(**{"scalebot.io/emptied": "2026-11-27T08:00:00Z"}), ALLOWED),
    Row("Node", "a label", _node, lambda o: {"metadata": {"labels": {"team": "x"}}}, "metadata.labels[team]"),
    Row("Node", "another annotation", _node, _annotate(**{"x.io/y": "1"}), "metadata.annotations[x.io/y]"),
    Row(
        "Node",
        "another taint",
        _node,
        lambda o: {"spec": {"taints": [*o.node_taints, {"key": "x", "effect": "NoSchedule"}]}},
        "spec.taints (other than scalebot.io/draining)",
    ),
    Row(
        "Node",
        "scalebot's taint as NoExecute",
        _node,
        lambda o: {"spec": {"taints": [*o.node_taints, {**DRAINING, "effect": "NoExecute"}]}},
        "spec.taints[scalebot.io/draining].effect",
    ),
    Row(
        "Node", "removal mark", _node, _annotate(**{"scalebot.io/removing": "2026-11-27T08:00:00Z"}), ALLOWED
    ),
    Row("Node", "delete a node in service", _node, lambda o: None, NODE_DELETE, method="DELETE"),
    Row(
        "Node",
        "delete a node only cordoned",
        lambda o: f"/api/v1/nodes/{o.cordoned_node}",
        lambda o: None,
        NODE_DELETE,
        method="DELETE",
    ),
    Row(
        "Node",
        "delete a node outside the pools, tainted and marked",
        lambda o: f"/api/v1/nodes/{o.foreign_node}",
        lambda o: None,
        NODE_DELETE,
        method="DELETE",
    ),
    Row(
        "Node",
        "delete a pool's node, tainted and marked",
        lambda o: f"/api/v1/nodes/{o.marked_node}",
        lambda o: None,
        ALLOWED,
        method="DELETE",
    ),
    # -- CronJobs: spec.suspend, and removing an earlier version's annotation
    Row("CronJob", "suspend", _cronjob, lambda o: {"spec": {"suspend": True}}, ALLOWED),
    Row("CronJob", "old annotation removed", _cronjob, _annotate(**{"scalebot.io/original": None}), ALLOWED),
    Row(
        "CronJob",
        "the job's image",
        _cronjob,
        lambda o: {
            "spec": {
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {"containers": [{"name": "job", "image": "attacker.example/miner"}]}
                        }
                    }
                }
            }
        },
        "spec.jobTemplate",
    ),
    Row("CronJob", "the schedule", _cronjob, lambda o: {"spec": {"schedule": "* * * * *"}}, "spec.schedule"),
    # -- KEDA ScaledObjects: the pause annotation only
    Row(
        "ScaledObject",
        "pause",
        _scaledobject,
        _annotate(**{"autoscaling.keda.sh/paused-replicas": "0"}),
        ALLOWED,
    ),
    Row(
        "ScaledObject",
        "the target",
        _scaledobject,
        lambda o: {"spec": {"scaleTargetRef": {"name": "other"}}},
        "spec.scaleTargetRef",
    ),
    Row(
        "ScaledObject",
        "another annotation",
        _scaledobject,
        _annotate(**{"autoscaling.keda.sh/paused": "true"}),
        "metadata.annotations[autoscaling.keda.sh/paused]",
    ),
    # -- GitOps owners (`gitops: pause`): Argo CD's skip-reconcile annotation, Flux's spec.suspend
    Row(
        "Application",
        "pause (skip-reconcile)",
        _application,
        _annotate(**{"argocd.argoproj.io/skip-reconcile": "true"}),
        ALLOWED,
    ),
    Row(
        "Application",
        "restore (skip-reconcile removed)",
        _application,
        _annotate(**{"argocd.argoproj.io/skip-reconcile": None}),
        ALLOWED,
    ),
    Row(
        "Application",
        "automated sync off",
        _application,
        lambda o: {"spec": {"syncPolicy": None}},
        "spec.syncPolicy",
    ),
    Row(
        "Application",
        "the source",
        _application,
        lambda o: {"spec": {"source": {"repoURL": "https://attacker.example/x.git", "path": "."}}},
        "spec.source",
    ),
    Row(
        "Application",
        "another annotation",
        _application,
        _annotate(**{"argocd.argoproj.io/refresh": "hard"}),
        "metadata.annotations[argocd.argoproj.io/refresh]",
    ),
    Row("Application", "its status", _application, lambda o: {"status": {"resources": []}}, "status"),
    Row("Kustomization", "suspend", _kustomization, lambda o: {"spec": {"suspend": True}}, ALLOWED),
    Row("Kustomization", "suspend unset", _kustomization, lambda o: {"spec": {"suspend": None}}, ALLOWED),
    Row("Kustomization", "the path", _kustomization, lambda o: {"spec": {"path": "./evil"}}, "spec.path"),
    Row(
        "Kustomization",
        "a label",
        _kustomization,
        lambda o: {"metadata": {"labels": {"team": "x"}}},
        "metadata.labels[team]",
    ),
    Row("HelmRelease", "suspend", _helmrelease, lambda o: {"spec": {"suspend": True}}, ALLOWED),
    Row(
        "HelmRelease",
        "the values",
        _helmrelease,
        lambda o: {"spec": {"values": {"image": "attacker.example/miner"}}},
        "spec.values",
    ),
    # -- Cluster API MachineDeployments: replicas (/scale, and with the removal ledger), min/max, records
    Row(
        "MachineDeployment",
        "replicas via /scale",
        lambda o: _md(o) + "/scale",
        lambda o: {"spec": {"replicas": 0}},
        ALLOWED,
    ),
    Row(
        "MachineDeployment",
        "replicas with the removal ledger",
        _md,
        lambda o: {
            "metadata": {"annotations": {"scalebot.io/removed-machines": '["m1"]'}},
            "spec": {"replicas": 1},
        },
        ALLOWED,
    ),
    Row(
        "MachineDeployment",
        "autoscaler min-size",
        _md,
        _annotate(**{"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0"}),
        ALLOWED,
    ),
    Row(
        "MachineDeployment",
        "the machine template",
        _md,
        lambda o: {"spec": {"template": {"spec": {"bootstrap": {"dataSecretName": "attacker"}}}}},
        "spec.template",
    ),
    Row(
        "MachineDeployment",
        "a label",
        _md,
        lambda o: {"metadata": {"labels": {"x": "y"}}},
        "metadata.labels[x]",
    ),
    # -- Cluster API Machines: the delete-machine annotation and scalebot's mark
    Row(
        "Machine",
        "delete-machine mark",
        _machine,
        _annotate(**{"cluster.x-k8s.io/delete-machine": "t", "scalebot.io/delete-machine-mark": "t"}),
        ALLOWED,
    ),
    Row(
        "Machine",
        "the bootstrap secret",
        _machine,
        lambda o: {"spec": {"bootstrap": {"dataSecretName": "attacker"}}},
        "spec.bootstrap",
    ),
    # -- Karpenter NodePools: limits, disruption budgets, scalebot's annotations
    Row(
        "NodePool",
        "capped while asleep",
        _nodepool,
        lambda o: {
            "metadata": {"annotations": {"scalebot.io/karpenter-saved": "{}"}},
            "spec": {"limits": {"cpu": "0", "nodes": "0"}, "disruption": {"budgets": [{"nodes": "0"}]}},
        },
        ALLOWED,
    ),
    Row(
        "NodePool",
        "the node template",
        _nodepool,
        lambda o: {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}},
        "spec.template",
    ),
    Row(
        "NodePool",
        "consolidateAfter",
        _nodepool,
        lambda o: {"spec": {"disruption": {"consolidateAfter": "1s"}}},
        "spec.disruption.consolidateAfter",
    ),
    # -- Gardener Shoot (the grant's own policy): workers' minimum/maximum and hibernation.enabled
    _shoot_row(
        "worker minimum/maximum",
        lambda o: {"spec": {"provider": {"workers": _worker(o, minimum=0, maximum=0)}}},
        ALLOWED,
    ),
    _shoot_row("hibernate", lambda o: {"spec": {"hibernation": {"enabled": True}}}, ALLOWED),
    _shoot_row("restore record", _annotate(**{"scalebot.io/restore.w1": "{}"}), ALLOWED),
    _shoot_row(
        "a worker's machine image",
        lambda o: {
            "spec": {
                "provider": {
                    "workers": _worker(
                        o, machine={"type": "m5.large", "image": {"name": "attacker", "version": "1"}}
                    )
                }
            }
        },
        "spec.provider.workers (other than minimum/maximum)",
    ),
    _shoot_row(
        "a worker's machine type",
        lambda o: {"spec": {"provider": {"workers": _worker(o, machine={"type": "p4d.24xlarge"})}}},
        "spec.provider.workers (other than minimum/maximum)",
    ),
    _shoot_row(
        "the Kubernetes version", lambda o: {"spec": {"kubernetes": {"version": "1.20.0"}}}, "spec.kubernetes"
    ),
    _shoot_row("the provider type", lambda o: {"spec": {"provider": {"type": "gcp"}}}, "spec.provider.type"),
    _shoot_row(
        "hibernation schedules",
        lambda o: {"spec": {"hibernation": {"schedules": [{"start": "0 1 * * *"}]}}},
        "spec.hibernation.schedules",
    ),
    _shoot_row("a label", lambda o: {"metadata": {"labels": {"x": "y"}}}, "metadata.labels[x]"),
    _shoot_row(
        "another annotation",
        _annotate(**{"gardener.cloud/operation": "reconcile"}),
        "metadata.annotations[gardener.cloud/operation]",
    ),
    # -- ConfigMaps: scalebot's records by name, never its own configuration
    Row(
        "ConfigMap",
        "a pool record",
        _record_path,
        lambda o: {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"scalebot-pool-{o.record}"},
        },
        ALLOWED,
        method="POST",
    ),
    Row(
        "ConfigMap",
        "its own configuration",
        lambda o: "/api/v1/namespaces/scalebot/configmaps/scalebot-config",
        lambda o: {"data": {"config.yaml": "clusters: {}"}},
        "not configmaps scalebot/scalebot-config",
    ),
    Row(
        "ConfigMap",
        "another ConfigMap",
        _record_path,
        lambda o: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt2"}},
        "not configmaps scalebot/kube-root-ca.crt2",
        method="POST",
    ),
]


def _send(api: Any, row: Row, objects: Objects) -> None:
    path, body = row.path(objects), row.body(objects)
    rest.raw_request(
        api,
        row.method,
        path,
        body=body,
        query={"dryRun": "All"},
        content_type="application/merge-patch+json" if row.method == "PATCH" else "application/json",
    )


def _taint_and_mark(api: Any, node: str) -> None:
    """What a label pool leaves on a node it is about to delete: scalebot's cordon and its mark."""
    taints = rest.get(api, rest.node_path(node))["spec"].get("taints") or []
    rest.patch(
        api,
        rest.node_path(node),
        {
            "metadata": {"annotations": {REMOVING: "2026-11-27T08:00:00Z"}},
            "spec": {"unschedulable": True, "taints": [*taints, DRAINING]},
        },
    )


def _wait_for_shoot_policy(api: Any, namespace: str) -> None:
    """The grant's policy was just created: until the API server enforces it, a refused change passes."""

    def refused() -> bool:
        try:
            rest.raw_request(
                api,
                "PATCH",
                gardener_standin.shoots_path(namespace, "eu1"),
                body={"spec": {"provider": {"type": "gcp"}}},
                query={"dryRun": "All"},
                content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            if exc.status == 403 and SHOOTS in str(exc.body):
                return True
            raise
        return False

    waits.wait_until(refused, 30, f"the admission policy {SHOOTS} to be in force")


@pytest.fixture
def objects(
    control_plane: ControlPlane,
    admin_api: Any,
    scalebot_api: Any,
    namespace: str,
    unique_name: str,
    node_pool: Any,
) -> Iterator[Objects]:
    node, cordoned, marked = node_pool(3)
    cordon(admin_api, cordoned)
    _taint_and_mark(admin_api, marked)
    foreign = f"{unique_name}-nopool"[:63]
    body = bodies.node_body(foreign, "none")
    del body["metadata"]["labels"][bodies.POOL_LABEL]
    rest.create(admin_api, rest.node_path(), body)
    _taint_and_mark(admin_api, foreign)
    ns = namespace
    rest.create(
        admin_api,
        f"/apis/batch/v1/namespaces/{ns}/cronjobs",
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "annotations": {"scalebot.io/original": '{"suspend": false}'}},
            "spec": {
                "schedule": "0 3 * * *",
                "jobTemplate": {
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "job", "image": "busybox"}],
                            }
                        }
                    }
                },
            },
        },
    )
    support.install_keda_crd(admin_api)
    rest.create(
        admin_api,
        f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects",
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "api"},
            "spec": {
                "scaleTargetRef": {"name": "api"},
                "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
            },
        },
    )
    gitops_standin.install_crds(admin_api)
    gitops_standin.create(
        admin_api,
        gitops_standin.ARGO,
        ns,
        {
            "metadata": {"name": "shop"},
            "spec": {"source": {"repoURL": "https://git.example/shop.git"}, "syncPolicy": {"automated": {}}},
        },
    )
    gitops_standin.create(
        admin_api,
        gitops_standin.KUSTOMIZE,
        ns,
        {"metadata": {"name": "apps"}, "spec": {"interval": "1m", "path": "./apps"}},
    )
    gitops_standin.create(
        admin_api, gitops_standin.HELM, ns, {"metadata": {"name": "jobs"}, "spec": {"values": {}}}
    )
    template = {
        "spec": {
            "clusterName": "c1",
            "bootstrap": {"dataSecretName": "boot"},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "KwokMachine",
                "name": "m",
            },
        }
    }
    labels = {"cluster.x-k8s.io/deployment-name": "md", "cluster.x-k8s.io/cluster-name": "c1"}
    rest.create(
        admin_api,
        capi_standin.path(ns, "machinedeployments"),
        {
            "apiVersion": f"{capi_standin.GROUP}/{capi_standin.VERSION}",
            "kind": "MachineDeployment",
            "metadata": {"name": "md"},
            "spec": {
                "clusterName": "c1",
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, **template},
            },
        },
    )
    rest.create(
        admin_api,
        capi_standin.path(ns, "machines"),
        {
            "apiVersion": f"{capi_standin.GROUP}/{capi_standin.VERSION}",
            "kind": "Machine",
            "metadata": {"name": "m1", "labels": labels},
            **template,
        },
    )
    result = control_plane.kubectl(
        "apply",
        "--server-side",
        "-f",
        str(control_plane.cache_dir / "karpenter-crds" / "karpenter.sh_nodepools.yaml"),
    )
    assert result.returncode == 0, result.stderr
    waits.wait_until(lambda: rest.get(admin_api, NODEPOOLS), 60, "NodePools served", ignore=(ApiException,))
    nodepool = f"np-{unique_name}"[:63]
    rest.create(
        admin_api,
        NODEPOOLS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": nodepool},
            "spec": {
                "limits": {"cpu": "40"},
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": "10m",
                    "budgets": [{"nodes": "20%"}],
                },
                "template": {
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.kwok.sh",
                            "kind": "KWOKNodeClass",
                            "name": nodepool,
                        },
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                        ],
                    }
                },
            },
        },
    )
    gardener_standin.install_crd(admin_api)
    workers = [gardener_standin.worker("w1", 2, 3), gardener_standin.worker("w2", 1, 2)]
    rest.create(
        admin_api,
        gardener_standin.shoots_path(ns),
        {
            "apiVersion": f"{gardener_standin.GROUP}/{gardener_standin.VERSION}",
            "kind": "Shoot",
            "metadata": {"name": "eu1"},
            "spec": {
                "kubernetes": {"version": "1.31.0"},
                "provider": {"type": "aws", "workers": workers},
                "hibernation": {"enabled": False},
            },
        },
    )
    # The Shoot is patched with the shipped gardener-shoots grant, as scalebot's ServiceAccount.
    granted = grants.apply_grant(
        control_plane, grants.GARDENER_SHOOTS, ns, ["eu1"], subject=grants.SCALEBOT_SA
    )
    _wait_for_shoot_policy(scalebot_api, ns)
    config_path = "/api/v1/namespaces/scalebot/configmaps"
    made_config = rest.get_or_none(admin_api, f"{config_path}/scalebot-config") is None
    if made_config:
        rest.create(
            admin_api,
            config_path,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "scalebot-config"},
                "data": {"config.yaml": ""},
            },
        )
    node_raw = rest.get(admin_api, f"/api/v1/nodes/{node}")
    shoot = rest.get(admin_api, gardener_standin.shoots_path(ns, "eu1"))
    yield Objects(
        namespace=ns,
        node=node,
        cordoned_node=cordoned,
        marked_node=marked,
        foreign_node=foreign,
        node_taints=list(node_raw["spec"].get("taints") or []),
        cronjob="nightly",
        scaledobject="api",
        machinedeployment="md",
        machine="m1",
        nodepool=nodepool,
        shoot="eu1",
        shoot_workers=shoot["spec"]["provider"]["workers"],
        record=unique_name,
    )
    grants.remove_grant(control_plane, granted)
    rest.delete(admin_api, rest.node_path(foreign))
    rest.delete(admin_api, f"{NODEPOOLS}/{nodepool}")
    support.remove_keda_crd(admin_api)
    gitops_standin.remove_crds(admin_api)
    if made_config:
        rest.delete(admin_api, f"{config_path}/scalebot-config")


def test_scalebot_may_change_only_the_fields_it_owns(scalebot_api: Any, objects: Objects) -> None:
    outcomes: dict[str, str] = {}
    for row in ROWS:
        try:
            _send(scalebot_api, row, objects)
        except ApiException as exc:
            message = str(rest.status_of(exc).get("message") or exc.body)
            outcomes[f"{row.kind}: {row.what}"] = f"{exc.status} {message}"
        else:
            outcomes[f"{row.kind}: {row.what}"] = "admitted"
    wrong = {}
    for row in ROWS:
        got = outcomes[f"{row.kind}: {row.what}"]
        if row.refused_field == ALLOWED:
            if got != "admitted":
                wrong[f"{row.kind}: {row.what}"] = f"should be admitted, got {got}"
        elif not (
            got.startswith("403 ")
            and f"ValidatingAdmissionPolicy '{row.policy}'" in got
            and row.refused_field in got
        ):
            wrong[f"{row.kind}: {row.what}"] = f"should be refused naming {row.refused_field!r}, got {got}"
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())
    assert sum(1 for r in ROWS if r.refused_field) >= 8 and sum(1 for r in ROWS if not r.refused_field) >= 8


def test_a_leaked_token_cannot_cordon_then_delete_a_node(
    scalebot_api: Any, admin_api: Any, node_pool: Any
) -> None:
    """As the ServiceAccount, for real: cordoning a node with scalebot's own taint is admitted (a
    drain does it), deleting it next is refused, and the node is still there."""
    (node,) = node_pool(1)
    taints = rest.get(admin_api, rest.node_path(node))["spec"].get("taints") or []
    rest.patch(
        scalebot_api, rest.node_path(node), {"spec": {"unschedulable": True, "taints": [*taints, DRAINING]}}
    )
    with pytest.raises(ApiException) as refused:
        rest.delete(scalebot_api, rest.node_path(node))
    assert refused.value.status == 403 and NODE_DELETE in str(refused.value.body)
    assert rest.get_or_none(admin_api, rest.node_path(node)) is not None


def test_people_and_controllers_are_not_bound_by_it(admin_api: Any, objects: Objects) -> None:
    """The policy matches only ServiceAccounts named scalebot: the same whole-object patches that
    it refuses to scalebot pass for anyone else (here the admin)."""
    for row in ROWS:
        if row.refused_field and row.method == "PATCH" and row.kind not in ("ConfigMap",):
            _send(admin_api, row, objects)


def test_scalebot_reads_whether_the_policy_is_in_force(kube: KubeClient) -> None:
    """As the ServiceAccount: the two objects by name (rbac.yaml's `get`), which `scalebot run`
    logs at start and /readyz shows."""
    status = admission.read_status(kube.transport)
    assert status == admission.PolicyStatus(True, "ValidatingAdmissionPolicy scalebot-fields in force")


def test_the_control_plane_enforces_the_shipped_policy(admin_api: Any) -> None:
    """What the e2e tests run under is manifests/base/admission-policy.yaml as shipped."""
    shipped = {d["kind"]: d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d}
    group = "/apis/admissionregistration.k8s.io/v1"
    policy = rest.get(admin_api, f"{group}/validatingadmissionpolicies/scalebot-fields")
    binding = rest.get(admin_api, f"{group}/validatingadmissionpolicybindings/scalebot-fields")
    want = shipped["ValidatingAdmissionPolicy"]["spec"]
    live = policy["spec"]
    assert {k: live[k] for k in want if k != "matchConstraints"} == {
        k: v for k, v in want.items() if k != "matchConstraints"
    }
    # The server adds its defaults (scope, selectors, matchPolicy): compare what the file says.
    rules = [
        {k: rule[k] for k in shipped_rule}
        for rule, shipped_rule in zip(
            live["matchConstraints"]["resourceRules"], want["matchConstraints"]["resourceRules"], strict=True
        )
    ]
    assert rules == want["matchConstraints"]["resourceRules"]
    bound = binding["spec"]
    assert (bound["policyName"], bound["validationActions"]) == ("scalebot-fields", ["Deny"])
    # The API server compiled every expression: no type-checking warning left unread.
    assert not (policy.get("status") or {}).get("typeChecking", {}).get("expressionWarnings")

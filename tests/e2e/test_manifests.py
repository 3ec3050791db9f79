"""manifests/ against the real API server, with the pinned kubectl.

Covers: both overlays pass `kubectl apply --dry-run=server -k` (every object through validation
and admission, the pod template through PodSecurity's `restricted` warning level) and render what
each mode needs (a Service only in HTTP mode, the right required token); the example config in
the ConfigMap is valid for scalebot's own settings loader; the identity the e2e tests run as is
exactly the shipped RBAC and nothing else is bound to it; the RBAC is sufficient (every verb the
code uses is allowed) and minimal (deleting a namespace, reading Secrets anywhere, creating pods,
updating nodes, touching other Leases... are refused), asked as the ServiceAccount itself through
SelfSubjectAccessReviews (what `kubectl auth can-i` sends; it also answers for KEDA's types, which
this server does not serve), with `kubectl auth can-i` itself agreeing on the headline cases and
the API server refusing a real out-of-policy request.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from bot.config import settings
from localcluster import rest
from tests.e2e import grants

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "manifests" / "base"
OVERLAYS = REPO / "manifests" / "overlays"
SIMULATED_NODES = REPO / "manifests" / "components" / "simulated-nodes" / "rbac.yaml"
SA = ("scalebot", "scalebot")  # namespace, name
GENERATED_CONFIG = re.compile(r"^configmap/scalebot-config-[a-z0-9]+$")
"""The configMapGenerator's ConfigMap: its name ends in a hash of the config."""

BASE_OBJECTS = {
    "namespace/scalebot",
    "serviceaccount/scalebot",
    "role.rbac.authorization.k8s.io/scalebot-leader-election",
    "clusterrole.rbac.authorization.k8s.io/scalebot",
    "rolebinding.rbac.authorization.k8s.io/scalebot-leader-election",
    "clusterrolebinding.rbac.authorization.k8s.io/scalebot",
    "validatingadmissionpolicy.admissionregistration.k8s.io/scalebot-fields",
    "validatingadmissionpolicybinding.admissionregistration.k8s.io/scalebot-fields",
    "networkpolicy.networking.k8s.io/scalebot",
    "configmap/scalebot-config",
    "persistentvolumeclaim/scalebot-data",
    "deployment.apps/scalebot",
}

# (verb, resource, namespace or None for cluster-wide / all namespaces), and where the code uses it.
USED: list[tuple[str, str, str | None]] = [
    # engine.kube.client: plans, drain passes, cordon/uncordon (a patch); label pools remove nodes
    # whose machine something stops (engine.pools.labels)
    ("list", "nodes", None),
    ("get", "nodes", None),
    ("patch", "nodes", None),
    ("delete", "nodes", None),
    ("create", "nodes", None),  # the simulated-nodes component (kwok): wake re-creates Node objects
    ("list", "pods", None),
    ("watch", "pods", None),  # engine.drain.pod_feed: the drain learns from a watch which pods are gone
    ("get", "pods", "default"),
    ("delete", "pods", "default"),  # finished pods, force phase
    ("create", "pods/eviction", "default"),
    ("list", "poddisruptionbudgets.policy", None),
    ("list", "daemonsets.apps", None),
    ("list", "namespaces", None),
    # engine.workloads
    ("list", "deployments.apps", None),
    ("get", "statefulsets.apps", "default"),
    ("patch", "deployments.apps/scale", "default"),  # replicas, through the scale subresource
    ("patch", "statefulsets.apps/scale", "default"),
    ("patch", "cronjobs.batch", "default"),
    ("list", "horizontalpodautoscalers.autoscaling", None),
    ("patch", "scaledobjects.keda.sh", "default"),
    # engine.workloads.gitops: the owners of GitOps-managed workloads (`gitops: pause`)
    ("list", "applications.argoproj.io", None),
    ("get", "applications.argoproj.io", "argocd"),
    ("patch", "applications.argoproj.io", "argocd"),
    ("list", "kustomizations.kustomize.toolkit.fluxcd.io", None),
    ("patch", "kustomizations.kustomize.toolkit.fluxcd.io", "flux-system"),
    ("list", "helmreleases.helm.toolkit.fluxcd.io", None),
    ("patch", "helmreleases.helm.toolkit.fluxcd.io", "flux-system"),
    # engine.pools.capi
    ("list", "machinedeployments.cluster.x-k8s.io", None),
    ("patch", "machinedeployments.cluster.x-k8s.io", "default"),
    ("patch", "machinedeployments.cluster.x-k8s.io/scale", "default"),
    ("list", "machines.cluster.x-k8s.io", None),
    ("patch", "machines.cluster.x-k8s.io", "default"),
    # engine.pools.karpenter
    ("list", "nodepools.karpenter.sh", None),
    ("patch", "nodepools.karpenter.sh", None),
    ("list", "nodeclaims.karpenter.sh", None),
    ("delete", "nodeclaims.karpenter.sh", None),
    # engine.kube.events: node events go to "default", pod events to the pod's namespace
    ("create", "events", "default"),
    ("patch", "events", "default"),
    ("create", "events", "kube-system"),
    # engine.kube.lease: leader election, only in scalebot's namespace
    ("get", "leases.coordination.k8s.io", "scalebot"),
    ("create", "leases.coordination.k8s.io", "scalebot"),
    ("update", "leases.coordination.k8s.io", "scalebot"),
    # engine.pools.labels: the scalebot-pool-<name> records; engine.workloads: scalebot-workloads
    ("get", "configmaps", "scalebot"),
    ("create", "configmaps", "scalebot"),
    ("patch", "configmaps", "scalebot"),
]

REFUSED: list[tuple[str, str, str | None]] = [
    # Only pods are watched (the drain's pod watch); leader election polls: no watch on the rest.
    ("watch", "nodes", None),
    ("watch", "poddisruptionbudgets.policy", None),
    ("watch", "daemonsets.apps", None),
    ("watch", "namespaces", None),
    ("watch", "deployments.apps", None),
    ("watch", "cronjobs.batch", None),
    ("watch", "scaledobjects.keda.sh", None),
    # GitOps owners: paused and restored by patch, never created, replaced or deleted.
    ("watch", "applications.argoproj.io", None),
    ("create", "applications.argoproj.io", "argocd"),
    ("update", "applications.argoproj.io", "argocd"),
    ("delete", "kustomizations.kustomize.toolkit.fluxcd.io", "flux-system"),
    ("update", "helmreleases.helm.toolkit.fluxcd.io", "flux-system"),
    ("watch", "horizontalpodautoscalers.autoscaling", None),
    ("watch", "machinedeployments.cluster.x-k8s.io", None),
    ("watch", "machines.cluster.x-k8s.io", None),
    ("watch", "nodepools.karpenter.sh", None),
    ("watch", "nodeclaims.karpenter.sh", None),
    # Scale subresources: patched where used (MachineDeployments, Deployments, StatefulSets), never
    # replaced.
    ("update", "machinedeployments.cluster.x-k8s.io/scale", "default"),
    ("update", "deployments.apps/scale", "default"),
    ("update", "statefulsets.apps/scale", "default"),
    # Deployments and StatefulSets themselves: replicas go through `scale`, originals to scalebot's
    # ConfigMap, so nothing may rewrite their pod templates.
    ("patch", "deployments.apps", "default"),
    ("patch", "statefulsets.apps", "default"),
    ("update", "deployments.apps", "default"),
    ("update", "statefulsets.apps", "default"),
    # MachineSets: scalebot works through MachineDeployments only.
    ("patch", "machinesets.cluster.x-k8s.io", "default"),
    ("patch", "machinesets.cluster.x-k8s.io/scale", "default"),
    ("list", "machinesets.cluster.x-k8s.io", None),
    ("update", "machines.cluster.x-k8s.io", "default"),
    ("update", "machinedeployments.cluster.x-k8s.io", "default"),
    ("update", "cronjobs.batch", "default"),
    ("delete", "namespaces", None),
    ("create", "namespaces", None),
    ("patch", "namespaces", None),
    ("get", "secrets", "kube-system"),
    ("get", "secrets", "default"),
    ("list", "secrets", None),
    ("get", "secrets", "scalebot"),  # the Slack tokens arrive as environment variables, not by API
    ("create", "pods", "default"),
    ("update", "pods", "default"),
    ("create", "pods/exec", "default"),
    ("update", "nodes", None),  # cordon is a patch; a full update could drop fields
    ("create", "deployments.apps", "default"),
    ("delete", "deployments.apps", "default"),
    ("delete", "statefulsets.apps", "default"),
    ("patch", "daemonsets.apps", "default"),
    ("delete", "poddisruptionbudgets.policy", "default"),
    ("delete", "machinedeployments.cluster.x-k8s.io", "default"),
    ("delete", "machines.cluster.x-k8s.io", "default"),
    ("delete", "events", "default"),
    ("update", "leases.coordination.k8s.io", "kube-node-lease"),  # the nodes' heartbeats
    ("create", "leases.coordination.k8s.io", "default"),
    ("delete", "leases.coordination.k8s.io", "scalebot"),
    ("list", "leases.coordination.k8s.io", "scalebot"),
    ("get", "configmaps", "kube-system"),
    ("create", "configmaps", "default"),
    ("delete", "configmaps", "scalebot"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None),
    ("bind", "clusterroles.rbac.authorization.k8s.io", None),
    ("impersonate", "serviceaccounts", "kube-system"),
    ("create", "serviceaccounts/token", "kube-system"),
    ("delete", "persistentvolumes", None),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
]


def _can_i(cp: ControlPlane, verb: str, resource: str, namespace: str | None) -> str:
    """`kubectl auth can-i` as the ServiceAccount itself: "yes" or "no"."""
    resource, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, resource]
    if subresource:
        args.append(f"--subresource={subresource}")
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    result = cp.kubectl(*args, identity="scalebot", timeout=60)
    # It prints yes/no and exits 0/1; anything else is an error of the check itself.
    assert result.returncode in (0, 1), f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def _review(api: Any, verb: str, resource: str, namespace: str | None, name: str = "") -> str:
    """The SelfSubjectAccessReview that `kubectl auth can-i` sends, with the group spelled out.

    kubectl resolves `scaledobjects.keda.sh` through discovery and answers "no" for a type the
    server does not serve (no KEDA here); the authorizer itself needs no such type to decide.
    """
    resource, _, subresource = resource.partition("/")
    plural, _, group = resource.partition(".")
    attributes = {"verb": verb, "group": group, "resource": plural, "subresource": subresource}
    if namespace:
        attributes["namespace"] = namespace
    if name:
        attributes["name"] = name
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    review = rest.create(api, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body)
    return "yes" if review["status"].get("allowed") else "no"


def _answers(api: Any, checks: list[tuple[str, str, str | None]]) -> dict[tuple[str, str, str | None], str]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda c: _review(api, *c), checks))
    return dict(zip(checks, answers, strict=True))


@pytest.mark.parametrize("overlay", ["socket-mode", "http"])
def test_overlay_passes_a_server_side_dry_run(
    control_plane: ControlPlane, admin_api: Any, overlay: str
) -> None:
    # The control plane installed namespace.yaml when it minted scalebot's identity; a dry run of
    # a Namespace creates nothing, so the namespaced objects need the real one to exist already.
    assert rest.get_or_none(admin_api, "/api/v1/namespaces/scalebot") is not None
    result = control_plane.kubectl("apply", "--dry-run=server", "-k", str(OVERLAYS / overlay), timeout=120)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    applied = {
        GENERATED_CONFIG.sub("configmap/scalebot-config", line.split()[0])
        for line in result.stdout.splitlines()
        if "(server dry run)" in line
    }
    http_only = {"service/scalebot", "networkpolicy.networking.k8s.io/scalebot-events"}
    expected = BASE_OBJECTS | (http_only if overlay == "http" else set())
    assert applied == expected
    # The namespace warns at PodSecurity `restricted`: a pod template that breaks it is reported here.
    assert "PodSecurity" not in result.stderr, result.stderr


@pytest.mark.parametrize(("overlay", "required", "absent"), [
    ("socket-mode", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"),
    ("http", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"),
])  # fmt: skip
def test_each_overlay_requires_its_own_slack_secret(
    control_plane: ControlPlane, overlay: str, required: str, absent: str
) -> None:
    result = control_plane.kubectl("kustomize", str(OVERLAYS / overlay), check=True)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    ref = env[required]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"], ref["optional"]) == ("scalebot-slack", required, False)
    assert env["SLACK_BOT_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is False
    assert container["envFrom"] == [{"secretRef": {"name": "scalebot-slack", "optional": False}}]
    if absent == "SLACK_APP_TOKEN":
        assert env[absent] == {"name": absent, "value": ""}, "HTTP mode never falls into Socket Mode"
    else:
        assert absent not in env
    services = [d for d in docs if d["kind"] == "Service"]
    if overlay == "http":
        (service,) = services
        assert service["metadata"]["namespace"] == "scalebot"
        assert service["spec"]["ports"] == [
            {"name": "http", "port": 3000, "targetPort": "http", "protocol": "TCP"}
        ]
        assert {"name": "http", "containerPort": 3000, "protocol": "TCP"} in container["ports"]
    else:
        assert not services, "Socket Mode exposes nothing"


@pytest.mark.parametrize("overlay", ["socket-mode", "http"])
def test_network_policies_open_only_the_ports_each_mode_needs(
    control_plane: ControlPlane, overlay: str
) -> None:
    """The health port from scalebot's namespace and monitoring; the Slack port (HTTP mode only)
    from the ingress controller's namespace; every policy selects scalebot's pod."""
    result = control_plane.kubectl("kustomize", str(OVERLAYS / overlay), check=True)
    policies = {
        d["metadata"]["name"]: d["spec"]
        for d in yaml.safe_load_all(result.stdout)
        if d and d["kind"] == "NetworkPolicy"
    }
    assert sorted(policies) == (["scalebot", "scalebot-events"] if overlay == "http" else ["scalebot"])
    opened = {}
    for spec in policies.values():
        assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "scalebot"}}
        assert spec["policyTypes"] == ["Ingress"]
        for rule in spec["ingress"]:
            peers = [
                p.get("namespaceSelector", {})
                .get("matchLabels", {})
                .get("kubernetes.io/metadata.name", "own")
                for p in rule["from"]
            ]
            for port in rule["ports"]:
                opened[port["port"]] = peers
    expected = {"health": ["own", "monitoring"]}
    if overlay == "http":
        expected["http"] = ["ingress-nginx"]
    assert opened == expected


def test_example_config_is_valid_for_the_settings_loader() -> None:
    deployment = yaml.safe_load((BASE / "deployment.yaml").read_text())
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SCALEBOT_CONFIG"] == "/etc/scalebot/config.yaml" and env["SCALEBOT_DB"] == "/data/scalebot.db"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text((BASE / "config.yaml").read_text())
        loaded = settings.load(path, {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"})
    assert loaded.server.health_port == 8080 and loaded.server.http_port == 3000
    assert loaded.clusters["management"].context == "", "in-cluster: no kubeconfig context"


def test_the_e2e_identity_is_exactly_the_shipped_rbac(admin_api: Any) -> None:
    shipped = {
        (d["kind"], d["metadata"]["name"]): d
        for path in (BASE / "rbac.yaml", SIMULATED_NODES)
        for d in yaml.safe_load_all(path.read_text())
    }
    for name in ("scalebot", "scalebot-simulated-nodes"):
        live_role = rest.get(admin_api, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
        assert live_role["rules"] == shipped[("ClusterRole", name)]["rules"]
    live = rest.get(
        admin_api, "/apis/rbac.authorization.k8s.io/v1/namespaces/scalebot/roles/scalebot-leader-election"
    )
    assert live["rules"] == shipped[("Role", "scalebot-leader-election")]["rules"]
    # Nothing else grants the ServiceAccount anything (besides what every authenticated user gets).
    bound = []
    for kind, path in (
        ("ClusterRoleBinding", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
        ("RoleBinding", "/apis/rbac.authorization.k8s.io/v1/rolebindings"),
    ):
        for binding in rest.list_items(admin_api, path):
            for subject in binding.get("subjects") or ():
                is_sa = (
                    subject.get("kind") == "ServiceAccount"
                    and (subject.get("namespace"), subject["name"]) == SA
                )
                is_user = (
                    subject.get("kind") == "User"
                    and subject["name"] == "system:serviceaccount:scalebot:scalebot"
                )
                if is_sa or is_user:
                    bound.append((kind, binding["metadata"]["name"], binding["roleRef"]["name"]))
    assert sorted(bound) == [
        ("ClusterRoleBinding", "scalebot", "scalebot"),
        ("ClusterRoleBinding", "scalebot-simulated-nodes", "scalebot-simulated-nodes"),
        ("RoleBinding", "scalebot-leader-election", "scalebot-leader-election"),
    ]


def test_the_rbac_allows_every_verb_scalebot_uses(scalebot_api: Any) -> None:
    denied = [check for check, answer in _answers(scalebot_api, USED).items() if answer != "yes"]
    assert not denied, f"the shipped RBAC lacks: {denied}"


def test_the_rbac_refuses_everything_else(scalebot_api: Any) -> None:
    allowed = [check for check, answer in _answers(scalebot_api, REFUSED).items() if answer != "no"]
    assert not allowed, f"the shipped RBAC allows more than scalebot needs: {allowed}"


POLICY_RESOURCES = (
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
)


def test_the_admission_policy_is_readable_by_name_and_never_writable(scalebot_api: Any) -> None:
    """scalebot reads its policy and binding (start-up line, /readyz) and can change neither."""
    for resource in POLICY_RESOURCES:
        assert _review(scalebot_api, "get", resource, None, "scalebot-fields") == "yes"
        assert _review(scalebot_api, "get", resource, None, "other-policy") == "no"
        for verb in ("list", "watch", "create"):
            assert _review(scalebot_api, verb, resource, None) == "no", (verb, resource)
        for verb in ("update", "patch", "delete"):
            assert _review(scalebot_api, verb, resource, None, "scalebot-fields") == "no", (verb, resource)


BASE_ONLY_REFUSED: list[tuple[str, str, str | None]] = [
    ("create", "nodes", None),  # only the simulated-nodes component grants it
    ("update", "nodes", None),
    ("watch", "nodes", None),
]
BASE_ONLY_USED: list[tuple[str, str, str | None]] = [
    ("patch", "nodes", None),
    ("delete", "nodes", None),
    ("patch", "machinedeployments.cluster.x-k8s.io/scale", "default"),
]


@pytest.fixture
def base_only_api(control_plane: ControlPlane, admin_api: Any) -> Iterator[Any]:
    """A second ServiceAccount bound exactly like scalebot's base (its ClusterRole and Role), without
    the simulated-nodes component, asking as itself: what a real cluster's scalebot may do."""
    ns, name = "scalebot", "scalebot-base-only"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    rest.create(admin_api, f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": name}})
    rest.create(
        admin_api,
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "scalebot"},
            "subjects": subject,
        },
    )
    token = rest.create(
        admin_api,
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    config = yaml.safe_load(control_plane.scalebot_kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "base-only.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        api = rest.api_client_from_kubeconfig(path, pool_size=8)
    try:
        yield api
    finally:
        api.close()
        rest.delete(admin_api, f"{rbac}/clusterrolebindings/{name}")
        rest.delete(admin_api, f"/api/v1/namespaces/{ns}/serviceaccounts/{name}")


def test_the_base_rbac_alone_cannot_create_nodes(base_only_api: Any) -> None:
    answers = _answers(base_only_api, BASE_ONLY_REFUSED + BASE_ONLY_USED)
    assert [c for c in BASE_ONLY_REFUSED if answers[c] != "no"] == [], answers
    assert [c for c in BASE_ONLY_USED if answers[c] != "yes"] == [], answers


@pytest.mark.parametrize(("verb", "resource", "namespace", "answer"), [
    ("create", "pods/eviction", "default", "yes"),
    ("patch", "nodes", None, "yes"),
    ("update", "leases", "scalebot", "yes"),
    ("create", "events", "default", "yes"),
    ("patch", "machinedeployments.cluster.x-k8s.io/scale", "default", "yes"),
    ("delete", "namespaces", None, "no"),
    ("watch", "nodes", None, "no"),
    ("update", "machinedeployments.cluster.x-k8s.io/scale", "default", "no"),
    ("get", "secrets", "kube-system", "no"),
    ("list", "secrets", None, "no"),
    ("create", "pods", "default", "no"),
    ("update", "leases", "kube-node-lease", "no"),
])  # fmt: skip
def test_kubectl_auth_can_i_agrees(
    control_plane: ControlPlane, verb: str, resource: str, namespace: str | None, answer: str
) -> None:
    assert _can_i(control_plane, verb, resource, namespace) == answer


def test_a_refused_action_is_refused_by_the_api_server_too(control_plane: ControlPlane) -> None:
    # can-i asks the authorizer; this is the real request, as scalebot would send it.
    result = control_plane.kubectl(
        "delete", "namespace", "kube-public", "--dry-run=server", identity="scalebot"
    )
    assert result.returncode != 0 and "forbidden" in result.stderr.lower()
    result = control_plane.kubectl("get", "secrets", "-n", "kube-system", identity="scalebot")
    assert result.returncode != 0 and "forbidden" in result.stderr.lower()


# -- opt-in grants (manifests/grants): applied to the cluster that holds the object ----------------

GRANT_RULES = {
    grants.CAPI_KUBECONFIG: [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["get"]},
    ],
    grants.GARDENER_SHOOTS: [
        {"apiGroups": ["core.gardener.cloud"], "resources": ["shoots"], "verbs": ["get", "patch"]}
    ],
    grants.GARDENER_PROJECT: [
        {"apiGroups": ["core.gardener.cloud"], "resources": ["projects"], "verbs": ["get"]}
    ],
}


@pytest.mark.parametrize("grant", sorted(GRANT_RULES))
def test_each_grant_is_as_narrow_as_its_objects_allow_and_says_why(
    control_plane: ControlPlane, grant: str
) -> None:
    """As shipped: a Role and its RoleBinding (a ClusterRole only for the cluster-scoped Project),
    every rule on named objects only (resourceNames) with the verbs scalebot uses, and a comment
    above each rule."""
    result = control_plane.kubectl("kustomize", str(grants.GRANTS / grant), check=True)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    kind = "ClusterRole" if grant in grants.CLUSTER_SCOPED else "Role"
    assert sorted(d["kind"] for d in docs if "Role" in d["kind"]) == sorted([kind, f"{kind}Binding"])
    (role,) = [d for d in docs if d["kind"] == kind]
    (binding,) = [d for d in docs if d["kind"] == f"{kind}Binding"]
    assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == (kind, role["metadata"]["name"])
    if kind == "Role":
        assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] != "scalebot"
    assert [{k: v for k, v in r.items() if k != "resourceNames"} for r in role["rules"]] == GRANT_RULES[grant]
    assert all(r.get("resourceNames") for r in role["rules"]), "every rule names its objects"
    # A whole-object patch travels with its field-level policy (tests/e2e/test_admission_policy.py).
    policies = sorted((d["kind"], d["metadata"]["name"]) for d in docs if "AdmissionPolicy" in d["kind"])
    assert policies == (
        [
            ("ValidatingAdmissionPolicy", "scalebot-shoots"),
            ("ValidatingAdmissionPolicyBinding", "scalebot-shoots"),
        ]
        if grant == grants.GARDENER_SHOOTS
        else []
    )
    lines = (grants.GRANTS / grant / "rbac.yaml").read_text().splitlines()
    rules_at = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert rules_at and all(lines[i - 1].strip().startswith("#") for i in rules_at), "a comment says why"


def test_the_grants_allow_exactly_the_named_objects(
    control_plane: ControlPlane, scalebot_api: Any, namespace: str
) -> None:
    """Applied as a person would (an overlay setting the namespace and the names), asked as the
    ServiceAccount: the Cluster's kubeconfig Secret and the Shoot, and nothing next to them."""
    applied = grants.apply_grant(control_plane, grants.CAPI_KUBECONFIG, namespace, ["alpha-kubeconfig"])
    applied += grants.apply_grant(
        control_plane, grants.GARDENER_SHOOTS, namespace, ["eu1"], subject=grants.SCALEBOT_SA
    )
    expected = {
        ("get", "secrets", namespace, "alpha-kubeconfig"): "yes",
        ("get", "secrets", namespace, "alpha-ca"): "no",  # Cluster API's CA next to it
        ("get", "secrets", namespace, "beta-kubeconfig"): "no",  # another Cluster's
        ("list", "secrets", namespace, ""): "no",
        ("watch", "secrets", namespace, ""): "no",
        ("update", "secrets", namespace, "alpha-kubeconfig"): "no",
        ("get", "secrets", "default", "alpha-kubeconfig"): "no",  # another namespace
        ("get", "clusters.cluster.x-k8s.io", namespace, "alpha"): "yes",  # its controlPlaneEndpoint
        ("get", "clusters.cluster.x-k8s.io", namespace, "beta"): "no",
        ("list", "clusters.cluster.x-k8s.io", namespace, ""): "no",
        ("get", "shoots.core.gardener.cloud", namespace, "eu1"): "yes",
        ("patch", "shoots.core.gardener.cloud", namespace, "eu1"): "yes",
        ("patch", "shoots.core.gardener.cloud", namespace, "eu2"): "no",
        ("list", "shoots.core.gardener.cloud", namespace, ""): "no",
        ("update", "shoots.core.gardener.cloud", namespace, "eu1"): "no",
        ("delete", "shoots.core.gardener.cloud", namespace, "eu1"): "no",
        ("create", "shoots.core.gardener.cloud/adminkubeconfig", namespace, "eu1"): "no",
        ("get", "shoots.core.gardener.cloud", "default", "eu1"): "no",
    }
    applied += grants.apply_grant(
        control_plane, grants.GARDENER_PROJECT, None, ["dev"], subject=grants.SCALEBOT_SA
    )
    try:
        expected |= {
            ("get", "projects.core.gardener.cloud", None, "dev"): "yes",
            ("get", "projects.core.gardener.cloud", None, "other"): "no",
            ("list", "projects.core.gardener.cloud", None, ""): "no",
            ("patch", "projects.core.gardener.cloud", None, "dev"): "no",
        }
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = pool.map(lambda c: _review(scalebot_api, *c), expected)
            answers = dict(zip(expected, found, strict=True))
    finally:
        # Now: a ClusterRoleBinding outlives the namespace, and the RoleBindings would stay bound to
        # scalebot's ServiceAccount while it is deleted (the identity test checks exactly what is).
        grants.remove_grant(control_plane, applied)
    assert answers == expected

"""charts/scalebot against the Kustomize base and the real API server, with the pinned helm.

Covers: `helm lint` passes with the default and the full values file (every option on); a values
file the schema refuses fails at install with the key named; both Slack modes render exactly the
objects the matching Kustomize overlay renders (labels that differ by design normalised: Helm's
release labels, the generated ConfigMap's hash suffix, the checksum annotation; the Namespace is
Kustomize's alone, Helm installs into one; `helm test`'s hook Pod and the health Service it asks
are the chart's alone); the hook Pod is restricted, runs scalebot's image and is selected by
nothing; a config change rolls the pod in both (checksum annotation, configMapGenerator name); and
the rendered objects of both values files, the hook Pod included, pass `kubectl apply
--dry-run=server` as admin (validation and admission, PodSecurity included). `helm test` itself:
test_chart_helm_test.py.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from localcluster import objects, rest
from localcluster.binaries import ensure_go_tool
from tests.e2e.chart_support import create_slack_secret, create_static_volume

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "scalebot"
FULL = CHART / "ci" / "full-values.yaml"
MANIFESTS = REPO / "manifests"
HELM_ONLY_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
}
CHECKSUM = "checksum/config"
KEEP = "helm.sh/resource-policy"  # Helm's own: the database's PVC outlives `helm uninstall`
GENERATED = re.compile(r"^(scalebot-config)-[a-z0-9]{10}$")
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
}
CLUSTER_SCOPED_POLICY = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
MONITORING_KINDS = {"PrometheusRule", "ServiceMonitor"}
OPTIONAL_GROUPS = {
    "cluster.x-k8s.io": "capi",
    "karpenter.sh": "karpenter",
    "keda.sh": "keda",
    "argoproj.io": "gitops",
    "kustomize.toolkit.fluxcd.io": "gitops",
    "helm.toolkit.fluxcd.io": "gitops",
}
"""The ClusterRole's rules the chart renders only when the config uses them (the base holds all)."""
"""Objects of the Prometheus Operator's CRDs, which the local control plane does not serve."""


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_go_tool("helm")


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check, timeout=120)


def template(helm: Path, *args: str | Path) -> list[dict[str, Any]]:
    out = run(helm, "template", "scalebot", CHART, "--namespace", "scalebot", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kustomize(control_plane: ControlPlane, path: Path) -> list[dict[str, Any]]:
    out = control_plane.kubectl("kustomize", str(path), check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def normalised(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Objects by (kind, name), with what differs by design taken out."""
    found = {}
    for original in docs:
        doc = copy.deepcopy(original)
        if doc["kind"] == "Namespace":
            continue
        for meta in (doc["metadata"], doc.get("spec", {}).get("template", {}).get("metadata", {})):
            labels = meta.get("labels") or {}
            for key in HELM_ONLY_LABELS | {"app.kubernetes.io/part-of"}:
                labels.pop(key, None)
            annotations = meta.get("annotations") or {}
            annotations.pop(CHECKSUM, None)
            if annotations.pop(KEEP, None) is not None and not annotations:
                del meta["annotations"]
        doc["metadata"]["name"] = GENERATED.sub(r"\1", doc["metadata"]["name"])
        if doc["kind"] in CLUSTER_SCOPED_POLICY:  # kustomize sets a namespace the server ignores
            doc["metadata"].pop("namespace", None)
        if doc["kind"] == "ConfigMap":
            doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
        if doc["kind"] == "Deployment":
            for volume in doc["spec"]["template"]["spec"]["volumes"]:
                if "configMap" in volume:
                    volume["configMap"]["name"] = GENERATED.sub(r"\1", volume["configMap"]["name"])
        found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def test_helm_lint_passes_with_the_default_and_the_full_values(helm: Path) -> None:
    for extra in ((), ("--values", str(FULL))):
        result = run(helm, "lint", "--strict", CHART, *extra, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("setting", "key"), [
    ("slack.mode=websocket", "/slack/mode"),
    ("config.workers=0", "/config/workers"),
    ("config.clusters.prod.default_channels[0]=general", "/config/clusters/prod/default_channels/0"),
    ("config.unknown_key=1", "/config"),
    ("grants.capiWorkloadKubeconfig.enabled=true", "/grants/capiWorkloadKubeconfig/secretNames"),
])  # fmt: skip
def test_the_values_schema_refuses_bad_values_naming_the_key(helm: Path, setting: str, key: str) -> None:
    result = run(helm, "template", "scalebot", CHART, "--set", setting, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert f"at '{key}'" in result.stderr, result.stderr


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_the_knobs_platform_teams_expect_reach_the_objects(helm: Path) -> None:
    """ci/full-values.yaml sets every knob: each lands where Kubernetes reads it."""
    docs = template(helm, "--values", str(FULL))
    (account,) = _by_kind(docs, "ServiceAccount")
    assert account["metadata"]["name"] == "scalebot-sa"
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/scalebot"
    }
    bindings = _by_kind(docs, "RoleBinding") + _by_kind(docs, "ClusterRoleBinding")
    assert bindings and all(
        b["subjects"] == [{"kind": "ServiceAccount", "name": "scalebot-sa", "namespace": "scalebot"}]
        for b in bindings
    )
    policies = _by_kind(docs, "ValidatingAdmissionPolicy")
    assert sorted(p["metadata"]["name"] for p in policies) == ["platform-scalebot-shoots", "scalebot-fields"]
    assert all(":scalebot-sa'" in p["spec"]["matchConditions"][0]["expression"] for p in policies)
    (deployment,) = _by_kind(docs, "Deployment")
    assert deployment["metadata"]["name"] == "platform-scalebot", "fullnameOverride"
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["serviceAccountName"] == "scalebot-sa"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["metadata"]["labels"]["example.com/cost-center"] == "platform"
    assert container["image"] == "registry.example.com/scalebot@sha256:" + "0123456789abcdef" * 4
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in container["env"]
    assert container["envFrom"][1:] == [{"secretRef": {"name": "scalebot-extra", "optional": True}}]
    # The audit key: a file from the existing Secret, named by SCALEBOT_AUDIT_KEY_FILE, never a value.
    assert {"name": "SCALEBOT_AUDIT_KEY_FILE", "value": "/etc/scalebot-audit/hmac"} in container["env"]
    assert {"name": "audit-key", "mountPath": "/etc/scalebot-audit", "readOnly": True} in container[
        "volumeMounts"
    ]
    (key_volume,) = [v for v in spec["volumes"] if v["name"] == "audit-key"]
    assert key_volume["secret"]["secretName"] == "scalebot-audit"
    assert key_volume["secret"]["items"] == [{"key": "hmac", "path": "hmac"}]
    (claim,) = _by_kind(docs, "PersistentVolumeClaim")
    assert KEEP not in (claim["metadata"].get("annotations") or {}), "persistence.keep: false"
    (default_claim,) = _by_kind(template(helm), "PersistentVolumeClaim")
    assert default_claim["metadata"]["annotations"] == {KEEP: "keep"}
    assert "SCALEBOT_AUDIT_KEY_FILE" not in str(_by_kind(template(helm), "Deployment"))
    (monitor,) = _by_kind(docs, "ServiceMonitor")
    (metrics,) = [s for s in _by_kind(docs, "Service") if s["metadata"]["name"].endswith("-health")]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    assert metrics["spec"]["ports"] == [
        {"name": "health", "port": 9090, "targetPort": "health", "protocol": "TCP"}
    ]
    (config_map,) = [c for c in _by_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-config")]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["fleet_digest_channel"] == "C0FLEET" and config["sender"]["posts_per_minute"] == 90
    (hook,) = [p for p in _by_kind(docs, "Pod") if p["metadata"]["annotations"]["helm.sh/hook"] == "test"]
    assert hook["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert hook["spec"]["tolerations"][0]["key"] == "dedicated"
    assert hook["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert hook["spec"]["containers"][0]["image"] == container["image"]
    assert hook["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "100m", "memory": "96Mi"}
    assert hook["spec"]["containers"][0]["env"] == [
        {"name": "SCALEBOT_HEALTH_SERVICE", "value": "platform-scalebot-health.scalebot.svc:9090"}
    ]
    peers = {p["metadata"]["name"]: p["spec"]["ingress"][0]["from"] for p in _by_kind(docs, "NetworkPolicy")}
    assert peers["platform-scalebot"][1]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"
    }
    assert peers["platform-scalebot-events"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-system"
    }


def _optional_rules(docs: list[dict[str, Any]]) -> set[str]:
    (role,) = [d for d in _by_kind(docs, "ClusterRole") if d["metadata"]["name"] == "scalebot"]
    return {OPTIONAL_GROUPS[g] for r in role["rules"] for g in r["apiGroups"] if g in OPTIONAL_GROUPS}


def test_the_test_hook_asks_the_health_service_as_a_restricted_pod(helm: Path) -> None:
    """`helm test`'s Pod: scalebot's image, the Service's address in its environment, the chart's
    security contexts, no token; never selected by the Deployment or the Services."""
    docs = template(helm)
    (hook,) = _by_kind(docs, "Pod")
    (deployment,) = _by_kind(docs, "Deployment")
    (service,) = _by_kind(docs, "Service")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert hook["metadata"]["annotations"] == {
        "helm.sh/hook": "test",
        "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
    }
    spec = hook["spec"]
    (container,) = spec["containers"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == values["podSecurityContext"]
    assert container["securityContext"] == values["securityContext"]
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"][:2] == ["python", "-c"] and "/readyz" in container["command"][2]
    assert service["metadata"]["name"] == "scalebot-health"
    assert service["spec"]["ports"][0]["port"] == 8080
    assert container["env"] == [
        {"name": "SCALEBOT_HEALTH_SERVICE", "value": "scalebot-health.scalebot.svc:8080"}
    ]
    labels = hook["metadata"]["labels"].items()
    assert not deployment["spec"]["selector"]["matchLabels"].items() <= labels
    assert not service["spec"]["selector"].items() <= labels
    assert not any(
        d["kind"] == "Pod" or d["kind"] == "Service" for d in template(helm, "--set", "test.enabled=false")
    )
    monitored = template(helm, "--set", "test.enabled=false", "--set", "serviceMonitor.enabled=true")
    assert [d["metadata"]["name"] for d in _by_kind(monitored, "Service")] == ["scalebot-health"]
    assert not _by_kind(monitored, "Pod")


def test_rbac_is_rendered_only_for_the_providers_and_integrations_in_use(helm: Path) -> None:
    """A label-pools-only release holds no Cluster API, Karpenter, KEDA, Argo CD or Flux rule."""
    assert _optional_rules(template(helm)) == set()
    for provider in ("capi", "karpenter"):
        # Their clusters have no pool_label (the schema refuses it, as the loader does).
        docs = template(
            helm, "--set", f"config.clusters.management.provider={provider}",
            "--set", "config.clusters.management.pool_label=null",
        )  # fmt: skip
        assert _optional_rules(docs) == {provider}
    assert _optional_rules(template(helm, "--set", "config.clusters.management.gitops=pause")) == {"gitops"}
    assert _optional_rules(template(helm, "--set", "rbac.keda=true", "--set", "rbac.gitops=true")) == {
        "keda",
        "gitops",
    }


def test_an_existing_service_account_is_bound_not_created(helm: Path) -> None:
    docs = template(
        helm, "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=platform-bots"
    )
    assert not _by_kind(docs, "ServiceAccount")
    (deployment,) = _by_kind(docs, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "platform-bots"
    assert all(
        b["subjects"][0]["name"] == "platform-bots"
        for b in _by_kind(docs, "RoleBinding") + _by_kind(docs, "ClusterRoleBinding")
    )
    (policy,) = _by_kind(docs, "ValidatingAdmissionPolicy")
    assert policy["spec"]["matchConditions"][0]["expression"].endswith("endsWith(':platform-bots')")
    assert _by_kind(docs, "NetworkPolicy"), "on by default"


@pytest.mark.parametrize(("mode", "overlay"), [("socket", "socket-mode"), ("http", "http")])
def test_helm_and_kustomize_render_the_same_objects(
    helm: Path, control_plane: ControlPlane, mode: str, overlay: str
) -> None:
    rendered = normalised(template(helm, "--set", f"slack.mode={mode}", "--set", "test.enabled=false"))
    kustomized = normalised(kustomize(control_plane, MANIFESTS / "overlays" / overlay))
    # `helm test` is the chart's own: its hook Pod and the health Service it asks, nothing else.
    with_test = normalised(template(helm, "--set", f"slack.mode={mode}"))
    assert sorted(set(with_test) - set(rendered)) == [
        ("Pod", "scalebot-test-readyz"),
        ("Service", "scalebot-health"),
    ]
    # The default config is label pools only: the chart leaves out the optional rules, in order.
    role = kustomized[("ClusterRole", "scalebot")]
    role["rules"] = [r for r in role["rules"] if not set(r["apiGroups"]) & set(OPTIONAL_GROUPS)]
    assert sorted(rendered) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert rendered[key] == obj, key
    # Both carry the part-of label the comparison took out, and Helm its release labels.
    for docs in (template(helm), kustomize(control_plane, MANIFESTS / "overlays" / overlay)):
        assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "scalebot" for d in docs)


def _pod_template(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return dict(deployment["spec"]["template"])


@pytest.fixture
def base_copy(tmp_path: Path) -> Iterator[Path]:
    """A copy of manifests/ whose base config a test may edit."""
    copy_root = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_root)
    yield copy_root


def test_a_config_change_rolls_the_pod(helm: Path, control_plane: ControlPlane, base_copy: Path) -> None:
    before = _pod_template(template(helm))["metadata"]["annotations"][CHECKSUM]
    again = _pod_template(template(helm))["metadata"]["annotations"][CHECKSUM]
    after = _pod_template(template(helm, "--set", "config.workers=4"))["metadata"]["annotations"][CHECKSUM]
    assert before == again != after

    def config_map_name(root: Path) -> str:
        volumes = _pod_template(kustomize(control_plane, root / "overlays" / "socket-mode"))["spec"][
            "volumes"
        ]
        (name,) = [v["configMap"]["name"] for v in volumes if "configMap" in v]
        return str(name)

    first = config_map_name(base_copy)
    config = base_copy / "base" / "config.yaml"
    config.write_text(config.read_text().replace("workers: 8", "workers: 4"))
    second = config_map_name(base_copy)
    assert GENERATED.match(first) and GENERATED.match(second) and first != second


@pytest.mark.parametrize("values", ["default", "full"])
def test_the_rendered_objects_pass_a_server_side_dry_run(
    helm: Path, control_plane: ControlPlane, admin_api: Any, unique_name: str, values: str
) -> None:
    """Into a namespace of the test's own (the grants' namespaces too), as `helm install` would."""
    namespaces = [f"{unique_name}-sb", f"{unique_name}-capi", f"{unique_name}-gd"]
    # The namespace warns at PodSecurity `restricted` as manifests/base/namespace.yaml does.
    objects.create_namespace(admin_api, namespaces[0], labels=POD_SECURITY)
    for name in namespaces[1:]:
        objects.create_namespace(admin_api, name)
    try:
        args = ["--namespace", namespaces[0]]
        if values == "full":
            args += [
                "--values", str(FULL),
                "--set", f"grants.capiWorkloadKubeconfig.namespace={namespaces[1]}",
                "--set", f"grants.gardener.namespace={namespaces[2]}",
            ]  # fmt: skip
        out = run(helm, "template", f"scalebot-{unique_name[-6:]}", CHART, *args).stdout
        docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] not in MONITORING_KINDS]
        result = control_plane.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs), timeout=120
        )
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
        assert len(applied) == len(docs) >= 8
        # The namespace warns at PodSecurity `restricted`: a pod template that breaks it says so here.
        assert "PodSecurity" not in result.stderr, result.stderr
    finally:
        for name in namespaces:
            objects.delete_namespace(admin_api, name)


@pytest.mark.parametrize("mode", ["socket", "http"])
def test_the_notes_give_the_next_steps(
    helm: Path, control_plane: ControlPlane, unique_name: str, mode: str
) -> None:
    """What `helm install` prints: the Slack app, the mode's token, how to check /readyz, and the
    truth about failover (one instance, no standby). A client-side dry run, under a release and
    namespace of its own (helm still looks for objects it would adopt; the suite's control plane
    holds scalebot's, and the cluster-scoped policy is left out for the same reason)."""
    release = f"notes-{unique_name[-6:]}"
    result = run(
        helm, "install", release, CHART, "--namespace", release, "--dry-run=client",
        "--kubeconfig", control_plane.admin_kubeconfig, "--set", f"slack.mode={mode}",
        "--set", "admissionPolicy.enabled=false", check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notes = result.stdout[result.stdout.index("NOTES:") :]
    assert "manifests/slack-app.yaml" in notes and "/readyz" in notes and "no standby" in notes
    assert ("SLACK_APP_TOKEN" in notes, "SLACK_SIGNING_SECRET" in notes) == (mode == "socket", mode == "http")
    assert ("/slack/events" in notes) == (mode == "http")
    assert "admission policy is off" in notes


def test_helm_installs_upgrades_and_uninstalls_into_the_control_plane(
    helm: Path, control_plane: ControlPlane, admin_api: Any, node_pool: Any, unique_name: str
) -> None:
    """`helm install --wait` into the suite's control plane (kwok runs the pod on a node of the
    test's own; a static volume stands in for a storage class), `helm upgrade` with a config change
    rolls the pod, `helm uninstall` leaves nothing of the release behind but the database's claim.
    Under a release and namespace of its own, without the cluster-scoped admission policy the
    control plane already holds (helm would refuse to adopt it)."""
    release, namespace = f"sb-{unique_name[-6:]}", f"{unique_name}-helm"[:63]
    storage_class = f"{release}-static"
    node_pool(1)
    objects.create_namespace(admin_api, namespace)
    volume = create_static_volume(admin_api, release, storage_class)
    create_slack_secret(
        admin_api, namespace, {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_APP_TOKEN": "xapp-test"}
    )
    common = [
        "--namespace", namespace, "--kubeconfig", str(control_plane.admin_kubeconfig),
        "--set", "admissionPolicy.enabled=false", "--set", f"persistence.storageClassName={storage_class}",
        "--set", "terminationGracePeriodSeconds=1",  # Recreate waits for the old pod: keep it short
    ]  # fmt: skip

    def pods() -> set[str]:
        items = rest.list_items(admin_api, f"/api/v1/namespaces/{namespace}/pods")
        return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}

    def helm_ok(*args: str) -> None:
        result = run(helm, *args, check=False)
        assert result.returncode == 0, result.stdout + result.stderr

    try:
        helm_ok("install", release, str(CHART), *common, "--wait", "--timeout", "180s")
        (first,) = pods()
        helm_ok(
            "upgrade",
            release,
            str(CHART),
            *common,
            "--set",
            "config.workers=4",
            "--wait",
            "--timeout",
            "180s",
        )
        (second,) = pods()
        assert second != first, "the config change rolled the pod"
        helm_ok(
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--kubeconfig",
            str(control_plane.admin_kubeconfig),
            "--wait",
        )
        selector = f"app.kubernetes.io/instance={release}"
        left = [
            f"{path.rsplit('/', 1)[-1]}/{item['metadata']['name']}"
            for path in (
                f"/apis/apps/v1/namespaces/{namespace}/deployments",
                f"/api/v1/namespaces/{namespace}/configmaps",
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            )
            for item in rest.list_items(admin_api, path, label_selector=selector)
        ]
        # Only the database's claim stays (persistence.keep, on by default): the audit log outlives it.
        assert left == [f"persistentvolumeclaims/{release}-scalebot-data"], "helm uninstall left these behind"
    finally:
        run(
            helm,
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--kubeconfig",
            str(control_plane.admin_kubeconfig),
            check=False,
        )
        objects.delete_namespace(admin_api, namespace)
        rest.delete(admin_api, volume)

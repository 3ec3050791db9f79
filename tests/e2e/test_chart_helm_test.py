"""`helm test` of charts/scalebot: its hook Pod really asks the release's health Service for /readyz.

kwok runs no containers: a hook Pod on a kwok node would be marked Succeeded whatever its command
does. So the test makes every part that matters real:
- the chart is installed with `helm install --wait` (HTTP mode, test Slack tokens in its Secret;
  kwok "runs" the Deployment's pod on a kwok node of the test's own);
- the real scalebot process runs on this machine as that pod would: the config from the release's
  ConfigMap, the pod's environment (its Secret references and downward API values resolved), its
  args, leader election as in a pod, the release's ServiceAccount's own token (TokenRequest) where
  the pod's in-cluster credentials would be, and the health server on a local port. Only Slack's
  Web API is the suite's stand-in;
- a test-harness kubelet stand-in (tests/e2e/kubelet_standin.py), on a Node kwok does not manage,
  runs the hook Pod's own command with the Service address of its environment mapped to the local
  process, and writes the Pod's phase by the exit code through the status subresource, which is
  what `helm test` waits for.

Covers: `helm test` fails while scalebot is a standby (another replica holds the Lease: /readyz
503 with `[-]slack`), passes once it leads (200), and fails once the process is stopped
(connection refused); the hook Pod runs scalebot's image, non-root with a read-only root
filesystem and no ServiceAccount token, under PodSecurity `restricted` enforced; it is deleted when
it passes and kept (until the next `helm test`) when it fails.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from localcluster import objects, rest, waits
from localcluster.binaries import ensure_go_tool
from tests.e2e.chart_support import create_slack_secret, create_static_volume
from tests.e2e.kubelet_standin import KubeletStandIn
from tests.slack.harness import SlackApiServer

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "scalebot"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
MOUNTS = {"/data": "data", "/etc/scalebot": "config"}
"""The pod's volume mounts, as directories of the test's own."""


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, timeout=180)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    fullname: str
    kubeconfig: Path


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_go_tool("helm")


@pytest.fixture
def kubelet(admin_api: Any, unique_name: str) -> Iterator[KubeletStandIn]:
    standin = KubeletStandIn(admin_api, f"{unique_name}-kubelet", programs={"python": sys.executable})
    standin.start()
    yield standin
    standin.close()


@pytest.fixture
def release(
    helm: Path,
    control_plane: ControlPlane,
    admin_api: Any,
    node_pool: Any,
    unique_name: str,
    kubelet: KubeletStandIn,
    tmp_path: Path,
) -> Iterator[Release]:
    """The chart installed in HTTP mode into a namespace of its own, its hook Pod placed on the
    kubelet stand-in's Node (test.nodeSelector, test.tolerations), scalebot's pod on a kwok node."""
    name, namespace = f"ht-{secrets.token_hex(3)}", f"{unique_name}-helm"[:63]
    storage_class = f"{name}-static"
    kubeconfig = control_plane.admin_kubeconfig
    node_pool(1)
    objects.create_namespace(admin_api, namespace, labels=RESTRICTED)
    volume = create_static_volume(admin_api, name, storage_class)
    create_slack_secret(
        admin_api,
        namespace,
        {"SLACK_BOT_TOKEN": "xoxb-helm-test", "SLACK_SIGNING_SECRET": "helm-test-secret"},
    )
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "slack": {"mode": "http"},
                "admissionPolicy": {"enabled": False},
                "persistence": {"storageClassName": storage_class},
                "terminationGracePeriodSeconds": 1,
                "test": {
                    "nodeSelector": kubelet.node_selector,
                    "tolerations": [{**kubelet.taint, "operator": "Equal"}],
                },
            }
        )
    )
    try:
        installed = run(
            helm, "install", name, CHART, "--namespace", namespace, "--kubeconfig", kubeconfig,
            "--values", values, "--wait", "--timeout", "180s",
        )  # fmt: skip
        assert installed.returncode == 0, installed.stdout + installed.stderr
        yield Release(name, namespace, f"{name}-scalebot", kubeconfig)
    finally:
        run(helm, "uninstall", name, "--namespace", namespace, "--kubeconfig", kubeconfig)
        objects.delete_namespace(admin_api, namespace)
        rest.delete(admin_api, volume)


def _secret_value(admin_api: Any, namespace: str, name: str, key: str) -> str:
    data = rest.get(admin_api, f"/api/v1/namespaces/{namespace}/secrets/{name}")["data"]
    return base64.b64decode(data[key]).decode()


def pod_environment(admin_api: Any, pod: dict[str, Any], local: Path) -> dict[str, str]:
    """The container's environment as the kubelet would set it: literal values, Secret keys and
    the downward API; paths under the pod's mounts point into `local`."""
    (container,) = pod["spec"]["containers"]
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        secret = rest.get(admin_api, f"/api/v1/namespaces/{namespace}/secrets/{source['secretRef']['name']}")
        env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
    for var in container.get("env") or []:
        if "valueFrom" not in var:  # a literal; the API server leaves out an empty one's value
            value = str(var.get("value", ""))
            for mount, directory in MOUNTS.items():
                if value.startswith(mount + "/"):
                    value = str(local / directory) + value.removeprefix(mount)
            env[var["name"]] = value
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = _secret_value(admin_api, namespace, ref["name"], ref["key"])
        else:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": namespace}[
                field
            ]
    return env


def service_account_kubeconfig(admin_api: Any, release: Release, account: str, path: Path) -> Path:
    """What the pod's in-cluster credentials are: a TokenRequest token of its ServiceAccount."""
    token = rest.create(
        admin_api,
        f"/api/v1/namespaces/{release.namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    doc = yaml.safe_load(release.kubeconfig.read_text())
    doc["users"] = [{"name": account, "user": {"token": token}}]
    for context in doc["contexts"]:
        context["context"]["user"] = account
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class LocalScalebot:
    proc: subprocess.Popen[str]
    health_port: int
    log: Path

    def readyz(self) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def answers(self, status: int) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"scalebot exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            )
        try:
            return self.readyz()[0] == status
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@contextlib.contextmanager
def scalebot_as_the_pod(
    admin_api: Any, release: Release, slack: SlackApiServer, local: Path
) -> Iterator[LocalScalebot]:
    """The real scalebot process, run from what the chart rendered for the pod kwok runs."""
    (pod,) = [
        p
        for p in rest.list_items(
            admin_api,
            f"/api/v1/namespaces/{release.namespace}/pods",
            label_selector="app.kubernetes.io/name=scalebot",
        )
        if waits.pod_is_running(p)
    ]
    for directory in MOUNTS.values():
        (local / directory).mkdir(parents=True)
    env = pod_environment(admin_api, pod, local)
    config_map = rest.get(
        admin_api, f"/api/v1/namespaces/{release.namespace}/configmaps/{release.fullname}-config"
    )
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    health_port = free_port()
    # The pod's ports, on this machine's loopback; the in-cluster credentials, as a kubeconfig.
    config["server"].update(host="127.0.0.1", http_port=free_port(), health_port=health_port)
    kubeconfig = service_account_kubeconfig(
        admin_api, release, pod["spec"]["serviceAccountName"], local / "in-cluster.kubeconfig"
    )
    for cluster in config["clusters"].values():
        assert not cluster.get("kubeconfig"), "the chart's default cluster uses in-cluster credentials"
        cluster["kubeconfig"] = str(kubeconfig)
    Path(env["SCALEBOT_CONFIG"]).write_text(yaml.safe_dump(config))
    (container,) = pod["spec"]["containers"]
    log = local / "scalebot.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            # The image's entrypoint is `scalebot`; a pod elects a leader by default (in-cluster).
            [sys.executable, "-m", "bot", *container["args"], "--leader-election"],
            cwd=REPO,
            env={
                "PATH": os.environ["PATH"],
                "HOME": str(local),
                "PYTHONPATH": str(REPO),
                **env,
                "SLACK_API_URL": slack.url,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    scalebot = LocalScalebot(proc, health_port, log)
    try:
        yield scalebot
    finally:
        scalebot.stop()


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.close()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_helm_test_passes_only_while_scalebot_answers_readyz_200(
    helm: Path,
    admin_api: Any,
    release: Release,
    kubelet: KubeletStandIn,
    slack: SlackApiServer,
    tmp_path: Path,
) -> None:
    leases = LEASES.format(namespace=release.namespace)
    # Another replica holds the Lease: the scalebot started next is a standby, alive but not ready.
    rest.create(
        admin_api,
        leases,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "scalebot"},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "acquireTime": _now(),
                "renewTime": _now(),
            },
        },
    )
    (service,) = [
        s
        for s in rest.list_items(admin_api, f"/api/v1/namespaces/{release.namespace}/services")
        if s["metadata"]["name"] == f"{release.fullname}-health"
    ]
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "health"]
    address = f"{release.fullname}-health.{release.namespace}.svc:{port}"
    hook = f"{release.fullname}-test-readyz"

    def helm_test() -> subprocess.CompletedProcess[str]:
        before = len(kubelet.runs)
        result = run(
            helm, "test", release.name, "--namespace", release.namespace, "--kubeconfig", release.kubeconfig,
            "--timeout", "90s",
        )  # fmt: skip
        kubelet.check()
        assert len(kubelet.runs) == before + 1, result.stdout + result.stderr
        return result

    def hook_phase() -> str | None:
        pod = rest.get_or_none(admin_api, rest.pod_path(release.namespace, hook))
        return None if pod is None else str(pod["status"].get("phase"))

    with scalebot_as_the_pod(admin_api, release, slack, tmp_path / "pod") as scalebot:
        # The Service's backend is this process: the pod it selects is the one it runs as.
        kubelet.addresses[address] = f"127.0.0.1:{scalebot.health_port}"
        waits.wait_until(lambda: scalebot.answers(503), 60, "the standby's /readyz answering 503")
        assert "[-]slack failed" in scalebot.readyz()[1]

        standby = helm_test()
        assert standby.returncode != 0, standby.stdout
        assert f"pod {hook} failed" in standby.stderr, standby.stderr
        run_ = kubelet.runs[-1]
        assert run_.exit_code == 1
        assert f"http://127.0.0.1:{scalebot.health_port}/readyz: 503" in run_.output, run_.output
        assert "[-]slack failed" in run_.output and "readyz check failed" in run_.output
        assert hook_phase() == "Failed", "a failed hook Pod stays for `kubectl logs`"

        # What the chart promised of the hook Pod, as the API server holds it.
        spec = run_.spec
        (container,) = spec["containers"]
        (deployment,) = rest.list_items(
            admin_api, f"/apis/apps/v1/namespaces/{release.namespace}/deployments"
        )
        assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert container["env"] == [{"name": "SCALEBOT_HEALTH_SERVICE", "value": address}]
        assert spec["automountServiceAccountToken"] is False
        assert spec["nodeName"] == kubelet.node
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert not [m for m in container.get("volumeMounts") or [] if "serviceaccount" in m["mountPath"]]

        # The other replica is gone: its Lease with it. This scalebot takes over and is ready.
        rest.delete(admin_api, f"{leases}/scalebot")
        waits.wait_until(lambda: scalebot.answers(200), 60, "the leader's /readyz answering 200")

        leading = helm_test()
        assert leading.returncode == 0, leading.stdout + leading.stderr
        assert "Phase:          Succeeded" in leading.stdout, leading.stdout
        assert kubelet.runs[-1].exit_code == 0
        assert "readyz check passed" in kubelet.runs[-1].output, kubelet.runs[-1].output
        waits.wait_until(lambda: hook_phase() is None, 30, "the passed hook Pod deleted (hook-succeeded)")

        scalebot.stop()
        assert scalebot.proc.returncode == 0

        stopped = helm_test()
        assert stopped.returncode != 0, stopped.stdout
        assert kubelet.runs[-1].exit_code == 1
        assert "Connection refused" in kubelet.runs[-1].output, kubelet.runs[-1].output

"""Starting and stopping a real Kubernetes control plane on 127.0.0.1, with no Docker.

This module owns the processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok (simulating the nodes), their flags, keys, certificates and kubeconfigs, the readiness ladder,
and teardown. It also installs scalebot's own RBAC from manifests/base (plus the simulated-nodes
component: kwok's nodes are simulated) and mints a TokenRequest token for the `scalebot`
ServiceAccount, so the product is tested with exactly the rights (and the API Priority and
Fairness level, workload-low) it has in production.

Every child runs in its own process group (start_new_session) and is stopped by group, in reverse
start order, on `stop()`, on leaving the `with` block, on interpreter exit (atexit), on SIGTERM/SIGHUP
(turned into SystemExit so the same path runs) and, if the Python process is killed outright, by the
kernel (PR_SET_PDEATHSIG). A *detached* control plane (`scalebot sandbox up`) skips all of that so
it outlives the command; `localcluster.sandbox.down` stops it from the recorded pids.

The credentials are `localcluster.pki`'s and the children's exit hooks and readings
`localcluster.processes`'. The rest stays one module (over 600 lines) on purpose: `ControlPlane` is
one lifecycle (flags, start order, readiness ladder, scalebot's identity, teardown) whose steps
share its ports, pids and run directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson
import yaml
from kubernetes.client.exceptions import ApiException

from localcluster import bodies, objects, rest, waits
from localcluster.binaries import REPO_ROOT, ensure_binaries
from localcluster.pki import kubeconfig_text, write_pki
from localcluster.processes import (
    LIBC,
    LIVE,
    LOG_TAIL_LINES,
    ComponentProcess,
    die_with_parent,
    install_process_hooks,
    log_tail,
    pid_alive,
    process_rss_kib,
)

ADMIN_USER = "admin"
SCALEBOT_NAMESPACE = "scalebot"
SCALEBOT_SERVICEACCOUNT = "scalebot"
# The manifests that define scalebot's identity; applied as admin, in this order. The nodes here
# are kwok's, i.e. simulated, so the simulated-nodes component (create Nodes on wake) applies too.
# The field-level admission policy is part of it: every test acting as scalebot's ServiceAccount
# runs under it, so a legitimate write the policy forgot fails a test.
SCALEBOT_MANIFESTS = (
    "base/namespace.yaml",
    "base/serviceaccount.yaml",
    "base/rbac.yaml",
    "base/admission-policy.yaml",
    "components/simulated-nodes/rbac.yaml",
)
POLICY_PROBE_CONFIGMAP = "localcluster-policy-probe"
"""A ConfigMap name the admission policy refuses to scalebot (not one of its records): a dry-run
create of it as scalebot tells when the policy is in force."""
MANIFEST_DIR = REPO_ROOT / "manifests"

DEFAULT_NODE_LEASE_SECONDS = 40  # kubelet's default node lease duration
POD_CIDR = "10.128.0.1/12"  # about a million pod IPs for kwok; kwok's default /24 holds 254
SERVICE_CIDR = "10.96.0.0/16"  # outside the pod range
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "karpenter")
"""Start order; `karpenter` (Karpenter's kwok cloud provider) runs only once `start_karpenter()` asks."""
PROBE = "localcluster-probe"

# A kubelet re-reports Ready for its running pods when its node comes back; kwok's pod-ready stage
# only handles Pending pods. Without this stage, pods that the node lifecycle controller marked
# NotReady (while kwok's Lease renewals lagged, or after restore_node) would stay NotReady for good,
# and Deployments/DaemonSets would never become fully available again.
POD_READY_AGAIN_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scalebot-pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
"""


class ControlPlaneError(RuntimeError):
    """Start-up or a readiness step failed; the message carries each component's log tail."""


def free_port(exclude: set[int] | None = None) -> int:
    """A currently free loopback port (bind to port 0, read it, close). Callers retry on EADDRINUSE."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not exclude or port not in exclude:
            return port


def _http_get(
    url: str, *, context: ssl.SSLContext | None = None, token: str | None = None, timeout: float = 2.0
) -> tuple[int, str]:
    """GET returning (status, body); (0, reason) when the server is not answering yet."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc)


def _insecure_context() -> ssl.SSLContext:
    # The controller manager and the scheduler serve /healthz with their own throw-away self-signed
    # certificates; the check only asks whether they are up, so it does not verify them.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _resource_path(doc: dict[str, Any]) -> str:
    """Collection path for a manifest object (simple kinds: plural = lower-case kind + s, -y -> -ies)."""
    group_version = doc["apiVersion"]
    prefix = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    kind = doc["kind"].lower()
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    namespace = doc.get("metadata", {}).get("namespace")
    if namespace:
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on free loopback ports.

    Use as a context manager (or start()/stop()). After start():
      admin_kubeconfig     system:masters token (exempt from API Priority and Fairness)
      scalebot_kubeconfig  TokenRequest token of ServiceAccount scalebot/scalebot, bound by
                           manifests/base/rbac.yaml (workload-low)
      api_url, bin_dir, run_dir, startup_seconds, startup_steps
      kubectl(*args, identity="admin"|"scalebot"), admin_api_client(), scalebot_api_client()
      stop_apiserver()/start_apiserver() for fault tests (same port, same etcd data)
    """

    KCM_CONTROLLER_SUFFIX: ClassVar[str] = "-controller"

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        run_dir: Path | None = None,
        disabled_controllers: Sequence[str] = (),
        detached: bool = False,
        install_capi_crds: bool = False,
        token_ttl_seconds: int = 24 * 3600,
        startup_timeout: float = 120.0,
        keep_run_dir: bool = False,
        echo: Callable[[str], None] | None = None,
        node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS,
    ) -> None:
        """`node_lease_seconds` is kwok's node lease duration; it renews each Lease every quarter of
        it, as a kubelet does, so 1,000 nodes at the default cost the API server and etcd 100 Lease
        writes a second. Benchmarks lengthen it to take that synthetic load off the machine; the
        node lifecycle controller's grace period then grows with it, or every node turns NotReady."""
        if node_lease_seconds < DEFAULT_NODE_LEASE_SECONDS:
            raise ValueError(f"node_lease_seconds must be at least {DEFAULT_NODE_LEASE_SECONDS}")
        self.node_lease_seconds = node_lease_seconds
        self._cache_dir = cache_dir
        self._requested_run_dir = run_dir
        self.disabled_controllers = self._controller_names(disabled_controllers)
        self.detached = detached
        self.install_capi_crds = install_capi_crds
        self.token_ttl_seconds = token_ttl_seconds
        self.startup_timeout = startup_timeout
        self.keep_run_dir = keep_run_dir or os.environ.get("SCALEBOT_KEEP_RUN_DIR") == "1"
        self._echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._components: dict[str, ComponentProcess] = {}
        self._ports: dict[str, int] = {}
        self._lock = threading.RLock()
        self._started = False
        self._run_dir: Path | None = None
        self._bin_dir: Path | None = None
        self.admin_token = secrets.token_urlsafe(32)
        self.static_scalebot_token = secrets.token_urlsafe(32)
        self.scalebot_token = ""
        self.startup_seconds = 0.0
        self.startup_steps: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------
    # Public surface

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is None:
            self._cache_dir = ensure_binaries()
        return self._cache_dir

    @property
    def bin_dir(self) -> Path:
        """The binaries this control plane runs: hard links in its run dir once started."""
        return self._bin_dir if self._bin_dir is not None else self.cache_dir / "bin"

    @property
    def run_dir(self) -> Path:
        if self._run_dir is None:
            raise ControlPlaneError("control plane not started")
        return self._run_dir

    @property
    def api_port(self) -> int:
        return self._ports["apiserver"]

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self._ports['etcd']}"

    @property
    def ca_file(self) -> Path:
        return self.run_dir / "pki" / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.run_dir / "admin.kubeconfig"

    @property
    def scalebot_kubeconfig(self) -> Path:
        return self.run_dir / "scalebot.kubeconfig"

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._ports)

    def pids(self) -> dict[str, int]:
        """Component name -> pid (also its process-group id) for the running components."""
        return {name: c.pid for name, c in self._components.items() if c.pid is not None}

    def log_path(self, component: str) -> Path:
        return self._components[component].log_path

    def kubectl(
        self,
        *args: str,
        identity: str = "admin",
        check: bool = False,
        timeout: float = 60.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as `admin` or `scalebot` (the ServiceAccount token)."""
        kubeconfig = {"admin": self.admin_kubeconfig, "scalebot": self.scalebot_kubeconfig}[identity]
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            input=input,
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(self.run_dir)},
        )

    def admin_api_client(self, *, pool_size: int = 32) -> Any:
        """A kubernetes ApiClient as admin; close() it when done."""
        return rest.api_client_from_kubeconfig(self.admin_kubeconfig, pool_size=pool_size)

    def scalebot_api_client(self, *, pool_size: int = 32) -> Any:
        """A kubernetes ApiClient as the scalebot ServiceAccount; close() it when done."""
        return rest.api_client_from_kubeconfig(self.scalebot_kubeconfig, pool_size=pool_size)

    def rss_kib(self) -> dict[str, tuple[int, int]]:
        """Component -> (RSS, peak RSS) in KiB."""
        return {name: process_rss_kib(pid) for name, pid in self.pids().items()}

    def logs(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for name in ORDER:
            comp = self._components.get(name)
            if comp is not None:
                heading = f"----- {name} ({comp.log_path}), last {lines} lines -----"
                parts.append(f"{heading}\n{log_tail(comp.log_path, lines)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------------------------------
    # Start-up

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            if not self.detached:
                install_process_hooks()
                LIVE.add(self)
            cache_dir = self.cache_dir  # may build (minutes when cold); not counted as start-up
            t0 = time.monotonic()
            try:
                self._prepare_run_dir(cache_dir)
                self._step("etcd", self._start_etcd)
                self._step("kube-apiserver", self._start_apiserver_component)
                self._step("controllers", self._start_controllers)
                self._step("scalebot identity", self._install_scalebot_identity)
                if self.install_capi_crds:
                    self._step("Cluster API CRDs", self._install_capi_crds)
                self._step("readiness ladder", self._readiness_ladder)
            except BaseException as exc:
                logs = self.logs()
                keep = self.keep_run_dir
                self.keep_run_dir = True  # keep the logs of a failed start for inspection
                self.stop()
                self.keep_run_dir = keep
                if isinstance(exc, Exception):
                    raise ControlPlaneError(
                        f"control plane failed to start: {exc}\nrun dir (kept): {self._run_dir}\n{logs}"
                    ) from exc
                raise
            self.startup_seconds = time.monotonic() - t0
            steps = ", ".join(f"{k} {v:.1f} s" for k, v in self.startup_steps.items())
            self._echo(f"local control plane up in {self.startup_seconds:.1f} s ({steps}) at {self.api_url}")

    def _step(self, name: str, fn: Callable[[], None]) -> None:
        t = time.monotonic()
        fn()
        self.startup_steps[name] = time.monotonic() - t

    def _prepare_run_dir(self, cache_dir: Path) -> None:
        if self._requested_run_dir is not None:
            self._requested_run_dir.mkdir(parents=True, exist_ok=False)
            self._run_dir = self._requested_run_dir
        else:
            self._run_dir = Path(tempfile.mkdtemp(prefix="scalebot-cp-"))
        run = self._run_dir
        (run / "logs").mkdir()
        # Hard links (a copy if the cache is on another filesystem): a rebuild of the cache, which
        # replaces its directory, must not pull the binaries from under a running control plane.
        (run / "bin").mkdir()
        for exe in sorted((cache_dir / "bin").iterdir()):
            try:
                os.link(exe, run / "bin" / exe.name)
            except OSError:
                shutil.copy2(exe, run / "bin" / exe.name)
        self._bin_dir = run / "bin"
        write_pki(run)
        # token,user,uid,"groups" (k8s.io/apiserver token file format). The static scalebot user is
        # a fallback identity with no bindings; tests use the ServiceAccount token instead.
        (run / "tokens.csv").write_text(
            f'{self.admin_token},{ADMIN_USER},uid-admin,"system:masters"\n'
            f'{self.static_scalebot_token},scalebot,uid-scalebot,"scalebot"\n'
        )
        (run / "tokens.csv").chmod(0o600)
        # kwok's stages from the build, plus tuning of its own worker counts for big clusters.
        shutil.copyfile(cache_dir / "kwok.yaml", run / "kwok-stages.yaml")
        (run / "kwok-extra-stages.yaml").write_text(POD_READY_AGAIN_STAGE)
        (run / "kwok-options.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                    "kind": "KwokConfiguration",
                    "options": {
                        # Lease renewals must keep up with 1,000 nodes while pods are created in bulk,
                        # or the node lifecycle controller marks nodes (and their pods) NotReady. The pod
                        # and node stage workers stay at kwok's default of 4: more only adds replays of a
                        # stage on a stale cache (each draws a new pod IP, and the patch is rejected).
                        # They must be spelled out: with a KwokConfiguration document, kwok does not
                        # default them and refuses to start ("playStageParallelism must be greater than 0").
                        "nodeLeaseParallelism": 32,
                        "podPlayStageParallelism": 4,
                        "nodePlayStageParallelism": 4,
                    },
                }
            )
        )
        used: set[int] = set()
        for key in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler"):
            self._ports[key] = free_port(used)
            used.add(self._ports[key])
        for name in ORDER:
            if name != "karpenter":  # added by start_karpenter()
                self._components[name] = ComponentProcess(name=name, log_path=run / "logs" / f"{name}.log")
        self._write_admin_files()

    def _write_admin_files(self) -> None:
        run = self.run_dir
        ca = (run / "pki" / "ca.crt").read_bytes()
        (run / "admin.kubeconfig").write_text(kubeconfig_text(self.api_url, ca, ADMIN_USER, self.admin_token))
        (run / "admin.kubeconfig").chmod(0o600)
        (run / "scheduler.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    # Default client QPS (50) would cap binding far below what the tests create.
                    "clientConnection": {
                        "kubeconfig": str(run / "admin.kubeconfig"),
                        "qps": 500,
                        "burst": 1000,
                    },
                    "leaderElection": {"leaderElect": False},
                }
            )
        )

    # argv builders -------------------------------------------------------------------------------

    def _argv(self, name: str) -> list[str]:
        run = self.run_dir
        pki = run / "pki"
        b = self.bin_dir
        p = self._ports
        admin = str(run / "admin.kubeconfig")
        if name == "etcd":
            return [
                str(b / "etcd"),
                "--name=e2e",
                f"--data-dir={run / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                f"--initial-cluster=e2e=http://127.0.0.1:{p['etcd-peer']}",
                "--unsafe-no-fsync=true",  # test data only; fsync dominates write latency otherwise
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ]
        if name == "kube-apiserver":
            return [
                str(b / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--token-auth-file={run / 'tokens.csv'}",
                # Publishes extension-apiserver-authentication, which the controller manager and the
                # scheduler read for delegated authentication (they log errors until it exists).
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{p['apiserver']}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # The `kubernetes` Service's Endpoints cannot hold a loopback address; nothing
                # in these clusters needs that Service, so skip reconciling it.
                "--endpoint-reconciler-type=none",
                # No --enable/--disable-admission-plugins: the defaults include ValidatingAdmissionPolicy
                # (on by default since 1.30), which scalebot's field policy needs; start-up waits
                # until that policy is enforced (_wait_for_field_policy) and fails if it never is.
                # API Priority and Fairness stays on with the default in-flight limits (400/200):
                # scalebot's throughput must be measured against the limits a real server applies.
            ]
        if name == "kube-controller-manager":
            controllers = ",".join(["*", *(f"-{c}" for c in self.disabled_controllers)])
            return [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kcm']}",
                "--leader-elect=false",
                f"--controllers={controllers}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                # The default client (20 QPS / 30 burst) caps ReplicaSet pod creation near 20 pods/s.
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-replicaset-syncs=20",
                "--concurrent-deployment-syncs=20",
                "--concurrent-statefulset-syncs=20",
                "--concurrent-daemonset-syncs=10",
                "--concurrent-gc-syncs=40",
                *self._node_monitor_flags(),
            ]
        if name == "kube-scheduler":
            return [
                str(b / "kube-scheduler"),
                f"--config={run / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['scheduler']}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            ]
        if name == "karpenter":
            # Configured through its environment (_env): it has no --kubeconfig flag.
            return [str(b / "karpenter-kwok")]
        if name == "kwok":
            return [
                str(b / "kwok"),
                f"--kubeconfig={admin}",
                f"--config={run / 'kwok-stages.yaml'}",
                f"--config={run / 'kwok-extra-stages.yaml'}",
                f"--config={run / 'kwok-options.yaml'}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-label-selector=type=kwok",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                f"--cidr={POD_CIDR}",
            ]
        raise KeyError(name)

    def _node_monitor_flags(self) -> list[str]:
        """The controller manager's defaults, unless the node leases were lengthened: then the grace
        period keeps the defaults' proportion (40 s leases, 50 s grace)."""
        if self.node_lease_seconds == DEFAULT_NODE_LEASE_SECONDS:
            return []
        return [f"--node-monitor-grace-period={self.node_lease_seconds * 5 // 4}s"]

    def _env(self, name: str) -> dict[str, str]:
        if name != "karpenter":
            return {}
        return {
            # controller-runtime reads KUBECONFIG; Karpenter's own flag set has no --kubeconfig.
            "KUBECONFIG": str(self.run_dir / "admin.kubeconfig"),
            # Leader election is on by default and, outside a cluster, finds no namespace to lease in.
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(self._ports["karpenter-metrics"]),
            "HEALTH_PROBE_PORT": str(self._ports["karpenter-health"]),
            "LOG_LEVEL": "info",
            # Karpenter's defaults: provision one batch 1 s after the last pending pod, at most 10 s.
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "10s",
        }

    # process handling ----------------------------------------------------------------------------

    def _spawn(self, name: str) -> None:
        comp = self._components[name]
        comp.argv = self._argv(name)
        env = {**os.environ, **self._env(name)}
        # kwok also loads ~/.kwok/kwok.yaml if it exists; a private HOME keeps a user's file out.
        env["HOME"] = str(self.run_dir)
        # PDEATHSIG fires when the *thread* that forked exits, so only the main thread uses it.
        attached = not self.detached and threading.current_thread() is threading.main_thread()
        if attached and "prctl" not in LIBC:
            LIBC["prctl"] = ctypes.CDLL(None, use_errno=True).prctl
        with comp.log_path.open("ab") as log:
            log.write(f"\n===== {time.strftime('%H:%M:%S')} {' '.join(comp.argv)}\n".encode())
            log.flush()
            comp.popen = subprocess.Popen(
                comp.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env=env,
                start_new_session=True,  # own process group: stopped as a group, immune to Ctrl-C
                # Between fork and exec only one prctl() runs (libc resolved beforehand).
                preexec_fn=die_with_parent if attached else None,  # noqa: PLW1509
            )
        comp.pid = comp.popen.pid
        if self.detached:
            _DETACHED.append(comp.popen)

    def _alive(self, name: str) -> bool:
        comp = self._components[name]
        if comp.popen is not None:
            return comp.popen.poll() is None
        return comp.pid is not None and pid_alive(comp.pid)

    def _wait_ready(self, name: str, check: Callable[[], bool], timeout: float) -> None:
        """Poll `check` until it holds; fail at once if the component exits."""

        def ready() -> bool:
            if not self._alive(name):
                raise ControlPlaneError(f"{name} exited during start-up:\n{log_tail(self.log_path(name))}")
            return check()

        waits.wait_until(ready, timeout, f"{name} to become ready", interval=0.05, max_interval=0.25)

    def _start_with_port_retry(self, name: str, port_keys: Sequence[str], check: Callable[[], bool]) -> None:
        """Start a component; if it lost a race for its port (EADDRINUSE), pick new ports and retry."""
        for attempt in range(3):
            self._spawn(name)
            try:
                self._wait_ready(name, check, self.startup_timeout)
                return
            except ControlPlaneError:
                if attempt == 2 or "address already in use" not in log_tail(self.log_path(name), 200):
                    raise
            self._terminate(name)
            used = set(self._ports.values())
            for key in port_keys:
                self._ports[key] = free_port(used)
                used.add(self._ports[key])
            if "apiserver" in port_keys:
                self._write_admin_files()

    def _start_etcd(self) -> None:
        def healthy() -> bool:
            status, body = _http_get(f"{self.etcd_url}/health")
            return status == 200 and '"health":"true"' in body.replace(" ", "")

        self._start_with_port_retry("etcd", ("etcd", "etcd-peer"), healthy)

    def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        status, _ = _http_get(f"{self.api_url}/readyz", context=ctx, token=self.admin_token)
        return status == 200

    def _start_apiserver_component(self) -> None:
        try:
            self._start_with_port_retry("kube-apiserver", ("apiserver",), self._apiserver_ready)
        except waits.WaitTimeout as exc:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            _, verbose = _http_get(f"{self.api_url}/readyz?verbose", context=ctx, token=self.admin_token)
            raise ControlPlaneError(f"{exc}\n/readyz?verbose:\n{verbose}") from exc

    @classmethod
    def _controller_names(cls, names: Sequence[str]) -> list[str]:
        return [c if c.endswith(cls.KCM_CONTROLLER_SUFFIX) else c + cls.KCM_CONTROLLER_SUFFIX for c in names]

    def _controller_manager_healthy(self) -> bool:
        healthz = f"https://127.0.0.1:{self._ports['kcm']}/healthz"
        return _http_get(healthz, context=_insecure_context()) == (200, "ok")

    def restart_controller_manager(self, *, disabled_controllers: Sequence[str] = ()) -> float:
        """Restart kube-controller-manager with these controllers disabled (none by default); return
        the seconds until it is healthy again. A population that binds its pods itself
        (`populate(..., bind_directly=True)`) starts without the ReplicaSet controller and turns it
        on once the pods exist: the controller then adopts them and creates none."""
        with self._lock:
            t = time.monotonic()
            self.disabled_controllers = self._controller_names(disabled_controllers)
            self._terminate("kube-controller-manager")
            self._start_with_port_retry("kube-controller-manager", ("kcm",), self._controller_manager_healthy)
            return time.monotonic() - t

    def _start_controllers(self) -> None:
        insecure = _insecure_context()
        checks: dict[str, Callable[[], bool]] = {
            "kube-controller-manager": self._controller_manager_healthy,
            "kube-scheduler": lambda: (
                _http_get(f"https://127.0.0.1:{self._ports['scheduler']}/healthz", context=insecure)
                == (200, "ok")
            ),
        }
        ports = {"kube-controller-manager": ("kcm",), "kube-scheduler": ("scheduler",)}
        # Start all three before waiting for any: their start-ups overlap.
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._spawn(name)
        for name in ("kube-controller-manager", "kube-scheduler"):
            try:
                self._wait_ready(name, checks[name], self.startup_timeout)
            except ControlPlaneError:
                if "address already in use" not in log_tail(self.log_path(name), 200):
                    raise
                self._terminate(name)
                self._start_with_port_retry(name, ports[name], checks[name])
        # kwok has no port of its own here; the readiness ladder proves it works (a probe node).
        if not self._alive("kwok"):
            raise ControlPlaneError(f"kwok exited during start-up:\n{log_tail(self.log_path('kwok'))}")

    # scalebot's identity --------------------------------------------------------------------------

    def _install_scalebot_identity(self) -> None:
        api = self.admin_api_client(pool_size=4)
        try:
            for filename in SCALEBOT_MANIFESTS:
                path = MANIFEST_DIR / filename
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc:
                        continue
                    try:
                        rest.create(api, _resource_path(doc), doc)
                    except ApiException as exc:
                        if exc.status != 409:  # already there (an apiserver restart keeps etcd)
                            raise ControlPlaneError(
                                f"applying {path} ({doc['kind']}): {exc.status} {exc.body}"
                            ) from exc
            self.scalebot_token = self.mint_scalebot_token(api)
        finally:
            api.close()
        ca = self.ca_file.read_bytes()
        self.scalebot_kubeconfig.write_text(
            kubeconfig_text(self.api_url, ca, "scalebot", self.scalebot_token)
        )
        self.scalebot_kubeconfig.chmod(0o600)
        self._wait_for_field_policy()

    def _wait_for_field_policy(self) -> None:
        """Until the API server enforces the admission policy just created (its informer and type
        check take a moment), a dry-run create of a ConfigMap scalebot may not write is allowed."""
        api = self.scalebot_api_client(pool_size=1)
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": POLICY_PROBE_CONFIGMAP}}
        path = f"/api/v1/namespaces/{SCALEBOT_NAMESPACE}/configmaps"

        def refused() -> bool:
            try:
                rest.raw_request(api, "POST", path, body=body, query={"dryRun": "All"})
            except ApiException as exc:
                if exc.status == 403 and "scalebot-workloads" in str(exc.body):
                    return True
                raise
            return False

        try:
            waits.wait_until(refused, 30.0, "the admission policy scalebot-fields to be in force")
        finally:
            api.close()

    def mint_scalebot_token(self, api: Any, *, ttl_seconds: int | None = None) -> str:
        """A TokenRequest token for ServiceAccount scalebot/scalebot (as production pods get one)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": ttl_seconds or self.token_ttl_seconds},
        }
        path = f"/api/v1/namespaces/{SCALEBOT_NAMESPACE}/serviceaccounts/{SCALEBOT_SERVICEACCOUNT}/token"
        # The ServiceAccount was just created: retry briefly on 404 while the API server's cache catches up.
        result: dict[str, Any] = waits.wait_until(
            lambda: rest.create(api, path, body),
            15.0,
            "a TokenRequest for scalebot/scalebot",
            ignore=(ApiException,),
        )
        return str(result["status"]["token"])

    def start_karpenter(self) -> None:
        """Install Karpenter's CRDs (from the pinned module) and run its kwok cloud provider.

        Opt-in: only the tests of the Karpenter provider need it, and it watches every pod. It runs
        the real provisioning, disruption and termination controllers; its "cloud" creates Node
        objects, which the kwok simulator makes Ready when the NodePool's template carries the
        label `type=kwok`. Idempotent; `stop()` stops it with the rest.
        """
        with self._lock:
            if not self._started:
                raise ControlPlaneError("control plane not started")
            if self._alive_if_known("karpenter"):
                return
            crd_dir = self.cache_dir / "karpenter-crds"
            if not (crd_dir / "karpenter.sh_nodepools.yaml").is_file():
                raise ControlPlaneError(
                    f"{crd_dir} has no Karpenter CRDs: rebuild with scripts/build-control-plane.sh"
                )
            self._apply_crds(crd_dir, "Karpenter")
            used = set(self._ports.values())
            for key in ("karpenter-metrics", "karpenter-health"):
                self._ports[key] = free_port(used)
                used.add(self._ports[key])
            self._components["karpenter"] = ComponentProcess(
                name="karpenter", log_path=self.run_dir / "logs" / "karpenter.log"
            )

            def healthy() -> bool:
                return _http_get(f"http://127.0.0.1:{self._ports['karpenter-health']}/readyz")[0] == 200

            self._start_with_port_retry("karpenter", ("karpenter-metrics", "karpenter-health"), healthy)

    def _alive_if_known(self, name: str) -> bool:
        return name in self._components and self._alive(name)

    def _apply_crds(self, crd_dir: Path, what: str) -> None:
        result = self.kubectl("apply", "--server-side", "-f", str(crd_dir), timeout=120)
        if result.returncode != 0:
            raise ControlPlaneError(f"installing {what} CRDs failed:\n{result.stderr}")
        result = self.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd_dir), timeout=90
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"{what} CRDs not Established:\n{result.stderr}")

    def _install_capi_crds(self) -> None:
        self._apply_crds(self.cache_dir / "capi-crds", "Cluster API")

    # readiness ladder (reference §7) ---------------------------------------------------------------

    def _readiness_ladder(self) -> None:
        api = self.admin_api_client(pool_size=4)
        node = f"{PROBE}-node"
        try:
            # Controllers work: the serviceaccount controller fills a fresh namespace, the disruption
            # controller observes a PDB.
            objects.create_namespace(api, PROBE, timeout=self.startup_timeout)
            objects.create_pdb(api, PROBE, "probe", match_labels={"app": "probe"}, max_unavailable=1)
            waits.wait_for_pdb_observed(api, PROBE, "probe", timeout=self.startup_timeout)
            # kwok works: a probe node becomes Ready.
            rest.create(api, rest.node_path(), bodies.node_body(node, PROBE))
            waits.wait_for_nodes_ready(api, [node], timeout=self.startup_timeout)
            # Scheduler and kwok together: a one-replica Deployment becomes available with a pod IP.
            objects.create_deployment(api, PROBE, "probe", 1, node_selector={"kubernetes.io/hostname": node})
            waits.wait_for_deployment_available(api, PROBE, "probe", timeout=self.startup_timeout)
            pods = rest.list_pods(api, PROBE, label_selector="app=probe")
            if not pods or not (pods[0].get("status") or {}).get("podIP"):
                raise ControlPlaneError(f"probe pod has no podIP: {orjson.dumps(pods).decode()[:2000]}")
        finally:
            # The probe must not linger: a Ready, schedulable node would attract test workloads.
            with contextlib.suppress(Exception):
                rest.delete(api, rest.node_path(node))
                objects.delete_namespace(api, PROBE)
            api.close()

    # ------------------------------------------------------------------------------------------
    # Fault injection

    def stop_apiserver(self, *, graceful: bool = False) -> None:
        """Stop kube-apiserver; the other components keep running and retry, as in an outage.

        By default it is killed (SIGKILL: a crash, immediate). graceful=True sends SIGTERM; the
        apiserver then drains its connections, which takes about 10 s while clients hold watches.
        """
        with self._lock:
            self._terminate("kube-apiserver", grace=30.0 if graceful else 0.0)

    def start_apiserver(self, *, timeout: float = 60.0) -> float:
        """Start kube-apiserver again on the same port with the same data; return seconds to /readyz."""
        with self._lock:
            if self._alive("kube-apiserver"):
                return 0.0
            t = time.monotonic()
            # Same port: a few retries in case the old socket lingers in TIME_WAIT-like states.
            for attempt in range(5):
                self._spawn("kube-apiserver")
                try:
                    self._wait_ready("kube-apiserver", self._apiserver_ready, timeout)
                    break
                except ControlPlaneError:
                    if attempt == 4 or "address already in use" not in log_tail(
                        self.log_path("kube-apiserver"), 50
                    ):
                        raise
                    waits.wait_until(
                        lambda: _port_free(self.api_port), 10, f"port {self.api_port} to be released"
                    )
            return time.monotonic() - t

    # ------------------------------------------------------------------------------------------
    # Teardown

    def _terminate(self, name: str, *, grace: float = 10.0) -> None:
        comp = self._components.get(name)
        if comp is None or comp.pid is None:
            return
        pgid = comp.pid  # start_new_session: the child leads its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        if comp.popen is not None:
            try:
                comp.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                comp.popen.wait(timeout=10.0)
        else:
            deadline = time.monotonic() + grace
            while pid_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        # Anything else left in the group (children of the component) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        comp.popen = None
        comp.pid = None

    def stop(self) -> None:
        """Stop every component in reverse start order (TERM, wait, KILL) and remove the run dir."""
        with self._lock:
            for name in reversed(ORDER):
                with contextlib.suppress(Exception):
                    self._terminate(name)
            LIVE.discard(self)
            if self._run_dir is not None and not self.keep_run_dir:
                shutil.rmtree(self._run_dir, ignore_errors=True)

    def detach_info(self) -> dict[str, Any]:
        """What `sandbox.down` needs to find and stop a detached control plane later."""
        return {
            "run_dir": str(self.run_dir),
            "api_url": self.api_url,
            "ports": self.ports,
            "processes": [
                {"name": name, "pid": comp.pid, "argv0": comp.argv[0] if comp.argv else ""}
                for name, comp in self._components.items()
                if comp.pid is not None
            ],
        }


# Popen objects of detached components are kept referenced so that garbage collection never warns
# "subprocess N is still running" about processes that are meant to outlive this interpreter.
_DETACHED: list[subprocess.Popen[bytes]] = []


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def running_control_plane(**kwargs: Any) -> Iterator[ControlPlane]:
    """`with running_control_plane() as cp:` — builds binaries if needed, starts, always stops."""
    cp = ControlPlane(**kwargs)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()

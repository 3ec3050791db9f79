"""A test-harness stand-in for a kubelet, for Pods whose command must really run.

kwok runs no containers: it marks a pod Running or Succeeded without executing anything, so a
`helm test` hook on a kwok node would pass whatever its command does. This stand-in registers a
Node of its own, outside kwok's selector (no `type=kwok` label) and tainted so that only pods
tolerating the taint land on it. For each pod the real scheduler binds to that Node, it does what a
kubelet would: runs the pod's own container command (here, on this machine) with the pod's own
environment and writes the outcome through the pod's status subresource: Running, then Succeeded
or Failed by the exit code, the container's exit code and output kept for the test.

What differs from a kubelet, on purpose and explicitly:
- `addresses` maps cluster addresses (a Service's `name.namespace.svc:port`) to local ones
  (`127.0.0.1:port`, where the test runs the process the Service's pod stands for); they are
  replaced in the pod's environment values. The pods here have no cluster network or DNS.
- `programs` maps the image's executables to local ones (the image's `python` is this interpreter).
- Only literal environment values are supported (a `valueFrom` fails the pod, saying so); no
  volumes, one container, no restarts (restartPolicy Never), no image pull.
- Its Node Lease is renewed while it runs, so the node lifecycle controller keeps the Node Ready.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localcluster import rest

STANDIN_LABEL = "scalebot.test/kubelet-standin"
LEASE_SECONDS = 40
POLL_SECONDS = 0.2
RUN_TIMEOUT_SECONDS = 60


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class PodRun:
    """One pod the stand-in ran: its spec as created, the container's exit code and output."""

    namespace: str
    name: str
    spec: dict[str, Any]
    exit_code: int
    output: str


class KubeletStandIn:
    def __init__(
        self,
        api: Any,
        node: str,
        *,
        addresses: Mapping[str, str] | None = None,
        programs: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.addresses = dict(addresses or {})
        self.programs = dict(programs or {})
        self.runs: list[PodRun] = []
        self._handled: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def taint(self) -> dict[str, str]:
        """The taint that keeps every other pod off this Node (tolerate it to land here)."""
        return {"key": STANDIN_LABEL, "value": self.node, "effect": "NoSchedule"}

    @property
    def node_selector(self) -> dict[str, str]:
        return {"kubernetes.io/hostname": self.node}

    def start(self) -> KubeletStandIn:
        rest.create(
            self.api,
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": self.node,
                    "labels": {
                        "kubernetes.io/hostname": self.node,
                        "kubernetes.io/os": "linux",
                        STANDIN_LABEL: "true",
                    },
                },
                "spec": {"taints": [self.taint]},
            },
        )
        resources = {"cpu": "2", "memory": "4Gi", "pods": "10"}
        rest.patch(
            self.api,
            rest.node_path(self.node) + "/status",
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "test-harness kubelet stand-in",
                            "lastHeartbeatTime": _now(),
                            "lastTransitionTime": _now(),
                        }
                    ],
                    "addresses": [{"type": "Hostname", "address": self.node}],
                }
            },
        )
        rest.create(
            self.api,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.node},
                "spec": {
                    "holderIdentity": self.node,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": _micro_now(),
                },
            },
        )
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-standin-{self.node}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=RUN_TIMEOUT_SECONDS + 10)
        rest.delete(self.api, f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node}")
        rest.delete(self.api, rest.node_path(self.node))
        if self._error is not None:
            raise AssertionError(f"the kubelet stand-in failed: {self._error!r}") from self._error

    def check(self) -> None:
        """Raise if the stand-in's loop died (a test waiting on it would otherwise just time out)."""
        if self._error is not None:
            raise AssertionError(f"the kubelet stand-in failed: {self._error!r}") from self._error

    # -- the sync loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        renewed = time.monotonic()
        try:
            while not self._stop.is_set():
                if time.monotonic() - renewed >= LEASE_SECONDS / 4:  # as a kubelet renews its Lease
                    renewed = time.monotonic()
                    rest.patch(
                        self.api,
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node}",
                        {"spec": {"renewTime": _micro_now()}},
                    )
                self._sync()
                # The poll period of this harness loop, not a synchronisation: tests wait on results.
                self._stop.wait(POLL_SECONDS)
        except BaseException as exc:  # reported by check()/close(): a dead loop must fail the test
            self._error = exc

    def _sync(self) -> None:
        pods = rest.list_items(self.api, "/api/v1/pods", field_selector=f"spec.nodeName={self.node}")
        for pod in pods:
            meta = pod["metadata"]
            path = rest.pod_path(meta["namespace"], meta["name"])
            if meta.get("deletionTimestamp"):
                # A kubelet confirms a deletion once its containers are gone (none run here now).
                rest.delete(self.api, path, grace=0)
                continue
            if meta["uid"] in self._handled or pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            self._handled.add(meta["uid"])
            self._run(pod, path)

    def _run(self, pod: dict[str, Any], path: str) -> None:
        (container,) = pod["spec"]["containers"]
        started = _now()
        self._status(path, "Running", container, {"running": {"startedAt": started}}, started)
        exit_code, output = self._execute(container)
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": _now(),
        }
        meta = pod["metadata"]
        self.runs.append(PodRun(meta["namespace"], meta["name"], pod["spec"], exit_code, output))
        self._status(
            path, "Succeeded" if exit_code == 0 else "Failed", container, {"terminated": terminated}, started
        )

    def _execute(self, container: dict[str, Any]) -> tuple[int, str]:
        env: dict[str, str] = {}
        for var in container.get("env") or []:
            if "valueFrom" in var:
                return 1, f"kubelet stand-in: env {var['name']}: only literal values are supported"
            value = str(var.get("value", ""))
            for cluster_address, local_address in self.addresses.items():
                value = value.replace(cluster_address, local_address)
            env[var["name"]] = value
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not argv:
            return (
                1,
                "kubelet stand-in: the container has no command (the image's entrypoint is not known here)",
            )
        if argv[0] not in self.programs:
            return 127, f"kubelet stand-in: {argv[0]!r} is not mapped to a local program"
        argv[0] = self.programs[argv[0]]
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired as exc:
            return 137, f"kubelet stand-in: killed after {RUN_TIMEOUT_SECONDS} s: {exc.output!r}"
        return done.returncode, done.stdout + done.stderr

    def _status(
        self, path: str, phase: str, container: dict[str, Any], state: dict[str, Any], started: str
    ) -> None:
        ready = phase == "Running"
        condition = "True" if ready else "False"
        rest.patch(
            self.api,
            path + "/status",
            {
                "status": {
                    "phase": phase,
                    "hostIP": "127.0.0.1",
                    "startTime": started,
                    "conditions": [
                        {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                        {"type": "Ready", "status": condition, "lastTransitionTime": _now()},
                        {"type": "ContainersReady", "status": condition, "lastTransitionTime": _now()},
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": ready,
                            "restartCount": 0,
                            "started": ready,
                            "state": state,
                        }
                    ],
                }
            },
            kind="strategic",  # merges conditions by type: the scheduler's PodScheduled stays
        )

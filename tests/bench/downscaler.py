"""The workload half of the night's anchor, for real: what kube-downscaler does, one loop cycle.

A small re-implementation of one release of py-kube-downscaler, **v26.4.0** (2026-04-08;
kube_downscaler/scaler.py `scale`, `get_namespace_to_namespace_obj`, `pods_force_uptime`,
`autoscale_resources`, `get_resources`, `autoscale_resource`, `scale_down`, `scale_up`), run
against the benchmark cluster as a ServiceAccount of its own (`kube-downscaler`, bound to the
reads and writes the chart's ClusterRole grants), so API Priority and Fairness treats it as it
treats scalebot (`workload-low`) and its requests are counted the same way. Per cycle, as that
release does when no `--namespace` is given:

  1. list every Namespace once (`get_namespace_to_namespace_obj`: their annotations override the
     defaults; earlier releases sent a GET per namespace and kind instead);
  2. list every pod (its `downscaler/force-uptime` check, `pods_force_uptime`);
  3. per included kind (`--include-resources deployments,statefulsets,cronjobs`; the default is
     deployments only), list the objects of every namespace in one request;
  4. per object to change, one update of the whole object, one after the other: sleep sets the
     replicas to 0 (a CronJob: `suspend: true`) and the annotation `downscaler/original-replicas`
     to the replicas it had (a CronJob's "1"); wake sets them back and removes the annotation.

What is left out changes nothing here: time specifications (the benchmark calls the cycle at the
moment the window opens or closes: the model adds the wait for the loop's next tick), exclusion
annotations (none in the benchmark), events (`--enable-events` is off by default), and
`--grace-period` (900 s by default: objects younger than that are not scaled down; the benchmark's
are minutes old, a real night's are not, so it is treated as passed).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from localcluster import objects, rest, waits

RELEASE = "py-kube-downscaler v26.4.0"
"""The release this cycle follows (its request pattern and its defaults)."""
ORIGINAL_REPLICAS_ANNOTATION = "downscaler/original-replicas"
INCLUDE_RESOURCES = ("deployments", "statefulsets", "cronjobs")
EXCLUDE_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "scalebot"})
"""Its default is kube-system; the others hold no workloads of the benchmark and are left alone
by scalebot too (its own namespace and the cluster's system namespaces)."""
NAMESPACE = "kube-downscaler"
SERVICE_ACCOUNT = "kube-downscaler"
_API = {"deployments": "/apis/apps/v1", "statefulsets": "/apis/apps/v1", "cronjobs": "/apis/batch/v1"}
_WRITE = ["get", "list", "watch", "update", "patch"]
RBAC: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": SERVICE_ACCOUNT},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": _WRITE},
                {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": _WRITE},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "create", "patch", "update"]},
            ],
        },
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SERVICE_ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": SERVICE_ACCOUNT,
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
    ),
)


def install_identity(admin: Any, api_url: str, ca_file: Path, out: Path) -> Path:
    """Create the `kube-downscaler` ServiceAccount with its ClusterRole; write a kubeconfig with a
    TokenRequest token for it to `out`."""
    objects.create_namespace(admin, NAMESPACE)
    rest.create(
        admin,
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
    )
    for path, body in RBAC:
        rest.create(admin, path, body)
    token_path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 7200},
    }
    token = waits.wait_until(
        lambda: rest.create(admin, token_path, request)["status"]["token"],
        15.0,
        "a TokenRequest for kube-downscaler",
        ignore=(Exception,),
    )
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": api_url, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": SERVICE_ACCOUNT, "context": {"cluster": "local", "user": SERVICE_ACCOUNT}}],
        "current-context": SERVICE_ACCOUNT,
    }
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    out.chmod(0o600)
    return out


@dataclass
class Cycle:
    """One loop cycle's figures."""

    seconds: float = 0.0
    changed: Counter[str] = field(default_factory=Counter)
    """Objects updated, by kind."""
    requests: Counter[str] = field(default_factory=Counter)
    """Requests sent, by "VERB resource"."""
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "changed": dict(self.changed),
            "requests": dict(self.requests),
            "failures": self.failures[:20],
        }


def sleep_change(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The object as `scale_down` leaves it (None: nothing to do: already at zero or suspended)."""
    spec = obj.get("spec") or {}
    annotations = dict((obj.get("metadata") or {}).get("annotations") or {})
    if kind == "cronjobs":
        if spec.get("suspend"):
            return None
        new_spec = {**spec, "suspend": True}
        annotations[ORIGINAL_REPLICAS_ANNOTATION] = "1"
    else:
        replicas = int(spec.get("replicas", 1))
        if replicas <= 0:
            return None
        new_spec = {**spec, "replicas": 0}
        annotations[ORIGINAL_REPLICAS_ANNOTATION] = str(replicas)
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}, "spec": new_spec}


def wake_change(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The object as `scale_up` leaves it (None: not put to sleep by the downscaler)."""
    spec = obj.get("spec") or {}
    annotations = dict((obj.get("metadata") or {}).get("annotations") or {})
    original = annotations.get(ORIGINAL_REPLICAS_ANNOTATION)
    if original is None or not original.isdigit() or int(original) <= 0:
        return None
    if kind == "cronjobs":
        if not spec.get("suspend"):
            return None
        new_spec = {**spec, "suspend": False}
    else:
        if int(spec.get("replicas", 1)) != 0:
            return None
        new_spec = {**spec, "replicas": int(original)}
    # pykube sends the whole object as a merge patch: a removed annotation is a null.
    annotations[ORIGINAL_REPLICAS_ANNOTATION] = None
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}, "spec": new_spec}


class Downscaler:
    """One client, one thread: the cycle sends its requests one after the other, as the original."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def _send(self, cycle: Cycle, method: str, what: str, path: str, body: Any = None) -> Any:
        cycle.requests[f"{method} {what}"] += 1
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        return rest.raw_request(self.api, method, path, body=body, content_type=content_type, timeout=120.0)

    def cycle(self, action: str) -> Cycle:
        """One loop cycle deciding `action` ("sleep": inside the downtime window; "wake": after it)."""
        change = sleep_change if action == "sleep" else wake_change
        cycle = Cycle()
        started = time.monotonic()
        self._send(cycle, "GET", "namespaces", "/api/v1/namespaces")  # once: their annotations
        self._send(cycle, "GET", "pods", "/api/v1/pods")  # pods_force_uptime: every pod of the cluster
        for kind in INCLUDE_RESOURCES:
            listing = self._send(cycle, "GET", kind, f"{_API[kind]}/{kind}")
            by_namespace: dict[str, list[dict[str, Any]]] = {}
            for obj in listing.get("items") or ():
                by_namespace.setdefault(obj["metadata"]["namespace"], []).append(obj)
            for namespace, in_namespace in sorted(by_namespace.items()):
                if namespace in EXCLUDE_NAMESPACES:
                    continue
                for obj in in_namespace:
                    body = change(obj, kind)
                    if body is None:
                        continue
                    path = f"{_API[kind]}/namespaces/{namespace}/{kind}/{obj['metadata']['name']}"
                    try:
                        self._send(cycle, "PATCH", kind, path, orjson.loads(orjson.dumps(body)))
                        cycle.changed[kind] += 1
                    except Exception as exc:  # logged and skipped by the original too
                        cycle.failures.append(f"{namespace}/{obj['metadata']['name']}: {exc}")
        cycle.seconds = time.monotonic() - started
        return cycle

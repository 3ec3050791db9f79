"""Test-only STAND-IN for the Google Cloud APIs the `gke` provider calls: GKE (container v1) node
pools and operations, Compute Engine (compute v1) managed instance groups and zone operations, and
an OAuth token endpoint. A plain HTTP server on 127.0.0.1, written from the published API
descriptions (the container v1 and compute v1 REST references and their protos, shipped in the
SDK packages as the request/response types); it is not Google Cloud.

What it checks: every request carries a token signed with the service account key it made for the
test's Application Default Credentials (so google-auth really ran); every request body parses
strictly (unknown fields refused) as the request message of its method
(`SetNodePoolSizeRequest`, `SetNodePoolAutoscalingRequest`,
`InstanceGroupManagersDeleteInstancesRequest`), and the rules the references state hold
(nodeCount >= 0; min <= max; per-zone and total bounds not mixed; at most 1000 instances, each of
this group). Refusals are Google's JSON errors with their status.

What it plays: setSize and setAutoscaling answer an Operation RUNNING that the next `reconcile()`
makes DONE (or DONE with RESOURCE_EXHAUSTED when the pool would pass `quota_nodes`); while any
operation of the cluster runs, another change is refused 400 FAILED_PRECONDITION with reason
CLUSTER_ALREADY_HAS_OPERATION, as GKE does. A group's target size is met by `reconcile()`: new
instances are CREATING for one round then RUNNING; a group above its target deletes its OLDEST
instances (a real group picks as it likes: the stand-in's choice differs from scalebot's drained
nodes in the tests, so only deleteInstances can remove exactly those). deleteInstances marks the
named instances DELETING and lowers the target; the next round removes them. Each RUNNING instance
is a kwok Node (name = instance name, `cloud.google.com/gke-nodepool`, `spec.providerID
gce://<project>/<zone>/<instance>`); an instance gone takes its Node with it.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt
from google.cloud import compute_v1, container_v1

from engine.pools.gke import NODE_POOL_LABEL
from tests.e2e.cloud_standin import KeepsNodes, Machine, StandInNodes, advance

STANDIN_LABEL = "scalebot.test/gke-standin"
TOKEN = "standin-" + secrets.token_hex(8)
MAX_DELETE = 1000

Json = dict[str, Any]


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code, self.status, self.message, self.reason = code, status, message, reason

    def body(self) -> Json:
        error: Json = {"code": self.code, "message": self.message, "status": self.status}
        if self.reason:
            error["errors"] = [{"reason": self.reason, "message": self.message}]
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "container.googleapis.com",
                }
            ]
        return {"error": error}


@dataclass
class Instance:
    name: str
    action: str = "CREATING"
    status: str = ""


@dataclass
class Group:
    name: str
    zone: str
    target: int
    instances: list[Instance] = field(default_factory=list)


@dataclass
class NodePoolState:
    name: str
    autoscaling: Json
    groups: list[Group]
    status: str = "RUNNING"


@dataclass
class GkeStandIn(KeepsNodes):
    kube: Any
    """An admin ApiClient: the stand-in creates and deletes Nodes."""
    project: str
    location: str
    cluster: str
    zones: tuple[str, ...]
    quota_nodes: int = 50
    denied: set[str] = field(default_factory=set)
    """Methods answered 403 PERMISSION_DENIED (e.g. "setSize")."""
    errors: list[Exception] = field(default_factory=list)
    pools: dict[str, NodePoolState] = field(default_factory=dict)
    operations: dict[str, Json] = field(default_factory=dict)
    zone_operations: dict[str, Json] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: Any = field(default_factory=itertools.count)
    _server: ThreadingHTTPServer | None = None
    _public_key: str = ""

    # -- life cycle --------------------------------------------------------------------------------

    def start(self) -> str:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                standin._serve(self, "GET")

            def do_POST(self) -> None:
                standin._serve(self, "POST")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="gke-standin-http", daemon=True).start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def _compute(self) -> str:
        return f"{self.url}/compute/v1/projects/{self.project}"

    @property
    def _cluster_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def credentials_file(self, directory: Path) -> Path:
        """An Application Default Credentials file: a service account key made here, whose token
        endpoint is this stand-in. The SDK signs its requests' tokens with that key (a self-signed
        JWT, or an access token from the token endpoint); the stand-in checks the signature."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self._public_key = (
            key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        path = directory / "adc.json"
        info = {
            "type": "service_account",
            "project_id": self.project,
            "private_key_id": "standin",
            "private_key": private.decode(),
            "client_email": f"scalebot@{self.project}.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"{self.url}/token",
        }
        path.write_text(json.dumps(info), encoding="utf-8")
        return path

    def _authorized(self, header: str | None) -> bool:
        token = (header or "").removeprefix("Bearer ")
        if not header or token == header:
            return False
        if token == TOKEN:
            return True
        try:
            claims = jwt.decode(token, certs=self._public_key, verify=True)
        except Exception:
            return False
        return bool(claims.get("iss") == f"scalebot@{self.project}.iam.gserviceaccount.com")

    # -- what tests set up and read ----------------------------------------------------------------

    def create_node_pool(self, name: str, per_zone: int, autoscaling: Json | None = None) -> None:
        with self._lock:
            base = f"gke-{self.cluster[:10]}-{name[:14]}"
            groups = [Group(f"{base}-{secrets.token_hex(2)}-grp", z, per_zone) for z in self.zones]
            self.pools[name] = NodePoolState(name, dict(autoscaling or {}), groups)
        self.reconcile()
        self.reconcile()

    def delete_node_pool(self, name: str) -> None:
        """The node pool deleted underneath scalebot (its instances and Nodes go with it)."""
        with self._lock:
            pool = self.pools.pop(name)
            self._converge_nodes(pool, keep=False)

    def hold_cluster(self, rounds: int) -> str:
        """Another operation (an upgrade) holding the cluster for `rounds` reconcile rounds."""
        with self._lock:
            op = self._new_operation("UPGRADE_MASTER", "", rounds=rounds)
            return str(op["name"])

    def group_url(self, group: Group) -> str:
        return f"{self._compute}/zones/{group.zone}/instanceGroupManagers/{group.name}"

    def instances(self, pool: str) -> list[str]:
        with self._lock:
            return [i.name for g in self.pools[pool].groups for i in g.instances if i.action != "DELETING"]

    def targets(self, pool: str) -> list[int]:
        with self._lock:
            return [g.target for g in self.pools[pool].groups]

    def autoscaling(self, pool: str) -> Json:
        with self._lock:
            return dict(self.pools[pool].autoscaling)

    @property
    def _nodes(self) -> StandInNodes:
        return StandInNodes(self.kube, STANDIN_LABEL, self.cluster, NODE_POOL_LABEL)

    # -- the cloud's own work ----------------------------------------------------------------------

    def reconcile(self) -> None:
        with self._lock:
            advance(self.operations.values(), running="RUNNING", ended=lambda _: "DONE")
            for op in self.zone_operations.values():
                op["status"] = "DONE"
            for pool in self.pools.values():
                for group in pool.groups:
                    self._converge_group(group)
                self._converge_nodes(pool, keep=True)

    def _converge_group(self, group: Group) -> None:
        group.instances = [i for i in group.instances if i.action != "DELETING"]
        for instance in group.instances:
            if instance.action == "CREATING":
                instance.action, instance.status = "NONE", "RUNNING"
        while len(group.instances) > group.target:
            group.instances.pop(0)  # the oldest: not necessarily what scalebot drained
        while len(group.instances) < group.target:
            base = group.name.removesuffix("-grp")
            group.instances.append(Instance(f"{base}-{secrets.token_hex(2)}"))

    def _converge_nodes(self, pool: NodePoolState, *, keep: bool) -> None:
        serving = [
            Machine(
                i.name, f"gce://{self.project}/{g.zone}/{i.name}", {"topology.kubernetes.io/zone": g.zone}
            )
            for g in pool.groups
            for i in g.instances
            if keep and i.status == "RUNNING" and i.action == "NONE"
        ]
        self._nodes.converge(pool.name, serving)

    # -- HTTP --------------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?", 1)[0]
        length = int(handler.headers.get("Content-Length") or 0)
        text = handler.rfile.read(length).decode() if length else ""
        try:
            if method == "POST" and path == "/token":
                answer: Json = {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}
            else:
                if not self._authorized(handler.headers.get("Authorization")):
                    raise ApiError(401, "UNAUTHENTICATED", "Request is missing a valid bearer token.")
                with self._lock:
                    self.requests.append((method, path))
                    answer = self._route(method, path, text)
            status = 200
        except ApiError as exc:
            answer, status = exc.body(), exc.code
        except Exception as exc:  # a stand-in bug: a 500 the test will see
            self.errors.append(exc)
            answer, status = ApiError(500, "INTERNAL", repr(exc)).body(), 500
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, text: str) -> Json:
        cluster = f"/v1/{self._cluster_path}"
        compute = f"/compute/v1/projects/{self.project}/zones/([^/]+)"
        groups = compute + "/instanceGroupManagers/([^/]+)"
        routes: list[tuple[str, str, Callable[..., Json]]] = [
            ("GET", re.escape(cluster) + r"/nodePools", self._list_pools),
            ("GET", re.escape(cluster) + r"/nodePools/([^/:]+)", self._get_pool),
            ("POST", re.escape(cluster) + r"/nodePools/([^/:]+):setSize", self._set_size),
            ("POST", re.escape(cluster) + r"/nodePools/([^/:]+):setAutoscaling", self._set_autoscaling),
            (
                "GET",
                rf"/v1/projects/{self.project}/locations/{self.location}/operations/([^/]+)",
                self._get_op,
            ),
            ("GET", groups, self._get_group),
            ("POST", groups + "/listManagedInstances", self._list_instances),
            ("POST", groups + "/deleteInstances", self._delete_instances),
            ("GET", compute + "/operations/([^/]+)", self._get_zone_operation),
        ]
        for verb, pattern, call in routes:
            match = re.fullmatch(pattern, path)
            if match and verb == method:
                return call(*match.groups(), text=text)
        raise ApiError(404, "NOT_FOUND", f"no such method or resource: {method} {path}")

    # -- container v1 ------------------------------------------------------------------------------

    def _pool(self, name: str) -> NodePoolState:
        pool = self.pools.get(name)
        if pool is None:
            raise ApiError(
                404,
                "NOT_FOUND",
                f"Not found: {self._cluster_path}/nodePools/{name}.",
            )
        return pool

    def _pool_json(self, pool: NodePoolState) -> Json:
        return {
            "name": pool.name,
            "status": pool.status,
            "autoscaling": pool.autoscaling,
            "locations": [g.zone for g in pool.groups],
            "instanceGroupUrls": [self.group_url(g) for g in pool.groups],
            "selfLink": f"{self.url}/v1/{self._cluster_path}/nodePools/{pool.name}",
        }

    def _list_pools(self, text: str) -> Json:
        return {"nodePools": [self._pool_json(p) for p in self.pools.values()]}

    def _get_pool(self, name: str, text: str) -> Json:
        return self._pool_json(self._pool(name))

    def _check_change(self, method: str, pool: NodePoolState, body: Json) -> None:
        if method in self.denied:
            raise ApiError(
                403,
                "PERMISSION_DENIED",
                f'Required "container.clusters.update" permission(s) for "{self._cluster_path}".',
            )
        expected = f"{self._cluster_path}/nodePools/{pool.name}"
        if body.get("name") not in (None, expected):
            raise ApiError(400, "INVALID_ARGUMENT", f"name {body.get('name')!r} does not match the URL")
        running = [o for o in self.operations.values() if o["status"] == "RUNNING"]
        if running:
            raise ApiError(
                400,
                "FAILED_PRECONDITION",
                f"Cluster is running incompatible operation {running[0]['name']}.",
                reason="CLUSTER_ALREADY_HAS_OPERATION",
            )

    def _set_size(self, name: str, text: str) -> Json:
        body = _strict(container_v1.SetNodePoolSizeRequest, text)
        pool = self._pool(name)
        self._check_change("setSize", pool, body)
        count = int(body.get("nodeCount") or 0)  # proto3 JSON omits 0
        if count < 0:
            raise ApiError(400, "INVALID_ARGUMENT", "nodeCount must be non-negative.")

        def apply() -> None:
            for group in pool.groups:
                group.target = count

        op = self._new_operation("SET_NODE_POOL_SIZE", name, apply=apply)
        total = count * len(pool.groups)
        if total > self.quota_nodes:
            op["error"] = {
                "code": 8,
                "message": "Insufficient regional quota to satisfy request: "
                'resource "CPUS": request requires '
                f"'{2 * total}.0' and is short '{2 * (total - self.quota_nodes)}.0'.",
            }
            op["apply"] = lambda: None
        return _public(op)

    def _set_autoscaling(self, name: str, text: str) -> Json:
        body = _strict(container_v1.SetNodePoolAutoscalingRequest, text)
        pool = self._pool(name)
        self._check_change("setAutoscaling", pool, body)
        if "autoscaling" not in body:
            raise ApiError(400, "INVALID_ARGUMENT", "autoscaling is required.")
        scaling: Json = body["autoscaling"]
        per_zone = "minNodeCount" in scaling or "maxNodeCount" in scaling
        total = "totalMinNodeCount" in scaling or "totalMaxNodeCount" in scaling
        if per_zone and total:
            raise ApiError(400, "INVALID_ARGUMENT", "per-zone and total node counts cannot both be set.")
        low = int(scaling.get("totalMinNodeCount" if total else "minNodeCount") or 0)
        high = int(scaling.get("totalMaxNodeCount" if total else "maxNodeCount") or 0)
        if scaling.get("enabled") and (low < 0 or high < low or high < 1):
            raise ApiError(400, "INVALID_ARGUMENT", f"invalid autoscaling bounds: min {low}, max {high}.")

        def apply() -> None:
            pool.autoscaling = dict(scaling)

        return _public(self._new_operation("SET_NODE_POOL_AUTOSCALING", name, apply=apply))

    def _new_operation(
        self, kind: str, pool: str, *, rounds: int = 1, apply: Callable[[], None] | None = None
    ) -> Json:
        name = f"operation-{next(self._ids)}-{secrets.token_hex(3)}"
        op: Json = {
            "name": name,
            "operationType": kind,
            "status": "RUNNING",
            "targetLink": f"nodePools/{pool}",
            "rounds": rounds,
            "apply": apply or (lambda: None),
        }
        self.operations[name] = op
        return op

    def _get_op(self, name: str, text: str) -> Json:
        if name not in self.operations:
            raise ApiError(404, "NOT_FOUND", f"Operation {name} not found.")
        return _public(self.operations[name])

    # -- compute v1 --------------------------------------------------------------------------------

    def _group(self, zone: str, name: str) -> Group:
        for pool in self.pools.values():
            for group in pool.groups:
                if group.zone == zone and group.name == name:
                    return group
        where = f"projects/{self.project}/zones/{zone}/instanceGroupManagers/{name}"
        raise ApiError(404, "NOT_FOUND", f"The resource '{where}' was not found")

    def _get_group(self, zone: str, name: str, text: str) -> Json:
        group = self._group(zone, name)
        return {
            "name": group.name,
            "zone": zone,
            "targetSize": group.target,
            "selfLink": self.group_url(group),
        }

    def _list_instances(self, zone: str, name: str, text: str) -> Json:
        group = self._group(zone, name)
        return {
            "managedInstances": [
                {
                    "name": i.name,
                    "instance": f"{self._compute}/zones/{zone}/instances/{i.name}",
                    "currentAction": i.action,
                    **({"instanceStatus": i.status} if i.status else {}),
                }
                for i in group.instances
            ]
        }

    def _delete_instances(self, zone: str, name: str, text: str) -> Json:
        body = _strict(compute_v1.InstanceGroupManagersDeleteInstancesRequest, text)
        group = self._group(zone, name)
        urls = [str(u) for u in body.get("instances") or ()]
        if not urls or len(urls) > MAX_DELETE:
            raise ApiError(400, "INVALID_ARGUMENT", f"instances: between 1 and {MAX_DELETE} required")
        members = {i.name: i for i in group.instances if i.action != "DELETING"}
        picked = []
        for url in urls:
            match = re.search(r"(?:^|/)zones/([^/]+)/instances/([^/]+)$", url)
            instance = members.get(match.group(2)) if match and match.group(1) == zone else None
            if instance is None:
                if body.get("skipInstancesOnValidationError"):
                    continue
                raise ApiError(400, "INVALID_ARGUMENT", f"Instance '{url}' is not a member of {group.name}.")
            picked.append(instance)
        for instance in picked:
            instance.action = "DELETING"
        group.target -= len(picked)
        name_ = f"operation-{next(self._ids)}-{secrets.token_hex(3)}"
        kind = "compute.instanceGroupManagers.deleteInstances"
        op = {"name": name_, "status": "RUNNING", "operationType": kind, "zone": zone}
        self.zone_operations[name_] = op
        return dict(op)

    def _get_zone_operation(self, zone: str, name: str, text: str) -> Json:
        if name not in self.zone_operations:
            where = f"projects/{self.project}/zones/{zone}/operations/{name}"
            raise ApiError(404, "NOT_FOUND", f"The resource '{where}' was not found")
        return dict(self.zone_operations[name])


def _strict(message: Any, text: str) -> Json:
    """The body parsed as `message` with unknown fields refused (the published schema), as JSON."""
    try:
        message.from_json(text or "{}", ignore_unknown_fields=False)
    except Exception as exc:
        raise ApiError(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {exc}") from None
    parsed: Json = json.loads(text or "{}")
    return parsed


def _public(op: Json) -> Json:
    return {k: v for k, v in op.items() if k not in ("rounds", "apply")}

"""Test-only STAND-IN for the Azure Resource Manager calls the `aks` provider makes: AKS agent pools
(get, list, PUT, deleteMachines) and their long-running operations. An HTTPS server on 127.0.0.1
(its own certificate, trusted through REQUESTS_CA_BUNDLE: Azure's SDK sends bearer tokens only over
TLS), written from the published API description of Microsoft.ContainerService (the models the SDK
package ships, generated from the REST API specification); it is not Azure.

What it checks: every request carries the fake credential's bearer token and an `api-version`; a
PUT's body is an agent pool whose properties are all known to the published schema and none of
them read-only, with `count` 0-1000 (1-1000 for a System pool) and, with `enableAutoScaling`,
minCount <= count <= maxCount; deleteMachines names only machines of the pool. Refusals are ARM's
JSON errors with their codes.

What it plays: a PUT or deleteMachines answers with an `Azure-AsyncOperation` URL that reports
InProgress until the next `reconcile()`, then Succeeded (or Failed with QuotaExceeded when the
cluster would pass `quota_nodes`); while an operation runs, another change is refused 409
OperationNotAllowed ("Another operation ... is in progress"), as AKS does. A pool above its count
deletes its OLDEST machines (AKS picks as it likes: only deleteMachines removes exactly the drained
ones in the tests). Each machine is a kwok Node (name = machine name, `kubernetes.azure.com/agentpool`,
`spec.providerID azure:///subscriptions/.../virtualMachineScaleSets/<vmss>/virtualMachines/<n>`);
a machine gone takes its Node with it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import json
import re
import secrets
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from azure.core.credentials import AccessToken
from azure.mgmt.containerservice import models
from azure.mgmt.containerservice._utils.model_base import _is_readonly
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.pools.aks import AGENT_POOL_LABEL
from tests.e2e.cloud_standin import KeepsNodes, Machine, StandInNodes, advance

STANDIN_LABEL = "scalebot.test/aks-standin"
TOKEN = "aks-standin-" + secrets.token_hex(8)
REGION = "westeurope"
Json = dict[str, Any]


class FakeCredential:
    """A credential that returns the stand-in's token (never a real identity)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(dt.datetime.now(dt.UTC).timestamp()) + 3600)

    def close(self) -> None:
        pass


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _schema() -> tuple[set[str], set[str]]:
    """(known, read-only) property names of an agent pool, from the SDK's published models."""
    fields = models.AgentPoolManagedClusterAgentPoolProfileProperties()._attr_to_rest_field.values()
    return {f._rest_name for f in fields}, {f._rest_name for f in fields if _is_readonly(f)}


@dataclass
class AgentPoolState:
    name: str
    mode: str
    count: int
    vmss: str
    autoscale: tuple[bool, int, int] = (False, 0, 0)
    machines: list[str] = field(default_factory=list)
    state: str = "Succeeded"
    serial: int = 0


@dataclass
class AksStandIn(KeepsNodes):
    kube: Any
    subscription: str
    resource_group: str
    cluster: str
    quota_nodes: int = 50
    denied: set[str] = field(default_factory=set)
    """Calls answered 403 AuthorizationFailed: "write", "deleteMachines"."""
    errors: list[Exception] = field(default_factory=list)
    pools: dict[str, AgentPoolState] = field(default_factory=dict)
    operations: dict[str, Json] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    power: str = "Running"
    """The managed cluster's powerState.code: Running, or Stopped (no machine, no Node)."""
    cluster_state: str = "Succeeded"
    """The managed cluster's provisioningState: Succeeded, Stopping, Starting."""
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: Any = field(default_factory=itertools.count)
    _server: ThreadingHTTPServer | None = None

    # -- life cycle --------------------------------------------------------------------------------

    def start(self, directory: Path) -> Path:
        """Serve HTTPS; returns the CA file the SDK must trust (REQUESTS_CA_BUNDLE)."""
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                standin._serve(self, "GET")

            def do_PUT(self) -> None:
                standin._serve(self, "PUT")

            def do_POST(self) -> None:
                standin._serve(self, "POST")

            def log_message(self, *args: Any) -> None:
                pass

        cert, key = _certificate(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, name="aks-standin-http", daemon=True).start()
        return cert

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    # -- what tests set up and read ----------------------------------------------------------------

    def create_agent_pool(
        self, name: str, count: int, *, mode: str = "User", autoscale: tuple[bool, int, int] = (False, 0, 0)
    ) -> None:
        with self._lock:
            vmss = f"aks-{name}-{secrets.randbelow(10**8):08d}-vmss"
            self.pools[name] = AgentPoolState(name, mode, count, vmss, autoscale)
        self.reconcile()

    def delete_agent_pool(self, name: str) -> None:
        with self._lock:
            pool = self.pools.pop(name)
            pool.machines.clear()
            self._converge_nodes(pool)

    def machines(self, pool: str) -> list[str]:
        with self._lock:
            return list(self.pools[pool].machines)

    def count(self, pool: str) -> tuple[int, tuple[bool, int, int]]:
        with self._lock:
            return self.pools[pool].count, self.pools[pool].autoscale

    @property
    def _nodes(self) -> StandInNodes:
        return StandInNodes(self.kube, STANDIN_LABEL, self.cluster, AGENT_POOL_LABEL)

    # -- the cloud's own work ----------------------------------------------------------------------

    def reconcile(self) -> None:
        with self._lock:
            advance(
                self.operations.values(),
                running="InProgress",
                ended=lambda op: "Failed" if op.get("error") else "Succeeded",
            )
            if self.cluster_state != "Succeeded" and not self._running():
                self.cluster_state = "Succeeded"
            for pool in self.pools.values():
                if pool.state != "Succeeded" and not self._running():
                    pool.state = "Succeeded"
                if self.power == "Stopped":
                    pool.machines.clear()  # a stopped cluster's machines are gone; counts stay
                while len(pool.machines) > pool.count:
                    pool.machines.pop(0)  # the oldest: not necessarily what scalebot drained
                while self.power == "Running" and len(pool.machines) < pool.count:
                    pool.machines.append(f"{pool.vmss}{pool.serial:06x}")
                    pool.serial += 1
                self._converge_nodes(pool)

    def _running(self) -> list[Json]:
        return [o for o in self.operations.values() if o["status"] == "InProgress"]

    def _converge_nodes(self, pool: AgentPoolState) -> None:
        node_group = f"MC_{self.resource_group}_{self.cluster}_{REGION}"
        vmss = (
            f"azure:///subscriptions/{self.subscription}/resourceGroups/{node_group}/providers/"
            f"Microsoft.Compute/virtualMachineScaleSets/{pool.vmss}/virtualMachines/"
        )
        labels = {"kubernetes.azure.com/mode": pool.mode.lower(), "topology.kubernetes.io/region": REGION}
        self._nodes.converge(
            pool.name, [Machine(m, f"{vmss}{int(m[-6:], 16)}", labels) for m in pool.machines]
        )

    # -- HTTP --------------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        text = handler.rfile.read(length).decode() if length else ""
        headers: dict[str, str] = {}
        try:
            if handler.headers.get("Authorization") != f"Bearer {TOKEN}":
                raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
            if not parse_qs(parts.query).get("api-version"):
                raise ArmError(
                    400, "MissingApiVersionParameter", "The api-version query parameter is required."
                )
            with self._lock:
                self.requests.append((method, parts.path))
                status, answer, headers = self._route(method, parts.path, text)
        except ArmError as exc:
            status, answer = exc.status, {"error": {"code": exc.code, "message": exc.message}}
        except Exception as exc:  # a stand-in bug: a 500 the test will see
            self.errors.append(exc)
            status, answer = 500, {"error": {"code": "InternalServerError", "message": repr(exc)}}
        data = b"" if answer is None else json.dumps(answer).encode()
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, text: str) -> tuple[int, Any, dict[str, str]]:
        base = (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}/providers/"
            f"Microsoft.ContainerService/managedClusters/{self.cluster}/agentPools"
        )
        ops = f"/subscriptions/{self.subscription}/providers/Microsoft.ContainerService/locations/{REGION}"
        cluster = base.removesuffix("/agentPools")
        if method == "GET" and path == cluster:
            return 200, self._cluster_json(), {}
        if method == "POST" and path in (f"{cluster}/stop", f"{cluster}/start"):
            return self._power(path.rsplit("/", 1)[-1])
        if method == "GET" and path == base:
            return 200, {"value": [self._pool_json(p) for p in self.pools.values()]}, {}
        if match := re.fullmatch(re.escape(base) + r"/([^/]+)", path):
            if method == "GET":
                return 200, self._pool_json(self._pool(match.group(1))), {}
            if method == "PUT":
                return self._put(match.group(1), text)
        if (match := re.fullmatch(re.escape(base) + r"/([^/]+)/deleteMachines", path)) and method == "POST":
            return self._delete_machines(match.group(1), text)
        if (match := re.fullmatch(re.escape(ops) + r"/operations/([^/]+)", path)) and method == "GET":
            op = self.operations.get(match.group(1))
            if op is None:
                raise ArmError(404, "NotFound", "operation not found")
            return 200, {k: v for k, v in op.items() if k in ("name", "status", "error")}, {}
        if re.fullmatch(re.escape(ops) + r"/operationresults/([^/]+)", path) and method == "GET":
            return 204, None, {}
        raise ArmError(404, "NotFound", f"no such resource: {method} {path}")

    def _pool(self, name: str) -> AgentPoolState:
        pool = self.pools.get(name)
        if pool is None:
            raise ArmError(404, "NotFound", f"Agent pool {name} not found in managed cluster {self.cluster}.")
        return pool

    def _pool_json(self, pool: AgentPoolState) -> Json:
        enabled, low, high = pool.autoscale
        props: Json = {
            "count": pool.count,
            "vmSize": "Standard_D2s_v5",
            "mode": pool.mode,
            "type": "VirtualMachineScaleSets",
            "enableAutoScaling": enabled,
            "provisioningState": pool.state,
            "powerState": {"code": self.power},
            "orchestratorVersion": "1.36.3",
            "currentOrchestratorVersion": "1.36.3",
        }
        if enabled:
            props |= {"minCount": low, "maxCount": high}
        return {
            "id": f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}/providers/"
            f"Microsoft.ContainerService/managedClusters/{self.cluster}/agentPools/{pool.name}",
            "name": pool.name,
            "type": "Microsoft.ContainerService/managedClusters/agentPools",
            "properties": props,
        }

    def _cluster_json(self) -> Json:
        return {
            "id": f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}/providers/"
            f"Microsoft.ContainerService/managedClusters/{self.cluster}",
            "name": self.cluster,
            "type": "Microsoft.ContainerService/ManagedClusters",
            "location": REGION,
            "properties": {
                "provisioningState": self.cluster_state,
                "powerState": {"code": self.power},
                "kubernetesVersion": "1.36.3",
                "agentPoolProfiles": [
                    {"name": p.name, "count": p.count, "mode": p.mode} for p in self.pools.values()
                ],
            },
        }

    def _power(self, verb: str) -> tuple[int, Any, dict[str, str]]:
        """managedClusters/stop and /start (POST, 202 with the operation's URLs): the cluster's
        powerState turns Stopped or Running as the operation ends; the agent pools keep their count."""
        self._check_change(f"{verb}/action", None)
        self.cluster_state = "Stopping" if verb == "stop" else "Starting"

        def apply() -> None:
            self.power = "Stopped" if verb == "stop" else "Running"

        return 202, None, self._operation(None, apply)

    def _check_change(self, action: str, pool: AgentPoolState | None) -> None:
        scope = "managedClusters" if pool is None else "managedClusters/agentPools"
        if action in self.denied:
            raise ArmError(
                403,
                "AuthorizationFailed",
                f"The client 'scalebot' does not have authorization to perform action "
                f"'Microsoft.ContainerService/{scope}/{action}' over scope "
                f"'/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}' or the scope "
                "is invalid.",
            )
        running = self._running()
        if running:
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Another operation ({running[0]['pool']} - Scaling) is in progress, please wait for it to "
                "finish before starting a new operation.",
            )
        if pool is not None and self.power != "Running":
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"The managed cluster {self.cluster} is {self.power}: start it before changing agent pools.",
            )

    def hold(self, pool: str | None, rounds: int) -> None:
        """Another change (an upgrade) in progress on the agent pool (None: on the managed
        cluster) for `rounds` reconcile rounds."""
        with self._lock:
            self._operation(None if pool is None else self.pools[pool], lambda: None, rounds=rounds)

    def _operation(
        self, pool: AgentPoolState | None, apply: Any, error: Json | None = None, *, rounds: int = 1
    ) -> dict[str, str]:
        """An operation on `pool` (None: on the managed cluster itself)."""
        name = f"{next(self._ids)}-{secrets.token_hex(4)}"
        what = self.cluster if pool is None else pool.name
        op: Json = {"name": name, "status": "InProgress", "pool": what, "apply": apply, "rounds": rounds}
        if error:
            op["error"] = error
        self.operations[name] = op
        if pool is not None:
            pool.state = "Scaling"
        provider = "providers/Microsoft.ContainerService"
        ops = f"{self.url}/subscriptions/{self.subscription}/{provider}/locations/{REGION}"
        return {
            "Azure-AsyncOperation": f"{ops}/operations/{name}?api-version=2026-08-01",
            "Location": f"{ops}/operationresults/{name}?api-version=2026-08-01",
        }

    def _put(self, name: str, text: str) -> tuple[int, Any, dict[str, str]]:
        pool = self._pool(name)
        self._check_change("write", pool)
        body = json.loads(text or "{}")
        props = body.get("properties")
        if not isinstance(props, dict):
            raise ArmError(400, "InvalidParameter", "properties is required.")
        known, readonly = _schema()
        unknown = sorted(set(props) - known)
        if unknown:
            raise ArmError(400, "InvalidParameter", f"unknown properties: {', '.join(unknown)}")
        sent_readonly = sorted(set(props) & readonly)
        if sent_readonly:
            raise ArmError(400, "InvalidParameter", f"read-only properties sent: {', '.join(sent_readonly)}")
        count = props.get("count")
        floor = 1 if props.get("mode", pool.mode) == "System" else 0
        if not isinstance(count, int) or not floor <= count <= 1000:
            raise ArmError(
                400, "InvalidParameter", f"count must be {floor}-1000 for a {pool.mode} pool, not {count}."
            )
        enabled = bool(props.get("enableAutoScaling"))
        low, high = props.get("minCount"), props.get("maxCount")
        if enabled and not (isinstance(low, int) and isinstance(high, int) and low <= count <= high):
            raise ArmError(
                400,
                "InvalidParameter",
                f"with enableAutoScaling, minCount <= count <= maxCount ({low}, {count}, {high}).",
            )
        others = sum(p.count for p in self.pools.values() if p is not pool)
        error = None
        if others + count > self.quota_nodes:
            error = {
                "code": "QuotaExceeded",
                "message": "Operation could not be completed as it results in exceeding approved "
                "standardDSv5Family Cores quota.",
            }

        def apply() -> None:
            if error is None:
                pool.count = count
                pool.autoscale = (enabled, int(low or 0), int(high or 0)) if enabled else (False, 0, 0)

        headers = self._operation(pool, apply, error)
        return 200, self._pool_json(pool), {"Azure-AsyncOperation": headers["Azure-AsyncOperation"]}

    def _delete_machines(self, name: str, text: str) -> tuple[int, Any, dict[str, str]]:
        pool = self._pool(name)
        self._check_change("deleteMachines/action", pool)
        body = json.loads(text or "{}")
        if (
            set(body) != {"machineNames"}
            or not isinstance(body["machineNames"], list)
            or not body["machineNames"]
        ):
            raise ArmError(400, "InvalidParameter", "machineNames (a non-empty list) is the only property.")
        names = [str(n) for n in body["machineNames"]]
        strangers = sorted(set(names) - set(pool.machines))
        if strangers:
            raise ArmError(
                400, "InvalidParameter", f"machines not in agent pool {name}: {', '.join(strangers)}"
            )

        def apply() -> None:
            pool.machines = [m for m in pool.machines if m not in names]
            pool.count = len(pool.machines)

        return 202, None, self._operation(pool, apply)


def _ended(op: Json) -> str:
    return "Failed" if op.get("error") else "Succeeded"


def _certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aks-standin")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "aks-standin.crt", directory / "aks-standin.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path

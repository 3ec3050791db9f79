"""A kubeconfig that someone other than the operator wrote (a Cluster API `<cluster>-kubeconfig`
Secret): read as data, never as a program or a pointer to local files.

The Kubernetes client's own loader honours every kubeconfig feature: an `exec` credential plugin or
an `auth-provider` runs a command inside scalebot, and `tokenFile`, `client-certificate`,
`client-key` and `certificate-authority` make it read local files (its own ServiceAccount token)
and send them to whatever server the document names. Whoever can write that Secret would get
scalebot's privileges. So such a document goes through an allow-list instead:

- cluster: `server` (https, no path, no user info), `certificate-authority-data`,
  `tls-server-name` (only the name the server's certificate is checked against; the CA still has
  to sign it, and the server address is unchanged), `insecure-skip-tls-verify` only when false;
- user: `token`, `client-certificate-data`, `client-key-data`;
- context: `cluster`, `user`, `namespace`.

Anything else in a cluster, user or context entry is refused by name, including `exec`,
`auth-provider`, every file path, `proxy-url`, `username`/`password` (basic auth, removed from
Kubernetes in 1.19) and impersonation (`as*`). The server is then checked against where the
owner of the credentials says the cluster is (`check_endpoint`: the Cluster's
`spec.controlPlaneEndpoint`). Pure: no I/O; `engine.kube.config` builds the client configuration
from the validated value, never from the document.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from engine.domain.errors import Category, ScalebotError

CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority-data", "tls-server-name", "insecure-skip-tls-verify"}
)
USER_FIELDS = frozenset({"token", "client-certificate-data", "client-key-data"})
CONTEXT_FIELDS = frozenset({"cluster", "user", "namespace"})
DOCUMENT_FIELDS = frozenset(
    {"apiVersion", "kind", "clusters", "users", "contexts", "current-context", "preferences"}
)
_WHY = {
    "exec": "a credential plugin runs a command inside scalebot",
    "auth-provider": "an auth provider runs code inside scalebot",
    "tokenFile": "a file path makes scalebot read a local file",
    "client-certificate": "a file path makes scalebot read a local file",
    "client-key": "a file path makes scalebot read a local file",
    "certificate-authority": "a file path makes scalebot read a local file",
    "proxy-url": "a proxy would receive the requests",
    "username": "basic authentication is not supported",
    "password": "basic authentication is not supported",
    "insecure-skip-tls-verify": "TLS verification cannot be turned off",
}
HINT = (
    "only inline data is accepted (server, certificate-authority-data, token, "
    "client-certificate-data, client-key-data)"
)


class UntrustedKubeconfigError(ScalebotError, ValueError):
    """A kubeconfig from the cluster asks for more than inline data, or names another server."""

    category = Category.CONFIGURATION


@dataclass(frozen=True, slots=True)
class InlineKubeconfig:
    """The validated fields of one context: nothing here names a file or a command."""

    server: str
    certificate_authority: bytes | None = None
    """PEM, decoded from certificate-authority-data (None: the system's trust store)."""
    token: str | None = None
    client_certificate: bytes | None = None
    client_key: bytes | None = None
    tls_server_name: str | None = None

    @property
    def host_and_port(self) -> tuple[str, int]:
        parsed = urlsplit(self.server)
        return _host(parsed.hostname or ""), parsed.port or 443


def parse_inline_kubeconfig(text: str, *, where: str) -> InlineKubeconfig:
    """The current context of `text`, allow-listed (see the module docstring). Every cluster, user
    and context entry is checked, used or not: a document carrying a program is refused whole.
    Raises UntrustedKubeconfigError naming `where` and the field."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UntrustedKubeconfigError(f"{where}: the kubeconfig is not YAML ({_one_line(exc)})") from exc
    if not isinstance(document, dict):
        raise UntrustedKubeconfigError(f"{where}: the kubeconfig is not a mapping")
    _only(document, DOCUMENT_FIELDS, where, "")
    clusters = _entries(document, "clusters", "cluster", CLUSTER_FIELDS, where)
    users = _entries(document, "users", "user", USER_FIELDS, where)
    contexts = _entries(document, "contexts", "context", CONTEXT_FIELDS, where)
    current = document.get("current-context")
    if not isinstance(current, str) or current not in contexts:
        raise UntrustedKubeconfigError(
            f"{where}: current-context {current!r} names no context in the kubeconfig"
        )
    context = contexts[current]
    cluster_name, user_name = str(context.get("cluster")), context.get("user")
    cluster = clusters.get(cluster_name)
    if cluster is None:
        raise UntrustedKubeconfigError(
            f"{where}: context {current!r} names cluster {cluster_name!r}, not in the kubeconfig"
        )
    if user_name is not None and str(user_name) not in users:
        raise UntrustedKubeconfigError(
            f"{where}: context {current!r} names user {user_name!r}, not in the kubeconfig"
        )
    user = users[str(user_name)] if user_name is not None else {}
    cluster_field, user_field = f"clusters[{cluster_name}].cluster", f"users[{user_name}].user"
    token = user.get("token")
    if token is not None and (not isinstance(token, str) or not token or "\n" in token):
        raise UntrustedKubeconfigError(f"{where}: {user_field}.token is not one line of text")
    tls_server_name = cluster.get("tls-server-name")
    if tls_server_name is not None and not isinstance(tls_server_name, str):
        raise UntrustedKubeconfigError(f"{where}: {cluster_field}.tls-server-name is not text")
    return InlineKubeconfig(
        server=_server(cluster.get("server"), where, cluster_field),
        certificate_authority=_data(cluster, "certificate-authority-data", where, cluster_field),
        token=token,
        client_certificate=_data(user, "client-certificate-data", where, user_field),
        client_key=_data(user, "client-key-data", where, user_field),
        tls_server_name=tls_server_name or None,
    )


def check_endpoint(kubeconfig: InlineKubeconfig, host: str, port: int, *, where: str, owner: str) -> None:
    """Refuse a server other than `host:port`, where `owner` (e.g. "Cluster ns/name's
    spec.controlPlaneEndpoint") says the API server is: a Secret cannot send scalebot elsewhere."""
    if not host:
        raise UntrustedKubeconfigError(
            f"{where}: {owner} has no host yet, so the kubeconfig's server cannot be checked; "
            "wait until Cluster API has set it, or give the workload kubeconfig explicitly"
        )
    expected = (_host(host), port or 443)
    if kubeconfig.host_and_port != expected:
        raise UntrustedKubeconfigError(
            f"{where}: the kubeconfig's server {kubeconfig.server} is not {owner} "
            f"({_join(*expected)}); refusing to send credentials there"
        )


def _entries(
    document: Mapping[str, Any], key: str, inner: str, allowed: frozenset[str], where: str
) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    items = document.get(key) or []
    if not isinstance(items, list):
        raise UntrustedKubeconfigError(f"{where}: {key} is not a list")
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise UntrustedKubeconfigError(f"{where}: an entry of {key} has no name")
        name = item["name"]
        _only(item, frozenset({"name", inner}), where, f"{key}[{name}]")
        body = item.get(inner) or {}
        if not isinstance(body, dict):
            raise UntrustedKubeconfigError(f"{where}: {key}[{name}].{inner} is not a mapping")
        _only(body, allowed, where, f"{key}[{name}].{inner}")
        if body.get("insecure-skip-tls-verify") not in (None, False):
            raise _refused(where, f"{key}[{name}].{inner}", "insecure-skip-tls-verify")
        found[name] = body
    return found


def _only(mapping: Mapping[str, Any], allowed: frozenset[str], where: str, at: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise _refused(where, at, str(key))


def _refused(where: str, at: str, key: str) -> UntrustedKubeconfigError:
    path = f"{at}.{key}" if at else key
    why = _WHY.get(key, "not an allowed field")
    return UntrustedKubeconfigError(f"{where}: kubeconfig field {path} refused ({why}); {HINT}")


def _server(value: object, where: str, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise UntrustedKubeconfigError(f"{where}: {field}.server is missing")
    try:
        parsed = urlsplit(value)
        parsed.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise UntrustedKubeconfigError(f"{where}: {field}.server {value!r} is not a URL ({exc})") from exc
    if parsed.scheme != "https" or not parsed.hostname:
        raise UntrustedKubeconfigError(f"{where}: {field}.server {value!r} is not an https:// URL")
    if parsed.username is not None or parsed.password is not None:
        raise UntrustedKubeconfigError(f"{where}: {field}.server carries user information; refused")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise UntrustedKubeconfigError(
            f"{where}: {field}.server {value!r} has a path or query; only https://host:port is accepted"
        )
    return f"https://{_join(_host(parsed.hostname), parsed.port or 443)}"


def _data(mapping: Mapping[str, Any], key: str, where: str, field: str) -> bytes | None:
    value = mapping.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise UntrustedKubeconfigError(f"{where}: {field}.{key} is not base64 text")
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise UntrustedKubeconfigError(f"{where}: {field}.{key} is not base64 ({exc})") from exc
    if b"-----BEGIN " not in decoded:
        raise UntrustedKubeconfigError(f"{where}: {field}.{key} is not PEM data")
    return decoded


def _host(host: str) -> str:
    """A host as compared: lower case, an IP address in its canonical form."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host.lower().rstrip(".")


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _one_line(value: object) -> str:
    return " ".join(str(value).split())

"""A kubeconfig read from the cluster (a Cluster API Secret) is data: the allow-list refuses every
field that runs a program, reads a local file or sends the requests elsewhere, naming the field."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.kube.config import configuration_from_inline
from engine.kube.inline_kubeconfig import (
    InlineKubeconfig,
    UntrustedKubeconfigError,
    check_endpoint,
    parse_inline_kubeconfig,
)

WHERE = "Secret clusters/dev-eu-kubeconfig"
PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def capi_kubeconfig(*, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> str:
    """The shape Cluster API writes into `<cluster>-kubeconfig` (one cluster, user and context)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dev-eu",
                "cluster": {
                    "server": "https://10.0.0.5:6443",
                    "certificate-authority-data": _b64(PEM),
                    **(cluster or {}),
                },
            }
        ],
        "users": [
            {
                "name": "dev-eu-admin",
                "user": {"client-certificate-data": _b64(PEM), "client-key-data": _b64(KEY), **(user or {})},
            }
        ],
        "contexts": [
            {"name": "dev-eu-admin@dev-eu", "context": {"cluster": "dev-eu", "user": "dev-eu-admin"}}
        ],
        "current-context": "dev-eu-admin@dev-eu",
        "preferences": {},
    }
    return yaml.safe_dump(document)


def test_cluster_apis_own_kubeconfig_is_accepted_as_data() -> None:
    parsed = parse_inline_kubeconfig(capi_kubeconfig(user={"token": "abc"}), where=WHERE)
    assert parsed == InlineKubeconfig(
        server="https://10.0.0.5:6443",
        certificate_authority=PEM,
        token="abc",
        client_certificate=PEM,
        client_key=KEY,
    )


EXEC = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "id"]}

REFUSED = [
    ({"user": {"exec": EXEC}}, "users[dev-eu-admin].user.exec", "runs a command"),
    ({"user": {"auth-provider": {"name": "oidc"}}}, "users[dev-eu-admin].user.auth-provider", "runs code"),
    (
        {"user": {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}},
        "users[dev-eu-admin].user.tokenFile",
        "read a local file",
    ),
    ({"user": {"client-certificate": "/etc/tls.crt"}}, "users[dev-eu-admin].user.client-certificate", "file"),
    ({"user": {"client-key": "/etc/tls.key"}}, "users[dev-eu-admin].user.client-key", "file"),
    ({"user": {"username": "admin"}}, "users[dev-eu-admin].user.username", "basic"),
    ({"user": {"password": "x"}}, "users[dev-eu-admin].user.password", "basic"),
    ({"user": {"as": "system:admin"}}, "users[dev-eu-admin].user.as", "not an allowed field"),
    (
        {"cluster": {"certificate-authority": "/etc/ca.crt"}},
        "clusters[dev-eu].cluster.certificate-authority",
        "file",
    ),
    ({"cluster": {"proxy-url": "http://evil:3128"}}, "clusters[dev-eu].cluster.proxy-url", "proxy"),
    (
        {"cluster": {"insecure-skip-tls-verify": True}},
        "clusters[dev-eu].cluster.insecure-skip-tls-verify",
        "cannot be turned off",
    ),
]


@pytest.mark.parametrize(("extra", "field", "why"), REFUSED, ids=[r[1].rsplit(".", 1)[1] for r in REFUSED])
def test_a_field_that_runs_a_program_reads_a_file_or_redirects_is_refused_by_name(
    extra: dict[str, Any], field: str, why: str
) -> None:
    with pytest.raises(UntrustedKubeconfigError) as refused:
        parse_inline_kubeconfig(capi_kubeconfig(**extra), where=WHERE)
    message = str(refused.value)
    assert message.startswith(f"{WHERE}: kubeconfig field {field} refused (")
    assert why in message and "only inline data is accepted" in message
    assert "\n" not in message


def test_an_unused_user_carrying_a_program_is_refused_too() -> None:
    document = yaml.safe_load(capi_kubeconfig())
    document["users"].append({"name": "other", "user": {"exec": EXEC}})
    with pytest.raises(UntrustedKubeconfigError, match=r"users\[other\]\.user\.exec refused"):
        parse_inline_kubeconfig(yaml.safe_dump(document), where=WHERE)


def test_insecure_skip_tls_verify_false_and_tls_server_name_are_accepted() -> None:
    text = capi_kubeconfig(cluster={"insecure-skip-tls-verify": False, "tls-server-name": "api.dev-eu"})
    assert parse_inline_kubeconfig(text, where=WHERE).tls_server_name == "api.dev-eu"


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ("http://10.0.0.5:6443", "is not an https:// URL"),
        ("https://10.0.0.5:6443/proxy/evil", "has a path or query"),
        ("https://user:pw@10.0.0.5:6443", "carries user information"),
        ("https://10.0.0.5:99999", "is not a URL"),
    ],
)
def test_a_server_other_than_https_host_port_is_refused(server: str, problem: str) -> None:
    with pytest.raises(UntrustedKubeconfigError, match=problem):
        parse_inline_kubeconfig(capi_kubeconfig(cluster={"server": server}), where=WHERE)


def test_the_server_must_be_the_clusters_control_plane_endpoint() -> None:
    parsed = parse_inline_kubeconfig(capi_kubeconfig(), where=WHERE)
    owner = "Cluster clusters/dev-eu's spec.controlPlaneEndpoint"
    check_endpoint(parsed, "10.0.0.5", 6443, where=WHERE, owner=owner)
    with pytest.raises(UntrustedKubeconfigError) as elsewhere:
        check_endpoint(parsed, "10.0.0.5", 443, where=WHERE, owner=owner)
    assert str(elsewhere.value) == (
        f"{WHERE}: the kubeconfig's server https://10.0.0.5:6443 is not {owner} (10.0.0.5:443); "
        "refusing to send credentials there"
    )
    with pytest.raises(UntrustedKubeconfigError, match="has no host yet"):
        check_endpoint(parsed, "", 0, where=WHERE, owner=owner)
    by_name = capi_kubeconfig(cluster={"server": "https://API.Dev-EU.example"})
    named = parse_inline_kubeconfig(by_name, where=WHERE)
    check_endpoint(named, "api.dev-eu.example", 443, where=WHERE, owner=owner)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a list", "not a mapping"),
        (
            capi_kubeconfig().replace("current-context: dev-eu-admin@dev-eu", "current-context: nope"),
            "names no context",
        ),
        (capi_kubeconfig(cluster={"certificate-authority-data": "not base64!"}), "is not base64"),
        (capi_kubeconfig(cluster={"certificate-authority-data": _b64(b"plain")}), "is not PEM data"),
    ],
)
def test_a_malformed_kubeconfig_is_one_clear_line(text: str, problem: str) -> None:
    with pytest.raises(UntrustedKubeconfigError, match=problem):
        parse_inline_kubeconfig(text, where=WHERE)


def test_the_client_configuration_is_built_from_the_validated_fields_only() -> None:
    parsed = parse_inline_kubeconfig(capi_kubeconfig(user={"token": "abc"}), where=WHERE)
    configuration = configuration_from_inline(parsed)
    assert configuration.host == "https://10.0.0.5:6443"
    assert configuration.verify_ssl is True
    assert configuration.api_key == {"BearerToken": "Bearer abc"}
    for path, content in (
        (configuration.ssl_ca_cert, PEM),
        (configuration.cert_file, PEM),
        (configuration.key_file, KEY),
    ):
        assert Path(path).read_bytes() == content
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700

"""The local control plane's credentials: a CA, the API server's serving certificate signed by it,
the service-account signing keys, and kubeconfigs that trust the CA and carry a bearer token.

A real CA (as envtest's TinyCA does) lets every client verify TLS; `localcluster.controlplane`
writes them into its run directory at start.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey, now: dt.datetime
) -> x509.CertificateBuilder:
    """A certificate for `key`'s public half, valid from five minutes ago (clock skew) for 30 days."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
    )


def _key_usage(
    *,
    digital_signature: bool = False,
    key_encipherment: bool = False,
    key_cert_sign: bool = False,
    crl_sign: bool = False,
) -> x509.KeyUsage:
    """The KeyUsage extension with only the named uses allowed."""
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def write_pki(run_dir: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, and the service-account keys.

    A real CA (as envtest's TinyCA does) lets every client verify TLS: no insecure-skip-tls-verify,
    hence no urllib3 InsecureRequestWarning (which the test suite turns into an error).
    """
    pki = run_dir / "pki"
    pki.mkdir(mode=0o700)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scalebot-localcluster-ca")])
    ca_cert = (
        _certificate(ca_name, ca_name, ca_key, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    serving_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    serving_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    serving_cert = (
        _certificate(serving_name, ca_name, serving_key, now)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                    x509.IPAddress(ipaddress.IPv4Address("10.96.0.1")),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default.svc"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_encipherment=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (pki / "apiserver.crt").write_bytes(serving_cert.public_bytes(serialization.Encoding.PEM))
    (pki / "apiserver.key").write_bytes(_pem_key(serving_key))
    (pki / "sa.key").write_bytes(_pem_key(sa_key))
    (pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for name in ("apiserver.key", "sa.key"):
        (pki / name).chmod(0o600)


def kubeconfig_text(server: str, ca_pem: bytes, user: str, token: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "localcluster",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "localcluster", "user": user}}],
        "current-context": user,
    }
    return yaml.safe_dump(doc, sort_keys=False)

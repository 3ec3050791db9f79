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


def _write_pki(run_dir: Path) -> None:
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
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    serving_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
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
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
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


def _kubeconfig(server: str, ca_pem: bytes, user: str, token: str) -> str:
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

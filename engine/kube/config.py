"""Loading a cluster configuration for the real client: kubeconfig (kubectl's order: `--kubeconfig`,
$KUBECONFIG, ~/.kube/config) or in-cluster, into a fresh `kubernetes.client.Configuration`, never
the library's global default, with actionable `KubeConfigError`s. A kubeconfig the operator did
not write (a Cluster API Secret) is never given to the library's loader: `configuration_from_inline`
builds the configuration from its allow-listed fields.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from engine.domain.errors import Category, ScalebotError
from engine.kube.inline_kubeconfig import InlineKubeconfig

IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"


class KubeConfigError(ScalebotError, ValueError):
    """No usable cluster configuration; the message says what to change."""

    category = Category.CONFIGURATION


def configuration_from_inline(kubeconfig: InlineKubeconfig) -> Any:
    """A `Configuration` built field by field from an allow-listed kubeconfig
    (`engine.kube.inline_kubeconfig`): the untrusted document never reaches the library's loader,
    so nothing in it can run a command or name a file. The certificates and key the client needs
    as files are written by scalebot into a directory only this process can read."""
    configuration = k8s.Configuration()
    configuration.host = kubeconfig.server
    configuration.verify_ssl = True
    if kubeconfig.certificate_authority is not None:
        configuration.ssl_ca_cert = _private_file(kubeconfig.certificate_authority)
    if kubeconfig.client_certificate is not None:
        configuration.cert_file = _private_file(kubeconfig.client_certificate)
    if kubeconfig.client_key is not None:
        configuration.key_file = _private_file(kubeconfig.client_key)
    if kubeconfig.token is not None:
        configuration.api_key = {"BearerToken": f"Bearer {kubeconfig.token}"}
    if kubeconfig.tls_server_name:
        configuration.tls_server_name = kubeconfig.tls_server_name
    return configuration


class _PrivateFiles:
    """Files holding credentials (mode 0600 in a 0700 directory of this process, removed at exit);
    the same content is written once, so credentials re-read after a 401 do not pile up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._directory: str | None = None
        self._paths: dict[bytes, str] = {}

    def path_of(self, content: bytes) -> str:
        with self._lock:
            found = self._paths.get(content)
            if found is not None and os.path.isfile(found):
                return found
            if self._directory is None or not os.path.isdir(self._directory):
                self._directory = tempfile.mkdtemp(prefix="scalebot-credentials-")
                atexit.register(shutil.rmtree, self._directory, True)
            fd, path = tempfile.mkstemp(dir=self._directory)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            self._paths[content] = path
            return path


_PRIVATE_FILES = _PrivateFiles()


def _private_file(content: bytes) -> str:
    return _PRIVATE_FILES.path_of(content)


def load_configuration(*, kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A fresh `kubernetes.client.Configuration`, found in kubectl's order; raises KubeConfigError."""
    configuration = k8s.Configuration()
    path = _kubeconfig_path(kubeconfig)
    if path is None:
        if context:
            raise KubeConfigError(
                f"context {context!r} was requested but no kubeconfig was found; "
                "pass --kubeconfig, set KUBECONFIG or create ~/.kube/config"
            )
        if os.environ.get(IN_CLUSTER_HOST_ENV):
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except ConfigException as exc:
                raise KubeConfigError(f"in-cluster configuration failed: {one_line(exc)}") from exc
            return configuration
        raise KubeConfigError(
            "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, "
            "create ~/.kube/config, or run in a pod with a service account"
        )
    chosen = _check_context(path, context)
    try:
        # persist_config=False: never rewrite the user's kubeconfig (token refresh writes back).
        k8s_config.load_kube_config(
            config_file=path, context=chosen, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, OSError, yaml.YAMLError, KeyError, ValueError) as exc:
        raise KubeConfigError(f"cannot use context {chosen!r} from {path}: {one_line(exc)}") from exc
    return configuration


def _kubeconfig_path(explicit: str | None) -> str | None:
    """The kubeconfig to read (several joined by os.pathsep, as KUBECONFIG allows), or None."""
    if explicit:
        path = os.path.expanduser(explicit)
        if not os.path.isfile(path):
            raise KubeConfigError(f"kubeconfig file {path} does not exist; check the --kubeconfig path")
        return path
    env = os.environ.get("KUBECONFIG", "")
    if env:
        paths = [os.path.expanduser(p) for p in env.split(os.pathsep) if p]
        existing = [p for p in paths if os.path.isfile(p)]
        if not existing:
            raise KubeConfigError(f"KUBECONFIG={env} names no existing file; fix it or unset it")
        return os.pathsep.join(existing)
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.isfile(default) else None


def _check_context(path: str, context: str | None) -> str:
    """The context to use: `context` or the current-context, checked to exist in the file(s)."""
    names: list[str] = []
    current: str | None = None
    for one in path.split(os.pathsep):
        try:
            with open(one, encoding="utf-8") as f:
                document = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"cannot read kubeconfig {one}: {one_line(exc)}") from exc
        if not isinstance(document, dict):
            raise KubeConfigError(f"kubeconfig {one} is empty or not a mapping")
        names.extend(str(c.get("name")) for c in document.get("contexts") or () if isinstance(c, dict))
        current = current or document.get("current-context") or None  # first file wins, as in kubectl
    available = ", ".join(sorted(set(names))) or "(none)"
    chosen = context or current
    if not chosen:
        raise KubeConfigError(f"{path} sets no current-context; pass --context, one of: {available}")
    if chosen not in names:
        raise KubeConfigError(f"context {chosen!r} not found in {path}; available contexts: {available}")
    return chosen


def one_line(value: object) -> str:
    return " ".join(str(value).split())

"""Loading a cluster configuration for the real client: kubeconfig (kubectl's order: `--kubeconfig`,
$KUBECONFIG, ~/.kube/config) or in-cluster, into a fresh `kubernetes.client.Configuration`, never
the library's global default, with actionable `KubeConfigError`s. A kubeconfig held in memory (a
Cluster API Secret) is read without touching the disk.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from engine.domain.errors import Category, ScalebotError

IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"


class KubeConfigError(ScalebotError, ValueError):
    """No usable cluster configuration; the message says what to change."""

    category = Category.CONFIGURATION


def configuration_from_text(text: str, *, where: str) -> Any:
    """A `Configuration` from kubeconfig text (its current context); raises KubeConfigError."""
    configuration = k8s.Configuration()
    try:
        document = yaml.safe_load(text)
        if not isinstance(document, dict):
            raise ValueError("not a kubeconfig document")
        k8s_config.load_kube_config_from_dict(
            config_dict=document, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, KeyError, ValueError, TypeError) as exc:
        raise KubeConfigError(f"cannot use the kubeconfig in {where}: {_one_line(exc)}") from exc
    return configuration


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
                raise KubeConfigError(f"in-cluster configuration failed: {_one_line(exc)}") from exc
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
        raise KubeConfigError(f"cannot use context {chosen!r} from {path}: {_one_line(exc)}") from exc
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
            raise KubeConfigError(f"cannot read kubeconfig {one}: {_one_line(exc)}") from exc
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


def _one_line(value: object) -> str:
    return " ".join(str(value).split())

"""What the chart's install tests create before `helm install`: a statically provisioned volume for
the release's ReadWriteOnce claim (the suite's control plane has no dynamic provisioner) and the
Slack Secret the chart's `existingSecret` names."""

from __future__ import annotations

from typing import Any

from localcluster import rest


def create_static_volume(admin_api: Any, name: str, storage_class: str) -> str:
    """A 1 GiB hostPath PersistentVolume `NAME-data` of `storage_class`, kept on release; its path."""
    rest.create(
        admin_api,
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{name}-data"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{name}"},
            },
        },
    )
    return f"/api/v1/persistentvolumes/{name}-data"


def create_slack_secret(admin_api: Any, namespace: str, tokens: dict[str, str]) -> None:
    """The Secret `scalebot-slack` holding the given Slack tokens."""
    rest.create(
        admin_api,
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "scalebot-slack"},
            "stringData": tokens,
        },
    )

"""What is behind a label pool's nodes decides whether removing one deletes its Node object."""

from __future__ import annotations

from typing import Any

import pytest

from engine.domain.node_removal import NodeRemoval
from engine.pools.labels import node_backing, removal_for


# Bare metadata, not tests.builders.raw_node: the shared node carries kwok's annotation, and which
# annotation, finalizer or providerID a node has is what these cases vary.
def node(
    *, finalizers: tuple[str, ...] = (), annotations: dict[str, str] | None = None, provider_id: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "finalizers": list(finalizers), "annotations": annotations or {}},
        "spec": {"providerID": provider_id} if provider_id else {},
    }


@pytest.mark.parametrize(
    ("raw", "backing"),
    [
        (node(finalizers=("karpenter.sh/termination",)), "Karpenter"),
        (node(annotations={"cluster.x-k8s.io/machine": "md-0-abc"}), "Cluster API"),
        (node(annotations={"kwok.x-k8s.io/node": "fake"}), "kwok"),
        (node(provider_id="kwok://kwok-nc-1"), "kwok"),
        (node(provider_id="aws:///eu-west-1a/i-0abc"), ""),
        (node(finalizers=("example.com/other",)), ""),
        (node(), ""),
    ],
)
def test_node_backing(raw: dict[str, Any], backing: str) -> None:
    assert node_backing(raw) == backing


def test_one_unbacked_node_makes_the_pool_empty_only() -> None:
    kwok, vm = node(provider_id="kwok://a"), node(provider_id="gce://p/z/vm")
    assert removal_for([kwok, kwok], "auto") == (NodeRemoval.NODE, "nodes managed by kwok")
    removal, reason = removal_for([kwok, vm], "auto")
    assert removal is NodeRemoval.EMPTY and "behind 1 of 2 node(s)" in reason
    assert removal_for([vm], "delete-node") == (NodeRemoval.NODE, "node_removal: delete-node")
    assert removal_for([kwok], "empty") == (NodeRemoval.EMPTY, "node_removal: empty")

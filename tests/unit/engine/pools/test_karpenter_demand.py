"""Which pending pods a Karpenter NodePool could serve (what a wake waits for), and static NodePools."""

from __future__ import annotations

from typing import Any

import pytest

from engine.domain.model import PodInfo
from engine.pools.base import PoolNotFound
from engine.pools.karpenter import NodePoolTemplate, StaticNodePool
from tests.builders import typed_pod

SPEC: dict[str, Any] = {
    "template": {
        "metadata": {"labels": {"team": "web", "type": "kwok"}},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "example.com/tier", "operator": "NotIn", "values": ["gold"]},
            ],
            "taints": [
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ],
        },
    }
}
TEMPLATE = NodePoolTemplate.from_spec("web", SPEC)
TOLERATES = [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}]


# Only the scheduling constraints, not tests.builders.raw_pod: the shared pod tolerates kwok's taint,
# and the tolerations (and selectors) are what this table varies. Decoded as the provider reads its
# pending pods (engine.kube.projection).
def _pod(
    selector: dict[str, str] | None = None,
    *,
    expressions: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> PodInfo:
    spec: dict[str, Any] = {"tolerations": TOLERATES if tolerations is None else tolerations}
    if selector is not None:
        spec["nodeSelector"] = selector
    if expressions is not None:
        term = {"matchExpressions": expressions}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return typed_pod({"metadata": {"name": "p"}, "spec": spec})


@pytest.mark.parametrize(
    ("pod", "served"),
    [
        (_pod(), True),
        (_pod({"team": "web"}), True),
        (_pod({"karpenter.sh/nodepool": "web"}), True),
        (_pod({"kubernetes.io/arch": "arm64", "topology.kubernetes.io/zone": "eu-west-1a"}), True),
        (_pod({"karpenter.kwok.sh/instance-family": "c"}), True),  # the cloud provider's own labels
        (_pod({"example.com/tier": "silver"}), True),
        # not this NodePool's
        (_pod({"karpenter.sh/nodepool": "batch"}), False),
        (_pod({"team": "data"}), False),
        (_pod({"kubernetes.io/arch": "s390x"}), False),
        (_pod({"karpenter.sh/capacity-type": "spot"}), False),
        (_pod({"example.com/tier": "gold"}), False),
        (_pod({"disk": "ssd"}), False),  # a label the NodePool never sets
        (_pod({"kubernetes.io/hostname": "gone-node"}), False),
        (_pod(tolerations=[]), False),  # the NoSchedule taint (PreferNoSchedule does not count)
        (_pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]), True),
        (_pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db"}]), False),
        # required node affinity: every expression of a term, any term
        (_pod(expressions=[{"key": "team", "operator": "In", "values": ["web", "data"]}]), True),
        (_pod(expressions=[{"key": "disk", "operator": "DoesNotExist"}]), True),
        (_pod(expressions=[{"key": "disk", "operator": "Exists"}]), False),
        (
            _pod(
                expressions=[{"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["amd64", "arm64"]}]
            ),
            False,
        ),
        (
            _pod(
                expressions=[
                    {"key": "team", "operator": "In", "values": ["web"]},
                    {"key": "disk", "operator": "In", "values": ["ssd"]},
                ]
            ),
            False,
        ),
    ],
)
def test_a_nodepool_serves_the_pods_its_nodes_could_take(pod: PodInfo, served: bool) -> None:
    assert TEMPLATE.could_serve(pod) is served


def test_a_nodepool_without_template_details_serves_plain_pods_only() -> None:
    bare = NodePoolTemplate.from_spec("any", {})
    assert bare.could_serve(typed_pod({"spec": {}}))
    assert bare.could_serve(typed_pod({"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}}))
    assert not bare.could_serve(typed_pod({"spec": {"nodeSelector": {"team": "web"}}}))


def test_a_static_nodepool_is_refused_by_name() -> None:
    refused = StaticNodePool("fixed", 3)
    assert isinstance(refused, PoolNotFound), "planning turns PoolNotFound into the user's error"
    assert str(refused).startswith("NodePool fixed is static (spec.replicas: 3): ")
    assert "change spec.replicas yourself" in str(refused)

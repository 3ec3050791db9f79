"""The gke provider's pure rules: which instances a removal deletes, per-zone sizes, the autoscaling
a sleep and a wake ask for. (End to end against the GKE stand-in: tests/e2e/test_pools_gke.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.pools.base import PoolSizeError, RestoreRecord
from engine.pools.cloud import Bounds, CloudNode, bounds_for, record_name
from engine.pools.common import NodeRemovalError
from engine.pools.gke import (
    EXTRA_KEY,
    Autoscaling,
    GkeNodePool,
    InstanceGroup,
    ManagedInstance,
    autoscaling_for,
    parse_provider_id,
    per_zone_size,
    plan_removal,
)

B = "https://compute/projects/p/zones/europe-west1-b/instanceGroupManagers/gke-web-b-grp"
C = "https://compute/projects/p/zones/europe-west1-c/instanceGroupManagers/gke-web-c-grp"
PER_ZONE = Autoscaling(enabled=True, min_nodes=1, max_nodes=5)


def _pool(scaling: Autoscaling = PER_ZONE) -> GkeNodePool:
    return GkeNodePool("web", "RUNNING", scaling, (B, C))


def _groups(action: str = "NONE") -> list[InstanceGroup]:
    def member(name: str) -> ManagedInstance:
        return ManagedInstance(name, f"zones/x/instances/{name}", action, "RUNNING")

    return [
        InstanceGroup(B, "europe-west1-b", 2, (member("b1"), member("b2"))),
        InstanceGroup(C, "europe-west1-c", 2, (member("c1"), member("c2"))),
    ]


def _node(name: str, zone: str, pool: str = "web") -> CloudNode:
    return CloudNode(name, pool, f"gce://p/{zone}/{name}", True)


NODES = [_node(n, f"europe-west1-{n[0]}") for n in ("b1", "b2", "c1", "c2")]


def test_provider_ids() -> None:
    assert parse_provider_id("gce://p/europe-west1-b/gke-web-1") == ("p", "europe-west1-b", "gke-web-1")
    assert parse_provider_id("aws:///eu-west-1a/i-1") is None
    assert parse_provider_id("gce://p/zone") is None


def test_removal_deletes_exactly_the_chosen_instances_from_their_groups() -> None:
    removal = plan_removal(_pool(), _groups(), NODES, ["b2", "c2"])
    assert dict(removal.delete) == {
        B: ("zones/europe-west1-b/instances/b2",),
        C: ("zones/europe-west1-c/instances/c2",),
    }
    assert removal.lower_min_first is None, "each zone keeps 1 node: the minimum holds"


def test_removal_lowers_the_minimum_first_when_it_is_in_the_way() -> None:
    removal = plan_removal(_pool(), _groups(), NODES, ["b1", "b2"])
    assert removal.lower_min_first == Autoscaling(enabled=True, min_nodes=0, max_nodes=5)
    total = Autoscaling(enabled=True, min_nodes=3, max_nodes=8, total=True)
    assert plan_removal(_pool(total), _groups(), NODES, ["b1", "b2"]).lower_min_first == Autoscaling(
        enabled=True, min_nodes=2, max_nodes=8, total=True
    )


def test_removal_skips_instances_already_leaving_and_refuses_foreign_nodes() -> None:
    removal = plan_removal(_pool(), _groups("DELETING"), NODES, ["b1"])
    assert (dict(removal.delete), removal.already_gone) == ({}, ("b1",))
    with pytest.raises(NodeRemovalError, match=r"not in node pool web: x1 \(batch\)"):
        plan_removal(_pool(), _groups(), [_node("x1", "europe-west1-b", "batch")], ["x1"])
    with pytest.raises(NodeRemovalError, match="without a Compute Engine instance"):
        plan_removal(_pool(), _groups(), [CloudNode("k", "web", "kwok://k", True)], ["k"])


def test_sizes_are_per_zone() -> None:
    assert per_zone_size("web", 6, 3) == 2
    assert per_zone_size("web", 0, 3) == 0
    with pytest.raises(PoolSizeError, match=r"spans 3 zones .* a multiple of 3 \(e.g. 3 or 6\)"):
        per_zone_size("web", 4, 3)


def _record(scaling: Autoscaling) -> RestoreRecord:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return RestoreRecord(4, 2, 10, now, "op-1", {EXTRA_KEY: scaling.to_extra()})


def test_sleep_lowers_the_minimum_and_wake_restores_the_recorded_autoscaling() -> None:
    asleep = autoscaling_for(0, 2, PER_ZONE, None)
    assert asleep == Autoscaling(enabled=True, min_nodes=0, max_nodes=5)
    recorded = Autoscaling(enabled=True, min_nodes=1, max_nodes=5, location_policy="ANY")
    assert autoscaling_for(4, 2, asleep, _record(recorded)) == recorded
    assert autoscaling_for(14, 2, PER_ZONE, None) == Autoscaling(enabled=True, min_nodes=1, max_nodes=7)
    off = Autoscaling(enabled=False)
    assert autoscaling_for(0, 2, off, None) == off


def test_shared_bounds_and_record_names() -> None:
    assert bounds_for(0, Bounds(True, 2, 6), None) == Bounds(True, 0, 6)
    assert record_name("gke", "web") == "scalebot-gke-web"
    assert record_name("aks", "Pool_1").startswith("scalebot-aks-pool-1-")

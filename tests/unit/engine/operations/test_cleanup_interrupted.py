"""An interrupted empty-node batch's nodes are judged as they were before scalebot's cordon."""

from __future__ import annotations

from typing import Any

from engine.domain.model import DRAINING_TAINT_KEY, NodeInfo
from engine.operations.unattended import as_uncordoned
from tests.builders import raw_node

TAINTS = [
    {"key": DRAINING_TAINT_KEY, "value": "1700000000", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
]


def _node(name: str) -> dict[str, Any]:
    """Cordoned by scalebot (its taint) and tainted by someone else."""
    return raw_node(name, unschedulable=True, taints=TAINTS)


def test_only_the_named_nodes_lose_the_cordon_and_only_scalebots_taint() -> None:
    shown = as_uncordoned([NodeInfo.from_raw(_node("ours")), NodeInfo.from_raw(_node("theirs"))], {"ours"})
    ours, theirs = shown
    assert not ours.unschedulable and [t.key for t in ours.taints] == ["dedicated"]
    assert theirs.unschedulable and [t.key for t in theirs.taints] == [DRAINING_TAINT_KEY, "dedicated"]


def test_the_listing_itself_is_not_changed() -> None:
    listed = NodeInfo.from_raw(_node("ours"))
    as_uncordoned([listed], {"ours"})
    assert listed == NodeInfo.from_raw(_node("ours"))

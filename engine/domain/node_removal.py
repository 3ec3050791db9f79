"""What taking a node out of a pool does to the machine behind it: a value every layer shares.

The pool providers (engine.pools) decide it; operations record it in their plan (engine.domain.operation)
and the renderers say it. It lives here, below both, so an operation's value does not depend on the
provider port.
"""

from __future__ import annotations

from enum import StrEnum


class NodeRemoval(StrEnum):
    """What taking a node out of a pool really does to the machine behind it."""

    MACHINE = "machine"
    """The provider deletes the machine itself (a Cluster API Machine, a node group's instance)."""
    NODE = "node"
    """The Node object is deleted, and something stops the machine behind it: a Karpenter
    termination finalizer, a Cluster API Machine, kwok (simulated nodes), or the operator said so
    (`node_removal: delete-node`)."""
    EMPTY = "empty"
    """Nothing would stop the machine: the node is cordoned and drained and stays, so an
    autoscaler (or a person) can remove it. Deleting its Node object would only hide a running VM."""

    def zero_text(self) -> str:
        """What a scale to zero does, in a few words, for `/scale status`."""
        return {
            NodeRemoval.MACHINE: "zero removes the machines",
            NodeRemoval.NODE: "zero deletes the Node objects",
            NodeRemoval.EMPTY: "zero empties the nodes (cordon + drain), removes none",
        }[self]

"""Test-only: what the cloud STAND-INS (eks, gke, aks) share.

`StandInNodes`: the kwok Nodes a stand-in keeps in step with its machines. Each machine that serves
is a Node named as the cloud names it, with the cloud's pool label and `spec.providerID` and the
stand-in's own label (its cluster's name, so tests never touch another test's Nodes); a machine gone
takes its Node with it, as the cloud node lifecycle controller does. kwok makes the Nodes Ready.
`KeepsNodes` gives a stand-in `node_names()` and `cleanup()` over them.

`advance`: one reconcile round of a stand-in's long-running operations, each applied once its
rounds are over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster import bodies, objects, rest


@dataclass(frozen=True, slots=True)
class Machine:
    """A machine of the stand-in's cloud that serves, as its Node must show it."""

    node: str
    provider_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    """More labels than the stand-in's and the pool's (a zone, a mode)."""


@dataclass(frozen=True, slots=True)
class StandInNodes:
    kube: Any
    """An admin ApiClient: the stand-in creates and deletes Nodes."""
    standin_label: str
    cluster: str
    pool_label: str

    def names(self, pool: str | None = None) -> list[str]:
        """The Nodes of the stand-in's cluster (of one pool), sorted."""
        selector = f"{self.standin_label}={self.cluster}" + (f",{self.pool_label}={pool}" if pool else "")
        return sorted(
            n["metadata"]["name"]
            for n in rest.list_items(self.kube, rest.node_path(), label_selector=selector)
        )

    def converge(self, pool: str, serving: Sequence[Machine]) -> None:
        """A Node for each serving machine of `pool` that has none; no Node for any other."""
        present = set(self.names(pool))
        for machine in sorted(serving, key=lambda m: m.node):
            if machine.node in present:
                continue
            labels = {self.standin_label: self.cluster, self.pool_label: pool, **machine.labels}
            body = bodies.node_body(machine.node, pool, labels=labels, cpu="2", memory="8Gi")
            body["spec"]["providerID"] = machine.provider_id
            rest.create(self.kube, rest.node_path(), body)
        gone = sorted(present - {m.node for m in serving})
        if gone:
            objects.delete_nodes(self.kube, gone)

    def cleanup(self) -> None:
        objects.delete_nodes(self.kube, self.names())


class KeepsNodes:
    """A stand-in's reads of its Nodes; `_nodes` says which they are."""

    @property
    def _nodes(self) -> StandInNodes:
        raise NotImplementedError

    def node_names(self, pool: str | None = None) -> list[str]:
        return self._nodes.names(pool)

    def cleanup(self) -> None:
        self._nodes.cleanup()


def advance(
    operations: Iterable[dict[str, Any]], *, running: str, ended: Callable[[dict[str, Any]], str]
) -> None:
    """One round for each operation still `running`: the last one applies it (`op["apply"]()`)
    and gives it the status `ended(op)`."""
    for op in operations:
        if op["status"] != running:
            continue
        op["rounds"] -= 1
        if op["rounds"] <= 0:
            op["apply"]()
            op["status"] = ended(op)

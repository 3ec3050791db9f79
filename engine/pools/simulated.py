"""Node pools of the in-memory cluster (`engine.kube.fake.FakeCluster`), grouped by a label.

Pairs with the fake for unit tests and for the built-in simulated cluster (`--simulated`).
Removing a node deletes it from the fake; growing a pool re-creates the removed nodes by name
(Ready at once), which is what a cloud node group would do for a real label pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.domain.model import NodeInfo
from engine.domain.node_removal import NodeRemoval
from engine.kube.fake import FakeCluster
from engine.pools.base import POOL_LABEL, Pool, PoolNotFound, RestoreRecord


@dataclass(frozen=True, slots=True)
class _Template:
    name: str
    labels: dict[str, str]


class SimulatedPoolProvider:
    name = "simulated"

    def __init__(self, cluster: FakeCluster, *, label: str = POOL_LABEL) -> None:
        self.cluster = cluster
        self.label = label
        self._lock = threading.Lock()
        self._records: dict[str, RestoreRecord] = {}
        self._templates: dict[str, list[_Template]] = {}
        self._marked: set[str] = set()
        self.on_change: Callable[[], None] | None = None
        """Called after a restore record or a removed node's template changed, e.g. to persist them."""

    def to_state(self) -> dict[str, Any]:
        """Restore records and removed nodes' templates, as JSON-ready data (`load_state` reads it)."""
        with self._lock:
            return {
                "records": {
                    pool: {
                        "desired": r.desired,
                        "min_size": r.min_size,
                        "max_size": r.max_size,
                        "recorded_at": r.recorded_at.isoformat(),
                        "operation_id": r.operation_id,
                        "extra": dict(r.extra),
                    }
                    for pool, r in sorted(self._records.items())
                },
                "templates": {
                    pool: [{"name": t.name, "labels": t.labels} for t in templates]
                    for pool, templates in sorted(self._templates.items())
                },
            }

    def load_state(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            self._records = {
                pool: RestoreRecord(
                    desired=int(r["desired"]),
                    min_size=int(r["min_size"]),
                    max_size=None if r["max_size"] is None else int(r["max_size"]),
                    recorded_at=datetime.fromisoformat(r["recorded_at"]),
                    operation_id=str(r["operation_id"]),
                    extra=dict(r["extra"]),
                )
                for pool, r in state["records"].items()
            }
            self._templates = {
                pool: [_Template(str(t["name"]), dict(t["labels"])) for t in templates]
                for pool, templates in state["templates"].items()
            }

    def _changed(self) -> None:
        # Called without the lock: the listener reads the state through `to_state`.
        if self.on_change is not None:
            self.on_change()

    def list_pools(self) -> list[Pool]:
        by_pool: dict[str, list[NodeInfo]] = {}
        for node in self.cluster.list_nodes():
            if self.label in node.labels:
                by_pool.setdefault(node.labels[self.label], []).append(node)
        with self._lock:
            names = sorted({*by_pool, *self._templates, *self._records})
            return [self._pool(name, by_pool.get(name, [])) for name in names]

    def get_pool(self, name: str) -> Pool:
        pools = self.list_pools()
        for pool in pools:
            if pool.name == name:
                return pool
        raise PoolNotFound(name, [p.name for p in pools])

    def record_restore(self, pool: str, record: RestoreRecord) -> bool:
        with self._lock:
            if pool in self._records:
                return False
            self._records[pool] = record
        self._changed()
        return True

    def clear_restore(self, pool: str) -> None:
        with self._lock:
            had = self._records.pop(pool, None)
        if had is not None:
            self._changed()

    def prepare_removal(self, pool: str, nodes: Sequence[str]) -> None:
        with self._lock:
            self._marked.update(nodes)

    def remove_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        live = {n.name: n for n in self.cluster.list_nodes()}
        for name in nodes:
            node = live.get(name)
            if node is None:
                continue  # already removed: a repeated step after a restart
            with self._lock:
                self._templates.setdefault(pool, []).append(_Template(name, dict(node.labels)))
                self._marked.discard(name)
            self._changed()
            self.cluster.delete_node(name)

    def set_size(self, pool: str, size: int) -> None:
        current = self.get_pool(pool)
        missing = size - len(current.nodes)
        with self._lock:
            templates = self._templates.get(pool, [])
            for template in templates[: max(0, missing)]:
                self.cluster.add_node(template.name, labels=template.labels)
            self._templates[pool] = templates[max(0, missing) :]
        self._changed()
        if missing > len(templates):
            for i in range(missing - len(templates)):
                self.cluster.add_node(f"{pool}-new-{len(current.nodes) + i}", labels={self.label: pool})
        if missing < 0:
            extra = sorted(current.nodes)[size:]
            self.remove_nodes(pool, extra)

    def _pool(self, name: str, nodes: list[NodeInfo]) -> Pool:
        return Pool(
            name=name,
            provider=self.name,
            desired=len(nodes),
            nodes=tuple(sorted(n.name for n in nodes)),
            ready_nodes=tuple(sorted(n.name for n in nodes if n.ready == "True")),
            restore=self._records.get(name),
            removal=NodeRemoval.NODE,
            removal_reason="simulated nodes",
        )

"""The built-in simulated cluster's state (`--simulated`), one row per part."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.store.base import StoreBase


class SimulationStore(StoreBase):
    """Save and read back a simulated cluster's parts."""

    def save_simulation(self, cluster: str, part: str, state: Mapping[str, Any], *, at: datetime) -> None:
        """Replace one part of a simulated cluster's state (one transaction: a crash keeps the old
        or the new state, never half of it)."""
        row = {
            "cluster": cluster,
            "part": part,
            "state": json.dumps(state, sort_keys=True),
            "saved_at": at.isoformat(),
        }
        with self.transaction():
            self.db.table("simulation").upsert(row, pk=("cluster", "part"))

    def simulation(self, cluster: str) -> dict[str, dict[str, Any]]:
        """The saved parts of a simulated cluster's state by name (empty: never saved)."""
        with self._lock:
            rows = list(self.db.table("simulation").rows_where("cluster = ?", [cluster]))
        return {str(r["part"]): json.loads(r["state"]) for r in rows}

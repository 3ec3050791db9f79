"""What a drain remembers between passes, persisted with its operation so a restart resumes it.

Pure: frozen dataclasses over datetimes, names and counts. `engine.drain.passes` reads and advances it one
pass at a time; `engine.domain.operation` keeps it inside an operation's progress record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.domain.model import format_time, parse_time


@dataclass(frozen=True, slots=True)
class PodFailure:
    """The last eviction failure of one pod (by UID), and when to try it again."""

    key: str
    retry_at: datetime
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class DrainState:
    """Everything a drain must remember between passes; persisted so a restart resumes it."""

    started_at: datetime
    already_cordoned: frozenset[str] = frozenset()
    """Nodes that were cordoned before we started: a cancel must leave them cordoned."""
    failures: Mapping[str, PodFailure] = field(default_factory=dict)
    last_eviction_at: datetime | None = None
    evicted_total: int = 0
    deleted_total: int = 0
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    """Node → why its drain ended: a refusal that no retry can change (a filter refusal, a pod under
    two budgets, a 403 or another non-retryable 4xx). kubectl stops draining such a node and
    reports it; later passes leave it alone and drain the others."""

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": format_time(self.started_at),
            "already_cordoned": sorted(self.already_cordoned),
            "failures": {
                uid: {"key": f.key, "retry_at": f.retry_at.isoformat(), "attempts": f.attempts}
                for uid, f in sorted(self.failures.items())
            },
            "last_eviction_at": self.last_eviction_at.isoformat() if self.last_eviction_at else None,
            "evicted_total": self.evicted_total,
            "deleted_total": self.deleted_total,
            "failed_nodes": dict(sorted(self.failed_nodes.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DrainState:
        started = parse_time(data["started_at"])
        assert started is not None
        return cls(
            started_at=started,
            already_cordoned=frozenset(data.get("already_cordoned") or ()),
            failures={
                uid: PodFailure(
                    key=f["key"], retry_at=datetime.fromisoformat(f["retry_at"]), attempts=f["attempts"]
                )
                for uid, f in (data.get("failures") or {}).items()
            },
            last_eviction_at=(
                datetime.fromisoformat(data["last_eviction_at"]) if data.get("last_eviction_at") else None
            ),
            evicted_total=int(data.get("evicted_total") or 0),
            deleted_total=int(data.get("deleted_total") or 0),
            failed_nodes={str(k): str(v) for k, v in (data.get("failed_nodes") or {}).items()},
        )

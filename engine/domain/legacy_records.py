"""Operation progress and summaries as schema 3 and older stored them (free-form JSON objects).

Pure. `engine.store.migrations` reads every operation row through these once, when it opens a database of an
older schema, and writes the typed records back; nothing else reads the old shape. Lenient on
purpose: a key that is missing or of an unexpected type reads as its default, never as an error,
so no old row stops a database from opening.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.domain.drain_state import DrainState
from engine.domain.model import parse_time
from engine.domain.operation import (
    ConsolidationProgress,
    DrainProgress,
    OperationProgress,
    OperationSummary,
    PoolSizes,
    Released,
    RemovalProgress,
    WakeProgress,
    WorkloadCount,
    WorkloadsProgress,
)


def progress_from_legacy(data: Mapping[str, Any]) -> OperationProgress:
    """Schema 3's `step_data` (one flat object written by the steps) as typed progress."""
    released = _mapping(data.get("released"))
    return OperationProgress(
        drain=DrainProgress(
            state=_drain_state(data.get("drain")),
            phase1_started_at=_time(data.get("phase1_started_at")),
            evicted=_int(data.get("evicted")),
            last_message=data["last_message"] if isinstance(data.get("last_message"), str) else None,
            timeouts_reported=_names(data.get("drain_timeouts")),
            force_withdrawn=_str(data.get("force_withdrawn")),
            force_deleted=_names(data.get("force_deleted")),
            force_unconfirmed=_names(data.get("force_unconfirmed")),
            released=(
                Released(_names(released.get("uncordoned")), _names(released.get("kept_cordoned")))
                if released
                else None
            ),
        ),
        removal=RemovalProgress(
            joined={str(k): _names(v) for k, v in _mapping(data.get("joined")).items()},
            join_rounds=_int(data.get("join_rounds")),
            pool_changes=_names(data.get("pool_changes")),
            nodes_removed=_int(data.get("nodes_removed")),
            nodes_emptied=_int(data.get("nodes_emptied")),
            removed_at=_time(data.get("removed_at")),
            target_refused=_texts(data.get("target_refused")),
            verify=_names(data.get("verify")),
            hooks_reported=_str(data.get("hooks_reported")),
            detach_started_at=_time(data.get("detach_started_at")),
            detach_reported=_str(data.get("detach_reported")),
            detach_expired=_names(data.get("detach_expired")),
        ),
        wake=WakeProgress(
            resized_at=_time(data.get("resized_at")),
            ready=_int_or_none(data.get("ready")),
            wanted=_int_or_none(data.get("wanted")),
            provisioned=_int_or_none(data.get("provisioned")),
            not_ready=_names(data.get("not_ready")),
            kept_cordoned=_names(data.get("kept_cordoned")),
        ),
        workloads=WorkloadsProgress(
            headline=_str(_mapping(data.get("workloads_report")).get("headline")),
            available=_count(data.get("workloads")),
        ),
        consolidation=ConsolidationProgress(
            current=_str(data.get("current")),
            removed=_names(data.get("removed")),
            skipped=_texts(data.get("skipped")),
            evicted_before=_int(data.get("evicted_before")),
        ),
        provider_progress=_texts(data.get("provider_progress")),
        last_error=_str(data.get("last_error")),
        step_failures=_int(data.get("step_failures")),
    )


def summary_from_legacy(data: Mapping[str, Any]) -> OperationSummary | None:
    """Schema 3's `result` object ({} while the operation had not ended) as a typed summary."""
    if not data:
        return None
    ready = data.get("nodes_ready")
    pools = {
        str(name): PoolSizes(_int(sizes[0]), _int(sizes[1]))
        for name, sizes in _mapping(data.get("pools")).items()
        if isinstance(sizes, list | tuple) and len(sizes) == 2
    }
    return OperationSummary(
        duration_seconds=_int(data.get("duration_seconds")),
        pods_evicted=_int(data.get("pods_evicted")),
        pods_force_deleted=_int(data.get("pods_force_deleted")),
        nodes_removed=_int(data.get("nodes_removed")),
        nodes_emptied=_int(data.get("nodes_emptied")),
        pools=pools,
        workloads=_count(data.get("workloads")),
        nodes_ready=(
            (_int(ready[0]), _int(ready[1]))
            if isinstance(ready, list | tuple) and len(ready) == 2 and ready[1] is not None
            else None
        ),
        nodes_provisioned=_int_or_none(data.get("nodes_provisioned")),
        removed=_names(data.get("removed")),
        skipped=_texts(data.get("skipped")),
    )


def _drain_state(value: Any) -> DrainState | None:
    if not isinstance(value, Mapping) or not value.get("started_at"):
        return None
    return DrainState.from_json(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _texts(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value).items()}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _int_or_none(value: Any) -> int | None:
    return None if value is None else _int(value)


def _time(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _count(value: Any) -> WorkloadCount | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        return WorkloadCount(_int(value[0]), _int(value[1]))
    return None

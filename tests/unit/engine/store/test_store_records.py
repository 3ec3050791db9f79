"""engine.store.database: an operation's typed progress and summary in SQLite, and the schema version.

Covers: every field of `OperationProgress` and `OperationSummary` survives a write and a read;
rows written by schema 3 (free-form objects, as the runner of that version wrote them) are
migrated when the database is opened, and a zero-scale stopped mid-drain under schema 3 resumes
from its drain with its phase-1 start kept; a wake summary of schema 3 still gives the scheduled
wake report with its workloads; a database of a newer schema is refused with a clear message and
left as it is.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from engine.domain.drain_state import DrainState, PodFailure
from engine.domain.operation import (
    ConsolidationProgress,
    DrainProgress,
    Operation,
    OperationPlan,
    OperationProgress,
    OperationSummary,
    OpKind,
    OpState,
    PoolSizes,
    Released,
    RemovalProgress,
    Target,
    WakeProgress,
    WorkloadCount,
    WorkloadsProgress,
)
from engine.kube.fake import FakeCluster
from engine.schedules.core.text import wake_report
from engine.store.base import StoreError
from engine.store.database import Store
from engine.store.migrations import SCHEMA_VERSION
from tests.unit.engine.operations.test_operations import cluster, finish, make_ops, zero  # noqa: F401 (fixture)


def _set_row(db: Path, op_id: str, *, step: str, step_data: object, result: object, schema: int) -> None:
    """Make the file look as schema `schema` left it: the old JSON objects in the row."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE operations SET step = ?, step_data = ?, result = ? WHERE id = ?",
            (step, json.dumps(step_data), json.dumps(result), op_id),
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema),))


def _schema(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return str(value)


def test_every_field_of_the_progress_and_the_summary_survives_the_database(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    cluster_ = FakeCluster()
    now = cluster_.clock.now()  # type: ignore[union-attr]
    state = DrainState(
        started_at=now,
        already_cordoned=frozenset({"web-0"}),
        failures={"uid-1": PodFailure("Cannot evict pod", now + timedelta(seconds=5), 2)},
        last_eviction_at=now,
        evicted_total=4,
        deleted_total=1,
        failed_nodes={"web-1": "cannot delete bare pods"},
    )
    progress = OperationProgress(
        drain=DrainProgress(
            state=state,
            phase1_started_at=now,
            evicted=4,
            last_message="",
            timeouts_reported=("web",),
            force_withdrawn="pool(s) not going to zero since the plan: b (1)",
            force_deleted=("shop/a",),
            force_unconfirmed=("shop/b",),
            released=Released(("web-2",), ("web-0",)),
        ),
        removal=RemovalProgress(
            joined={"web": ("web-9",)},
            join_rounds=1,
            pool_changes=("pool web changed",),
            nodes_removed=2,
            nodes_emptied=1,
            removed_at=now,
            target_refused={"web": "label pool"},
            verify=("pool web is at 2, expected 1",),
            hooks_reported="Waiting for Cluster API: x",
            detach_started_at=now,
            detach_reported="Waiting for volumes",
            detach_expired=("web-1 (1 attached)",),
        ),
        wake=WakeProgress(resized_at=now, ready=2, wanted=3, provisioned=1, not_ready=("web-2: not Ready",)),
        workloads=WorkloadsProgress(headline="3/3 workloads restored", available=WorkloadCount(2, 3)),
        consolidation=ConsolidationProgress(
            current="web-1", removed=("web-0",), skipped={"web-2": "full"}, evicted_before=3
        ),
        provider_progress={"web": "2 Machines deleting"},
        last_error="connection refused",
        step_failures=2,
    )
    summary = OperationSummary(
        duration_seconds=300,
        pods_evicted=4,
        pods_force_deleted=1,
        nodes_removed=2,
        nodes_emptied=1,
        pools={"web": PoolSizes(3, 0)},
        workloads=WorkloadCount(2, 3),
        nodes_ready=(2, 3),
        nodes_provisioned=1,
        removed=("web-0",),
        skipped={"web-2": "full"},
    )
    op = Operation(
        id="op-1",
        kind=OpKind.ZERO,
        target=Target(cluster="dev"),
        state=OpState.RUNNING,
        requested_by="cli:alice",
        created_at=now,
        updated_at=now,
        plan=OperationPlan(kind=OpKind.ZERO, cluster="dev"),
        progress=progress,
        summary=summary,
    )
    store.save_operation(op)
    assert store.get_operation("op-1") == op
    store.save_operation(replace(op, summary=None, progress=OperationProgress()))
    assert store.get_operation("op-1") == replace(op, summary=None, progress=OperationProgress())
    store.close()


def test_a_zero_scale_stopped_mid_drain_under_schema_3_resumes_from_its_drain(
    cluster: FakeCluster,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.db"
    cluster.add_pdb("shop", "web-pdb", match_labels={"app": "web"}, disruptions_allowed=0)
    first = make_ops(cluster, db)
    first.runner.start = lambda op_id: None  # type: ignore[method-assign]  # saved, never run
    op = first.request(zero()).operation
    assert op is not None and op.plan.force_phase
    first.store.close()
    assert cluster.clock is not None
    phase1 = cluster.clock.now() - timedelta(minutes=4)
    stamp = phase1.strftime("%Y-%m-%dT%H:%M:%SZ")
    # As the schema-3 runner wrote it: the drain state's own JSON inside one flat object.
    _set_row(
        db,
        op.id,
        step="drain",
        step_data={
            "drain": {
                "started_at": stamp,
                "already_cordoned": ["web-0"],
                "failures": {},
                "last_eviction_at": None,
                "evicted_total": 0,
                "deleted_total": 0,
                "failed_nodes": {},
            },
            "phase1_started_at": phase1.isoformat(),
            "evicted": 0,
            "last_message": "Drain not completed yet",
            "step_failures": 0,
        },
        result={},
        schema=3,
    )

    second = make_ops(cluster, db)
    assert _schema(db) == str(SCHEMA_VERSION)
    migrated = second.get(op.id)
    assert migrated is not None and migrated.summary is None
    drained = migrated.progress.drain
    assert drained.state is not None and drained.state.already_cordoned == frozenset({"web-0"})
    assert drained.phase1_started_at == phase1
    assert drained.last_message == "Drain not completed yet"

    reopened = cluster.clock.now()
    assert second.resume() == [op.id]
    finish(second, op.id)
    second.runner.stop()
    done = second.get(op.id)
    assert done is not None and done.state is OpState.SUCCEEDED, done.error
    # Phase 2 came at the window counted from the migrated phase-1 start, not a new one.
    assert cluster.clock.now() - reopened < timedelta(minutes=2)
    assert set(done.progress.drain.force_deleted) == {"shop/web-0", "shop/web-1", "shop/web-2"}
    assert done.summary is not None and done.summary.pods_force_deleted == 3
    steps = [r.step for r in second.store.journal_rows(op.id)]
    assert "record" not in steps and "cordon" not in steps, steps


def test_a_wake_finished_under_schema_3_still_reports_its_workloads(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = Store(db)
    cluster_ = FakeCluster()
    now = cluster_.clock.now()  # type: ignore[union-attr]
    wake = Operation(
        id="op-wake",
        kind=OpKind.WAKE,
        target=Target(cluster="dev", workloads=True),
        state=OpState.SUCCEEDED,
        requested_by="schedule:nights",
        created_at=now,
        updated_at=now,
        plan=OperationPlan(kind=OpKind.WAKE, cluster="dev"),
    )
    store.save_operation(wake)
    store.close()
    _set_row(
        db,
        wake.id,
        step="finish",
        step_data={
            "resized_at": now.isoformat(),
            "ready": 3,
            "wanted": 3,
            "provider_progress": {},
            "workloads_report": {"action": "wake", "headline": "6/6 workloads restored", "records": []},
            "workloads": [5, 6],
        },
        result={
            "duration_seconds": 300,
            "pods_evicted": 0,
            "pods_force_deleted": 0,
            "nodes_removed": 0,
            "nodes_emptied": 0,
            "pools": {"web": [0, 3]},
            "workloads": [5, 6],
            "nodes_ready": [3, 3],
            "nodes_provisioned": None,
        },
        schema=3,
    )
    store = Store(db)
    migrated = store.get_operation(wake.id)
    store.close()
    assert migrated is not None
    assert migrated.summary == OperationSummary(
        duration_seconds=300,
        pools={"web": PoolSizes(0, 3)},
        workloads=WorkloadCount(5, 6),
        nodes_ready=(3, 3),
    )
    assert migrated.progress.workloads.headline == "6/6 workloads restored"
    assert wake_report(migrated) == "dev is only partly back: 3/3 nodes Ready, 5/6 workloads available"


def test_a_database_of_a_newer_schema_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    db = tmp_path / "newer.db"
    Store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(
        StoreError, match=rf"newer scalebot \(schema {SCHEMA_VERSION + 1}; .*nothing was changed"
    ):
        Store(db)
    assert _schema(db) == str(SCHEMA_VERSION + 1)

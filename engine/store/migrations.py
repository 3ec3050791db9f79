"""The schema and its migrations: every table, created or brought up to `SCHEMA_VERSION` when the
store opens; a newer file is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping

from engine.domain.legacy_records import progress_from_legacy, summary_from_legacy
from engine.store.audit import (
    APPEND_ONLY_TABLES,
    GENESIS_HASH,
    _append_only_triggers,
    _audit_hash,
)
from engine.store.base import _DAMAGED, StoreBase, StoreError, log
from engine.store.operations import _encode
from engine.store.schedules import _row_to_schedule, schedule_fingerprint

SCHEMA_VERSION = 4
"""3: the audit rows are hash-chained. 4: an operation's progress and summary are typed records
(msgspec JSON of `OperationProgress` / `OperationSummary`), no longer free-form objects.
A database of a newer schema is refused: this version cannot know what the newer one wrote."""

TYPED_RECORDS_SCHEMA = 4
AUDIT_CHAIN_SCHEMA = 3


class MigrationsStore(StoreBase):
    """Create and migrate the tables (`_migrate`, inside the opening transaction)."""

    def schema_version(self) -> int:
        """The schema the database was written with (0: before the version was recorded)."""
        if "meta" not in self.db.table_names():
            return 0
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            return int(row[0]) if row else 0
        except ValueError as exc:
            raise StoreError(
                f"the database {self.path} has an unreadable schema version {row[0]!r}: {_DAMAGED}"
            ) from exc

    def _migrate(self) -> None:
        db = self.db
        found = self.schema_version()
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"the database {self.path} was written by a newer scalebot (schema {found}; this "
                f"version reads schema {SCHEMA_VERSION} and older): run the newer scalebot with it, "
                "or start this one with another file; nothing was changed"
            )
        if "meta" not in db.table_names():
            db.table("meta").create({"key": str, "value": str}, pk="key")
        db.table("operations").create(
            {
                "id": str,
                "kind": str,
                "cluster": str,
                "target": str,
                "state": str,
                "requested_by": str,
                "channel": str,
                "created_at": str,
                "updated_at": str,
                "plan": str,
                "plan_hash": str,
                "step": str,
                "step_data": str,
                "approval_id": str,
                "approvals_required": int,
                "expires_at": str,
                "message_ts": str,
                "thread_ts": str,
                "result": str,
                "error": str,
            },
            pk="id",
            if_not_exists=True,
        )
        self._add_columns("operations", {"initiated_by": str})
        db.table("operations").create_index(["approval_id"], if_not_exists=True)
        db.table("operations").create_index(["state"], if_not_exists=True)
        db.table("journal").create(
            {"id": int, "at": str, "op_id": str, "step": str, "event": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("journal").create_index(["op_id"], if_not_exists=True)
        if "runner" not in db.table("journal").columns_dict:
            db.table("journal").add_column("runner", str)
        # One runner per operation: the claim's token fences the writes of a runner that lost it.
        db.table("runner_claims").create(
            {
                "op_id": str,
                "owner": str,
                "host": str,
                "pid": int,
                "nonce": str,
                "token": int,
                "heartbeat_at": str,
            },
            pk="op_id",
            if_not_exists=True,
        )
        db.table("audit").create(
            {"id": int, "at": str, "actor": str, "action": str, "op_id": str, "cluster": str, "detail": str},
            pk="id",
            if_not_exists=True,
        )
        db.table("audit").create_index(["op_id"], if_not_exists=True)
        self._migrate_audit_chain(found)
        db.table("votes").create(
            {"approval_id": str, "user": str, "vote": str, "at": str},
            pk=("approval_id", "user"),
            if_not_exists=True,
        )
        db.table("locks").create({"key": str, "op_id": str, "at": str}, pk="key", if_not_exists=True)
        db.table("restore").create(
            {
                "cluster": str,
                "pool": str,
                "desired": int,
                "min_size": int,
                "max_size": int,
                "recorded_at": str,
                "op_id": str,
                "extra": str,
            },
            pk=("cluster", "pool"),
            if_not_exists=True,
        )
        db.table("workload_records").create(
            {"cluster": str, "key": str, "record": str, "op_id": str, "at": str},
            pk=("cluster", "key"),
            if_not_exists=True,
        )
        # Workloads whose pods were on the nodes a sleep removed: what its wake follows back.
        db.table("displaced").create(
            {"cluster": str, "pool": str, "key": str, "op_id": str, "at": str},
            pk=("cluster", "pool", "key"),
            if_not_exists=True,
        )
        # Slack delivery: what the sender still owes (JSON items) and where each message lives.
        db.table("outbox").create(
            {"id": str, "seq": int, "item": str, "sent": int}, pk="id", if_not_exists=True
        )
        db.table("messages").create({"key": str, "channel": str, "ts": str}, pk="key", if_not_exists=True)
        # The built-in simulated cluster (`--simulated`): its objects as JSON, one row per part, so
        # that separate commands on the same file see one cluster, as they would a real one.
        db.table("simulation").create(
            {"cluster": str, "part": str, "state": str, "saved_at": str},
            pk=("cluster", "part"),
            if_not_exists=True,
        )
        # The last week whose savings post each cluster claimed (a restart never posts it twice).
        db.table("savings_posts").create(
            {"cluster": str, "week": str, "claimed_at": str}, pk="cluster", if_not_exists=True
        )
        self._migrate_schedules()
        self._restore_append_only_triggers(found)
        if found < TYPED_RECORDS_SCHEMA:
            self._migrate_operation_records()
        db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    def _restore_append_only_triggers(self, found: int) -> None:
        """Create the append-only triggers; one dropped or replaced outside scalebot is put back
        and reported (its rows may have been edited meanwhile: `verify-audit` says which)."""
        existing = {
            str(name): str(sql)
            for name, sql in self._conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        }
        for table in APPEND_ONLY_TABLES:
            for name, sql in _append_only_triggers(table).items():
                if existing.get(name) == sql:
                    continue
                if name in existing:
                    self._conn.execute(f"DROP TRIGGER {name}")
                if name in existing or (table == "audit" and found >= AUDIT_CHAIN_SCHEMA):
                    log.warning(
                        "the append-only trigger %s of %s was %s outside scalebot; restored. "
                        "`scalebot operations verify-audit` names any row edited meanwhile",
                        name,
                        self.path,
                        "replaced" if name in existing else "dropped",
                    )
                self._conn.execute(sql)

    def _migrate_operation_records(self) -> None:
        """Schema 4: each operation's free-form progress and result objects become typed records."""
        for op_id, step_data, result in self._conn.execute(
            "SELECT id, step_data, result FROM operations"
        ).fetchall():
            progress = progress_from_legacy(json.loads(step_data or "{}"))
            summary = summary_from_legacy(json.loads(result or "{}"))
            self._conn.execute(
                "UPDATE operations SET step_data = ?, result = ? WHERE id = ?",
                (_encode(progress), _encode(summary), op_id),
            )

    def _add_columns(self, table: str, columns: Mapping[str, type]) -> None:
        existing = self.db.table(table).columns_dict
        for name, kind in columns.items():
            if name not in existing:
                self.db.table(table).add_column(name, kind)

    def _migrate_audit_chain(self, found: int) -> None:
        """Schema 3: hash-chain the audit rows written before the chain existed, once.

        Keyed on the recorded schema version, never on a missing column: a chained database whose
        hash columns were dropped must not be re-chained (that would bless whatever was edited)."""
        columns = self.db.table("audit").columns_dict
        if found >= AUDIT_CHAIN_SCHEMA:
            if not {"prev_hash", "hash"} <= set(columns):
                raise StoreError(
                    f"the audit table of {self.path} has lost its hash chain (schema {found} has "
                    "`prev_hash` and `hash` columns): it was altered outside scalebot. Nothing was "
                    "changed; keep the file for investigation and start scalebot with a new one"
                )
            return
        if "hash" in columns:  # a new database: created with the chain, nothing to backfill
            return
        self._add_columns("audit", {"prev_hash": str, "hash": str})
        # The append-only trigger forbids the one-time backfill; it is re-created right after.
        self._conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
        prev = GENESIS_HASH
        for row in self._conn.execute(
            "SELECT id, at, actor, action, op_id, cluster, detail FROM audit ORDER BY id"
        ).fetchall():
            digest = _audit_hash(prev, row)
            self._conn.execute(
                "UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", (prev, digest, row[0])
            )
            prev = digest

    def _migrate_schedules(self) -> None:
        db = self.db
        db.table("schedules").create(
            {
                "name": str,
                "cluster": str,
                "target": str,
                "sleep": str,
                "wake": str,
                "tz": str,
                "lead_times": str,
                "channel": str,
                "approval_mode": str,
                "approved_by": str,
                "enabled": int,
                "exceptions": str,
                "created_by": str,
                "created_at": str,
                "active_since": str,
                "last_done_at": str,
            },
            pk="name",
            if_not_exists=True,
        )
        self._add_columns("schedules", {"days_off": str})
        db.table("occurrences").create(
            {
                "key": str,
                "schedule": str,
                "action": str,
                "local_date": str,
                "due_at": str,
                "state": str,
                "kind": str,
                "op_id": str,
                "announce_channel": str,
                "announce_ts": str,
                "announced_for": str,
                "announced_lead": int,
                "summary": str,
                "note": str,
                "done_at": str,
            },
            pk="key",
            if_not_exists=True,
        )
        db.table("occurrences").create_index(["schedule", "state"], if_not_exists=True)
        db.table("occurrences").create_index(["op_id"], if_not_exists=True)
        db.table("overrides").create(
            {
                "id": int,
                "key": str,
                "schedule": str,
                "kind": str,
                "until": str,
                "by": str,
                "at": str,
                "note": str,
            },
            pk="id",
            if_not_exists=True,
        )
        db.table("overrides").create_index(["schedule"], if_not_exists=True)
        if "schedule_approvals" not in db.table_names():
            db.table("schedule_approvals").create(
                {"schedule": str, "user": str, "at": str, "fingerprint": str},
                pk=("schedule", "user", "fingerprint"),
            )
            # Schema 2 recorded one pre-approver per schedule; it counts as one of the quorum now,
            # and not at all where it is the creator (unless the policy allows self-approval).
            for row in db.table("schedules").rows_where(
                "approval_mode = 'pre_approved' AND approved_by != ''"
            ):
                stored = _row_to_schedule(row)
                db.table("schedule_approvals").insert(
                    {
                        "schedule": stored.name,
                        "user": stored.approved_by,
                        "at": stored.created_at.isoformat(),
                        "fingerprint": schedule_fingerprint(stored),
                    }
                )
        db.table("force_decisions").create(
            {
                "schedule": str,
                "key": str,
                "kind": str,
                "user": str,
                "pool": str,
                "digest": str,
                "binding": str,
                "scope": str,
                "at": str,
            },
            pk=("schedule", "key", "kind", "user", "pool"),
            if_not_exists=True,
        )

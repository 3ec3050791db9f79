"""The schema and its migrations: every table, created or brought up to `SCHEMA_VERSION` when the
store opens; a newer file is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.domain.legacy_records import progress_from_legacy, summary_from_legacy
from engine.store.audit import (
    APPEND_ONLY_TABLES,
    AUDIT_CHAINED_TRIGGER,
    GENESIS_HASH,
    append_only_triggers,
    audit_hash,
    audit_triggers,
)
from engine.store.base import DAMAGED_FILE_ADVICE, StoreBase, StoreError, log
from engine.store.operations import encode_record
from engine.store.schedules import row_to_schedule, schedule_fingerprint

SCHEMA_VERSION = 5
"""3: the audit rows are hash-chained. 4: an operation's progress and summary are typed records
(msgspec JSON of `OperationProgress` / `OperationSummary`), no longer free-form objects.
5: a trigger refuses an audit row that does not chain to the head; the chain may be keyed (HMAC,
from its `audit_key_applied` row on: nothing to migrate).
A database of a newer schema is refused: this version cannot know what the newer one wrote."""

TYPED_RECORDS_SCHEMA = 4
AUDIT_CHAIN_SCHEMA = 3
AUDIT_CHAINED_SCHEMA = 5


@dataclass(frozen=True)
class _Table:
    """A table as the current schema has it: created if missing; `added` are the columns a later
    version added (an older file gets them by ALTER TABLE), `indexes` the column lists indexed."""

    name: str
    columns: Mapping[str, type]
    pk: str | tuple[str, ...]
    added: Mapping[str, type] = field(default_factory=dict)
    indexes: tuple[tuple[str, ...], ...] = ()


_OPERATION_TABLES = (
    _Table(
        "operations",
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
        added={"initiated_by": str},
        indexes=(("approval_id",), ("state",)),
    ),
    _Table(
        "journal",
        {"id": int, "at": str, "op_id": str, "step": str, "event": str, "detail": str},
        pk="id",
        added={"runner": str},
        indexes=(("op_id",),),
    ),
    # One runner per operation: the claim's token fences the writes of a runner that lost it.
    _Table(
        "runner_claims",
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
    ),
    _Table(
        "audit",
        {"id": int, "at": str, "actor": str, "action": str, "op_id": str, "cluster": str, "detail": str},
        pk="id",
        indexes=(("op_id",), ("action",)),  # action: the keyed chain's marker row, found at each write
    ),
)
"""Created before the audit chain's migration, which reads the audit table."""

_STATE_TABLES = (
    _Table("votes", {"approval_id": str, "user": str, "vote": str, "at": str}, pk=("approval_id", "user")),
    _Table("locks", {"key": str, "op_id": str, "at": str}, pk="key"),
    _Table(
        "restore",
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
    ),
    _Table(
        "workload_records",
        {"cluster": str, "key": str, "record": str, "op_id": str, "at": str},
        pk=("cluster", "key"),
    ),
    # Workloads whose pods were on the nodes a sleep removed: what its wake follows back.
    _Table(
        "displaced",
        {"cluster": str, "pool": str, "key": str, "op_id": str, "at": str},
        pk=("cluster", "pool", "key"),
    ),
    # Slack delivery: what the sender still owes (JSON items) and where each message lives.
    _Table("outbox", {"id": str, "seq": int, "item": str, "sent": int}, pk="id"),
    _Table("messages", {"key": str, "channel": str, "ts": str}, pk="key"),
    # Posts sent without an answer yet (a message's key or a final reply's item ID), so a
    # restarted process looks for one (by its metadata `post_key`) before posting it again.
    _Table("post_attempts", {"key": str, "post_key": str, "at": float}, pk="key"),
    # The built-in simulated cluster (`--simulated`): its objects as JSON, one row per part, so
    # that separate commands on the same file see one cluster, as they would a real one.
    _Table(
        "simulation", {"cluster": str, "part": str, "state": str, "saved_at": str}, pk=("cluster", "part")
    ),
    # The last week whose savings post each cluster claimed (a restart never posts it twice).
    _Table("savings_posts", {"cluster": str, "week": str, "claimed_at": str}, pk="cluster"),
)

_SCHEDULE_TABLES = (
    _Table(
        "schedules",
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
        added={"days_off": str},
    ),
    _Table(
        "occurrences",
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
        indexes=(("schedule", "state"), ("op_id",)),
    ),
    _Table(
        "overrides",
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
        indexes=(("schedule",),),
    ),
)
"""Created before `schedule_approvals`, whose first creation reads the schedules."""

_FORCE_DECISIONS = _Table(
    "force_decisions",
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
)


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
                f"the database {self.path} has an unreadable schema version {row[0]!r}: {DAMAGED_FILE_ADVICE}"
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
        for table in _OPERATION_TABLES:
            self._create(table)
        self._migrate_audit_chain(found)
        for table in _STATE_TABLES:
            self._create(table)
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
            triggers = audit_triggers() if table == "audit" else append_only_triggers(table)
            for name, sql in triggers.items():
                if existing.get(name) == sql:
                    continue
                if name in existing:
                    self._conn.execute(f"DROP TRIGGER {name}")
                since = AUDIT_CHAINED_SCHEMA if name == AUDIT_CHAINED_TRIGGER else AUDIT_CHAIN_SCHEMA
                if name in existing or (table == "audit" and found >= since):
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
                (encode_record(progress), encode_record(summary), op_id),
            )

    def _create(self, table: _Table) -> None:
        """Create the table unless it exists, add the columns later versions added, then its indexes."""
        self.db.table(table.name).create(dict(table.columns), pk=table.pk, if_not_exists=True)
        self._add_columns(table.name, dict(table.added))
        for columns in table.indexes:
            self.db.table(table.name).create_index(list(columns), if_not_exists=True)

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
            digest = audit_hash(prev, row)
            self._conn.execute(
                "UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", (prev, digest, row[0])
            )
            prev = digest

    def _migrate_schedules(self) -> None:
        db = self.db
        for table in _SCHEDULE_TABLES:
            self._create(table)
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
                stored = row_to_schedule(row)
                db.table("schedule_approvals").insert(
                    {
                        "schedule": stored.name,
                        "user": stored.approved_by,
                        "at": stored.created_at.isoformat(),
                        "fingerprint": schedule_fingerprint(stored),
                    }
                )
        self._create(_FORCE_DECISIONS)

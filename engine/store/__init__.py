"""The only SQL: operations, their journal, approvals, audit, claims, schedules and the outbox in one
SQLite file through sqlite-utils, with its migrations.

Owns: persistence and the transactions that keep a restart safe. Must not: decide anything;
callers pass values in and get values back.

One module per concern: `operations` (operations, their journal and votes), `claims` (runner
claims and pool locks), `audit` (the hash-chained audit and the append-only triggers),
`schedules` (schedules with their days off, occurrences, pre-approvals, force decisions,
overrides), `restore` (what a sleep keeps for its wake), `outbox` (Slack delivery), `savings`
(the weekly post's claims), `simulation` (the simulated cluster), `migrations` (the schema),
`readonly` (reading a file without changing it); `base` holds the connection and its transaction,
`database` opens the file and composes `Store`.

`Store` stays one class, built from one mixin per concern over `base.StoreBase`: every caller
holds one `Store` and calls `store.save_progress(...)`, `store.audit(...)`, and many of their
writes join one transaction across concerns (a final state releases the locks; a schedule's
deletion drops its approvals), which a mixin does with a plain `self.transaction()` on the one
connection. Composition would change every caller (`store.operations.save_progress`) or need a
forwarding method per method; mixins keep each concern in its own file, callers and tests
unchanged, and `mypy --strict` checks each mixin against the attributes `StoreBase` declares.
Callers import `Store` from `engine.store.database` and every other name from the module that owns
it (errors from `base`, claims from `claims`, stored rows from their concern). A caller that uses a
few of `Store`'s methods names the narrow port it uses instead (`ports`: `SleepRecords`,
`AuditTrail`, `OperationJournal`, `RunnerClaims`, ...), which `Store` implements structurally: the
operations' parts, runner and steps name only ports (an import contract keeps it so).
"""

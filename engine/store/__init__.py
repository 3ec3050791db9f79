"""The only SQL: operations, their journal, approvals, audit, claims, schedules and the outbox in one
SQLite file through sqlite-utils, with its migrations.

Owns: persistence and the transactions that keep a restart safe. Must not: decide anything;
callers pass values in and get values back.
"""

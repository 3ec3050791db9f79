"""The store as each of its users sees it: narrow ports, each a handful of `Store`'s methods.

`engine.store.database.Store` has every method of every concern; a caller that names `Store`
could call any of them. So a caller names only the port it uses, and `Store` implements each one
structurally (no registration: `mypy --strict` checks it wherever a `Store` is given for a port,
and `tests/unit/engine/store/test_ports.py` checks each port against `Store`'s signatures).

    SleepRecords      what a sleep keeps for its wake (sizes, workload values, displaced workloads):
                      the steps record, read and clear them; the plan reads them
    AuditTrail        the append-only, hash-chained audit: write a row, read an operation's rows
    OperationJournal  one operation's record and its journal: read it, save a step's progress
    OperationRecords  the operations' whole lifecycle: OperationJournal with insert, the state's
                      compare-and-set, approval votes, the card's message and the journal rows
    RunnerClaims      the claim a runner holds on an operation and the fencing of its writes
    PoolLocks         the pool and node locks of operations and of the unattended Evictor
    Transactions      one write transaction across concerns (`BEGIN IMMEDIATE`)
    OutboxRecords     the Slack messages owed, so finals survive a restart (the sender's outbox)

The ports live beside the store (not with one of their users) because they name the store's own
row types (`StoredRestore`, `AuditRow`, `RunnerClaim`, ...) and packages on several layers above
it use them (the operations, the bot's sender); the store never imports this module, so the
dependency still points one way: from the users down to the store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from engine.domain.operation import Operation, OpState
from engine.store.audit import AuditRow
from engine.store.claims import RunnerClaim, RunnerId
from engine.store.operations import JournalRow
from engine.store.restore import StoredRestore

__all__ = [
    "AuditTrail",
    "OperationJournal",
    "OperationRecords",
    "OutboxRecords",
    "PoolLocks",
    "RunnerClaims",
    "SleepRecords",
    "Transactions",
]


class SleepRecords(Protocol):
    """What a sleep keeps for its wake (`engine.store.restore`); the first record of a thing wins."""

    def record_restore(self, record: StoredRestore) -> bool: ...

    def restore_records(self, cluster: str) -> list[StoredRestore]: ...

    def clear_restore(self, cluster: str, pool: str) -> None: ...

    def record_workload(
        self, cluster: str, key: str, record: Mapping[str, Any], *, op_id: str, at: datetime
    ) -> bool: ...

    def workload_records(self, cluster: str) -> list[dict[str, Any]]: ...

    def clear_workload_records(self, cluster: str) -> None: ...

    def record_displaced(
        self, cluster: str, pool: str, keys: Collection[str], *, op_id: str, at: datetime
    ) -> None: ...

    def displaced(self, cluster: str, pools: Collection[str]) -> frozenset[str]: ...


class AuditTrail(Protocol):
    """The audit (`engine.store.audit`): rows are appended, never changed."""

    def audit(
        self, *, at: datetime, actor: str, action: str, op_id: str = "", cluster: str = "", detail: str = ""
    ) -> None: ...

    def audit_rows(self, *, op_id: str | None = None) -> list[AuditRow]: ...


class OperationJournal(Protocol):
    """One operation as its runner reads and saves it (`engine.store.operations`)."""

    def get_operation(self, op_id: str) -> Operation | None: ...

    def list_operations(
        self, *, cluster: str | None = None, states: Sequence[OpState] | None = None, limit: int = 50
    ) -> list[Operation]: ...

    def save_progress(self, op: Operation) -> bool: ...

    def journal(
        self, op_id: str, *, at: datetime, step: str, event: str, detail: str = "", runner: str = ""
    ) -> None: ...


class OperationRecords(OperationJournal, Protocol):
    """The operations' lifecycle as the service writes it: requests, state changes, votes."""

    def insert_operation(self, op: Operation) -> None: ...

    def transition(self, op: Operation, *, expected: OpState) -> bool: ...

    def operation_by_approval(self, approval_id: str) -> Operation | None: ...

    def set_message(self, op_id: str, *, channel: str, ts: str) -> None: ...

    def journal_rows(self, op_id: str) -> list[JournalRow]: ...

    def add_vote(self, approval_id: str, user: str, vote: str, *, at: datetime) -> bool: ...

    def votes(self, approval_id: str) -> list[tuple[str, str, datetime]]: ...


class RunnerClaims(Protocol):
    """A runner's claims on operations (`engine.store.claims`): one runner per operation, its
    writes fenced by the claim's token."""

    def claim_operation(
        self,
        op_id: str,
        me: RunnerId,
        *,
        now: datetime,
        ttl_seconds: float,
        gone: Callable[[RunnerClaim], bool],
    ) -> int: ...

    def runner_claim(self, op_id: str) -> RunnerClaim | None: ...

    def renew_claims(self, tokens: Mapping[str, int], *, now: datetime) -> set[str]: ...

    def release_claim(self, op_id: str, token: int) -> None: ...

    def fenced(self, op_id: str, token: int) -> AbstractContextManager[None]: ...


class PoolLocks(Protocol):
    """The pool and node locks (`engine.store.claims`): a key is held by one owner at a time."""

    def acquire_locks(self, keys: Sequence[str], op_id: str, *, at: datetime) -> None: ...

    def lock_holder(self, keys: Sequence[str]) -> tuple[str, str] | None: ...

    def release_locks(self, op_id: str) -> None: ...


class Transactions(Protocol):
    """One write transaction (`engine.store.base`) around writes of several concerns."""

    def transaction(self) -> AbstractContextManager[None]: ...


class OutboxRecords(Protocol):
    """The Slack messages owed and the messages already posted (`engine.store.outbox`)."""

    def outbox_add(self, item_id: str, item: Mapping[str, Any]) -> None: ...

    def outbox_pending(self) -> list[dict[str, Any]]: ...

    def outbox_mark_sent(self, item_id: str) -> None: ...

    def remember_message(self, key: str, channel: str, ts: str) -> None: ...

    def message(self, key: str) -> tuple[str, str] | None: ...

    def post_attempt_add(self, key: str, post_key: str, at: float) -> None: ...

    def post_attempt(self, key: str) -> tuple[str, float] | None: ...

    def post_attempt_forget(self, key: str) -> None: ...

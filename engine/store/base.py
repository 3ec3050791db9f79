"""What every part of the store shares: the connection, its lock, the write transaction and the
store's error."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlite_utils

from engine.domain.errors import Category, ScalebotError

log = logging.getLogger("engine.store.database")
"""The store's one logger, named as before its split, so log filters and audit-head readers keep working."""

AUDIT_HEAD_LOGGER = "engine.store.database.audit"
audit_log = logging.getLogger(AUDIT_HEAD_LOGGER)
"""The `audit head` lines: at INFO whatever the process's log level (the CLI's default is ERROR),
because a head kept outside the file is what reveals a consistently rewritten chain;
`bot.config.logs` lets this logger through at its default level."""
audit_log.setLevel(logging.INFO)


class StoreError(ScalebotError, RuntimeError):
    """The database cannot be opened or written; the message says what to do."""

    category = Category.CONFIGURATION


DAMAGED_FILE_ADVICE = (
    "move it aside, keeping it for recovery (`sqlite3 FILE .recover`), and start again with a new "
    "file; sizes to restore are also on the pool objects, so wake still works"
)


def space_hint(path: str) -> str:
    """ "; only N KiB free on its disk" when the disk holding `path` is (nearly) full."""
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return ""
    return f"; only {free // 1024} KiB free on its disk" if free < 1024 * 1024 else ""


class StoreBase:
    """The state each part of `Store` works on (set by `Store.__init__`) and the one write
    transaction they all take."""

    path: str
    db: sqlite_utils.Database
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _pending_heads: list[tuple[int, str]]
    _head_listeners: list[Callable[[int, str], None]]

    def on_audit_head(self, listener: Callable[[int, str], None]) -> None:
        """Call `listener(row, head)` after each committed audit row, beside its log line: another
        place outside the file to keep the head (`bot.runtime.run` records it as a Kubernetes
        Event). Called under the store's lock: it must not block (queue, never send)."""
        self._head_listeners.append(listener)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            if self._conn.in_transaction:  # nested: join the outer transaction
                yield
                return
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(
                    f"the database {self.path} is locked by another process or unwritable ({exc})"
                    f"{space_hint(self.path)}: is another scalebot using this file?"
                ) from exc
            self._pending_heads.clear()
            try:
                yield
            except sqlite3.OperationalError as exc:  # e.g. disk full: SQLite has rolled back already
                self._rollback()
                raise StoreError(
                    f"cannot write the database {self.path}: {exc}{space_hint(self.path)}"
                ) from exc
            except BaseException:
                self._rollback()
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._rollback()
                raise StoreError(
                    f"cannot write the database {self.path}: {exc}{space_hint(self.path)}"
                ) from exc
            self._log_heads()

    def _log_heads(self) -> None:
        """Publish the committed audit rows' hashes outside the file: `verify-audit --expect-head`
        checks a kept line against it. Only committed rows: a rolled-back one never existed."""
        for row_id, digest in self._pending_heads:
            audit_log.info(
                "audit head %s (row %d)", digest, row_id, extra={"audit_row": row_id, "audit_head": digest}
            )
            for listener in self._head_listeners:
                try:
                    listener(row_id, digest)
                except Exception:  # the row is committed: a publisher's failure must not undo the caller
                    log.exception("publishing audit head %s (row %d) failed", digest, row_id)
        self._pending_heads.clear()

    def _rollback(self) -> None:
        # After SQLITE_FULL and some I/O errors SQLite has already rolled back; a second ROLLBACK
        # would raise "no transaction is active" and hide the real error.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

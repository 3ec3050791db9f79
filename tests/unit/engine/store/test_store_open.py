"""engine.store.database: opening a database another process is writing.

Covers: a second scalebot opening the file while the first is inside a write transaction (as when two
replicas start together and one creates the schema) waits for it instead of failing at once, which
SQLite's own busy timeout does not do for the switch to WAL; a lock held past the open's bound is
refused with the database's path; many openers of one new file at once all get it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.store import database as store_module
from engine.store.base import StoreError
from engine.store.database import Store


@contextmanager
def writing(path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's connection, inside a write transaction on a not-yet-WAL database."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE other (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO other VALUES (1)")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def test_opening_waits_for_a_writer_and_then_opens(tmp_path: Path) -> None:
    path = tmp_path / "scalebot.db"
    with writing(path) as other:
        release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        release.start()
        try:
            opened = Store(path)
        finally:
            release.join()
    assert opened.schema_version() > 0, "the schema was created once the writer was done"
    opened.close()


def test_a_lock_held_past_the_bound_is_refused_with_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "OPEN_BUSY_SECONDS", 0.3)
    path = tmp_path / "scalebot.db"
    with (
        writing(path),
        pytest.raises(StoreError, match=f"cannot open the database {path}: database is locked"),
    ):
        Store(path)


def test_many_openers_of_a_new_file_at_once_all_get_it(tmp_path: Path) -> None:
    path = tmp_path / "scalebot.db"
    start = threading.Barrier(8)
    failures: list[BaseException] = []
    opened: list[Store] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(Store(path))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(opened) == 8
    for each in opened:
        each.close()

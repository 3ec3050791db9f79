"""`scalebot __complete KIND [--prefix WORD] [flags]`: the names a shell completes from scalebot's state,
one a line, as kubectl's hidden `__complete` does for its completion scripts (`bot.cli.completion`).

KIND is `nodes` or `pools` (the cluster of `--kubeconfig`/`--context`, or the simulated one kept in
`--db`), `operations`, `schedules` or `clusters` (the database, read-only: never created or migrated).
A completion must never fail or hang the shell: whatever goes wrong (no database, no kubeconfig, an
API server that does not answer) prints nothing and exits 0, and the cluster is given
`TIMEOUT` seconds at most.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable

from bot.cli.common import EXIT_OK

KINDS = ("nodes", "pools", "operations", "schedules", "clusters")
TIMEOUT = 3.0
"""Seconds a completion may wait for the API server (or the database) before offering nothing."""
MAX_WORDS = 500


def cmd_complete(args: argparse.Namespace) -> int:
    found: list[str] = []
    try:
        ask = _PREPARE[args.kind](args)  # imports and opening files: not what the timeout is for
    except Exception:  # a completion offers nothing rather than fail the shell
        return EXIT_OK

    def read() -> None:
        try:
            found.extend(ask())
        except Exception:  # as above
            found.clear()

    # A daemon thread: a cluster that never answers is abandoned at exit, not waited for.
    worker = threading.Thread(target=read, name="complete", daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():
        return EXIT_OK
    prefix = args.prefix or ""
    for word in sorted({w for w in found if w.startswith(prefix)})[:MAX_WORDS]:
        print(word)
    return EXIT_OK


Ask = Callable[[], list[str]]


def _cluster_words(args: argparse.Namespace, what: str) -> Ask:
    from bot.runtime import wiring

    def ask() -> list[str]:
        if args.simulated:
            from engine.store.database import Store

            handle, _ = wiring.simulated_cluster(store=Store.read_only(args.db))
        else:  # reading the kubeconfig may run its exec plugin: inside the timeout
            handle = wiring.connect_cluster(
                args.context or "default", kubeconfig=args.kubeconfig, context=args.context
            )
        if what == "nodes":
            return [node.name for node in handle.api.list_nodes()]
        return [pool.name for pool in handle.pools.list_pools()]

    return ask


def _database_words(args: argparse.Namespace, what: str) -> Ask:
    """Read at once (a local read-only file; SQLite's connection stays on the thread that opened it)."""
    from bot.cli.records import open_records

    store = open_records(args.db)
    if what == "operations":
        words = [op.id for op in store.list_operations(limit=200)]
    else:
        schedules = store.list_schedules()
        words = (
            [s.name for s in schedules]
            if what == "schedules"
            else [op.target.cluster for op in store.list_operations(limit=200)]
            + [s.cluster for s in schedules]
        )
    return lambda: words


_PREPARE: dict[str, Callable[[argparse.Namespace], Ask]] = {
    "nodes": lambda args: _cluster_words(args, "nodes"),
    "pools": lambda args: _cluster_words(args, "pools"),
    "operations": lambda args: _database_words(args, "operations"),
    "schedules": lambda args: _database_words(args, "schedules"),
    "clusters": lambda args: _database_words(args, "clusters"),
}

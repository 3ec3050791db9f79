"""`scalebot demo --reset`: the simulated cluster and its database file back to where a first
rehearsal starts, so the next `plan zero --simulated`, `zero`, `wake`, `ops list` run as the first did.

The file is replaced by a new one holding only the simulated cluster at the demo's start (its 3
pools, 8 nodes and their pods): no operations, no audit rows, no schedules. Deleting rows of an
audit chain in place would leave a chain that no longer verifies, and a new file is what a first
rehearsal had. So a file that holds records of any other cluster is refused and left as it is:
the reset never throws away a real cluster's history.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bot.cli.common import EXIT_OK, CliError
from bot.config import logs
from bot.runtime import demo_cluster, wiring
from engine.store.base import StoreError
from engine.store.database import Store
from engine.store.readonly import recorded_clusters

SIMULATED = "simulated"
"""The name `--simulated` commands record the built-in cluster under (bot.runtime.wiring)."""
SIDE_FILES = ("-wal", "-shm", "-journal")


def simulated_notice(args: argparse.Namespace) -> None:
    """The line every `--simulated` command starts with on stderr (a JSON log line under
    `--log-format json`, so that every stderr line is JSON there)."""
    logs.announce(
        f"SIMULATED cluster (kept in {args.db}): nothing real is changed",
        json_format=args.log_format == "json",
        stream=sys.stderr,
    )


def reset(path: str) -> int:
    """Replace `path` with a database holding the simulated cluster at its start; refuse (exit 2,
    nothing changed) a file with records of any other cluster or one that is not scalebot's."""
    file = Path(path)
    if file.exists():
        try:
            others = sorted(recorded_clusters(path) - {SIMULATED})
        except StoreError as exc:
            raise CliError(f"{exc}: not reset, nothing was changed") from None
        if others:
            raise CliError(
                f"{path} holds records of other clusters ({', '.join(others[:5])}"
                f"{', …' if len(others) > 5 else ''}): not reset, nothing was changed; "
                "rehearse with a --db of its own"
            )
        for name in (path, *(path + side for side in SIDE_FILES)):
            Path(name).unlink(missing_ok=True)
    elif not file.parent.is_dir():
        raise CliError(f"--db {path}: the directory {file.parent} does not exist")
    store = Store(path)
    try:
        wiring.simulated_cluster(SIMULATED, store=store)  # saves the demo's pools at their start
    finally:
        store.close()
    pools, nodes = len(demo_cluster.POOLS), sum(demo_cluster.POOLS.values())
    print(f"{path}: the SIMULATED cluster is back at its start ({pools} pools, {nodes} nodes), no history")
    return EXIT_OK

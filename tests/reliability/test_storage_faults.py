"""Storage faults: a locked database, a full disk, a damaged file — with the real CLI processes.

Covers:
- the SQLite file held by another process (`BEGIN EXCLUSIVE` in a helper process): `scalebot zero`
  waits out SQLite's busy timeout (10 s), then exits 2 with one line naming the file; nothing is
  written to the database and nothing changes in the cluster; once the lock is gone the same
  command works;
- the disk full (a 1 MiB tmpfs holding the database, filled to the last byte; if mounting is
  refused, RLIMIT_FSIZE in the child stands in, and the test says so): one line naming the file
  and the free space, exit 2, nothing half-written; with space again the same command works and
  the file passes `PRAGMA integrity_check`;
- a damaged file at start (random bytes; and a valid header over damaged pages, which SQLite
  opens without complaint): `scalebot zero` and `scalebot run` exit 2 at once with one line naming
  the file and what to do, and leave the file byte for byte as it was (a restart loop loses
  nothing; the operator can recover it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.store import Store
from localcluster import builders
from tests.reliability.support import PYTHON, Proc, Processes, free_port, operations


def _offline_kubeconfig(path: Path) -> Path:
    """A kubeconfig for a server nobody listens on: these commands must fail before any request."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
                "users": [{"name": "u", "user": {"token": "not-used"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def _zero_args(kubeconfig: Path, db: Path, pool_key: str, *pools: str) -> list[str]:
    return [
        "zero",
        *pools,
        "--kubeconfig",
        str(kubeconfig),
        "--db",
        str(db),
        "--pool-label",
        pool_key,
        "--cluster",
        "e2e",
    ]


def _one_error_line(proc: Proc) -> str:
    lines = [line for line in proc.output().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.output()
    assert "Traceback" not in proc.output()
    return lines[0]


def _untouched(admin_api: Any, nodes: list[str], pool: str) -> None:
    """Nothing changed in the cluster: no cordon, no draining taint, no pool record."""
    for name in nodes:
        node = builders.get(admin_api, builders.node_path(name))
        assert not (node.get("spec") or {}).get("unschedulable"), name
        assert not (node.get("spec") or {}).get("taints"), name
    record = builders.get_or_none(admin_api, f"/api/v1/namespaces/scalebot/configmaps/scalebot-pool-{pool}")
    assert record is None, "no size was recorded on the pool"


@pytest.mark.e2e
def test_database_locked_by_another_process(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-a"
    nodes = node_pool(1, name=pool, labels={pool_key: pool})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b"})
    db = tmp_path / "scalebot.db"
    Store(db).close()
    holder = procs.start(
        [
            PYTHON,
            "-c",
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        name="holder",
        stdin=subprocess.PIPE,
    )
    builders.wait_until(lambda: "locked" in holder.output(), 15, "the helper to hold the lock")

    blocked = procs.scalebot(*_zero_args(scalebot_kubeconfig, db, pool_key, pool), name="zero-locked")
    assert blocked.wait(40) == 2
    line = _one_error_line(blocked)
    assert str(db) in line and "locked by another process" in line, line
    _untouched(admin_api, nodes, pool)

    assert holder.popen.stdin is not None
    holder.popen.stdin.close()  # the helper ends, its transaction is rolled back
    assert holder.wait(10) == 0
    assert operations(db) == {}, "nothing was written to the database"
    again = procs.scalebot(*_zero_args(scalebot_kubeconfig, db, pool_key, pool), name="zero-free")
    assert again.wait(60) == 0, again.output()
    assert [state for state, _ in operations(db).values()] == ["succeeded"]


@contextlib.contextmanager
def _small_disk(directory: Path) -> Iterator[bool]:
    """A 1 MiB tmpfs at `directory` (True), or a plain directory when mounting is refused (False)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)], capture_output=True, check=False
    )
    try:
        yield mounted.returncode == 0
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


def _fill(path: Path) -> None:
    """Write until the disk is full, to the last byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


@pytest.mark.e2e
def test_disk_full(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool = f"{unique_name}-a"
    nodes = node_pool(1, name=pool, labels={pool_key: pool})
    node_pool(1, name=f"{unique_name}-b", labels={pool_key: f"{unique_name}-b"})
    with _small_disk(tmp_path / "small") as mounted:
        db = tmp_path / "small" / "scalebot.db"
        Store(db).close()  # an existing database, as after earlier runs
        env: dict[str, str] = {}
        if mounted:
            _fill(tmp_path / "small" / "filler")
            assert os.statvfs(db.parent).f_bavail == 0
        else:  # no tmpfs: the child may not grow any file beyond 16 KiB (its -shm needs 32 KiB)
            env["RELIABILITY_FSIZE"] = str(16 * 1024)
        argv = _zero_args(scalebot_kubeconfig, db, pool_key, pool)
        full = procs.start([PYTHON, "-c", _LIMITED, *argv], name="zero-full", env=env)
        assert full.wait(60) == 2
        line = _one_error_line(full)
        assert str(db) in line, line
        if mounted:
            assert "KiB free on its disk" in line, line
        _untouched(admin_api, nodes, pool)

        (tmp_path / "small" / "filler").unlink(missing_ok=True)
        assert operations(db) == {}, "nothing half-written"
        again = procs.scalebot(*argv, name="zero-space")
        assert again.wait(60) == 0, again.output()
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert [state for state, _ in operations(db).values()] == ["succeeded"]
    print(f"disk full simulated with {'a 1 MiB tmpfs' if mounted else 'RLIMIT_FSIZE (mount refused)'}")


_LIMITED = """
import os, resource, signal, sys
limit = os.environ.get("RELIABILITY_FSIZE")
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write beyond the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
from bot.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _damaged_files(directory: Path) -> list[Path]:
    rng = random.Random(9)
    noise = directory / "noise.db"
    noise.write_bytes(rng.randbytes(64 * 1024))
    pages = directory / "pages.db"
    Store(pages).close()
    data = bytearray(pages.read_bytes())
    for i in range(4096 * 2 + 100, 4096 * 3):  # page 3: a table's b-tree, the header stays valid
        data[i] = rng.randrange(256)
    pages.write_bytes(bytes(data))
    with sqlite3.connect(pages) as conn:  # SQLite itself opens it without complaint
        assert conn.execute("PRAGMA schema_version").fetchone()
    return [noise, pages]


def test_damaged_database_file_at_start(pool_key: str, procs: Processes, tmp_path: Path) -> None:
    kubeconfig = _offline_kubeconfig(tmp_path / "offline.kubeconfig")
    config = tmp_path / "config.yaml"
    server = {"host": "127.0.0.1", "http_port": free_port(), "health_port": free_port()}
    cluster = {"kubeconfig": str(kubeconfig), "context": "", "pool_label": pool_key}
    config.write_text(yaml.safe_dump({"server": server, "clusters": {"dev": cluster}}))
    env = {"SLACK_BOT_TOKEN": "xoxb-1-damaged", "SLACK_SIGNING_SECRET": "damaged", "SLACK_APP_TOKEN": ""}
    started: list[tuple[Path, str, Proc]] = []
    for db in _damaged_files(tmp_path):
        before = _sha(db)
        zero = procs.scalebot(*_zero_args(kubeconfig, db, pool_key), name=f"zero-{db.stem}")
        run = procs.scalebot(
            "run",
            "--config",
            str(config),
            "--no-leader-election",
            name=f"run-{db.stem}",
            env={**env, "SCALEBOT_DB": str(db)},
        )
        started += [(db, before, zero), (db, before, run)]
    for db, before, proc in started:
        assert proc.wait(30) == 2
        line = _one_error_line(proc)
        assert f"the database {db} is damaged" in line and "move it aside" in line, line
        assert _sha(db) == before, "the damaged file is left exactly as it was, for recovery"

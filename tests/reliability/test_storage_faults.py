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
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.store.database import Store
from localcluster import rest, waits
from tests.e2e.support import scalebot_args
from tests.reliability.support import (
    PYTHON,
    Proc,
    Processes,
    free_port,
    journal,
    last_step,
    operations,
    poll,
    release_pdb,
    run_setup,
    slack_server,
    start_run,
    steps_in_order,
)
from tests.slack.harness import get


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
    return ["zero", "--yes", *pools, *scalebot_args(kubeconfig, db, pool_key)]


def _one_error_line(proc: Proc) -> str:
    lines = [line for line in proc.output().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.output()
    assert "Traceback" not in proc.output()
    return lines[0]


def _untouched(admin_api: Any, nodes: list[str], pool: str) -> None:
    """Nothing changed in the cluster: no cordon, no draining taint, no pool record."""
    for name in nodes:
        node = rest.get(admin_api, rest.node_path(name))
        assert not (node.get("spec") or {}).get("unschedulable"), name
        assert not (node.get("spec") or {}).get("taints"), name
    record = rest.get_or_none(admin_api, f"/api/v1/namespaces/scalebot/configmaps/scalebot-pool-{pool}")
    assert record is None, "no size was recorded on the pool"


@pytest.mark.e2e
def test_database_locked_by_another_process(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    spare_pool: tuple[str, list[str]],
    pool_key: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool, nodes = spare_pool
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
    waits.wait_until(lambda: "locked" in holder.output(), 15, "the helper to hold the lock")

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
def _small_disk(directory: Path, size: str = "1m") -> Iterator[bool]:
    """A 1 MiB tmpfs at `directory` (True), or a plain directory when mounting is refused (False)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        check=False,
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
    spare_pool: tuple[str, list[str]],
    pool_key: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    pool, nodes = spare_pool
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
from bot.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e
def test_disk_full_while_an_operation_runs(
    admin_api: Any,
    scalebot_kubeconfig: Path,
    namespace: str,
    held_pool: tuple[str, list[str]],
    pool_key: str,
    procs: Processes,
    tmp_path: Path,
) -> None:
    """The disk fills while `scalebot run` drains: the operation stops at its last saved step, in
    one piece; /healthz says so (503, naming it); after a restart with space it finishes."""
    pool, nodes = held_pool
    # 2 MiB: the WAL never reaches SQLite's auto-checkpoint (1000 pages), so it only grows and the
    # next commit after the disk is full must fail (a reset WAL would be overwritten in place).
    with _small_disk(tmp_path / "small", size="2m") as mounted, slack_server() as slack:
        if not mounted:
            pytest.skip("mounting a tmpfs was refused: a full disk cannot be made here")
        db = tmp_path / "small" / "scalebot.db"
        argv = [*_zero_args(scalebot_kubeconfig, db, pool_key, pool)[:-1], "dev"]
        zero = procs.scalebot(*argv, name="zero")
        poll(lambda: last_step(db) == "drain", 60, "the operation to be draining (its PDB blocks it)")
        zero.kill9()
        [op_id] = operations(db)
        setup = run_setup(
            tmp_path,
            name="run",
            kubeconfig=scalebot_kubeconfig,
            pool_key=pool_key,
            slack_url=slack.url,
            db=db,
        )
        run = start_run(procs, setup, name="run")
        poll(lambda: any(e == "resumed" for _, _, e, _ in journal(db, op_id)), 60, "the operation to resume")
        assert get(f"{setup.health_url}/healthz").status == 200

        _fill(tmp_path / "small" / "filler")
        assert os.statvfs(db.parent).f_bavail == 0

        def unhealthy() -> str:
            answer = get(f"{setup.health_url}/healthz")
            return answer.body if answer.status == 503 else ""

        body = poll(unhealthy, 90, "/healthz to report the stopped operation", interval=0.5)
        assert f"[-]runner failed: operation {op_id} stopped at drain: cannot write the database {db}" in body
        assert "full" in body and "KiB free on its disk" in body, body
        assert run.alive() and "Traceback" not in run.output(), run.output()[-3000:]
        assert operations(db)[op_id] == ("running", "drain"), "its last saved step, still resumable"

        (tmp_path / "small" / "filler").unlink()
        run.popen.send_signal(signal.SIGTERM)
        assert run.wait(60) == 0, run.output()[-3000:]
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        # The same operation resumes after the restart and, once the PDB allows it, finishes.
        again = start_run(procs, setup, name="run-again")
        poll(lambda: [e for _, _, e, _ in journal(db, op_id)].count("resumed") == 2, 60, "a second resume")
        assert get(f"{setup.health_url}/healthz").status == 200
        release_pdb(admin_api, namespace)
        poll(lambda: operations(db)[op_id][0] == "succeeded", 120, "the operation to finish", interval=0.5)
        again.popen.send_signal(signal.SIGTERM)
        assert again.wait(60) == 0, again.output()[-3000:]
        rows = journal(db, op_id)  # before the tmpfs (and the database on it) goes away
    assert steps_in_order(rows) == ["record", "cordon", "drain", "remove", "verify"], rows
    names = {n["metadata"]["name"] for n in rest.list_items(admin_api, rest.node_path())}
    assert not names & set(nodes)


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

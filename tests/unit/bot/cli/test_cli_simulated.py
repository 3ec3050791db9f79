"""`--simulated` across separate `scalebot` processes: the simulated cluster lives in the database.

Each command is its own `python -m bot` process on the same SQLite file, as a person would type
them one after the other: a zero-scale in one, the wake in the next, `ops list` in a third.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main as cli
from bot.cli.console import console_policy
from bot.runtime import wiring
from engine.domain.clock import SystemClock
from engine.domain.model import NodeInfo
from engine.operations.service import new_operations
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store

REPO = Path(__file__).resolve().parents[4]
FAST = ["--graceful-window", "1s"]
"""Phase 1 of the simulated zero-scale ends after a second (the PDB-blocked pods are then deleted)."""


def scalebot(db: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args, "--db", str(db)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "KUBECONFIG": str(db.parent / "no-such-kubeconfig")},
        timeout=120,
        check=False,
    )


def test_zero_then_wake_in_separate_processes_act_on_one_simulated_cluster(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"

    zero = scalebot(db, "zero", "--simulated", *FAST, "--yes")
    assert zero.returncode == 0, zero.stderr
    handle, _ = wiring.simulated_cluster(store=Store(db))
    assert handle.api.list_nodes() == [], "the zero-scale's result is in the database"

    wake = scalebot(db, "wake", "--simulated")

    assert wake.returncode == 0, wake.stdout + wake.stderr
    assert "not asleep" not in wake.stdout + wake.stderr
    handle, _ = wiring.simulated_cluster(store=Store(db))
    assert len(handle.api.list_nodes()) == 8, "every pool is back at its recorded size"
    assert all(pool.restore is None for pool in handle.pools.list_pools())

    listed = scalebot(db, "ops", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    ops = json.loads(listed.stdout)
    assert [(o["kind"], o["state"]) for o in ops] == [("wake", "succeeded"), ("zero", "succeeded")]


def test_a_new_database_starts_from_the_demo_cluster_and_saves_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "new.db")

    _, fake = wiring.simulated_cluster(store=store)
    fake.delete_node("batch-0")

    again, _ = wiring.simulated_cluster(store=Store(tmp_path / "new.db"))
    names = [n.name for n in again.api.list_nodes()]
    assert len(names) == 7 and "batch-0" not in names
    pods = {p.key for p in again.api.list_pods()}
    assert "batch/report-0" not in pods and "batch/report-1" in pods


def test_zero_in_a_pipe_without_yes_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"

    refused = scalebot(db, "zero", "--simulated", *FAST, stdin="y\n")

    assert refused.returncode == 2
    assert "confirm with --yes (stdin is not a terminal" in refused.stderr
    assert "nothing was changed" in refused.stderr
    handle, _ = wiring.simulated_cluster(store=Store(db))
    assert len(handle.api.list_nodes()) == 8
    assert json.loads(scalebot(db, "ops", "list", "-o", "json").stdout) == []


def on_a_terminal(db: Path, answer: str, *args: str) -> tuple[int, str]:
    """Run `scalebot ARGS` with a pseudo-terminal as stdin, answering the prompt with `answer`."""
    leader, follower = os.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SCALEBOT_DB")}
    try:
        os.write(leader, answer.encode() + b"\n")  # typed ahead: the terminal buffers it
        done = subprocess.run(
            [sys.executable, "-m", "bot", *args, "--db", str(db)],
            stdin=follower,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    return done.returncode, done.stdout + done.stderr


def test_zero_on_a_terminal_asks_and_no_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"

    code, out = on_a_terminal(db, "n", "zero", "--simulated", *FAST)

    assert code == 2, out
    assert "zero 3 pools, 8 nodes → 0: continue? [y/N]" in out
    assert "not confirmed; nothing was changed" in out
    handle, _ = wiring.simulated_cluster(store=Store(db))
    assert len(handle.api.list_nodes()) == 8


def test_scale_down_on_a_terminal_runs_once_confirmed(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"

    code, out = on_a_terminal(db, "y", "scale", "batch", "1", "--simulated")

    assert code == 0, out
    assert "pool batch 3 → 1: continue? [y/N]" in out
    handle, _ = wiring.simulated_cluster(store=Store(db))
    assert handle.pools.get_pool("batch").desired == 1


def test_scale_up_needs_no_confirmation(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"

    done = scalebot(db, "scale", "batch", "4", "--simulated")

    assert done.returncode == 0, done.stderr
    assert "continue?" not in done.stdout


def test_a_fast_clock_is_for_the_simulated_console_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["console", "--clock-speed", "600", "--db", str(tmp_path / "x.db")]) == 2
    assert "--clock-speed needs --simulated" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_status_and_schedules_read_the_database_without_a_kubeconfig(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    store = Store(db)
    handle, _ = wiring.simulated_cluster(store=store)
    ops = new_operations(
        store, {handle.name: handle}, {handle.name: console_policy(handle.name)}, SystemClock()
    )
    added = Schedules(store, ops, SystemClock()).add(
        name="weekend",
        cluster="simulated",
        target=ScheduleTarget.whole_cluster(),
        sleep="Fri 20:00",
        wake="Mon 07:00",
        tz="Europe/Berlin",
        channel="C0DEV",
        approval_mode="per_run",
        by="U0ALICE",
    )
    assert added.ok, added.reply
    assert scalebot(db, "zero", "--simulated", *FAST, "--yes").returncode == 0

    nxt = scalebot(db, "schedule", "next", "-o", "json")
    listed = scalebot(db, "schedule", "list", "-o", "yaml")
    status = scalebot(db, "status", "simulated", "-o", "json")

    assert nxt.returncode == listed.returncode == status.returncode == 0, (
        nxt.stderr + listed.stderr + status.stderr
    )
    events = json.loads(nxt.stdout)
    assert [(e["event"], e["schedule"]) for e in events] == [("sleep", "weekend"), ("wake", "weekend")] or [
        (e["event"], e["schedule"]) for e in events
    ] == [("wake", "weekend"), ("sleep", "weekend")], "each upcoming event once, not every week"
    assert all(e["at"].endswith("+00:00") for e in events), "ISO 8601 with the zone"
    assert "name: weekend" in listed.stdout and "sleep Fri 20:00" in listed.stdout
    [cluster] = json.loads(status.stdout)
    assert {a["pool"] for a in cluster["asleep"]} == {"batch", "system", "web"}
    assert cluster["next_event"]["schedule"] == "weekend"


def test_progress_lines_carry_iso_8601_times_with_their_zone(tmp_path: Path) -> None:
    done = scalebot(tmp_path / "scalebot.db", "scale", "batch", "2", "--simulated", "--yes")

    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stdout.splitlines() if " op-" in line and line[:1].isdigit()]
    assert progress, done.stdout
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 op-", line) for line in progress), progress


def test_cordon_drain_and_uncordon_rehearse_on_the_simulated_cluster(tmp_path: Path) -> None:
    """The node commands take --simulated too: each its own process on one simulated cluster."""
    db = tmp_path / "scalebot.db"

    def node(name: str) -> NodeInfo:
        handle, _ = wiring.simulated_cluster(store=Store(db))
        return next(n for n in handle.api.list_nodes() if n.name == name)

    def pods_on(name: str) -> list[str]:
        handle, _ = wiring.simulated_cluster(store=Store(db))
        return [
            p.name
            for p in handle.api.list_pods()
            if p.node_name == name and not (p.controller and p.controller.is_daemonset)
        ]

    cordon = scalebot(db, "cordon", "--simulated", "batch-0")
    assert cordon.returncode == 0, cordon.stderr
    assert "node/batch-0 cordoned" in cordon.stdout and node("batch-0").unschedulable
    assert pods_on("batch-0"), "the rehearsal needs pods to move"

    drain = scalebot(db, "drain", "--simulated", "batch-0", "--timeout", "1m")
    assert drain.returncode == 0, drain.stdout + drain.stderr
    assert "node/batch-0 drained" in drain.stdout and pods_on("batch-0") == []

    uncordon = scalebot(db, "uncordon", "--simulated", "batch-0")
    assert uncordon.returncode == 0, uncordon.stderr
    assert not node("batch-0").unschedulable


def test_a_rehearsal_can_be_repeated_the_wake_brings_the_pods_back(tmp_path: Path) -> None:
    """zero, wake, zero again: the wake brings the workloads' pods back as their controllers would
    (Pending while the pools slept, running once the nodes are back), so the second zero-scale
    drains the same pods as the first."""
    db = tmp_path / "scalebot.db"
    first, _ = wiring.simulated_cluster(store=Store(db))
    at_start = sorted(
        (p.namespace, p.controller.name if p.controller else p.name) for p in first.api.list_pods()
    )

    zero = scalebot(db, "zero", "--simulated", *FAST, "--yes")
    assert zero.returncode == 0, zero.stderr
    assert scalebot(db, "wake", "--simulated").returncode == 0

    woken, _ = wiring.simulated_cluster(store=Store(db))
    pods = woken.api.list_pods()
    assert all(p.node_name and p.phase == "Running" for p in pods), [p.key for p in pods if not p.node_name]
    assert sorted((p.namespace, p.controller.name if p.controller else p.name) for p in pods) == at_start

    again = scalebot(db, "zero", "--simulated", *FAST, "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    # Both runs found the same 13 workload pods to drain, and the budgets allow the same again.
    for run in (zero, again):
        assert "Drain not completed yet: 13 Pods remaining" in run.stdout, run.stdout
    budgets = [
        sorted(re.findall(r"PodDisruptionBudget \S+ allows [^:\n]*", run.stdout)) for run in (zero, again)
    ]
    assert budgets[0] == budgets[1], budgets
    assert "Pods evicted" in again.stdout, again.stdout


def rehearsal(db: Path) -> list[str]:
    """README's rehearsal on `db`, each command its own process: what a person compares between
    two runs (the plan, the zero-scale's and the wake's outcome, the operations list), with
    operation IDs, instants, ages and durations blanked, and the split between evicted and
    force-deleted pods, which depends on where the 1 s phase 1 ends."""

    def run(*args: str) -> str:
        done = scalebot(db, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def blank(text: str) -> str:
        text = re.sub(r"op-[0-9a-f]{8}", "op-…", text)
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00|Z)", "T", text)
        text = re.sub(r"Completed in \d+s; (\d+ Pods evicted; )?(\d+ force-deleted; )?", "Completed; ", text)
        return re.sub(r"(succeeded +\w+ +simulated +)\d+s", r"\1…", text)

    plan = run("plan", "zero", "--simulated")
    zero = run("zero", "--simulated", *FAST, "--yes")
    wake = run("wake", "--simulated")
    listed = run("ops", "list")
    outcome = [line.split(": ", 1)[1] for line in (zero + wake).splitlines() if ": Completed in " in line]
    return [blank(plan), *map(blank, outcome), blank(listed)]


def test_demo_reset_makes_the_next_rehearsal_the_same_as_the_first(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    first = rehearsal(db)
    again_without_reset = scalebot(db, "plan", "zero", "--simulated").stdout
    assert again_without_reset != first[0].replace("op-…", ""), "the pods came back under new names"

    reset = scalebot(db, "demo", "--reset")

    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert f"{db}: the SIMULATED cluster is back at its start (3 pools, 8 nodes), no history" in reset.stdout
    assert scalebot(db, "ops", "list").stdout == f"no operations recorded in {db}\n"
    second = rehearsal(db)
    assert second == first
    assert first[1] == "Completed; 8 nodes removed; pools batch 3 → 0, system 2 → 0, web 3 → 0"
    assert len(first[-1].splitlines()) == 3, "a header and the two operations"


def test_demo_reset_refuses_a_database_with_another_clusters_records(tmp_path: Path) -> None:
    db = tmp_path / "scalebot.db"
    store = Store(db)
    store.audit(at=SystemClock().now(), actor="cli:root", action="cordon", cluster="prod", detail="n1")
    store.close()
    junk = tmp_path / "notes.db"
    junk.write_text("not a database")
    before = db.read_bytes()

    refused = scalebot(db, "demo", "--reset")
    not_scalebots = scalebot(junk, "demo", "--reset")

    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        f"error: {db} holds records of other clusters (prod): not reset, nothing was changed; "
        "rehearse with a --db of its own\n"
    )
    assert db.read_bytes() == before
    assert not_scalebots.returncode == 2 and "not reset, nothing was changed" in not_scalebots.stderr
    assert junk.read_text() == "not a database"

"""`scalebot drain`'s live panel on a terminal, from the passes of the operations service's drain.

Covers: the panel is redrawn in place after the passes with the figures an operation's panel shows
(nodes drained of total, pods evicted / remaining / total, the pods holding the drain back), and
the summary table says how the drain ended with its last figures; a node whose drain a rule
refused never counts as drained. The plain lines of a pipe are `tests/e2e/test_cli.py`'s.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.cli.live import DrainLive
from engine.domain.clock import FakeClock
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.kube.fake import FakeCluster
from engine.operations.runner import ClusterHandle
from engine.operations.service import new_operations
from engine.operations.service_nodes import DrainFlags
from engine.pools.simulated import SimulatedPoolProvider
from engine.store.database import Store
from tests.unit.bot.cli.test_cli_live import ANSI, _terminal
from tests.unit.bot.cli.test_cli_live import _cluster as cluster_with_pods

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
SETTINGS = DrainSettings(interval=timedelta(seconds=1), timeout=timedelta(seconds=30), parallel=4)
FLAGS = DrainFlags(ignore_daemonsets=True, delete_emptydir_data=True)


def _cluster() -> tuple[FakeCluster, FakeClock]:
    """web-0 with three pods to evict, web-1 with one a budget holds, spare-0 and spare-1 empty."""
    clock = FakeClock(START)
    return cluster_with_pods(blocked=True, now=clock.now), clock


def _drain_live(
    cluster: FakeCluster, clock: FakeClock, nodes: list[str]
) -> tuple[drainer.DrainOutcome, str, str]:
    """The service's drain with the live panel on a terminal: the outcome, the raw terminal output
    and the text it shows (control sequences removed)."""
    console, out = _terminal()
    handle = ClusterHandle(name="dev", api=cluster, pools=SimulatedPoolProvider(cluster))
    ops = new_operations(Store(":memory:"), {"dev": handle}, {}, clock)
    with DrainLive(nodes, console) as live:
        outcome = ops.drain_nodes("dev", nodes, FLAGS, SETTINGS, by="cli:test", on_progress=live.on_progress)
    live.summary(outcome, clock.now())
    raw = out.getvalue()
    return outcome, raw, ANSI.sub("", raw)


def _summary_cells(text: str) -> list[str]:
    [row] = [line for line in text.splitlines() if line.startswith("│ web-")]
    return [c.strip() for c in row.strip("│ ").split("│")]


def test_the_drain_panel_is_redrawn_with_the_figures_and_ends_in_a_summary_table() -> None:
    cluster, clock = _cluster()

    outcome, raw, text = _drain_live(cluster, clock, ["web-0", "web-1", "spare-0"])

    assert outcome.timed_out, "the budget of shop/db-0 allows no eviction"
    assert "drain · 3 nodes · web-0, web-1, spare-0" in text
    assert "2/3 drained" in text and "3 evicted · 1 remaining · 4 total" in text
    assert "shop/db-0: cannot evict pod as it would violate the pod's disruption budget" in text
    assert text.count("status    ") > 2, "one frame per pass"
    assert "\x1b[1A" in raw or "\x1b[A" in raw, "redrawn in place: the cursor moves back up"
    assert _summary_cells(text) == ["web-0, web-1, spare-0", "timed out", "30s", "2/3", "3", "1"]


def test_a_node_a_rule_refused_is_never_counted_as_drained() -> None:
    cluster, clock = _cluster()
    cluster.add_pod("shop", "bare", node="spare-0")  # no controller: kubectl refuses it without --force

    outcome, _, text = _drain_live(cluster, clock, ["web-0", "spare-0"])

    assert outcome.failed_nodes.keys() == {"spare-0"} and not outcome.timed_out
    assert "1/2 drained" in text and "1 node refused" in text
    assert "2/2 drained" not in text
    assert _summary_cells(text) == ["web-0, spare-0", "1 node refused", "10s", "1/2", "3", "0"]

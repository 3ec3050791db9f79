"""The CLI's progress on a terminal: one live panel per operation, redrawn in place, and the final
summary as a table (rich); `scalebot drain`, which runs a drain without an operation, gets the
same panel from its passes (`DrainLive`).

The panels show the figures of `engine.domain.progress_figures` (the ones Slack's status line shows):
nodes drained of total, pods evicted / remaining / total, the current rate, the time left, and a
short list of the pods that hold the drain back. Not on a terminal (CI logs, pipes) or with
`--log-format json`, the CLI prints plain lines instead (`bot.cli.main`): nothing here runs then.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from engine.domain.durations import format_duration
from engine.domain.operation import DrainProgress, Operation, ProgressEvent
from engine.domain.progress_figures import ProgressFigures, bar, drain_figures, figures, rate_text, time_left
from engine.operations.service_nodes import DrainOutcome, DrainReport

BLOCKERS_SHOWN = 5
BLOCKER_WIDTH = 100
"""A blocking pod's line is cut here: budget sentences are long and the panel must stay short."""


def operation_panel(op: Operation, status: str) -> Panel:
    """One operation: its status line and, once it drains, its figures and blocking pods."""
    title = f"{op.id} · {op.kind.value} · {op.target.cluster} · {op.plan.summary()}"
    return progress_panel(title, status or op.state.value, figures(op))


def progress_panel(title: str, status: str, f: ProgressFigures | None) -> Panel:
    """A status line and, once a drain has made a pass, its figures and blocking pods. Text from
    the cluster (pod and node names, reasons) is escaped: it is shown, never read as markup."""
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="bold")
    rows.add_column()
    rows.add_row("status", escape(status))
    if f is not None:
        rows.add_row("progress", f"{bar(f.fraction, 24)} {f.fraction:.0%}")
        rows.add_row("nodes", f"{f.nodes_drained}/{f.nodes_total} drained")
        rows.add_row(
            "pods",
            f"{f.pods_evicted} evicted · {f.pods_remaining} remaining · {f.pods_total} total"
            + (f" · {f.pods_terminating} terminating" if f.pods_terminating else ""),
        )
        rows.add_row("rate", rate_text(f))
        rows.add_row("ETA", time_left(f.eta_seconds))
        if f.blocking:
            lines = [_cut(pod) for pod in f.blocking[:BLOCKERS_SHOWN]]
            rows.add_row("blocking", escape("\n".join(lines)))
    return Panel(rows, title=escape(title), title_align="left")


WIDE_SUMMARY = 100
"""Below this many columns the summary drops kind and cluster (each panel's title names them), as
kubectl drops columns: the ID and the state are never cut."""


def summary_table(ops: Sequence[Operation], width: int = WIDE_SUMMARY) -> Table:
    """What each operation ended with: the summary's figures (the final message's); an operation
    that ended without a summary (a failed drain) shows what its last pass counted. `width`: the
    terminal's columns (readable at 80)."""
    wide = width >= WIDE_SUMMARY
    # kubectl's borderless columns when narrow: the frame's 20 characters are the ID's and the state's.
    table = Table(
        title="Summary",
        box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD,
        pad_edge=wide,
        collapse_padding=not wide,
    )
    table.add_column("operation", no_wrap=True, min_width=max((len(op.id) for op in ops), default=0))
    if wide:
        table.add_column("kind")
        table.add_column("cluster")
    table.add_column("state", no_wrap=True, min_width=max((len(op.state.value) for op in ops), default=0))
    for name in ("duration", "nodes\ndrained", "pods\nevicted", "force-\ndeleted", "nodes\nremoved"):
        table.add_column(name, justify="right", no_wrap=True)
    for op in ops:
        s = op.summary
        f = figures(op)
        about = [op.kind.value, escape(op.target.cluster)] if wide else []
        table.add_row(
            op.id,
            *about,
            op.state.value,
            format_duration(timedelta(seconds=s.duration_seconds)) if s else "—",
            f"{f.nodes_drained}/{f.nodes_total}" if f else "—",
            str(s.pods_evicted) if s else str(f.pods_evicted) if f else "—",
            str(s.pods_force_deleted) if s else "—",
            str(s.nodes_removed) if s else "—",
        )
    return table


def _cut(text: str) -> str:
    return text if len(text) <= BLOCKER_WIDTH else text[: BLOCKER_WIDTH - 1] + "…"


class LiveDisplay:
    """The progress listener on a terminal: keeps each operation's latest state and redraws.

    Redraws happen on events only (no refresh thread): the runner's events are the changes."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console()
        self._lock = threading.Lock()
        self._views: dict[str, tuple[Operation, str]] = {}
        self._live: Live | None = None

    def __call__(self, event: ProgressEvent) -> None:
        op = event.operation
        with self._lock:
            _, status = self._views.get(op.id, (op, ""))
            if event.kind in ("phase", "report", "final") or not status:
                status = event.text
            self._views[op.id] = (op, status)
            if self._live is not None:
                self._live.update(self._render(), refresh=True)

    def go_live(self) -> None:
        with self._lock:
            self._live = Live(
                self._render(), console=self._console, auto_refresh=False, redirect_stdout=False
            )
            self._live.start(refresh=True)

    def finish(self, ops: Sequence[Operation]) -> None:
        """Stop redrawing (the last panels stay on screen) and print the summary table."""
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
        if ops:
            self._console.print(summary_table(ops, self._console.width))

    def _render(self) -> RenderableType:
        return Group(*(operation_panel(op, status) for op, status in self._views.values()))


class DrainLive:
    """`scalebot drain` on a terminal: one panel, redrawn after every pass with the figures an
    operation's panel shows (the passes folded by `engine.drain.progress`), then a summary table."""

    def __init__(self, nodes: Sequence[str], console: Console | None = None) -> None:
        self._nodes = tuple(nodes)
        self._console = console or Console()
        self._progress = DrainProgress()
        self._status = "cordoned; listing the pods"
        self._live: Live | None = None
        count = len(self._nodes)
        self._title = f"drain · {count} node{'s' if count != 1 else ''} · {node_list(self._nodes)}"

    @property
    def figures(self) -> ProgressFigures | None:
        return drain_figures(self._progress)

    def __enter__(self) -> DrainLive:
        """Start redrawing the panel in place."""
        self._live = Live(self._panel(), console=self._console, auto_refresh=False, redirect_stdout=False)
        self._live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop redrawing; the last panel stays on screen."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def on_progress(self, progress: DrainProgress, report: DrainReport) -> None:
        """The drain's figures after each pass (called on the drain's own thread)."""
        self._progress = progress
        refused = len(progress.state.failed_nodes) if progress.state is not None else 0
        self._status = report.summary_line() + (
            f" · {refused} node{'s' if refused != 1 else ''} refused" if refused else ""
        )
        if self._live is not None:
            self._live.update(self._panel(), refresh=True)

    def summary(self, outcome: DrainOutcome, now: datetime) -> None:
        """The summary table, below the last panel."""
        self._console.print(drain_summary_table(self._nodes, outcome, self.figures, now))

    def _panel(self) -> Panel:
        return progress_panel(self._title, self._status, self.figures)


def drain_result(outcome: DrainOutcome) -> str:
    refused = len(outcome.failed_nodes)
    if outcome.cancelled:
        return "interrupted"
    if outcome.timed_out:
        return "timed out"
    if refused:
        return f"{refused} node{'s' if refused != 1 else ''} refused"
    return "drained"


def drain_summary_table(
    nodes: Sequence[str], outcome: DrainOutcome, f: ProgressFigures | None, now: datetime
) -> Table:
    """The drain's end: how it ended, how long it took, and its last pass's figures."""
    table = Table(title="Summary")
    for name, justify in (
        ("nodes", "left"),
        ("result", "left"),
        ("duration", "right"),
        ("nodes drained", "right"),
        ("pods evicted", "right"),
        ("pods remaining", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row(
        escape(node_list(nodes)),
        drain_result(outcome),
        format_duration(max(timedelta(0), now - outcome.state.started_at)),
        f"{f.nodes_drained}/{f.nodes_total}" if f else f"0/{len(nodes)}",
        str(f.pods_evicted) if f else "0",
        str(f.pods_remaining) if f else "0",
    )
    return table


def node_list(nodes: Sequence[str], shown: int = 3) -> str:
    """The first `shown` node names, then how many more."""
    more = len(nodes) - shown
    return ", ".join(nodes[:shown]) + (f" and {more} more" if more > 0 else "")

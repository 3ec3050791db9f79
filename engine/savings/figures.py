"""What scalebot's sleeps saved: node-hours (and money, given a price per node-hour) per cluster,
pool and week, from the operation history.

Pure: operations in, a `SavingsReport` out. The CLI's table and JSON and the chart are drawn from
the same report, so the picture's numbers are the report's.

What counts: nodes asleep times hours asleep, for the nodes scalebot itself took out. A sleep starts
when its zero-scale removed the nodes and ends when a wake is asked for (a failed wake ends it
too: from then on the nodes were wanted, and their absence is an outage, not a saving). Only what
the history shows is counted, and the report says what it cannot know:
- a zero-scale that failed or was cancelled counts the nodes its summary says it removed; without
  a summary, nothing;
- nodes someone else brought back during a sleep (an autoscaler, a person) are seen only in the
  size the wake found: they are counted as running for the whole sleep, since when they came is
  unknown;
- a pool scaled up by scalebot during a sleep counts fewer nodes asleep from that moment.
Durations are measured in UTC, so a night across a daylight-saving change counts its real hours;
weeks start on Monday 00:00 in the report's time zone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from engine.domain.operation import Operation, OpKind, OpState

PoolKey = tuple[str, str]
"""(cluster, pool)"""

ALWAYS_UNKNOWN = (
    "Only nodes scalebot removed are counted, from the end of its zero-scale to the start of the "
    "wake; what an autoscaler or a person changed in between is seen only in the sizes scalebot "
    "read at its next operation on the pool."
)


@dataclass(frozen=True, slots=True)
class SleepPeriod:
    cluster: str
    pool: str
    start: datetime
    end: datetime
    nodes: int
    sleep_op: str
    ended_by: str
    """`wake op-…`, `failed wake op-…`, `scale op-…`, or `still asleep`."""

    @property
    def node_hours(self) -> float:
        return self.nodes * (self.end - self.start).total_seconds() / 3600


@dataclass(frozen=True, slots=True)
class WeekRow:
    cluster: str
    pool: str
    week: date
    """The Monday the week starts on, in the report's time zone."""
    node_hours: float
    money: float | None = None
    """node_hours times the pool's price per node-hour; None when no price is configured."""


@dataclass(frozen=True, slots=True)
class ClusterTotal:
    cluster: str
    node_hours: float
    money: float | None
    """Over the cluster's priced pools; None when none of its pools has a price."""
    unpriced_node_hours: float
    """Node-hours of pools without a price (not in `money`)."""


@dataclass(frozen=True, slots=True)
class WeekSpan:
    week: date
    """The Monday the week starts on, in the report's time zone."""
    start: datetime
    end: datetime
    """The part of the week the report covers ([since, until] clipped to the week)."""
    partial: bool
    """The report covers only part of the week: the current one (until mid-week) or the first (since
    mid-week). Its figures are not comparable with a whole week's."""


@dataclass(frozen=True, slots=True)
class SavingsReport:
    since: datetime | None
    until: datetime
    rows: tuple[WeekRow, ...]
    periods: tuple[SleepPeriod, ...]
    unknowns: tuple[str, ...] = field(default=(ALWAYS_UNKNOWN,))
    tz: tzinfo = UTC
    """The zone weeks start in (Monday 00:00 there)."""
    currency: str | None = None
    """The currency of the configured prices (`currency:`), None when the config names none."""

    @property
    def node_hours(self) -> float:
        return sum(r.node_hours for r in self.rows)

    @property
    def money(self) -> float | None:
        """Money saved over every priced pool; None when no pool has a price."""
        priced = [r.money for r in self.rows if r.money is not None]
        return sum(priced) if priced else None

    @property
    def zone_name(self) -> str:
        """The IANA name of the report's zone (Europe/Berlin), or its abbreviation."""
        return str(getattr(self.tz, "key", None) or self.tz.tzname(self.until) or "UTC")

    def clusters(self) -> list[str]:
        return sorted({r.cluster for r in self.rows})

    def cluster_totals(self) -> list[ClusterTotal]:
        """Per cluster, most node-hours first: the chart's legend and the table's subtotals."""
        totals = []
        for cluster in self.clusters():
            rows = [r for r in self.rows if r.cluster == cluster]
            priced = [r.money for r in rows if r.money is not None]
            totals.append(
                ClusterTotal(
                    cluster,
                    sum(r.node_hours for r in rows),
                    sum(priced) if priced else None,
                    sum(r.node_hours for r in rows if r.money is None),
                )
            )
        return sorted(totals, key=lambda t: (-t.node_hours, t.cluster))

    def week_spans(self) -> list[WeekSpan]:
        """Every week from the first one with savings (or `since`'s) to `until`'s, empty weeks
        included, oldest first."""
        if not self.rows and self.since is None:
            return []
        first = week_start(self.since, self.tz) if self.since else min(r.week for r in self.rows)
        last = week_start(self.until, self.tz)
        spans = []
        monday = first
        while monday <= last:
            begin = datetime.combine(monday, time(), tzinfo=self.tz)
            end = datetime.combine(monday + timedelta(days=7), time(), tzinfo=self.tz)
            start = max(begin, self.since) if self.since else begin
            stop = min(end, self.until)
            partial = start > begin or stop < end
            spans.append(WeekSpan(monday, start.astimezone(self.tz), stop.astimezone(self.tz), partial))
            monday += timedelta(days=7)
        return spans

    def weekly_by_cluster(self) -> dict[str, dict[date, float]]:
        """Cluster -> week -> node-hours (the chart's stacked bars)."""
        out: dict[str, dict[date, float]] = defaultdict(lambda: defaultdict(float))
        for r in self.rows:
            out[r.cluster][r.week] += r.node_hours
        return {cluster: dict(weeks) for cluster, weeks in out.items()}

    def weekly_totals(self) -> list[tuple[date, float]]:
        """Node-hours per week over every cluster and pool, oldest first (the chart's bars)."""
        totals: dict[date, float] = defaultdict(float)
        for row in self.rows:
            totals[row.week] += row.node_hours
        return sorted(totals.items())

    def to_json(self) -> dict[str, object]:
        money = self.money
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat(),
            "time_zone": self.zone_name,
            "currency": self.currency,
            "node_hours": round(self.node_hours, 3),
            "money": None if money is None else round(money, 2),
            "clusters": [
                {
                    "cluster": t.cluster,
                    "node_hours": round(t.node_hours, 3),
                    "money": None if t.money is None else round(t.money, 2),
                    "unpriced_node_hours": round(t.unpriced_node_hours, 3),
                }
                for t in self.cluster_totals()
            ],
            "partial_weeks": [
                {"week": s.week.isoformat(), "from": s.start.isoformat(), "to": s.end.isoformat()}
                for s in self.week_spans()
                if s.partial
            ],
            "weeks": [
                {
                    "cluster": r.cluster,
                    "pool": r.pool,
                    "week": r.week.isoformat(),
                    "node_hours": round(r.node_hours, 3),
                    "money": None if r.money is None else round(r.money, 2),
                }
                for r in self.rows
            ],
            "sleeps": [
                {
                    "cluster": p.cluster,
                    "pool": p.pool,
                    "start": p.start.isoformat(),
                    "end": p.end.isoformat(),
                    "nodes": p.nodes,
                    "node_hours": round(p.node_hours, 3),
                    "sleep_operation": p.sleep_op,
                    "ended_by": p.ended_by,
                }
                for p in self.periods
            ],
            "cannot_know": list(self.unknowns),
        }


@dataclass(slots=True)
class _Asleep:
    start: datetime
    nodes: int
    floor: int
    """The pool's size once asleep (0 for a full sleep): more than that at the wake was someone else."""
    op_id: str


def savings(
    ops: Iterable[Operation],
    *,
    now: datetime,
    tz: tzinfo,
    since: datetime | None = None,
    prices: Mapping[PoolKey, float] | None = None,
    currency: str | None = None,
) -> SavingsReport:
    """The savings of every sleep in `ops` (any order), clipped to [since, now]; `currency` names
    the prices' currency."""
    periods: list[SleepPeriod] = []
    unknowns: list[str] = [ALWAYS_UNKNOWN]
    asleep: dict[PoolKey, _Asleep] = {}

    def close(key: PoolKey, end: datetime, ended_by: str, nodes: int | None = None) -> None:
        s = asleep.pop(key)
        counted = s.nodes if nodes is None else nodes
        if counted > 0 and end > s.start:
            periods.append(SleepPeriod(key[0], key[1], s.start, end, counted, s.op_id, ended_by))

    for op in sorted(ops, key=lambda o: (o.created_at, o.id)):
        cluster = op.target.cluster
        if op.kind is OpKind.ZERO:
            _sleep(op, asleep, close, unknowns)
        elif op.kind is OpKind.WAKE and op.state in (OpState.SUCCEEDED, OpState.FAILED):
            planned = {p.pool: p.before for p in op.plan.pools}
            pools = set(op.target.pools) or {pool for c, pool in asleep if c == cluster}
            for pool in sorted(pools | set(planned)):
                key = (cluster, pool)
                if key not in asleep:
                    continue
                s = asleep[key]
                found = planned.get(pool, s.floor)
                others = max(0, found - s.floor)
                if others:
                    unknowns.append(
                        f"{cluster}/{pool}: {others} node(s) were running when {op.id} woke the pool "
                        f"(asleep since {s.start.isoformat()} by {s.op_id}); someone else brought them "
                        "back at a time the history does not show: counted as running the whole sleep"
                    )
                if op.state is OpState.FAILED:
                    unknowns.append(
                        f"{cluster}/{pool}: wake {op.id} failed at {op.created_at.isoformat()}; nodes "
                        "that stayed down after it were wanted, so they are not counted as savings"
                    )
                ended = f"{'failed wake' if op.state is OpState.FAILED else 'wake'} {op.id}"
                close(key, op.created_at, ended, max(0, s.nodes - others))
        elif op.kind is OpKind.SCALE and op.state is OpState.SUCCEEDED:
            for change in op.plan.pools:
                key = (cluster, change.pool)
                if key in asleep and change.after > change.before:
                    s = asleep[key]
                    at = op.updated_at
                    close(key, at, f"scale {op.id}")
                    left = s.nodes - (change.after - change.before)
                    if left > 0:
                        asleep[key] = _Asleep(at, left, change.after, s.op_id)
    for key, s in sorted(asleep.items()):
        unknowns.append(
            f"{key[0]}/{key[1]}: still asleep since {s.start.isoformat()} ({s.op_id}): counted until now"
        )
        close(key, now, "still asleep")

    clipped = [_clip(p, since, now) for p in periods]
    kept = tuple(p for p in clipped if p is not None)
    rows = _weekly(kept, tz, prices or {})
    return SavingsReport(
        since=since,
        until=now,
        rows=rows,
        periods=kept,
        unknowns=tuple(unknowns),
        tz=tz,
        currency=currency,
    )


def asleep_series(
    report: SavingsReport, start: datetime, end: datetime, clusters: Collection[str] | None = None
) -> list[tuple[datetime, int]]:
    """Nodes asleep over [start, end] (in `clusters`, else every cluster; every pool), as (instant,
    count from then on) steps: the chart's lines, from the report's own sleep periods."""
    changes: dict[datetime, int] = defaultdict(int)
    for p in report.periods:
        if p.end <= start or p.start >= end or (clusters is not None and p.cluster not in clusters):
            continue
        changes[max(p.start, start)] += p.nodes
        changes[min(p.end, end)] -= p.nodes
    changes.setdefault(start, 0)
    steps, count = [], 0
    for at in sorted(changes):
        count += changes[at]
        steps.append((at, count))
    if steps[-1][0] < end:
        steps.append((end, steps[-1][1]))
    return steps


def _sleep(
    op: Operation,
    asleep: dict[PoolKey, _Asleep],
    close: Callable[[PoolKey, datetime, str], None],
    unknowns: list[str],
) -> None:
    cluster = op.target.cluster
    summary = op.summary
    if summary is not None and summary.pools:
        sizes = {pool: (s.before, s.after) for pool, s in summary.pools.items()}
    elif op.state is OpState.SUCCEEDED:
        sizes = {p.pool: (p.before, p.after) for p in op.plan.pools}
    else:
        if op.state in (OpState.FAILED, OpState.CANCELLED) and op.step:
            unknowns.append(
                f"{cluster}: zero-scale {op.id} {op.state.value} without a record of the nodes it "
                "removed: not counted"
            )
        return
    start = op.progress.removal.removed_at or op.updated_at
    for pool, (before, after) in sorted(sizes.items()):
        removed = before - after
        if removed <= 0:
            continue
        key = (cluster, pool)
        earlier = asleep.pop(key, None)
        if earlier is not None and start > earlier.start:  # asleep already: more nodes from now on
            asleep[key] = earlier
            close(key, start, f"zero {op.id}")
            removed += earlier.nodes
        asleep[key] = _Asleep(start, removed, after, op.id)


def _clip(p: SleepPeriod, since: datetime | None, until: datetime) -> SleepPeriod | None:
    start = max(p.start, since) if since else p.start
    end = min(p.end, until)
    if end <= start:
        return None
    return SleepPeriod(p.cluster, p.pool, start, end, p.nodes, p.sleep_op, p.ended_by)


def week_start(at: datetime, tz: tzinfo) -> date:
    local = at.astimezone(tz).date()
    return local - timedelta(days=local.weekday())


def _weekly(
    periods: Sequence[SleepPeriod], tz: tzinfo, prices: Mapping[PoolKey, float]
) -> tuple[WeekRow, ...]:
    hours: dict[tuple[str, str, date], float] = defaultdict(float)
    for p in periods:
        start = p.start
        while start < p.end:
            monday = week_start(start, tz)
            boundary = datetime.combine(monday + timedelta(days=7), time(), tzinfo=tz)
            end = min(p.end, boundary)
            hours[(p.cluster, p.pool, monday)] += p.nodes * (end - start).total_seconds() / 3600
            start = end
    rows = []
    for (cluster, pool, week), node_hours in sorted(hours.items()):
        price = prices.get((cluster, pool))
        rows.append(WeekRow(cluster, pool, week, node_hours, None if price is None else node_hours * price))
    return tuple(rows)

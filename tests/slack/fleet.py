"""A fleet in one process: N clusters under one `Operations` and one bot, their schedules firing together.

Shared by tests/slack/test_fleet_storm.py (simulated clusters), tests/e2e/test_fleet_storm_e2e.py
(real control planes among them) and `python -m tests.bench.fleet` (the figures in
docs/benchmarks.md). The wiring is `scalebot run`'s: the real `Operations` (SQLite, the runner), the
schedule service and timer callbacks, Bolt over HTTP and the sender, against the local Web API;
the runner and the sender with `scalebot run`'s defaults (`RunnerSettings()`, `SenderSettings()`:
no test pacing, no extra workers).

- `RemoteCluster`: an in-memory cluster that answers like an API server across a network: every
  request waits a round trip (a seeded draw: a floor plus an exponential tail) outside the cluster's
  lock, so concurrent requests overlap as they do on a real server.
- `TimedStore`: the real store, with every write transaction timed (waiting for the store's lock,
  then BEGIN IMMEDIATE to COMMIT); every write of the store goes through `transaction()`.
- `AckProbe`: signed `/scale status` commands sent concurrently at a steady pace for as long as the
  storm lasts, each one's ack latency recorded with the instant it was sent.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config.cluster_settings import ClusterSettings
from bot.config.settings import Secret, SenderSettings, Settings, SlackSettings
from bot.runtime.apscheduler_timer import APSchedulerTimer
from bot.slack.app import serve_http
from bot.slack.delivery.progress import message_key
from bot.slack.schedule_ui import ScheduleUi
from engine.domain.clock import FakeClock, SystemClock
from engine.domain.model import CordonResult, NodeInfo, PdbInfo, PodInfo
from engine.domain.operation import Operation, OpKind, OpState
from engine.domain.settings import RunnerSettings
from engine.operations import policy
from engine.operations.runner import ClusterHandle
from engine.operations.service import Operations, new_operations
from engine.pools.base import POOL_LABEL
from engine.pools.simulated import SimulatedPoolProvider
from engine.schedules.core.model import ScheduleTarget
from engine.schedules.service import Schedules
from engine.store.database import Store
from tests.e2e.support import deployment, group, label_cluster
from tests.slack.conftest import (
    APPROVER,
    APPROVER_2,
    OPERATOR,
    SECRET,
    ControlledCluster,
    Engine,
    RunningBot,
    assemble,
)
from tests.slack.harness import TIER_LIMITS, HttpResult, SlackApiServer, all_text, wait_until
from tests.slack.test_schedules_slack import ManualScheduler

PRODUCTION_SENDER = SenderSettings()
"""What `scalebot run` uses: 40 chat.update and 120 chat.postMessage a minute per workspace."""
PRODUCTION_RUNNER = RunnerSettings()
"""What `scalebot run` uses (its workers, pass interval, settle and windows)."""
MON_18_50_UTC = datetime(2026, 3, 2, 18, 50, tzinfo=UTC)
"""Monday 19:50 in Berlin: ten minutes before every "Mon-Fri 20:00" sleep of the fleet."""
SLEEP_AT = datetime(2026, 3, 2, 19, 0, tzinfo=UTC)
ACK_P99_BOUND = 0.3
"""Seconds: the issue's target (Slack's own deadline is 3 s)."""
PROBE_INTERVAL, PROBE_PER_TICK = 0.1, 2
"""Twenty commands a second, two at a time: about 200 over the storm, so its p99 is a percentile,
not its maximum (one stall of a thread on a loaded two-core machine is not the bot's latency).
Four at a time every 0.2 s queued the bursts' own requests behind each other (p99 up to 252 ms)."""


def percentile(values: Collection[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty collection."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * pct / 100) - 1))]


@dataclass(frozen=True)
class Latency:
    """A round trip to a remote API server: `floor` plus an exponential tail of mean `tail` (seconds)."""

    floor: float = 0.010
    tail: float = 0.010

    def sampler(self, seed: int) -> RoundTrip:
        return RoundTrip(self, random.Random(seed))


class RoundTrip:
    """Seeded draws of one cluster's round trips (thread-safe: the fleet's workers share a cluster)."""

    def __init__(self, latency: Latency, rng: random.Random) -> None:
        self.latency = latency
        self._rng = rng
        self._lock = threading.Lock()
        self.waited = 0.0
        self.requests = 0

    def wait(self, trips: int = 1) -> None:
        with self._lock:
            seconds = sum(
                self.latency.floor
                + (self._rng.expovariate(1 / self.latency.tail) if self.latency.tail else 0.0)
                for _ in range(trips)
            )
            self.waited += seconds
            self.requests += trips
        if seconds > 0:
            threading.Event().wait(seconds)  # the network and the remote server, not synchronisation


class RemoteCluster(ControlledCluster):
    """The in-memory cluster behind a network: each request of the KubeApi port waits a round trip
    before it reaches the cluster (outside its lock, so requests in flight overlap). A read-modify-
    write the real adapter does in two requests (get + patch) costs two round trips; `cordon_many`
    costs its listing and one round of concurrent writes."""

    def __init__(self, trip: RoundTrip) -> None:
        super().__init__()
        self.trip = trip

    def list_nodes(self, *, label_selector: str | None = None) -> list[NodeInfo]:
        self.trip.wait()
        return super().list_nodes(label_selector=label_selector)

    def get_node(self, name: str) -> NodeInfo:
        self.trip.wait()
        return super().get_node(name)

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        if node_names is None or node_names:
            self.trip.wait()
        return super().list_pods(node_names=node_names)

    def list_pdbs(self) -> list[PdbInfo]:
        self.trip.wait()
        return super().list_pdbs()

    def list_daemonset_keys(self) -> frozenset[str]:
        self.trip.wait()
        return super().list_daemonset_keys()

    def list_terminating_namespaces(self) -> frozenset[str]:
        self.trip.wait()
        return super().list_terminating_namespaces()

    def set_unschedulable(self, node: str, unschedulable: bool) -> bool:
        self.trip.wait(2)
        return super().set_unschedulable(node, unschedulable)

    def set_taint(self, node: str, key: str, *, value: str, effect: str, present: bool) -> bool:
        self.trip.wait(2)
        return super().set_taint(node, key, value=value, effect=effect, present=present)

    def cordon(self, node: str, *, taint_key: str, taint_value: str, taint_effect: str) -> CordonResult:
        self.trip.wait(2)
        return super().cordon(node, taint_key=taint_key, taint_value=taint_value, taint_effect=taint_effect)

    def cordon_many(
        self,
        nodes: Collection[str],
        *,
        taint_key: str,
        taint_value: str,
        taint_effect: str,
        executor: Executor | None = None,
    ) -> dict[str, CordonResult]:
        if nodes:
            self.trip.wait(2)
        return super().cordon_many(
            nodes, taint_key=taint_key, taint_value=taint_value, taint_effect=taint_effect, executor=executor
        )

    def evict_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        self.trip.wait()
        super().evict_pod(pod, grace_seconds=grace_seconds)

    def delete_pod(self, pod: PodInfo, *, grace_seconds: int | None = None) -> None:
        self.trip.wait()
        super().delete_pod(pod, grace_seconds=grace_seconds)

    def delete_node(self, name: str) -> None:
        self.trip.wait()
        super().delete_node(name)


SIMULATED_POOLS = {"web": 3, "batch": 2}


def simulated_cluster(name: str, latency: Latency, seed: int) -> ClusterHandle:
    """Five nodes in two pools behind a round trip of `latency`."""
    cluster = RemoteCluster(latency.sampler(seed))
    for pool, count in SIMULATED_POOLS.items():
        for i in range(1, count + 1):
            cluster.add_node(f"{pool}-{i}", labels={POOL_LABEL: pool})
    return ClusterHandle(name, cluster, SimulatedPoolProvider(cluster))


@dataclass(frozen=True)
class Write:
    at: float
    """time.monotonic() when the write asked for the store."""
    waited: float
    """Seconds waiting for the store's lock (another thread reading or writing)."""
    took: float
    """Seconds from asking to COMMIT done."""


class TimedStore(Store):
    """The real store; every outermost write transaction is timed into `writes`."""

    def __init__(self, path: str | Path) -> None:
        self.writes: list[Write] = []
        self._depth = threading.local()
        super().__init__(path)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._depth, "n", 0):  # nested: the outer transaction is timed
            with super().transaction():
                yield
            return
        asked = time.monotonic()
        with self._lock:
            got = time.monotonic()
            self._depth.n = 1
            try:
                with super().transaction():
                    yield
            finally:
                self._depth.n = 0
        self.writes.append(Write(asked, got - asked, time.monotonic() - asked))


DIGEST_CHANNEL = "C0FLEETDIGEST"
"""`fleet_digest_channel` of a fleet built with `digest=True`."""


def channel_of(n: int) -> str:
    return f"C0FLEET{n}"


@dataclass
class FleetWorld:
    bot: RunningBot
    clock: FakeClock
    """The schedules' clock; the operations run on the system clock (the real clusters' time)."""
    ops: Operations
    store: TimedStore
    schedules: Schedules
    scheduler: ManualScheduler
    names: list[str]

    def fire_at(self, instant: datetime) -> None:
        """Move to `instant` and run the timer's armed job there, as APScheduler would."""
        self.clock.advance((instant - self.clock.now()).total_seconds())
        jobs = self.scheduler.get_jobs()
        assert jobs, "the timer armed no job"
        jobs[0].func()

    def operations(self) -> list[Operation]:
        return self.ops.list_operations(limit=10 * len(self.names))

    def all_finished(self) -> bool:
        found = self.operations()
        return len(found) == len(self.names) and all(op.state.is_terminal for op in found)


@contextmanager
def fleet_world(
    api: SlackApiServer,
    handles: dict[str, ClusterHandle],
    db: Path,
    *,
    runner: RunnerSettings = PRODUCTION_RUNNER,
    digest: bool = False,
) -> Iterator[FleetWorld]:
    """One `Operations` over `handles`, each cluster with a pre-approved "Mon-Fri 20:00" schedule
    announcing ten minutes ahead in its own channel, and the bot serving HTTP; all stopped after."""
    names = list(handles)
    roles = {OPERATOR: policy.Role.OPERATOR, APPROVER: policy.Role.APPROVER, APPROVER_2: policy.Role.APPROVER}
    policies = {name: policy.ClusterPolicy(cluster=name, users=roles) for name in names}
    store = TimedStore(db)
    ops = new_operations(store, handles, policies, SystemClock(), settings=runner)
    clock = FakeClock(MON_18_50_UTC)
    schedules = Schedules(ops.store, ops, clock)
    settings = Settings(
        slack=SlackSettings(
            bot_token=Secret("xoxb-test-token"), signing_secret=Secret(SECRET), api_url=api.url
        ),
        clusters={
            name: ClusterSettings(
                name=name, context=name, default_channels=(channel_of(n),), policy=policies[name]
            )
            for n, name in enumerate(names)
        },
        channels={channel_of(n): name for n, name in enumerate(names)},
        sender=PRODUCTION_SENDER,
        fleet_digest_channel=DIGEST_CHANNEL if digest else None,
    )
    ui = ScheduleUi(schedules, ops, clock=clock, default_cluster=None)
    bot = assemble(api, Engine(ops, {}), settings, subcommands=ui.subcommands(), clicks=ui.clicks())
    scheduler = ManualScheduler(timezone=UTC)
    timer = APSchedulerTimer(schedules, clock, ui.on_announce, ui.on_fired, scheduler=scheduler)
    api.enforce_limits()  # from the first call: the timer may announce as soon as it starts
    try:
        bot.http = serve_http(bot.app, 0, host="127.0.0.1")
        ui.attach(sender=bot.sender, app=bot.app, runner=timer)
        for n, name in enumerate(names):
            saved = schedules.add(
                name=f"nights-{n}",
                cluster=name,
                target=ScheduleTarget.whole_cluster(),
                sleep="Mon-Fri 20:00",
                wake="Mon-Fri 07:00",
                tz="Europe/Berlin",
                lead_times="10m",
                channel=channel_of(n),
                approval_mode="pre_approved",
                by=APPROVER,
            )
            assert saved.ok, saved.reply
            assert schedules.pre_approve(f"nights-{n}", by=APPROVER_2).ok
        timer.start()
        yield FleetWorld(bot, clock, ops, store, schedules, scheduler, names)
    finally:
        timer.stop()
        bot.stop()
        ops.runner.stop()


@dataclass(frozen=True)
class Ack:
    sent: float
    """time.monotonic() when the signed request went out."""
    elapsed: float
    status: int
    response_url: str
    cluster: str


@dataclass
class AckProbe:
    """`/scale status <cluster>` in the cluster's channel, `per_tick` at once every `interval` seconds,
    until `stop()`; each command's ack latency (request sent to HTTP answer) kept in `acks`."""

    world: FleetWorld
    interval: float = 0.5
    per_tick: int = 3
    acks: list[Ack] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _pool: ThreadPoolExecutor | None = None
    _futures: list[Future[None]] = field(default_factory=list)

    def start(self) -> AckProbe:
        self._pool = ThreadPoolExecutor(max_workers=self.per_tick * 2, thread_name_prefix="ack-probe")
        self._thread = threading.Thread(target=self._loop, name="ack-probe-pace", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Ack]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for future in self._futures:
            future.result(timeout=30)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        return sorted(self.acks, key=lambda a: a.sent)

    def _loop(self) -> None:
        assert self._pool is not None
        sent = 0
        while not self._stop.is_set():
            for _ in range(self.per_tick):
                n = sent % len(self.world.names)
                self._futures.append(self._pool.submit(self._one, n))
                sent += 1
            self._stop.wait(self.interval)  # the probe's pace, not synchronisation

    def _one(self, n: int) -> None:
        sent = time.monotonic()
        result: HttpResult
        result, url = self.world.bot.command(f"status {self.world.names[n]}", channel=channel_of(n))
        self.acks.append(Ack(sent, result.elapsed, result.status, url, self.world.names[n]))


@dataclass
class Storm:
    """What one storm did, measured from the 20:00 tick (seconds, time.monotonic() based)."""

    clusters: int
    started: float
    engine_done: float
    """The tick to the last operation in a final state."""
    completed: float
    """The tick to the sender's last write (every final and closing line in Slack)."""
    acks: list[Ack]
    writes: list[Write]
    """The store's write transactions from the tick to completion."""
    finals_after: list[float] = field(default_factory=list)
    """Per operation, the tick to its message's first "Completed" rendering in Slack."""


def posting_time(posts: int) -> float:
    """Seconds the sender's default workspace budget needs for `posts` posts, with margin."""
    return 30.0 + 1.5 * 60.0 * posts / PRODUCTION_SENDER.posts_per_minute


def announce(world: FleetWorld) -> None:
    """19:50: every schedule announces its night, within Slack's limits; wait until all are posted."""
    api = world.bot.api
    world.fire_at(MON_18_50_UTC)  # ten minutes ahead: every schedule announces its night
    wait_until(
        lambda: len(api.calls_to("chat.postMessage", ok_only=True)) >= len(world.names),
        posting_time(len(world.names)),
        "the announcements",
    )
    world.bot.settle(timeout=posting_time(len(world.names)))


def posts_by_channel(world: FleetWorld) -> dict[str, int]:
    """chat.postMessage calls Slack accepted, per cluster's channel (each cluster has its own)."""
    found = Counter(
        str(c.body.get("channel")) for c in world.bot.api.calls_to("chat.postMessage", ok_only=True)
    )
    return {channel_of(n): found.get(channel_of(n), 0) for n in range(len(world.names))}


def run_storm(
    world: FleetWorld,
    *,
    timeout: float = 120,
    scripted_429: bool = False,
    probe_interval: float = 0.5,
    probe_per_tick: int = 3,
) -> Storm:
    """Announce at 19:50, fire every sleep at 20:00 with slash commands coming in concurrently until
    Slack has every final rendering; the local Web API enforces Slack's limits throughout."""
    api = world.bot.api
    announce(world)

    writes_before = len(world.store.writes)
    started = time.monotonic()
    probe = AckProbe(world, interval=probe_interval, per_tick=probe_per_tick).start()
    try:
        world.fire_at(SLEEP_AT)
        if scripted_429:  # Slack throttles the bot once in the middle of the storm
            api.fail("chat.update", times=1, status=429, retry_after=2)
        try:
            wait_until(world.all_finished, timeout, "every sleep to finish", poll=0.05)
        except AssertionError as unfinished:
            states = Counter(op.state.value for op in world.operations())
            raise AssertionError(f"{unfinished}; operations by state: {dict(states)}") from None
        engine_done = time.monotonic() - started
        assert world.ops.runner.wait_idle(timeout=30)
        world.bot.settle(timeout=timeout + 60)
        completed = time.monotonic() - started
    finally:
        acks = probe.stop()
    storm = Storm(len(world.names), started, engine_done, completed, acks, world.store.writes[writes_before:])
    for op in world.operations():
        where = world.bot.outbox.lookup(message_key(op.id))
        # Its card's renderings: edits, and its first post when the operation ended before the post
        # budget let the card out (the sender then posts its final rendering at once).
        shown = [
            c
            for c in api.calls
            if c.status == 200
            and where
            and (
                (c.method == "chat.update" and c.body.get("ts") == where[1])
                or (c.method == "chat.postMessage" and c.response.get("ts") == where[1])
            )
        ]
        done = [c.at for c in shown if "Completed" in all_text(c)]
        if done:
            storm.finals_after.append(min(done) - started)
    return storm


def check_storm(world: FleetWorld, storm: Storm) -> None:
    """Every sleep succeeded and ended on its final rendering in Slack, every occurrence closed, no
    refusal but scripted ones, no Tier method above its limit in any minute, every command answered
    (its ack and its reply), and the commands spread over the storm's whole length."""
    api = world.bot.api
    op_list = world.operations()
    assert sorted(op.target.cluster for op in op_list) == sorted(world.names)
    assert {(op.kind, op.state) for op in op_list} == {(OpKind.ZERO, OpState.SUCCEEDED)}, [
        (op.target.cluster, op.state.value, op.error) for op in op_list
    ]
    for op in op_list:  # every operation's message ends on its final rendering
        where = world.bot.outbox.lookup(message_key(op.id))
        assert where is not None, f"{op.id} was never posted"
        assert "Completed" in " ".join(str(v) for v in api.shown(*where).values()), op.id
    assert len(storm.finals_after) == len(op_list)
    for n in range(len(world.names)):
        closed = world.schedules.store.get_occurrence(f"nights-{n}:2026-03-02:sleep")
        assert closed is not None and closed.state == "done", f"nights-{n}"
    assert api.violations == [], "the bot was refused by Slack's limits"
    peaks = api.tier_peaks()
    for method, limit in TIER_LIMITS.items():
        assert peaks.get(method, 0) <= limit, f"{method}: {peaks[method]} in one minute"
    assert storm.acks, "no command was sent during the storm"
    assert {a.status for a in storm.acks} == {200}
    for ack in storm.acks:  # each command was served, not only acknowledged
        assert ack.cluster in all_text(world.bot.wait_reply(ack.response_url, timeout=30))
    sent = [a.sent - storm.started for a in storm.acks]
    assert min(sent) < 1.0 and max(sent) > storm.completed - 2.0, (
        f"the commands span the storm: sent {min(sent):.1f}-{max(sent):.1f}s, done at {storm.completed:.1f}s"
    )


def describe(world: FleetWorld, storm: Storm, what: str) -> str:
    """The figures docs/benchmarks.md quotes, as printed lines."""
    api = world.bot.api
    acks = [a.elapsed for a in storm.acks]
    took = [w.took for w in storm.writes]
    waited = [w.waited for w in storm.writes]
    peaks = api.tier_peaks()
    per_method = Counter(c.method for c in api.calls if c.status == 200 and c.at >= storm.started)
    lines = [
        f"fleet storm: {what}; sleeps done {storm.engine_done:.1f}s, Slack done {storm.completed:.1f}s "
        f"after the tick, finals in Slack {min(storm.finals_after):.1f}-{max(storm.finals_after):.1f}s; "
        f"load average {os.getloadavg()[0]:.1f}",
        f"  acks of {len(acks)} concurrent /scale status: p50 {percentile(acks, 50) * 1000:.0f} ms, "
        f"p99 {percentile(acks, 99) * 1000:.0f} ms, max {max(acks) * 1000:.0f} ms",
        f"  SQLite writes: {len(took)} in {storm.completed:.0f}s, p50 {percentile(took, 50) * 1000:.1f} ms, "
        f"p99 {percentile(took, 99) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms; waiting for the store "
        f"p99 {percentile(waited, 99) * 1000:.1f} ms, max {max(waited) * 1000:.1f} ms",
    ]
    for method, count in sorted(per_method.items()):
        limit = TIER_LIMITS.get(method)
        peak = peaks.get(method, 0)
        lines.append(f"  {method}: {count} calls, peak {peak} in any rolling minute, limit {limit or '-'}")
    return "\n".join(lines)


REAL_POOLS = {"a": 2, "b": 1}


@dataclass
class RealCluster:
    """A populated real control plane as one of the fleet's clusters."""

    handle: ClusterHandle
    nodes: list[str]
    """The kwok nodes of its two pools (what the sleep must remove)."""

    def nodes_left(self) -> list[str]:
        return sorted(n.name for n in self.handle.api.list_nodes() if n.name in self.nodes)


@contextmanager
def real_cluster(plane: Any, name: str) -> Iterator[RealCluster]:
    """Two label pools of kwok nodes (2 + 1) with a 3-replica Deployment on them in `plane`, seen as
    scalebot's ServiceAccount (the plane's scalebot kubeconfig); its nodes and namespace go after."""
    from engine.kube.client import KubeClient
    from localcluster import faults, objects

    unique = f"{name}-{secrets.token_hex(3)}"
    pool_key = f"{unique}.scalebot.test/pool"
    admin = plane.admin_api_client(pool_size=8)
    kube = KubeClient.from_config(kubeconfig=str(plane.scalebot_kubeconfig))
    namespace = f"fleet-{unique}"
    nodes: list[str] = []
    try:
        objects.create_namespace(admin, namespace)
        for pool, count in REAL_POOLS.items():
            full = f"{unique}-{pool}"
            nodes += objects.create_node_pool(admin, full, count, labels={pool_key: full, **group(unique)})
        deployment(admin, namespace, "web", 3, node_selector=group(unique))
        yield RealCluster(label_cluster(kube, pool_key, name=name), nodes)
    finally:
        objects.delete_nodes(admin, nodes)
        faults.release_namespace(admin, namespace)
        objects.delete_namespace(admin, namespace)
        kube.close()
        admin.close()

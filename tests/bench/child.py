"""The measured processes: run as `python -m tests.bench.child MODE --kubeconfig K --out FILE …`.

Each mode runs in a fresh interpreter of its own, so that its peak RSS (VmHWM) and CPU time are
its own and nothing the parent did (populating 30,000 pods) is counted. Results are written to
`--out` as JSON.

  zero   scalebot's zero-scale of every pool through the production path: `bot.runtime.wiring` builds the
         KubeClient (the product's `api_qps` / `api_burst` defaults, `engine.kube.ratelimit`, unless
         --api-qps / --api-burst set them) and LabelPoolProvider, `Operations.request` plans, locks
         and starts the operation, the runner cordons, drains (phase 1), removes the nodes and
         verifies. Optionally the Slack progress path (`bot.slack.delivery.progress.Progress` +
         `bot.slack.delivery.sender.Sender`)
         is attached against a local Web API, and the run can be profiled with cProfile.
  plan   `Operations.plan(zero)` (raw-JSON snapshot + `plan_operation`) against the same pod listing
         deserialised into the generated `V1PodList` models; alternating rounds, medians.
  night  one half of the realistic night: `Operations.request` of a zero-scale with workloads
         (workloads to zero, then every pool), or of the wake with workloads (pools back,
         workloads restored and awaited); production wiring, runner defaults, one SQLite file
         for both halves (as a scalebot restarted overnight keeps its database).
  evict  the bare eviction loop: one listing, then eviction POSTs for the same pods a drain
         evicts, from a thread pool of the drain's size, with the same client and QPS settings and
         no drain logic.

Every Kubernetes request of the process is counted by verb and resource (and timed) at the client's
REST layer, below both the KubeClient adapter and the pool provider's raw calls.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import pstats
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import orjson
from kubernetes.client import rest as k8s_rest

from engine.domain.clock import SystemClock
from engine.domain.model import PodInfo
from engine.domain.operation import OperationRequest, OpKind, ProgressEvent, Target
from engine.domain.settings import RunnerSettings
from engine.kube import projection
from engine.kube.client import PAGE_SIZE, KubeClient
from engine.kube.transport import Transport
from engine.operations.service import Operations, new_operations
from engine.store.database import Store
from tests.bench.planning_client import pod_from_dict, raw_as_builtins

CLUSTER = "bench"
REQUESTED_BY = "cli:bench"
SLACK_CHANNEL = "CBENCH"
PARALLEL_EVICTIONS = RunnerSettings().parallel_evictions
"""The drain's eviction concurrency (the runner's default); the bare loop uses the same."""
PHASE1_WINDOW = timedelta(hours=12)
"""Phase 1 only: the window is far longer than any run, so phase 2 (force) never starts."""


# -- request accounting -------------------------------------------------------------------------------


@dataclass
class RequestLog:
    """Every request sent through kubernetes.client's REST layer: counts, evictions' timings."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    statuses: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    eviction_spans: list[tuple[float, float, int, str]] = field(default_factory=list)
    """(sent, answered, HTTP status, workload) of every eviction POST."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, verb: str, resource: str, started: float, ended: float, status: int, url: str) -> None:
        with self.lock:
            self.counts[(verb, resource)] += 1
            self.statuses[(verb, resource, status)] += 1
            if resource == "pods/eviction":
                self.eviction_spans.append((started, ended, status, workload_of(url)))

    def to_json(self, covered: frozenset[str] = frozenset(), *, sample: int | None = None) -> dict[str, Any]:
        spans = sorted(self.eviction_spans)
        ok = [s for s in spans if 200 <= s[2] <= 299]
        ends = sorted(s[1] for s in ok)
        first_n = (
            {"sample": sample, "sample_seconds": ends[sample - 1] - spans[0][0]}
            if sample and len(ends) >= sample
            else {}
        )
        return {
            "counts": [[verb, res, n] for (verb, res), n in sorted(self.counts.items())],
            "statuses": [[verb, res, code, n] for (verb, res, code), n in sorted(self.statuses.items())],
            "evictions": {
                "posted": len(spans),
                "accepted": len(ok),
                "first_start": spans[0][0] if spans else None,
                "last_end": max((s[1] for s in spans), default=None),
                "last_accepted_end": max((s[1] for s in ok), default=None),
                **_latencies("", spans),
                **_latencies("pdb_", [s for s in spans if s[3] in covered]),
                **_latencies("free_", [s for s in spans if s[3] not in covered]),
                **first_n,
            },
        }


def workload_of(url: str) -> str:
    """The benchmark workload of an eviction URL: pods are named `<workload>-…` (w00042-7d9f-x2)."""
    parts = urlsplit(url).path.split("/")
    name = parts[-2] if len(parts) >= 2 else ""
    return name.split("-", 1)[0]


def _latencies(prefix: str, spans: list[tuple[float, float, int, str]]) -> dict[str, Any]:
    values = sorted(end - start for start, end, *_ in spans)
    return {
        f"{prefix}count": len(values),
        f"{prefix}latency_p50": _quantile(values, 0.5),
        f"{prefix}latency_p99": _quantile(values, 0.99),
        f"{prefix}latency_max": values[-1] if values else None,
    }


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def classify(method: str, url: str) -> tuple[str, str]:
    """(Kubernetes verb, resource[/subresource]) of a request, e.g. ("create", "pods/eviction")."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return method.lower(), "/" + "/".join(segments)
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method.upper())
    if verb is None:
        verb = "watch" if "watch=true" in parts.query.lower() else ("get" if name else "list")
    return verb, resource


def install_request_log() -> RequestLog:
    """Wrap RESTClientObject.request (every generated API call goes through it) and the drain's
    lean path (`Transport._urlopen`: evictions and pod deletions, which skip the generated layers)
    to count and time."""
    log = RequestLog()
    generated: Callable[..., Any] = k8s_rest.RESTClientObject.request
    lean: Callable[..., Any] = Transport._urlopen

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        return _logged(log, method, url, lambda: generated(self, method, url, *args, **kwargs))

    def urlopen(self: Transport, method: str, path_and_query: str, *args: Any, **kwargs: Any) -> Any:
        # The path says all `classify` and `workload_of` read; the host is the cluster's.
        return _logged(
            log, method, path_and_query, lambda: lean(self, method, path_and_query, *args, **kwargs)
        )

    k8s_rest.RESTClientObject.request = request  # type: ignore[method-assign]
    Transport._urlopen = urlopen  # type: ignore[method-assign]
    return log


def _logged(log: RequestLog, method: str, url: str, send: Callable[[], Any]) -> Any:
    """`send()`, its verb, resource, time and status recorded in `log` (a raised error's status)."""
    verb, resource_name = classify(method, url)
    started = time.monotonic()
    status = 0
    try:
        response = send()
        status = int(getattr(response, "status", 0) or 0)
        return response
    except Exception as exc:
        status = int(getattr(exc, "status", 0) or 0)
        raise
    finally:
        log.record(verb, resource_name, started, time.monotonic(), status, url)


# -- process figures ----------------------------------------------------------------------------------


def proc_status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- profiling ----------------------------------------------------------------------------------------


class ThreadProfiler:
    """cProfile in every thread: the operation runs on the runner's and the evictions' workers.

    cProfile profiles only the thread that enables it, so a `threading.setprofile` hook enables a
    profiler of its own in each thread started afterwards; the results are merged at the end.
    """

    def __init__(self) -> None:
        self._profilers: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def _hook(self, *_: Any) -> None:
        profiler = cProfile.Profile()
        with self._lock:
            self._profilers.append(profiler)
        profiler.enable()  # replaces this hook in the calling thread

    def start(self) -> None:
        threading.setprofile(self._hook)
        self._hook()

    def stop(self, path: Path, *, top: int = 30) -> dict[str, str]:
        threading.setprofile(None)
        with self._lock:
            profilers = list(self._profilers)
        for profiler in profilers:
            profiler.disable()
        stats: pstats.Stats | None = None
        for profiler in profilers:
            try:
                if stats is None:
                    stats = pstats.Stats(profiler)
                else:
                    stats.add(profiler)
            except TypeError:  # a thread that never made a call: no stats
                continue
        if stats is None:
            return {}
        stats.dump_stats(str(path))
        out: dict[str, str] = {"file": str(path), "threads": str(len(profilers))}
        for key, label in (("cumulative", "by_cumulative"), ("tottime", "by_tottime")):
            buffer = io.StringIO()
            pstats.Stats(str(path), stream=buffer).strip_dirs().sort_stats(key).print_stats(top)
            out[label] = buffer.getvalue()
        out["cpu_view"], out["waits"] = cpu_view(stats, top=top)
        return out


BLOCKING = (
    ("read' of '_ssl._SSLSocket", "waiting for the API server's answers (TLS socket reads)"),
    ("get' of '_queue.SimpleQueue", "idle worker threads (waiting for work)"),
    ("acquire' of '_thread.lock", "waiting on locks, events and futures (runner waits, results)"),
    ("time.sleep", "sleeping (time.sleep: the client-side rate limiter, pacing)"),
    ("poll' of 'select.poll", "waiting for sockets (connection checks)"),
    ("do_handshake", "TLS handshakes"),
)
"""Built-ins where a thread waits rather than computes (cProfile measures wall time per thread)."""


def cpu_view(stats: pstats.Stats, *, top: int) -> tuple[str, str]:
    """(functions by own time without the blocking built-ins, the blocking built-ins' totals)."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    waits: dict[str, float] = {}
    busy: list[tuple[float, float, int, str]] = []
    for (filename, line, name), (_, calls, own, cumulative, _) in raw.items():
        label = next((what for key, what in BLOCKING if key in name), None)
        if label is not None:
            waits[label] = waits.get(label, 0.0) + own
            continue
        where = f"{Path(filename).name}:{line}({name})" if filename != "~" else name
        busy.append((own, cumulative, calls, where))
    busy.sort(reverse=True)
    lines = [f"{'own s':>9} {'cum s':>9} {'calls':>9}  function"]
    lines += [f"{own:9.2f} {cum:9.2f} {calls:9d}  {where}" for own, cum, calls, where in busy[:top]]
    total = sum(own for own, *_ in busy)
    lines.append(f"{total:9.2f} {'':>9} {'':>9}  all functions above and below the cut, without the waits")
    wait_lines = [
        f"{seconds:9.1f}  {label}" for label, seconds in sorted(waits.items(), key=lambda kv: -kv[1])
    ]
    return "\n".join(lines), "\n".join(wait_lines)


# -- modes --------------------------------------------------------------------------------------------


@contextmanager
def slack_path(ops: Operations, url: str | None) -> Iterator[dict[str, Any]]:
    """Attach the production progress path (Progress + Sender) to a local Slack Web API."""
    info: dict[str, Any] = {}
    if not url:
        yield info
        return
    from bot.config.settings import Secret, SenderSettings, Settings, SlackSettings
    from bot.slack.app import web_client
    from bot.slack.delivery.outbox import MemoryOutbox
    from bot.slack.delivery.progress import Progress
    from bot.slack.delivery.sender import Sender

    settings = Settings(
        slack=SlackSettings(bot_token=Secret("xoxb-bench"), signing_secret=Secret("bench"), api_url=url),
        sender=SenderSettings(),
    )
    sender = Sender(web_client(settings, for_sender=True), MemoryOutbox(), settings=settings.sender)
    progress = Progress(ops, sender)
    sender.start()
    progress.start()
    try:
        yield info
    finally:
        started = time.monotonic()
        progress.flush(120.0)
        info["delivered"] = sender.flush(300.0)
        info["flush_seconds"] = time.monotonic() - started
        progress.stop()
        sender.stop()


def mode_zero(args: argparse.Namespace) -> dict[str, Any]:
    from bot.runtime import wiring

    requests = install_request_log()
    rss_start = proc_status_kib("VmRSS")
    profiler = ThreadProfiler() if args.profile else None
    if profiler is not None:
        profiler.start()
    # Without --api-qps: the production defaults (`api_qps`/`api_burst` of the config file).
    if args.api_qps is None:
        handle = wiring.connect_cluster(CLUSTER, kubeconfig=args.kubeconfig)
    else:
        handle = wiring.connect_cluster(
            CLUSTER, kubeconfig=args.kubeconfig, qps=args.api_qps, burst=args.api_burst
        )
    settings = RunnerSettings(graceful_window=PHASE1_WINDOW)
    if args.fixed_evictions:
        settings = dataclasses.replace(
            settings,
            parallel_evictions=args.fixed_evictions,
            max_parallel_evictions=args.fixed_evictions,
        )
    if args.adaptive_evictions:
        # The alternative to the fixed limit: AIMD from 16 in flight up to the per-cluster ceiling.
        settings = dataclasses.replace(settings, adaptive_evictions=True)
    with tempfile.TemporaryDirectory(prefix="scalebot-bench-") as tmp:
        ops = new_operations(
            Store(Path(tmp) / "scalebot.db"), {CLUSTER: handle}, {}, SystemClock(), settings=settings
        )
        events: list[dict[str, Any]] = []

        def listen(event: ProgressEvent) -> None:
            events.append(
                {
                    "at": time.monotonic(),
                    "kind": event.kind,
                    "text": event.text,
                    "step": event.operation.step,
                    "state": event.operation.state.value,
                    "condition": bool(event.condition),
                }
            )

        ops.subscribe(listen)
        cpu_start = cpu_seconds()
        with slack_path(ops, args.slack_url) as slack:
            started = time.monotonic()
            outcome = ops.request(
                OperationRequest(
                    kind=OpKind.ZERO,
                    target=Target(cluster=CLUSTER),
                    requested_by=REQUESTED_BY,
                    channel=SLACK_CHANNEL if args.slack_url else "",
                )
            )
            requested = time.monotonic()
            if not outcome.ok or outcome.operation is None:
                raise SystemExit(f"zero-scale refused: {outcome.reply}")
            finished = ops.runner.wait_idle(args.timeout)
            ended = time.monotonic()
        cpu_end = cpu_seconds()
        op = ops.get(outcome.operation.id)
        ops.runner.stop()
        assert op is not None
        profile = profiler.stop(Path(args.profile)) if profiler is not None else {}
        plan = outcome.operation.plan
        return {
            "started": started,
            "requested": requested,
            "ended": ended,
            "finished": finished,
            "state": op.state.value,
            "step": op.step,
            "error": op.error,
            "result": msgspec.to_builtins(op.summary),
            "force_deleted": len(op.progress.drain.force_deleted),
            "plan": {
                "nodes": len(plan.nodes),
                "pools": len(plan.pools),
                "force_phase": plan.force_phase,
                "blockers": len(plan.blockers),
            },
            "events": events,
            "requests": requests.to_json(read_covered(args.covered), sample=args.sample),
            "kube_client_counts": [[v, r, n] for (v, r), n in sorted(handle_counts(handle).items())],
            "rss_start_kib": rss_start,
            "vmhwm_kib": proc_status_kib("VmHWM"),
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "cpu_seconds": cpu_end - cpu_start,
            "slack": slack,
            "profile": profile,
        }


def mode_night(args: argparse.Namespace) -> dict[str, Any]:
    """One half of the realistic night (`--half sleep|wake`, `--db` kept between the halves):
    `Operations.request` of a zero-scale with workloads, or of the wake with workloads, with the
    production wiring and runner defaults: the calls `scalebot zero --workloads` and `scalebot wake
    --workloads` make (a schedule's own requests name pools only)."""
    from bot.runtime import wiring

    requests = install_request_log()
    handle = wiring.connect_cluster(CLUSTER, kubeconfig=args.kubeconfig)
    ops = new_operations(Store(Path(args.db)), {CLUSTER: handle}, {}, SystemClock())
    events: list[dict[str, Any]] = []
    ops.subscribe(
        lambda e: events.append(
            {"at": time.monotonic(), "kind": e.kind, "text": e.text, "step": e.operation.step}
        )
    )
    kind = OpKind.ZERO if args.half == "sleep" else OpKind.WAKE
    cpu_start = cpu_seconds()
    started = time.monotonic()
    outcome = ops.request(
        OperationRequest(kind=kind, target=Target(cluster=CLUSTER, workloads=True), requested_by=REQUESTED_BY)
    )
    if not outcome.ok or outcome.operation is None:
        raise SystemExit(f"{args.half} refused: {outcome.reply}")
    finished = ops.runner.wait_idle(args.timeout)
    ended = time.monotonic()
    op = ops.get(outcome.operation.id)
    ops.runner.stop()
    assert op is not None
    return {
        "started": started,
        "ended": ended,
        "finished": finished,
        "state": op.state.value,
        "error": op.error,
        "result": msgspec.to_builtins(op.summary),
        "workloads_planned": outcome.operation.plan.workloads,
        "counts": [[v, r, n] for (v, r), n in sorted(requests.counts.items())],
        "cpu_seconds": cpu_seconds() - cpu_start,
        "vmhwm_kib": proc_status_kib("VmHWM"),
        "events": events,
    }


def handle_counts(handle: Any) -> Counter[tuple[str, str]]:
    counts = getattr(handle.api, "request_counts", None)
    return Counter(counts) if counts is not None else Counter()


def mode_plan(args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client as k8s

    from bot.runtime import wiring
    from engine.planning import preflight as planning

    handle = wiring.connect_cluster(CLUSTER, kubeconfig=args.kubeconfig)
    with tempfile.TemporaryDirectory(prefix="scalebot-bench-") as tmp:
        ops = new_operations(Store(Path(tmp) / "scalebot.db"), {CLUSTER: handle}, {}, SystemClock())
        request = OperationRequest(
            kind=OpKind.ZERO, target=Target(cluster=CLUSTER), requested_by=REQUESTED_BY
        )
        core = k8s.CoreV1Api(handle.api.api_client)  # type: ignore[attr-defined]
        plan_s: list[float] = []
        snapshot_s: list[float] = []
        plan_only_s: list[float] = []
        models_s: list[float] = []
        raw_list_s: list[float] = []
        anatomy: list[dict[str, float]] = []
        by_page_size: dict[int, list[float]] = {size: [] for size in PAGE_SIZES}
        pods = 0
        summary = ""
        for round_no in range(args.rounds):
            # The production listing (fetch, typed decode, PodInfo) at each page size, in an order
            # that alternates round by round so that no size always runs first or last.
            order = PAGE_SIZES if round_no % 2 == 0 else tuple(reversed(PAGE_SIZES))
            for size in order:
                paged = KubeClient(handle.api.api_client, qps=0, page_size=size)  # type: ignore[attr-defined]
                t = time.monotonic()
                paged.list_pods_at(node_names=None)
                by_page_size[size].append(time.monotonic() - t)

            t = time.monotonic()
            result = ops.plan(request)
            plan_s.append(time.monotonic() - t)
            summary = result.summary()

            t = time.monotonic()
            snap = ops.snapshot(handle)
            snapshot_s.append(time.monotonic() - t)
            t = time.monotonic()
            planning.plan_operation(request.kind, request.target, snap, now=SystemClock().now())
            plan_only_s.append(time.monotonic() - t)
            pods = len(snap.pods)
            del snap

            t = time.monotonic()
            handle.api.list_pods()
            raw_list_s.append(time.monotonic() - t)

            anatomy.append(listing_anatomy(core))

            t = time.monotonic()
            listed = 0
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"limit": PAGE_SIZE}
                if token:
                    kwargs["_continue"] = token
                page = core.list_pod_for_all_namespaces(**kwargs)  # V1PodList of V1Pod models
                listed += len(page.items)
                token = page.metadata._continue if page.metadata is not None else None
                if not token:
                    break
            models_s.append(time.monotonic() - t)
            del page
        return {
            "rounds": args.rounds,
            "pods": pods,
            "models_pods": listed,
            "summary": summary,
            "plan_seconds": plan_s,
            "snapshot_seconds": snapshot_s,
            "plan_operation_seconds": plan_only_s,
            "raw_list_seconds": raw_list_s,
            "models_list_seconds": models_s,
            "plan_median": statistics.median(plan_s),
            "snapshot_median": statistics.median(snapshot_s),
            "plan_operation_median": statistics.median(plan_only_s),
            "raw_list_median": statistics.median(raw_list_s),
            "anatomy": {k: statistics.median(a[k] for a in anatomy) for k in anatomy[0]} if anatomy else {},
            "models_median": statistics.median(models_s),
            "page_size_seconds": {str(size): times for size, times in by_page_size.items()},
            "page_size_median": {str(size): statistics.median(times) for size, times in by_page_size.items()},
        }


PAGE_SIZES = (500, 2000, 5000, 0)
"""Pod listing page sizes the planning bench compares (0: one unpaginated answer)."""

_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


def listing_anatomy(core: Any) -> dict[str, float]:
    """Where a raw listing of every pod spends its time: the API server's answer (encoding and
    transfer, in pages of `PAGE_SIZE` as scalebot asks, and as one unpaginated answer), a full parse with
    orjson, the projected decode scalebot uses (engine.kube.projection), and building PodInfo.
    Pages are fetched as bytes; the continue token comes from the metadata at
    the head of each page, so nothing is parsed while the server is being timed."""
    pages: list[bytes] = []
    token = ""
    t = time.monotonic()
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        response = core.list_pod_for_all_namespaces(**kwargs)
        pages.append(bytes(response.data))
        response.release_conn()
        found = _CONTINUE.search(pages[-1][:4096])
        token = found.group(1).decode() if found else ""
        if not token:
            break
    fetch = time.monotonic() - t
    t = time.monotonic()
    response = core.list_pod_for_all_namespaces(_preload_content=False)
    whole = len(response.data)
    response.release_conn()
    unpaginated = time.monotonic() - t
    concurrent, concurrent_bytes = namespaces_concurrently(core, workers=NAMESPACE_STREAMS)
    t = time.monotonic()
    parsed = [orjson.loads(page) for page in pages]
    parse = time.monotonic() - t
    del parsed
    # The decode before typed decoding: Structs back to dicts, then the dict decode over them.
    t = time.monotonic()
    projected = [
        msgspec.to_builtins(projection._DECODER.decode(page), enc_hook=raw_as_builtins) for page in pages
    ]
    project = time.monotonic() - t
    t = time.monotonic()
    pods = [pod_from_dict(raw) for page in projected for raw in page.get("items") or ()]
    build = time.monotonic() - t
    del projected
    # What KubeClient.list_pods does now: the pages decoded straight into PodInfo.
    t = time.monotonic()
    typed = [pod for page in pages for pod in projection.decode_pod_page(page).items]
    typed_s = time.monotonic() - t
    if typed != pods:
        raise RuntimeError("the typed decode and the dict decode disagree on the benchmark's pods")
    return {
        "pages": float(len(pages)),
        "page_size": float(PAGE_SIZE),
        "pods": float(len(pods)),
        "megabytes": sum(len(p) for p in pages) / 1e6,
        "unpaginated_megabytes": whole / 1e6,
        "server_pages_seconds": fetch,
        "server_unpaginated_seconds": unpaginated,
        "orjson_seconds": parse,
        "projection_seconds": project,
        "podinfo_seconds": build,
        "typed_seconds": typed_s,
        "namespace_streams": float(NAMESPACE_STREAMS),
        "server_namespaces_seconds": concurrent,
        "namespaces_megabytes": concurrent_bytes / 1e6,
    }


NAMESPACE_STREAMS = 4
"""Concurrent per-namespace listings in the anatomy: bounded, as an API-server-friendly client
would be (each is its own paginated list of 500)."""


def namespaces_concurrently(core: Any, *, workers: int) -> tuple[float, int]:
    """Every pod fetched as bytes by namespace, `workers` namespaces at a time: (seconds, bytes)."""
    names = [ns.metadata.name for ns in core.list_namespace().items]

    def fetch(namespace: str) -> int:
        size, token = 0, ""
        while True:
            kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            response = core.list_namespaced_pod(namespace, **kwargs)
            data = bytes(response.data)
            response.release_conn()
            size += len(data)
            found = _CONTINUE.search(data[:4096])
            token = found.group(1).decode() if found else ""
            if not token:
                return size

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        total = sum(pool.map(fetch, names))
    return time.monotonic() - t, total


def mode_evict(args: argparse.Namespace) -> dict[str, Any]:
    requests = install_request_log()
    client = KubeClient.from_config(kubeconfig=args.kubeconfig, qps=args.qps, burst=args.burst)
    nodes = {n.name for n in client.list_nodes()}
    targets: list[PodInfo] = sorted(
        (
            p
            for p in client.list_pods(node_names=nodes)
            if not p.is_terminating and not (p.controller is not None and p.controller.kind == "DaemonSet")
        ),
        key=lambda p: p.key,  # the drain's order (engine.drain.filters.classify_pods sorts by namespace/name)
    )
    if args.order == "spread":
        targets = spread(targets)
    if args.limit:
        targets = targets[: args.limit]  # a sample: the rate over the first N, as scalebot's --sample
    failures: Counter[str] = Counter()

    def evict(pod: PodInfo) -> None:
        try:
            client.evict_pod(pod)
        except Exception as exc:  # counted, never retried: this loop measures the server, not a drain
            failures[type(exc).__name__] += 1

    cpu_start = cpu_seconds()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="evict") as pool:
        list(pool.map(evict, targets))
    ended = time.monotonic()
    client.close()
    return {
        "targets": len(targets),
        "started": started,
        "ended": ended,
        "failures": dict(failures),
        "qps": args.qps,
        "burst": args.burst,
        "workers": args.workers,
        "order": args.order,
        "limit": args.limit,
        "requests": requests.to_json(read_covered(args.covered)),
        "cpu_seconds": cpu_seconds() - cpu_start,
        "vmhwm_kib": proc_status_kib("VmHWM"),
    }


def spread(pods: list[PodInfo]) -> list[PodInfo]:
    """Round-robin over workloads: consecutive evictions never share a workload (hence a PDB)."""
    by_workload: dict[str, list[PodInfo]] = {}
    for pod in pods:
        by_workload.setdefault(pod.name.split("-", 1)[0], []).append(pod)
    queues = list(by_workload.values())
    out: list[PodInfo] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def read_covered(path: str | None) -> frozenset[str]:
    if not path:
        return frozenset()
    return frozenset(line.strip() for line in Path(path).read_text().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.child")
    parser.add_argument("mode", choices=("zero", "plan", "evict", "night"))
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=7200.0)
    parser.add_argument("--profile", help="zero: write merged cProfile stats of all threads here")
    parser.add_argument("--slack-url", help="zero: attach Progress + Sender to this Web API base URL")
    parser.add_argument("--rounds", type=int, default=3, help="plan: alternating rounds")
    parser.add_argument("--qps", type=float, default=50.0, help="evict: client QPS (0: no client limit)")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--api-qps", type=float, help="zero: scalebot's api_qps (default: the product's)")
    parser.add_argument("--api-burst", type=int, help="zero: scalebot's api_burst (with --api-qps)")
    parser.add_argument("--workers", type=int, default=PARALLEL_EVICTIONS)
    parser.add_argument(
        "--order",
        choices=("name", "spread"),
        default="name",
        help="evict: namespace/name order (the drain's) or round-robin over workloads",
    )
    parser.add_argument("--limit", type=int, help="evict: only the first N pods of the order")
    parser.add_argument("--sample", type=int, help="zero: also record how long the first N evictions took")
    parser.add_argument(
        "--fixed-evictions", type=int, help="zero: this many evictions in flight (the product's: 64)"
    )
    parser.add_argument(
        "--adaptive-evictions",
        action="store_true",
        help="zero: the adaptive (AIMD) eviction limit instead of the fixed one",
    )
    parser.add_argument("--covered", help="file of workload names under a PDB (for latency splits)")
    parser.add_argument("--half", choices=("sleep", "wake"), help="night: which half to run")
    parser.add_argument("--db", help="night: scalebot's SQLite file, kept from the sleep to the wake")
    args = parser.parse_args(argv)
    modes = {"zero": mode_zero, "plan": mode_plan, "evict": mode_evict, "night": mode_night}
    result = modes[args.mode](args)
    result["pid"] = os.getpid()
    Path(args.out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The realistic night: workloads to zero, then the pools; in the morning the pools and workloads back.

Two runs, each on a fresh cluster of the benchmark shape plus a few CronJobs (`add_cronjobs`):

  night             scalebot (`tests.bench.child night`: `Operations.request` of a zero-scale with
                    workloads, then of the wake with workloads; production wiring, runner defaults,
                    the `LabelPoolProvider` deleting the Node objects and re-creating them from their
                    templates, kwok making them Ready)
  night_downscaler  the anchor's workload half for real (`tests.bench.downscaler`: one
                    kube-downscaler cycle at the window's start, one at its end); its node half
                    (cluster-autoscaler at its defaults and tuned, Karpenter) is
                    `tests.bench.night_model`, applied in the report

An `Observer` reads the cluster as admin once a second (nodes of the pools, every workload's
replicas and availability, the CronJobs' suspend, the control plane's CPU time), the same way for
both runs; the times below come from its samples (so they are good to about a second).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster import bodies, rest, waits
from tests.bench import downscaler, night_model
from tests.bench.cluster import Cluster, Echo, Size, fresh_cluster, identity_requests
from tests.bench.scenarios import BenchError, populate_figures, run_child

POPULATE_LABEL = "scalebot.test/populate"
POPULATE_VALUE = "bench"
NODES_PER_CRONJOB = 10
CRONJOB_SCHEDULE = "0 0 1 1 *"
"""Once a year: no Job starts during a run, the CronJobs are there to be suspended and restored."""
OBSERVE_INTERVAL = 1.0


def add_cronjobs(cluster: Cluster) -> list[str]:
    """One CronJob per NODES_PER_CRONJOB nodes, spread over the workload namespaces, not suspended."""
    namespaces = [ns for ns in cluster.populate.namespaces if not ns.endswith("-system")]
    count = max(1, cluster.size.nodes // NODES_PER_CRONJOB)
    names: list[str] = []
    for i in range(count):
        namespace = namespaces[i % len(namespaces)]
        name = f"cron{i:04d}"
        pod = bodies.pod_spec(grace=cluster.size.grace_seconds)
        pod["restartPolicy"] = "Never"
        body = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name, "labels": {POPULATE_LABEL: POPULATE_VALUE}},
            "spec": {
                "schedule": CRONJOB_SCHEDULE,
                "suspend": False,
                "jobTemplate": {"spec": {"template": {"spec": pod}}},
            },
        }
        rest.create(cluster.admin, f"/apis/batch/v1/namespaces/{namespace}/cronjobs", body)
        names.append(f"{namespace}/{name}")
    return names


# -- what the observer reads --------------------------------------------------------------------------


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def workload_available(obj: Mapping[str, Any], original: int) -> bool:
    """A Deployment or StatefulSet back at `original` replicas, all updated and available."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if int(spec.get("replicas", 1)) != original:
        return False
    if (status.get("observedGeneration") or 0) < (obj["metadata"].get("generation") or 0):
        return False
    return (
        int(status.get("availableReplicas") or 0) == original
        and int(status.get("readyReplicas") or 0) == original
        and int(status.get("replicas") or 0) == original
    )


def workload_asleep(obj: Mapping[str, Any]) -> bool:
    """Scaled to zero and without a running pod left (terminating ones are not counted)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return int(spec.get("replicas", 1)) == 0 and int(status.get("replicas") or 0) == 0


@dataclass(frozen=True)
class Sample:
    at: float
    nodes: int
    ready_nodes: int
    available: int
    asleep: int
    workloads: int
    unsuspended: int
    cronjobs: int
    daemonset_ready: bool
    cpu: Mapping[str, float]

    def all_back(self, nodes: int) -> bool:
        return (
            self.ready_nodes == nodes
            and self.available == self.workloads
            and self.unsuspended == self.cronjobs
            and self.daemonset_ready
        )

    def all_asleep(self) -> bool:
        return self.asleep == self.workloads and self.unsuspended == 0


@dataclass
class Observer:
    """Samples the cluster as admin every OBSERVE_INTERVAL seconds in a thread, until stopped."""

    cluster: Cluster
    originals: Mapping[str, int]
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def read(self) -> Sample:
        admin, selector = self.cluster.admin, f"{POPULATE_LABEL}={POPULATE_VALUE}"
        nodes = rest.list_items(admin, rest.node_path(), label_selector=bodies.POOL_LABEL)
        workloads = [
            *rest.list_items(admin, "/apis/apps/v1/deployments", label_selector=selector),
            *rest.list_items(admin, "/apis/apps/v1/statefulsets", label_selector=selector),
        ]
        cronjobs = rest.list_items(admin, "/apis/batch/v1/cronjobs", label_selector=selector)
        daemonsets = rest.list_items(admin, "/apis/apps/v1/daemonsets", label_selector=selector)
        ready = sum(1 for n in nodes if waits.node_is_ready(n))
        ds_ready = bool(daemonsets) and all(
            int((d.get("status") or {}).get("numberAvailable") or 0) == ready
            and int((d.get("status") or {}).get("desiredNumberScheduled") or 0) == ready
            for d in daemonsets
        )
        return Sample(
            at=time.monotonic(),
            nodes=len(nodes),
            ready_nodes=ready,
            available=sum(1 for w in workloads if workload_available(w, self.originals.get(_key(w), -1))),
            asleep=sum(1 for w in workloads if workload_asleep(w)),
            workloads=len(workloads),
            unsuspended=sum(1 for c in cronjobs if not (c.get("spec") or {}).get("suspend")),
            cronjobs=len(cronjobs),
            daemonset_ready=ds_ready,
            cpu=self.cluster.component_cpu_seconds(),
        )

    def start(self) -> Observer:
        self.samples.append(self.read())
        self._thread = threading.Thread(target=self._loop, name="bench-night-observer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sample:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        last = self.read()
        self.samples.append(last)
        return last

    def _loop(self) -> None:
        while not self._stop.wait(OBSERVE_INTERVAL):
            try:
                self.samples.append(self.read())
            except Exception as exc:  # a slow answer under load: the next tick reads again
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def first(self, after: float, test: Any) -> Sample | None:
        return next((s for s in self.samples if s.at >= after and test(s)), None)

    def nearest(self, at: float) -> Sample:
        return min(self.samples, key=lambda s: abs(s.at - at))


def read_originals(cluster: Cluster) -> dict[str, int]:
    selector = f"{POPULATE_LABEL}={POPULATE_VALUE}"
    return {
        _key(w): int((w.get("spec") or {}).get("replicas", 1))
        for path in ("/apis/apps/v1/deployments", "/apis/apps/v1/statefulsets")
        for w in rest.list_items(cluster.admin, path, label_selector=selector)
    }


MORNING_SECONDS = 1800.0
"""How long the scalebot half watches, after its wake, for every workload to be Available."""


def wait_quiet(cluster: Cluster, *, reads: int = 3, timeout: float = 600.0) -> None:
    """Until no workload or CronJob of the benchmark changed over `reads` reads a second apart.

    Before each half of both runs: a controller's late status update would otherwise conflict with
    an update sent right after (kube-downscaler's whole-object updates carry the resourceVersion),
    which a night of hours never sees."""
    selector = f"{POPULATE_LABEL}={POPULATE_VALUE}"
    seen: list[int] = []

    def newest() -> int:
        return max(
            (
                int(obj["metadata"]["resourceVersion"])
                for path in (
                    "/apis/apps/v1/deployments",
                    "/apis/apps/v1/statefulsets",
                    "/apis/batch/v1/cronjobs",
                )
                for obj in rest.list_items(cluster.admin, path, label_selector=selector)
            ),
            default=0,
        )

    def quiet() -> bool:
        seen.append(newest())
        return len(seen) >= reads and len(set(seen[-reads:])) == 1

    waits.wait_until(quiet, timeout, "the workloads to settle", interval=1.0, max_interval=1.0)


def _cpu_between(a: Sample, b: Sample) -> dict[str, float]:
    return {name: b.cpu.get(name, 0.0) - value for name, value in a.cpu.items()}


def _since(sample: Sample | None, start: float) -> float | None:
    return None if sample is None else sample.at - start


def final_state(last: Sample, size: Size) -> dict[str, Any]:
    return {
        "nodes": last.nodes,
        "ready_nodes": last.ready_nodes,
        "expected_nodes": size.nodes,
        "workloads": last.workloads,
        "available": last.available,
        "cronjobs": last.cronjobs,
        "unsuspended": last.unsuspended,
        "daemonset_ready": last.daemonset_ready,
        "all_back": last.all_back(size.nodes),
    }


# -- the runs -----------------------------------------------------------------------------------------


def run_night(size: Size, *, echo: Echo) -> dict[str, Any]:
    """scalebot's night on a fresh cluster: sleep with workloads, then the wake, in one child."""
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        cronjobs = add_cronjobs(cluster)
        originals = read_originals(cluster)
        observer = Observer(cluster, originals).start()
        echo(
            f"night: scalebot puts {len(originals)} workloads, {len(cronjobs)} CronJobs and "
            f"{size.nodes} nodes to sleep, then wakes them ..."
        )
        load_before = os.getloadavg()
        halves: dict[str, Any] = {}
        db = Path(tmp) / "scalebot.db"
        try:
            for half in ("sleep", "wake"):
                wait_quiet(cluster)
                before = cluster.metrics()
                workdir = Path(tmp) / half
                workdir.mkdir()
                args = ["--half", half, "--db", str(db), "--timeout", "7200"]
                kubeconfig = cluster.cp.scalebot_kubeconfig
                out, maxrss = run_child("night", kubeconfig, args, timeout=7500, workdir=workdir)
                out.update(maxrss_kib=maxrss, identity_requests=identity_requests(before, cluster.metrics()))
                halves[half] = out
                if half == "sleep":
                    if out["state"] != "succeeded":
                        break
                    # The night: the pools stay at zero until the observer has seen it (or it never comes).
                    waits.wait_until(
                        lambda since=out["started"]: observer.first(since, lambda s: s.nodes == 0),
                        120.0,
                        "the observer to see zero nodes after the sleep",
                        interval=0.5,
                        max_interval=1.0,
                    )
            woken = halves.get("wake") or {}
            if woken.get("state") == "succeeded":
                # The wake ends once its workloads are back or `workloads_return_timeout` passed: at
                # 1,000 nodes this machine starts pods more slowly than that. The morning ends when
                # every workload is Available, as the downscaler half's does, so keep watching.
                with contextlib.suppress(waits.WaitTimeout):
                    waits.wait_until(
                        lambda since=woken["started"]: observer.first(
                            since, lambda s: s.all_back(size.nodes)
                        ),
                        MORNING_SECONDS,
                        "every workload Available after the wake",
                        interval=1.0,
                        max_interval=2.0,
                    )
        finally:
            last = observer.stop()
        sleep, wake = halves["sleep"], halves.get("wake") or {}
        zero = observer.first(sleep["started"], lambda s: s.nodes == 0)
        asleep = observer.first(sleep["started"], lambda s: s.all_asleep())
        back = observer.first(wake.get("started", float("inf")), lambda s: s.all_back(size.nodes))
        nodes_back = observer.first(wake.get("started", float("inf")), lambda s: s.ready_nodes == size.nodes)
        start_sample = observer.nearest(sleep["started"])
        mid_sample = observer.nearest(sleep["ended"])
        removed = next((e["at"] for e in sleep["events"] if e["step"] == "verify"), None)
        return {
            "size": size.name,
            "populate": populate_figures(cluster),
            "cronjobs": len(cronjobs),
            "workloads": len(originals),
            "sleep": sleep,
            "wake": wake,
            "zero_nodes_seconds": _since(zero, sleep["started"]),
            "removed_seconds": None if removed is None else removed - sleep["started"],
            "workloads_asleep_seconds": _since(asleep, sleep["started"]),
            "nodes_ready_seconds": _since(nodes_back, wake.get("started", 0.0)),
            "available_seconds": _since(back, wake.get("started", 0.0)),
            "child_maxrss_kib": max(h["maxrss_kib"] for h in halves.values()),
            "identity_requests": sum(h["identity_requests"] for h in halves.values()),
            "component_cpu_seconds": {
                "sleep": _cpu_between(start_sample, mid_sample),
                "wake": _cpu_between(observer.nearest(wake.get("started", sleep["ended"])), last),
            },
            "loadavg_during": [load_before[0], os.getloadavg()[0]],
            "final": final_state(last, size),
            "observer_errors": observer.errors[:10],
            "samples": len(observer.samples),
        }


def run_night_downscaler(
    size: Size, *, echo: Echo, max_cycles: int = 20, wait_seconds: float = 1800.0
) -> dict[str, Any]:
    """The anchor's workload half on a fresh cluster: kube-downscaler's cycle at the window's start
    (until every pod is gone), its cycle at the window's end (until every workload is Available,
    on the nodes that are still there: cluster-autoscaler's removal and re-creation are modelled)."""
    with fresh_cluster(size, echo=echo) as cluster, tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        cronjobs = add_cronjobs(cluster)
        originals = read_originals(cluster)
        kubeconfig = downscaler.install_identity(
            cluster.admin, cluster.cp.api_url, cluster.cp.ca_file, Path(tmp) / "kube-downscaler.kubeconfig"
        )
        api = rest.api_client_from_kubeconfig(kubeconfig, pool_size=2)
        loop = downscaler.Downscaler(api)
        observer = Observer(cluster, originals).start()
        echo(
            f"night_downscaler: kube-downscaler's cycle over {len(originals)} workloads and "
            f"{len(cronjobs)} CronJobs ..."
        )
        result: dict[str, Any] = {
            "size": size.name,
            "populate": populate_figures(cluster),
            "cronjobs": len(cronjobs),
            "workloads": len(originals),
        }
        load_before = os.getloadavg()
        try:
            for half, test in (("sleep", Sample.all_asleep), ("wake", lambda s: s.all_back(size.nodes))):
                wait_quiet(cluster)
                before, cpu_before = cluster.metrics(), cluster.component_cpu_seconds()
                started = time.monotonic()
                cycles = [loop.cycle(half)]
                # An update that met a conflict is retried by the loop's next tick (the original's
                # --max-retries-on-conflict is 0): the cycles are run back to back here, and the
                # model adds an interval for each one after the first.
                while cycles[-1].failures and len(cycles) < max_cycles:
                    cycles.append(loop.cycle(half))
                try:
                    done = waits.wait_until(
                        lambda t=test, since=started: observer.first(since, t),
                        wait_seconds,
                        f"the downscaler's {half}",
                        interval=0.5,
                        max_interval=1.0,
                    )
                except waits.WaitTimeout as exc:
                    failures = [f for c in cycles for f in c.failures][-5:]
                    raise BenchError(
                        f"{exc}; last sample {observer.samples[-1]}; failures {failures}"
                    ) from exc
                after, cpu_after = cluster.metrics(), cluster.component_cpu_seconds()
                result[half] = {
                    "started": started,
                    "cycles": [c.to_json() for c in cycles],
                    "cycle_seconds": cycles[0].seconds,
                    "done_seconds": done.at - started,
                    "after_cycle_seconds": done.at - started - sum(c.seconds for c in cycles),
                    "identity_requests": identity_requests(before, after),
                    "component_cpu_seconds": {k: cpu_after.get(k, 0.0) - v for k, v in cpu_before.items()},
                }
        finally:
            api.close()
            last = observer.stop()
        result["loadavg_during"] = [load_before[0], os.getloadavg()[0]]
        result["final"] = final_state(last, size)
        result["nodes_left_after_sleep"] = size.nodes  # nothing removes them: cluster-autoscaler is modelled
        return result


# -- the report -----------------------------------------------------------------------------------------


def measured(half: Mapping[str, Any]) -> night_model.Measured:
    """One half of the downscaler run as the model's measured input."""
    return night_model.Measured(
        cycle_seconds=sum(c["seconds"] for c in half["cycles"]),
        after_cycle_seconds=half["after_cycle_seconds"],
        cycles=len(half["cycles"]),
    )


def anchor_timelines(
    anchor: Mapping[str, Any], *, nodes: int, pools: int, worst: bool = False, tuned: bool = False
) -> tuple[night_model.Timeline, night_model.Timeline]:
    """The anchor with cluster-autoscaler: its defaults, or as tuned for nights (`tuned`)."""
    settings = night_model.Anchor(
        worst=worst, ca=night_model.TUNED_CA if tuned else night_model.AutoscalerDefaults()
    )
    return (
        night_model.night(nodes=nodes, measured=measured(anchor["sleep"]), anchor=settings),
        night_model.morning(pools=pools, measured=measured(anchor["wake"]), anchor=settings),
    )


def karpenter_timelines(
    anchor: Mapping[str, Any], *, nodes: int, pools: int, worst: bool = False
) -> tuple[night_model.Timeline, night_model.Timeline]:
    """The anchor with Karpenter's empty-node consolidation and provisioning (one NodePool a pool)."""
    settings = night_model.Anchor(worst=worst)
    return (
        night_model.karpenter_night(
            nodes=nodes, pools=pools, measured=measured(anchor["sleep"]), anchor=settings
        ),
        night_model.karpenter_morning(measured=measured(anchor["wake"]), anchor=settings),
    )


def _s(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 90:
        return f"{value / 60:.1f} min ({value:.0f} s)"
    return f"{value:.1f} s"


def _requests(counts: Sequence[Sequence[Any]]) -> str:
    merged: dict[str, int] = {}
    for verb, resource, n in counts:
        key = f"{verb} {resource or '(discovery)'}"
        merged[key] = merged.get(key, 0) + int(n)
    return ", ".join(f"{k} {v:,}" for k, v in sorted(merged.items(), key=lambda kv: -kv[1]))


def _table(rows: Sequence[tuple[str, str]]) -> list[str]:
    return ["| figure | value |", "|---|---|", *(f"| {figure} | {value} |" for figure, value in rows), ""]


def _scalebot_rows(sb: Mapping[str, Any]) -> list[tuple[str, str]]:
    sleep, wake = sb["sleep"], sb["wake"]
    cpu = sb["component_cpu_seconds"]
    sleep_op = f"{_s(sleep['ended'] - sleep['started'])}: {sleep['state']}"
    zero_text = f"**{_s(sb['zero_nodes_seconds'])}** ({_s(sb.get('removed_seconds'))})"
    wake_op = f"{_s(wake.get('ended', 0) - wake.get('started', 0))}: {wake.get('state')}"
    return [
        ("sleep requested → every workload at zero, no pod running", _s(sb["workloads_asleep_seconds"])),
        ("sleep requested → **zero nodes** (observer; the remove step ended at)", zero_text),
        ("sleep operation until `succeeded` (verify included)", sleep_op),
        ("wake requested → every node Ready", _s(sb["nodes_ready_seconds"])),
        (
            "wake requested → **every workload Available** at its replicas, CronJobs unsuspended",
            f"**{_s(sb['available_seconds'])}**",
        ),
        ("wake operation until `succeeded` (workloads awaited)", wake_op),
        (
            "API requests of scalebot's identity: sleep / wake (API server, APF flow)",
            f"{sleep['identity_requests']:,.0f} / {wake.get('identity_requests', 0):,.0f}",
        ),
        ("— sleep, by verb and resource (client)", _requests(sleep["counts"])),
        ("— wake, by verb and resource (client)", _requests(wake.get("counts") or [])),
        (
            "scalebot peak RSS: sleep / wake (a process each, one SQLite file)",
            f"{sleep['maxrss_kib'] / 1024:.0f} MiB / {wake.get('maxrss_kib', 0) / 1024:.0f} MiB",
        ),
        ("scalebot CPU: sleep / wake", f"{sleep['cpu_seconds']:.1f} s / {wake.get('cpu_seconds', 0):.1f} s"),
        ("control plane CPU, sleep", f"{sum(cpu['sleep'].values()):.1f} s ({_cpu_parts(cpu['sleep'])})"),
        ("control plane CPU, wake", f"{sum(cpu['wake'].values()):.1f} s ({_cpu_parts(cpu['wake'])})"),
        ("after the wake", _final(sb["final"])),
    ]


def _anchor_rows(anchor: Mapping[str, Any]) -> list[tuple[str, str]]:
    sleep, wake = anchor["sleep"], anchor["wake"]
    requests = f"{sleep['identity_requests']:,.0f} / {wake['identity_requests']:,.0f}"
    cpu = [sum(half["component_cpu_seconds"].values()) for half in (sleep, wake)]
    return [
        (
            f"sleep cycle ({downscaler.RELEASE}: list the namespaces, every pod and every kind, "
            "patch each object in turn)",
            f"{_s(sleep['cycle_seconds'])}, {_changed(sleep)}",
        ),
        ("cycle end → every workload at zero, no pod running", _s(sleep["after_cycle_seconds"])),
        ("wake cycle", f"{_s(wake['cycle_seconds'])}, {_changed(wake)}"),
        ("wake cycle end → every workload Available (nodes still there)", _s(wake["after_cycle_seconds"])),
        ("API requests of its identity: sleep / wake (API server, APF flow)", requests),
        ("control plane CPU: sleep / wake", f"{cpu[0]:.1f} s / {cpu[1]:.1f} s"),
        ("after its wake", _final(anchor["final"])),
    ]


def _timeline_lines(
    anchor: Mapping[str, Any], size: Size, *, worst: bool, karpenter: bool = False
) -> list[str]:
    if karpenter:
        night_t, morning_t = karpenter_timelines(anchor, nodes=size.nodes, pools=size.pools, worst=worst)
    else:
        night_t, morning_t = anchor_timelines(anchor, nodes=size.nodes, pools=size.pools, worst=worst)
    label = "at worst (every loop just missed)" if worst else "typically (half an interval per loop)"
    who = "Karpenter" if karpenter else "cluster-autoscaler (defaults)"
    return [
        f"The anchor's timeline {label}, **{who} modelled** (`tests/bench/night_model.py`):",
        "",
        "| phase | seconds | source |",
        "|---|---|---|",
        *(
            f"| {p.name} | {p.seconds:.1f} | {p.source}{f': {p.why}' if p.why else ''} |"
            for t in (night_t, morning_t)
            for p in t.phases
        ),
        f"| **to zero nodes** | **{_s(night_t.total)}** | |",
        f"| **to every workload Available** | **{_s(morning_t.total)}** | |",
        "",
    ]


def markdown(runs: Mapping[str, Any], *, size: Size) -> list[str]:
    """The figures of one size's night and anchor as markdown lines (tables and the model's phases)."""
    lines: list[str] = []
    sb, anchor = runs.get("night"), runs.get("night_downscaler")
    if sb is not None:
        load = sb["loadavg_during"]
        lines += [
            f"scalebot, {size.describe()} plus {sb['cronjobs']} CronJobs ({sb['workloads']} Deployments "
            f"and StatefulSets); load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the "
            f"end; commit {sb.get('commit', '?')}:",
            "",
            *_table(_scalebot_rows(sb)),
        ]
    if anchor is not None:
        load = anchor["loadavg_during"]
        lines += [
            "The anchor's workload half, measured (kube-downscaler's cycle re-implemented, its own "
            f"ServiceAccount, a fresh cluster of the same shape); load average (1 min) {load[0]:.1f} → "
            f"{load[1]:.1f}; commit {anchor.get('commit', '?')}:",
            "",
            *_table(_anchor_rows(anchor)),
            *_timeline_lines(anchor, size, worst=False),
            *_timeline_lines(anchor, size, worst=True),
            *_timeline_lines(anchor, size, worst=False, karpenter=True),
        ]
    if sb is not None and anchor is not None:
        night_t, morning_t = anchor_timelines(anchor, nodes=size.nodes, pools=size.pools)
        tuned_night, tuned_morning = anchor_timelines(anchor, nodes=size.nodes, pools=size.pools, tuned=True)
        karp_night, karp_morning = karpenter_timelines(anchor, nodes=size.nodes, pools=size.pools)
        cloud_zero, cloud_back = night_model.scalebot_in_the_cloud(
            zero_nodes_seconds=sb["zero_nodes_seconds"] or 0.0,
            available_seconds=sb["available_seconds"] or 0.0,
        )
        # A figure the run did not observe stays unknown with the cloud's times added too.
        if sb["zero_nodes_seconds"] is None:
            cloud_zero = None
        if sb["available_seconds"] is None:
            cloud_back = None
        cloud = night_model.CloudAssumptions()
        lines += [
            "Side by side (the anchors' typical case, workloads measured and the autoscalers "
            "modelled; the cloud's times added to scalebot's measured "
            f"figures with the same assumptions: {cloud.node_gone_seconds:g} s for instances to stop, "
            f"{cloud.provision_seconds:g} s to provision):",
            "",
            "| | scalebot (measured) | scalebot + cloud times | anchor: CA defaults | anchor: CA tuned "
            "(unneeded 1m, parallelism 100) | anchor: Karpenter (empty-node consolidation) |",
            "|---|---|---|---|---|---|",
            f"| to zero nodes | {_s(sb['zero_nodes_seconds'])} | {_s(cloud_zero)} | {_s(night_t.total)} "
            f"| {_s(tuned_night.total)} | {_s(karp_night.total)} |",
            f"| to every workload Available | {_s(sb['available_seconds'])} | {_s(cloud_back)} "
            f"| {_s(morning_t.total)} | {_s(tuned_morning.total)} | {_s(karp_morning.total)} |",
            "",
        ]
    return lines


def _cpu_parts(cpu: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))


def _changed(half: Mapping[str, Any]) -> str:
    changed: dict[str, int] = {}
    for cycle in half["cycles"]:
        for kind, n in cycle["changed"].items():
            changed[kind] = changed.get(kind, 0) + int(n)
    text = ", ".join(f"{n} {kind}" for kind, n in sorted(changed.items()))
    failed = sum(len(c["failures"]) for c in half["cycles"])
    return f"{len(half['cycles'])} cycle(s), {text} patched" + (f", {failed} failed" if failed else "")


def _final(final: Mapping[str, Any]) -> str:
    return (
        f"{final['ready_nodes']}/{final['expected_nodes']} nodes Ready, "
        f"{final['available']}/{final['workloads']} workloads Available, "
        f"{final['unsuspended']}/{final['cronjobs']} CronJobs unsuspended"
    )


def write_section(path: Path, size: str, lines: Sequence[str]) -> None:
    """Replace the generated part of the night section for `size` in the markdown file, between
    `<!-- night:SIZE:begin -->` and `<!-- night:SIZE:end -->`; the rest of the file stays as it is."""
    begin, end = f"<!-- night:{size}:begin -->", f"<!-- night:{size}:end -->"
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {begin} … {end} markers: add them where the figures go")
    head, after = text.split(begin, 1)
    _, tail = after.split(end, 1)
    path.write_text(head + begin + "\n" + "\n".join(lines).rstrip("\n") + "\n" + end + tail)

"""WorkloadScaler: read the cluster, let `plan` decide, send the patches, report.

Owns the I/O loop around the pure planner and nothing else: one listing per kind for a snapshot,
one merge patch per object to change (each guarded by the resourceVersion it was decided on; the
objects of one wake order side by side, `WRITES_IN_FLIGHT` at a time, see `_batches`), and on
a 409 a fresh read of that one object and a new decision, so a concurrent writer is never
overwritten and a recorded original is always the value the object had when scalebot changed it.

Persistence: `sleep(record=...)` hands each record to the caller's database, and the scaler writes it
to scalebot's own ConfigMap `scalebot-workloads`, both *before* its patch is sent, so the original
is kept before the object changes (engine-semantics §7, "record before acting") and survives a lost
database. Nothing is written on the workloads but the field scalebot changes (replicas go through
the `scale` subresource).

GitOps owners (`gitops: pause`) are written the same way, before the workloads they apply; a
workload whose owner could not be paused is not scaled down (its owner would put it back).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from engine.domain.clock import Clock, SystemClock
from engine.kube import errors
from engine.workloads.api import WorkloadApi
from engine.workloads.config import WorkloadConfig
from engine.workloads.gitops import claimed_kinds
from engine.workloads.model import (
    ORIGINALS_CONFIGMAP,
    OWNER_KINDS,
    HpaInfo,
    Kind,
    StoredOriginals,
    WorkloadInfo,
    WorkloadRecord,
    object_key,
)
from engine.workloads.order import wake_order
from engine.workloads.plan import (
    Decision,
    WorkloadPlan,
    WorkloadSnapshot,
    decide_wake,
    is_owner_key,
    notes_for_hpas,
    originals_after_wake,
    plan_sleep,
    plan_wake,
    with_workload,
)
from engine.workloads.report import Availability, Outcome, WorkloadReport, compute_availability

if TYPE_CHECKING:
    from engine.kube.client import KubeClient

T = TypeVar("T")

WRITES_IN_FLIGHT = 16
"""Workloads changed at once within one batch (`_batches`). One at a time, a night of 1,000 workloads
spent 4.1 min in its workloads step on a busy API server: three requests each (the record, the
ConfigMap's copy, the patch), every one waiting for the last (docs/benchmarks.md, realistic night,
"1,000 nodes (full), measured"). A batch's records go first, together (`_record_ahead`); then
only the patches are side by side."""

CONFLICT_ATTEMPTS = 8
CONFLICT_BACKOFF_SECONDS = 0.01
CONFLICT_BACKOFF_CAP_SECONDS = 0.5
"""A 409 is usually the workload's own controller writing its status (resourceVersion moves with
every status write, many times a second while pods come and go): re-read, decide again, retry
after 10, 20, 40 ... 500 ms. Eight attempts span about 1.5 s, longer than such bursts last."""
ORIGINALS_WRITE_BYTES = 256 * 1024
"""The most record text one ConfigMap write of a batch carries (`_record_ahead`): a few writes for a
thousand records, each request well under the API server's limits (3 MiB a request body, 1 MiB an
object: the ConfigMap's own size bounds how many records it can hold at all)."""

RecordSink = Callable[[WorkloadRecord], None]


@dataclass
class _RecordedAhead:
    """What a batch recorded before its patches, both by object key (`WorkloadRecord.key`): the
    record given to `record` and the record whose original is in the ConfigMap (a decision with
    another record, after a 409, records itself again)."""

    recorded: dict[str, WorkloadRecord] = field(default_factory=dict)
    kept: dict[str, WorkloadRecord] = field(default_factory=dict)


def _needs_original(decision: Decision, stored: StoredOriginals) -> WorkloadRecord | None:
    """The record whose original must reach the ConfigMap before this decision's patch: a change's,
    unless the ConfigMap holds that very record already."""
    r = decision.record
    if decision.category != "change" or r is None or stored.records.get(r.key) == r:
        return None
    return r


def _originals_in_chunks(records: Sequence[WorkloadRecord], limit: int) -> list[dict[str, str]]:
    """The records' ConfigMap entries (`data_key` to JSON), in writes of at most `limit` characters
    each (one record larger than `limit` is a write of its own)."""
    chunks: list[dict[str, str]] = []
    size = limit
    for r in records:
        text = r.to_json()
        length = len(r.data_key) + len(text)
        if size + length > limit and (not chunks or chunks[-1]):
            chunks.append({})
            size = 0
        chunks[-1][r.data_key] = text
        size += length
    return chunks


class WorkloadScaler:
    def __init__(
        self,
        api: WorkloadApi,
        config: WorkloadConfig | None = None,
        *,
        clock: Clock | None = None,
        conflict_attempts: int = CONFLICT_ATTEMPTS,
        writes_in_flight: int = WRITES_IN_FLIGHT,
    ) -> None:
        self._api = api
        self.config = config or WorkloadConfig()
        self._clock = clock or SystemClock()
        self._attempts = conflict_attempts
        self._writes_in_flight = writes_in_flight

    @classmethod
    def from_kube_client(
        cls, kube: KubeClient, config: WorkloadConfig | None = None, *, clock: Clock | None = None
    ) -> WorkloadScaler:
        from engine.workloads.kube import KubeWorkloadApi  # keeps `kubernetes` out of pure imports

        return cls(KubeWorkloadApi(kube), config, clock=clock)

    def through(self, wrap: Callable[[WorkloadApi], WorkloadApi]) -> WorkloadScaler:
        """The same scaler acting through `wrap(api)` (the runner's fenced writes)."""
        return WorkloadScaler(
            wrap(self._api), self.config, clock=self._clock, conflict_attempts=self._attempts
        )

    # -- reading -------------------------------------------------------------------------------

    def snapshot(self, kinds: Collection[Kind] | None = None) -> WorkloadSnapshot:
        """Namespaces, `kinds` (default: the configured ones), HPAs and, if KEDA is installed, ScaledObjects.

        ScaledObjects are listed whenever KEDA is there, even if not a configured kind: a Deployment
        KEDA scales must not be scaled behind its back. KEDA discovery and the HPA listing are
        advisory: their failures become warnings, not errors.
        """
        warnings: list[Outcome] = []
        wanted = self.config.kinds if kinds is None else kinds
        listed = [k for k in (Kind.DEPLOYMENT, Kind.STATEFULSET, Kind.CRONJOB) if k in wanted]
        workloads = [w for kind in listed for w in self._api.list_workloads(kind)]
        keda = self._advisory(warnings, "ScaledObjects", self._api.has_keda, default=False)
        if keda:
            no_scaledobjects: list[WorkloadInfo] = []
            workloads += self._advisory(
                warnings, "ScaledObjects", self._list_scaledobjects, default=no_scaledobjects
            )
        no_hpas: list[HpaInfo] = []
        hpas = self._advisory(warnings, "HorizontalPodAutoscalers", self._api.list_hpas, default=no_hpas)
        # Not advisory: without the ConfigMap a second sleep could not tell a day-time value from
        # the night value it set, and a wake without records would find nothing to restore.
        stored = StoredOriginals.from_data(self._api.read_originals(self.config.own_namespace))
        warnings += [
            Outcome(self._configmap_key, f"key {k} is unreadable; ignored (fix or remove it)")
            for k in stored.unreadable
        ]
        # Owners are listed only when some workload names one, or a record of one waits for a wake.
        owner_kinds = claimed_kinds(workloads) | {r.kind for r in stored.records.values()} | set(wanted)
        owners: list[WorkloadInfo] = []
        for kind in sorted(owner_kinds & OWNER_KINDS):
            none: list[WorkloadInfo] = []
            owners += self._advisory(
                warnings, f"{kind}s", partial(self._api.list_workloads, kind), default=none
            )
        return WorkloadSnapshot(
            namespaces=tuple(self._api.list_namespaces()),
            workloads=tuple(workloads),
            hpas=tuple(hpas),
            keda_available=keda,
            warnings=tuple(warnings),
            stored=stored,
            owners=tuple(owners),
        )

    @property
    def _configmap_key(self) -> str:
        return object_key("ConfigMap", self.config.own_namespace, ORIGINALS_CONFIGMAP)

    def _list_scaledobjects(self) -> list[WorkloadInfo]:
        return self._api.list_workloads(Kind.SCALEDOBJECT)

    @staticmethod
    def _advisory(warnings: list[Outcome], what: str, read: Callable[[], T], *, default: T) -> T:
        try:
            return read()
        except errors.KubeError as exc:
            warnings.append(Outcome(what, f"could not be read ({exc}); not taken into account"))
            return default

    def plan_sleep(self) -> WorkloadPlan:
        return plan_sleep(self.snapshot(), now=self._clock.now(), config=self.config)

    def availability(
        self, namespaces: Collection[str] | None = None, *, keys: Collection[str] | None = None
    ) -> Availability:
        """Deployments/StatefulSets available in `namespaces` (default: the selected, unprotected
        ones), or exactly those named in `keys` (`Kind/namespace/name`) wherever they are."""
        if keys is not None:
            named = set(keys)
            kinds = [
                k for k in (Kind.DEPLOYMENT, Kind.STATEFULSET) if any(n.startswith(f"{k}/") for n in named)
            ]
            return compute_availability(
                w for k in kinds for w in self._api.list_workloads(k) if w.key in named
            )
        if namespaces is None:
            selected = self.config.selected_names(self._api.list_namespaces())
            namespaces = set(selected) - self.config.protected_namespaces
        wanted = set(namespaces)
        workloads = [
            w
            for kind in (Kind.DEPLOYMENT, Kind.STATEFULSET)
            for w in self._api.list_workloads(kind)
            if w.namespace in wanted
        ]
        return compute_availability(workloads)

    # -- sleep ---------------------------------------------------------------------------------

    def sleep(self, plan: WorkloadPlan | None = None, *, record: RecordSink | None = None) -> WorkloadReport:
        """Apply a sleep plan (a fresh one by default); `record` receives each record before its patch.

        After a 409 the object is decided again and `record` may receive a second, corrected record
        for the same object: store records by `record.key` within one operation. The workloads of a
        batch changed side by side are recorded together first (`record` for each, then their
        originals in the ConfigMap in a few writes): an exception from `record` (the database is
        unwritable) stops the sleep before any object of that batch is changed.
        """
        plan = plan or self.plan_sleep()
        snapshot = plan.snapshot or WorkloadSnapshot()
        done: list[Decision] = []
        not_paused: set[str] = set()
        orders = {w.key: wake_order(w.annotations) for w in snapshot.workloads}

        def owner_not_paused(decision: Decision) -> Decision | None:
            unpaused = [key for key in decision.paused_by if key in not_paused]
            if unpaused and decision.category == "change":
                return _owner_not_paused(decision, unpaused)
            return None

        for owners, batch in _batches(plan.decisions, orders):
            if owners:  # each owner is paused before the next batch, whose workloads it may apply
                for decision in batch:
                    applied = owner_not_paused(decision) or self._apply_sleep(decision, snapshot, record)
                    if applied.category not in ("change", "unchanged"):
                        not_paused.add(applied.key)
                    done.append(applied)
                continue
            held = {d.key: kept for d in batch if (kept := owner_not_paused(d)) is not None}
            ahead = self._record_ahead([d for d in batch if d.key not in held], snapshot, record)
            apply = partial(self._apply_sleep_held, held, snapshot, record, ahead)
            done.extend(self._in_parallel(apply, batch))
        return _report(plan, done, notes_for_hpas(done, snapshot))

    def _apply_sleep_held(
        self,
        held: Mapping[str, Decision],
        snapshot: WorkloadSnapshot,
        record: RecordSink | None,
        ahead: _RecordedAhead,
        decision: Decision,
    ) -> Decision:
        """A decision of a batch: held back (its owner is not paused), or applied."""
        return held.get(decision.key) or self._apply_sleep(decision, snapshot, record, ahead)

    def _record_ahead(
        self, batch: Sequence[Decision], snapshot: WorkloadSnapshot, record: RecordSink | None
    ) -> _RecordedAhead:
        """Record a batch's changes before any of them is sent: each to `record`, then their
        originals to the ConfigMap in writes of up to ORIGINALS_WRITE_BYTES. One ConfigMap write
        per object made the originals the sleep's bound at 1,000 workloads: every write of the
        growing object is a full read-modify-write on the API server and in etcd, one after the
        other however many are sent at once. A failed ConfigMap write leaves its objects to
        write their own originals before their patches, as one at a time does."""
        ahead = _RecordedAhead()
        if len(batch) <= 1 or self._writes_in_flight <= 1:
            return ahead  # one at a time: each object records itself before its patch
        changes = [d for d in batch if d.patch is not None and d.record is not None]
        for decision in changes:
            assert decision.record is not None
            if record is not None:
                record(decision.record)
            ahead.recorded[decision.record.key] = decision.record
        unstored = [r for d in changes if (r := _needs_original(d, snapshot.stored)) is not None]
        by_data_key = {r.data_key: r for r in unstored}
        for chunk in _originals_in_chunks(unstored, ORIGINALS_WRITE_BYTES):
            try:
                self._api.write_originals(self.config.own_namespace, chunk)
            except errors.KubeError:
                continue
            ahead.kept.update((r.key, r) for r in map(by_data_key.__getitem__, chunk))
        return ahead

    def _apply_sleep(
        self,
        decision: Decision,
        snapshot: WorkloadSnapshot,
        record: RecordSink | None,
        ahead: _RecordedAhead | None = None,
    ) -> Decision:
        ahead = ahead or _RecordedAhead()
        for attempt in range(self._attempts):
            if decision.patch is None:
                return decision
            r = decision.record
            if record is not None and r is not None and ahead.recorded.get(r.key) != r:
                record(r)
            try:
                if r is None or ahead.kept.get(r.key) != r:
                    self._keep_original(decision, snapshot.stored)
                self._patch(decision)
                return decision
            except errors.Conflict:
                self._backoff(attempt)
                fresh = self._reread(decision)
                if fresh is None:
                    return _gone(decision)
                replanned = plan_sleep(
                    with_workload(snapshot, fresh), now=self._clock.now(), config=self.config
                )
                decision = next((d for d in replanned.decisions if d.key == decision.key), _gone(decision))
            except errors.NotFound:
                return _gone(decision)
            except errors.KubeError as exc:
                return _failed(decision, exc)
        return _contended(decision, self._attempts)

    # -- wake ----------------------------------------------------------------------------------

    def plan_wake(
        self, records: Sequence[WorkloadRecord] | None = None, *, force_restore: bool | None = None
    ) -> WorkloadPlan:
        force = self.config.force_restore if force_restore is None else force_restore
        # Records may name kinds no longer configured: they were changed by us, so they are restored.
        kinds = set(self.config.kinds) | {r.kind for r in records or ()}
        return plan_wake(self.snapshot(kinds), records, config=self.config, force_restore=force)

    def wake(
        self, records: Sequence[WorkloadRecord] | None = None, *, force_restore: bool | None = None
    ) -> WorkloadReport:
        """Restore from `records` (the database) or, when None, from the objects' own annotations."""
        force = self.config.force_restore if force_restore is None else force_restore
        return self.apply_wake(self.plan_wake(records, force_restore=force), force_restore=force)

    def apply_wake(
        self, plan: WorkloadPlan, *, force_restore: bool | None = None, only: Collection[str] | None = None
    ) -> WorkloadReport:
        """Apply a wake plan; `only`: just the decisions of these keys (one wake order's workloads)."""
        force = self.config.force_restore if force_restore is None else force_restore
        if only is not None:
            keys = set(only)
            plan = replace(plan, decisions=tuple(d for d in plan.decisions if d.key in keys))
        orders = {w.key: wake_order(w.annotations) for w in (plan.snapshot or WorkloadSnapshot()).workloads}
        done = [
            applied
            for owners, batch in _batches(plan.decisions, orders)
            for applied in (
                [self._apply_wake(d, force) for d in batch]
                if owners
                else self._in_parallel(lambda d: self._apply_wake(d, force), batch)
            )
        ]
        report = _report(plan, done, ())
        changes = originals_after_wake(done, plan.snapshot or WorkloadSnapshot())
        if changes:
            try:
                self._api.write_originals(self.config.own_namespace, changes)
            except errors.KubeError as exc:
                # The objects are restored; their records stay, and a later wake finds them restored.
                note = Outcome(self._configmap_key, f"could not drop the restored records ({exc})")
                report = replace(report, notes=(*report.notes, note))
        return report

    def _apply_wake(self, decision: Decision, force: bool) -> Decision:
        record = decision.record
        if record is None:
            return decision
        for attempt in range(self._attempts):
            if decision.patch is None:
                return decision
            try:
                self._patch(decision)
                return decision
            except errors.Conflict:
                self._backoff(attempt)
                decision = decide_wake(record, self._reread(decision), force_restore=force)
            except errors.NotFound:
                return decide_wake(record, None, force_restore=force)
            except errors.KubeError as exc:
                return _failed(decision, exc)
        return _contended(decision, self._attempts)

    # -- plumbing ------------------------------------------------------------------------------

    def _in_parallel(
        self, apply: Callable[[Decision], Decision], batch: Sequence[Decision]
    ) -> list[Decision]:
        """`apply` to each decision, `WRITES_IN_FLIGHT` at a time; the results in the batch's order."""
        if len(batch) <= 1 or self._writes_in_flight <= 1:
            return [apply(d) for d in batch]
        with ThreadPoolExecutor(
            max_workers=min(self._writes_in_flight, len(batch)), thread_name_prefix="workloads"
        ) as pool:
            return list(pool.map(apply, batch))

    def _backoff(self, attempt: int) -> None:
        self._clock.sleep(min(CONFLICT_BACKOFF_SECONDS * 2**attempt, CONFLICT_BACKOFF_CAP_SECONDS))

    def _keep_original(self, decision: Decision, stored: StoredOriginals) -> None:
        """Write a change's record to the ConfigMap before the change (unless it is there already)."""
        r = _needs_original(decision, stored)
        if r is None:
            return
        self._api.write_originals(self.config.own_namespace, {r.data_key: r.to_json()})

    def _patch(self, decision: Decision) -> None:
        assert decision.patch is not None and decision.record is not None
        r = decision.record
        self._api.patch_workload(r.kind, r.namespace, r.name, decision.patch)

    def _reread(self, decision: Decision) -> WorkloadInfo | None:
        assert decision.record is not None
        r = decision.record
        try:
            return self._api.get_workload(r.kind, r.namespace, r.name)
        except errors.NotFound:
            return None


def _owner_not_paused(decision: Decision, owners: Sequence[str]) -> Decision:
    reason = (
        f"not scaled down: its GitOps owner {', '.join(owners)} could not be paused and would put it back"
    )
    return Decision("skipped", replace(decision.outcome, reason=reason))


def _gone(decision: Decision) -> Decision:
    return Decision("skipped", replace(decision.outcome, reason="deleted before scalebot could change it"))


def _failed(decision: Decision, exc: errors.KubeError) -> Decision:
    return Decision("error", replace(decision.outcome, reason=f"not changed: {exc}"), record=decision.record)


def _contended(decision: Decision, attempts: int) -> Decision:
    reason = f"changed by another writer {attempts} times while scalebot tried to write it; not changed"
    return Decision("error", replace(decision.outcome, reason=reason), record=decision.record)


def _report(plan: WorkloadPlan, done: Sequence[Decision], hpa_notes: tuple[Outcome, ...]) -> WorkloadReport:
    def outcomes(category: str) -> tuple[Outcome, ...]:
        return tuple(d.outcome for d in done if d.category == category)

    return WorkloadReport(
        action=plan.action,
        changed=outcomes("change"),
        unchanged=outcomes("unchanged"),
        skipped=outcomes("skipped"),
        excluded=outcomes("excluded"),
        errors=outcomes("error"),
        notes=(*plan.warnings, *plan.gitops_notes, *plan.expired_exclusions, *hpa_notes),
        records=tuple(d.record for d in done if d.category == "change" and d.record is not None),
    )


def _batches(
    decisions: Sequence[Decision], orders: Mapping[str, int | None]
) -> list[tuple[bool, list[Decision]]]:
    """The decisions in runs that may be applied together, in the plan's order: (owners, run).

    A run is a stretch of the plan with the same kind (GitOps owners, or workloads) and the same
    wake order (`engine.workloads.order`): the plan's order between runs is kept (owners paused
    before the workloads they apply, a sleep's higher orders before the lower ones), and within a
    run of workloads the order says nothing, so they go side by side. Owners go one at a time."""
    runs: list[tuple[bool, list[Decision]]] = []
    last: tuple[bool, int | None] | None = None
    for decision in decisions:
        owner = is_owner_key(decision.key)
        key = (owner, None if owner else orders.get(decision.key))
        if key != last:
            runs.append((owner, []))
            last = key
        runs[-1][1].append(decision)
    return runs

"""The decisions: which objects a sleep changes and which a wake restores, and the exact patches.

Pure: a `WorkloadSnapshot` (what the cluster holds) and `now` in, a `WorkloadPlan` out; no I/O, no
clock, no `kubernetes` import. Every object in scope gets one `Decision` with a category and a
reason; objects to write carry the JSON merge patch to send (`patches`), tested with the decision.

Rules (engine-semantics §7), sleep:
- excluded objects (see `exclusions`) are listed with the reason and never written;
- an object already at its night value with no record of ours (replicas 0, a suspended CronJob, a
  ScaledObject paused at "0") was put there by its owner: left alone, so wake leaves it alone too;
- otherwise the original is recorded (the caller's database, and scalebot's own ConfigMap
  `scalebot-workloads` before the patch is sent), and an existing record is never replaced (a second
  sleep in one night keeps the day-time value; it only re-applies the night value if someone undid
  it). A `scalebot.io/original` annotation written by an earlier version counts as such a record
  until a wake has used it (`StoredOriginals.legacy_used`);
- objects with a controller owner (an operator would scale them back) are skipped and reported;
  a workload a KEDA ScaledObject scales is left to KEDA (unchanged): the ScaledObject is paused.
Every patch carries the `resourceVersion` the decision was made on: if the object changed since,
the API server answers 409 and the caller re-reads and decides again, so a recorded original is
always the value the object had when we changed it.

Wake: the night value still in place → restore the original; a different live value → "modified
while asleep", not clobbered (unless forced), the record dropped so a later sleep records the new
day-time value; an original equal to the night value stays. A legacy annotation is removed where
scalebot may still patch the object (CronJobs, ScaledObjects); on Deployments and StatefulSets,
which it now changes only through `scale`, it is left in place, marked used in the ConfigMap and
reported once (`kubectl annotate ... scalebot.io/original-` removes it).

GitOps owners (engine.workloads.gitops): a workload a sleep scales down whose Argo CD Application or
Flux Kustomization/HelmRelease confirms it applies it is named with that owner. With `gitops:
pause` the owner gets a decision of its own, recorded like a workload and ordered before the
workloads (paused before they are scaled down); at wake it is restored after them, exactly to what
it was (an owner already paused before the sleep is left so). With `gitops: warn` the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from engine.workloads.config import WorkloadConfig
from engine.workloads.exclusions import Verdict, decide, namespace_verdict
from engine.workloads.gitops import owner_text, ownership, unconfirmed_reason, warn_reason
from engine.workloads.model import (
    ORIGINAL_ANNOTATION,
    OWNER_KINDS,
    HpaInfo,
    Kind,
    NamespaceInfo,
    StoredOriginals,
    WorkloadInfo,
    WorkloadRecord,
    legacy_used_value,
    object_key,
    same_value,
)
from engine.workloads.patches import Patch, cleanup_patch, merge_patch
from engine.workloads.report import Action, Outcome, WorkloadReport

Category = Literal["change", "unchanged", "skipped", "excluded", "error"]
_REPLICA_KINDS = (Kind.DEPLOYMENT, Kind.STATEFULSET)


@dataclass(frozen=True)
class WorkloadSnapshot:
    namespaces: tuple[NamespaceInfo, ...] = ()
    workloads: tuple[WorkloadInfo, ...] = ()
    hpas: tuple[HpaInfo, ...] = ()
    keda_available: bool = False
    warnings: tuple[Outcome, ...] = ()
    """Listings that failed without failing the whole snapshot (e.g. KEDA discovery)."""
    stored: StoredOriginals = field(default_factory=StoredOriginals)
    """scalebot's originals ConfigMap: the records of objects it put to sleep."""
    owners: tuple[WorkloadInfo, ...] = ()
    """GitOps owners (Applications, Kustomizations, HelmReleases) of the kinds some workload names."""


@dataclass(frozen=True, slots=True)
class Decision:
    category: Category
    outcome: Outcome
    patch: Patch | None = None
    """The JSON merge patch to send, if anything has to be written."""
    record: WorkloadRecord | None = None
    """Sleep: what to persist before the patch. Wake: the record being restored."""
    paused_by: tuple[str, ...] = ()
    """Sleep: keys of the GitOps owners that must be paused before this workload is changed."""

    @property
    def key(self) -> str:
        return self.outcome.key


@dataclass(frozen=True)
class WorkloadPlan:
    action: Action
    decisions: tuple[Decision, ...] = ()
    """One per object in scope, sorted by key."""
    expired_exclusions: tuple[Outcome, ...] = ()
    hpa_notes: tuple[Outcome, ...] = ()
    warnings: tuple[Outcome, ...] = ()
    gitops_notes: tuple[Outcome, ...] = ()
    """Workloads a GitOps owner applies, with that owner (`gitops: warn`), and unconfirmed claims."""
    snapshot: WorkloadSnapshot | None = field(default=None, compare=False, repr=False)

    def of(self, category: Category) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.category == category)

    @property
    def changes(self) -> tuple[Decision, ...]:
        return self.of("change")

    @property
    def writes(self) -> tuple[Decision, ...]:
        """Decisions with a patch to send (changes, and wake's annotation clean-ups)."""
        return tuple(d for d in self.decisions if d.patch is not None)

    def preview(self) -> WorkloadReport:
        """The report this plan would produce if every write succeeded (for the approval card)."""

        def outcomes(category: Category) -> tuple[Outcome, ...]:
            return tuple(d.outcome for d in self.of(category))

        return WorkloadReport(
            action=self.action,
            changed=outcomes("change"),
            unchanged=outcomes("unchanged"),
            skipped=outcomes("skipped"),
            excluded=outcomes("excluded"),
            errors=outcomes("error"),
            notes=(*self.warnings, *self.gitops_notes, *self.expired_exclusions, *self.hpa_notes),
            records=tuple(d.record for d in self.changes if d.record is not None),
        )


# -- sleep ---------------------------------------------------------------------------------------


def plan_sleep(snapshot: WorkloadSnapshot, *, now: datetime, config: WorkloadConfig) -> WorkloadPlan:
    """Decide, for every workload in the selected namespaces, what a sleep does to it and why."""
    in_scope = {ns.name: ns for ns in snapshot.namespaces if config.selects(ns)}
    ns_verdicts = {name: namespace_verdict(ns, config, now=now) for name, ns in in_scope.items()}
    keda_targets = _keda_targets(snapshot.workloads)
    decisions: list[Decision] = []
    expired: list[Outcome] = [
        Outcome(object_key("Namespace", "", name), note)
        for name, verdict in sorted(ns_verdicts.items())
        for note in verdict.expired
    ]
    for workload in sorted(snapshot.workloads, key=lambda w: w.key):
        namespace = in_scope.get(workload.namespace)
        if namespace is None or workload.kind not in config.kinds:
            continue
        verdict = decide(workload, namespace, ns_verdicts[namespace.name], config, now=now)
        expired.extend(Outcome(workload.key, note) for note in verdict.expired)
        decisions.append(_sleep_decision(workload, verdict, keda_targets, now, snapshot.stored))
    owners, decisions, gitops_notes = _gitops(decisions, snapshot, config, now)
    return WorkloadPlan(
        action="sleep",
        decisions=(*owners, *decisions),
        expired_exclusions=tuple(expired),
        hpa_notes=notes_for_hpas(decisions, snapshot),
        warnings=snapshot.warnings,
        gitops_notes=gitops_notes,
        snapshot=snapshot,
    )


def _gitops(
    decisions: list[Decision], snapshot: WorkloadSnapshot, config: WorkloadConfig, now: datetime
) -> tuple[list[Decision], list[Decision], tuple[Outcome, ...]]:
    """The owner decisions (pause), the workload decisions naming them, and the notes to show.

    Only workloads this sleep changes, or holds a record of (a second sleep), count: an owner is
    paused for the objects scalebot keeps at their night value, not for those it leaves alone.
    """
    live = {w.key: w for w in snapshot.workloads}
    notes: list[Outcome] = []
    needed: dict[str, WorkloadInfo] = {}
    users: dict[str, list[str]] = {}
    kept: list[Decision] = []
    for d in decisions:
        workload = live.get(d.key)
        if workload is None or (d.category != "change" and d.record is None):
            kept.append(d)
            continue
        found = ownership(workload, snapshot.owners)
        notes.extend(Outcome(d.key, unconfirmed_reason(c)) for c in found.unconfirmed)
        if not found.owners:
            kept.append(d)
        elif config.gitops == "warn":
            if d.category == "change":
                notes.append(Outcome(d.key, warn_reason(found.owners)))
            kept.append(d)
        else:
            for owner in found.owners:
                needed[owner.key] = owner
                users.setdefault(owner.key, []).append(d.key)
            kept.append(replace(d, paused_by=tuple(o.key for o in found.owners)))
    owner_decisions = [
        _owner_decision(needed[key], users[key], now, snapshot.stored) for key in sorted(needed)
    ]
    return owner_decisions, kept, tuple(notes)


def _owner_decision(
    owner: WorkloadInfo, workloads: Sequence[str], now: datetime, stored: StoredOriginals
) -> Decision:
    """Pause a GitOps owner for the sleep; its original is recorded like a workload's."""
    spec = owner.spec
    applies = f"{owner_text(owner)} applies {', '.join(workloads)}"
    kept = _stored_record(owner, stored)
    if kept is not None:
        again = _sleep_again(owner, kept)
        return replace(again, outcome=Outcome(owner.key, f"{again.outcome.reason}; {applies}"))
    if same_value(owner.value, spec.target):
        reason = f"already paused before sleep ({spec.describe(owner.value)}); stays so after wake; {applies}"
        return Decision("unchanged", Outcome(owner.key, reason))
    record = WorkloadRecord(owner.kind, owner.namespace, owner.name, owner.value, spec.target, now, owner.uid)
    reason = (
        f"{spec.describe(owner.value)} → {spec.describe(spec.target)}: paused for the sleep, restored "
        f"at wake; {applies}"
    )
    return Decision("change", Outcome(owner.key, reason), merge_patch(owner, spec.target, {}), record)


def _sleep_decision(
    workload: WorkloadInfo,
    verdict: Verdict,
    keda_targets: Mapping[str, str],
    now: datetime,
    stored: StoredOriginals,
) -> Decision:
    key, spec = workload.key, workload.spec
    if verdict.excluded:
        return Decision("excluded", Outcome(key, verdict.reason))
    if workload.controller is not None:
        owner = f"{workload.controller.kind}/{workload.controller.name}"
        reason = f"managed by {owner}, which would undo a change here; put the owner to sleep instead"
        return Decision("skipped", Outcome(key, reason))
    if key in keda_targets:
        # Not a problem to report: the ScaledObject's pause is what puts this workload to sleep.
        reason = f"scaled by KEDA {keda_targets[key]}; paused through the ScaledObject instead"
        return Decision("unchanged", Outcome(key, reason))
    kept = _stored_record(workload, stored)
    if kept is not None:
        return _sleep_again(workload, kept)
    text = live_legacy_annotation(workload, stored)
    if text is not None:
        try:
            return _sleep_again(workload, WorkloadRecord.from_annotation(workload, text))
        except ValueError as exc:
            return Decision("skipped", Outcome(key, f"{exc}; not changed (fix or remove the annotation)"))
    if same_value(workload.value, spec.target):
        return Decision("unchanged", Outcome(key, _at_rest_reason(workload)))
    record = WorkloadRecord(
        workload.kind, workload.namespace, workload.name, workload.value, spec.target, now, workload.uid
    )
    patch = merge_patch(workload, spec.target, {})
    reason = f"{spec.describe(workload.value)} → {spec.describe(spec.target)}"
    return Decision("change", Outcome(key, reason), patch, record)


def _stored_record(workload: WorkloadInfo, stored: StoredOriginals) -> WorkloadRecord | None:
    """The ConfigMap's record of this object, unless it names an earlier object of the same name."""
    record = stored.records.get(workload.key)
    if record is None or (record.uid and workload.uid and record.uid != workload.uid):
        return None
    return record


def live_legacy_annotation(workload: WorkloadInfo, stored: StoredOriginals) -> str | None:
    """`scalebot.io/original` from an earlier version, unless a wake already restored from it."""
    text = workload.annotations.get(ORIGINAL_ANNOTATION)
    if text is None or stored.legacy_used.get(workload.key) == text:
        return None
    return text


def _sleep_again(workload: WorkloadInfo, record: WorkloadRecord) -> Decision:
    """A second sleep: the recorded day-time value stays; only the night value is re-applied."""
    key, spec = workload.key, workload.spec
    kept = f"{spec.describe(record.original)} to restore"
    if same_value(workload.value, record.target):
        return Decision("unchanged", Outcome(key, f"already asleep ({kept})"), record=record)
    reason = (
        f"{spec.describe(workload.value)} → {spec.describe(record.target)} again ({kept}, recorded before)"
    )
    return Decision("change", Outcome(key, reason), merge_patch(workload, record.target, {}), record)


def _at_rest_reason(workload: WorkloadInfo) -> str:
    if workload.kind is Kind.CRONJOB:
        return "already suspended before sleep; stays suspended after wake"
    if workload.kind is Kind.SCALEDOBJECT:
        return 'already paused at "0" before sleep; stays paused after wake'
    return "already at 0 replicas before sleep; stays at 0 after wake"


def _keda_targets(workloads: Iterable[WorkloadInfo]) -> dict[str, str]:
    """Key of each workload a ScaledObject scales → that ScaledObject's key."""
    targets: dict[str, str] = {}
    for so in workloads:
        if so.kind is Kind.SCALEDOBJECT and so.scale_target is not None:
            kind, name = so.scale_target
            targets[object_key(kind, so.namespace, name)] = so.key
    return targets


def notes_for_hpas(decisions: Sequence[Decision], snapshot: WorkloadSnapshot) -> tuple[Outcome, ...]:
    """HPAs whose target goes to 0: the HPA is left alone and simply stops scaling until wake."""
    changed = {
        d.key for d in decisions if d.category == "change" and d.record and d.record.kind in _REPLICA_KINDS
    }
    notes = []
    for hpa in sorted(snapshot.hpas, key=lambda h: h.key):
        target = object_key(hpa.target_kind, hpa.namespace, hpa.target_name)
        if target in changed:
            reason = (
                f"targets {target}: left as it is; with 0 replicas the HPA reports ScalingDisabled "
                "and stops scaling until wake restores the replicas"
            )
            notes.append(Outcome(hpa.key, reason))
    return tuple(notes)


# -- wake ----------------------------------------------------------------------------------------


def plan_wake(
    snapshot: WorkloadSnapshot,
    records: Sequence[WorkloadRecord] | None,
    *,
    config: WorkloadConfig,
    force_restore: bool = False,
) -> WorkloadPlan:
    """Decide what to restore: from `records` (the database), or, when None, from the ConfigMap.

    Without records every object of a configured kind in the selected namespaces that has a record
    in scalebot's ConfigMap, or an unused `scalebot.io/original` from an earlier version, is
    restored; exclusions do not apply (an object excluded after it was put
    to sleep is still ours to restore). With records, exactly those objects, whatever the selection;
    when an object has several records, the earliest is the day-time value.
    """
    live = {w.key: w for w in (*snapshot.workloads, *snapshot.owners)}
    decisions: list[Decision] = []
    if records is None:
        chosen, unreadable = _stored_records(snapshot, config)
        decisions.extend(unreadable)
    else:
        chosen = _earliest(records)
    for record in chosen:
        decisions.append(decide_wake(record, live.get(record.key), force_restore=force_restore))
    return WorkloadPlan(
        action="wake",
        # The workloads first, then their GitOps owners: an owner resumed before them would find
        # them at 0 and could sync that, or race scalebot's restore.
        decisions=tuple(sorted(decisions, key=lambda d: (is_owner_key(d.key), d.key))),
        warnings=(*snapshot.warnings, *_legacy_notes(decisions, snapshot)),
        snapshot=snapshot,
    )


def _legacy_notes(decisions: Sequence[Decision], snapshot: WorkloadSnapshot) -> tuple[Outcome, ...]:
    """Once per annotation: a legacy `scalebot.io/original` this wake uses but cannot remove."""
    live = {w.key: w for w in snapshot.workloads}
    notes = []
    for d in decisions:
        workload = live.get(d.key)
        if workload is None or workload.kind not in _REPLICA_KINDS or d.category == "error":
            continue
        if live_legacy_annotation(workload, snapshot.stored) is not None:
            reason = (
                f"carries {ORIGINAL_ANNOTATION} from an earlier scalebot version; left in place "
                "(scalebot changes replicas only through the scale subresource) and ignored from now "
                f"on; remove it with kubectl annotate -n {workload.namespace} "
                f"{workload.kind.lower()}/{workload.name} {ORIGINAL_ANNOTATION}-"
            )
            notes.append(Outcome(d.key, reason))
    return tuple(notes)


def originals_after_wake(done: Sequence[Decision], snapshot: WorkloadSnapshot) -> dict[str, str | None]:
    """The ConfigMap changes once a wake has dealt with `done`: its records go (None removes).

    A record that failed (category "error") stays for the next wake. An object still carrying a
    legacy annotation scalebot cannot remove gets a marker instead, so the stale annotation is
    never restored from again.
    """
    live = {w.key: w for w in snapshot.workloads}
    stored = snapshot.stored
    changes: dict[str, str | None] = {}
    for d in done:
        record = d.record
        if record is None or d.category == "error":
            continue
        workload = live.get(d.key)
        text = workload.annotations.get(ORIGINAL_ANNOTATION) if workload is not None else None
        if text is not None and record.kind in _REPLICA_KINDS:
            if stored.legacy_used.get(d.key) != text or d.key in stored.records:
                changes[record.data_key] = legacy_used_value(d.key, text)
        elif d.key in stored.records or d.key in stored.legacy_used:
            changes[record.data_key] = None
    return changes


def decide_wake(
    record: WorkloadRecord, live: WorkloadInfo | None, *, force_restore: bool = False
) -> Decision:
    """What to do with one record given the object as it is now (None: it is gone)."""
    key, spec = record.key, record.spec
    if live is None:
        return Decision("skipped", Outcome(key, "no longer exists; nothing to restore"), record=record)
    if record.uid and live.uid and record.uid != live.uid:
        reason = "deleted and recreated while asleep (new UID); left as it is"
        return Decision("skipped", Outcome(key, reason), record=record)
    # The legacy annotation is removed where scalebot may still patch the object; Deployments and
    # StatefulSets are changed only through `scale`, so theirs stays (see originals_after_wake).
    removable = live.kind not in _REPLICA_KINDS and ORIGINAL_ANNOTATION in live.annotations
    cleanup: dict[str, None] = {ORIGINAL_ANNOTATION: None} if removable else {}
    original, now_value = spec.describe(record.original), spec.describe(live.value)
    if same_value(record.original, record.target):
        reason = f"had {original} before sleep; stays so"
        return Decision("unchanged", Outcome(key, reason), cleanup_patch(live, cleanup), record)
    as_we_left_it = same_value(live.value, record.target)
    back_at_original = same_value(live.value, record.original)
    if as_we_left_it or (force_restore and not back_at_original):
        forced = "" if as_we_left_it else " (forced: modified while asleep)"
        reason = f"{now_value} → {original}{forced}"
        return Decision("change", Outcome(key, reason), merge_patch(live, record.original, cleanup), record)
    if back_at_original:
        reason = f"already back at {original}"
        return Decision("change", Outcome(key, reason), cleanup_patch(live, cleanup), record)
    reason = (
        f"modified while asleep: now {now_value}, scalebot had set {spec.describe(record.target)}; "
        f"left as it is (original: {original}; force restore applies it)"
    )
    return Decision("skipped", Outcome(key, reason), cleanup_patch(live, cleanup), record)


def _stored_records(
    snapshot: WorkloadSnapshot, config: WorkloadConfig
) -> tuple[list[WorkloadRecord], list[Decision]]:
    """The ConfigMap's records in scope, then legacy annotations of objects it has no record of."""
    in_scope = {ns.name for ns in snapshot.namespaces if config.selects(ns)}
    stored = snapshot.stored
    # A GitOps owner lives in its controller's namespace, outside the selection: ours to restore.
    records = [
        r
        for r in stored.records.values()
        if r.kind in OWNER_KINDS or (r.namespace in in_scope and r.kind in config.kinds)
    ]
    unreadable: list[Decision] = []
    for workload in snapshot.workloads:
        text = live_legacy_annotation(workload, stored)
        if (
            text is None
            or workload.key in stored.records
            or workload.namespace not in in_scope
            or workload.kind not in config.kinds
        ):
            continue
        try:
            records.append(WorkloadRecord.from_annotation(workload, text))
        except ValueError as exc:
            unreadable.append(Decision("error", Outcome(workload.key, f"{exc}; not restored")))
    return records, unreadable


def is_owner_key(key: str) -> bool:
    """Whether a decision's key names a GitOps owner (`Application/argocd/shop`), not a workload."""
    return key.split("/", 1)[0] in OWNER_KINDS


def _earliest(records: Sequence[WorkloadRecord]) -> list[WorkloadRecord]:
    chosen: dict[str, WorkloadRecord] = {}
    for record in records:
        kept = chosen.get(record.key)
        if kept is None or _is_earlier(record, kept):
            chosen[record.key] = record
    return list(chosen.values())


def _is_earlier(a: WorkloadRecord, b: WorkloadRecord) -> bool:
    return a.recorded_at is not None and (b.recorded_at is None or a.recorded_at < b.recorded_at)


def with_workload(snapshot: WorkloadSnapshot, workload: WorkloadInfo) -> WorkloadSnapshot:
    """The snapshot with one object replaced by a fresh read (to decide again after a 409)."""
    if workload.kind in OWNER_KINDS:
        owners = tuple(o for o in snapshot.owners if o.key != workload.key)
        return replace(snapshot, owners=(*owners, workload))
    others = tuple(w for w in snapshot.workloads if w.key != workload.key)
    return replace(snapshot, workloads=(*others, workload))

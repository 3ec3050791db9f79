"""Workload values the planner decides on, and the record of what scalebot changed.

Pure: no I/O, no clock. Owns:
- the four kinds scalebot puts to sleep and, per kind, the one field it changes and the value it
  sets at night (`KINDS`);
- `WorkloadInfo`, `NamespaceInfo`, `HpaInfo`, built from the API server's raw JSON (`from_raw`);
- `WorkloadRecord`, the value to restore at wake, and its serialised forms: a plain dict for
  SQLite, the same as JSON in scalebot's ConfigMap `scalebot-workloads` (survives a lost database;
  `StoredOriginals`), and the on-object annotation `scalebot.io/original` that earlier versions
  wrote (read only, so a cluster they put to sleep wakes).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.domain.model import OwnerRef, RawObject, format_time, parse_time

FieldValue = int | bool | str | None
"""replicas (int), suspend (bool; a GitOps owner's may be None: not set) or an annotation (str, None
when absent: KEDA's paused-replicas, Argo CD's skip-reconcile)."""

ORIGINAL_ANNOTATION = "scalebot.io/original"
"""Written on each object by earlier versions; now only read (a cluster they put to sleep wakes)."""
ORIGINALS_CONFIGMAP = "scalebot-workloads"
"""The ConfigMap in scalebot's own namespace holding the originals (they survive a lost database)."""
KEDA_PAUSED_ANNOTATION = "autoscaling.keda.sh/paused-replicas"
KEDA_GROUP = "keda.sh"
KEDA_VERSION = "v1alpha1"
FIELD_MANAGER = "scalebot"
ARGOCD_SKIP_RECONCILE_ANNOTATION = "argocd.argoproj.io/skip-reconcile"


class Kind(enum.StrEnum):
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"
    CRONJOB = "CronJob"
    SCALEDOBJECT = "ScaledObject"
    # GitOps owners (engine.workloads.gitops): paused for a sleep so they do not undo it.
    APPLICATION = "Application"
    KUSTOMIZATION = "Kustomization"
    HELMRELEASE = "HelmRelease"


WORKLOAD_KINDS = frozenset({Kind.DEPLOYMENT, Kind.STATEFULSET, Kind.CRONJOB, Kind.SCALEDOBJECT})
"""The kinds a sleep scales down; the others are GitOps owners, paused only for the workloads'
sake (`OWNER_KINDS`)."""
OWNER_KINDS = frozenset(Kind) - WORKLOAD_KINDS


@dataclass(frozen=True, slots=True)
class KindSpec:
    field: str
    """Key of the original value in the annotation and in records."""
    target: FieldValue
    """The night-time value scalebot sets."""
    value_type: type
    nullable: bool = False

    def describe(self, value: FieldValue) -> str:
        """A value as people read it in reports: `3 replicas`, `suspend=false`, `paused-replicas="2"`."""
        if self.field == "replicas":
            return f"{value} replica" + ("" if value == 1 else "s")
        if self.field == "suspend":
            return "suspend unset" if value is None else f"suspend={'true' if value else 'false'}"
        if self.field == "skipReconcile":
            return "no skip-reconcile" if value is None else f'skip-reconcile="{value}"'
        return "no paused-replicas" if value is None else f'paused-replicas="{value}"'

    def accepts(self, value: object) -> bool:
        if value is None:
            return self.nullable
        # bool is an int in Python: `True` must not pass as a replica count, nor 1 as a flag.
        if type(value) is not self.value_type:
            return False
        return not (type(value) is int and value < 0)


KINDS: Mapping[Kind, KindSpec] = {
    Kind.DEPLOYMENT: KindSpec("replicas", 0, int),
    Kind.STATEFULSET: KindSpec("replicas", 0, int),
    Kind.CRONJOB: KindSpec("suspend", True, bool),
    Kind.SCALEDOBJECT: KindSpec("pausedReplicas", "0", str, nullable=True),
    # Argo CD stops all processing of an Application (auto-sync and self-heal included) while this
    # annotation is "true"; Flux stops reconciling (and so correcting drift) while spec.suspend is
    # true. "Not set" is its own original, restored as not set.
    Kind.APPLICATION: KindSpec("skipReconcile", "true", str, nullable=True),
    Kind.KUSTOMIZATION: KindSpec("suspend", True, bool, nullable=True),
    Kind.HELMRELEASE: KindSpec("suspend", True, bool, nullable=True),
}


def same_value(a: FieldValue, b: FieldValue) -> bool:
    """Equality that keeps `0` and `False` apart."""
    return type(a) is type(b) and a == b


def object_key(kind: str, namespace: str, name: str) -> str:
    """`Deployment/shop/web`; a namespace itself is `Namespace/shop`."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_raw(cls, raw: RawObject) -> NamespaceInfo:
        meta = raw.get("metadata") or {}
        return cls(
            name=meta.get("name", ""),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
        )


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


class _ObjectOfAKind:
    """What a workload and the record of its change share: both name one object of one kind."""

    __slots__ = ()
    kind: Kind
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return object_key(self.kind, self.namespace, self.name)

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]


@dataclass(frozen=True, slots=True)
class WorkloadInfo(_ObjectOfAKind):
    kind: Kind
    namespace: str
    name: str
    value: FieldValue
    """The live value of the field scalebot changes for this kind."""
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    controller: OwnerRef | None = None
    generation: int = 0
    observed_generation: int = 0
    available_replicas: int = 0
    conditions: tuple[Condition, ...] = ()
    scale_target: tuple[str, str] | None = None
    """ScaledObjects only: (kind, name) of the workload KEDA scales."""
    manages: frozenset[str] = frozenset()
    """GitOps owners only: keys of the objects the controller reports it applied (its status)."""

    @classmethod
    def from_raw(cls, kind: Kind, raw: RawObject) -> WorkloadInfo:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        return cls(
            kind=kind,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            value=_live_value(kind, spec, annotations),
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            labels=meta.get("labels") or {},
            annotations=annotations,
            controller=_controller(meta),
            generation=int(meta.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            available_replicas=int(status.get("availableReplicas") or 0),
            conditions=tuple(
                Condition(c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                for c in status.get("conditions") or ()
            ),
            scale_target=_scale_target(spec) if kind is Kind.SCALEDOBJECT else None,
            manages=_managed_keys(kind, status),
        )


def _live_value(kind: Kind, spec: RawObject, annotations: Mapping[str, str]) -> FieldValue:
    if kind is Kind.CRONJOB:
        return bool(spec.get("suspend"))
    if kind is Kind.SCALEDOBJECT:
        return annotations.get(KEDA_PAUSED_ANNOTATION)
    if kind is Kind.APPLICATION:
        return annotations.get(ARGOCD_SKIP_RECONCILE_ANNOTATION)
    if kind in (Kind.KUSTOMIZATION, Kind.HELMRELEASE):
        suspend = spec.get("suspend")
        return suspend if suspend is None or isinstance(suspend, bool) else bool(suspend)
    replicas = spec.get("replicas")
    return 1 if replicas is None else int(replicas)  # the API server's default


def _controller(meta: RawObject) -> OwnerRef | None:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return OwnerRef(
                kind=ref.get("kind", ""),
                name=ref.get("name", ""),
                uid=ref.get("uid", ""),
                api_version=ref.get("apiVersion", ""),
            )
    return None


def _managed_keys(kind: Kind, status: RawObject) -> frozenset[str]:
    """What a GitOps controller says it applied: Argo CD's status.resources, Flux's inventory.

    Written by the controller through the status subresource, so a label on a workload cannot make
    an owner it names claim that workload (engine.workloads.gitops).
    """
    if kind is Kind.APPLICATION:
        return frozenset(
            object_key(str(r.get("kind") or ""), str(r.get("namespace") or ""), str(r.get("name") or ""))
            for r in status.get("resources") or ()
            if isinstance(r, dict)
        )
    if kind in (Kind.KUSTOMIZATION, Kind.HELMRELEASE):
        keys = set()
        for entry in (status.get("inventory") or {}).get("entries") or ():
            # Flux's object id: <namespace>_<name>_<group>_<kind> (names hold no "_").
            parts = str((entry or {}).get("id") or "").split("_") if isinstance(entry, dict) else []
            if len(parts) == 4:
                keys.add(object_key(parts[3], parts[0], parts[1]))
        return frozenset(keys)
    return frozenset()


def _scale_target(spec: RawObject) -> tuple[str, str] | None:
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("name"):
        return None
    return (ref.get("kind") or "Deployment", ref["name"])  # KEDA's default kind


@dataclass(frozen=True, slots=True)
class HpaInfo:
    namespace: str
    name: str
    target_kind: str
    target_name: str
    min_replicas: int = 1
    max_replicas: int = 0

    @property
    def key(self) -> str:
        return object_key("HorizontalPodAutoscaler", self.namespace, self.name)

    @classmethod
    def from_raw(cls, raw: RawObject) -> HpaInfo:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            target_kind=ref.get("kind", ""),
            target_name=ref.get("name", ""),
            min_replicas=int(spec.get("minReplicas") or 1),
            max_replicas=int(spec.get("maxReplicas") or 0),
        )


@dataclass(frozen=True, slots=True)
class WorkloadRecord(_ObjectOfAKind):
    """What one object looked like before scalebot changed it, and what scalebot set."""

    kind: Kind
    namespace: str
    name: str
    original: FieldValue
    target: FieldValue
    recorded_at: datetime | None = None
    uid: str = ""
    """Empty when unknown (a record read back from the object itself is that object's)."""

    def annotation_value(self) -> str:
        """`{"replicas":3,"set":0,"at":"2026-05-04T18:00:00Z"}` (the key depends on the kind)."""
        body: dict[str, Any] = {self.spec.field: self.original, "set": self.target}
        if self.recorded_at is not None:
            body["at"] = format_time(self.recorded_at)
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, workload: WorkloadInfo, text: str) -> WorkloadRecord:
        """Read `scalebot.io/original` back; ValueError names what is wrong with it."""
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{ORIGINAL_ANNOTATION} is not JSON: {text!r}") from exc
        spec = workload.spec
        if not isinstance(body, dict) or spec.field not in body:
            raise ValueError(f'{ORIGINAL_ANNOTATION} has no "{spec.field}": {text!r}')
        original, target = body[spec.field], body.get("set", spec.target)
        if not spec.accepts(original) or not spec.accepts(target):
            raise ValueError(f"{ORIGINAL_ANNOTATION} holds a value of the wrong type: {text!r}")
        try:
            at = parse_time(body.get("at"))
        except ValueError as exc:
            raise ValueError(f'{ORIGINAL_ANNOTATION} has an unreadable "at": {text!r}') from exc
        return cls(workload.kind, workload.namespace, workload.name, original, target, at, workload.uid)

    @property
    def data_key(self) -> str:
        return originals_key(self.kind, self.namespace, self.name)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for the caller's database row."""
        return {
            "kind": str(self.kind),
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "original": self.original,
            "target": self.target,
            "recorded_at": format_time(self.recorded_at) if self.recorded_at else None,
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> WorkloadRecord:
        kind = Kind(row["kind"])
        original, target = row.get("original"), row.get("target", KINDS[kind].target)
        if not KINDS[kind].accepts(original) or not KINDS[kind].accepts(target):
            raise ValueError(f"record for {object_key(kind, row['namespace'], row['name'])} has bad values")
        return cls(
            kind=kind,
            namespace=row["namespace"],
            name=row["name"],
            original=original,
            target=target,
            recorded_at=parse_time(row.get("recorded_at")),
            uid=row.get("uid") or "",
        )


def originals_key(kind: Kind, namespace: str, name: str) -> str:
    """The ConfigMap data key of one object: `deployment.<namespace>.<name>`.

    ConfigMap keys allow only `[-._a-zA-Z0-9]`; kind and namespace hold no dot, so it is unique.
    """
    return f"{kind.lower()}.{namespace}.{name}"


@dataclass(frozen=True, slots=True)
class StoredOriginals:
    """The originals ConfigMap as read: records by object key, and legacy annotations already used.

    `legacy_used` maps an object key to the `scalebot.io/original` text a wake already restored
    from: scalebot may no longer patch Deployments and StatefulSets, so the annotation stays on
    them, and this is how a later sleep or wake knows it is stale.
    """

    records: Mapping[str, WorkloadRecord] = field(default_factory=dict)
    legacy_used: Mapping[str, str] = field(default_factory=dict)
    unreadable: tuple[str, ...] = ()

    @classmethod
    def from_data(cls, data: Mapping[str, str]) -> StoredOriginals:
        records: dict[str, WorkloadRecord] = {}
        used: dict[str, str] = {}
        unreadable: list[str] = []
        for data_key, text in sorted(data.items()):
            try:
                body = json.loads(text)
                if isinstance(body, dict) and isinstance(body.get("legacy_used"), dict):
                    marker = body["legacy_used"]
                    used[str(marker["key"])] = str(marker["annotation"])
                else:
                    record = WorkloadRecord.from_dict(body)
                    records[record.key] = record
            except (ValueError, KeyError, TypeError):
                unreadable.append(data_key)
        return cls(records, used, tuple(unreadable))


def legacy_used_value(key: str, annotation: str) -> str:
    return json.dumps({"legacy_used": {"key": key, "annotation": annotation}}, separators=(",", ":"))

"""Decode pod JSON into `PodInfo`: the one decode of a pod, reading only the fields scalebot reads
and skipping the rest of the JSON in C.

Every pod scalebot decides on comes through here: the pages of a listing (`decode_pod_page`), the
events of a watch (`WatchDecoder`), one pod (`decode_pod`, the Karpenter provider's pending pods
and the tests' builders). A pod's JSON is ~3.7 KB, of which scalebot reads a tenth. Parsing a
30,000-pod listing (110 MB) into Python dicts creates millions of objects and took longer than the
API server took to send it; msgspec decodes into the Structs below and skips every other field
without creating an object for it, and `PodInfo` is built straight from the Structs (`pod_info`):
going back to dicts first (`msgspec.to_builtins`) cost as much again as the decode itself at
30,000 pods (docs/benchmarks.md).

A missing key and a JSON null read alike. Leaves are typed `Any`, so a value of an unexpected type
is passed on to the domain's parsers (`engine.domain.model`: quantities, times, the scheduling
fields) instead of failing the whole page.
"""

# The field names are the API's JSON keys (msgspec matches them by name): mixedCase on purpose.
# ruff: noqa: N815

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.domain.collector import collector_paused
from engine.domain.errors import Category, ScalebotError
from engine.domain.model import (
    DEFAULT_TERMINATION_GRACE_SECONDS,
    OwnerRef,
    PodInfo,
    RawObject,
    SchedulingFields,
    parse_time,
    scheduling_fields,
    unscheduled_reason,
)


class _Base(msgspec.Struct, omit_defaults=True):
    pass


_ABSENT = msgspec.Raw(b"")
"""A missing key kept as bytes: reads as None, as a JSON null does."""


class _OwnerReference(_Base):
    apiVersion: Any = None
    kind: Any = None
    name: Any = None
    uid: Any = None
    controller: Any = None


class _ObjectMeta(_Base):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    labels: Any = None
    annotations: Any = None
    ownerReferences: list[_OwnerReference] | None = None
    deletionTimestamp: Any = None
    creationTimestamp: Any = None
    finalizers: Any = None
    resourceVersion: Any = None


class _Volume(_Base):
    # Presence is what counts ("emptyDir": {} is the common form), so the value is kept as is; the
    # name, hostPath and emptyDir's medium are what cluster-autoscaler's local-storage rule reads,
    # a claim (persistentVolumeClaim, ephemeral) what the scheduler model cannot place.
    name: Any = msgspec.UNSET
    emptyDir: Any = msgspec.UNSET
    hostPath: Any = msgspec.UNSET
    persistentVolumeClaim: Any = msgspec.UNSET
    ephemeral: Any = msgspec.UNSET


class _PodSpec(_Base):
    nodeName: Any = None
    volumes: list[_Volume] | None = None
    priorityClassName: Any = None
    terminationGracePeriodSeconds: Any = None
    # Containers and scheduling rules, the same for every replica of a workload: kept as bytes and
    # read once per distinct value of a page (`scheduling_fields`).
    containers: msgspec.Raw = _ABSENT
    initContainers: msgspec.Raw = _ABSENT
    nodeSelector: msgspec.Raw = _ABSENT
    tolerations: msgspec.Raw = _ABSENT
    affinity: msgspec.Raw = _ABSENT
    topologySpreadConstraints: msgspec.Raw = _ABSENT
    overhead: msgspec.Raw = _ABSENT
    resourceClaims: msgspec.Raw = _ABSENT


class _PodCondition(_Base):
    type: Any = None
    status: Any = None
    reason: Any = None
    message: Any = None


class _PodStatus(_Base):
    phase: Any = None
    conditions: list[_PodCondition] | None = None


class _Pod(_Base):
    metadata: _ObjectMeta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _ListMeta(_Base):
    continue_: Any = msgspec.field(default=None, name="continue")
    resourceVersion: Any = None


class _PodList(_Base):
    metadata: _ListMeta | None = None
    items: list[_Pod] | None = None


class _WatchEvent(_Base):
    type: str = ""
    object: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


_DECODER = msgspec.json.Decoder(_PodList)
_EVENT_DECODER = msgspec.json.Decoder(_WatchEvent)
_POD_DECODER = msgspec.json.Decoder(_Pod)


class ProjectionError(ScalebotError, ValueError):
    """The bytes are not the JSON of a pod, a pod list or a pod watch event (garbled or truncated
    on the way)."""

    category = Category.TRANSIENT


@dataclass(frozen=True, slots=True)
class PodPage:
    """One page of a pod list: its pods, and the list's continue token and resourceVersion."""

    items: list[PodInfo]
    continue_token: str
    resource_version: str


def decode_pod_page(data: bytes) -> PodPage:
    """A PodList page's JSON, decoded into PodInfo values (nothing else of a pod is kept).

    The garbage collector is paused while a page is built: a page creates tens of thousands of
    objects, none of them garbage, and every collection the allocations would trigger meanwhile
    scans them (and, in a full collection, the whole heap) for nothing: 10-50 % of the decode
    (docs/benchmarks.md; `engine.domain.collector`)."""
    with collector_paused():
        try:
            page = _DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProjectionError(str(exc)) from exc
        meta = page.metadata
        build = _Builder()
        return PodPage(
            items=[build.pod_info(pod) for pod in page.items or ()],
            continue_token=str(meta.continue_ or "") if meta is not None else "",
            resource_version=str(meta.resourceVersion or "") if meta is not None else "",
        )


def decode_pod(data: bytes) -> PodInfo:
    """One pod's JSON (a Pod object, as a GET returns it) decoded into PodInfo."""
    try:
        pod = _POD_DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProjectionError(str(exc)) from exc
    return _Builder().pod_info(pod)


def decode_watch_event(line: bytes) -> tuple[str, PodInfo | None, RawObject]:
    """One line of a pod watch, decoded on its own (`WatchDecoder.decode`, without its cache)."""
    return WatchDecoder().decode(line)


class WatchDecoder:
    """Decodes the events of one watch; the values pods repeat are parsed once per watch.

    A watch's events are the pods of a few workloads changing again and again (a drain's pods
    evicted, then deleted): their containers, tolerations and selectors, and their creation
    times, are few. Decoding each event on its own re-parsed them every time, three times the
    cost per pod of a listing (docs/benchmarks.md). The cache is kept per watch and bounded:
    past MAX_CACHED values it starts afresh.
    """

    MAX_CACHED = 4096

    __slots__ = ("_build",)

    def __init__(self) -> None:
        self._build = _Builder()

    def decode(self, line: bytes) -> tuple[str, PodInfo | None, RawObject]:
        """One line of a pod watch: its type, its pod (None for an ERROR event) and the event's
        raw part: the Status, whole, for an ERROR; `{"resourceVersion": …}` of the pod otherwise."""
        try:
            event = _EVENT_DECODER.decode(line)
            if event.type == "ERROR":
                status = msgspec.json.decode(event.object)
                return event.type, None, status if isinstance(status, dict) else {}
            pod = _POD_DECODER.decode(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProjectionError(str(exc)) from exc
        version = pod.metadata.resourceVersion if pod.metadata is not None else None
        if self._build.cached > self.MAX_CACHED:
            self._build = _Builder()
        return event.type, self._build.pod_info(pod), {"resourceVersion": str(version or "")}


class _Builder:
    """Builds PodInfo from decoded Structs.

    The pods of one page repeat the same few quantities, timestamps and scheduling fields ("100m",
    "64Mi", the creation second of a rollout, a Deployment's tolerations and selectors): each
    distinct value is parsed once per page.
    """

    __slots__ = ("_scheduling", "_times")

    def __init__(self) -> None:
        self._times: dict[Any, Any] = {}
        self._scheduling: dict[Any, SchedulingFields] = {}

    @property
    def cached(self) -> int:
        """How many parsed values are kept."""
        return len(self._times) + len(self._scheduling)

    def pod_info(self, pod: _Pod) -> PodInfo:
        meta = pod.metadata or _NO_META
        spec = pod.spec or _NO_SPEC
        status = pod.status or _NO_STATUS
        controller = None
        for ref in meta.ownerReferences or ():
            if ref.controller:
                controller = OwnerRef(
                    kind=_or_empty(ref.kind),
                    name=_or_empty(ref.name),
                    uid=_or_empty(ref.uid),
                    api_version=_or_empty(ref.apiVersion),
                )
                break
        grace = spec.terminationGracePeriodSeconds
        volumes = spec.volumes or ()
        namespace = _or_empty(meta.namespace)
        labels = meta.labels or {}
        cpu, memory, scheduling = self._scheduling_of(spec, namespace, labels, volumes)
        return PodInfo(
            namespace=namespace,
            name=_or_empty(meta.name),
            uid=_or_empty(meta.uid),
            node_name=spec.nodeName or "",
            phase=status.phase or "Pending",
            labels=labels,
            annotations=meta.annotations or {},
            controller=controller,
            has_empty_dir=any(v.emptyDir is not msgspec.UNSET for v in volumes),
            priority_class=spec.priorityClassName or "",
            termination_grace_seconds=DEFAULT_TERMINATION_GRACE_SECONDS if grace is None else int(grace),
            deletion_timestamp=parse_time(meta.deletionTimestamp),
            finalizers=tuple(meta.finalizers or ()),
            created_at=_once(self._times, parse_time, meta.creationTimestamp),
            cpu_request_milli=cpu,
            memory_request_bytes=memory,
            unscheduled_reason=unscheduled_reason(
                (c.type, c.status, c.reason, c.message) for c in status.conditions or ()
            ),
            local_volumes=tuple(
                str(v.name or "")
                for v in volumes
                if v.hostPath is not msgspec.UNSET
                or (v.emptyDir is not msgspec.UNSET and (v.emptyDir or {}).get("medium") != "Memory")
            ),
            scheduling=scheduling,
        )

    def _scheduling_of(
        self, spec: _PodSpec, namespace: str, labels: Any, volumes: Sequence[_Volume]
    ) -> SchedulingFields:
        """`scheduling_fields`, once per distinct value of the fields it reads on this page."""
        zoned = (
            tuple(
                "" if v.name is msgspec.UNSET else v.name
                for v in volumes
                if v.persistentVolumeClaim or v.ephemeral
            )
            if volumes
            else ()
        )
        # bytes() of a kept value costs more than the rest of the key: absent ones are skipped, and
        # most pods have none of the rare fields (a 3-tuple key cannot equal the 11-tuple one).
        key: tuple[Any, ...]
        if (
            spec.initContainers is _ABSENT
            and spec.overhead is _ABSENT
            and spec.affinity is _ABSENT
            and spec.topologySpreadConstraints is _ABSENT
            and spec.resourceClaims is _ABSENT
            and not zoned
        ):
            key = (
                b"" if spec.containers is _ABSENT else bytes(spec.containers),
                b"" if spec.nodeSelector is _ABSENT else bytes(spec.nodeSelector),
                b"" if spec.tolerations is _ABSENT else bytes(spec.tolerations),
            )
        else:
            affinity, spread = bytes(spec.affinity), bytes(spec.topologySpreadConstraints)
            key = (
                bytes(spec.containers),
                bytes(spec.initContainers),
                bytes(spec.overhead),
                bytes(spec.nodeSelector),
                bytes(spec.tolerations),
                affinity,
                spread,
                bytes(spec.resourceClaims),
                zoned,
                # An anti-affinity term without namespaces means the pod's own namespace.
                namespace if affinity else "",
                # matchLabelKeys copy the pod's own labels into a spread constraint's selector.
                tuple(sorted(labels.items())) if b"matchLabelKeys" in spread else (),
            )
        try:
            return self._scheduling[key]
        except KeyError:
            fields = self._scheduling[key] = scheduling_fields(
                {
                    "containers": _json(spec.containers),
                    "initContainers": _json(spec.initContainers),
                    "overhead": _json(spec.overhead),
                    "nodeSelector": _json(spec.nodeSelector),
                    "tolerations": _json(spec.tolerations),
                    "affinity": _json(spec.affinity),
                    "topologySpreadConstraints": _json(spec.topologySpreadConstraints),
                    "resourceClaims": _json(spec.resourceClaims),
                },
                namespace=namespace,
                labels=labels,
                zoned_volumes=zoned,
            )
            return fields


def _json(raw: msgspec.Raw) -> Any:
    """A kept JSON value as builtins; None when absent (as `raw.get(key)` reads a missing key)."""
    return msgspec.json.decode(raw) if raw else None


_NO_META = _ObjectMeta()
_NO_SPEC = _PodSpec()
_NO_STATUS = _PodStatus()


def _or_empty(value: Any) -> Any:
    """A missing key and a JSON null both read as ""."""
    return "" if value is None else value


def _once(cache: dict[Any, Any], parse: Callable[[Any], Any], value: Any) -> Any:
    if not isinstance(value, str):
        return parse(value)
    try:
        return cache[value]
    except KeyError:
        parsed = cache[value] = parse(value)
        return parsed

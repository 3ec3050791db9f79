"""Decode pod lists into only the fields scalebot reads, skipping the rest of the JSON in C.

A pod's JSON is ~3.7 KB, of which `PodInfo.from_raw` reads a tenth. Parsing a 30,000-pod listing
(110 MB) into Python dicts creates millions of objects and took longer than the API server took
to send it; msgspec decodes into the Structs below and skips every other field without creating
an object for it. The Structs are converted back to plain dicts of the same shape
(`msgspec.to_builtins`, defaults omitted), so `PodInfo.from_raw` stays the one mapping from the
API's JSON to scalebot's model, whichever way the JSON was parsed.

Every field `PodInfo.from_raw` reads must be declared here; tests/unit/engine/test_projection.py
checks that a pod decoded both ways gives the same PodInfo. Leaves are typed `Any`, so a value of
an unexpected type is passed on for `from_raw` to judge instead of failing the whole page.
"""

# The field names are the API's JSON keys (msgspec matches them by name): mixedCase on purpose.
# ruff: noqa: N815

from __future__ import annotations

from typing import Any

import msgspec

from engine.domain.errors import Category, ScalebotError
from engine.domain.model import RawObject


class _Base(msgspec.Struct, omit_defaults=True):
    pass


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


class _Requests(_Base):
    cpu: Any = None
    memory: Any = None


class _Resources(_Base):
    requests: _Requests | None = None


class _Container(_Base):
    resources: _Resources | None = None


class _Volume(_Base):
    # Presence is what counts ("emptyDir": {} is the common form), so the value is kept as is; the
    # name, hostPath and emptyDir's medium are what cluster-autoscaler's local-storage rule reads.
    name: Any = msgspec.UNSET
    emptyDir: Any = msgspec.UNSET
    hostPath: Any = msgspec.UNSET


class _PodSpec(_Base):
    nodeName: Any = None
    containers: list[_Container] | None = None
    volumes: list[_Volume] | None = None
    priorityClassName: Any = None
    terminationGracePeriodSeconds: Any = None


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
    """The bytes are not a pod list's JSON (garbled or truncated on the way)."""

    category = Category.TRANSIENT


def decode_pod_list(data: bytes) -> RawObject:
    """A PodList page as `{"metadata": {"continue": …}, "items": [pod dicts]}`, projected."""
    try:
        page = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProjectionError(str(exc)) from exc
    built: RawObject = msgspec.to_builtins(page)
    return built


def decode_watch_event(line: bytes) -> tuple[str, RawObject]:
    """One line of a pod watch: its type and its object (a pod projected as above, or for an
    ERROR event the Status, whole)."""
    try:
        event = _EVENT_DECODER.decode(line)
        if event.type == "ERROR":
            status = msgspec.json.decode(event.object)
            return event.type, status if isinstance(status, dict) else {}
        built: RawObject = msgspec.to_builtins(_POD_DECODER.decode(event.object))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProjectionError(str(exc)) from exc
    return event.type, built

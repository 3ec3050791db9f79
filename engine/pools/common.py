"""What the pool providers share, so that none of them imports another.

The restore record's JSON form (written on a pool's own object, read back at wake), raw JSON calls
to the API server through the generated client and the cluster's one transport,
the field manager and the labels scalebot puts on what it creates, and the errors a provider raises
for a node it may not remove or a restore record it cannot read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from engine.domain.errors import Category, ScalebotError
from engine.domain.model import format_time, parse_time
from engine.kube import errors
from engine.kube.transport import Transport
from engine.pools.base import RESTORE_ANNOTATION, RestoreRecord

FIELD_MANAGER = "scalebot"
PROVIDER_LABEL = "scalebot.io/pool-provider"
MANAGED_BY = {"app.kubernetes.io/managed-by": "scalebot"}
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0


class NodeRemovalError(ScalebotError, ValueError):
    """A node named for removal that is not in the pool, or not yet cordoned and drained."""

    category = Category.USAGE


class RestoreRecordError(ScalebotError, ValueError):
    """A restore annotation that is not valid JSON of the expected shape (edited by hand?)."""

    category = Category.INTERNAL


# --------------------------------------------------------------------------------------------------
# The restore record's JSON form on a pool's own object


def encode_restore(record: RestoreRecord) -> str:
    """Compact JSON with camelCase keys, as Kubernetes annotations usually are."""
    body = {
        "desired": record.desired,
        "minSize": record.min_size,
        "maxSize": record.max_size,
        "recordedAt": format_time(record.recorded_at),
        "operationId": record.operation_id,
        "extra": dict(record.extra),
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()


def decode_restore(text: str, *, where: str) -> RestoreRecord:
    """Parse `encode_restore`'s output; `where` names the object in the error message."""
    try:
        body = orjson.loads(text)
        if not isinstance(body, dict):
            raise TypeError("not a JSON object")
        recorded_at = parse_time(body["recordedAt"])
        if recorded_at is None:
            raise ValueError("recordedAt is empty")
        max_size = body.get("maxSize")
        return RestoreRecord(
            desired=int(body["desired"]),
            min_size=int(body.get("minSize") or 0),
            max_size=None if max_size is None else int(max_size),
            recorded_at=recorded_at,
            operation_id=str(body.get("operationId") or ""),
            extra=dict(body.get("extra") or {}),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise RestoreRecordError(
            f"annotation {RESTORE_ANNOTATION} on {where} is not a scalebot restore record ({exc}); "
            "fix or remove it by hand before waking this pool"
        ) from exc


# --------------------------------------------------------------------------------------------------
# Raw JSON calls


@dataclass(frozen=True, slots=True)
class RawCaller:
    """Calls a generated client method of `api_client` for raw JSON through that cluster's one
    transport (`engine.kube.transport.Transport`): its rate limit (`api_qps`/`api_burst`), request
    counts, credentials reload and error translation, as every request of scalebot's.

    Every answer is read with `_preload_content=False` and orjson (never the generated models);
    a failure is the `engine.kube.errors` subclass for its status, or TransportError without an
    HTTP answer.
    """

    api_client: Any
    timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS

    def __call__(
        self, verb: str, resource: str, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        data = self.read(verb, resource, method, *args, **kwargs)
        try:
            return orjson.loads(data) if data else {}
        except orjson.JSONDecodeError as exc:
            # A 2xx whose body is not JSON was garbled on the way: no usable answer.
            raise errors.TransportError(message=f"{verb} {resource}: unreadable response: {exc}") from exc

    def read(self, verb: str, resource: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """The answer's bytes, for a caller that decodes them itself (pods: engine.kube.projection)."""
        transport = Transport.of(self.api_client)
        return transport.read(verb, resource, method, *args, timeout=self.timeout, **kwargs)

"""What the cluster looked like when an e2e test failed, attached to the failure's report.

A timeout such as "Deployment … available (last: None)" says only that something did not happen.
The section this module writes says what the test's objects were doing at that moment: each pod of
the test's namespace with its phase, node and conditions, the namespace's latest events, and the
test's nodes (cordon, taints, Ready), so a failure seen once in CI can be read without a rerun.

`describe` is pure (raw API objects in, text out); `read_cluster_state` does the reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Json = Mapping[str, Any]

MAX_PODS = 60
MAX_EVENTS = 40
MAX_NODES = 40
READ_TIMEOUT_SECONDS = 10.0
"""Per request: a control plane that stopped answering must not hold every failed test for minutes."""


def _conditions(obj: Json) -> str:
    parts = []
    for c in (obj.get("status") or {}).get("conditions") or ():
        text = f"{c.get('type')}={c.get('status')}"
        why = " ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
        parts.append(f"{text} ({why})" if why else text)
    return ", ".join(parts) or "no conditions"


def describe_pod(pod: Json) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    deleting = " deleting" if meta.get("deletionTimestamp") else ""
    node = spec.get("nodeName") or "unbound"
    return f"pod {meta.get('name')}: {status.get('phase', '?')}{deleting} on {node}; {_conditions(pod)}"


def describe_node(node: Json) -> str:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    taints = ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in spec.get("taints") or ()) or "none"
    cordoned = " cordoned" if spec.get("unschedulable") else ""
    ready = next(
        (
            c.get("status")
            for c in (node.get("status") or {}).get("conditions") or ()
            if c.get("type") == "Ready"
        ),
        "unknown",
    )
    created = meta.get("creationTimestamp")
    return f"node {meta.get('name')}:{cordoned} Ready={ready}; taints {taints}; created {created}"


def _event_time(event: Json) -> str:
    meta = event.get("metadata") or {}
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or "")


def describe_event(event: Json) -> str:
    obj = event.get("involvedObject") or {}
    return (
        f"{_event_time(event)} {event.get('type')} {event.get('reason')} {obj.get('kind')}/{obj.get('name')} "
        f"(x{event.get('count') or 1}): {event.get('message')}"
    )


def describe(pods: Sequence[Json], events: Sequence[Json], nodes: Sequence[Json]) -> str:
    """Pods, the newest events (oldest first) and nodes, one line each, each list capped."""
    lines = [f"{len(pods)} pod(s) in the test's namespace"]
    lines += [describe_pod(p) for p in pods[:MAX_PODS]]
    newest = sorted(events, key=_event_time)[-MAX_EVENTS:]
    lines.append(f"{len(events)} event(s) in the namespace, the last {len(newest)}:")
    lines += [describe_event(e) for e in newest]
    lines.append(f"{len(nodes)} node(s) of the test")
    lines += [describe_node(n) for n in nodes[:MAX_NODES]]
    return "\n".join(lines)


def read_cluster_state(api: Any, namespace: str | None, node_prefix: str | None) -> str:
    """`describe` over what the admin client reads now; the nodes are those named `node_prefix…`."""
    from localcluster import rest

    def items(path: str) -> list[Json]:
        return rest.list_items(api, path, timeout=READ_TIMEOUT_SECONDS)

    pods = items(rest.pod_path(namespace)) if namespace else []
    events = items(f"/api/v1/namespaces/{namespace}/events") if namespace else []
    nodes = [
        n
        for n in items(rest.node_path())
        if node_prefix and str((n.get("metadata") or {}).get("name", "")).startswith(node_prefix)
    ]
    return describe(pods, events, nodes)

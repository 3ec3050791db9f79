"""`python -m tests.bench.planning_client`: the client's share of planning at 30,000 pods.

Builds the pages a 1,000-node / 30,000-pod cluster answers to a pod listing (pods shaped as the
API server writes them: managed fields, tolerations, status with conditions and container
statuses, ~3.7 KB each; 500 to a page), then times, interleaved round by round in this one
process: the decode scalebot made before (the projected Structs back to dicts, then a dict
decode, `pod_from_dict`, kept here as the baseline), the typed decode it makes now
(`engine.kube.projection.decode_pod_page`), and the pure plan of a zero-scale over the decoded
pods (`plan_operation`). The API server's share (encoding and sending the pages) is measured
against a real control plane by `python -m tests.bench --only planning`; this bench needs no
cluster, so both decodes see the same bytes on the same loaded machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import orjson

from engine.domain.model import (
    DEFAULT_TERMINATION_GRACE_SECONDS,
    NodeInfo,
    OwnerRef,
    PodInfo,
    parse_time,
    scheduling_fields,
    unscheduled_reason,
)
from engine.domain.operation import OpKind, Target
from engine.kube import projection
from engine.planning.preflight import ClusterSnapshot, plan_operation
from engine.pools.base import Pool

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
CREATED = (NOW - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
PAGE = 500


def api_pod(i: int, node: str, daemon: bool) -> dict[str, Any]:
    """One pod as the API server lists it (the fields scalebot skips included)."""
    app = "agent" if daemon else f"app{i % 970}"
    name = f"agent-{node}" if daemon else f"{app}-7d9f8b6c5-{i:05d}"
    owner = "DaemonSet" if daemon else "ReplicaSet"
    return {
        "metadata": {
            "name": name,
            "generateName": f"{app}-",
            "namespace": "kube-system" if daemon else f"bench-{i % 10}",
            "uid": f"7c0e9a34-1b2c-4d5e-8f90-{i:012d}",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": CREATED,
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": app if daemon else f"{app}-7d9f8b6c5",
                    "uid": f"a1b2c3d4-0000-4000-8000-{i % 970:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": CREATED,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}},
                    },
                },
                {
                    "manager": "kwok",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": CREATED,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}}},
                    "subresource": "status",
                },
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/app:1.0",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 2,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"scalebot.io/pool": node.rsplit("-", 1)[0]},
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": CREATED}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "podIPs": [{"ip": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"}],
            "startTime": CREATED,
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {"running": {"startedAt": CREATED}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example/app:1.0",
                    "imageID": "",
                    "started": True,
                }
            ],
            "qosClass": "Burstable",
        },
    }


PAGE_SIZES = (500, 2000, 5000, 0)
"""The page sizes compared (0: one unpaginated answer)."""


def pages(nodes: int, pods_per_node: int, page: int = PAGE) -> list[bytes]:
    """The listing's pages of `page` pods each (0: one page holding every pod)."""
    pods = [
        api_pod(n * pods_per_node + j, f"pool-{n % 10}-{n:04d}", daemon=j == 0)
        for n in range(nodes)
        for j in range(pods_per_node)
    ]
    size = page or len(pods)
    out = []
    for start in range(0, len(pods), size):
        more = start + size < len(pods)
        meta = {"resourceVersion": "200000", **({"continue": f"token-{start}"} if more else {})}
        out.append(
            orjson.dumps(
                {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": pods[start : start + size]}
            )
        )
    return out


def before(data: list[bytes]) -> list[PodInfo]:
    """The decode before typed decoding: Structs back to dicts, then `pod_from_dict`."""
    out = []
    for page in data:
        built = msgspec.to_builtins(projection._DECODER.decode(page), enc_hook=raw_as_builtins)
        out.extend(pod_from_dict(raw) for raw in built.get("items") or ())
    return out


def pod_from_dict(raw: Mapping[str, Any]) -> PodInfo:
    """A pod's dict read into PodInfo, as scalebot read pods before the typed decode
    (`engine.kube.projection`): the benches' baseline only, never scalebot's road."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    controller = None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            controller = OwnerRef(
                kind=ref.get("kind", ""),
                name=ref.get("name", ""),
                uid=ref.get("uid", ""),
                api_version=ref.get("apiVersion", ""),
            )
            break
    grace = spec.get("terminationGracePeriodSeconds")
    volumes = spec.get("volumes") or ()
    zoned = [v.get("name", "") for v in volumes if v.get("persistentVolumeClaim") or v.get("ephemeral")]
    fields = scheduling_fields(
        spec, namespace=meta.get("namespace", ""), labels=meta.get("labels") or {}, zoned_volumes=zoned
    )
    return PodInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        controller=controller,
        has_empty_dir=any("emptyDir" in v for v in volumes),
        priority_class=spec.get("priorityClassName") or "",
        termination_grace_seconds=DEFAULT_TERMINATION_GRACE_SECONDS if grace is None else int(grace),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        created_at=parse_time(meta.get("creationTimestamp")),
        unscheduled_reason=unscheduled_reason(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping)
        ),
        local_volumes=tuple(
            str(v.get("name") or "")
            for v in volumes
            if "hostPath" in v or ("emptyDir" in v and (v.get("emptyDir") or {}).get("medium") != "Memory")
        ),
        **fields._asdict(),
    )


def raw_as_builtins(value: Any) -> Any:
    """The fields the Structs keep as bytes (containers, scheduling rules), as dicts for `pod_from_dict`."""
    if isinstance(value, msgspec.Raw):
        return msgspec.json.decode(value)
    raise TypeError(f"unexpected {type(value)}")


def after(data: list[bytes]) -> list[PodInfo]:
    return [pod for page in data for pod in projection.decode_pod_page(page).items]


def snapshot(nodes: int, pods: list[PodInfo]) -> ClusterSnapshot:
    names = [f"pool-{n % 10}-{n:04d}" for n in range(nodes)]
    pools = tuple(
        Pool(name=f"pool-{p}", provider="labels", desired=nodes // 10, nodes=tuple(sorted(names[p::10])))
        for p in range(10)
    )
    node_infos = tuple(
        NodeInfo(name=name, labels={"scalebot.io/pool": name.rsplit("-", 1)[0]}, ready="True")
        for name in names
    )
    return ClusterSnapshot(
        cluster="bench",
        pools=pools,
        nodes=node_infos,
        pods=tuple(pods),
        pdbs=(),
        daemonset_keys=frozenset({"kube-system/agent"}),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    data = pages(args.nodes, args.pods_per_node)
    old_s, new_s, plan_s = [], [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        old = before(data)
        old_s.append(time.perf_counter() - t)
        del old
        t = time.perf_counter()
        new = after(data)
        new_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        plan_operation(OpKind.ZERO, Target(cluster="bench"), snapshot(args.nodes, new), now=NOW)
        plan_s.append(time.perf_counter() - t)
    if before(data) != after(data):
        raise SystemExit("the two decodes disagree")
    by_size = {size: pages(args.nodes, args.pods_per_node, size) for size in PAGE_SIZES}
    decode_s: dict[int, list[float]] = {size: [] for size in PAGE_SIZES}
    for round_no in range(args.rounds):
        for size in PAGE_SIZES if round_no % 2 == 0 else tuple(reversed(PAGE_SIZES)):
            t = time.perf_counter()
            after(by_size[size])
            decode_s[size].append(time.perf_counter() - t)
    megabytes = sum(len(p) for p in data) / 1e6
    old_m, new_m, plan_m = (statistics.median(x) for x in (old_s, new_s, plan_s))
    print(
        f"{args.nodes * args.pods_per_node:,} pods, {megabytes:.0f} MB in {len(data)} pages, "
        f"median of {args.rounds}, load {' / '.join(f'{x:.2f}' for x in os.getloadavg())}:\n"
        f"  decode before (Structs -> dicts -> pod_from_dict):   {old_m:.2f} s\n"
        f"  typed decode now (Structs -> PodInfo):                {new_m:.2f} s "
        f"({old_m / new_m:.1f}x faster)\n"
        f"  plan_operation (zero, pure):                          {plan_m:.2f} s\n"
        "  the typed decode by page size (the client's share only; the server's is measured by\n"
        "  `python -m tests.bench --only planning`), sizes alternating round by round:"
    )
    for size in PAGE_SIZES:
        largest = max(len(p) for p in by_size[size]) / 1e6
        label = "unpaginated" if size == 0 else f"pages of {size:,}"
        print(f"    {label:<16} {statistics.median(decode_s[size]):.2f} s (largest page {largest:.0f} MB)")


if __name__ == "__main__":
    main()

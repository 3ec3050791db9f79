"""The drain's fixed eviction limit against API Priority and Fairness, on the real control plane.

scalebot keeps 64 evictions in flight per cluster (`RunnerSettings.parallel_evictions`, chosen over
the adaptive limit in docs/benchmarks.md, "The eviction limit"), and relies on the API server to
say when that is too many: a 429 with Retry-After, after which the pod is left alone for that long
and evicted again in a later pass (`engine.drain.passes.retry_delay_seconds`).

Here the API server says it, for real: scalebot's evictions in the test's namespace get a priority
level of about 3 seats that rejects beyond them (`support.evictions_rejected_beyond_one_share`), so
most of a wave of 64 is answered 429 at once.

Proves: a zero-scale of a pool by the real Operations and runner, as scalebot's ServiceAccount, with
`scalebot run`'s eviction limit, still succeeds with every pod evicted (through the budget, which
refuses with 429 too) and none force-deleted; and the API server counted rejections for that
priority level, so the throttling really happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState
from engine.kube.client import KubeClient
from localcluster import objects, rest, waits
from tests.e2e import support

pytestmark = pytest.mark.e2e

PODS = 60


def _rejected(admin_api: Any, level: str) -> float:
    """apiserver_flowcontrol_rejected_requests_total for `level`, over every flow schema and reason."""
    text = rest.send_request(admin_api, "GET", "/metrics", timeout=60).data.decode()
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_flowcontrol_rejected_requests_total{")
            and f'priority_level="{level}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _schema_in_force(scalebot_api: Any, namespace: str, pod: str, schema_uid: str) -> bool:
    """A server-side dry-run eviction as scalebot is classified by the test's flow schema."""
    answer = rest.send_request(
        scalebot_api,
        "POST",
        rest.pod_path(namespace, pod) + "/eviction",
        body={
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        },
        query={"dryRun": "All"},
    )
    return bool(answer.headers.get("X-Kubernetes-PF-FlowSchema-UID") == schema_uid)


def test_the_fixed_limit_drains_through_priority_and_fairness_rejections(
    admin_api: Any,
    scalebot_api: Any,
    kube: KubeClient,
    pool_key: str,
    namespace: str,
    unique_name: str,
    node_pool: Callable[..., list[str]],
    throttled_evictions: str,
    tmp_path: Path,
) -> None:
    made = support.pools(node_pool, pool_key, unique_name, a=1)
    group = support.group(unique_name)
    objects.create_deployment(admin_api, namespace, "web", PODS, node_selector=group, grace=0, cpu="50m")
    waits.wait_for_deployment_available(admin_api, namespace, "web", timeout=180)
    support.pools(node_pool, pool_key, unique_name, b=1)  # after: the replacements go there
    support.budget(admin_api, namespace, "web", app="web", max_unavailable=10, expected_pods=PODS)
    schema_uid = rest.get(admin_api, f"{support.FLOWCONTROL}/flowschemas/{throttled_evictions}")["metadata"][
        "uid"
    ]
    first = rest.list_pods(admin_api, namespace)[0]["metadata"]["name"]
    waits.wait_until(
        lambda: _schema_in_force(scalebot_api, namespace, first, schema_uid),
        30,
        "the API server to classify scalebot's evictions by the test's flow schema",
    )
    rejected_before = _rejected(admin_api, throttled_evictions)
    # The eviction limit as `scalebot run` has it; only the pacing between passes is the tests'.
    settings = dataclasses.replace(support.FAST, drain_timeout=timedelta(minutes=5))
    assert (settings.parallel_evictions, settings.adaptive_evictions) == (64, False)

    with support.operations(kube, pool_key, tmp_path / "db.sqlite", settings) as ops:
        op = support.run(ops, support.request(OpKind.ZERO, f"{unique_name}-a"), timeout=360)

    assert op.state is OpState.SUCCEEDED, (op.state, op.error)
    assert op.progress.drain.evicted == PODS, op.progress.drain
    assert op.progress.drain.force_deleted == ()
    [node] = made["a"]
    assert rest.pods_on_node(admin_api, node, namespace=namespace) == []
    rejected = _rejected(admin_api, throttled_evictions) - rejected_before
    assert rejected > 0, "the API server rejected none of the drain's evictions: no throttling was tested"
    print(f"{PODS} pods evicted through {rejected:.0f} rejections by API Priority and Fairness")

"""The progress figures of a real zero-scale, against the real control plane as scalebot's
ServiceAccount: the totals match the plan, a rate and an ETA appear once a second pass is known,
and the final figures equal the operation's summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.domain.operation import OpKind, OpState, ProgressEvent
from engine.domain.progress_figures import ProgressFigures, figures
from engine.kube.client import KubeClient
from tests.e2e.support import budget, deployment, group, operations, pools, request, run

pytestmark = pytest.mark.e2e


def test_figures_of_a_real_zero_scale(
    admin_api: Any,
    kube: KubeClient,
    namespace: str,
    node_pool: Callable[..., list[str]],
    pool_key: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    made = pools(node_pool, pool_key, unique_name, a=2)
    deployment(admin_api, namespace, "web", 4, node_selector=group(unique_name))
    pools(node_pool, pool_key, unique_name, b=1)  # after the pods are placed: all of them are on pool a
    # A budget paces the evictions: the drain takes more than one pass, so a rate can be measured.
    budget(admin_api, namespace, "web-pdb", app="web", max_unavailable=1)
    seen: list[ProgressFigures] = []

    def record(event: ProgressEvent) -> None:
        f = figures(event.operation)
        if f is not None and event.kind == "report":
            seen.append(f)

    with operations(kube, pool_key, tmp_path / "db.sqlite") as ops:
        ops.subscribe(record)
        op = run(ops, request(OpKind.ZERO, f"{unique_name}-a"))

    assert op.state is OpState.SUCCEEDED, op.error
    assert sorted(op.plan.nodes) == sorted(made["a"])
    assert seen, "the drain reported figures"
    assert {f.nodes_total for f in seen} == {2}
    assert seen[0].pods_total == 4 and seen[0].pods_remaining >= 1
    measured = [f for f in seen if f.rate_per_minute]
    assert measured, f"a rate once two passes are known: {seen}"
    assert [f.eta_seconds is not None for f in measured] == [True] * len(measured), measured
    last = figures(op)
    assert last is not None and op.summary is not None
    assert (last.nodes_drained, last.nodes_total, last.pods_remaining) == (2, 2, 0)
    assert last.pods_evicted == op.summary.pods_evicted == 4
    assert last.eta_seconds == 0

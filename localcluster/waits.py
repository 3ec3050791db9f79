"""Deadline-bound waiters the tests synchronise on, and the readiness predicates they use.

Every waiter polls with a deadline and fails with `WaitTimeout` (an AssertionError) naming what it
waited for; none sleeps to synchronise. `assert_stays` is the opposite: an observation window for
"still holds after N seconds" claims.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from localcluster.rest import Json, get, get_or_none, list_items, list_pods, node_path, pod_path, quoted

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A deadline passed before the awaited condition held (an assertion failure in tests)."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    max_interval: float = 0.5,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll predicate until it returns something truthy, and return that; fail after `timeout` s.

    The poll interval grows from `interval` to `max_interval`. Exceptions listed in `ignore` (for
    example ApiException while an API server restarts) count as "not yet"; the last one is reported.
    """
    deadline = time.monotonic() + timeout
    delay = interval
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout:.1f} s waiting for {what} (last: {last!r})"[:2000])
        # Polling with a deadline, not synchronising: the predicate decides when we are done.
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, max_interval)


def assert_stays(
    predicate: Callable[[], object], duration: float, what: str, *, interval: float = 0.2
) -> None:
    """Check that predicate holds throughout the next `duration` seconds (an observation window).

    For "still there after N seconds" assertions: it polls for the whole window and fails at the
    first poll where the predicate is false.
    """
    deadline = time.monotonic() + duration
    while True:
        if not predicate():
            raise AssertionError(f"{what} stopped holding before {duration:.1f} s had passed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(interval, remaining))


def pod_is_running(pod: Json) -> bool:
    status = pod.get("status") or {}
    if pod.get("metadata", {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def wait_for_pods_running(
    api: Any,
    namespace: str,
    *,
    label_selector: str | None = None,
    count: int | None = None,
    timeout: float = 60.0,
) -> list[Json]:
    """Wait until `count` (or, without count, all and at least one) non-terminating pods are Running+Ready."""

    def check() -> list[Json] | None:
        pods = [
            p
            for p in list_pods(api, namespace, label_selector=label_selector)
            if not p["metadata"].get("deletionTimestamp")
        ]
        running = [p for p in pods if pod_is_running(p)]
        if count is not None:
            return running if len(running) == count and len(pods) == count else None
        return running if running and len(running) == len(pods) else None

    selector = f" ({label_selector})" if label_selector else ""
    return wait_until(
        check, timeout, f"{count if count is not None else 'all'} pods Running in {namespace}{selector}"
    )


def wait_for_pod_gone(
    api: Any, namespace: str, name: str, *, uid: str | None = None, timeout: float = 60.0
) -> None:
    """Wait until the pod is deleted (or, with uid, until no pod with that UID exists under the name)."""

    def gone() -> bool:
        pod = get_or_none(api, pod_path(namespace, name))
        return pod is None or (uid is not None and pod["metadata"]["uid"] != uid)

    wait_until(gone, timeout, f"pod {namespace}/{name} to be gone")


def wait_for_pdb_observed(
    api: Any,
    namespace: str,
    name: str,
    *,
    expected_pods: int | None = None,
    disruptions_allowed: int | None = None,
    timeout: float = 30.0,
) -> Json:
    """Wait until the disruption controller has observed the PDB (and, optionally, counted its pods,
    or allows at least `disruptions_allowed` evictions).

    Until then every eviction of a covered pod is refused with 429, whatever the budget says. A pod
    is counted as expected before it is counted as healthy (Ready), so a budget can be observed with
    all its pods and still allow nothing for a moment.
    """
    path = f"/apis/policy/v1/namespaces/{quoted(namespace)}/poddisruptionbudgets/{quoted(name)}"

    def observed() -> Json | None:
        pdb = get(api, path)
        status = pdb.get("status") or {}
        if status.get("observedGeneration") != pdb["metadata"].get("generation"):
            return None
        if expected_pods is not None and status.get("expectedPods") != expected_pods:
            return None
        if disruptions_allowed is not None and (status.get("disruptionsAllowed") or 0) < disruptions_allowed:
            return None
        return pdb

    return wait_until(observed, timeout, f"PDB {namespace}/{name} observed by the disruption controller")


def node_is_ready(node: Json) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def wait_for_nodes_ready(api: Any, names: Sequence[str], *, timeout: float = 60.0) -> None:
    wanted = set(names)

    def all_ready() -> bool:
        if len(wanted) <= 20:
            nodes = [n for name in wanted if (n := get_or_none(api, node_path(name))) is not None]
        else:
            nodes = [n for n in list_items(api, node_path()) if n["metadata"]["name"] in wanted]
        return sum(1 for n in nodes if node_is_ready(n)) == len(wanted)

    wait_until(all_ready, timeout, f"{len(wanted)} kwok nodes Ready", max_interval=1.0)


def wait_for_default_serviceaccount(api: Any, namespace: str, *, timeout: float = 30.0) -> None:
    """Wait for the serviceaccount controller to create `default`; pods are rejected until it exists."""
    path = f"/api/v1/namespaces/{quoted(namespace)}/serviceaccounts/default"
    wait_until(lambda: get_or_none(api, path) is not None, timeout, f"ServiceAccount {namespace}/default")


def wait_for_deployment_available(api: Any, namespace: str, name: str, *, timeout: float = 60.0) -> Json:
    path = f"/apis/apps/v1/namespaces/{quoted(namespace)}/deployments/{quoted(name)}"

    def available() -> Json | None:
        dep = get(api, path)
        status = dep.get("status") or {}
        want = dep["spec"].get("replicas", 1)
        ok = (
            status.get("observedGeneration") == dep["metadata"]["generation"]
            and status.get("availableReplicas", 0) == want
            and status.get("updatedReplicas", 0) == want
            and status.get("replicas", 0) == want
        )
        return dep if ok else None

    return wait_until(available, timeout, f"Deployment {namespace}/{name} available")

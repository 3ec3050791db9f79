"""The drain's pod watch broken by the TCP fault proxy: the drain falls back to listing.

scalebot's client goes through `tests/reliability/faultproxy.py` to the shared control plane.
While a pod held by a finalizer keeps the drain waiting on its watch, the proxy resets every open
connection (the watch among them, idle between two events). The next pass lists the pods (the
fallback) and starts a new watch from that listing; once the finalizer is removed the drain
completes, and the nodes are checked empty behind the proxy's back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.domain.clock import SystemClock
from engine.domain.settings import DrainSettings
from engine.drain import driver as drainer
from engine.drain import filters
from engine.kube.client import KubeClient
from localcluster import objects, rest, waits
from tests.e2e import support
from tests.reliability.faultproxy import FaultProxy
from tests.reliability.support import proxied_kubeconfig

pytestmark = pytest.mark.e2e

SETTINGS = DrainSettings(
    interval=timedelta(seconds=1), settle=timedelta(seconds=1), timeout=timedelta(seconds=120)
)


class WatchBreaks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("pod watch ended"):
            self.messages.append(record.getMessage())


@pytest.fixture
def breaks() -> Iterator[WatchBreaks]:
    handler = WatchBreaks()
    logger = logging.getLogger("engine.drain.pod_feed")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_a_broken_pod_watch_falls_back_to_listing_and_the_drain_completes(
    control_plane: Any,
    admin_api: Any,
    namespace: str,
    node_pool: Callable[..., list[str]],
    unique_name: str,
    breaks: WatchBreaks,
    tmp_path: Path,
) -> None:
    group = support.group(unique_name)
    nodes = node_pool(3, labels=group)
    support.deployment(admin_api, namespace, "web", 6, node_selector=group, grace=1)
    objects.create_pod_with_finalizer(
        admin_api, namespace, "held", node=nodes[0], grace=1, owner_references=()
    )
    waits.wait_for_pods_running(admin_api, namespace, count=7)

    failure: list[BaseException] = []
    cut: list[int] = []
    with FaultProxy(control_plane.api_port, seed=3) as proxy:
        kubeconfig = proxied_kubeconfig(control_plane.scalebot_kubeconfig, proxy.port, tmp_path / "k")
        kube = KubeClient.from_config(kubeconfig=str(kubeconfig))

        def break_the_watch_then_release() -> None:
            try:
                held = rest.pod_path(namespace, "held")
                waits.wait_until(
                    lambda: (
                        rest.get(admin_api, held)["metadata"].get("deletionTimestamp")
                        and kube.request_counts[("watch", "pods")] >= 1
                    ),
                    60,
                    "held evicted while the watch runs",
                )
                cut.append(proxy.reset_open_connections())
                # The fallback: a pass lists the pods again, then watches from that listing.
                waits.wait_until(
                    lambda: (
                        kube.request_counts[("list", "pods")] >= 2
                        and kube.request_counts[("watch", "pods")] >= 2
                    ),
                    60,
                    "a listing after the break, and a new watch",
                )
                objects.remove_finalizers(admin_api, namespace, "held")
            except BaseException as exc:  # reported by the test, never lost in the thread
                failure.append(exc)

        helper = threading.Thread(target=break_the_watch_then_release, name="break-watch", daemon=True)
        helper.start()
        try:
            outcome = drainer.drain_nodes(
                kube, nodes, options=filters.DrainOptions.machine(), clock=SystemClock(), settings=SETTINGS
            )
        finally:
            helper.join(timeout=90)
            kube.close()
    assert not failure, failure
    assert cut and cut[0] >= 1, "the proxy cut the open connections"
    assert breaks.messages, "the watch broke"
    assert outcome.completed, outcome.report.condition_message()
    # Checked behind the proxy's back: nothing but what a drain leaves is on the nodes.
    assert not [p for n in nodes for p in rest.pods_on_node(admin_api, n)], "the nodes are empty"

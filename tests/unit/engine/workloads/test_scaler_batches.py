"""The workloads step's writes side by side: within a wake order, never across one.

A night of 1,000 workloads spent minutes changing them one at a time (docs/benchmarks.md). The
scaler now sends the workloads of one wake order together (`WRITES_IN_FLIGHT` at a time) and keeps
the plan's order between orders and for GitOps owners.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from engine.kube import errors
from engine.workloads import order as wake_order
from engine.workloads.model import HpaInfo, Kind, NamespaceInfo, WorkloadInfo, WorkloadRecord
from engine.workloads.scaler import WorkloadScaler


class SlowApi:
    """Deployments in one namespace whose patches are held, so a test sees what the scaler sends
    side by side. `together`: the first patches wait until that many are in flight at once; with
    `whole_orders`, each patch waits until every workload of its wake order is in flight (a scaler
    that mixed orders in one batch would have more in flight than one order holds)."""

    def __init__(
        self, orders: Mapping[str, int | None], *, together: int = 0, whole_orders: bool = False
    ) -> None:
        self.orders = dict(orders)
        self.workloads = {
            name: WorkloadInfo(
                Kind.DEPLOYMENT,
                "shop",
                name,
                2,
                resource_version="1",
                annotations={} if order is None else {wake_order.WAKE_ORDER_ANNOTATION: str(order)},
            )
            for name, order in orders.items()
        }
        self.together = together
        self.whole_orders = whole_orders
        self.in_flight = 0
        self.in_flight_of: dict[int | None, int] = {}
        self.peak = 0
        self.patched: list[str] = []
        self._cond = threading.Condition()

    def list_namespaces(self) -> list[NamespaceInfo]:
        return [NamespaceInfo("shop")]

    def list_workloads(self, kind: Kind) -> list[WorkloadInfo]:
        return list(self.workloads.values()) if kind is Kind.DEPLOYMENT else []

    def list_hpas(self) -> list[HpaInfo]:
        return []

    def has_keda(self) -> bool:
        return False

    def get_workload(self, kind: Kind, namespace: str, name: str) -> WorkloadInfo:
        return self.workloads[name]

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        order = self.orders[name]
        size = sum(1 for o in self.orders.values() if o == order)
        with self._cond:
            self.in_flight += 1
            self.in_flight_of[order] = self.in_flight_of.get(order, 0) + 1
            self.peak = max(self.peak, self.in_flight)
            self._cond.notify_all()
            if self.whole_orders:
                self._cond.wait_for(lambda: self.in_flight_of[order] >= size, timeout=5)
            else:
                self._cond.wait_for(lambda: self.peak >= self.together, timeout=5)
            self.patched.append(name)
            self.in_flight -= 1

    def read_originals(self, namespace: str) -> Mapping[str, str]:
        return {}

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        """Kept in memory by nobody: the test looks at the patches."""


def test_the_workloads_of_one_order_are_changed_side_by_side() -> None:
    api = SlowApi({f"w{i}": None for i in range(12)}, together=4)
    report = WorkloadScaler(api, writes_in_flight=4).sleep()
    assert sorted(api.patched) == sorted(f"w{i}" for i in range(12))
    assert api.peak == 4, "four in flight at once, never more"
    assert len(report.records) == 12


def test_a_sleep_changes_a_higher_order_entirely_before_a_lower_one() -> None:
    orders: dict[str, int | None] = {f"db{i}": 10 for i in range(3)}
    orders |= {f"api{i}": 20 for i in range(3)}
    orders |= {f"web{i}": None for i in range(3)}
    api = SlowApi(orders, whole_orders=True)
    WorkloadScaler(api, writes_in_flight=8).sleep(wake_order.in_sleep_order(WorkloadScaler(api).plan_sleep()))
    # A sleep goes the other way of the wake: the unordered first, then 20, then 10.
    groups = [name.rstrip("0123456789") for name in api.patched]
    assert groups == ["web"] * 3 + ["api"] * 3 + ["db"] * 3
    assert api.peak == 3, "each order's three side by side, no order overlapping the next"


class RecordingApi(SlowApi):
    """SlowApi whose ConfigMap writes and patches are logged in one sequence; `refuse_originals`:
    every ConfigMap write of more than one key fails (a batch's write), single ones succeed."""

    def __init__(self, orders: Mapping[str, int | None], *, refuse_originals: bool = False) -> None:
        super().__init__(orders)
        self.refuse_originals = refuse_originals
        self.sequence: list[tuple[str, tuple[str, ...]]] = []

    def write_originals(self, namespace: str, changes: Mapping[str, str | None]) -> None:
        if self.refuse_originals and len(changes) > 1:
            raise errors.ServerError(status=500, message="etcdserver: request timed out")
        with self._cond:
            self.sequence.append(("originals", tuple(sorted(changes))))

    def patch_workload(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        with self._cond:
            self.sequence.append(("patch", (name,)))
            self.patched.append(name)


def test_a_batch_is_recorded_in_one_configmap_write_before_any_of_its_patches() -> None:
    api = RecordingApi({f"w{i}": None for i in range(12)})
    recorded: list[str] = []
    report = WorkloadScaler(api, writes_in_flight=4).sleep(record=lambda r: recorded.append(r.name))
    assert sorted(recorded) == sorted(f"w{i}" for i in range(12))
    [first, *patches] = api.sequence
    assert first[0] == "originals" and len(first[1]) == 12, api.sequence
    assert sorted(p[1][0] for p in patches) == sorted(recorded) and {p[0] for p in patches} == {"patch"}
    assert len(report.records) == 12


def test_a_failing_record_stops_the_sleep_before_any_object_of_its_batch_changes() -> None:
    api = RecordingApi({f"w{i}": None for i in range(6)})

    def record(r: WorkloadRecord) -> None:
        if r.name == "w3":
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        WorkloadScaler(api, writes_in_flight=4).sleep(record=record)
    assert api.sequence == [], "nothing written to the cluster: the ConfigMap or a workload"


def test_a_failed_batch_write_leaves_each_object_to_write_its_own_original_first() -> None:
    api = RecordingApi({f"w{i}": None for i in range(5)}, refuse_originals=True)
    WorkloadScaler(api, writes_in_flight=5).sleep()
    for name in (f"w{i}" for i in range(5)):
        patch_at = api.sequence.index(("patch", (name,)))
        kept = [i for i, (what, keys) in enumerate(api.sequence) if what == "originals" and name in str(keys)]
        assert kept and kept[0] < patch_at, (name, api.sequence)

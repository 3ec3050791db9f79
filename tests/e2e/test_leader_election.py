"""Leader election (engine.kube.lease) against the real API server, as scalebot's ServiceAccount.

Covers: two candidates, one leader, and the other never leads while the leader renews; a leader
that stops renewing without releasing (a kill) is replaced after its lease expires, not before,
and within the lease duration plus one retry period; `release()` hands over at once; a write based
on a stale resourceVersion is refused (409) and never steals a Lease someone else renewed; the
transitions counter; the Role allows Leases only in scalebot's namespace.

Durations are shortened (lease 4 s, renew deadline 3 s, retry 0.5 s); waits are deadlines on
events, never sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.domain.model import parse_time
from engine.kube import errors, lease
from localcluster import rest, waits

pytestmark = pytest.mark.e2e

NAMESPACE = "scalebot"
LEASE = timedelta(seconds=4)
RENEW = timedelta(seconds=3)
RETRY = timedelta(seconds=0.5)
SLACK_SECONDS = 1.5
"""Request latency and thread scheduling on a busy 2-core machine."""


@dataclass
class Candidate:
    elector: lease.LeaseElector
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    thread: threading.Thread | None = None

    def on_started(self) -> None:
        self.started_at = time.monotonic()
        self.started.set()

    def run(self) -> Candidate:
        self.thread = self.elector.start(self.on_started, self.stopped.set, self.stop)
        return self

    def kill(self) -> None:
        """What a SIGKILL leaves behind: no more renewals, and no release."""
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def lease_name(unique_name: str, admin_api: Any) -> Iterator[str]:
    name = f"le-{unique_name}"
    yield name
    rest.delete(admin_api, lease_path(name))


@pytest.fixture
def candidates() -> Iterator[list[Candidate]]:
    """Every candidate a test made; their loops are stopped afterwards (no release)."""
    made: list[Candidate] = []
    yield made
    for candidate in made:
        candidate.stop.set()
        if candidate.thread is not None:
            candidate.thread.join(timeout=10)


@pytest.fixture
def make_candidate(candidates: list[Candidate], scalebot_api: Any, lease_name: str) -> Any:
    def make(identity: str, **kwargs: Any) -> Candidate:
        settings: dict[str, Any] = {"lease_duration": LEASE, "renew_deadline": RENEW, "retry_period": RETRY}
        settings.update(kwargs)
        elector = lease.LeaseElector(
            scalebot_api, namespace=NAMESPACE, name=lease_name, identity=identity, **settings
        )
        candidate = Candidate(elector)
        candidates.append(candidate)
        return candidate

    return make


def lease_path(name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}"


def read_lease(api: Any, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = rest.get(api, lease_path(name))["spec"]
    return spec


def first_leader(*candidates: Candidate, timeout: float = 10.0) -> Candidate:
    return waits.wait_until(
        lambda: next((c for c in candidates if c.started.is_set()), None), timeout, "a leader to be elected"
    )


def test_only_one_candidate_leads(make_candidate: Any, admin_api: Any, lease_name: str) -> None:
    a, b = make_candidate("candidate-a").run(), make_candidate("candidate-b").run()
    leader = first_leader(a, b)
    other = b if leader is a else a
    # Two lease durations of renewals: the standby must never get in.
    assert not other.started.wait(timeout=2 * LEASE.total_seconds()), "two leaders at once"
    assert leader.elector.is_leader and not other.elector.is_leader
    spec = read_lease(admin_api, lease_name)
    assert spec["holderIdentity"] == leader.elector.identity
    assert spec["leaseDurationSeconds"] == 4
    assert spec["leaseTransitions"] == 0
    assert other.elector.observed is not None and other.elector.observed.holder == leader.elector.identity


def test_standby_takes_over_after_the_leader_stops_renewing(
    make_candidate: Any, admin_api: Any, lease_name: str
) -> None:
    a, b = make_candidate("candidate-a").run(), make_candidate("candidate-b").run()
    leader = first_leader(a, b)
    other = b if leader is a else a
    leader.kill()
    killed_at = time.monotonic()
    assert leader.stopped.is_set(), "the killed loop told its owner to stop working"
    last_renewal = parse_time(read_lease(admin_api, lease_name)["renewTime"])
    assert last_renewal is not None

    assert other.started.wait(timeout=LEASE.total_seconds() + RETRY.total_seconds() * 1.2 + SLACK_SECONDS)
    took = other.started_at - killed_at
    assert took <= LEASE.total_seconds() + RETRY.total_seconds() * 1.2 + SLACK_SECONDS
    spec = read_lease(admin_api, lease_name)
    assert spec["holderIdentity"] == other.elector.identity
    assert spec["leaseTransitions"] == 1
    acquired = parse_time(spec["acquireTime"])
    assert acquired is not None and acquired >= last_renewal + LEASE, "taken over only once expired"


def test_release_hands_over_at_once(make_candidate: Any, admin_api: Any, lease_name: str) -> None:
    # A long lease, so that "at once" and "after expiry" cannot be confused.
    long = {"lease_duration": timedelta(seconds=30), "renew_deadline": timedelta(seconds=20)}
    a, b = make_candidate("candidate-a", **long).run(), make_candidate("candidate-b", **long).run()
    leader = first_leader(a, b)
    other = b if leader is a else a
    leader.kill()  # graceful shutdown: stop the loop (and the work) first...
    released_at = time.monotonic()
    assert leader.elector.release()  # ...then hand the Lease over
    assert not leader.elector.is_leader
    assert other.started.wait(timeout=RETRY.total_seconds() * 1.2 + SLACK_SECONDS + 1.0)
    assert other.started_at - released_at < 5.0, "well before the 30 s lease would have expired"
    spec = read_lease(admin_api, lease_name)
    assert spec["holderIdentity"] == other.elector.identity and spec["leaseTransitions"] == 1
    assert not leader.elector.release(), "nothing to release once someone else holds it"


def test_a_stale_write_never_steals_a_renewed_lease(
    make_candidate: Any, admin_api: Any, lease_name: str
) -> None:
    a = make_candidate("candidate-a")
    assert a.elector.try_acquire_or_renew(), "creates the missing Lease"
    assert a.elector.try_acquire_or_renew(), "renews its own Lease"
    assert read_lease(admin_api, lease_name)["leaseTransitions"] == 0
    # Someone else takes the Lease behind a's back (a's cached resourceVersion is now stale).
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    rest.patch(
        admin_api,
        lease_path(lease_name),
        {"spec": {"holderIdentity": "intruder", "renewTime": now, "leaseDurationSeconds": 60}},
    )
    assert not a.elector.try_acquire_or_renew(), "409 on the stale write, then the intruder's valid Lease"
    assert not a.elector.is_leader
    assert read_lease(admin_api, lease_name)["holderIdentity"] == "intruder"
    b = make_candidate("candidate-b")
    assert not b.elector.try_acquire_or_renew()
    assert b.elector.observed is not None and b.elector.observed.holder == "intruder"


def test_leases_are_allowed_only_in_scalebots_namespace(scalebot_api: Any, unique_name: str) -> None:
    for namespace in ("default", "kube-node-lease"):
        elector = lease.LeaseElector(scalebot_api, namespace=namespace, name=unique_name, identity="x")
        with pytest.raises(errors.Forbidden):
            elector.try_acquire_or_renew()


def test_inconsistent_durations_are_refused(scalebot_api: Any) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        lease.LeaseElector(
            scalebot_api, namespace=NAMESPACE, identity="x", lease_duration=RENEW, renew_deadline=LEASE
        )
    with pytest.raises(ValueError, match="identity"):
        lease.LeaseElector(scalebot_api, namespace=NAMESPACE, identity="")


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[Any]:
    """A control plane for the outage test alone: stopping its API server disturbs no other test."""
    from localcluster.binaries import ensure_binaries
    from localcluster.controlplane import ControlPlane

    with ControlPlane(ensure_binaries()) as cp:
        yield cp


def test_a_leader_cut_off_from_the_api_server_stops_before_its_lease_can_expire(
    own_control_plane: Any, unique_name: str
) -> None:
    api = own_control_plane.scalebot_api_client(pool_size=2)
    elector = lease.LeaseElector(
        api,
        namespace=NAMESPACE,
        name=unique_name,
        identity="cut-off",
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
    )
    terms: list[str] = []
    stopped_at: list[datetime] = []
    started, stopped, stop = threading.Event(), threading.Event(), threading.Event()

    def on_started() -> None:
        terms.append("started")
        started.set()

    def on_stopped() -> None:
        stopped_at.append(datetime.now(UTC))
        terms.append("stopped")
        stopped.set()

    thread = elector.start(on_started, on_stopped, stop)
    try:
        assert started.wait(10)
        started.clear()
        own_control_plane.stop_apiserver()
        assert stopped.wait(RENEW.total_seconds() + RETRY.total_seconds() + SLACK_SECONDS)
        record = elector.observed
        assert record is not None and record.renew_time is not None
        # The safety margin: a standby may take over at renewTime + leaseDuration; we stopped before.
        assert stopped_at[0] < record.renew_time + LEASE
        assert not elector.is_leader
        own_control_plane.start_apiserver()
        assert started.wait(30), "back to standby, then leader again once the API server returns"
        assert terms == ["started", "stopped", "started"]
    finally:
        own_control_plane.start_apiserver()
        stop.set()
        thread.join(timeout=10)
        api.close()

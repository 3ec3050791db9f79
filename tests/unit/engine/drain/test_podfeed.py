"""The drain's pod feed: one listing, then a watch, resumed, relisted on 410, a listing again when
it breaks; the watch's cue when the awaited pods are gone.

The API is a scripted stand-in for `PodWatchApi` (each watch request plays a queue the test fills);
the real watch against the API server is proven in tests/e2e/test_drain_watch.py.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import pytest

from engine.domain.model import PodInfo
from engine.drain.pod_feed import MAX_BREAKS, PodFeed
from engine.kube import errors
from engine.kube.api import PodEvent, PodListing
from engine.kube.fake import FakeCluster
from tests.builders import pod

END = object()
"""The server ended the watch normally (its timeout)."""


@dataclass
class Stream:
    script: queue.Queue[object] = field(default_factory=queue.Queue)
    closed: bool = False

    def __iter__(self) -> Iterator[PodEvent]:
        while True:
            item = self.script.get(timeout=10)
            if item is END or self.closed:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, PodEvent)
            yield item

    def close(self) -> None:
        self.closed = True
        self.script.put(END)


@dataclass
class ScriptedApi:
    listings: list[PodListing]
    watch_versions: list[str] = field(default_factory=list)
    streams: list[Stream] = field(default_factory=list)
    refuse_watch: errors.KubeError | None = None
    plain_lists: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def list_pods(self, *, node_names: Collection[str] | None = None) -> list[PodInfo]:
        self.plain_lists += 1
        return [p for p in self.listings[-1].pods if node_names is None or p.node_name in node_names]

    def list_pods_at(self, *, node_names: Collection[str] | None) -> PodListing:
        listing = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        return listing

    def watch_pods(self, *, node_names: Collection[str], resource_version: str) -> Stream:
        with self.changed:
            self.watch_versions.append(resource_version)
            if self.refuse_watch is not None:
                self.changed.notify_all()
                raise self.refuse_watch
            stream = Stream()
            self.streams.append(stream)
            self.changed.notify_all()
            return stream

    def wait_for_watches(self, n: int) -> Stream:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.watch_versions) >= n, timeout=10), (
                self.watch_versions
            )
        return self.streams[-1] if self.streams else Stream()


def until(predicate: object, what: str) -> None:
    done = threading.Event()
    for _ in range(1000):
        if callable(predicate) and predicate():
            return
        done.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def event(kind: str, p: PodInfo | None, version: str) -> PodEvent:
    return PodEvent(type=kind, pod=p, resource_version=version)  # type: ignore[arg-type]


@pytest.fixture
def api() -> ScriptedApi:
    return ScriptedApi(
        listings=[PodListing(pods=[pod("a"), pod("b"), pod("c", node="w-2")], resource_version="10")]
    )


def test_one_listing_then_the_watch_answers_every_pass(api: ScriptedApi) -> None:
    feed = PodFeed(api, ["w-1", "w-2"])  # type: ignore[arg-type]
    try:
        assert {p.name for p in feed.pods(["w-1"])} == {"a", "b"}
        stream = api.wait_for_watches(1)
        assert api.watch_versions == ["10"], "the watch resumes from the listing's resourceVersion"
        stream.script.put(event("DELETED", pod("a"), "11"))
        stream.script.put(event("ADDED", pod("d"), "12"))
        until(lambda: {p.name for p in feed.pods(["w-1", "w-2"])} == {"b", "c", "d"}, "the events")
        for _ in range(50):
            feed.pods(["w-1", "w-2"])
        assert feed.listings == 1 and api.plain_lists == 0, "passes read the watch, not the API"
        assert feed.watches == 1
    finally:
        feed.close()


def test_a_plans_listing_starts_the_feed_without_a_second_listing(api: ScriptedApi) -> None:
    planned = PodListing(pods=[pod("a"), pod("p", node="w-2")], resource_version="7")
    feed = PodFeed(api, ["w-1", "w-2"], seed=planned)  # type: ignore[arg-type]
    try:
        assert {p.name for p in feed.pods(["w-1", "w-2"])} == {"a", "p"}, "the plan's pods, as they were"
        stream = api.wait_for_watches(1)
        assert api.watch_versions == ["7"], "the watch replays every change since the plan's listing"
        stream.script.put(event("ADDED", pod("late"), "8"))
        stream.script.put(event("DELETED", pod("a"), "9"))
        until(lambda: {p.name for p in feed.pods(["w-1", "w-2"])} == {"p", "late"}, "the replayed events")
        assert feed.listings == 0 and api.plain_lists == 0, "no pod listing beyond the plan's"
    finally:
        feed.close()


def test_a_seed_is_used_once_a_broken_watch_lists_as_before(api: ScriptedApi) -> None:
    api.refuse_watch = errors.error_from_status(403, {"code": 403, "reason": "Forbidden", "message": "no"})
    feed = PodFeed(api, ["w-1"], seed=PodListing(pods=[pod("a")], resource_version="7"))  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        api.wait_for_watches(1)
        until(lambda: not feed.live, "the broken watch")
        assert {p.name for p in feed.pods(["w-1"])} == {"a", "b"}, "the API's listing, not the seed"
        api.wait_for_watches(2)
        assert feed.listings == 1 and api.watch_versions[:2] == ["7", "10"]
    finally:
        feed.close()


def test_a_watch_the_server_ends_resumes_from_the_last_resource_version(api: ScriptedApi) -> None:
    feed = PodFeed(api, ["w-1"])  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        stream = api.wait_for_watches(1)
        stream.script.put(event("BOOKMARK", None, "15"))
        stream.script.put(END)
        api.wait_for_watches(2)
        assert api.watch_versions == ["10", "15"]
        assert feed.live and feed.listings == 1
    finally:
        feed.close()


def test_410_gone_lists_afresh_and_watches_from_the_new_listing(api: ScriptedApi) -> None:
    api.listings.append(PodListing(pods=[pod("b")], resource_version="50"))
    feed = PodFeed(api, ["w-1"])  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        stream = api.wait_for_watches(1)
        stream.script.put(
            errors.error_from_status(410, {"code": 410, "reason": "Expired", "message": "too old"})
        )
        api.wait_for_watches(2)
        assert api.watch_versions == ["10", "50"]
        assert [p.name for p in feed.pods(["w-1"])] == ["b"], "the fresh listing replaced what was known"
        assert feed.listings == 2 and feed.live
    finally:
        feed.close()


def test_a_broken_watch_falls_back_to_listing_and_restarts_from_that_listing(api: ScriptedApi) -> None:
    feed = PodFeed(api, ["w-1"])  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        stream = api.wait_for_watches(1)
        stream.script.put(errors.TransportError(message="connection reset by peer"))
        until(lambda: not feed.live, "the break")
        assert feed.breaks == 1
        feed.pods(["w-1"])  # the next pass lists ...
        assert feed.listings == 2
        api.wait_for_watches(2)  # ... and watches again from that listing
        assert feed.live
    finally:
        feed.close()


def test_a_watch_refused_for_good_stops_being_retried(api: ScriptedApi) -> None:
    api.refuse_watch = errors.error_from_status(403, {"code": 403, "message": "cannot watch pods"})
    feed = PodFeed(api, ["w-1"])  # type: ignore[arg-type]
    try:
        for attempt in range(1, MAX_BREAKS + 1):
            assert {p.name for p in feed.pods(["w-1"])} == {"a", "b"}
            api.wait_for_watches(attempt)
            until(lambda: not feed.live, "the refusal")
        for _ in range(5):
            assert {p.name for p in feed.pods(["w-1"])} == {"a", "b"}
        assert len(api.watch_versions) == MAX_BREAKS, "no watch after MAX_BREAKS refusals"
        assert api.plain_lists == 5, "every pass lists instead"
    finally:
        feed.close()


def test_the_cue_comes_once_the_last_awaited_pod_is_gone(api: ScriptedApi) -> None:
    cue = threading.Event()
    feed = PodFeed(api, ["w-1"], on_change=cue.set)  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        stream = api.wait_for_watches(1)
        feed.await_gone({"uid-a", "uid-b"})
        stream.script.put(event("MODIFIED", pod("a"), "11"))
        stream.script.put(event("DELETED", pod("a"), "12"))
        stream.script.put(event("BOOKMARK", None, "13"))
        until(lambda: feed.pods(["w-1"]) == [pod("b")], "the first deletion")
        assert not cue.is_set(), "one of the two awaited pods is still there"
        stream.script.put(event("DELETED", pod("b"), "14"))
        assert cue.wait(10)
    finally:
        feed.close()


class CountedUid(str):
    """A UID that counts how often it is hashed: every set or dict look-up of it is one hash."""

    hashes = 0
    lock = threading.Lock()

    def __hash__(self) -> int:
        with CountedUid.lock:
            CountedUid.hashes += 1
        return str.__hash__(self)


def test_the_work_to_settle_a_deleted_pod_does_not_grow_with_the_pods_awaited() -> None:
    """Each deletion costs the feed the same few look-ups, however many pods the drain awaits:
    intersecting the awaited set with every pod known on each event made a 29,000-pod drain's
    settling quadratic (some 38 s of CPU)."""
    many = 400
    pods = [
        PodInfo(namespace="shop", name=f"p{i}", uid=CountedUid(f"uid-p{i}"), node_name="w-1")
        for i in range(many)
    ]
    api = ScriptedApi(listings=[PodListing(pods=pods, resource_version="10")])
    cue = threading.Event()
    feed = PodFeed(api, ["w-1"], on_change=cue.set)  # type: ignore[arg-type]
    try:
        feed.pods(["w-1"])
        stream = api.wait_for_watches(1)
        feed.await_gone({p.uid for p in pods})
        with CountedUid.lock:
            CountedUid.hashes = 0
        for i, p in enumerate(pods):
            stream.script.put(event("DELETED", p, str(11 + i)))
        assert cue.wait(10), "the cue once the last awaited pod is gone"
        until(lambda: feed.pods(["w-1"]) == [], "every deletion applied")
        with CountedUid.lock:
            per_event = CountedUid.hashes / many
    finally:
        feed.close()
    assert per_event <= 4, f"{per_event:.0f} look-ups per deleted pod, with {many} awaited"


def test_without_a_watch_every_pass_lists() -> None:
    cluster = FakeCluster()
    cluster.add_node("w-1")
    cluster.add_pod("shop", "web", node="w-1")
    feed = PodFeed(cluster, ["w-1"])
    for _ in range(3):
        assert [p.name for p in feed.pods(["w-1"])] == ["web"]
    feed.close()
    assert cluster.request_counts[("list", "pods")] == 3

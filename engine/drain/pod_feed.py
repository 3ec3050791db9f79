"""The pods of the nodes being drained: listed once, then kept current by one pod watch.

A drain pass needs the pods of its nodes. Listing them on every pass is polling moved into
listings (a 1,000-node zero-scale read 1,476 pod-list pages). The feed lists once and keeps the
listing's resourceVersion; one watch request (`PodWatchApi.watch_pods`) then follows every change
from there: evicted pods going away, a pod bound late. A drain's pod reads become one listing
plus one watch request per `engine.kube.watch.WATCH_SECONDS`, whatever the number of passes.

- The watch ends normally (the server's timeout): it resumes from the last resourceVersion seen.
- 410 Gone (that resourceVersion was compacted away): a fresh listing, and a watch from it.
- Anything else (a broken connection, a garbled stream, a 403 because the ClusterRole has no
  `watch`), or a watch that ends without a single event: the feed is no longer live, and the next
  pass lists as before and starts a watch from that listing, up to MAX_BREAKS times (a watch
  that cannot work, such as one refused by RBAC, is not retried for ever). A broken watch
  therefore costs one listing per pass, never a wrong answer.

`on_change` is called from the watch thread when the last of the pods the driver awaits
(`await_gone`) is gone, or a pod appears on the nodes: the driver's cue to run the next pass now
rather than at the interval, so the tail of a drain ends as soon as its last pod does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection

from engine.domain.model import PodInfo
from engine.kube import errors
from engine.kube.api import KubeApi, PodEvent, PodEventStream, PodListing, PodWatchApi

log = logging.getLogger(__name__)

MAX_BREAKS = 5
"""After this many broken watches the feed stops watching and every pass lists."""


class PodFeed:
    """Thread-safe: passes read it while its own thread applies the watch's events."""

    def __init__(
        self,
        api: KubeApi,
        nodes: Collection[str],
        *,
        on_change: Callable[[], None] | None = None,
        name: str = "pod-watch",
        seed: PodListing | None = None,
    ) -> None:
        """`seed`: these nodes' pods listed just before (the plan's listing), with the listing's
        resourceVersion: the first read starts from it and the watch from its resourceVersion
        (replaying every change since), instead of listing the pods a second time."""
        self._api = api
        self._nodes = frozenset(nodes)
        self._on_change = on_change
        self._name = name
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}
        self._awaited: set[str] = set()
        self._live = False
        self._closed = False
        self._generation = 0
        self._stream: PodEventStream | None = None
        self._thread: threading.Thread | None = None
        self._seed = seed if seed is not None and seed.resource_version else None
        self.listings = 0
        """Listings made (the first, one per pass while the watch was down, one per 410)."""
        self.watches = 0
        """Watch requests answered."""
        self.breaks = 0
        """Watches that broke (the next pass listed instead)."""

    @property
    def nodes(self) -> frozenset[str]:
        return self._nodes

    @property
    def live(self) -> bool:
        with self._lock:
            return self._live

    def pods(self, node_names: Collection[str]) -> list[PodInfo]:
        """The pods bound to `node_names`: from the watch while it is live, else from a listing."""
        wanted = frozenset(node_names)
        if not wanted:
            return []
        api = self._api
        if not isinstance(api, PodWatchApi) or not wanted <= self._nodes:
            return api.list_pods(node_names=wanted)
        with self._lock:
            if self._live:
                return [p for p in self._pods.values() if p.node_name in wanted]
            watching = not self._closed and self.breaks < MAX_BREAKS
        if not watching:
            return api.list_pods(node_names=wanted)
        with self._lock:
            listing, self._seed = self._seed, None
        if listing is None:
            listing = api.list_pods_at(node_names=self._nodes)
            with self._lock:
                self.listings += 1
        with self._lock:
            if not self._closed:
                self._replace(listing)
                self._generation += 1
                self._live = True
                thread = threading.Thread(
                    target=self._follow,
                    args=(api, self._generation, listing.resource_version),
                    name=self._name,
                    daemon=True,
                )
                self._thread = thread
                thread.start()
        return [p for p in listing.pods if p.node_name in wanted]

    def await_gone(self, uids: Collection[str]) -> None:
        """Call `on_change` once none of these pods is left (at once if none is there now)."""
        with self._lock:
            if not self._live:
                return
            self._awaited = {uid for uid in uids if uid in self._pods}
            due = bool(uids) and not self._awaited
        if due:
            self._notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._live = False
            self._generation += 1
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # -- the watch thread ------------------------------------------------------------------------

    def _follow(self, api: PodWatchApi, generation: int, resource_version: str) -> None:
        version = resource_version
        while True:
            events = 0
            try:
                stream = api.watch_pods(node_names=self._nodes, resource_version=version)
                with self._lock:
                    if generation != self._generation:
                        stream.close()
                        return
                    self._stream = stream
                    self.watches += 1
                for event in stream:
                    events += 1
                    with self._lock:
                        if generation != self._generation:
                            return
                        version = event.resource_version or version
                        notify = self._apply(event)
                    if notify:
                        self._notify()
            except errors.KubeError as exc:
                if exc.status != 410:
                    self._break(generation, str(exc))
                    return
                # The resourceVersion was compacted away: list afresh, watch from there.
                try:
                    listing = api.list_pods_at(node_names=self._nodes)
                except errors.KubeError as relist_error:
                    self._break(generation, str(relist_error))
                    return
                with self._lock:
                    if generation != self._generation:
                        return
                    self.listings += 1
                    self._replace(listing)
                    version = listing.resource_version
                    notify = self._settle_awaited()
                if notify:
                    self._notify()
                continue
            with self._lock:
                if generation != self._generation:
                    return  # closed (the drain is over) or superseded by a newer watch
            if events == 0:
                # Ended at once without an event (something between us and the server cuts long
                # answers): no more watching from here; the next pass lists and tries again.
                self._break(generation, "the watch ended without an event")
                return

    def _apply(self, event: PodEvent) -> bool:
        """Apply one event under the lock; True when the driver should be told."""
        pod = event.pod
        if pod is None:
            return False
        if event.type == "DELETED" or pod.node_name not in self._nodes:
            self._pods.pop(pod.uid, None)
            return self._settle_gone(pod.uid)
        new = pod.uid not in self._pods
        self._pods[pod.uid] = pod
        return new and event.type == "ADDED"

    def _settle_gone(self, uid: str) -> bool:
        """One pod gone: True when it was the last one awaited. Work per event, not per pod
        known: a drain of 29,000 pods sees 29,000 such events (the awaited pods are always among
        the known ones, so removing the one that went keeps them so)."""
        if uid not in self._awaited:
            return False
        self._awaited.discard(uid)
        return not self._awaited

    def _settle_awaited(self) -> bool:
        """After a fresh listing: keep awaiting only the pods still there."""
        if not self._awaited:
            return False
        self._awaited &= self._pods.keys()
        return not self._awaited

    def _replace(self, listing: PodListing) -> None:
        self._pods = {p.uid: p for p in listing.pods if p.node_name in self._nodes}

    def _break(self, generation: int, why: str) -> None:
        with self._lock:
            if generation != self._generation or self._closed:
                return
            self._live = False
            self._stream = None
            self.breaks += 1
        # No call to on_change: a watch that breaks at once would turn the driver's passes into
        # a loop of listings. The driver's own timers (interval, retries, grace periods) go on.
        log.warning("pod watch ended (%s); the next drain pass lists the pods instead", why)

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change()

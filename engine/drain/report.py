"""The outcome of one drain pass, as a value that summarises and renders itself.

Owns `DrainReport` and its renderers: Cluster API's condition message in two styles (the current
per-Pod one of v1.9+, the default, and the grouped legacy one of v1.9.0-beta.0), a one-line
summary, and a JSON form for the audit log and the store. The drain pass (`engine.drain.passes`) builds
the report; the bot only renders it.

Pure: no I/O, no clock. Every list is sorted (plain byte order, Go's `sort.Strings`) and de-duplicated
when the report is built. Identical cluster state therefore gives an identical report and an identical
message, so the Slack sender can skip a `chat.update` when nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

from engine.domain import model

Style = Literal["legacy", "current"]

HEADER = "Drain not completed yet"
COMPLETED = "Drain completed"
MAX_FAILURE_KEYS = 5
"""Cluster API shows at most this many failure groups, then one overflow line."""
LIST_PODS = 3
"""Every list shows three names, then "... (K more)" (Cluster API since v1.9.0-beta.0; its main
branch briefly showed five Pods with a deletionTimestamp before that)."""
PDB_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
PDB_VIOLATION_LOWER = "cannot evict pod as it would violate the pod's disruption budget."
TERMINATING_TEXT = "deletionTimestamp set, but still not removed from the Node"
EVICT_LATER_TEXT = "After above Pods have been removed from the Node, the following Pods will be evicted"
WAIT_LATER_TEXT = (
    "After above Pods have been removed from the Node, "
    "waiting for the following Pods to complete without eviction"
)

QUEUED_TEXT = "Nodes drained one at a time; Pods waiting for their node's turn"
"""Not upstream: cluster-autoscaler drains one non-empty node at a time but reports no such list."""

# Every tuple field, in the order `to_json` writes them.
_POD_LISTS = (
    "nodes",
    "terminating",
    "waiting",
    "waiting_later",
    "later",
    "skipped",
    "evicted",
    "deleted",
    "force_deleted",
    "left_unreachable",
    "queued",
)


def truncated_list(items: Sequence[str], n: int) -> str:
    """The first `n` items joined with ", ", then "... (K more)": Cluster API's `ListToString`."""
    shown = list(items[:n])
    if len(items) > n:
        shown.append(f"... ({len(items) - n} more)")
    return ", ".join(shown)


def _normalised(items: Iterable[str]) -> tuple[str, ...]:
    # Python orders str by code point, which for UTF-8 is the byte order Go's sort.Strings uses.
    return tuple(sorted(set(items)))


def _plural(count: int, word: str) -> str:
    return word if count == 1 else f"{word}s"


@dataclass(frozen=True)
class DrainReport:
    """What one pass found and did. Pod lists hold `namespace/name` keys; see `build`."""

    started_at: datetime | None = None
    nodes: tuple[str, ...] = ()
    terminating: tuple[str, ...] = ()
    """Pods with a deletionTimestamp that still exist, including those evicted in this pass."""
    failed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Failure key → pods. Keys are Cluster API's eviction keys (`KubeError.eviction_key`) or, for pods
    the filters refuse, kubectl's "cannot delete <reason>". Read-only once built."""
    waiting: tuple[str, ...] = ()
    """WaitCompleted pods in the current drain-order group."""
    later: tuple[str, ...] = ()
    """Evicted once every pod above (a lower drain order) is gone."""
    skipped: tuple[str, ...] = ()
    """Ignored pods (DaemonSet, mirror, `drain=skip`, ...). Never rendered in the message."""
    evicted: tuple[str, ...] = ()
    """Evictions accepted in this pass."""
    deleted: tuple[str, ...] = ()
    """Finished pods deleted in this pass."""
    force_deleted: tuple[str, ...] = ()
    waiting_later: tuple[str, ...] = ()
    """WaitCompleted pods in a higher drain-order group (Cluster API's PodsToWaitCompletedLater)."""
    left_unreachable: tuple[str, ...] = ()
    """Pods deleted more than 1 s ago on an unreachable node: no longer waited for (Cluster API's
    rule; the kubelet that would finish them is gone), but named, since they may still run there."""
    queued: tuple[str, ...] = ()
    """Pods of nodes waiting their turn when non-empty nodes are drained one at a time."""

    def __post_init__(self) -> None:
        # Normalise here rather than only in `build`, so every construction path yields the same
        # value for the same state; object.__setattr__ is the documented way in a frozen dataclass.
        for name in _POD_LISTS:
            object.__setattr__(self, name, _normalised(getattr(self, name)))
        failed = {key: _normalised(pods) for key, pods in self.failed.items()}
        object.__setattr__(self, "failed", {key: failed[key] for key in sorted(failed) if failed[key]})

    def __hash__(self) -> int:
        # The generated hash would fail on the `failed` dict; hash its sorted items instead.
        values = tuple(getattr(self, f.name) for f in fields(self) if f.name != "failed")
        return hash((values, tuple(self.failed.items())))

    @classmethod
    def build(
        cls,
        *,
        started_at: datetime | None = None,
        nodes: Iterable[str] = (),
        terminating: Iterable[str] = (),
        failed: Mapping[str, Iterable[str]] | None = None,
        waiting: Iterable[str] = (),
        later: Iterable[str] = (),
        skipped: Iterable[str] = (),
        evicted: Iterable[str] = (),
        deleted: Iterable[str] = (),
        force_deleted: Iterable[str] = (),
        waiting_later: Iterable[str] = (),
        left_unreachable: Iterable[str] = (),
        queued: Iterable[str] = (),
    ) -> DrainReport:
        """Build from any iterables (lists, sets, generators); sorted and de-duplicated."""
        return cls(
            started_at=started_at,
            nodes=tuple(nodes),
            terminating=tuple(terminating),
            failed={key: tuple(pods) for key, pods in (failed or {}).items()},
            waiting=tuple(waiting),
            later=tuple(later),
            skipped=tuple(skipped),
            evicted=tuple(evicted),
            deleted=tuple(deleted),
            force_deleted=tuple(force_deleted),
            waiting_later=tuple(waiting_later),
            left_unreachable=tuple(left_unreachable),
            queued=tuple(queued),
        )

    @property
    def completed(self) -> bool:
        """Nothing left to wait for: Cluster API's `DrainCompleted`. Skipped pods never count."""
        return not (
            self.terminating or self.failed or self.waiting or self.waiting_later or self.later or self.queued
        )

    @property
    def failed_pods(self) -> tuple[str, ...]:
        return _normalised(pod for pods in self.failed.values() for pod in pods)

    @property
    def blocking_keys(self) -> frozenset[str]:
        """The distinct pods that still hold the drain back."""
        lists = (
            self.terminating,
            self.failed_pods,
            self.waiting,
            self.waiting_later,
            self.later,
            self.queued,
        )
        return frozenset(pod for pods in lists for pod in pods)

    @property
    def blocking_pods(self) -> int:
        """How many distinct pods still hold the drain back."""
        return len(self.blocking_keys)

    def blockers(self, limit: int) -> tuple[str, ...]:
        """Up to `limit` pods that hold the drain back, each with why: refused first, then waited for."""
        named = [f"{pod}: {_failure_text(key)}" for key, pods in self.failed.items() for pod in pods]
        named += [f"{pod}: waiting for it to complete" for pod in (*self.waiting, *self.waiting_later)]
        named += [f"{pod}: terminating" for pod in self.terminating]
        return tuple(named[:limit])

    def summary_line(self) -> str:
        """`Drain completed`, or how many pods are left, for a status line."""
        if self.completed:
            return COMPLETED + self._unreachable_note()
        count = self.blocking_pods
        return f"{HEADER}: {count} {_plural(count, 'Pod')} remaining{self._unreachable_note()}"

    def _unreachable_note(self) -> str:
        if not self.left_unreachable:
            return ""
        pods = self.left_unreachable
        return f" ({self._pods(pods)} left terminating on an unreachable node, not waited for)"

    def condition_message(self, style: Style = "current") -> str:
        """Cluster API's condition message for this report; "" once the drain is complete."""
        if self.completed:
            return ""
        lines = self._legacy_lines() if style == "legacy" else self._current_lines()
        return "\n".join(lines)

    def _legacy_lines(self) -> list[str]:
        """Cluster API v1.9.0-beta.0, the one release with the grouped layout, with scalebot's
        waiting line (that release predates WaitCompleted)."""
        lines = [self._header()]
        if self.terminating:
            terminating = truncated_list(self.terminating, LIST_PODS)
            lines.append(f"* Pods with deletionTimestamp that still exist: {terminating}")
        if self.failed:
            lines.append("* Pods with eviction failed:")
            shown, hidden = self._split_failure_keys()
            lines += [f"  * {key}: {truncated_list(self.failed[key], LIST_PODS)}" for key in shown]
            if hidden:
                pods = sum(len(self.failed[key]) for key in hidden)
                errors = f"{len(hidden)} more {_plural(len(hidden), 'error')}"
                lines.append(f"  * ... ({errors} applying to {pods} {_plural(pods, 'Pod')})")
        if self.later:
            later = truncated_list(self.later, LIST_PODS)
            lines.append(f"* {EVICT_LATER_TEXT}: {later}")
        # Not upstream: L0/L1 predate WaitCompleted. Keeps the substring "waiting for completion" that
        # Cluster API's staleness summary matches. Pods of a later order are listed too, so an
        # unfinished drain never renders an empty message.
        waiting = _normalised((*self.waiting, *self.waiting_later))
        if waiting:
            lines.append(f"* Pods waiting for completion: {truncated_list(waiting, LIST_PODS)}")
        if self.queued:
            lines.append(f"* {QUEUED_TEXT}: {truncated_list(self.queued, LIST_PODS)}")
        return lines

    def _header(self) -> str:
        if self.started_at is None:
            return f"{HEADER}:"  # upstream always has a start time; never invent one
        return f"{HEADER} (started at {model.format_time(self.started_at)}):"

    def _current_lines(self) -> list[str]:
        """Cluster API v1.9+ (`EvictionResult.ConditionMessage`), WaitCompleted lines of v1.10."""
        lines = [self._header()]
        if self.terminating:
            lines.append(f"* {self._pods(self.terminating)}: {TERMINATING_TEXT}")
        shown, hidden = self._split_failure_keys()
        lines += [f"* {self._pods(self.failed[key])}: {_failure_text(key)}" for key in shown]
        if hidden:
            count = sum(len(self.failed[key]) for key in hidden)
            lines.append(f"* {count} {_plural(count, 'Pod')} with other issues")
        if self.waiting:
            lines.append(f"* {self._pods(self.waiting)}: waiting for completion")
        # The two "After above" lines have no "* " in upstream either.
        if self.later:
            lines.append(f"{EVICT_LATER_TEXT}: {truncated_list(self.later, LIST_PODS)}")
        if self.waiting_later:
            lines.append(f"{WAIT_LATER_TEXT}: {truncated_list(self.waiting_later, LIST_PODS)}")
        if self.queued:
            lines.append(f"{QUEUED_TEXT}: {truncated_list(self.queued, LIST_PODS)}")
        return lines

    @staticmethod
    def _pods(pods: Sequence[str]) -> str:
        """`Pod a` or `Pods a, b, c, ... (K more)`: singular only for exactly one pod."""
        return f"{_plural(len(pods), 'Pod')} {truncated_list(pods, LIST_PODS)}"

    def _split_failure_keys(self) -> tuple[list[str], list[str]]:
        keys = list(self.failed)  # already in byte order
        return keys[:MAX_FAILURE_KEYS], keys[MAX_FAILURE_KEYS:]

    def to_json(self, style: Style = "current") -> dict[str, Any]:
        """A JSON-ready dict with stable keys, for the audit log and the store (see `from_json`)."""
        return {
            "completed": self.completed,
            "started_at": None if self.started_at is None else model.format_time(self.started_at),
            "summary": self.summary_line(),
            "message": self.condition_message(style),
            "counts": {
                "blocking": self.blocking_pods,
                "terminating": len(self.terminating),
                "failed": len(self.failed_pods),
                "failure_keys": len(self.failed),
                "waiting": len(self.waiting),
                "waiting_later": len(self.waiting_later),
                "later": len(self.later),
                "skipped": len(self.skipped),
                "evicted": len(self.evicted),
                "deleted": len(self.deleted),
                "force_deleted": len(self.force_deleted),
                "left_unreachable": len(self.left_unreachable),
                "queued": len(self.queued),
            },
            "failed": {key: list(pods) for key, pods in self.failed.items()},
            **{name: list(getattr(self, name)) for name in _POD_LISTS},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DrainReport:
        """The inverse of `to_json` (derived fields such as the message are recomputed, not read)."""
        return cls.build(
            started_at=model.parse_time(data.get("started_at")),
            failed=data.get("failed") or {},
            **{name: data.get(name) or () for name in _POD_LISTS},
        )


def _failure_text(key: str) -> str:
    """Current style: the PDB sentence in lower case, every other key prefixed "failed to evict Pod, "."""
    text = key.replace(PDB_VIOLATION, PDB_VIOLATION_LOWER)  # upstream uses ReplaceAll
    return text if text.startswith(PDB_VIOLATION_LOWER) else f"failed to evict Pod, {text}"

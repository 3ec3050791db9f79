"""Force on schedules: a scheduled sleep whose plan already needs force, and the decisions that
let it run anyway (approve force for this run, a standing force scope, exclude a pool).

A scheduled zero or scale-down of some pools is refused at once by a Pod only force removes (an
owner's do-not-disrupt annotation; with force, bare Pods are in the scope too). Schedules had no
force option, so such a sleep was announced, approved, and failed in 0 s every night. Here:
- `dead_end` says, from the plain plan and the forced one, whether the sleep needs force and which
  scope (`engine.domain.force_scope`) the forced run would need;
- the announcement shows that scope, Pod by Pod (`notice`), and offers the choices;
- an approval binds to the scope shown (`digest`: its owners and budgets), a standing scope to the
  schedule's targets (`binding`: a changed target voids it);
- at run time the sleep runs forced only when an approved scope `covers` everything it needs, and
  with exactly that scope; otherwise it does not start, and says why.

Pure: values and functions; `engine.schedules.force_records` reads and writes what SQLite records.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.domain.announcement import ForcedPodNotice, ForceNotice
from engine.domain.errors import Category, ScalebotError
from engine.domain.force_scope import ForceScope
from engine.domain.operation import OperationPlan
from engine.schedules.core.model import ScheduleTarget

NEEDED, APPROVED, EXCLUDED, STANDING = "needed", "approved", "excluded", "standing"
"""The kinds of force decisions stored (`engine.store.schedules.ForceDecision`)."""

_NAME = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"
_UNIT = re.compile(rf"[A-Z][A-Za-z0-9]{{0,62}}/{_NAME}/{_NAME}")
"""`Kind/namespace/name`: a Kubernetes kind, then DNS-1123 names (what `unit_of` writes)."""
MAX_UNITS = 50
CLEAR_WORDS = ("none", "off")


class ForceScopeError(ScalebotError, ValueError):
    """A typed force scope that is not one: the message names the bad part and the form."""

    category = Category.USAGE


@dataclass(frozen=True, slots=True)
class Needed:
    """What a sleep needs force for: the forced run's scope, the pool of each Pod it shows, and
    the pools the sleep acts on (which of them may be left out)."""

    scope: ForceScope
    pools: Mapping[str, str]
    """Pod (`namespace/name`) → its pool."""
    acts_on: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope.to_json(), "pools": dict(self.pools), "acts_on": list(self.acts_on)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Needed:
        return cls(
            ForceScope.from_json(data.get("scope") or {}),
            {str(k): str(v) for k, v in (data.get("pools") or {}).items()},
            tuple(data.get("acts_on") or ()),
        )


def dead_end(unforced: OperationPlan, forced: OperationPlan) -> ForceScope | None:
    """The scope the forced plan needs when Pods that force would remove hold the plain plan (it
    would fail at once); None when the plain plan runs (or is forced already: a full zero-scale's
    phase 2)."""
    if unforced.forcing or not unforced.blockers or forced.force_scope is None:
        return None
    blocked = {pod for pod, _ in unforced.blockers}
    scope = forced.force_scope
    return scope if any(p.pod in blocked for p in scope.pods) else None


def digest(scope: ForceScope) -> str:
    """What an approval of a scope binds to: its owners and budgets (not Pod names, so a
    ReplicaSet's replacement Pod keeps the approval)."""
    return hashlib.sha256(json.dumps(scope.essence(), sort_keys=True).encode()).hexdigest()[:16]


def binding(cluster: str, target: ScheduleTarget) -> str:
    """What a standing force scope binds to: the schedule's cluster and targets."""
    essence = {"cluster": cluster, "target": target.to_json()}
    return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:16]


def uncovered(needed: ForceScope, approved: ForceScope) -> list[str]:
    """What `needed` has that `approved` does not (owners, then budgets); [] when it covers it."""
    units = [u for u in needed.units if u not in approved.units]
    budgets = [f"PodDisruptionBudget {b}" for b in needed.pdbs if b not in approved.pdbs]
    return units + budgets


def parse_units(text: str) -> ForceScope:
    """A typed standing scope: `Kind/namespace/name` owners (or `Pod/namespace/name`), comma-separated."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise ForceScopeError(
            "give the owners force may act on, e.g. `--force-scope=ReplicaSet/shop/pin,Pod/shop/bare` "
            "(as the announcement names them), or `--force-scope=none` to remove it"
        )
    if len(words) > MAX_UNITS:
        raise ForceScopeError(f"at most {MAX_UNITS} owners in a force scope; got {len(words)}")
    bad = [w for w in words if not _UNIT.fullmatch(w)]
    if bad:
        raise ForceScopeError(
            f"`{bad[0][:80]}` is not an owner: write Kind/namespace/name (e.g. ReplicaSet/shop/pin, "
            "Pod/shop/bare for a bare Pod)"
        )
    return ForceScope(units=tuple(sorted(set(words))))


def notice(
    needed: Needed,
    *,
    approved_by: Sequence[str] = (),
    standing_by: Sequence[str] = (),
    excluded: Iterable[str] = (),
    limit: int = 20,
) -> ForceNotice:
    """The announcement's account of a sleep that needs force, and of what was decided on it."""
    left_out = tuple(sorted(set(excluded)))
    pods = tuple(
        ForcedPodNotice(p.pod, p.unit, p.reason, needed.pools.get(p.pod, "")) for p in needed.scope.pods
    )
    remaining = set(needed.acts_on) - set(left_out)
    with_pods = sorted({p.pool for p in pods if p.pool and p.pool not in left_out})
    # A pool may be left out only while another one still runs: leaving out all is a skip.
    excludable = tuple(with_pods[:limit]) if len(remaining) > 1 else ()
    return ForceNotice(
        pods=pods,
        digest=digest(needed.scope),
        excludable=excludable,
        approved_by=tuple(approved_by),
        standing_by=tuple(standing_by),
        excluded=left_out,
    )

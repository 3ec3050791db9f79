"""Scheduled shutdowns and wake-ups: the service behind the bot's timer, `/scale schedule …` and the
announcement buttons.

Owns schedules as data (`add`, `pause`, `resume`, `delete`, `skip_date`), what is due when (`due`, and
`next_wakeups`: the instants the bot's timer must wake up at), announcements before a sleep, the
decisions people take on one occurrence (postpone, skip, run now), firing an occurrence through
`Operations.request` exactly like a human request (`requested_by="schedule:<name>"`), the catch-up at
start-up and temporary wakes. The arithmetic (DST, overrides, missed runs) is
`engine.schedules.recurrence`'s and `engine.schedules.one_off`'s; this module applies it to what
SQLite says. The values are `engine.schedules.model`'s, what is due when is
`engine.schedules.timer`'s (pure, given what this module reads), the plain text `engine.schedules.text`'s.

`Schedules` stays one class, composed of one mixin per concern over `engine.schedules.base.SchedulesBase`
(the shared state, loading, checks, audit and request helpers): `editing` (schedules as data, pre-approval),
`announcing` (announcements and their texts), `firing` (what is due, firing it, start-up, temporary wakes,
finished runs), `decisions` (postpone, skip, run now), `force_decisions` (force approved per run or
standing, pools excluded, the force scope), the last two over `announcing` since each decision replies with
an announcement; this module keeps the constructor and the read-only queries
(`show`, `next_events`, `next_event`, `days_off_problems`, `days_off_until`, `all_schedules`). As in
`engine.store`, mixins keep each concern in its own file while every caller holds one `Schedules` and
one decision still takes one write transaction across concerns; `SchedulesBase` declares the methods the
mixins call on one another, so `mypy --strict` checks each mixin against them.

No APScheduler, no Slack, no clock reads in the timer paths: they take `now`. Clicks and commands read
the injected clock once. SQLite is the source of truth: an occurrence becomes handled (running, done,
skipped, missed) once, by its key, inside one write transaction, so a second fire of the same key, or a
postpone racing a fire, cannot run it twice.

Rules on top of engine.schedules.recurrence and engine.schedules.one_off:
- Sleeps are announced at each lead time (the disruptive event); a wake posts its report when done
  ("dev-eu is back: 24/24 nodes Ready").
- Only the shortest lead already reached is announced (a timer that wakes late does not post "in
  60 min" and "in 10 min" together); a postpone counts as the announcement of the new time's past leads.
- A sleep whose pools are already at the target does nothing; a wake with nothing asleep does nothing
  (the cluster was woken by hand). Both are recorded as done, with the reason.
- Events while a schedule is paused are never run late nor announced as missed.
- Days off (public holidays by country and region, calendar files of the configuration) are resolved
  by `engine.schedules.calendars` when a schedule is loaded and handed to the spec as values; an
  unknown country, region or calendar is refused when saving. Announcements, `next_event` and
  `days_off_until` say why an event does not happen ("Stays asleep: Whit Monday (DE-BY)").
- A temporary wake needs a schedule on the cluster: the schedule says when to sleep again.
- Pre-approval is given per approver (`pre_approve`), by the same quorum as each run would need, and
  binds to the schedule's definition (its fingerprint): a changed definition is not pre-approved.
  Each run hands the pre-approvers to `Operations.request`, which re-checks their roles then; a run
  they do not cover (too few, roles gone, protected cluster) asks for approval like any request.
  "Run now" is made on behalf of whoever clicked it too, so they cannot approve that run themselves,
  and it starts only the occurrence already announced, within its announcement window
  (`one_off.run_now`): a pre-approved run nobody was told of never starts early.
- A person without a role on a cluster gets, for its schedules and its name, the answer an unknown
  schedule or cluster gets, listing only what they have a role on (`SchedulesBase._visible`).
- Nothing here holds the write transaction across a cluster listing: a fire plans first, then
  decides and creates the operation in one transaction.
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta

from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock
from engine.operations.service import Operations
from engine.schedules import one_off, recurrence
from engine.schedules.announcing import Announcing
from engine.schedules.base import SchedulesBase
from engine.schedules.calendars import Calendars
from engine.schedules.decisions import OccurrenceDecisions
from engine.schedules.editing import ScheduleEditing
from engine.schedules.firing import Firing
from engine.schedules.force_decisions import ForceDecisions
from engine.schedules.model import Schedule
from engine.schedules.spec import Occurrence
from engine.store.database import Store


class Schedules(ScheduleEditing, OccurrenceDecisions, Firing, ForceDecisions, Announcing, SchedulesBase):
    """The schedule service: one class composed of one mixin per concern (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        ops: Operations,
        clock: Clock,
        *,
        grace: timedelta = one_off.DEFAULT_GRACE,
        calendars: Calendars | None = None,
    ) -> None:
        self.store = store
        self.ops = ops
        self.clock = clock
        self.grace = grace
        """A missed sleep this late still runs at start-up; beyond it, it is announced as missed."""
        self.calendars = calendars or Calendars()
        """Public holidays (always) and the configuration's calendar files, by name."""

    def show(self, name: str) -> Schedule | None:
        return self._load(name)

    # -- what comes next -------------------------------------------------------------------------

    def next_events(
        self, now: datetime, *, limit: int = 10, cluster: str | None = None
    ) -> builtins.list[tuple[Occurrence, datetime]]:
        """The next sleeps and wakes (with their effective times) across clusters, soonest first."""
        events: list[tuple[Occurrence, datetime]] = []
        for sched in self._schedules(cluster=cluster):
            events += self._upcoming(sched, now, limit=limit)
        return sorted(events, key=lambda pair: (pair[1], pair[0].key))[:limit]

    def next_event(self, cluster: str, now: datetime) -> NextEvent | None:
        """For `/scale status` and the Home tab: the cluster's next sleep or wake, at its effective time."""
        events = self.next_events(now, limit=1, cluster=cluster)
        if not events:
            return None
        occ, at = events[0]
        sched = self._load(occ.schedule)
        if sched is None:
            return NextEvent(occ.action, occ.schedule, at, "UTC")
        skipped = recurrence.days_off_between(sched.spec, start=now, end=at)
        reasons = tuple(dict.fromkeys(day_off.reason() for _, day_off in skipped))
        return NextEvent(occ.action, occ.schedule, at, sched.spec.tz, days_off=reasons)

    def days_off_problems(self) -> builtins.list[str]:
        """Schedules whose days off cannot be followed now (their calendar left the configuration,
        the holiday library dropped their region), each with what to do: `scalebot run` logs them
        at start, since a schedule that silently lost its days off would sleep through a freeze."""
        problems: list[str] = []
        for sched in self._schedules(enabled_only=False):
            problem = self.calendars.check(sched.spec.days_off_rule) if sched.spec.days_off_rule else ""
            if problem:
                problems.append(
                    f"schedule {sched.name} ({sched.spec.days_off_rule.describe()}): {problem}; until then "
                    "it runs without those days off (or delete the schedule)"
                )
        return problems

    def days_off_until(
        self, now: datetime, until: datetime, *, cluster: str | None = None
    ) -> builtins.list[tuple[Occurrence, str]]:
        """The sleeps and wakes a day off suppresses between `now` and `until`, each with its reason
        ("Stays asleep: Whit Monday (DE-BY)"), soonest first: `schedule next` shows them."""
        found: list[tuple[Occurrence, str]] = []
        for sched in self._schedules(cluster=cluster):
            found += [
                (occ, day_off.reason())
                for occ, day_off in recurrence.days_off_between(sched.spec, start=now, end=until)
            ]
        return sorted(found, key=lambda pair: (pair[0].at, pair[0].key))

    def all_schedules(self, *, cluster: str | None = None) -> builtins.list[Schedule]:
        """Every schedule, paused ones included, by name."""
        return self._schedules(cluster=cluster, enabled_only=False)

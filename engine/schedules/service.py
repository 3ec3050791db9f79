"""Scheduled shutdowns and wake-ups: the service behind the bot's timer, `/scale schedule …` and the
announcement buttons.

Owns schedules as data (`add`, `pause`, `resume`, `delete`, `skip_date`), what is due when (`due`, and
`next_wakeups`: the instants the bot's timer must wake up at), announcements before a sleep, the
decisions people take on one occurrence (postpone, skip, run now), firing an occurrence through
`Operations.request` exactly like a human request (`requested_by="schedule:<name>"`), the catch-up at
start-up and temporary wakes. The arithmetic (DST, overrides, missed runs) is
`engine.schedules.core.recurrence`'s and `engine.schedules.core.one_off`'s; the parts below apply it to
what SQLite says. The values are `engine.schedules.core.model`'s, what is due when is
`engine.schedules.core.due`'s (pure, given what the parts read), the plain text
`engine.schedules.core.text`'s.

`Schedules` is a facade over parts, each given its collaborators in its constructor and calling only
the parts below it (the layers contract "schedules in layers" in pyproject.toml checks the imports):

    editing | occurrence_decisions | force_decisions     what people do to schedules and occurrences
    firing                                              what is due, firing it, start-up, temporary wakes
    announcing                                          announcements and the texts after decisions
    force_records                                       what a run needs forced, what was approved
    access                                              roles, visibility, the channel rule
    book                                                schedules and occurrences as stored, the audit
    stored | calendars                                  rows to values; holidays and calendar files
    core/                                               PURE: the language, the arithmetic, the text

The facade builds them and hands out their public methods as its own (bound in `__init__`, so each
signature is written once, in its part), so every caller holds one `Schedules`. One decision still
takes one write transaction across parts: they share the one `Store`.

No APScheduler, no Slack, no clock reads in the timer paths: they take `now`. Clicks and commands read
the injected clock once. SQLite is the source of truth: an occurrence becomes handled (running, done,
skipped, missed) once, by its key, inside one write transaction, so a second fire of the same key, or a
postpone racing a fire, cannot run it twice.

Rules on top of engine.schedules.core.recurrence and engine.schedules.core.one_off:
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
  schedule or cluster gets, listing only what they have a role on (`ScheduleAccess.visible`).
- Nothing here holds the write transaction across a cluster listing: a fire plans first, then
  decides and creates the operation in one transaction.
"""

from __future__ import annotations

from datetime import timedelta

from engine.domain.clock import Clock
from engine.operations.service import Operations
from engine.schedules.access import ScheduleAccess
from engine.schedules.announcing import Announcing
from engine.schedules.book import ScheduleBook
from engine.schedules.calendars import Calendars
from engine.schedules.core import one_off
from engine.schedules.editing import ScheduleEditing
from engine.schedules.firing import Firing
from engine.schedules.force_decisions import ForceDecisions
from engine.schedules.force_records import ForceRecords
from engine.schedules.occurrence_decisions import OccurrenceDecisions
from engine.store.database import Store


class Schedules:
    """The schedule service: the parts wired together, their public methods as one object."""

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
        book = ScheduleBook(store, ops, clock, calendars or Calendars())
        self._book = book
        access = ScheduleAccess(book, ops)
        force = ForceRecords(book, access, ops)
        announcing = Announcing(book, ops, force)
        firing = Firing(book, access, ops, clock=clock, force=force, announcing=announcing, grace=grace)
        editing = ScheduleEditing(book, access, ops, clock, announcing)
        occurrences = OccurrenceDecisions(book, access, clock, announcing, firing)
        forcing = ForceDecisions(book, access, clock, force, announcing)

        # Reads: schedules and what comes next.
        self.show = book.load
        self.all_schedules = book.all_schedules
        self.next_events = book.next_events
        self.next_event = book.next_event
        self.days_off_until = book.days_off_until
        self.days_off_problems = book.days_off_problems
        # Schedules as data.
        self.add = editing.add
        self.pre_approve = editing.pre_approve
        self.unapprove = editing.unapprove
        self.pause = editing.pause
        self.resume = editing.resume
        self.delete = editing.delete
        self.skip_date = editing.skip_date
        # The timer's side.
        self.due = firing.due
        self.next_wakeups = firing.next_wakeups
        self.run_due = firing.run_due
        self.startup = firing.startup
        self.fire = firing.fire
        self.operation_finished = firing.operation_finished
        self.wake_for = firing.wake_for
        # Announcements.
        self.announce = announcing.announce
        self.set_announcement = announcing.set_announcement
        # Decisions on one occurrence.
        self.postpone = occurrences.postpone
        self.postpone_until = occurrences.postpone_until
        self.skip = occurrences.skip
        self.run_now = occurrences.run_now
        # Force.
        self.approve_force = forcing.approve_force
        self.exclude_pool = forcing.exclude_pool
        self.set_force_scope = forcing.set_force_scope

    @property
    def calendars(self) -> Calendars:
        """Public holidays (always) and the configuration's calendar files, by name: the book's."""
        return self._book.calendars

    @calendars.setter
    def calendars(self, calendars: Calendars) -> None:
        self._book.calendars = calendars

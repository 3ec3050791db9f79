"""APScheduler wiring: the timer that wakes `engine.schedules.service` at the instants it computes.

APScheduler is only a timer (docs/architecture: SQLite is the source of truth). It holds no job store
and no cron triggers: `start()` rebuilds every job from the schedules table, running
`Schedules.startup(now)` first (missed runs, operations that ended while we were down), then arming one
one-shot `date` job per instant of `Schedules.next_wakeups(now)`. A job body is one call,
`Schedules.run_due(now)`, inside this module's single catch-all, followed by a re-arm. Whoever changes
a schedule or decides on an occurrence (the Slack listeners) calls `sync()` afterwards.

- Clocks: APScheduler waits on the wall clock, the service's instants are on the injected `clock`.
  A job is armed at wall-now + (instant - clock.now()), so both agree whatever the clock is (with
  `SystemClock` they are the same clock; a `ScaledClock` divides the wait by its speed).
- Misfires: every job has an explicit `misfire_grace_time` of seven days (the service's look-back),
  not APScheduler's 1 s default, which drops a late job with one log line. A job that runs late (a
  suspended VM, a busy executor) still runs, and the service decides what is too late: run late
  within the grace, announce as missed beyond it. `coalesce=True`, `max_instances=1`.
- Ticks are serialised: two instants close together never compute "due" twice at once.
- Weekly savings posts (`bot.slack.weekly_post.WeeklySavingsPoster`, when a cluster's config asks for one):
  one more one-shot job per cluster at its next posting time, armed and re-armed like the
  schedules' (an overdue post's instant is in the past and runs at once); the poster claims each
  week in SQLite, so a restart re-arms without posting twice.
- Progress: final events of scheduled operations close their occurrence; a scheduled wake's
  "dev-eu is back: …" report goes to `on_announce`.

Callbacks run on APScheduler's worker (ticks) or a runner worker (progress): keep them short (queue
the Slack message for the sender).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.date import DateTrigger

from engine.domain.announcement import Announcement, NextEvent
from engine.domain.clock import Clock, wall_seconds
from engine.domain.operation import ProgressEvent
from engine.schedules.core import one_off
from engine.schedules.core.model import ScheduleOutcome
from engine.schedules.service import Schedules

log = logging.getLogger(__name__)

MISFIRE_GRACE_SECONDS = int(one_off.MISSED_LOOKBACK.total_seconds())
"""Late jobs still run: the service, not the timer, decides what is too late (module docstring)."""
JOB_PREFIX = "schedules@"
SAVINGS_JOB_PREFIX = "savings@"
_T = TypeVar("_T")


class WeeklyTimer(Protocol):
    """What the timer needs of the weekly savings posts (bot.slack.weekly_post.WeeklySavingsPoster)."""

    def next_wakeups(self, now: datetime) -> list[datetime]: ...

    def run_due(self, now: datetime) -> object: ...


class APSchedulerTimer:
    """The schedules' (and the weekly savings posts') timer on APScheduler: one one-shot job per
    instant they compute, re-armed from SQLite after every tick and change (module docstring)."""

    def __init__(
        self,
        schedules: Schedules,
        clock: Clock,
        on_announce: Callable[[Announcement], None],
        on_fired: Callable[[ScheduleOutcome], None],
        *,
        scheduler: BaseScheduler | None = None,
        weekly: WeeklyTimer | None = None,
    ) -> None:
        self.schedules = schedules
        self.weekly = weekly
        self.clock = clock
        self._on_announce = on_announce
        self._on_fired = on_fired
        self._scheduler = scheduler or BackgroundScheduler(timezone=UTC)
        self._armed: dict[str, datetime] = {}
        self._arm_lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._savings_lock = threading.Lock()  # a post (chart, upload) never delays a sleep's tick

    def start(self, *, paused: bool = False) -> None:
        """Catch up from the table, start the timer, arm it; before Bolt takes requests.

        `paused`: the jobs are armed but never run; whoever moves the clock calls `fire_due` (the
        console's fast-forward on a virtual clock)."""
        self._guarded("start-up", lambda: self._deliver(self.schedules.startup(self.clock.now())))
        self.schedules.ops.subscribe(self._on_progress)
        self._scheduler.start(paused=paused)
        self.sync()

    def fire_due(self) -> None:
        """One tick now, as a job would run it: what is due at the clock's now, then re-arm."""
        self._tick()

    def sync(self) -> None:
        """Re-arm from the table: one one-shot job per instant something becomes due."""
        with self._arm_lock:
            now = self.clock.now()
            wanted = {f"{JOB_PREFIX}{at.isoformat()}": at for at in self.schedules.next_wakeups(now)}
            if self.weekly is not None:
                posts = self.weekly.next_wakeups(now)
                wanted |= {f"{SAVINGS_JOB_PREFIX}{at.isoformat()}": at for at in posts}
            for job_id in self._armed.keys() - wanted.keys():
                self._disarm(job_id)
            for job_id, at in wanted.items():
                if job_id not in self._armed or self._scheduler.get_job(job_id) is None:
                    body = self._tick_savings if job_id.startswith(SAVINGS_JOB_PREFIX) else self._tick
                    self._arm(job_id, at, now, body)
            self._armed = wanted

    def stop(self) -> None:
        self.schedules.ops.unsubscribe(self._on_progress)
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def armed(self) -> list[datetime]:
        """The instants (on the service's clock) the timer is armed for, soonest first."""
        with self._arm_lock:
            return sorted(self._armed.values())

    def next_event(self, cluster: str) -> NextEvent | None:
        """For `/scale status`: the cluster's next scheduled sleep or wake."""
        return self.schedules.next_event(cluster, self.clock.now())

    # -- jobs -------------------------------------------------------------------------------------

    def _arm(self, job_id: str, at: datetime, now: datetime, body: Callable[[], None]) -> None:
        wall = datetime.now(UTC) + timedelta(seconds=wall_seconds(self.clock, (at - now).total_seconds()))
        self._scheduler.add_job(
            body,
            trigger=DateTrigger(run_date=wall),
            id=job_id,
            name=f"{job_id.split('@', maxsplit=1)[0]} due at {at.isoformat()}",
            misfire_grace_time=MISFIRE_GRACE_SECONDS,
            coalesce=True,
            max_instances=1,
            replace_existing=True,
        )

    def _disarm(self, job_id: str) -> None:
        with contextlib.suppress(JobLookupError):  # a date job removes itself once it has run
            self._scheduler.remove_job(job_id)

    def _tick(self) -> None:
        """A job body: one call into the service, then re-arm (each in the catch-all)."""
        with self._tick_lock:
            self._guarded("timer", lambda: self._deliver(self.schedules.run_due(self.clock.now())))
        self._guarded("re-arm", self.sync)

    def fire_savings_due(self) -> None:
        """The weekly posts' job body now, as the job would run it."""
        self._tick_savings()

    def _tick_savings(self) -> None:
        """A weekly-post job body: the posts due at the clock's now, then re-arm."""
        weekly = self.weekly
        if weekly is not None:
            with self._savings_lock:
                self._guarded("savings post", lambda: weekly.run_due(self.clock.now()))
        self._guarded("re-arm", self.sync)

    def _deliver(self, outcomes: Iterable[ScheduleOutcome]) -> None:
        """Announcements to `on_announce`; everything the timer did besides announcing to `on_fired`."""
        for outcome in outcomes:
            note = outcome.announcement
            if note is not None:
                self._on_announce(note)
            if note is None or note.kind != "upcoming":
                self._on_fired(outcome)

    def _on_progress(self, event: ProgressEvent) -> None:
        if not event.final:
            return
        note = self._guarded("progress", lambda: self.schedules.operation_finished(event))
        if note is not None:
            self._guarded("report", lambda: self._on_announce(note))

    @staticmethod
    def _guarded(what: str, call: Callable[[], _T]) -> _T | None:
        """The scheduler's one catch-all: log the traceback and keep the timer alive. The state is in
        SQLite, so the next tick (or the next start) sees whatever this one left undone."""
        try:
            return call()
        except Exception:
            log.exception("schedule %s failed", what)
            return None

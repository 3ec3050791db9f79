"""The Slack side of schedules: `/scale schedule …`, `/scale wake CLUSTER for 3h`, the announcement
buttons (Postpone 1h, Postpone until…, Skip this time, Run now) and the timer's messages.

Everything decides in `engine.schedules.service` (authorisation, audit, one transaction per decision); this
module routes, with the pure parser `bot.text.schedule_parser` reading the text and the modals and
`bot.slack.blocks.schedules` rendering. Slack writes go through the `Sender`:
- an occurrence has one channel message, key `sched:<occurrence key>`, posted at the first lead
  time and edited in place by every later lead (plus a reminder in its thread), every decision and
  the fire itself; the sender's posted hook hands its ts to `Schedules.set_announcement`, so the
  operation the fire creates threads its card and progress under it (`OperationRequest.thread_ts`,
  which `bot.slack.delivery.progress` honours);
- a wake's "dev-eu is back: 24/24 nodes Ready" goes into that thread (key `sched-back:<key>`).

Commands and clicks run on the bot's executor (after the ack) through `bot.slack.dispatch`; refusals are
ephemeral with the service's reason. Two things cannot wait for the executor, because a
`trigger_id` is valid for 3 s: the "Postpone until…" click and a bare `/scale schedule add` open a
modal. A global Bolt middleware (`register`) acks those requests at once and calls `views.open`
on Bolt's own listener threads, ahead of the catch-all button listener. Modal submissions are
validated in their view listener and refused with `response_action="errors"` naming the field.
After any change the timer is re-armed (`ScheduleTimer.sync`, a port the runtime's timer fills).

Wiring (any order: announcements that arrive before a sender is attached are kept until then):
    ui = ScheduleUi(schedules, ops, None, None, clock=clock, default_cluster=settings.default_cluster)
    bot = build_bot(settings, ops, outbox=..., subcommands=ui.subcommands(), clicks=ui.clicks())
    runner = APSchedulerTimer(schedules, clock, ui.on_announce, ui.on_fired)
    ui.attach(sender=bot.sender, app=bot.app, runner=runner)

One module over 600 lines on purpose: `ScheduleUi` is one adapter, and its commands, clicks, modals
and timer messages all end in the same few helpers (`_tell`, `_show_result` onto the occurrence's
one message, `_sync` re-arming the timer), so its handlers stay a few lines each.
"""

from __future__ import annotations

import difflib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from datetime import timedelta
from typing import Any, Protocol

from slack_bolt import Ack, App, BoltResponse

from bot.ports import OperationsPort, UserError
from bot.slack.blocks import schedule_modals, views
from bot.slack.blocks import schedules as ui
from bot.slack.blocks.operations import ACTION_POSTPONE_1H, ACTION_POSTPONE_UNTIL, ACTION_RUN_NOW, ACTION_SKIP
from bot.slack.delivery.sender import Sender
from bot.slack.directory import ChannelDirectory
from bot.slack.dispatch import (
    WAKE_FOR,
    ClickHandler,
    GroupResolver,
    Invocation,
    SubcommandHandler,
    answer,
    no_groups,
    usage_reply,
)
from bot.text import messages, schedule_copy
from bot.text.commands import SubcommandArgs
from bot.text.mrkdwn import fmt
from bot.text.schedule_parser import (
    FIELD_BLOCK,
    AddArgs,
    ScheduleUsage,
    name_arg,
    optional_word,
    parse_add,
    read_add_form,
    read_postpone_form,
    spec_problem,
    view_metadata,
    view_state,
)
from engine.domain.announcement import Announcement
from engine.domain.clock import Clock
from engine.schedules.core import days_off
from engine.schedules.core import spec as schedule
from engine.schedules.core.due import first_of_each
from engine.schedules.core.model import ScheduleOutcome
from engine.schedules.service import Schedules

log = logging.getLogger(__name__)

ZONE_TTL_SECONDS = 3600.0
"""A person's Slack time zone (users.info) is read at most once an hour."""
_MAX_REMEMBERED = 1000


class ScheduleTimer(Protocol):
    """What the schedule UI needs of the timer (`bot.runtime.apscheduler_timer.APSchedulerTimer`): re-arm it
    from SQLite after a change, so the change takes effect before the person reads "saved"."""

    def sync(self) -> None: ...


class ScheduleUi:
    def __init__(
        self,
        schedules: Schedules,
        ops: OperationsPort,
        sender: Sender | None = None,
        runner: ScheduleTimer | None = None,
        *,
        clock: Clock,
        groups: GroupResolver = no_groups,
        default_cluster: Callable[[str], str | None] | None = None,
    ) -> None:
        self.schedules = schedules
        self.ops = ops
        self.clock = clock
        self.runner = runner
        self._groups = groups
        self._default_cluster = default_cluster
        self._sender: Sender | None = None
        self._client: Any = None
        self._channels: ChannelDirectory | None = None
        self._listener_pool: Executor | None = None
        self._lock = threading.Lock()
        self._backlog: list[Announcement] = []
        self._last: dict[str, Announcement] = {}
        self._zones: dict[str, tuple[str, float]] = {}
        if sender is not None:
            self.attach(sender=sender)

    # -- wiring -----------------------------------------------------------------------------------

    def subcommands(self) -> dict[str, SubcommandHandler]:
        return {"schedule": self.on_schedule, WAKE_FOR: self.on_wake_for}

    def clicks(self) -> dict[str, ClickHandler]:
        return {
            ACTION_POSTPONE_1H: self._decision(
                lambda key, inv, g: self.schedules.postpone(key, by=inv.user, groups=g, channel=inv.channel)
            ),
            ACTION_POSTPONE_UNTIL: self._postpone_until_fallback,
            ACTION_SKIP: self._decision(
                lambda key, inv, g: self.schedules.skip(key, by=inv.user, groups=g, channel=inv.channel)
            ),
            ACTION_RUN_NOW: self._decision(
                lambda key, inv, g: self.schedules.run_now(key, by=inv.user, groups=g, channel=inv.channel)
            ),
            ui.ACTION_FORCE_APPROVE: self._choice(
                lambda key, digest, inv, g: self.schedules.approve_force(
                    key, digest, by=inv.user, groups=g, channel=inv.channel
                )
            ),
            **{
                ui.exclude_action(i): self._choice(
                    lambda key, pool, inv, g: self.schedules.exclude_pool(
                        key, pool, by=inv.user, groups=g, channel=inv.channel
                    )
                )
                for i in range(ui.EXCLUDE_BUTTONS)
            },
        }

    def attach(
        self, *, sender: Sender | None = None, app: App | None = None, runner: ScheduleTimer | None = None
    ) -> None:
        """Late parts: the bot's sender (then the kept announcements go out), its Bolt app (the modal
        listeners, `register`) and the timer (re-armed after every change)."""
        if runner is not None:
            self.runner = runner
        if app is not None:
            self.register(app)
        if sender is not None:
            with self._lock:
                self._sender, backlog, self._backlog = sender, self._backlog, []
            sender.add_posted_hook(self._posted)
            for note in backlog:
                self.on_announce(note)

    def register(self, app: App) -> None:
        """The modal openers (a global middleware: it must see the click before the catch-all button
        listener does) and the two view_submission listeners."""
        if self._client is not None:
            return  # registered already: a second middleware would open every modal twice
        self._client = app.client
        self._channels = ChannelDirectory(app.client)
        self._listener_pool = app.listener_runner.listener_executor
        app.middleware(self._open_modals)
        app.view(ui.CALLBACK_POSTPONE)(self._on_postpone_submitted)
        app.view(ui.CALLBACK_ADD)(self._on_add_submitted)

    # -- the timer's callbacks (APScheduler worker, runner workers): render and queue only ---------

    def on_announce(self, note: Announcement) -> None:
        """Post or edit an occurrence's message; a "back" report goes into the night's thread."""
        with self._lock:
            sender = self._sender
            if sender is None:
                self._backlog.append(note)
                return
        if note.kind == "back":
            message = ui.announcement(note)
            sender.show(
                ui.BACK_PREFIX + note.key, message, channel=note.channel, thread_ts=note.thread_ts, final=True
            )
            return
        key = ui.MESSAGE_PREFIX + note.key
        if note.message_ts:
            sender.adopt(key, note.channel, note.message_ts)
        reminder = ui.reminder(note) if note.kind == "upcoming" and note.reminder else None
        if reminder is not None:
            # A later lead edits the message (no notification), so say it in the thread too.
            sender.reply(key, reminder, channel=note.channel)
        if note.effective is None or note.kind in ("late", "missed"):
            with self._lock:  # nothing is shown on this message after it: forget it
                self._last.pop(note.key, None)
        else:
            self._remember(note)
        sender.show(
            key, ui.announcement(note), channel=note.channel, thread_ts=note.thread_ts, final=not note.buttons
        )

    def on_fired(self, outcome: ScheduleOutcome) -> None:
        """The timer ran (or closed) an occurrence: its message loses the buttons and says what happened.
        Outcomes that came with an announcement (late, missed) were shown by `on_announce`."""
        if not outcome.key or outcome.announcement is not None:
            return
        skipped = outcome.ok and outcome.operation is None and outcome.effective is None
        if skipped or (outcome.ok and not outcome.changed):
            return
        self._show_result(outcome)

    # -- `/scale schedule …` and `/scale wake CLUSTER for 3h` (bot executor) -----------------------

    def on_schedule(self, args: SubcommandArgs, inv: Invocation) -> None:
        verb = args.args[0].lower() if args.args else "help"
        verbs: dict[str, Callable[[SubcommandArgs, Invocation], None]] = {
            "help": self._help,
            "add": self._add,
            "list": self._list,
            "show": self._show,
            "pause": self._manage(self.schedules.pause, "pause"),
            "resume": self._manage(self.schedules.resume, "resume"),
            "delete": self._manage(self.schedules.delete, "delete"),
            "approve": self._manage(self.schedules.pre_approve, "approve"),
            "unapprove": self._manage(self.schedules.unapprove, "unapprove"),
            "next": self._next,
            "skip": self._skip_date,
            "force": self._force_scope,
        }
        try:
            if verb not in verbs:
                close = difflib.get_close_matches(verb, list(verbs), n=1, cutoff=0.6)
                raise ScheduleUsage(
                    schedule_copy.unknown_verb(args.args[0][:80], close[0] if close else None)
                )
            verbs[verb](args, inv)
        except ScheduleUsage as err:
            answer(inv, usage_reply(err))

    def on_wake_for(self, args: SubcommandArgs, inv: Invocation) -> None:
        cluster, *pools = args.args
        if pools or args.flags:
            answer(inv, views.text_message(ui.wake_for_whole_cluster(cluster), emoji="⚠️"))
            return
        duration = timedelta(seconds=int(args.option("seconds") or 0))
        outcome = self.schedules.wake_for(
            cluster, duration, by=inv.user, channel=inv.channel, groups=self._groups(inv.user)
        )
        self._tell(outcome, inv)

    def _help(self, args: SubcommandArgs, inv: Invocation) -> None:
        lines = [f"`{schedule_copy.usage(verb)}`" for verb in schedule_copy.USAGE]
        answer(inv, views.text_message("\n".join(["*Schedules*: nightly and weekend shutdowns", *lines])))

    def _add(self, args: SubcommandArgs, inv: Invocation) -> None:
        if len(args.args) == 1 and not args.options:
            raise ScheduleUsage(
                schedule_copy.missing_name("add"), "add"
            )  # the modal (`register`) normally takes it
        default = self._default_cluster(inv.channel) if self._default_cluster else None
        parsed = parse_add(
            args,
            channel=inv.channel,
            default_cluster=default,
            clusters=self.ops.visible_clusters(inv.user, self._groups(inv.user)),
            find_channel=self._channels.resolve if self._channels is not None else None,
        )
        outcome = self.schedules.add(
            **parsed.as_kwargs(), by=inv.user, groups=self._groups(inv.user), typed_in=inv.channel
        )
        if not outcome.ok:
            raise ScheduleUsage(messages.outcome_text(outcome), "add")
        self._sync()
        answer(inv, views.text_message(ui.schedule_added(inv.user, outcome)), visible=True)

    def _list(self, args: SubcommandArgs, inv: Invocation) -> None:
        cluster = optional_word(args, "list")
        visible = self._visible(cluster, inv, "schedule_list")
        found = [s for s in self.schedules.all_schedules(cluster=cluster) if s.cluster in visible]
        # The pool systems' own schedules (a Gardener Shoot's hibernation) run beside scalebot's.
        theirs = [p for c in sorted(visible) if (p := self.ops.provider_schedules(c)) is not None]
        answer(inv, ui.schedule_list(found, cluster=cluster, provider=theirs))

    def _visible(self, cluster: str | None, inv: Invocation, what: str) -> set[str]:
        """The clusters `inv.user` may read (viewer or more). Asking for another one is refused with
        the answer an unknown cluster gets, naming only theirs: nobody learns of the others here."""
        groups = self._groups(inv.user)
        visible = set(self.ops.visible_clusters(inv.user, groups))
        if cluster is None:
            return visible
        if cluster not in visible:
            self.ops.may_view(cluster, by=inv.user, groups=groups, what=what)  # audits the refusal
            raise UserError(
                f'unknown cluster "{cluster[:63]}"; clusters: {", ".join(sorted(visible)) or "none"}'
            )
        return {cluster}

    def _show(self, args: SubcommandArgs, inv: Invocation) -> None:
        name = name_arg(args, "show")
        sched = self.schedules.show(name)
        groups = self._groups(inv.user)
        if sched is None or self.ops.role(sched.cluster, inv.user, groups) is None:
            if sched is not None:  # the refusal is audited; the answer is an unknown schedule's
                self.ops.may_view(sched.cluster, by=inv.user, groups=groups, what="schedule_show")
            answer(inv, views.text_message(self._unknown(name, inv), emoji="⚠️"))
            return
        now = self.clock.now()
        events = self.schedules.next_events(now, limit=50, cluster=sched.cluster)
        mine = [(occ, at) for occ, at in events if occ.schedule == name]
        answer(inv, ui.schedule_detail(sched, mine, now=now))

    def _manage(
        self, act: Callable[..., ScheduleOutcome], verb: str
    ) -> Callable[[SubcommandArgs, Invocation], None]:
        """pause / resume / delete / approve / unapprove NAME: one service call, told like every change."""

        def run(args: SubcommandArgs, inv: Invocation) -> None:
            name = name_arg(args, verb)
            self._tell(act(name, by=inv.user, groups=self._groups(inv.user), channel=inv.channel), inv)

        return run

    def _skip_date(self, args: SubcommandArgs, inv: Invocation) -> None:
        if len(args.args) != 3 or args.options:
            raise ScheduleUsage(messages.missing_argument("a schedule name and a date"), "skip")
        _, name, day = args.args
        skipped = self.schedules.skip_date(
            name, day, by=inv.user, groups=self._groups(inv.user), channel=inv.channel
        )
        self._tell(skipped, inv)

    def _next(self, args: SubcommandArgs, inv: Invocation) -> None:
        cluster = optional_word(args, "next")
        visible = self._visible(cluster, inv, "schedule_next")
        tz, now = self._zone(inv.user), self.clock.now()
        clusters_of = {s.name: s.cluster for s in self.schedules.all_schedules()}
        events = first_of_each(
            [
                (occ, at)
                for occ, at in self.schedules.next_events(now, limit=100, cluster=cluster)
                if clusters_of.get(occ.schedule) in visible
            ]
        )[:20]
        clusters = {s.name: s.cluster for s in self.schedules.all_schedules()}
        until = max((at for _, at in events), default=now)
        days_off = [
            (occ, why)
            for occ, why in self.schedules.days_off_until(now, until, cluster=cluster)
            if clusters_of.get(occ.schedule) in visible
        ]
        answer(inv, ui.next_events(events, clusters, tz=tz, now=now, cluster=cluster, days_off=days_off))

    # -- announcement buttons (bot executor) --------------------------------------------------------

    def _decision(self, decide: Callable[[str, Invocation, Sequence[str]], ScheduleOutcome]) -> ClickHandler:
        def on_click(value: str, inv: Invocation) -> None:
            key = ui.key_of(value)
            if key is None:
                answer(inv, views.text_message(ui.unknown_announcement(), emoji="⚠️"))
                return
            self._decided(decide(key, inv, self._groups(inv.user)), inv)

        return on_click

    def _choice(
        self, decide: Callable[[str, str, Invocation, Sequence[str]], ScheduleOutcome]
    ) -> ClickHandler:
        """Approve with force / Leave out POOL: the value is re-parsed (key and detail), and the
        service re-checks the clicker's role, the channel and the choice against SQLite."""

        def on_click(value: str, inv: Invocation) -> None:
            choice = ui.choice_of(value)
            if choice is None:
                answer(inv, views.text_message(ui.unknown_announcement(), emoji="⚠️"))
                return
            self._decided(decide(*choice, inv, self._groups(inv.user)), inv)

        return on_click

    def _force_scope(self, args: SubcommandArgs, inv: Invocation) -> None:
        """`schedule force NAME --force-scope=Kind/ns/name,…|none`: the standing force scope."""
        if len(args.args) != 2 or args.flags or [k for k, _ in args.options] != ["force-scope"]:
            raise ScheduleUsage(messages.missing_argument("a schedule name and --force-scope=…"), "force")
        units = args.option("force-scope") or ""
        outcome = self.schedules.set_force_scope(
            args.args[1], units, by=inv.user, groups=self._groups(inv.user), channel=inv.channel
        )
        self._tell(outcome, inv)

    def _postpone_until_fallback(self, value: str, inv: Invocation) -> None:
        """Reached only when `register` was not called: without it no modal can be opened in time."""
        answer(inv, views.text_message(ui.modal_unavailable(), emoji="⚠️"))

    def _decided(self, outcome: ScheduleOutcome, inv: Invocation | None) -> None:
        """Every decision edits the announcement in place; a refusal is told to the clicker only."""
        if outcome.announcement is not None:
            self.on_announce(outcome.announcement)
        if outcome.operation is not None or (not outcome.ok and outcome.announcement is not None):
            self._show_result(outcome)  # Run now: started, or why it could not start
        if not outcome.ok and inv is not None:
            answer(inv, views.text_message(messages.outcome_text(outcome), emoji="⚠️"))
        if outcome.changed:
            self._sync()

    # -- modals (Bolt listener threads) -------------------------------------------------------------

    def _open_modals(self, body: dict[str, Any], next_: Callable[[], None]) -> BoltResponse | None:
        """Global middleware: ack a modal-opening request at once, open the modal right behind the
        ack on a Bolt listener thread (never queued behind slow work), and stop it here."""
        opener = _modal_opener(body)
        if opener is None or self._listener_pool is None:
            next_()
            return None
        run = self._open_postpone if opener == "postpone" else self._open_add
        self._listener_pool.submit(_guarded, run, body)
        return BoltResponse(status=200, body="")

    def _open_postpone(self, body: dict[str, Any]) -> None:
        user, channel = _who(body)
        key = ui.key_of(str(body["actions"][0].get("value") or ""))
        sched = self.schedules.show(key.rsplit(":", 2)[0]) if key else None
        if key is None or sched is None or self.ops.role(sched.cluster, user, self._groups(user)) is None:
            self._whisper(channel, user, ui.unknown_announcement())  # no role there: as if unknown
            return
        elsewhere = self.ops.origin_refusal(sched.cluster, by=user, channel=channel, what="schedule_postpone")
        if elsewhere is not None:  # no dialog for a click from where the cluster is not operated
            self._whisper(channel, user, messages.outcome_text(elsewhere))
            return
        note = self._note_for(key, sched.cluster, sched.channel)
        now = self.clock.now()
        default = max(note.effective or now, now) + timedelta(hours=1)
        view = schedule_modals.postpone_modal(note, tz=sched.spec.tz, default=default)
        self._views_open(body, view, channel, user, ui.modal_unavailable())

    def _open_add(self, body: dict[str, Any]) -> None:
        """Open the form at once (a trigger_id lives 3 s); the person's time zone (users.info, which
        may take seconds) is filled in afterwards with views.update when it was not known yet."""
        user, channel = _who(body)
        default = self._default_cluster(channel) if self._default_cluster else None
        known = self._cached_zone(user)

        def form(tz: str) -> Any:
            mine = self.ops.visible_clusters(user, self._groups(user))  # only theirs to pick from
            return schedule_modals.add_modal(
                mine, cluster=default if default in mine else None, channel=channel, tz=tz
            )

        opened = self._views_open(body, form(known or "UTC"), channel, user, ui.add_modal_unavailable())
        if known is not None or opened is None:
            return
        zone = self._zone(user)
        if zone == "UTC":
            return
        try:
            self._client.views_update(view_id=opened["id"], hash=opened.get("hash"), view=form(zone))
        except Exception:  # the form works in UTC too; the person can still type their zone
            log.warning("could not put %s's time zone into the schedule form", user, exc_info=True)

    def _on_postpone_submitted(self, ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        key = str(view_metadata(view).get("key") or "")
        sched = self.schedules.show(key.rsplit(":", 2)[0]) if key.count(":") == 2 else None
        until, errors = read_postpone_form(view_state(view), sched.spec.tz) if sched else (None, {})
        if until is None:
            ack(
                response_action="errors",
                errors=errors or {schedule_copy.POSTPONE_DATE: ui.unknown_announcement()},
            )
            return
        user = _who(body)[0]
        # A short SQLite transaction, done before the ack so that a refusal can name the field.
        channel = str(view_metadata(view).get("channel") or "")
        outcome = self.schedules.postpone_until(
            key, by=user, until=until, groups=self._groups(user), channel=channel
        )
        if not outcome.ok:
            ack(
                response_action="errors",
                errors={schedule_copy.POSTPONE_TIME: messages.outcome_text(outcome, slack=False)[:300]},
            )
            return
        ack()
        self._decided(outcome, None)

    def _on_add_submitted(self, ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        """What is cheap is checked before the ack, so the form can show the error at its field:
        the fields, and the schedule as a whole (days, times, zone, lead times; pure). The checks
        that list the cluster's pools can take seconds: they run after the ack, and a refusal
        then reaches the person privately in the announcement channel."""
        form, errors = check_add_form(view_state(view))
        if form is None:
            ack(response_action="errors", errors=errors)
            return
        # Whether the holidays' country and region and the calendar exist reads no cluster: at its field.
        rule = days_off.parse_rule(holidays=form.holidays, calendar=form.calendar, action=form.on_holiday)
        unknown = self.schedules.calendars.check(rule)
        if unknown:
            ack(response_action="errors", errors={FIELD_BLOCK["holidays"]: unknown[:300]})
            return
        ack()
        user = _who(body)[0]
        if self._listener_pool is None:
            self.save_added(form, user)
        else:
            self._listener_pool.submit(_guarded, lambda _: self.save_added(form, user), body)

    def save_added(self, form: AddArgs, user: str) -> None:
        """Add the schedule of a checked form (`check_add_form`): the channel is told, or the person
        privately why not."""
        outcome = self.schedules.add(**form.as_kwargs(), by=user, groups=self._groups(user))
        if not outcome.ok:
            self._whisper(form.channel, user, ui.schedule_not_added(messages.outcome_text(outcome)))
            return
        if self._sender is not None:  # the modal has no response_url: tell the channel through the sender
            added = views.text_message(ui.schedule_added(user, outcome))
            self._sender.show(f"sched-added:{uuid.uuid4().hex}", added, channel=form.channel, final=True)
        self._sync()

    # -- helpers ------------------------------------------------------------------------------------

    def _show_result(self, outcome: ScheduleOutcome) -> None:
        """Edit an occurrence's message to its result; post one only when a failure has nowhere to go."""
        sender = self._sender
        if sender is None:
            return
        reply: str = outcome.reply
        if outcome.decided_by:
            reply = fmt("{} ({})", outcome.reply, messages.who(outcome.decided_by))
        if outcome.operation is not None:
            line = ui.started(reply)
        elif not outcome.ok:
            line = ui.failed_to_start(reply)
        else:
            line = ui.done_without_change(reply)
        key = ui.MESSAGE_PREFIX + outcome.key
        with self._lock:
            last = self._last.pop(outcome.key, None)
        where = self._announced_at(outcome.key)
        if where is not None:
            sender.adopt(key, *where)
        if last is not None:
            sender.show(
                key, ui.announcement(last, status=line, buttons=False), channel=last.channel, final=True
            )
        elif where is not None or not outcome.ok:
            channel = where[0] if where else self._channel_of(outcome.key)
            if channel:
                sender.show(key, ui.occurrence_status(outcome.key, line), channel=channel, final=True)

    def _remember(self, note: Announcement) -> None:
        with self._lock:
            self._last.pop(note.key, None)
            self._last[note.key] = note
            while len(self._last) > _MAX_REMEMBERED:
                self._last.pop(next(iter(self._last)))

    def _note_for(self, key: str, cluster: str, channel: str) -> Announcement:
        """What the modal says about the occurrence: the last announcement, else its effective time."""
        with self._lock:
            last = self._last.get(key)
        if last is not None:
            return last
        events = self.schedules.next_events(self.clock.now(), limit=50, cluster=cluster)
        effective = next((at for occ, at in events if occ.key == key), None)
        name = key.rsplit(":", 2)[0]
        return Announcement(key, name, cluster, channel, "", "upcoming", effective=effective)

    def _announced_at(self, key: str) -> tuple[str, str] | None:
        """(channel, ts) of an occurrence's message, as the service recorded it (survives restarts)."""
        row = self.schedules.store.get_occurrence(key)
        return (row.announce_channel, row.announce_ts) if row and row.announce_ts else None

    def _channel_of(self, key: str) -> str:
        sched = self.schedules.show(key.rsplit(":", 2)[0])
        return sched.channel if sched else ""

    def _posted(self, key: str, channel: str, ts: str) -> None:
        """The sender's posted hook (sender thread): decisions and the run find the message by key."""
        if key.startswith(ui.MESSAGE_PREFIX):
            self.schedules.set_announcement(key[len(ui.MESSAGE_PREFIX) :], channel=channel, ts=ts)

    def _tell(self, outcome: ScheduleOutcome, inv: Invocation) -> None:
        if outcome.ok and outcome.changed:
            self._sync()  # armed before the person reads "saved"
            answer(inv, views.text_message(ui.changed(inv.user, outcome)), visible=True)
        else:
            answer(inv, views.text_message(messages.outcome_text(outcome), emoji="" if outcome.ok else "⚠️"))

    def _sync(self) -> None:
        if self.runner is None:
            return
        try:
            self.runner.sync()
        except Exception:  # the change is saved; the timer's next tick or restart re-arms from SQLite
            log.exception("could not re-arm the schedule timer")

    def _unknown(self, name: str, inv: Invocation) -> str:
        """The schedules of the clusters `inv.user` has a role on, never the others'."""
        visible = set(self.ops.visible_clusters(inv.user, self._groups(inv.user)))
        names = ", ".join(s.name for s in self.schedules.all_schedules() if s.cluster in visible) or "none"
        return f'No schedule "{name[:63]}"; schedules: {names}.'

    def _cached_zone(self, user: str) -> str | None:
        with self._lock:
            cached = self._zones.get(user)
        if cached is not None and self.clock.monotonic() - cached[1] < ZONE_TTL_SECONDS:
            return cached[0]
        return None

    def _zone(self, user: str) -> str:
        """The person's Slack time zone (users.info `tz`), cached; UTC when Slack does not say."""
        now = self.clock.monotonic()
        with self._lock:
            cached = self._zones.get(user)
        if cached is not None and now - cached[1] < ZONE_TTL_SECONDS:
            return cached[0]
        zone = "UTC"
        if self._client is not None:
            try:
                found = str(self._client.users_info(user=user)["user"]["tz"])
                zone = schedule.parse_zone(found).key
            except Exception as exc:  # no scope, unknown user, a zone zoneinfo lacks: UTC is safe
                log.info("no time zone for %s (%s); using UTC", user, exc)
        with self._lock:
            self._zones[user] = (zone, now)
        return zone

    def _views_open(
        self, body: dict[str, Any], view: Any, channel: str, user: str, failure: str
    ) -> dict[str, Any] | None:
        """The opened view (its id and hash, for views.update), or None when it could not open."""
        try:
            response = self._client.views_open(trigger_id=str(body.get("trigger_id") or ""), view=view)
        except Exception:
            log.exception("views.open failed", extra={"user": user})
            self._whisper(channel, user, failure)
            return None
        opened = response.get("view") if response is not None else None
        return opened if isinstance(opened, dict) and opened.get("id") else None

    def _whisper(self, channel: str, user: str, text: str) -> None:
        if self._sender is not None and channel and user:
            self._sender.ephemeral(channel, user, views.text_message(text, emoji="⚠️"))


def check_add_form(values: Mapping[str, Any]) -> tuple[AddArgs | None, dict[str, str]]:
    """The add form's checks that need no cluster: each field, then the schedule as a whole
    (days, times, zone, lead times). The errors are by field (block ID)."""
    form, errors = read_add_form(values)
    if form is None:
        return None, errors
    problem = spec_problem(form)
    if problem is not None:
        block = FIELD_BLOCK[problem.field] if problem.field else schedule_copy.ADD_FIELDS[0]
        return None, {block: str(problem)[:300]}
    return form, {}


def _modal_opener(body: Mapping[str, Any]) -> str | None:
    """Which modal a request opens: a "Postpone until…" click, or `/scale schedule add` alone."""
    if not body.get("trigger_id"):
        return None
    actions = body.get("actions")
    if body.get("type") == "block_actions" and isinstance(actions, list) and actions:
        first = actions[0]
        return (
            "postpone"
            if isinstance(first, dict) and first.get("action_id") == ACTION_POSTPONE_UNTIL
            else None
        )
    text = str(body.get("text") or "").split()
    bare_add = [word.lower() for word in text] == ["schedule", "add"]
    has_who = bool(body.get("user_id")) and bool(body.get("channel_id"))
    return "add" if body.get("command") == messages.COMMAND and bare_add and has_who else None


def _who(body: Mapping[str, Any]) -> tuple[str, str]:
    user = body.get("user")
    channel = body.get("channel")
    user_id = user.get("id") if isinstance(user, Mapping) else body.get("user_id")
    channel_id = channel.get("id") if isinstance(channel, Mapping) else body.get("channel_id")
    return str(user_id or ""), str(channel_id or "")


def _guarded(run: Callable[[dict[str, Any]], None], body: dict[str, Any]) -> None:
    """Work handed to a Bolt listener thread after the ack: nothing may escape unlogged."""
    try:
        run(body)
    except Exception:
        log.exception("opening a schedule dialog failed")

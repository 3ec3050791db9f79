"""`scalebot console`: the Slack experience in a terminal, for a first look without Slack.

A line-oriented REPL. A line is what a person would type after `/scale` (parsed by
`bot.text.commands`, run by the same `bot.slack.dispatch.Dispatcher` the Slack listeners use), or one of
the console's stand-ins for what Slack itself provides (who you are, the buttons, the time:
`as USER`, `approve`, `reject`, `cancel`, `wait`, `postpone` / `skip` / `run-now`, `schedule add`
alone, `fast-forward 2d|next`, `clock`, `quit`), each a `CommandSpec` of the console surface in
`bot.text.command_registry` naming its function here; `help` lists them. A `# …` line is a comment
(for scripted sessions).

Schedules are the real ones: `bot.slack.schedule_ui` answers `schedule …` and the buttons, on the engine's
schedule service and the bot's timer (`bot.runtime.apscheduler_timer`), announcements included. With
the simulated cluster the console's clock can run fast (`--clock-speed 600`: a weekend in five minutes) and
`fast-forward` jumps to each instant something is due and runs it there, so a scripted session
needs no waiting at all.

Output is what Slack would show, rendered as text from the same Block Kit messages: the card
when an operation is requested, its in-place updates (only the lines that changed), thread
replies (phases, DrainingSucceeded conditions, the final summary), and replies only the
requester would see, marked "(only you)". Progress comes from the real `bot.slack.delivery.progress.Progress`
worker through `ConsoleSender`, a stand-in for `bot.slack.delivery.sender.Sender` that prints instead of
calling the Web API; it, the `Terminal` and the rendering of Slack messages as lines are
`bot.cli.console_screen`'s, this module is the REPL and its commands.

Piped input works: commands run in order, `wait` blocks on the runner (never on a timer), and
end of input exits 0. With the built-in simulated cluster every screen says so.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO, cast

from bot.cli.console_screen import (
    BUTTON_WORDS,
    ONLY_YOU,
    ConsoleSender,
    Terminal,
    message_lines,
    mrkdwn_lines,
)
from bot.runtime import wiring
from bot.runtime.apscheduler_timer import APSchedulerTimer
from bot.slack.blocks import operations as blocks
from bot.slack.blocks import schedule_modals, views
from bot.slack.blocks import schedules as schedule_ui_blocks
from bot.slack.delivery.progress import Progress
from bot.slack.dispatch import Dispatcher, Invocation, new_incident
from bot.slack.schedule_ui import ScheduleUi, check_add_form
from bot.text import command_registry, commands, messages
from bot.text.command_registry import CONSOLE_ONLY
from engine.domain.announcement import NextEvent
from engine.domain.clock import Clock, FakeClock, ScaledClock, SystemClock
from engine.domain.durations import DurationError, parse_duration
from engine.domain.operation import Operation, OpState
from engine.domain.settings import RunnerSettings
from engine.operations.policy import ClusterPolicy, Role
from engine.operations.service import Operations, new_operations
from engine.schedules.service import Schedules
from engine.store.database import Store

if TYPE_CHECKING:
    from bot.slack.delivery.sender import Sender

log = logging.getLogger(__name__)

SIMULATED_BANNER = "SIMULATED cluster (in memory): nothing real is changed"
CHANNEL = "CCONSOLE"
"""The channel console operations are posted in (an ID like Slack's, so cards look the same)."""

DEFAULT_USERS: Mapping[str, str] = {"alice": "U0ALICE", "bob": "U0BOB", "carol": "U0CAROL"}
"""Console name -> user ID; the first one is who you are at start."""
DEFAULT_ROLES: Mapping[str, Role] = {"alice": Role.OPERATOR, "bob": Role.APPROVER, "carol": Role.VIEWER}

SIMULATED_SETTINGS = RunnerSettings(
    graceful_window=timedelta(seconds=12),
    pass_interval=timedelta(seconds=2),
    settle=timedelta(seconds=1),
)
"""Phase 1 shortened from 5 minutes to 12 seconds, so a simulated zero-scale ends while you watch."""

WAIT_POLL_SECONDS = 0.5
"""`wait` blocks on the runner's condition in slices this long, so Ctrl-C stays responsive."""
FLUSH_SECONDS = 30.0
"""Upper bound for rendering what is queued before the next prompt (it normally takes ms)."""

FAST_FORWARD_LIMIT = timedelta(days=31)
FAST_FORWARD_STEPS = 1000
"""At most this many timer instants per `fast-forward` (a tick that keeps failing retries every minute)."""
_CONSOLE_HELP = (
    "Console only:",
    *(
        f"    {spec.usage:<14} {spec.summary}"
        for spec in command_registry.COMMANDS
        if spec.surfaces == command_registry.CONSOLE_ONLY
    ),
)
_SLACK_ID = re.compile(r"[UW][A-Z0-9]{1,20}")
_AT_NAME = re.compile(r"(?<!\S)@([A-Za-z][\w.-]{0,40})")


# -- wiring helpers (for bot.cli.main) -----------------------------------------------------------------


def console_policy(
    cluster: str,
    users: Mapping[str, str] = DEFAULT_USERS,
    roles: Mapping[str, Role] = DEFAULT_ROLES,
) -> ClusterPolicy:
    """Roles for the console's people; zero-scale needs one approval, so the flow shows."""
    return ClusterPolicy(
        cluster=cluster,
        users={uid: roles[name] for name, uid in users.items() if name in roles},
        approval_required_for=frozenset({"zero", "scale_down", "force"}),
        approvals_required=1,
    )


def simulated_operations(
    *, clock: Clock | None = None, settings: RunnerSettings = SIMULATED_SETTINGS, db: str | None = None
) -> Operations:
    """Operations over the built-in simulated cluster and the console policy, in memory or, with
    `db`, in that SQLite file (the cluster's state, its operations and its schedules)."""
    clock = clock or SystemClock()
    store = Store(db or ":memory:")
    handle, _ = wiring.simulated_cluster(clock=clock, store=store if db else None)
    made: list[Operations] = []  # `status` asks the schedules of the service being made here

    def next_event(cluster: str) -> NextEvent | None:
        return Schedules(store, made[0], clock).next_event(cluster, clock.now())

    made.append(
        new_operations(
            store,
            {handle.name: handle},
            {handle.name: console_policy(handle.name)},
            clock,
            settings=settings,
            next_event=next_event,
        )
    )
    return made[0]


# -- the REPL -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Session:
    ops: Operations
    dispatcher: Dispatcher
    progress: Progress
    terminal: Terminal
    users: Mapping[str, str]
    default_cluster: str
    simulated: bool
    user: str
    sender: ConsoleSender
    schedules: ScheduleUi
    timer: APSchedulerTimer
    ask: Callable[[str], str | None]
    """Ask one question (a form field) and read the answer; None at the end of input."""

    @property
    def names(self) -> Mapping[str, str]:
        return self.terminal.names

    def prompt(self) -> str:
        sim = "[SIMULATED] " if self.simulated else ""
        me = self.names.get(self.user, self.user)
        return f"scalebot {sim}[as @{me}] › "  # noqa: RUF001 (the prompt's arrow is deliberate)

    def invocation(self) -> Invocation:
        return Invocation(user=self.user, channel=CHANNEL, respond=self.respond)

    def respond(self, text: str = "", **kwargs: Any) -> None:
        """The interaction's `respond`: ephemeral unless the dispatcher asks for the channel."""
        lines = message_lines(text, kwargs.get("blocks") or (), self.names)
        visible = kwargs.get("response_type") == "in_channel"
        self.terminal.lines(lines, first=f"#{CHANNEL}: " if visible else ONLY_YOU)

    def tell(self, text: str) -> None:
        self.terminal.lines(mrkdwn_lines(text, self.names), first=ONLY_YOU)

    def role_label(self, user: str) -> str:
        role = self.ops.role(self.default_cluster, user)
        return role.label if role else "no role"


def run_console(
    *,
    ops: Operations,
    default_cluster: str,
    users: Mapping[str, str] | None,
    stdin: TextIO,
    stdout: TextIO,
    simulated: bool,
    schedule_timer: bool = True,
) -> int:
    """Run the console until `quit` or end of input (exit code 0; 130 after Ctrl-C at the prompt).

    `users` maps console names to user IDs (None: alice, bob and carol of `DEFAULT_USERS`; the
    policy in `ops` decides what each may do). Operations still running when the console ends
    are stopped after their current step (`ops.runner.stop`), as `scalebot` does on Ctrl-C.
    `schedule_timer=False`: schedule events happen only when `fast-forward` reaches them (for a
    clock that does not move by itself)."""
    users = dict(users or DEFAULT_USERS)
    terminal = Terminal(stdout, {uid: name for name, uid in users.items()})
    sender = ConsoleSender(terminal)
    # Progress and ScheduleUi are typed to the concrete Sender; ConsoleSender has every method they call.
    progress = Progress(ops, cast("Sender", sender), blocker_interval=0.0)
    service = Schedules(ops.store, ops, ops.clock)
    schedule_ui = ScheduleUi(
        service, ops, cast("Sender", sender), clock=ops.clock, default_cluster=lambda channel: default_cluster
    )
    timer = APSchedulerTimer(service, ops.clock, schedule_ui.on_announce, schedule_ui.on_fired)
    schedule_ui.attach(runner=timer)
    interactive = _isatty(stdin)
    session = _Session(
        ops=ops,
        dispatcher=Dispatcher(
            ops,
            progress,
            subcommands=schedule_ui.subcommands(),
            clicks=schedule_ui.clicks(),
            names=lambda user: next((f"@{name}" for name, uid in users.items() if uid == user), user),
        ),
        progress=progress,
        terminal=terminal,
        users=users,
        default_cluster=default_cluster,
        simulated=simulated,
        user=next(iter(users.values()), "U0CONSOLE"),
        sender=sender,
        schedules=schedule_ui,
        timer=timer,
        ask=lambda question: _ask(terminal, stdin, question, interactive=interactive),
    )
    progress.start()
    try:
        timer.start(paused=not schedule_timer)
        _greet(session)
        return _loop(session, stdin, interactive=interactive)
    finally:
        timer.stop()
        _close(session)


def _ask(terminal: Terminal, stdin: TextIO, question: str, *, interactive: bool) -> str | None:
    if interactive:
        terminal.show_prompt(question)
    raw = stdin.readline()
    terminal.input_taken()
    if not raw:
        return None
    if not interactive:
        terminal.lines([question + raw.strip()])
    return raw.strip()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _greet(s: _Session) -> None:
    if s.simulated:
        s.terminal.lines([f"*** {SIMULATED_BANNER} ***"])
        show_clock(s, [])
    me = s.names.get(s.user, s.user)
    s.terminal.lines(
        [
            f"scalebot console · cluster {s.default_cluster} · you are @{me} ({s.role_label(s.user)})",
            "Type what you would type after /scale (`help` lists it), `as USER` to switch user, "
            "`approve` / `reject` to click a card's buttons, `wait`, `quit`.",
        ]
    )


def _loop(s: _Session, stdin: TextIO, *, interactive: bool) -> int:
    while True:
        prompt = s.prompt()
        if interactive:
            s.terminal.show_prompt(prompt)
        try:
            raw = stdin.readline()
        except KeyboardInterrupt:
            s.terminal.input_taken()
            s.terminal.lines(["", "interrupted"])
            return 130
        s.terminal.input_taken()
        if not raw:  # end of input
            if interactive:
                s.terminal.lines([""])
            return 0
        line = raw.strip()
        if not interactive:  # a transcript reads better with each command shown after its prompt
            s.terminal.lines([prompt + line])
        if not line or line.startswith("#"):
            continue
        if line.lower() in ("quit", *command_registry.BY_NAME["quit"].aliases):
            return 0
        _guarded(s, line)


def _guarded(s: _Session, line: str) -> None:
    """One command; the console's catch-all, as the dispatcher has its own for Slack."""
    try:
        s.ops.expire_stale()  # the bot's periodic expiry, done where a console user would notice
        _execute(s, line)
        s.progress.flush(FLUSH_SECONDS)  # the card and replies appear before the next prompt
    except KeyboardInterrupt:
        s.tell("Stopped waiting; running operations continue (`wait` to follow them again).")
    except Exception:
        incident = new_incident()
        log.exception("console command failed (incident %s)", incident)
        s.tell(messages.internal_error(incident))


def _execute(s: _Session, line: str) -> None:
    words = line.split()
    if words[0].lower() == messages.COMMAND:  # typed out of Slack habit
        words = words[1:]
        if not words:
            s.tell(messages.empty_command())
            return
    # The console's own commands (`bot.text.command_registry`, surface console only): a whole line
    # such as `schedule add` alone, else its first word; anything else is a /scale command.
    whole = " ".join(w.lower() for w in words)
    spec = CONSOLE.get(whole) or (CONSOLE.get(_CONSOLE_ALIASES.get(words[0].lower(), words[0].lower())))
    if spec is not None and " " in spec.name and spec.name != whole:
        spec = None
    if spec is not None and spec.console:
        handler: ConsoleHandler = globals()[spec.console]
        handler(s, words[len(spec.name.split()) :])
        return
    _slash(s, " ".join(words))


def _slash(s: _Session, text: str) -> None:
    """Exactly what the /scale listener does with the text, minus the ack."""
    try:
        parsed = commands.parse(
            _mentions(text, s.users), default_cluster=s.default_cluster, clusters=s.ops.clusters()
        )
    except commands.UsageError as err:
        s.terminal.lines(s.terminal.render(views.usage_error(err.message, err.hint)), first=ONLY_YOU)
        return
    s.dispatcher.run(parsed, s.invocation())
    if isinstance(parsed, commands.Help) and parsed.topic is None:
        names = ", ".join(f"{n} ({s.role_label(uid)})" for n, uid in s.users.items())
        s.terminal.lines([line.format(users=names) for line in _CONSOLE_HELP], first=ONLY_YOU)


def _mentions(text: str, users: Mapping[str, str]) -> str:
    """`@bob` becomes the mention Slack's autocomplete would have inserted (`<@U0BOB>`)."""
    return _AT_NAME.sub(lambda m: f"<@{users[m.group(1)]}>" if m.group(1) in users else m.group(0), text)


def as_user(s: _Session, args: list[str]) -> None:
    if len(args) != 1:
        s.tell(f"Usage: `as USER`; users: {', '.join(s.users)}")
        return
    who = args[0].removeprefix("@")
    uid = s.users.get(who.lower()) or (who if _SLACK_ID.fullmatch(who) else None)
    if uid is None:
        known = ", ".join(f"{n} ({s.role_label(u)})" for n, u in s.users.items())
        s.tell(f"Unknown user `{who[:40]}`; users: {known}, or a Slack user ID (U…).")
        return
    s.user = uid
    s.terminal.lines([f"You are now @{s.names.get(uid, uid)} ({s.role_label(uid)} on {s.default_cluster})."])


def click_approve(s: _Session, args: list[str]) -> None:
    _decide(s, args, blocks.ACTION_APPROVE)


def click_reject(s: _Session, args: list[str]) -> None:
    _decide(s, args, blocks.ACTION_REJECT)


def _decide(s: _Session, args: list[str], action: str) -> None:
    """A click on the card's Approve or Reject button: its value is the opaque approval ID."""
    op = _pick(s, args, OpState.AWAITING_APPROVAL, "waiting for approval")
    if op is None:
        return
    if not op.approval_id:
        s.tell(f"Operation {op.id} has no Approve or Reject button: it did not need approval.")
        return
    s.dispatcher.click(action, op.approval_id, s.invocation())


def click_cancel(s: _Session, args: list[str]) -> None:
    op = _pick(s, args, OpState.RUNNING, "running")
    if op is not None:
        s.dispatcher.click(blocks.ACTION_CANCEL, op.id, s.invocation())


def _pick(s: _Session, args: list[str], state: OpState, what: str) -> Operation | None:
    """The operation a click is on: the one named, else the latest in `state` (tells why not)."""
    if len(args) > 1:
        s.tell(f"Click one operation at a time, e.g. `{args[0]}`.")
        return None
    if args:
        op = s.ops.get(args[0])
        if op is None:
            s.tell(messages.no_operation(args[0][:64]))
        return op
    latest = [o for o in s.ops.list_operations(active_only=True) if o.state is state]
    if not latest:
        s.tell(f"No operation is {what}; `ops list` shows the recent ones.")
        return None
    return latest[0]


def wait_for_operations(s: _Session, args: list[str]) -> None:
    if s.ops.runner.wait_idle(timeout=0):
        pending = [o.id for o in s.ops.list_operations(active_only=True)]
        hint = f"; waiting for approval: {', '.join(pending)}" if pending else ""
        s.tell(f"Nothing is running{hint}.")
        return
    running = [o.id for o in s.ops.list_operations(active_only=True) if o.state is OpState.RUNNING]
    what = ", ".join(running) or "running operations"
    s.terminal.lines([f"Waiting for {what} … (Ctrl-C stops waiting, not the operation)"])
    # Block on the runner's own condition, notified when an operation's worker ends; the slices
    # only keep Ctrl-C responsive.
    while not s.ops.runner.wait_idle(timeout=WAIT_POLL_SECONDS):
        pass
    s.progress.flush(FLUSH_SECONDS)
    for op_id in running:
        op = s.ops.get(op_id)
        if op is not None:
            s.terminal.lines([f"{op.id}: {op.state.value.replace('_', ' ')}"])


def _announcement_button(action_id: str) -> Callable[[_Session, list[str]], None]:
    """A click on a schedule announcement's button: the latest announcement showing it, or the
    latest of the schedule named."""

    def click(s: _Session, args: list[str]) -> None:
        word = BUTTON_WORDS[action_id]
        if len(args) > 1:
            s.tell(f"Usage: `{word} [SCHEDULE]`.")
            return
        shown = s.sender.clickable(action_id)
        if args:
            shown = [(k, v) for k, v in shown if _schedule_of(k) == args[0]]
        if not shown:
            which = f" of schedule `{args[0][:63]}`" if args else ""
            s.tell(
                f"No announcement{which} shows a `{word}` button now; `schedule next` lists what comes, "
                "`fast-forward` gets there."
            )
            return
        s.dispatcher.click(action_id, shown[-1][1], s.invocation())

    return click


def _schedule_of(message_key: str) -> str:
    """The schedule name in an announcement's message key (`sched:NAME:KIND:DATE`)."""
    return message_key.removeprefix(schedule_ui_blocks.MESSAGE_PREFIX).rsplit(":", 2)[0]


def fast_forward(s: _Session, args: list[str]) -> None:
    """Move the clock on to each instant something is due, run it there (and the operations it
    starts to their end), until the time asked for has passed."""
    clock = s.ops.clock
    if not s.simulated or not isinstance(clock, (FakeClock, ScaledClock)):
        s.tell("`fast-forward` moves the simulated cluster's clock only (`scalebot console --simulated`).")
        return
    if [a.lower() for a in args] == ["next"]:
        now = clock.now()
        end = min((at for at in s.timer.schedules.next_wakeups(now) if at > now), default=now)
        if end == now:
            s.tell("Nothing is scheduled: `schedule add` one first.")
            return
    else:
        try:
            span = parse_duration(args[0]) if len(args) == 1 else None
        except DurationError as exc:
            s.tell(f"fast-forward: {exc}")
            return
        if span is None or span <= timedelta(0) or span > FAST_FORWARD_LIMIT:
            s.tell(
                "Usage: `fast-forward DURATION` (e.g. `2d`, `90m`; up to 31d) or `fast-forward next` "
                "(to the next schedule event)."
            )
            return
        end = clock.now() + span
    waiting_before = set(_awaiting_approval(s))
    for _ in range(FAST_FORWARD_STEPS):
        now = clock.now()
        due = min((at for at in s.timer.schedules.next_wakeups(now) if at > now), default=None)
        if due is None or due > end:
            break
        clock.advance((due - now).total_seconds())
        s.terminal.lines([f"⏩ {_clock_text(due)}"])
        s.timer.fire_due()
        while not s.ops.runner.wait_idle(timeout=WAIT_POLL_SECONDS):
            pass
        s.progress.flush(FLUSH_SECONDS)
        new = [op for op in _awaiting_approval(s) if op not in waiting_before]
        if new:  # time does not fly past a card someone has to decide on
            s.terminal.lines(
                [
                    f"⏸ Stopped: {', '.join(new)} waits for approval (`approve` as an approver), "
                    "then fast-forward again."
                ]
            )
            return
    now = clock.now()
    if now < end:
        clock.advance((end - now).total_seconds())
    s.terminal.lines([f"🕒 {_clock_text(clock.now())}"])


def _awaiting_approval(s: _Session) -> list[str]:
    return [o.id for o in s.ops.list_operations(active_only=True) if o.state is OpState.AWAITING_APPROVAL]


def _clock_text(at: datetime) -> str:
    return f"{at:%a %Y-%m-%d %H:%M} UTC"


def show_clock(s: _Session, args: list[str]) -> None:
    speed = s.ops.clock.speed if isinstance(s.ops.clock, ScaledClock) else 1.0
    fast = f", running {speed:g}x" if speed != 1 else ""
    travel = "; `fast-forward 2d` jumps ahead" if s.simulated else ""
    s.terminal.lines([f"🕒 {_clock_text(s.ops.clock.now())} (the console's clock{fast}{travel})"])


def schedule_form(s: _Session, args: list[str]) -> None:
    """`schedule add` alone: the form's fields, asked one by one."""
    _schedule_form(s)


def _schedule_form(s: _Session) -> None:
    """`schedule add` alone: the add form's fields as questions (Enter keeps the default), checked
    as the form is, then saved by the same code as a submitted form."""
    clusters = s.ops.clusters()
    view = schedule_modals.add_modal(clusters, cluster=s.default_cluster, channel=CHANNEL, tz="UTC")
    s.terminal.lines(["New schedule (Enter keeps the value in brackets; Ctrl-D cancels):"])
    values: dict[str, Any] = {}
    for block in view.to_dict()["blocks"]:
        element = block["element"]
        default = str(
            element.get("initial_value")
            or element.get("initial_time")
            or element.get("initial_conversation")
            or (element.get("initial_option") or {}).get("value")
            or ""
        )
        options = [str(o["value"]) for o in element.get("options") or ()]
        choices = f" ({' / '.join(options)})" if options else ""
        optional = " (optional)" if block.get("optional") else ""
        answer = s.ask(f"  {block['label']['text']}{choices}{optional} [{default}]: ")
        if answer is None:
            s.tell("Cancelled: no schedule was added.")
            return
        values[block["block_id"]] = {block["block_id"]: {"value": answer or default}}
    form, errors = check_add_form(values)
    if form is None:
        s.tell("Not saved: " + "; ".join(f"{field}: {why}" for field, why in errors.items()))
        return
    s.schedules.save_added(form, s.user)


click_postpone = _announcement_button(blocks.ACTION_POSTPONE_1H)
click_skip = _announcement_button(blocks.ACTION_SKIP)
click_run_now = _announcement_button(blocks.ACTION_RUN_NOW)

ConsoleHandler = Callable[[_Session, list[str]], None]
"""A console command's function in this module, named by its `CommandSpec.console`."""
CONSOLE = {name: spec for name, spec in command_registry.BY_NAME.items() if spec.surfaces == CONSOLE_ONLY}
"""The console's own commands, checked before the /scale parser (none is a /scale word)."""
_CONSOLE_ALIASES = {alias: spec.name for spec in CONSOLE.values() for alias in spec.aliases}


def _close(s: _Session) -> None:
    running = [o.id for o in s.ops.list_operations(active_only=True) if o.state is OpState.RUNNING]
    if running:
        after = (
            "the simulated cluster goes with it"
            if s.simulated
            else "they continue from their current step with `scalebot resume`"
        )
        s.terminal.lines([f"Leaving while {', '.join(running)} still running: {after}."])
        s.ops.runner.stop(timeout=0)  # finish the current step, persist, stop
    s.ops.unsubscribe(s.progress.on_event)
    s.progress.stop(FLUSH_SECONDS)

"""What every command group of the CLI shares: `CliError` (a bad flag: one line on stderr, exit 2),
`Refused` (the service said no), the exit codes, duration flags, the user an operation is recorded
for, confirmation on a terminal, whether to show the live display, and Ctrl-C handling."""

from __future__ import annotations

import argparse
import getpass
import signal
import sys
import threading
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING

from engine.domain.durations import DurationError, parse_duration
from engine.domain.errors import Category, ScalebotError

if TYPE_CHECKING:
    from engine.domain.operation import Outcome

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOG_FORMATS = ("text", "json")
DEFAULT_GRACEFUL_WINDOW = "5m"


class CliError(ScalebotError):
    """A problem with the command line itself (a flag's value, a missing confirmation): printed as
    one line, exit 2. Errors from below keep their own category (`bot.cli.main.EXIT_CODES`): they are
    never wrapped in this one."""

    category = Category.USAGE


class Refused(ScalebotError):
    """The operations service refused the request (`Outcome.ok` false: the policy, a lock held by
    another operation, an unknown or decided operation) and changed nothing. Usage, exit 2, as the
    same refusals of the drain by hand (`UserError`) are; the line is the service's own reply."""

    category = Category.USAGE

    def __init__(self, outcome: Outcome) -> None:
        from bot.text import messages  # only on a refusal: the usual run never renders messages

        super().__init__(messages.outcome_text(outcome, slack=False))
        self.outcome = outcome


def duration_flag(text: str, flag: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise CliError(f"{flag}: {exc}") from exc


def cli_user() -> str:
    return f"cli:{getpass.getuser()}"


def confirm(args: argparse.Namespace, plan_text: str, what: str) -> None:
    """A destructive command asks on a terminal; without one it needs --yes. Raises CliError (exit 2,
    nothing changed) when not confirmed."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(
            f"{what}: confirm with --yes (stdin is not a terminal, so scalebot cannot ask); "
            "nothing was changed"
        )
    print(plan_text, flush=True)
    try:
        answer = input(f"{what}: continue? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed; nothing was changed")


def live_display(args: argparse.Namespace) -> bool:
    """A live display on a terminal; plain lines, one per change, in CI logs, pipes and JSON logs."""
    return args.log_format != "json" and sys.stdout.isatty()


def on_interrupt(cancel: threading.Event) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)

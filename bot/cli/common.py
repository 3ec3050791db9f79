"""What every command group of the CLI shares: `CliError` (one line on stderr, exit 2), the exit
codes, duration flags, the user an operation is recorded for, confirmation on a terminal, whether to
show the live display, and Ctrl-C handling."""

from __future__ import annotations

import argparse
import getpass
import signal
import sys
import threading
from datetime import timedelta
from types import FrameType

from engine.domain.durations import DurationError, parse_duration
from engine.domain.errors import Category, ScalebotError

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOG_FORMATS = ("text", "json")
DEFAULT_GRACEFUL_WINDOW = "5m"


class CliError(ScalebotError):
    """A problem with the user's input or environment: printed as one line, exit 2."""

    category = Category.USAGE


def _duration(text: str, flag: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise CliError(f"{flag}: {exc}") from exc


def _user() -> str:
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


def _on_interrupt(cancel: threading.Event) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)

"""scalebot: drain nodes and scale node pools to zero and back, now or on a schedule, with approvals.

Exit codes, as kubectl's: 0 done; 1 the run failed or the cluster refused it (a timeout, refused
pods, a forbidden call, an unreachable API server); 2 bad input or configuration (nothing was
changed); 130 interrupted. Errors are one line on stderr that names the problem and what to do.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from bot.cli.common import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, LOG_FORMATS
from bot.cli.parser import build_parser, parser_of, wants_json_log
from bot.config import logs
from engine.domain.errors import Category, ScalebotError

EXIT_CODES = {
    Category.USAGE: EXIT_USAGE,
    Category.CONFIGURATION: EXIT_USAGE,
    Category.CLUSTER: EXIT_INCOMPLETE,
    Category.TRANSIENT: EXIT_INCOMPLETE,
}
"""The CLI's one mapping of a failure's category to its exit code, kubectl's: bad input or
configuration 2; the cluster refused or failed the call 1 (its one line names it); an internal
error is not caught, so its traceback shows (1)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(json_errors=wants_json_log(sys.argv[1:] if argv is None else argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the usage of the command given, not the top level's (argparse's default)
        parser_of(args, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.log_format not in LOG_FORMATS:  # argparse checks choices on the command line only
        parser.error(f"SCALEBOT_LOG_FORMAT: '{args.log_format}' is not one of {', '.join(LOG_FORMATS)}")
    # Progress already goes to stdout; the log is for -v (the operation log with node=/pod= fields).
    logs.configure(
        logging.INFO if args.verbose else logging.ERROR,
        json_format=args.log_format == "json",
        audit_heads=getattr(args, "audit_heads", False),
    )
    # A library's warning (urllib3's InsecureRequestWarning for a kubeconfig that skips TLS
    # verification) is a log line too: shown with -v, as JSON under --log-format json.
    logging.captureWarnings(True)
    try:
        code = args.handler(args)  # imports what the command needs (bot.cli.parser.command)
        return EXIT_OK if code is None else int(code)
    except BrokenPipeError:  # `scalebot ops list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_OK
    except ScalebotError as exc:
        code = EXIT_CODES.get(exc.category)
        if code is None:
            raise  # an internal error: its traceback is the report
        _error(args, f"error: {_failure_line(exc)}")
        return code


def _failure_line(exc: ScalebotError) -> str:
    """What a failed command prints after "error: ": the cause in the words Slack gives it too
    (`bot.text.messages.failure_cause`) when it is fixed outside scalebot, else the error itself."""
    from bot.text import messages  # only on a failure: the usual run never renders messages

    line = messages.failure_cause(exc) or str(exc)
    notes = getattr(exc, "__notes__", ())  # a change that failed part-way says what it had done
    return "; ".join([line, *notes])


def _error(args: argparse.Namespace, message: str) -> None:
    """The one line a failed command prints on stderr (a JSON log line with --log-format json)."""
    logs.announce(message, json_format=args.log_format == "json", stream=sys.stderr, level=logging.ERROR)

"""`scalebot operations list|show|cancel|verify-audit` and `scalebot resume`: the operations already
recorded (list and show read the database only) and the audit log's hash chain."""

from __future__ import annotations

import argparse
import re
import sys

from bot.cli import records as cli_read
from bot.cli.common import EXIT_OK, CliError, Refused, cli_user, live_display

EXIT_AUDIT_BROKEN = 1
"""`operations verify-audit`: the hash chain is broken (a row was edited, inserted or deleted), its
columns, triggers or schema version are not this scalebot's, the key does not fit, or
`--expect-head` is not the head (not in the chain, or rows follow it)."""


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def cmd_resume(args: argparse.Namespace) -> int:
    from bot.cli.operations_from_flags import build_operations, follow

    ops = build_operations(args)
    return follow(ops, None, live=live_display(args))


def cmd_verify_audit(args: argparse.Namespace) -> int:
    """Re-compute the audit log's hash chain, read-only, with the audit key of the environment:
    exit 0 when intact, 1 naming each break or each row appended after `--expect-head`."""
    from engine.store.audit import (
        AUDIT_KEY_ENV,
        AUDIT_KEY_FILE_ENV,
        AuditUnverifiable,
        audit_key_from_environment,
    )
    from engine.store.readonly import verify_audit_file

    expect = args.expect_head.strip().lower() if args.expect_head else None
    if expect is not None and not _SHA256_HEX.fullmatch(expect):
        raise CliError(f"--expect-head {args.expect_head!r} is not a SHA-256 hash (64 hex digits)")
    try:
        check = verify_audit_file(args.db, expect_head=expect, key=audit_key_from_environment())
    except AuditUnverifiable as exc:
        print(f"audit log NOT verified: {exc}", file=sys.stderr)
        return EXIT_AUDIT_BROKEN
    for problem in check.problems:
        print(f"audit row {problem.row_id}: {problem.reason}", file=sys.stderr)
    for alteration in check.altered:
        print(f"audit log NOT verified: {alteration}", file=sys.stderr)
    if check.problems or check.altered:
        breaks = f"{len(check.problems)} break(s) in {check.rows} rows"
        print(f"the audit log of {args.db} was altered: {breaks}", file=sys.stderr)
        return EXIT_AUDIT_BROKEN
    if expect is not None and check.expected_row is None:
        print(
            f"audit log NOT verified: the kept head {expect} is not in the chain of {args.db} "
            f"(head {check.head}, {check.rows} rows): rows up to it were rewritten or removed",
            file=sys.stderr,
        )
        return EXIT_AUDIT_BROKEN
    if check.appended:
        print(
            f"audit log NOT verified: {len(check.appended)} row(s) after the kept head {expect} "
            f"(row {check.expected_row}); if each is expected, keep the newer head {check.head}:",
            file=sys.stderr,
        )
        for entry in check.appended:
            print(f"  row {entry.row_id}  {entry.at}  {entry.actor}  {entry.action}", file=sys.stderr)
        return EXIT_AUDIT_BROKEN
    print(f"audit log intact: {check.rows} rows, hash chain verified, head {check.head}")
    if check.keyed_from is not None:
        print(f"keyed: rows from {check.keyed_from} on are HMAC-SHA256 with the audit key")
    else:
        print(
            "UNKEYED: anyone with write access to the file could have rewritten the chain consistently; "
            f"set {AUDIT_KEY_FILE_ENV} (or {AUDIT_KEY_ENV}) for scalebot, and compare the head with an "
            "`audit head` line kept outside the file"
        )
    if check.expected_row is not None:
        print(f"kept head {expect} is row {check.expected_row}, the head")
    return EXIT_OK


def cmd_operations(args: argparse.Namespace) -> int:
    if args.action == "verify-audit":
        return cmd_verify_audit(args)
    if args.action in ("list", "show"):  # the database only, read-only: no kubeconfig needed
        return (cli_read.list_operations if args.action == "list" else cli_read.show_operation)(args)
    from bot.cli.operations_from_flags import build_operations  # the cluster client: only to cancel
    from bot.text import messages

    ops = build_operations(args)
    outcome = ops.cancel(args.operation_id, by=cli_user())
    if not outcome.ok:
        raise Refused(outcome)
    print(messages.outcome_text(outcome, slack=False))
    return EXIT_OK

"""Log set-up: one line per significant step, with `node=`, `pod=`, `operation=` and `cluster=` fields.

Engine modules log Cluster API's phrases ("Cordoning Node", "Drain completed") and pass the
objects as `extra={"node": …, "pod": …}`; the runner binds `operation` and `cluster` for the
thread that works on an operation (engine.operations.log_context). This formatter appends them as key=value
(text) or as JSON keys (`--log-format json`: one JSON object per line, snake_case keys, `time` in
RFC 3339 UTC with milliseconds, the shape log pipelines parse without a custom pattern). Secrets
never reach a log line: tokens are not passed as extras, and `redact()` masks anything shaped
like a Slack token.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import TextIO

from engine.operations import log_context

FIELDS = ("operation", "cluster", "node", "pod", "step", "audit_row", "audit_head")
_TOKEN = re.compile(r"\b(xox[abpr]|xapp)-[A-Za-z0-9-]+")


def redact(text: str) -> str:
    return _TOKEN.sub(lambda m: f"{m.group(1)}-***", text)


def rfc3339(created: float) -> str:
    """`2026-11-27T05:23:28.910Z`: UTC, milliseconds, whatever the host's time zone."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> dict[str, str]:
    bound = log_context.current()
    found: dict[str, str] = {}
    for key in FIELDS:
        if hasattr(record, key):
            found[key] = str(getattr(record, key))
        elif key in bound:
            found[key] = bound[key]
    return found


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        line = f"{rfc3339(record.created)} {record.levelname} {record.getMessage()}"
        if fields:
            line += f" {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(data))


AUDIT_HEADS = "engine.store.database.audit"
"""The logger of the `audit head` lines (engine.store.base.audit_log), which an operator keeps
outside the database to check it against (`verify-audit --expect-head`)."""


class _LevelOrAuditHead(logging.Filter):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or record.name == AUDIT_HEADS


class _NoRetryChatter(logging.Filter):
    """urllib3's `Retrying (Retry(total=1, …)) after connection broken by …` warnings, one per
    attempt and per request, say again what the request's own error says once it has given up
    (naming the URL: engine.kube.transport.transport_line); a retry that succeeded is no news.
    They are shown at DEBUG only."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("urllib3.") and str(record.msg).startswith("Retrying ("):
            return self.level <= logging.DEBUG
        return True


def configure(level: int, *, json_format: bool = False, audit_heads: bool = False) -> None:
    """`audit_heads`: print the `audit head` lines whatever `level` (`scalebot run`, whose default
    level would hide them: a head kept outside the file is what reveals a rewritten chain)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else TextFormatter())
    # On the handler too: the kubernetes client sets urllib3's logger to WARNING itself, whose
    # connection retries would otherwise print without -v.
    if audit_heads:
        handler.setLevel(min(level, logging.INFO))
        handler.addFilter(_LevelOrAuditHead(level))
    else:
        handler.setLevel(level)
    handler.addFilter(_NoRetryChatter(level))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def announce(message: str, *, json_format: bool, stream: TextIO, level: int = logging.INFO) -> None:
    """A line the command always prints (the start-up line, a one-line error), whatever the log
    level: as plain text, or in JSON mode as a log line of its own, so that every line is JSON."""
    if not json_format:
        print(message, file=stream, flush=True)
        return
    record = logging.LogRecord("scalebot", level, __file__, 0, message, None, None)
    print(JsonFormatter().format(record), file=stream, flush=True)

"""Log set-up: one line per significant step, with `Node=`, `Pod=` and `operation=` fields.

Engine modules log Cluster API's phrases ("Cordoning Node", "Drain completed") and pass the
objects as `extra={"Node": …, "Pod": …, "operation": …}`; this formatter appends them as
key=value (text) or as JSON keys (`--log-format json`). Secrets never reach a log line: tokens
are not passed as extras, and `redact()` masks anything shaped like a Slack token.
"""

from __future__ import annotations

import json
import logging
import re
import sys

FIELDS = ("operation", "Node", "Pod", "cluster", "step", "audit_row", "audit_head")
_TOKEN = re.compile(r"\b(xox[abpr]|xapp)-[A-Za-z0-9-]+")


def redact(text: str) -> str:
    return _TOKEN.sub(lambda m: f"{m.group(1)}-***", text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={getattr(record, k)}" for k in FIELDS if hasattr(record, k))
        line = f"{self.formatTime(record)} {record.levelname} {record.getMessage()}"
        if fields:
            line += f" {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update({k: str(getattr(record, k)) for k in FIELDS if hasattr(record, k)})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(data))


def configure(level: int, *, json_format: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else TextFormatter())
    # On the handler too: the kubernetes client sets urllib3's logger to WARNING itself, whose
    # connection retries would otherwise print without -v.
    handler.setLevel(level)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)

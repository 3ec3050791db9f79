"""bot.config.logs: the line formats a log pipeline reads.

Covers: JSON mode writes one JSON object per line with `time` in RFC 3339 UTC (milliseconds, `Z`)
whatever the host's time zone, snake_case keys for the objects (`node`, `pod`) and for what the
runner binds to its thread (`operation`, `cluster`), an `extra=` field winning over a bound one;
text mode uses the same time and keys; the start-up and error lines are JSON in JSON mode; tokens
never reach a line.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import time
from collections.abc import Iterator

import pytest

from bot.config import logs
from engine.operations import log_context

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """A host clock in UTC-10, where a local-time formatter shows a different hour than UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Honolulu"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("engine.drain.passes", logging.INFO, __file__, 1, msg, None, None)
    rec.created = 1795757008.91  # 2026-11-27T05:23:28.910Z
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_lines_carry_rfc3339_utc_time_and_snake_case_keys(far_from_utc: None) -> None:
    with log_context.bind(operation="op-7"):
        log_context.add(cluster="prod-eu")
        line = logs.JsonFormatter().format(record("Evicting Pod", pod="web/api-1", node="n1"))
    data = json.loads(line)
    assert data["time"] == "2026-11-27T05:23:28.910Z"
    assert (data["operation"], data["cluster"], data["node"], data["pod"]) == (
        "op-7",
        "prod-eu",
        "n1",
        "web/api-1",
    )
    assert data["msg"] == "Evicting Pod" and data["level"] == "INFO"
    assert all(key == key.lower() for key in data), data


def test_bound_fields_end_with_their_block_and_an_extra_wins() -> None:
    with log_context.bind(operation="op-7", cluster="prod-eu"):
        inside = json.loads(logs.JsonFormatter().format(record("x", cluster="other")))
    after = json.loads(logs.JsonFormatter().format(record("y")))
    assert (inside["operation"], inside["cluster"]) == ("op-7", "other")
    assert "operation" not in after and "cluster" not in after


def test_text_lines_use_the_same_time_and_keys(far_from_utc: None) -> None:
    line = logs.TextFormatter().format(record("Cordoning Node", node="n1"))
    assert line == "2026-11-27T05:23:28.910Z INFO Cordoning Node node=n1"


def test_announced_lines_are_json_in_json_mode_and_never_show_a_token() -> None:
    out = io.StringIO()
    logs.announce("scalebot running: prod", json_format=True, stream=out)
    logs.announce("error: bad token xoxb-123-abc", json_format=True, stream=out, level=logging.ERROR)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["msg"] == "scalebot running: prod" and RFC3339_UTC.fullmatch(first["time"])
    assert second["level"] == "ERROR" and "xoxb-123" not in out.getvalue()
    text = io.StringIO()
    logs.announce("scalebot running: prod", json_format=False, stream=text)
    assert text.getvalue() == "scalebot running: prod\n"

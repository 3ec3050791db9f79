"""The one root of scalebot's exceptions, and the category each failure belongs to.

Every exception scalebot defines derives from `ScalebotError` (a unit test walks `engine/` and
`bot/` to keep it so) and names its `Category`, as cluster-autoscaler's `AutoscalerError` names
its type. The front doors decide from the category alone, each in one place: the CLI's exit code
(`bot.cli.main.EXIT_CODES`), the Slack reply (`bot.slack.dispatch.error_reply`) and the runner's
retry of a step (`engine.operations.runner.RETRIED`). A subclass keeps the built-in base its
callers catch (`ValueError`, `LookupError`, `RuntimeError`), so the root adds a category and
changes no `except` clause.

Pure: no imports beyond the standard library.
"""

from __future__ import annotations

from enum import Enum
from typing import ClassVar


class Category(Enum):
    """What kind of failure it is, which is what decides who can fix it and whether to try again."""

    USAGE = "usage"
    """A person asked for something wrong or not allowed: asking differently fixes it."""
    CONFIGURATION = "configuration"
    """The deployment is wrong (settings, credentials, the provider against this cluster, the
    database file): an operator fixes it, and trying again changes nothing."""
    CLUSTER = "cluster"
    """The Kubernetes API server answered a call with a refusal (not found, forbidden, conflict,
    invalid): the cluster may change, so the runner tries an idempotent step again."""
    TRANSIENT = "transient"
    """Likely to pass if tried again: no answer, throttled, a 5xx, another runner or operation
    holding what is needed."""
    INTERNAL = "internal"
    """scalebot's own state is not what it wrote or expects: a bug or tampering, for the log."""


class OutsideFault(Enum):
    """A failure whose fix lies outside scalebot, named so every front door gives the same cause
    (the CLI's error line, the Slack reply) instead of an incident ID that only the log explains."""

    API_UNREACHABLE = "api-unreachable"
    """The Kubernetes API server gave no HTTP answer (down, wrong address, network, TLS)."""
    FORBIDDEN = "forbidden"
    """The API server refused scalebot's ServiceAccount (RBAC)."""


class ScalebotError(Exception):
    """The root of every scalebot exception; `category` says what kind of failure it is."""

    category: ClassVar[Category] = Category.INTERNAL
    outside_fault: ClassVar[OutsideFault | None] = None
    """Set where the cause is fixed outside scalebot (see `OutsideFault`); None otherwise."""
    hint: str = ""
    """The right form of what was asked, when the error knows it (a usage line); "" otherwise."""

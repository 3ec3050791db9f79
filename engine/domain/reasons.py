"""Why a request or a click was answered as it was, as data: the people, channels and operations a
sentence would name. The bot renders them for Slack (mentions, channel links, `/scale …`), the CLI
as plain text (`scalebot …`), both in bot/text/messages.py; the engine keeps a plain sentence beside
each for its audit rows and logs.

Pure: dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ChannelNotAllowed:
    """The cluster is operated only from some channels (`clusters.<name>.allowed_channels`)."""

    cluster: str
    channels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AlreadyDecided:
    """A click on a request that was decided (or expired) before it."""

    op_id: str
    state: str
    """The operation's state now ("approved" while running, "rejected", "cancelled", …)."""
    by: str = ""
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Busy:
    """A pool or node is held by another operation."""

    what: str
    """The pool or node, "web" or "dev-eu/web-1"."""
    op_id: str
    kind: str = ""
    requested_by: str = ""
    state: str = ""
    """Empty when the holding operation is not in this database (another instance's)."""


@dataclass(frozen=True, slots=True)
class UnknownOperation:
    op_id: str


@dataclass(frozen=True, slots=True)
class NeedsApprovalInstead:
    """Cordon / uncordon refused where changes need approval: a drain is the way to ask."""

    verb: str
    cluster: str
    why: str


@dataclass(frozen=True, slots=True)
class NoScheduleToResleep:
    """A temporary wake needs a schedule on the cluster to say when it sleeps again."""

    cluster: str


Reason = (
    ChannelNotAllowed | AlreadyDecided | Busy | UnknownOperation | NeedsApprovalInstead | NoScheduleToResleep
)

"""Slack's `<…>` tokens in recorded messages, and the ones scalebot did not build.

Slack turns `<@U…>` into a mention that notifies, `<!subteam^S…>` and `<!here>`/`<!channel>` into
group pings, `<!date^TS^FORMAT^URL|x>` and `<URL|x>` into links. The only tokens scalebot may send
are mentions of users and groups it knows (its policy's IDs), its channels, dates without a link
in one of its own formats, and permalinks to its own threads. Anything else found in a message's
blocks or fallback text is markup that came from outside.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tests.slack.harness import Call, texts_of

TOKEN = re.compile(r"<([^<>]*)>")
_DATE = re.compile(
    r"!date\^\d+\^(?:\{(?:date_num|date|date_short|date_long|date_pretty|date_short_pretty|date_long_pretty"
    r"|time|time_secs|ago)\}|[ ,:.\-])+\|[^|^]*"
)
_PERMALINK = re.compile(r"https://scalebot-test\.slack\.com/archives/C[A-Z0-9]+/p[0-9.]+\|thread")


def texts(call: Call) -> list[str]:
    """Every text Slack formats in a recorded call: the fallback `text` and each block text."""
    return [text for text in texts_of(call) if text]


def foreign_tokens(
    calls: Iterable[Call], *, users: Iterable[str], channels: Iterable[str], groups: Iterable[str] = ()
) -> list[str]:
    """The tokens in these calls that scalebot did not build (empty when every token is its own)."""
    allowed = {f"@{u}" for u in users} | {f"#{c}" for c in channels} | {f"!subteam^{g}" for g in groups}
    foreign = []
    for call in calls:
        for text in texts(call):
            for token in TOKEN.findall(text):
                if token in allowed or _DATE.fullmatch(token) or _PERMALINK.fullmatch(token):
                    continue
                foreign.append(f"{call.method}: <{token}>")
    return foreign

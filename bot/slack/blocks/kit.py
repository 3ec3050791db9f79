"""Block Kit within Slack's limits: the `Message` value, mrkdwn escaping and a budgeted builder.

Pure: `slack_sdk.models.blocks` objects only, no I/O. `Builder` counts text as it adds blocks, so
a rendering can never exceed 3,000 characters per section, 50 blocks, or the cumulative budget
kept well under Slack's undocumented ~12k `msg_blocks_too_long` limit; what does not fit ends in
"... (N more)". `build()` gives every block an ID hashed from the content: a new revision gets
new IDs (Slack wants that), an unchanged rendering is byte-identical (the sender skips it).
The renderers that use it live in `bot.slack.blocks.operations`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    ImageBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.text import messages
from bot.text.mrkdwn import Mrkdwn, escape

SECTION_CHARS = 3_000
HEADER_CHARS = 150
MAX_BLOCKS = 50
MESSAGE_BUDGET = 11_000
"""Cumulative text per message; Slack refuses somewhere around 12-13k (bolt-js#2509)."""
FALLBACK_CHARS = 3_000
_FOOTER_BLOCKS = 5
"""Blocks kept free after a long list: status, error, context and buttons still fit."""


@dataclass(frozen=True, slots=True)
class Message:
    """What one Slack message shows: blocks plus the plain notification fallback."""

    text: str
    blocks: tuple[Block, ...]

    def block_dicts(self) -> list[dict[str, Any]]:
        """Validated JSON blocks; raises SlackObjectFormationError on a broken limit."""
        return [block.to_dict() for block in self.blocks]


# -- text helpers --------------------------------------------------------------------------------


esc = escape
"""Text from a cluster, a user or a config, made safe for mrkdwn (`bot.text.mrkdwn.escape`): a sentence
marked `Mrkdwn` (scalebot's own, with escaped data and tokens it built) is kept as it is."""


def _code(text: str) -> str:
    # A pod name cannot hold backticks, but a server message could; keep our code block closed.
    return text.replace("```", "'''")


def text_length(blocks: Iterable[Mapping[str, Any] | Block]) -> int:
    """The cumulative text of rendered blocks, as Slack's ~12k limit counts it."""

    def walk(value: Any) -> int:
        if isinstance(value, Mapping):
            total = 0
            for key, item in value.items():
                total += len(item) if key == "text" and isinstance(item, str) else walk(item)
            return total
        if isinstance(value, list):
            return sum(walk(item) for item in value)
        return 0

    return sum(walk(b.to_dict() if isinstance(b, Block) else b) for b in blocks)


def cut_list_line(line: str, limit: int) -> str:
    """Shorten a line; a comma-separated list keeps whole items and ends in "... (N more)"."""
    if len(line) <= limit:
        return line
    head = line[: max(0, limit - 24)]
    cut = head.rfind(", ")
    if cut > 0:
        rest = line[cut + 2 :]
        return f"{head[:cut]}, {messages.more(rest.count(', ') + 1)}"
    return head + "…"


def join_limited(items: Sequence[str], limit: int) -> str:
    text = ", ".join(items)
    return cut_list_line(text, limit)


# -- building with a budget ----------------------------------------------------------------------


class Builder:
    """Collects blocks while counting text against the message budget and the 50-block cap."""

    def __init__(self, *, budget: int = MESSAGE_BUDGET, max_blocks: int = MAX_BLOCKS) -> None:
        self.blocks: list[Block] = []
        self.remaining = budget
        self.max_blocks = max_blocks

    @property
    def full(self) -> bool:
        return len(self.blocks) >= self.max_blocks or self.remaining <= 0

    def _add(self, block: Block, chars: int) -> None:
        self.blocks.append(block)
        self.remaining -= chars

    def header(self, text: str) -> None:
        text = text if len(text) <= HEADER_CHARS else text[: HEADER_CHARS - 1] + "…"
        self._add(HeaderBlock(text=PlainTextObject(text=text, emoji=True)), len(text))

    def section(self, text: str, *, reserve: int = 0) -> None:
        if self.full:
            return
        limit = min(SECTION_CHARS, self.remaining - reserve)
        if limit < 40:
            return
        text = cut_list_line(text, limit)
        self._add(SectionBlock(text=MarkdownTextObject(text=text)), len(text))

    def context(self, *texts: str, reserve: int = 0) -> None:
        parts = [t for t in texts if t][:10]
        allowance = self.remaining - reserve
        if not parts or self.full or allowance < 40:
            return
        each = min(2_000, allowance // len(parts))
        elements = [MarkdownTextObject(text=cut_list_line(t, each)) for t in parts]
        self._add(ContextBlock(elements=elements), sum(len(e.text) for e in elements))

    def image(self, file_id: str, *, title: str, alt_text: str) -> None:
        """An uploaded image, referenced by its Slack file ID (never by a public URL)."""
        if self.full:
            return
        title = title if len(title) <= HEADER_CHARS else title[: HEADER_CHARS - 1] + "…"
        block = ImageBlock(
            slack_file={"id": file_id}, alt_text=alt_text[:2_000], title=PlainTextObject(text=title)
        )
        self._add(block, len(title) + len(alt_text[:2_000]))

    def divider(self) -> None:
        if not self.full:
            self._add(DividerBlock(), 0)

    def preformatted(
        self, lines: Sequence[str], *, max_chars: int, reserve: int = 0, spread: int = 1
    ) -> None:
        """Lines in ``` blocks, split at 3,000 characters, cut at the budget with "... (N more lines)".
        `spread`: give at least this many lines room, so one huge line cannot hide the others."""
        allowance = min(max_chars, self.remaining - reserve)
        line_limit = max(300, min(SECTION_CHARS - 40, allowance // max(1, min(len(lines), spread))))
        chunks: list[list[str]] = [[]]
        size = used = shown = 0
        for line in lines:
            piece = cut_list_line(esc(_code(line)), line_limit)
            if used + len(piece) + 1 > allowance - 40:
                break
            if size + len(piece) + 1 > SECTION_CHARS - 40:
                if len(self.blocks) + len(chunks) + 1 > self.max_blocks - _FOOTER_BLOCKS:
                    break
                chunks.append([])
                size = 0
            chunks[-1].append(piece)
            size += len(piece) + 1
            used += len(piece) + 1
            shown += 1
        hidden = len(lines) - shown
        if hidden:
            chunks[-1].append(messages.more_lines(hidden))
        for chunk in chunks:
            if chunk and not len(self.blocks) >= self.max_blocks:
                text = "```\n" + "\n".join(chunk) + "\n```"
                self._add(SectionBlock(text=MarkdownTextObject(text=text)), len(text))

    def actions(self, *buttons: ButtonElement) -> None:
        chars = sum(len(b.text.text) if b.text else 0 for b in buttons)
        self._add(ActionsBlock(elements=list(buttons)), chars)

    def build(self, prefix: str, fallback: str) -> Message:
        # Content-hashed IDs: a new revision gets new IDs, an unchanged one renders identically.
        digest = hashlib.sha1(
            json.dumps([b.to_dict() for b in self.blocks], sort_keys=True).encode(), usedforsecurity=False
        ).hexdigest()[:10]
        safe = re.sub(r"[^A-Za-z0-9_.-]", "-", prefix)[:120]
        for index, block in enumerate(self.blocks):
            block.block_id = f"{safe}-{digest}-{index}"
        return Message(text=_fallback(fallback), blocks=tuple(self.blocks))


def _fallback(text: str) -> Mrkdwn:
    """The notification text: Slack formats it like mrkdwn, so it is escaped like the blocks."""
    if len(text) > FALLBACK_CHARS:
        cut = text[: FALLBACK_CHARS - 1] + "…"
        text = Mrkdwn(cut) if isinstance(text, Mrkdwn) else cut
    return escape(text)

"""The console's screen: Slack's messages as terminal lines (Block Kit and mrkdwn rendered as text),
the `Terminal` every line goes through, and `ConsoleSender`, the stand-in for
`bot.slack.delivery.sender.Sender` that prints a card when it is posted, only the changed lines of an
edit, and thread replies under their message (`bot.cli.console`'s REPL drives it)."""

from __future__ import annotations

import html
import itertools
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from bot.slack.blocks import operations as blocks
from bot.slack.blocks.kit import Message
from bot.slack.delivery.progress import KEY_PREFIX

log = logging.getLogger(__name__)

ONLY_YOU = "(only you) "
"""The mark of what only the person who typed would see (Slack's ephemeral replies)."""
_ERASE_LINE = "\r\x1b[K"
"""Back to column 0 and clear the line (ANSI): only ever written to an interactive terminal."""
BUTTON_WORDS = {
    blocks.ACTION_APPROVE: "approve",
    blocks.ACTION_REJECT: "reject",
    blocks.ACTION_CANCEL: "cancel",
    blocks.ACTION_POSTPONE_1H: "postpone",
    blocks.ACTION_SKIP: "skip",
    blocks.ACTION_RUN_NOW: "run-now",
}
"""A button's action ID -> the console word that clicks it."""


# -- Block Kit as text ----------------------------------------------------------------------------

_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>")
_LABELLED = re.compile(r"<[!#][^<>|]*\|([^<>]*)>")
"""Dates and labelled links: Slack shows the label (for dates, the UTC fallback)."""
_BARE = re.compile(r"<([#!])([^<>|]*)>")
_BOLD = re.compile(r"(?<![\w*])\*([^*\n]+?)\*(?![\w*])")
_ITALIC = re.compile(r"(?<!\w)_([^_\n]+?)_(?!\w)")


def mrkdwn_lines(text: str, names: Mapping[str, str]) -> list[str]:
    """Slack mrkdwn as terminal lines: mentions by console name, dates by their fallback,
    bold/italic markers dropped, ``` blocks indented (their content kept exactly)."""
    lines: list[str] = []
    for index, part in enumerate(text.split("```")):
        if index % 2:  # inside a code fence: only Slack's own escaping is undone
            lines.extend("    " + html.unescape(line) for line in part.strip("\n").splitlines())
            continue
        lines.extend(html.unescape(line) for line in _inline(part, names).strip("\n").splitlines())
    return lines


def _inline(text: str, names: Mapping[str, str]) -> str:
    text = _USER_MENTION.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), text)
    text = _LABELLED.sub(lambda m: m.group(1), text)
    text = _BARE.sub(lambda m: ("#" if m.group(1) == "#" else "@") + m.group(2), text)
    return _ITALIC.sub(r"\1", _BOLD.sub(r"\1", text))


def message_lines(text: str, block_dicts: Sequence[Mapping[str, Any]], names: Mapping[str, str]) -> list[str]:
    """A Slack message as terminal lines: its blocks when it has any, else its fallback text."""
    if not block_dicts:
        return mrkdwn_lines(text, names)
    return [line for block in block_dicts for line in _block_lines(block, names)]


def _block_lines(block: Mapping[str, Any], names: Mapping[str, str]) -> list[str]:
    kind = block.get("type")
    if kind == "header":
        return [str(block["text"]["text"])]
    if kind == "section":
        lines = mrkdwn_lines(str(block.get("text", {}).get("text", "")), names)
        for field in block.get("fields") or ():
            lines += mrkdwn_lines(str(field.get("text", "")), names)
        return lines
    if kind == "context":
        parts = [" ".join(mrkdwn_lines(str(e.get("text", "")), names)) for e in block.get("elements", ())]
        return [" · ".join(p for p in parts if p)]
    if kind == "actions":
        return [_buttons_line(block.get("elements") or ())]
    if kind == "divider":
        return ["─" * 40]
    return []


def _buttons_line(elements: Sequence[Mapping[str, Any]]) -> str:
    labels = " ".join(f"[{e.get('text', {}).get('text', '?')}]" for e in elements)
    words = [BUTTON_WORDS[e["action_id"]] for e in elements if e.get("action_id") in BUTTON_WORDS]
    return f"{labels}  (type: {' / '.join(words)})" if words else labels


# -- the terminal ---------------------------------------------------------------------------------


class Terminal:
    """All console output, from the REPL and from the progress worker, one line block at a time.

    While an interactive prompt waits for input, asynchronous output replaces the prompt line
    (carriage return, erase line) and the prompt is shown again below it, so progress never
    lands in the middle of what you type.
    """

    def __init__(self, out: TextIO, names: Mapping[str, str]) -> None:
        self.out = out
        self.names = names
        self._lock = threading.Lock()
        self._prompt: str | None = None

    def lines(self, lines: Sequence[str], *, first: str = "", rest: str | None = None) -> None:
        rest = " " * len(first) if rest is None else rest
        text = "".join(f"{first if i == 0 else rest}{line}\n" for i, line in enumerate(lines or [""]))
        with self._lock:
            if self._prompt is not None:
                text = _ERASE_LINE + text + self._prompt
            self.out.write(text)
            self.out.flush()

    def render(self, message: Message) -> list[str]:
        return message_lines(message.text, message.block_dicts(), self.names)

    def show_prompt(self, prompt: str) -> None:
        with self._lock:
            self._prompt = prompt
            self.out.write(prompt)
            self.out.flush()

    def input_taken(self) -> None:
        with self._lock:
            self._prompt = None


class ConsoleSender:
    """What `bot.slack.delivery.sender.Sender` does for `Progress`, printed: the first rendering of
    a message is "posted" (the whole card), later renderings are in-place edits (only the lines that changed),
    replies appear under it. Like the real sender it skips renderings equal to what is shown and
    never lets a late rendering replace a final one (a click's snapshot arriving after "Completed")."""

    def __init__(self, terminal: Terminal) -> None:
        self._terminal = terminal
        self._lock = threading.Lock()
        self._shown: dict[str, list[str]] = {}
        self._final: set[str] = set()
        self._hooks: list[Callable[[str, str, str], None]] = []
        self._ts = itertools.count(1)
        self._buttons: dict[str, dict[str, str]] = {}
        """Message key -> the action IDs of the buttons it shows now, with their values."""

    def clickable(self, action_id: str) -> list[tuple[str, str]]:
        """(message key, button value) of the messages showing this button, oldest first."""
        with self._lock:
            return [(key, values[action_id]) for key, values in self._buttons.items() if action_id in values]

    def add_posted_hook(self, hook: Callable[[str, str, str], None]) -> None:
        self._hooks.append(hook)

    def add_unposted_hook(self, hook: Callable[[str, str, str], None]) -> None:
        """Never called: a terminal shows every message."""

    def adopt(self, key: str, channel: str, ts: str) -> None:
        """Nothing to adopt: a terminal has no earlier messages to edit."""

    def show(
        self,
        key: str,
        message: Message,
        *,
        channel: str,
        thread_ts: str = "",
        final: bool = False,
        broadcast: bool = False,
        share: str = "",
    ) -> None:
        lines = self._terminal.render(message)
        with self._lock:
            before = self._shown.get(key)
            if key in self._final or before == lines:
                return
            self._shown[key] = lines
            if final:
                self._final.add(key)
            self._buttons.pop(key, None)  # re-inserted last: the latest message is the default
            values = _button_values(message.block_dicts())
            if values and not final:
                self._buttons[key] = values
        label = _label(key)
        if before is None:
            self._terminal.lines(["", *lines], first=f"┌─ {label} · posted in #{channel}", rest="│ ")
            self._announce(key, channel)
        else:
            # An edit in place: only what changed, since the card above still shows the rest.
            changed = [line for line in lines if line not in before]
            first = f"↻ {label}{' (final)' if final else ''}: "
            if changed:
                self._terminal.lines(changed, first=first, rest=" " * len(first))

    def reply(self, key: str, message: Message, **_where: object) -> None:
        """A thread reply, printed under its message; where Slack would put it does not matter here."""
        label = _label(key)
        self._terminal.lines(self._terminal.render(message), first=f"  ↳ {label}: ", rest="      ")

    def ephemeral(self, channel: str, user: str, message: Message) -> None:
        self._terminal.lines(self._terminal.render(message), first=ONLY_YOU)

    def tell(self, channel: str, user: str, message: Message) -> None:
        self.ephemeral(channel, user, message)

    def _announce(self, key: str, channel: str) -> None:
        # Progress records where a card lives (ops.set_message); the dispatcher relies on it.
        ts = f"{next(self._ts)}.000000"
        for hook in list(self._hooks):
            try:
                hook(key, channel, ts)
            except Exception:  # like the real sender: a failing hook never stops output
                log.exception("posted hook failed for %s", key)


def _label(key: str) -> str:
    return key.removeprefix(KEY_PREFIX)


def _button_values(block_dicts: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(e["action_id"]): str(e.get("value") or "")
        for b in block_dicts
        if b.get("type") == "actions"
        for e in b.get("elements") or ()
        if e.get("action_id")
    }

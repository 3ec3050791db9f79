"""The README's "The first hour" section as data: its shell blocks, by subsection, to run in tests."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_SECTION = "## The first hour"
_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)


def blocks(part: str) -> list[str]:
    """The ```sh blocks of the subsection whose title starts with `part` ("1.", "2.", "3.")."""
    text = README.read_text()
    section = text.split(_SECTION, 1)[1].split("\n## ", 1)[0]
    for sub in section.split("\n### ")[1:]:
        if sub.startswith(part):
            return _BLOCK.findall(sub)
    raise AssertionError(f"README: no subsection {part} under {_SECTION!r}")


def commands(part: str) -> list[str]:
    """Every `scalebot …` line of a subsection's blocks, comments dropped (a heredoc's body is
    not a command and stays in its block)."""
    return [
        line.split("  #", 1)[0].strip()
        for block in blocks(part)
        for line in block.splitlines()
        if line.startswith("scalebot ")
    ]

"""Read the rehearsal-memory note (docs/formats.md) that a gateway appends to an acting request.

The twin's policy uses the note the way EnvACE is meant to: actions the note marks as vetoed,
failed or low-scoring are avoided (an unparsed one proved nothing); the note itself is not part
of the conversation the policy reasons about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .prompt import message_text
from .schema import JsonObject

_OPEN = "<rehearsal_memory>"
_ENTRY = re.compile(r"^\[(\d+)\]\s+outcome=(\S+)\s+score=([0-9.]+)\s*$")


@dataclass(frozen=True)
class MemoryNote:
    """Signatures the note says to avoid and those it says were rehearsed fine."""

    avoid: frozenset[str]
    prefer: frozenset[str]


def _avoided(outcome: str, score: float) -> bool:
    return outcome.startswith("veto") or outcome == "error" or score < 0.5


def parse_note(text: str) -> MemoryNote:
    """Parse a note's entries; lines that do not fit the layout are skipped, never fatal."""
    avoid: set[str] = set()
    prefer: set[str] = set()
    outcome, score = "", 1.0
    for line in text.splitlines():
        line = line.strip()
        entry = _ENTRY.match(line)
        if entry:
            outcome = entry.group(2)
            try:
                score = float(entry.group(3))
            except ValueError:
                score = 0.0
        elif line.startswith("action:") and outcome:
            signature = " ".join(line.removeprefix("action:").strip().split(" ", 1))
            (avoid if _avoided(outcome, score) else prefer).add(signature)
    return MemoryNote(frozenset(avoid), frozenset(prefer - avoid))


def split_note(messages: list[JsonObject]) -> tuple[list[JsonObject], MemoryNote | None]:
    """The conversation without a trailing memory note, and the parsed note if there was one."""
    if messages and messages[-1].get("role") == "user":
        text = message_text(messages[-1]).strip()
        if text.startswith(_OPEN):
            return messages[:-1], parse_note(text)
    return messages, None

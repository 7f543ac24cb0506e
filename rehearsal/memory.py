"""The rehearsal memory: trajectories condensed into short entries and rendered as one note.

Each trajectory becomes a deterministic ``MemoryEntry`` — its outcome, score, the first turn's
actions and the first imagined observation in canonical JSON. The entries are rendered as the
``<rehearsal_memory>`` note of docs/formats.md, byte for byte, and the note is sent as the
**last** message of the conversation (role ``user``), never spliced into the system prompt: the
conversation's prefix stays identical to the acting call's, so the engine's prefix cache serves it.

The note must fit a token budget. Tokens are estimated as one per four characters, rounded up
(``estimate_tokens``): crude but deterministic, and close enough for Qwen-family tokenizers on
JSON-heavy English. When the note would be too long, the ``imagined:`` texts are cut first (each
to an equal share of what is left, ending in ``…``); when even the fixed lines do not fit, the
trailing entries are dropped (the first entry always stays).

Entries are also what the session memory stores (``to_dict`` / ``from_dict``). Only *real*
outcomes are stored there (``source`` ``real``, written when a client sends a tool result back):
an imagined veto is a hint for the turn it was imagined in and is never carried into later ones,
so a wrong imagination cannot steer a whole session. A real entry is rendered with a
``seen: real tool result`` line, so the model can tell facts from predictions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .messages import Message, canonical_json
from .trace import Trajectory

HEADER = (
    "<rehearsal_memory>\n"
    "Imagined outcomes of candidate actions, rehearsed privately before acting. "
    "They are predictions, not real tool results."
)
FOOTER = (
    "Commit one action now. Prefer actions rehearsed as ok; "
    "do not repeat actions marked veto or error; unparsed means nothing was learned.\n"
    "</rehearsal_memory>"
)
ELLIPSIS = "…"
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One trajectory, condensed: what was tried, what was imagined, how it went."""

    outcome: str
    score: float
    actions: tuple[str, ...]
    imagined: str | None = None
    source: str = "imagined"  # imagined | real

    @property
    def real(self) -> bool:
        """Whether this entry records what a real tool returned (a fact, not a prediction)."""
        return self.source == "real"

    @property
    def avoided(self) -> bool:
        """The twin's (and our commit's) reading: veto, error or a low score; never unparsed."""
        kind = self.outcome.split(":", 1)[0]
        return kind in ("veto", "error") or self.score < 0.5

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "score": self.score,
            "actions": list(self.actions),
            "imagined": self.imagined,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, raw: object) -> MemoryEntry | None:
        """Read a stored entry; ``None`` for anything malformed (never raises)."""
        if not isinstance(raw, Mapping):
            return None
        outcome, score, actions = raw.get("outcome"), raw.get("score"), raw.get("actions")
        imagined = raw.get("imagined")
        if not isinstance(outcome, str) or not isinstance(actions, list) or not actions:
            return None
        if isinstance(score, bool) or not isinstance(score, int | float):
            return None
        if not all(isinstance(a, str) for a in actions):
            return None
        if imagined is not None and not isinstance(imagined, str):
            return None
        source = "real" if raw.get("source") == "real" else "imagined"
        return cls(outcome, min(max(float(score), 0.0), 1.0), tuple(actions), imagined, source)


def entry_for(trajectory: Trajectory) -> MemoryEntry:
    """The memory entry of one trajectory (first action, first imagined observation)."""
    first = trajectory.steps[0]
    observed = [o for o in first.observations if o.verdict != "unparsed"]
    imagined = canonical_json(observed[0].result) if observed else None
    return MemoryEntry(trajectory.outcome, round(trajectory.score, 4), first.turn.actions, imagined)


def _entry_lines(number: int, entry: MemoryEntry, imagined: str) -> str:
    lines = [f"[{number}] outcome={entry.outcome} score={entry.score:.2f}"]
    if entry.real:
        lines.append("seen: real tool result")
    lines += [f"action: {action}" for action in entry.actions]
    lines.append(f"imagined: {imagined}")
    return "\n".join(lines)


def _render(entries: Sequence[MemoryEntry], imagined: Sequence[str]) -> str:
    pairs = enumerate(zip(entries, imagined, strict=True), start=1)
    body = [_entry_lines(number, entry, text) for number, (entry, text) in pairs]
    return "\n".join([HEADER, *body, FOOTER])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def render_note(entries: Sequence[MemoryEntry], max_tokens: int) -> str:
    """The ``<rehearsal_memory>`` note for ``entries``, cut to about ``max_tokens`` tokens."""
    budget = max_tokens * CHARS_PER_TOKEN
    kept = list(entries)

    def skeleton(items: Sequence[MemoryEntry]) -> str:
        # Each imagined text shown at its smallest: one character ("-" or the ellipsis).
        return _render(items, ["-" if e.imagined is None else ELLIPSIS for e in items])

    while len(kept) > 1 and len(skeleton(kept)) > budget:
        kept.pop()
    cut = [e for e in kept if e.imagined is not None]
    share = 1 + max(budget - len(skeleton(kept)), 0) // max(len(cut), 1)
    shown = ["-" if e.imagined is None else _cut(e.imagined, share) for e in kept]
    return _render(kept, shown)


def note_message(note: str) -> Message:
    """The note as the conversation's last message (never the system prompt)."""
    return {"role": "user", "content": note}

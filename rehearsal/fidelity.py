"""Fidelity: how close an imagined tool result was to the real one, as a number in [0, 1].

The gateway computes it when a client sends back the real result of a call it committed. The
measure is structural and deterministic, so it can be read, tested and compared across runs:

- objects: the mean, over the union of their keys, of the values' similarity (a key present on
  one side only scores 0) — missing or invented fields cost as much as wrong values;
- arrays: position by position over the longer length (extra or missing items score 0);
- numbers: 1 when equal, else ``1 - |a - b| / max(|a|, |b|)`` floored at 0 (close is better);
- strings: 1 when equal, else the Jaccard overlap of their lower-cased word sets;
- booleans and null: 1 when equal, else 0; values of different JSON types score 0.

Two empty objects (or arrays) are identical and score 1. The real result is often sent back as a
string; ``parse_observation`` turns JSON text into a value and keeps any other text as a string.
"""

from __future__ import annotations

import json
import re
from typing import Any

_WORD = re.compile(r"\w+")


def parse_observation(text: str) -> Any:
    """A tool message's content as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def fidelity(imagined: Any, real: Any) -> float:
    """Similarity in [0, 1] between an imagined and a real tool result."""
    return round(_similarity(imagined, real), 4)


def _similarity(a: Any, b: Any) -> float:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return 1.0 if a is b or (type(a) is type(b) and a == b) else 0.0
    if isinstance(a, int | float) and isinstance(b, int | float):
        return _number_similarity(float(a), float(b))
    if isinstance(a, str) and isinstance(b, str):
        return _string_similarity(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        if not keys:
            return 1.0
        return sum(_similarity(a[k], b[k]) if k in a and k in b else 0.0 for k in keys) / len(keys)
    if isinstance(a, list) and isinstance(b, list):
        longest = max(len(a), len(b))
        if longest == 0:
            return 1.0
        return sum(_similarity(x, y) for x, y in zip(a, b, strict=False)) / longest
    return 0.0


def _number_similarity(a: float, b: float) -> float:
    if a == b:
        return 1.0
    return max(0.0, 1.0 - abs(a - b) / max(abs(a), abs(b)))


def _string_similarity(a: str, b: str) -> float:
    if a == b:
        return 1.0
    words_a, words_b = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    union = words_a | words_b
    if not union:
        return 0.0
    return len(words_a & words_b) / len(union)

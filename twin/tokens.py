"""The twin's deterministic token counter.

Real tokenizers are not available here, so the twin counts tokens with one fixed rule: a run of up
to six letters, up to three digits, one whitespace run or one other character is a token (English
text lands near four characters per token, as with Qwen3's BPE). Qwen3's added tokens — the chat
markers and the ``<think>``/``<tool_call>`` tags — are one token each, as in its vocabulary, so a
cut never leaves half a tag. The same rule feeds usage,
prefix-cache blocks and the latency model, so the three always agree.
"""

from __future__ import annotations

import re

_SPECIAL = (r"<\|im_start\|>", r"<\|im_end\|>", "</?think>", "</?tool_call>", "</?tool_response>")
_TOKEN = re.compile("|".join((*_SPECIAL, r"[^\W\d_]{1,6}|\d{1,3}|\s+|[^\w\s]|_")))


def tokenize(text: str) -> list[str]:
    """Split ``text`` into the twin's tokens; joining them gives back ``text``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """Number of the twin's tokens in ``text``."""
    return sum(1 for _ in _TOKEN.finditer(text))


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text`` that holds at most ``limit`` tokens."""
    if limit <= 0:
        return ""
    end = 0
    for i, match in enumerate(_TOKEN.finditer(text)):
        if i >= limit:
            break
        end = match.end()
    return text[:end]


def tokens_through(text: str, end: int) -> int:
    """How many tokens must be generated for ``text[:end]`` to be out (a token may overrun)."""
    return sum(1 for match in _TOKEN.finditer(text) if match.start() < end)


def split_pieces(text: str, tokens_per_piece: int) -> list[str]:
    """Cut ``text`` into consecutive pieces of ``tokens_per_piece`` tokens (stream deltas)."""
    pieces: list[str] = []
    current: list[str] = []
    for token in tokenize(text):
        current.append(token)
        if len(current) >= tokens_per_piece:
            pieces.append("".join(current))
            current = []
    if current:
        pieces.append("".join(current))
    return pieces

"""Token log-probabilities, as vLLM returns them for ``logprobs: true`` (``top_logprobs: N``).

vLLM 0.32 gives one entry per generated token, the end-of-turn token included (checked against
a real vLLM CPU by tests/contract/test_logprobs.py): ``{"token", "logprob", "bytes",
"top_logprobs"}``, where ``bytes`` is the token's UTF-8 and ``top_logprobs`` holds ``N``
``{"token", "logprob", "bytes"}`` alternatives, the sampled token first, then the most likely
others (``[]`` when ``N`` is 0 or absent). A streamed answer carries, on each chunk, the entries
of the tokens that chunk stands for.

No model runs here, so the numbers are invented, deterministically: they depend only on the
choice's generated text and the token's position (the same answer always scores the same, as a
seeded vLLM does), the sampled token is the most likely one (a fine-tuned model acting near its
mode), and the alternatives' probabilities sum with the sampled one's to at most 1.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

from .schema import JsonObject

END_OF_TURN = "<|im_end|>"  # Qwen3's end-of-turn token, generated last by a turn that ends
MAX_LOGPROBS = 20  # vLLM's --max-logprobs default
VOCAB_SIZE = 151936  # Qwen3-8B's vocabulary; ``top_logprobs: -1`` asks for all of it
# Stand-ins for the runners-up a model weighs at each step (never the sampled token itself).
_ALTERNATIVES = (
    " the", ",", ".", "\n", " a", " to", " and", " of", '"', ":", " is", "{", "}", " I",
    " that", " in", "The", " it", " for", " you", " with", "_", " be",
)  # fmt: skip


def _entry(token: str, logprob: float) -> JsonObject:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def entries(tokens: Sequence[str], top: int, *, key: str, start: int = 0) -> list[JsonObject]:
    """The logprob entries of ``tokens`` (positions ``start``… of the choice keyed ``key``)."""
    out: list[JsonObject] = []
    for position, token in enumerate(tokens, start):
        seed = hashlib.sha256(f"{key}\x00{position}".encode()).digest()
        rng = random.Random(seed)
        sampled = min(0.0, -rng.expovariate(3.0))  # mostly confident: mean -1/3
        entry = _entry(token, sampled)
        alternatives: list[JsonObject] = []
        if top > 0:
            alternatives.append(_entry(token, sampled))
            mass = max(1e-9, 1.0 - math.exp(sampled))  # what the sampled token leaves
            others = [t for t in _ALTERNATIVES if t != token]
            rng.shuffle(others)
            for other in others[: top - 1]:
                mass *= rng.uniform(0.3, 0.7)
                alternatives.append(_entry(other, min(sampled, math.log(mass))))
        entry["top_logprobs"] = alternatives
        out.append(entry)
    return out

"""A model of vLLM's automatic prefix caching: chained block hashes in an LRU.

The rendered prompt is cut into 16-token blocks; each block's key hashes its tokens together with
the previous block's key, so a block hits only when the whole prefix before it matches. As in vLLM,
at least one prompt token is always computed, so a full hit still prefills the last block.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

BLOCK_TOKENS = 16


class PrefixCache:
    """LRU of block keys; ``admit`` reports how many prompt tokens were already cached."""

    def __init__(self, capacity_blocks: int = 16384, block_tokens: int = BLOCK_TOKENS) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def _keys(self, tokens: list[str]) -> list[bytes]:
        keys: list[bytes] = []
        previous = b""
        for start in range(0, len(tokens) - self.block_tokens + 1, self.block_tokens):
            block = "\x00".join(tokens[start : start + self.block_tokens]).encode()
            previous = hashlib.blake2b(previous + block, digest_size=16).digest()
            keys.append(previous)
        return keys

    def admit(self, tokens: list[str]) -> int:
        """Look the prompt up, insert its full blocks, and return the cached-token count."""
        return self.admit_counting(tokens)[0]

    def admit_counting(self, tokens: list[str]) -> tuple[int, int]:
        """``admit``, also counting the tokens of blocks this prompt newly stored (vLLM's
        ``created_cache_tokens``)."""
        keys = self._keys(tokens)
        usable = (len(tokens) - 1) // self.block_tokens if tokens else 0
        hits = 0
        for key in keys[:usable]:
            if key not in self._blocks:
                break
            hits += 1
        created = sum(1 for key in keys if key not in self._blocks)
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return hits * self.block_tokens, created * self.block_tokens

    def __len__(self) -> int:
        return len(self._blocks)

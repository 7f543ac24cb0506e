"""The prefix-cache model and the token counter it runs on."""

from __future__ import annotations

from rehearsal_gateway.twin.prefix_cache import PrefixCache
from rehearsal_gateway.twin.tokens import count_tokens, tokenize, truncate_tokens


def test_token_counter_is_deterministic_and_lossless() -> None:
    """Tokenising is stable, joins back to the text, and counts what it splits."""
    text = 'Cancel order W1001 {"reason": "no_longer_needed"}\n'
    assert "".join(tokenize(text)) == text
    assert count_tokens(text) == len(tokenize(text)) == count_tokens(text)
    assert count_tokens(truncate_tokens(text, 5)) == 5


def test_repeated_prompt_is_mostly_cached() -> None:
    """A repeated prompt is ≥90% served from cache; the first pass is not."""
    cache = PrefixCache()
    tokens = tokenize("You are a helpful agent. " * 80)
    assert cache.admit(tokens) == 0
    cached = cache.admit(tokens)
    assert cached / len(tokens) >= 0.9
    assert cached < len(tokens)


def test_shared_prefix_hits_only_up_to_divergence() -> None:
    """Blocks hit while the prefix matches and miss after the first different block."""
    cache = PrefixCache()
    base = tokenize("alpha beta gamma " * 40)
    cache.admit(base)
    changed = [*base[:64], "X", *base[65:]]
    assert cache.admit(changed) == 64


def test_lru_evicts_old_blocks() -> None:
    """Beyond capacity, the least recently used blocks are forgotten."""
    cache = PrefixCache(capacity_blocks=4)
    first = tokenize("one two three " * 30)
    cache.admit(first)
    cache.admit(tokenize("four five six " * 30))
    assert len(cache) == 4
    assert cache.admit(first) == 0

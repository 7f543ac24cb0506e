"""Sampling controls: ``n``, ``seed`` and the token limits, with vLLM's accounting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.contract.conftest import Engine
from tests.contract.wire import HELLO, THINKING_OFF, finish_reasons, stream_chunks


def _answers(http: httpx.Client, engine: Engine, **fields: Any) -> list[tuple[str, str]]:
    body = {"model": engine.model, "messages": HELLO, "temperature": 1.0, **THINKING_OFF}
    response = http.post("/v1/chat/completions", json={**body, **fields})
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    return [(c["message"]["content"], c["finish_reason"]) for c in choices]


def test_n_returns_indexed_choices(engine: Engine, http: httpx.Client) -> None:
    """``n=3`` returns three choices indexed 0..2, and the prompt is counted once in usage."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 8, "seed": 7, **THINKING_OFF}
    single = http.post("/v1/chat/completions", json=body).json()
    triple = http.post("/v1/chat/completions", json={**body, "n": 3}).json()
    assert [choice["index"] for choice in triple["choices"]] == [0, 1, 2]
    assert triple["usage"]["prompt_tokens"] == single["usage"]["prompt_tokens"]
    assert 3 <= triple["usage"]["completion_tokens"] <= 3 * 8


def test_same_seed_same_output(engine: Engine, http: httpx.Client) -> None:
    """Repeating a request with the same seed reproduces every choice exactly."""
    first = _answers(http, engine, n=3, seed=7, max_tokens=8)
    again = _answers(http, engine, n=3, seed=7, max_tokens=8)
    assert first == again


def test_different_seeds_differ(engine: Engine, http: httpx.Client) -> None:
    """Changing the seed changes the sampled choices."""
    assert _answers(http, engine, n=3, seed=7, max_tokens=8) != _answers(
        http, engine, n=3, seed=8, max_tokens=8
    )


def test_seeded_choices_differ_from_each_other(engine: Engine, http: httpx.Client) -> None:
    """Within one seeded ``n=3`` request the choices are not copies of one another."""
    contents = [content for content, _ in _answers(http, engine, n=3, seed=7, max_tokens=8)]
    assert len(set(contents)) > 1


def test_choice_i_is_sampled_with_seed_plus_i(engine: Engine, http: httpx.Client) -> None:
    """Choice ``i`` of a seeded ``n`` request is what ``n=1`` with ``seed + i`` returns."""
    triple = _answers(http, engine, n=3, seed=7, max_tokens=8)
    singles = [_answers(http, engine, seed=seed, max_tokens=8)[0] for seed in (7, 8, 9)]
    assert triple == singles


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_token_limit_cuts_with_length(engine: Engine, http: httpx.Client, limit: str) -> None:
    """A token limit the answer reaches ends it with ``finish_reason: length`` at that count."""
    body = {"model": engine.model, "messages": HELLO, "seed": 1, limit: 3, **THINKING_OFF}
    response = http.post("/v1/chat/completions", json=body).json()
    assert response["choices"][0]["finish_reason"] == "length"
    assert response["usage"]["completion_tokens"] == 3
    assert response["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_streamed_token_limit_cuts_with_length(engine: Engine, http: httpx.Client) -> None:
    """A streamed answer cut by ``max_tokens`` finishes with ``length`` and counts the cut."""
    body = {
        "model": engine.model,
        "messages": HELLO,
        "seed": 1,
        "max_tokens": 3,
        "stream_options": {"include_usage": True},
        **THINKING_OFF,
    }
    chunks = stream_chunks(http, body)
    assert finish_reasons(chunks) == {0: ["length"]}
    assert chunks[-1]["usage"]["completion_tokens"] == 3

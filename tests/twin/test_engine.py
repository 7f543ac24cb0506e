"""The engine in process: seeds, n, prefill-once accounting, roles and errors."""

from __future__ import annotations

import pytest

from rehearsal_gateway.twin.config import TwinSettings
from rehearsal_gateway.twin.engine import TwinEngine
from rehearsal_gateway.twin.protocol import TwinError, parse_request
from tests.twin.conftest import rehearsal_request, rehearsal_text, world_request


def _prepare(engine: TwinEngine, body: dict):
    return engine.prepare(parse_request(body), body)


def _signature(generation) -> list:
    return [(c.reasoning, c.content, [(t.name, t.arguments) for t in c.tool_calls])
            for c in generation.choices]  # fmt: skip


def test_same_seed_same_output_different_seeds_differ() -> None:
    """A seeded request repeats exactly; a range of seeds gives several outputs."""
    engine = TwinEngine(TwinSettings(skill=0.5))
    body = world_request("airline", 4, seed=11)
    assert _signature(_prepare(engine, body)) == _signature(_prepare(engine, body))
    outputs = {str(_signature(_prepare(engine, {**body, "seed": s}))) for s in range(8)}
    assert len(outputs) > 1


def test_n_choices_prefill_once() -> None:
    """n=4 returns four choices and adds the prompt to the token counters once."""
    engine = TwinEngine(TwinSettings())
    generation = _prepare(engine, world_request("bank", 0, n=4))
    assert [c.index for c in generation.choices] == [0, 1, 2, 3]
    assert engine.metrics.prompt_tokens._value.get() == generation.prompt_tokens
    assert generation.cached_tokens == 0
    again = _prepare(engine, world_request("bank", 0, n=4))
    assert again.cached_tokens / again.prompt_tokens >= 0.9


def test_rehearsal_request_returns_execution_result() -> None:
    """A rehearsal-format chat gets thinking plus a wrapped JSON observation."""
    engine = TwinEngine(TwinSettings(fidelity=1.0))
    body = world_request("retail", 0)
    text = rehearsal_text(body["tools"], "User: hi", "get_order", {"order_id": "W1001"})
    (choice,) = _prepare(engine, rehearsal_request(text)).choices
    assert choice.reasoning
    assert choice.content.startswith("<execution_result>\n{")
    assert choice.content.endswith("}\n</execution_result>")


def test_malformed_rehearsal_is_a_400() -> None:
    """A rehearsal prompt missing sections becomes a TwinError 400, not a crash."""
    engine = TwinEngine(TwinSettings())
    text = "Candidate tools (whitelist for this sample):\n[]\n\n/think"
    with pytest.raises(TwinError) as caught:
        _prepare(engine, rehearsal_request(text))
    assert caught.value.status == 400
    assert "rehearsal" in caught.value.message.lower()


# Messages, types and params as a real vLLM 0.32 sends them (probed against the CPU engine).
@pytest.mark.parametrize(
    ("patch", "kind", "param", "message"),
    [
        pytest.param({"n": 0}, "BadRequestError", None, "n must be at least 1, got 0.", id="n"),
        pytest.param(
            {"temperature": -1},
            "BadRequestError",
            "temperature",
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
            id="temperature",
        ),
        pytest.param(
            {"tool_choice": "required", "tools": None},
            "BadRequestError",
            "tool_choice",
            "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
            id="choice",
        ),
        pytest.param(
            {"tool_choice": "auto", "tools": None},
            "BadRequestError",
            "tool_choice",
            "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)",
            id="auto-choice",
        ),
        pytest.param(
            {"max_completion_tokens": 0},
            "BadRequestError",
            "max_tokens",
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
            id="max-tokens",
        ),
        pytest.param(
            {"max_completion_tokens": 40961},
            "BadRequestError",
            "max_completion_tokens",
            "max_completion_tokens=40961 cannot be greater than max_model_len=40960. Please"
            " request fewer output tokens. (parameter=max_completion_tokens, value=40961)",
            id="beyond-context",
        ),
        pytest.param(
            {"n": 2, "temperature": 0},
            "BadRequestError",
            None,
            "n must be 1 when using greedy sampling, got 2.",
            id="greedy-n",
        ),
        pytest.param(
            {"messages": []},
            "BadRequestError",
            None,
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            id="no-messages",
        ),
        pytest.param(
            {"n": "abc"},
            "Bad Request",
            "body.n",
            "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.n', 'msg': 'Input should"
            " be a valid integer, unable to parse string as an integer', 'input': 'abc'}",
            id="n-type",
        ),
        pytest.param(
            {"messages": {"a": 1}},
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages', 'msg': 'Input"
            " should be a valid list', 'input': '<dict of 1 items>'}",
            id="messages-type",
        ),
    ],
)
def test_invalid_requests_raise_400(
    patch: dict, kind: str, param: str | None, message: str
) -> None:
    """Invalid fields are refused with the 400 envelope vLLM sends for them, word for word."""
    body = {**world_request("bank", 0), **patch}
    with pytest.raises(TwinError) as caught:
        parse_request(body)
    assert caught.value.envelope() == {
        "error": {"message": message, "type": kind, "param": param, "code": 400}
    }


def test_vllm_accepts_what_the_twin_accepts() -> None:
    """Custom roles, a large ``n`` and ``tool_choice: none`` without tools are fine on vLLM."""
    body = {**world_request("bank", 0), "n": 40, "tool_choice": "none", "tools": None}
    assert parse_request({**body, "messages": [{"role": "robot", "content": "x"}]}).n == 40


def test_unknown_fields_are_ignored() -> None:
    """Fields the twin does not know are accepted silently."""
    body = world_request("bank", 0, repetition_penalty=1.1, vllm_xargs={"a": 1}, user="u")
    assert parse_request(body).n == 1


HELLO = {"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "Say hello."}]}


def test_choice_i_is_seeded_with_seed_plus_i() -> None:
    """As in vLLM, choice i of ``seed=s, n=k`` is choice 0 of ``seed=s+i, n=1``."""
    engine = TwinEngine(TwinSettings(skill=0.5))
    body = {**world_request("retail", 2), "temperature": 1.0}
    triple = _signature(_prepare(engine, {**body, "n": 3, "seed": 7}))
    singles = [_signature(_prepare(engine, {**body, "seed": s}))[0] for s in (7, 8, 9)]
    assert triple == singles


def test_text_answers_vary_with_seed_and_choice() -> None:
    """A text answer's wording is sampled: choices differ, and so do seeds."""
    engine = TwinEngine(TwinSettings())
    off = {**HELLO, "chat_template_kwargs": {"enable_thinking": False}, "n": 4}
    contents = [c.content for c in _prepare(engine, {**off, "seed": 1}).choices]
    assert len(set(contents)) > 1
    others = [c.content for c in _prepare(engine, {**off, "seed": 100}).choices]
    assert contents != others


def test_greedy_ignores_the_seed() -> None:
    """``temperature: 0`` decodes greedily, so the seed changes nothing."""
    engine = TwinEngine(TwinSettings(skill=0.5))
    outputs = {
        str(_signature(_prepare(engine, {**body, "temperature": 0, "seed": s})))
        for body in (HELLO, world_request("bank", 1))
        for s in range(6)
    }
    assert len(outputs) == 2

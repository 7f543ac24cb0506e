"""The engine in process: seeds, n, prefill-once accounting, roles and errors."""

from __future__ import annotations

import pytest

from tests.twin.conftest import rehearsal_request, rehearsal_text, world_request
from twin.config import TwinSettings
from twin.engine import TwinEngine
from twin.protocol import TwinError, parse_request


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


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        pytest.param({"n": 0}, "n", id="n-low"),
        pytest.param({"n": 17}, "n", id="n-high"),
        pytest.param({"temperature": -1}, "temperature", id="temperature"),
        pytest.param({"messages": [{"role": "robot", "content": "x"}]}, "messages", id="role"),
        pytest.param({"tool_choice": "required", "tools": None}, "tool_choice", id="choice"),
        pytest.param({"max_tokens": 0}, "max_tokens", id="max-tokens"),
    ],
)
def test_invalid_requests_raise_400(patch: dict, param: str) -> None:
    """Out-of-range or ill-typed fields are refused with vLLM's 400 envelope."""
    body = {**world_request("bank", 0), **patch}
    with pytest.raises(TwinError) as caught:
        parse_request(body)
    envelope = caught.value.envelope()["error"]
    assert envelope["code"] == 400
    assert envelope["type"] == "BadRequestError"
    assert envelope["param"] == param
    assert set(envelope) == {"message", "type", "param", "code"}


def test_unknown_fields_are_ignored() -> None:
    """Fields the twin does not know are accepted silently."""
    body = world_request("bank", 0, repetition_penalty=1.1, vllm_xargs={"a": 1}, user="u")
    assert parse_request(body).n == 1

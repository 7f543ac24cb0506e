"""Rehearsal against a real vLLM (CPU build, tiny random Qwen3): random outputs never break it.

The tiny model's imagined results are junk, so every rehearsal is ``unparsed``; the gateway must
classify them, still commit one well-formed turn, and never answer 500.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.contract.wire import USER_ASKS, WEATHER_TOOL, forced_tool_call_extra
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]
# The longest rehearsal deadline a request may ask for (RGW_MAX_DEADLINE_MS): on a busy host a
# CPU engine's imaginations can outlast the default deadline, which would cut them (outcome
# "timeout") and change what these tests look at, not what they are about.
DEADLINE_MS = 120_000


def _create(vllm_gateway: Proc, extra: dict[str, Any], **knobs: Any) -> Any:
    with openai.OpenAI(
        base_url=vllm_gateway.url + "/v1", api_key="x", max_retries=0, timeout=240
    ) as client:
        return client.chat.completions.create(
            model=SERVED_MODEL_NAME, messages=USER_ASKS, tools=[WEATHER_TOOL], seed=3,
            max_tokens=48, extra_body={**extra, "rehearsal": {"deadline_ms": DEADLINE_MS, **knobs}},
        )  # fmt: skip


def test_forced_tool_calls_rehearse_as_unparsed_and_still_commit(vllm_gateway: Proc) -> None:
    """Real tool calls, junk imagination: unparsed observations, one committed call, no 500."""
    completion = _create(
        vllm_gateway, forced_tool_call_extra(), mode="parallel", budget=2, commit="select",
        early_exit=False,
    )  # fmt: skip
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    assert calls[0].function.name == WEATHER_TOOL["function"]["name"]
    summary = (completion.model_extra or {})["rehearsal"]
    trace = httpx.get(f"{vllm_gateway.url}/v1/rehearsals/{summary['id']}", timeout=10).json()
    outcomes = [o["outcome"] for t in trace["trace"] for s in t["steps"] for o in s["observations"]]
    assert outcomes
    assert set(outcomes) <= {"unparsed", "ok", "error"} or any(
        o.startswith("veto") for o in outcomes
    )
    assert "unparsed" in outcomes


def test_random_text_is_committed_as_an_answer(vllm_gateway: Proc) -> None:
    """Without forcing, the random model writes text: the gateway commits it, sequential too."""
    for mode in ("parallel", "sequential"):
        completion = _create(vllm_gateway, {}, mode=mode, budget=2)
        choice = completion.choices[0]
        assert choice.finish_reason in ("stop", "length", "tool_calls")
        reasoning = (choice.message.model_extra or {}).get("reasoning")
        assert choice.message.tool_calls or choice.message.content or reasoning
        assert (completion.model_extra or {})["rehearsal"]["mode"] == mode


def _streamed(vllm_gateway: Proc, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    url = f"{vllm_gateway.url}/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=240) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line.removeprefix("data: ")))
    return chunks


def test_committed_logprobs_and_length_come_from_vllm(vllm_gateway: Proc) -> None:
    """A rehearsed answer carries vLLM's logprobs of the committed turn (whole and streamed),
    and a committed turn vLLM cut by ``max_tokens`` says ``length`` (whole and streamed)."""
    body: dict[str, Any] = {
        "model": SERVED_MODEL_NAME, "messages": USER_ASKS, "tools": [WEATHER_TOOL], "seed": 3,
        "max_tokens": 64, "logprobs": True, "top_logprobs": 1,
        "rehearsal": {"mode": "parallel", "budget": 2, "deadline_ms": DEADLINE_MS},
        **forced_tool_call_extra(),
    }  # fmt: skip
    url = f"{vllm_gateway.url}/v1/chat/completions"
    whole = httpx.post(url, json=body, timeout=240).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    entries = choice["logprobs"]["content"]
    spelled = "".join(e["token"] for e in entries)
    assert "get_weather" in spelled
    assert entries[-1]["token"] in ("<|im_end|>", "<|endoftext|>")
    assert all(e["top_logprobs"][0]["token"] == e["token"] for e in entries)
    chunks = _streamed(vllm_gateway, body)
    streamed = [
        e for k in chunks for c in k["choices"] for e in (c["logprobs"] or {}).get("content", [])
    ]
    assert "get_weather" in "".join(e["token"] for e in streamed)

    cut = {
        k: v for k, v in body.items() if k not in ("structured_outputs", "logprobs", "top_logprobs")
    }
    cut["max_tokens"] = 6  # the random model's text runs on: six tokens cut it
    assert httpx.post(url, json=cut, timeout=240).json()["choices"][0]["finish_reason"] == "length"
    reasons = [c["finish_reason"] for k in _streamed(vllm_gateway, cut) for c in k["choices"]]
    assert [r for r in reasons if r] == ["length"]

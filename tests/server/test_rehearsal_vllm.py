"""Rehearsal against a real vLLM (CPU build, tiny random Qwen3): random outputs never break it.

The tiny model's imagined results are junk, so every rehearsal is ``unparsed``; the gateway must
classify them, still commit one well-formed turn, and never answer 500.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.contract.wire import USER_ASKS, WEATHER_TOOL, forced_tool_call_extra
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]


def _create(vllm_gateway: Proc, extra: dict[str, Any], **knobs: Any) -> Any:
    client = openai.OpenAI(
        base_url=vllm_gateway.url + "/v1", api_key="x", max_retries=0, timeout=240
    )
    return client.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=USER_ASKS, tools=[WEATHER_TOOL], seed=3,
        max_tokens=48, extra_body={**extra, "rehearsal": knobs},
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

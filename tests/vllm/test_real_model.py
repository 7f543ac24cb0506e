"""The gateway in front of a real language model: real calls, real imagination, real feedback.

vLLM (CPU build) serves Qwen2.5-Coder-0.5B-Instruct (docs/real-model.md) with the ``bare_json``
tool parser; one in-process gateway with the real Redis fronts it. The model's imagined tool
results are its own text, in whatever shape it writes them: each must be parsed or classified,
shown raw in the trace, and never turn into a veto when it could not be parsed, nor into a 5xx.
The model decodes a few tokens a second on a CPU: prompts are short and every answer is capped.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from rehearsal_gateway.rehearsal.parsing import PARSE_CLASSES
from tests.server.conftest import metric_value
from tests.server.rehearsal_support import REDIS_URL, drop_prefix
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway
from tests.support.procs import Proc
from tests.support.vllm import REAL_MODEL_NAME, RealModelMissing, start_real_vllm

# The first test's timeout also covers vLLM's start (REAL_START_TIMEOUT_S).
pytestmark = [pytest.mark.vllm, pytest.mark.real_model, pytest.mark.timeout(900)]

API_KEY = "real-model-key"
REHEARSE_MAX_TOKENS = 96
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
INSTRUCTION = "You call tools. Reply with the tool call only."
QUESTION = "What is the weather in Paris?"
MESSAGES = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": QUESTION}]
REAL_RESULT = {"city": "Paris", "temperature_c": 18, "conditions": "cloudy"}
# K = 2, each engine call capped; the deadline covers a busy 2-core machine's prefill.
KNOBS = {"mode": "parallel", "budget": 2, "deadline_ms": 120_000, "early_exit": False}
PARSE_METRIC = "rehearsal_gateway_imagination_parse_total"


@dataclass
class RealStack:
    """vLLM serving the real model, and a gateway (Redis store, one API key) in front of it."""

    engine: Proc
    gateway: InProcessGateway

    def sdk(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.gateway.url + "/v1", api_key=API_KEY, max_retries=0, timeout=500
        )

    def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        response = httpx.get(self.gateway.url + path, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    """One real vLLM and one gateway for the module; afterwards, no request may have had a 5xx."""
    logs = tmp_path_factory.mktemp("real-model")
    try:
        engine = start_real_vllm(logs / "vllm-serve.log")
    except RealModelMissing as exc:
        pytest.skip(str(exc))
    prefix = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    env = {
        "RGW_REDIS_URL": REDIS_URL,
        "RGW_REDIS_PREFIX": prefix,
        "RGW_API_KEYS": API_KEY,
        "RGW_REHEARSE_MAX_TOKENS": str(REHEARSE_MAX_TOKENS),
        # A slow engine is a busy one, not a dead one: waits sized for a 0.5B model on 2 cores.
        "RGW_FIRST_BYTE_TIMEOUT": "300",
        "RGW_CHUNK_TIMEOUT": "120",
        "RGW_COMMIT_TIMEOUT": "300",
        "RGW_HEALTH_INTERVAL": "5",
        "RGW_HEALTH_TIMEOUT": "10",
    }
    try:
        gateway = inprocess.start_gateway(
            ["--engine", engine.url + "/v1"], log_path=logs / "gateway.log", env=env
        )
    except BaseException:
        engine.stop()
        raise
    try:
        yield RealStack(engine, gateway)
        statuses = [json.loads(line).get("status") for line in gateway.log().splitlines()]
        assert statuses
        assert all(isinstance(s, int) and s < 500 for s in statuses), statuses
    finally:
        gateway.stop()
        engine.stop()
        drop_prefix(prefix)


def _ask(
    stack: RealStack,
    rehearsal: dict[str, Any] | None,
    messages: list[dict[str, Any]] = MESSAGES,
    max_tokens: int = 48,
) -> Any:
    with stack.sdk() as client:
        return client.chat.completions.create(
            model=REAL_MODEL_NAME, messages=messages, tools=[WEATHER], max_tokens=max_tokens,
            temperature=0.6, seed=1, extra_body={"rehearsal": rehearsal} if rehearsal else None,
        )  # fmt: skip


def _observations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for t in trace["trace"] for s in t["steps"] for o in s["observations"]]


def _check_imagination(stack: RealStack, summary: dict[str, Any]) -> Counter[str]:
    """Check the rehearsal's imaginations (the model's raw text, parsed or classified, never a
    veto unless parsed) and return how many fell in each parse class."""
    trace = stack.get(f"/v1/rehearsals/{summary['id']}")
    imagined = [o for o in _observations(trace) if o["source"] == "imagined"]
    assert imagined, trace
    for seen in imagined:
        assert isinstance(seen["raw"], str)
        assert seen["raw"].strip(), seen  # the model's own text, kept for the reader
        assert seen["parse"] in PARSE_CLASSES, seen
        outcome = seen["outcome"]
        if seen["parse"] == "ok":
            assert outcome in ("ok", "error") or outcome.startswith("veto:"), seen
            assert isinstance(seen["result"], dict | list), seen
        else:
            assert outcome == "unparsed", seen  # no evidence: never a veto, never a pass
    for checked in _observations(trace):
        if checked["source"] != "imagined":  # a schema check, before any imagination
            assert (checked["source"], checked["outcome"]) == ("check", "veto:SCHEMA_INVALID")
    classes = Counter(seen["parse"] for seen in imagined)
    assert summary["parse_classes"] == dict(classes)
    rehearse = summary["tokens"]["rehearse"]
    assert 0 < rehearse["completion"] <= REHEARSE_MAX_TOKENS * len(imagined)
    return classes


def _parse_counts(stack: RealStack) -> Counter[str]:
    return Counter(
        {name: metric_value(stack.gateway.url, PARSE_METRIC, parse=name) for name in PARSE_CLASSES}
    )


def _one_weather_call(message: Any) -> Any:
    calls = message.tool_calls
    assert calls is not None
    assert len(calls) == 1, calls
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    return calls[0]


@pytest.fixture(scope="module")
def rehearsed(stack: RealStack) -> Any:
    """One parallel rehearsal (K = 2) of the weather question, shared by the tests that read it."""
    return _ask(stack, KNOBS)


def test_pass_through_tool_call_is_parsed(stack: RealStack) -> None:
    """Without rehearsal, the model's bare-JSON call reaches the client as a parsed tool call."""
    completion = _ask(stack, None)
    assert completion.choices[0].finish_reason == "tool_calls"
    _one_weather_call(completion.choices[0].message)
    assert "rehearsal" not in (completion.model_extra or {})


def test_parallel_rehearsal_imagines_with_the_models_own_text(
    stack: RealStack, rehearsed: Any
) -> None:
    """K = 2 rehearsal end to end: one committed call; every imagination raw in the trace."""
    choice = rehearsed.choices[0]
    assert choice.finish_reason == "tool_calls"
    _one_weather_call(choice.message)
    summary = (rehearsed.model_extra or {})["rehearsal"]
    assert (summary["mode"], summary["budget"]) == ("parallel", 2)
    # Two samples acted; equal actions are imagined once.
    assert 1 <= summary["distinct_actions"] <= 2
    assert summary["engine_calls"] >= 2  # acting, then at least one imagination
    assert summary["commit_check"] == "ok"
    _check_imagination(stack, summary)


def test_real_result_is_fed_back_and_counted(stack: RealStack, rehearsed: Any) -> None:
    """The real result of the committed call is matched to its imagination and counted."""
    call = _one_weather_call(rehearsed.choices[0].message)
    rehearsal_id = (rehearsed.model_extra or {})["rehearsal"]["id"]
    before = metric_value(stack.gateway.url, "rehearsal_gateway_outcome_predictions_total")
    follow_up = [
        *MESSAGES,
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}},
        ]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(REAL_RESULT)},
    ]  # fmt: skip
    knobs = {**KNOBS, "budget": 1}
    second = _ask(stack, knobs, messages=follow_up, max_tokens=24)
    feedback = (second.model_extra or {})["rehearsal"]["feedback"]
    assert [(f["tool_call_id"], f["tool"], f["real_outcome"]) for f in feedback] == [
        (call.id, "get_weather", "ok")
    ]
    imagined = feedback[0]["imagined_outcome"]
    counted = imagined not in (None, "unparsed")  # no evidence is not counted either way
    if counted:
        predicted_error = imagined.startswith("veto") or imagined == "error"
        assert feedback[0]["outcome_agreement"] is (not predicted_error)
    else:
        assert feedback[0]["outcome_agreement"] is None
    after = metric_value(stack.gateway.url, "rehearsal_gateway_outcome_predictions_total")
    assert after == before + (1 if counted else 0)
    table = {row["tool"]: row for row in stack.get("/v1/rehearsals/trust")["data"]}
    samples = sum(table["get_weather"]["counts"].values()) if "get_weather" in table else 0
    assert samples == (1 if counted else 0)
    trace = stack.get(f"/v1/rehearsals/{rehearsal_id}")
    assert [(f["tool_call_id"], f["real_result"]) for f in trace["feedback"]] == [
        (call.id, REAL_RESULT)
    ]


def test_streamed_rehearsal_commits_the_same_call(stack: RealStack, rehearsed: Any) -> None:
    """The same rehearsal streamed: argument deltas reassemble to the non-streamed call."""
    whole = _one_weather_call(rehearsed.choices[0].message)
    before = _parse_counts(stack)
    name, arguments, finish, summary = "", "", None, None
    with stack.sdk() as client:
        stream = client.chat.completions.create(
            model=REAL_MODEL_NAME, messages=MESSAGES, tools=[WEATHER], max_tokens=48,
            temperature=0.6, seed=1, stream=True, extra_body={"rehearsal": KNOBS},
        )  # fmt: skip
        for chunk in stream:
            summary = (chunk.model_extra or {}).get("rehearsal", summary)
            for choice in chunk.choices:
                for piece in choice.delta.tool_calls or []:
                    name += (piece.function.name or "") if piece.function else ""
                    arguments += (piece.function.arguments or "") if piece.function else ""
                finish = choice.finish_reason or finish
    assert (name, json.loads(arguments), finish) == (
        whole.function.name, json.loads(whole.function.arguments), "tool_calls"
    )  # fmt: skip
    assert summary is not None
    assert summary["mode"] == "parallel"
    classes = _check_imagination(stack, summary)
    assert _parse_counts(stack) - before == classes  # each class counted in the metrics too


def test_responses_api_rehearses_a_function_call(stack: RealStack) -> None:
    """``POST /v1/responses`` with a budget: a rehearsed function_call item from the real model."""
    with stack.sdk() as client:
        response = client.responses.create(
            model=REAL_MODEL_NAME, instructions=INSTRUCTION, input=QUESTION,
            tools=[{"type": "function", **WEATHER["function"]}], max_output_tokens=48,
            temperature=0.6, extra_body={"rehearsal": KNOBS, "seed": 1},
        )  # fmt: skip
    assert response.status == "completed"
    calls = [item for item in response.output if item.type == "function_call"]
    expected = [("get_weather", {"city": "Paris"})]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == expected
    summary = (response.model_extra or {})["rehearsal"]
    assert (summary["mode"], summary["budget"]) == ("parallel", 2)
    _check_imagination(stack, summary)

"""``confirm`` end to end: a destructive call with evidence against it becomes a question.

The engine double (``imagine:0``) proposes ``delete_record {"key": i}`` for choice ``i`` and
imagines every call as found, so the only evidence against the call is the real failure the
conversation already holds. Driven by the official ``openai`` SDK (chat, streamed chat,
Responses) and by the OpenAI Agents SDK (its chat-completions and Responses models), whose
agent runs the tool for real, sees it fail, and ends its run on the gateway's question.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openai import OpenAI

from rehearsal_gateway.rehearsal.confirm import HELD_PREFIX
from rehearsal_gateway.server.http.auth import key_digest, tenant_of

# Reason: the Agents SDK closes its httpx clients' auth generators after ``run_sync``'s event loop
# shut down, and warns about its own deprecations (as in tests/clients/test_compat.py).
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PARAMETERS = {"type": "object", "properties": {"key": {"type": "integer"}}, "required": ["key"]}
DELETE = {"type": "function", "annotations": {"destructiveHint": True},
          "function": {"name": "delete_record", "description": "Delete a record for good.",
                       "parameters": PARAMETERS}}  # fmt: skip
LOCKED = '{"error": "record 0 is locked"}'
KNOBS = {"mode": "parallel", "budget": 1, "confirm": True}
HELD_LINE = HELD_PREFIX + 'delete_record {"key":0}'
FAILED = [
    {"role": "user", "content": "Delete record 0."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "client-1", "type": "function",
         "function": {"name": "delete_record", "arguments": '{"key": 0}'}}]},
    {"role": "tool", "tool_call_id": "client-1", "content": LOCKED},
]  # fmt: skip


@pytest.fixture
def gateway_url(start_double: Any, start_gateway: Any) -> str:
    url: str = start_gateway(start_double("imagine:0").url + "/v1").url
    return url


def test_chat_answers_with_the_question_instead_of_the_call(gateway_url: str) -> None:
    """openai SDK, chat: a text answer naming the held call; the summary says which and why."""
    client = OpenAI(base_url=gateway_url + "/v1", api_key="none", max_retries=0)
    completion = client.chat.completions.create(
        model="double-model", messages=FAILED, tools=[DELETE],  # type: ignore[arg-type,list-item]
        extra_body={"rehearsal": KNOBS},
    )  # fmt: skip
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert HELD_LINE in (choice.message.content or "").splitlines()
    assert "REAL_FAILURE_REPEATED" in (choice.message.content or "")
    summary = (completion.model_extra or {})["rehearsal"]
    assert summary["commit_path"] == "confirm"
    assert summary["held_for_confirmation"][0]["name"] == "delete_record"
    client.close()


def test_a_streamed_chat_streams_the_question(gateway_url: str) -> None:
    """openai SDK, streamed chat: the question arrives as content deltas, no tool-call delta."""
    client = OpenAI(base_url=gateway_url + "/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model="double-model", messages=FAILED, tools=[DELETE],  # type: ignore[arg-type,list-item]
        extra_body={"rehearsal": KNOBS}, stream=True,
    )  # fmt: skip
    text, calls, finish = "", 0, None
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            text += delta.content or ""
            calls += len(delta.tool_calls or [])
            finish = chunk.choices[0].finish_reason or finish
    assert (calls, finish) == (0, "stop")
    assert HELD_LINE in text.splitlines()
    client.close()


def test_responses_answers_with_the_question(gateway_url: str) -> None:
    """openai SDK, Responses: the output is a message, not a function call."""
    client = OpenAI(base_url=gateway_url + "/v1", api_key="none", max_retries=0)
    tool = {"type": "function", "name": "delete_record", "parameters": PARAMETERS,
            "annotations": {"destructiveHint": True}}  # fmt: skip
    response = client.responses.create(
        model="double-model",
        input=[
            {"role": "user", "content": "Delete record 0."},
            {"type": "function_call", "call_id": "c1", "name": "delete_record",
             "arguments": '{"key": 0}'},
            {"type": "function_call_output", "call_id": "c1", "output": LOCKED},
        ],  # type: ignore[list-item]
        tools=[tool],  # type: ignore[list-item]
        extra_body={"rehearsal": KNOBS},
    )  # fmt: skip
    assert [item.type for item in response.output] == ["message"]
    assert HELD_LINE in response.output_text.splitlines()
    client.close()


def test_a_streamed_response_streams_the_question(gateway_url: str) -> None:
    """openai SDK, streamed Responses: text deltas, no function-call item, the same question."""
    client = OpenAI(base_url=gateway_url + "/v1", api_key="none", max_retries=0)
    tool = {"type": "function", "name": "delete_record", "parameters": PARAMETERS,
            "annotations": {"destructiveHint": True}}  # fmt: skip
    stream = client.responses.create(
        model="double-model",
        input=[
            {"role": "user", "content": "Delete record 0."},
            {"type": "function_call", "call_id": "c1", "name": "delete_record",
             "arguments": '{"key": 0}'},
            {"type": "function_call_output", "call_id": "c1", "output": LOCKED},
        ],  # type: ignore[list-item]
        tools=[tool],  # type: ignore[list-item]
        extra_body={"rehearsal": KNOBS}, stream=True,
    )  # fmt: skip
    text, items = "", []
    for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.output_item.done":
            items.append(event.item.type)
    assert items == ["message"]
    assert HELD_LINE in text.splitlines()
    client.close()


def test_an_operator_can_require_confirm_for_a_key(start_double: Any, start_gateway: Any) -> None:
    """RGW_RISK_OVERRIDES ``confirm: true``: the key's requests ask, even one that says no."""
    key = "sk-careful"
    overrides = {tenant_of(key_digest(key)): {"confirm": True}}
    env = {"RGW_API_KEYS": key, "RGW_RISK_OVERRIDES": json.dumps(overrides)}
    gateway = start_gateway(start_double("imagine:0").url + "/v1", env=env)
    client = OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    completion = client.chat.completions.create(
        model="double-model", messages=FAILED, tools=[DELETE],  # type: ignore[arg-type,list-item]
        extra_body={"rehearsal": {**KNOBS, "confirm": False}},
    )  # fmt: skip
    assert (completion.model_extra or {})["rehearsal"]["commit_path"] == "confirm"
    client.close()


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_an_agents_sdk_run_ends_on_the_question(gateway_url: str, api: str) -> None:
    """Agents SDK: the tool runs once, fails for real, and the run's final output is the question
    (the rehearsal knobs, risk class included, ride in ``extra_body``)."""
    from agents import (
        Agent,
        FunctionTool,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
    )
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    ran: list[dict[str, Any]] = []

    async def delete(context: Any, arguments: str) -> str:
        ran.append(json.loads(arguments))
        return LOCKED

    async def run() -> Any:
        client = AsyncOpenAI(api_key="none", base_url=gateway_url + "/v1", max_retries=0)
        model_class = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
        knobs = {**KNOBS, "risk": {"delete_record": "destructive"}}
        agent = Agent(
            name="records", instructions="Delete what the user asks.",
            model=model_class(model="double-model", openai_client=client),
            tools=[FunctionTool(name="delete_record", description="Delete a record for good.",
                                params_json_schema=PARAMETERS, on_invoke_tool=delete,
                                strict_json_schema=False)],
            model_settings=ModelSettings(extra_body={"rehearsal": knobs}),
        )  # fmt: skip
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client),
                           tracing_disabled=True)  # fmt: skip
        try:
            return await Runner.run(agent, "Delete record 0.", run_config=config, max_turns=4)
        finally:
            await client.close()

    result = asyncio.run(run())
    assert ran == [{"key": 0}]
    assert HELD_LINE in str(result.final_output).splitlines()

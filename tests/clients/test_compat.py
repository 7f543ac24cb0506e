"""Agent frameworks, unchanged but for ``base_url``, against the gateway (twin behind it).

Each case drives the framework's own model class to the point where the model commits a tool
call: pydantic-ai's Responses and chat models; LangChain's ``ChatOpenAI`` with ``bind_tools``
(streamed ``tool_call_chunks``) and with ``use_responses_api=True``; LiteLLM's ``hosted_vllm/``
and ``openai/`` providers, whole and streamed, knobs in ``extra_body``. The OpenAI Agents SDK
(its default Responses model and its chat-completions model, ``run_sync`` and ``run_streamed``,
with and without rehearsal) runs a whole retail task with the world's real tools, against a
twin that plays the plan exactly (``exact_stack``), so a failure is ours or the SDK's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients.conftest import API_KEY
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import Stack

# A filterwarnings exception with its reason: these frameworks warn about their own deprecations.
# Reason: these frameworks warn about their own deprecations, and close their httpx clients'
# auth generators after the event loop of ``run_sync`` shut down (a ResourceWarning of theirs).
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_their_sockets() -> Iterator[None]:
    """Collect what the frameworks leaked while this module's filters still apply.

    Left to the garbage collector, their unclosed sockets surface as unraisable warnings in
    whichever later test happens to trigger a collection, and fail that test instead.
    """
    yield
    gc.collect()


def _ask(stack: Stack) -> str:
    return stack.world.tasks[6].instruction


def _order_tool_schema(stack: Stack) -> dict[str, Any]:
    schema = next(t for t in stack.world.tool_schemas() if t["function"]["name"] == "get_order")
    return schema["function"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_pydantic_ai(stack: Stack, api: str) -> None:
    """pydantic-ai's OpenAIResponsesModel and OpenAIChatModel call the tool through the gateway."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=stack.gateway.url + "/v1", api_key=API_KEY)
    klass = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
    model = klass(TWIN_MODEL, provider=provider)
    seen: list[str] = []
    agent = Agent(model, instructions="Help the customer.",
                  model_settings={"extra_body": {"rehearsal": {"budget": 2}}})  # fmt: skip

    @agent.tool_plain
    def get_order(order_id: str) -> str:
        """Look up an order by id."""
        seen.append(order_id)
        return json.dumps({"order_id": order_id, "status": "delivered"})

    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    with contextlib.suppress(UsageLimitExceeded):
        agent.run_sync(_ask(stack), usage_limits=UsageLimits(request_limit=2))
    _close_where_run_sync_ran(provider.client)
    assert seen


@pytest.mark.parametrize("responses_api", [False, True], ids=["chat", "responses"])
def test_langchain_chat_openai(stack: Stack, responses_api: bool) -> None:
    """LangChain ChatOpenAI.bind_tools: invoke gives tool_calls, stream gives tool_call_chunks."""
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=TWIN_MODEL, base_url=stack.gateway.url + "/v1", api_key=API_KEY,
        use_responses_api=responses_api, extra_body={"rehearsal": {"budget": 2}},
    )  # fmt: skip
    bound = llm.bind_tools([{"type": "function", "function": _order_tool_schema(stack)}])
    message = bound.invoke(_ask(stack))
    assert [call["name"] for call in message.tool_calls] == ["get_order"]
    chunks = list(bound.stream(_ask(stack)))
    pieces = [piece for chunk in chunks for piece in chunk.tool_call_chunks]
    assert pieces
    assert pieces[0]["name"] == "get_order"


# --------------------------------------------------------------------------- OpenAI Agents SDK


def _world_tools(stack: Stack, state: dict[str, Any], called: list[str]) -> list[Any]:
    """Every retail tool as an Agents SDK FunctionTool that runs the world's real Python."""
    from agents import FunctionTool

    def function_tool(name: str) -> Any:
        spec = stack.world.tools[name]

        async def invoke(context: Any, arguments: str) -> str:
            called.append(name)
            return json.dumps(stack.world.call(state, name, json.loads(arguments or "{}")))

        return FunctionTool(
            name=name, description=spec.description, params_json_schema=spec.parameters,
            on_invoke_tool=invoke, strict_json_schema=False,
        )  # fmt: skip

    return [function_tool(name) for name in stack.world.tools]


def _close_where_run_sync_ran(client: Any) -> None:
    """Close an ``AsyncOpenAI`` client on the thread's default loop, where ``run_sync`` (the
    Agents SDK's and pydantic-ai's alike) ran it: its connections belong to that loop, and left
    open they become an unclosed-transport warning in whichever later test the collector
    meets them (a fault test, say)."""
    asyncio.get_event_loop().run_until_complete(client.close())


def _agents_run(stack: Stack, api: str, streamed: bool, knobs: dict[str, Any]) -> dict[str, Any]:
    """Run the exchange task with the Agents SDK; what the tools saw and what the run said."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
    )
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    task = stack.world.tasks[6]
    state, called = stack.world.new_state(task), []
    url = stack.gateway.url + "/v1"

    def agent_and_config() -> tuple[Any, Any, Any]:
        # One client per run, made for it: an AsyncOpenAI client's connections belong to the
        # event loop that opened them, and the provider would otherwise share one process-wide
        # httpx client across run_sync's loop and asyncio.run's.
        client = AsyncOpenAI(api_key=API_KEY, base_url=url, max_retries=0)
        provider = OpenAIProvider(openai_client=client)
        model: Any = TWIN_MODEL  # a name: the provider's default model class plays it
        assert isinstance(provider.get_model(TWIN_MODEL), OpenAIResponsesModel)
        if api == "chat":
            model = OpenAIChatCompletionsModel(model=TWIN_MODEL, openai_client=client)
        agent = Agent(
            name="retail", instructions=stack.world.system_prompt, model=model,
            tools=_world_tools(stack, state, called),
            model_settings=ModelSettings(extra_body={"rehearsal": knobs} if knobs else None),
        )  # fmt: skip
        return agent, RunConfig(model_provider=provider, tracing_disabled=True), client

    events: list[str] = []
    if streamed:

        async def stream() -> Any:
            agent, config, client = agent_and_config()
            try:
                result = Runner.run_streamed(
                    agent, task.instruction, run_config=config, max_turns=8
                )
                async for event in result.stream_events():
                    events.append(getattr(event, "name", None) or event.type)
                return result
            finally:
                await client.close()

        result = asyncio.run(stream())
    else:
        agent, config, client = agent_and_config()
        result = Runner.run_sync(agent, task.instruction, run_config=config, max_turns=8)
        _close_where_run_sync_ran(client)
    return {"called": called, "reached": task.reached(state), "plan": [c.name for c in task.plan],
            "output": result.final_output, "events": events}  # fmt: skip


@pytest.mark.parametrize("knobs", [{}, {"budget": 2}], ids=["off", "rehearsed"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run_sync", "run_streamed"])
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_openai_agents_sdk(
    exact_stack: Stack, api: str, streamed: bool, knobs: dict[str, Any]
) -> None:
    """The Agents SDK (default Responses model and chat model) runs a whole task through us."""
    before = metric_value(exact_stack.gateway.url, "rehearsal_gateway_requests_total",
                          mode="parallel")  # fmt: skip
    run = _agents_run(exact_stack, api, streamed, knobs)
    assert run["called"] == run["plan"]
    assert run["reached"]
    assert isinstance(run["output"], str)
    assert run["output"]
    if streamed:
        assert run["events"].count("tool_called") == len(run["plan"])
        assert run["events"].count("tool_output") == len(run["plan"])
        assert "raw_response_event" in run["events"]
    rehearsed = metric_value(exact_stack.gateway.url, "rehearsal_gateway_requests_total",
                             mode="parallel") - before  # fmt: skip
    assert (rehearsed > 0) == bool(knobs)


# --------------------------------------------------------------------------- LiteLLM


@pytest.mark.parametrize("knobs", [{}, {"budget": 2}], ids=["off", "rehearsed"])
@pytest.mark.parametrize("provider", ["hosted_vllm", "openai"])
def test_litellm(
    exact_stack: Stack, provider: str, knobs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LiteLLM's vLLM and OpenAI providers: tool calls whole and streamed, knobs in extra_body."""
    # Read at import: LiteLLM would otherwise fetch its model price list from the internet.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    task = exact_stack.world.tasks[6]
    gateway = exact_stack.gateway.url
    kwargs: dict[str, Any] = {
        "model": f"{provider}/{TWIN_MODEL}", "api_base": gateway + "/v1", "api_key": API_KEY,
        "messages": [{"role": "system", "content": exact_stack.world.system_prompt},
                     {"role": "user", "content": task.instruction}],
        "tools": exact_stack.world.tool_schemas(),
        "num_retries": 0,
    }  # fmt: skip
    if knobs:
        kwargs["extra_body"] = {"rehearsal": knobs}
    before = metric_value(gateway, "rehearsal_gateway_requests_total", mode="parallel")
    relayed = metric_value(gateway, "rehearsal_gateway_requests_total", mode="passthrough")
    whole = litellm.completion(**kwargs)
    call = whole.choices[0].message.tool_calls[0]
    assert whole.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == (
        task.plan[0].name, task.plan[0].arguments)  # fmt: skip
    chunks = list(litellm.completion(**kwargs, stream=True))
    deltas = [choice.delta for chunk in chunks for choice in chunk.choices]
    pieces = [piece for delta in deltas for piece in delta.tool_calls or []]
    assert pieces[0].function.name == task.plan[0].name
    arguments = "".join(piece.function.arguments or "" for piece in pieces)
    assert json.loads(arguments) == task.plan[0].arguments
    assert [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason] == [
        "tool_calls"]  # fmt: skip
    rehearsed = metric_value(gateway, "rehearsal_gateway_requests_total", mode="parallel")
    passed = metric_value(gateway, "rehearsal_gateway_requests_total", mode="passthrough")
    # Both calls rehearsed when the knobs reached the gateway, both passed through otherwise.
    assert (rehearsed - before, passed - relayed) == ((2, 0) if knobs else (0, 2))

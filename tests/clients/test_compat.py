"""Agent frameworks, unchanged but for ``base_url``, against the gateway (twin behind it).

Each case drives the framework's own model class to the point where the model commits a tool
call: pydantic-ai's Responses and chat models; LangChain's ``ChatOpenAI`` with ``bind_tools``
(streamed ``tool_call_chunks``) and with ``use_responses_api=True``.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients.conftest import API_KEY
from tests.server.conftest import TWIN_MODEL
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

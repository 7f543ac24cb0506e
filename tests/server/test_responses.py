"""``POST /v1/responses`` through the gateway with the official SDK: rehearsed and relayed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack, running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Twin (retail world) + gateway + Redis."""
    logs = tmp_path_factory.mktemp("responses")
    with running_stack(logs, twin_args=("--skill", "0.5", "--fidelity", "1.0", "--seed", "3")) as s:
        yield s


def _tools(stack: Stack) -> list[dict[str, Any]]:
    """The world's tools in the Responses API's flat shape."""
    return [{"type": "function", **tool["function"]} for tool in stack.world.tool_schemas()]


def _ask(stack: Stack) -> str:
    return stack.world.tasks[6].instruction


def test_rehearsed_response_has_function_calls_and_the_summary(stack: Stack) -> None:
    """With a budget, the answer is a response whose function_call was rehearsed (summary)."""
    client = stack.sdk()
    response = client.responses.create(
        model=TWIN_MODEL, input=_ask(stack), tools=_tools(stack),
        extra_body={"rehearsal": {"budget": 2, "trace": True}},
    )  # fmt: skip
    calls = [item for item in response.output if item.type == "function_call"]
    assert response.status == "completed"
    assert calls
    assert calls[0].call_id.startswith("call_")
    summary = (response.model_extra or {})["rehearsal"]
    assert summary["mode"] == "parallel"
    assert summary["budget"] == 2
    assert "trace" in summary  # asked for with trace: true (empty after an early exit)
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    trace = httpx.get(f"{stack.gateway.url}/v1/rehearsals/{summary['id']}", timeout=10).json()
    assert trace["committed"]["tool_calls"][0]["id"] == calls[0].call_id


def test_header_knobs_rehearse_too(stack: Stack) -> None:
    """``X-Rehearsal-Budget`` alone turns rehearsal on for a Responses request, as for chat."""
    client = stack.sdk()
    response = client.responses.create(
        model=TWIN_MODEL, input=_ask(stack), tools=_tools(stack),
        extra_headers={"X-Rehearsal-Budget": "2"},
    )  # fmt: skip
    assert (response.model_extra or {})["rehearsal"]["budget"] == 2


def test_stream_is_the_responses_event_sequence(stack: Stack) -> None:
    """``stream: true`` emits created, in_progress, item events, argument deltas, completed."""
    client = stack.sdk()
    with client.responses.stream(
        model=TWIN_MODEL, input=_ask(stack), tools=_tools(stack),
        extra_body={"rehearsal": {"budget": 2}},
    ) as stream:  # fmt: skip
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls
    assert calls[0].call_id.startswith("call_")
    assert (final.model_extra or {})["rehearsal"]["budget"] == 2


def test_function_call_output_is_fed_back(stack: Stack) -> None:
    """The real result sent back as ``function_call_output`` is matched to what was imagined."""
    client = stack.sdk()
    first = client.responses.create(
        model=TWIN_MODEL, input=_ask(stack), tools=_tools(stack),
        extra_body={"rehearsal": {"budget": 2}},
    )  # fmt: skip
    call = next(item for item in first.output if item.type == "function_call")
    follow_up: list[Any] = [
        {"role": "user", "content": _ask(stack)},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id,
         "output": '{"order_id": "W1004", "status": "delivered"}'},
    ]  # fmt: skip
    second = client.responses.create(
        model=TWIN_MODEL, input=follow_up, tools=_tools(stack),
        extra_body={"rehearsal": {"budget": 2}},
    )  # fmt: skip
    feedback = (second.model_extra or {})["rehearsal"]["feedback"]
    assert [item["tool_call_id"] for item in feedback] == [call.call_id]
    assert feedback[0]["tool"] == call.name
    assert feedback[0]["real_ms"] >= 0
    trace = httpx.get(f"{stack.gateway.url}/v1/rehearsals/{feedback[0]['rehearsal_id']}",
                      timeout=10).json()  # fmt: skip
    assert trace["feedback"][0]["tool_call_id"] == call.call_id  # the real result, kept


def test_without_rehearsal_the_engine_answers(stack: Stack) -> None:
    """No budget (and no tools) relays to the engine: its response, no rehearsal object."""
    client = stack.sdk()
    response = client.responses.create(model=TWIN_MODEL, input="hello", max_output_tokens=16)
    assert response.id.startswith("resp_")
    assert "rehearsal" not in (response.model_extra or {})
    with client.responses.stream(model=TWIN_MODEL, input="hello", max_output_tokens=16) as s:
        kinds = [event.type for event in s]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"


def test_previous_response_id_with_rehearsal_is_a_clear_400(stack: Stack) -> None:
    """A rehearsed request cannot continue a stored response: 400 naming the parameter."""
    client = stack.sdk()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=TWIN_MODEL, input=_ask(stack), tools=_tools(stack),
            previous_response_id="resp_123", extra_body={"rehearsal": {"budget": 2}},
        )  # fmt: skip
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"input": 3}, "input", id="input-not-text-or-items"),
        pytest.param({"input": [{"type": "web_page"}]}, "input[0].type", id="unknown-item"),
        pytest.param({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", id="role"),
    ],
)
def test_bad_input_is_a_400(stack: Stack, body: dict[str, Any], param: str) -> None:
    """Input the gateway cannot read as a conversation is a 400 in the OpenAI envelope."""
    tools = _tools(stack)
    answer = httpx.post(
        stack.gateway.url + "/v1/responses",
        json={"model": TWIN_MODEL, "tools": tools, "rehearsal": {"budget": 2}, **body},
        timeout=30,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param

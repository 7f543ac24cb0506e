"""Fuzzing the twin's chat route in-process: any JSON body gets a 200 or vLLM's 4xx, never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from rehearsal_gateway.twin.app import create_app
from rehearsal_gateway.twin.config import TwinSettings
from rehearsal_gateway.twin.worlds import load_world
from tests.twin.conftest import rehearsal_request, rehearsal_text

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = ("type", "properties", "required", "enum", "items", "minimum", "maximum")
_schema = st.recursive(
    st.dictionaries(st.sampled_from(_KEYS), _json, max_size=4),
    lambda inner: st.dictionaries(
        st.sampled_from(_KEYS), inner | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
_tool = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.text(min_size=1, max_size=8)}, optional={"parameters": _schema | _json}
    )}
)  # fmt: skip
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "x"])},
    optional={
        "content": st.none() | st.text() | st.lists(_json, max_size=3),
        "tool_calls": st.lists(_json, max_size=2),
        "tool_call_id": st.text(max_size=8),
    },
)
_FIELDS = {
    "tools": st.lists(_tool, max_size=3) | _json,
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | _json,
    "n": st.integers(-2, 20) | _json,
    "seed": st.integers() | _json,
    "temperature": st.floats(-1, 3) | _json,
    "top_p": _json,
    "top_k": _json,
    "min_p": _json,
    "max_tokens": st.integers(-5, 50_000) | _json,
    "max_completion_tokens": _json,
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3) | _json,
    "stream": st.booleans() | _json,
    "stream_options": _json,
    "chat_template_kwargs": _json,
    "parallel_tool_calls": _json,
    "model": st.none() | st.just("EnvACE-Qwen3-8B") | _json,
}
_bodies = (
    st.fixed_dictionaries(
        {"messages": st.lists(_message, min_size=1, max_size=4) | _json},
        optional=_FIELDS,  # type: ignore[arg-type]
    )
    | _json
)


@pytest.fixture(scope="module")
def client() -> Any:
    with TestClient(create_app(TwinSettings(seed=3)), raise_server_exceptions=False) as c:
        yield c


def _check(client: TestClient, body: Any, path: str = "/v1/chat/completions") -> None:
    response = client.post(path, content=json.dumps(body))
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == response.status_code


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_bodies)
def test_random_bodies_never_500(client: TestClient, body: Any) -> None:
    """Random JSON bodies (odd tool schemas, odd messages, odd fields) never produce a 500."""
    _check(client, body)


_item = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning"])
        | _json,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | _json,
        "content": st.text(max_size=8) | st.lists(_json, max_size=2) | _json,
        "call_id": st.text(max_size=6) | _json,
        "name": st.sampled_from(["get_order", ""]) | _json,
        "arguments": st.sampled_from(['{"order_id": "W1001"}', "{}", "x"]) | _json,
        "output": st.text(max_size=8) | _json,
    },
)
_responses_bodies = st.fixed_dictionaries(
    {"input": st.text(max_size=8) | st.lists(_item | _json, max_size=4) | _json},
    optional={
        "instructions": st.text(max_size=8) | _json,
        "tools": st.lists(
            st.fixed_dictionaries({"type": st.just("function"), "name": st.text(max_size=6)},
                                  optional={"parameters": _schema | _json}), max_size=2,
        ) | _json,
        "tool_choice": st.sampled_from(["auto", "none", "required"]) | _json,
        "max_output_tokens": st.integers(-2, 300) | _json,
        "stream": st.booleans(),
    },
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_responses_bodies | _json)
def test_random_responses_bodies_never_500(client: TestClient, body: Any) -> None:
    """Random Responses bodies (odd input items, tools, fields) get a 200 or a 4xx, never a 500."""
    _check(client, body, "/v1/responses")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    path=st.sampled_from(["/v1/completions", "/tokenize", "/detokenize", "/v1/messages",
                          "/v1/messages/count_tokens"]),
    body=st.fixed_dictionaries(
        {}, optional={"prompt": st.text(max_size=8) | _json, "tokens": _json,
                      "messages": st.lists(_message, max_size=2) | _json,
                      "max_tokens": st.integers(-2, 40) | _json, "stream": st.booleans(),
                      "system": st.text(max_size=8) | _json, "tools": _json,
                      "tool_choice": _json},
    ) | _json,
)  # fmt: skip
def test_random_surface_bodies_never_500(client: TestClient, path: str, body: Any) -> None:
    """Completions, tokenize, detokenize and messages answer any JSON body: a 200 or a 4xx."""
    _check(client, body, path)


_RETAIL = load_world("retail")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    history=st.lists(_message, max_size=3),
    n=st.integers(1, 3),
    note=st.text(max_size=60),
    stream=st.booleans(),
)
def test_world_conversations_never_500(
    client: TestClient, history: list[Any], n: int, note: str, stream: bool
) -> None:
    """A world task with random history and a random memory note never produces a 500."""
    messages = [
        {"role": "system", "content": _RETAIL.system_prompt},
        {"role": "user", "content": _RETAIL.tasks[0].instruction},
        *history,
        {"role": "user", "content": "<rehearsal_memory>\n" + note},
    ]
    body = {"messages": messages, "tools": _RETAIL.tool_schemas(), "n": n, "stream": stream}
    _check(client, body)


def _tools(parameters: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


_HI = [{"role": "user", "content": "hi"}]
_ODD = [
    pytest.param({"type": "object", "properties": [1, 2]}, id="properties-list"),
    pytest.param({"type": "object", "required": 5}, id="required-int"),
    pytest.param({"type": "object", "required": [[1]]}, id="required-unhashable"),
    pytest.param({"type": [[1]]}, id="type-unhashable"),
    pytest.param({"type": {"a": 1}}, id="type-object"),
    pytest.param(
        {
            "type": "object",
            "required": ["a"],
            "properties": {"a": {"type": "integer", "minimum": "x"}},
        },
        id="minimum-string",
    ),
    pytest.param(
        {"type": "object", "required": ["a"], "properties": {"a": {"enum": {"x": 1}}}},
        id="enum-object",
    ),
    pytest.param(
        {"type": "object", "required": ["a"], "properties": {"a": {"enum": "xyz"}}},
        id="enum-string",
    ),
    pytest.param(
        {"type": "object", "required": ["a"], "properties": {"a": {"type": "array", "items": [1]}}},
        id="items-list",
    ),
    pytest.param({"type": "object", "properties": {"a": 5}, "required": ["a"]}, id="property-int"),
]


@pytest.mark.parametrize("parameters", _ODD)
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_odd_tool_schemas_never_500(client: TestClient, parameters: Any, seed: int) -> None:
    """Tool parameter schemas that are not sound JSON Schema are answered, never a 500."""
    _check(client, {"messages": _HI, "tools": _tools(parameters), "seed": seed})
    _check(client, {"messages": _HI, "tools": _tools(parameters), "seed": seed,
                    "tool_choice": "required"})  # fmt: skip


@pytest.mark.parametrize(
    "calls",
    [
        pytest.param(["x"], id="call-string"),
        pytest.param([{"function": "x"}], id="function-string"),
        pytest.param([{"function": [1]}], id="function-list"),
        pytest.param([{"function": {"name": "f", "arguments": 5}}], id="arguments-int"),
        pytest.param([{"function": {"name": "f", "arguments": ["a"]}}], id="arguments-list"),
    ],
)
def test_odd_assistant_tool_calls_never_500(client: TestClient, calls: list[Any]) -> None:
    """An assistant turn with malformed tool_calls, in a world task or not, never gives a 500."""
    retail = _RETAIL.tool_schemas()
    user = {"role": "user", "content": _RETAIL.tasks[0].instruction}
    for tools in (_tools({}), retail):
        for tail in ([], [{"role": "tool", "content": "{}", "tool_call_id": "x"}]):
            messages = [user, {"role": "assistant", "tool_calls": calls}, *tail]
            _check(client, {"messages": messages, "tools": tools})


@pytest.mark.parametrize("parameters", _ODD)
@pytest.mark.parametrize("arguments", [{"a": 1}, {}, {"a": [1]}, "[1]", "not json"])
def test_odd_schemas_in_rehearsal_prompts_never_500(
    client: TestClient, parameters: Any, arguments: Any
) -> None:
    """A rehearsal prompt whose tool schemas are odd is answered, never with a 500."""
    schema = parameters if isinstance(parameters, dict) else {}
    text = rehearsal_text(_tools(parameters), "User: hi", "f", arguments, schema=schema)
    for seed in range(4):
        _check(client, rehearsal_request(text, seed=seed))

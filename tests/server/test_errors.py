"""One error table: status, envelope and SSE event per error; the wire models' field policy."""

from __future__ import annotations

import orjson
import pytest

from rehearsal_gateway.server.chat.service import decode_chat_request
from rehearsal_gateway.server.errors import (
    EngineFailed,
    EngineOverloaded,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
    ErrorKind,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    classify,
    envelope,
    error_status_and_body,
    sse_error_event,
)
from rehearsal_gateway.server.protocol import ChatCompletion, ChatCompletionRequest


@pytest.mark.parametrize(
    ("error", "status", "type_", "code"),
    [
        pytest.param(InvalidRequest("x"), 400, "invalid_request_error", None, id="invalid"),
        pytest.param(
            PayloadTooLarge("x"), 413, "invalid_request_error", "request_too_large", id="too-large"
        ),
        pytest.param(Unauthorized("x"), 401, "authentication_error", "invalid_api_key", id="401"),
        pytest.param(NotFound("x"), 404, "not_found_error", "not_found", id="not-found"),
        pytest.param(
            ModelNotFound("x"), 404, "invalid_request_error", "model_not_found", id="model"
        ),
        pytest.param(
            MethodNotAllowed("x"), 405, "invalid_request_error", "method_not_allowed", id="method"
        ),
        pytest.param(
            EngineUnavailable("x"),
            503,
            "service_unavailable",
            "engine_unavailable",
            id="unavailable",
        ),
        pytest.param(
            EngineOverloaded("x"), 503, "service_unavailable", "engine_overloaded", id="overloaded"
        ),
        pytest.param(EngineFailed("x"), 502, "upstream_error", "engine_error", id="failed"),
        pytest.param(EngineTimeout("x"), 504, "timeout_error", "engine_timeout", id="timeout"),
        pytest.param(
            EngineRejected(422, "x", type_="BadRequestError", code=422),
            422,
            "BadRequestError",
            422,
            id="engine-4xx",
        ),
        pytest.param(GatewayError("x"), 500, "internal_error", "internal_error", id="base"),
    ],
)
def test_table_row(error: GatewayError, status: int, type_: str, code: object) -> None:
    """Each error type has its status, type and code, in the OpenAI envelope."""
    got_status, body = error_status_and_body(error)
    assert got_status == status
    assert orjson.loads(body) == {
        "error": {"message": "x", "type": type_, "param": None, "code": code}
    }


def test_param_and_explicit_code_win() -> None:
    """An error's own param and code are kept in the envelope."""
    error = InvalidRequest("bad", param="messages[0].role", code="bad_role")
    assert envelope(error)["error"] == {
        "message": "bad",
        "type": "invalid_request_error",
        "param": "messages[0].role",
        "code": "bad_role",
    }


def test_sse_error_event_frames_the_envelope() -> None:
    """The stream error is one ``data:`` event with the envelope, then ``[DONE]``."""
    event = sse_error_event(EngineFailed("cut"))
    first, done, tail = event.split(b"\n\n")
    assert orjson.loads(first.removeprefix(b"data: "))["error"]["code"] == "engine_error"
    assert (done, tail) == (b"data: [DONE]", b"")


def test_subclass_without_a_row_uses_its_parent() -> None:
    """The lookup walks the MRO, so a new subclass needs no new row to be answered."""

    class StoreDown(EngineUnavailable):
        pass

    assert classify(StoreDown("x")) == ErrorKind(503, "service_unavailable", "engine_unavailable")


def test_unknown_fields_are_kept_at_every_level() -> None:
    """Policy: unknown fields survive validation in requests, messages, tools and responses."""
    request = ChatCompletionRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x", "vendor": 1}],
            "tools": [{"type": "function", "function": {"name": "f", "x_meta": True}, "x_tool": 2}],
            "priority": 5,
        }
    )
    assert request.model_extra == {"priority": 5}
    assert request.messages[0].model_extra == {"vendor": 1}
    assert request.tools is not None
    assert request.tools[0].model_extra == {"x_tool": 2}
    assert request.tools[0].function.model_extra == {"x_meta": True}
    answer = ChatCompletion.model_validate(
        {
            "id": "c",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "", "reasoning": "r"},
                    "stop_reason": None,
                }
            ],
            "prompt_token_ids": None,
        }
    )
    assert answer.model_extra == {"prompt_token_ids": None}
    assert answer.choices[0].message.reasoning == "r"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param(
            {"messages": [{"role": "user", "content": "x"}], "seed": "1"},
            "seed",
            id="no-string-to-int",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "x"}], "stream": 1},
            "stream",
            id="no-int-to-bool",
        ),
        pytest.param(
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]},
            "messages[0].tool_calls[0].function",
            id="tool-call-shape",
        ),
    ],
)
def test_known_fields_are_strict(body: dict[str, object], param: str) -> None:
    """Known fields are not coerced: a wrong type is a 400 naming the parameter."""
    with pytest.raises(InvalidRequest) as caught:
        decode_chat_request(orjson.dumps(body))
    assert caught.value.param == param

"""Invalid requests: vLLM's status codes and its ``{"error": {...}}`` envelope."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.contract.conftest import Engine
from tests.contract.wire import HELLO

INVALID_BODIES = [
    pytest.param({}, "messages", id="messages-missing"),
    pytest.param({"messages": "hello"}, "messages", id="messages-not-a-list"),
    pytest.param({"messages": HELLO, "temperature": -1}, "temperature", id="temperature-negative"),
    pytest.param({"messages": HELLO, "max_tokens": -1}, "max_tokens", id="max-tokens-negative"),
    pytest.param({"messages": HELLO, "n": 0}, "n", id="n-zero"),
    pytest.param({"messages": HELLO, "tool_choice": "required"}, "tool_choice", id="no-tools"),
    pytest.param({"messages": HELLO, "tool_choice": "auto"}, "tool_choice", id="auto-no-tools"),
    pytest.param({"messages": HELLO, "n": 2, "temperature": 0}, "n", id="greedy-n"),
]


def _check_envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"], body
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["type"], str)
    assert error["code"] == status
    return dict(error)


@pytest.mark.parametrize(("fields", "param"), INVALID_BODIES)
def test_invalid_request_envelope(
    engine: Engine, http: httpx.Client, fields: dict[str, Any], param: str
) -> None:
    """An invalid chat request gets 400 and the error envelope, naming the field when it can."""
    response = http.post("/v1/chat/completions", json={"model": engine.model, **fields})
    error = _check_envelope(response, 400)
    assert error["param"] is None or param in error["param"], error


def test_malformed_json_is_400(engine: Engine, http: httpx.Client) -> None:
    """A body that is not JSON gets 400 and the error envelope, not a 422 or a crash."""
    response = http.post(
        "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    _check_envelope(response, 400)


def test_invalid_stream_request_is_plain_json(engine: Engine, http: httpx.Client) -> None:
    """A streaming request that fails validation gets a JSON 400 before any SSE starts."""
    body = {"model": engine.model, "messages": HELLO, "temperature": -1, "stream": True}
    _check_envelope(http.post("/v1/chat/completions", json=body), 400)


def test_unknown_model_is_404(engine: Engine, http: httpx.Client) -> None:
    """Asking for a model the engine does not serve gets 404 ``NotFoundError`` naming ``model``."""
    body = {"model": "no-such-model", "messages": HELLO, "max_tokens": 2}
    error = _check_envelope(http.post("/v1/chat/completions", json=body), 404)
    assert error["type"] == "NotFoundError"
    assert error["param"] == "model"


def test_sdk_raises_bad_request(engine: Engine, client: OpenAI) -> None:
    """The OpenAI SDK turns the 400 into ``BadRequestError`` carrying the error's message."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=engine.model, messages=HELLO, temperature=-1)
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict)
    assert caught.value.body.get("message")


def test_max_tokens_beyond_context_is_400(engine: Engine, http: httpx.Client) -> None:
    """``max_tokens`` above the advertised ``max_model_len`` gets 400 naming ``max_tokens``."""
    max_model_len = http.get("/v1/models").json()["data"][0]["max_model_len"]
    body = {"model": engine.model, "messages": HELLO, "max_tokens": max_model_len + 1}
    error = _check_envelope(http.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == "max_tokens"
    assert error["type"] == "BadRequestError"
    assert f"max_model_len={max_model_len}" in error["message"]


def test_tool_choice_without_tools_names_the_parameter(engine: Engine, http: httpx.Client) -> None:
    """``tool_choice`` without ``tools`` is a ``BadRequestError`` naming ``tool_choice``."""
    body = {"model": engine.model, "messages": HELLO, "tool_choice": "required"}
    error = _check_envelope(http.post("/v1/chat/completions", json=body), 400)
    assert error["type"] == "BadRequestError"
    assert error["param"] == "tool_choice"
    assert error["message"].startswith("When using `tool_choice`, `tools` must be set.")


def test_unparsable_field_is_fastapi_bad_request(engine: Engine, http: httpx.Client) -> None:
    """A field of the wrong type gets FastAPI's ``Bad Request`` naming ``body.<field>``."""
    body = {"model": engine.model, "messages": HELLO, "n": "abc"}
    error = _check_envelope(http.post("/v1/chat/completions", json=body), 400)
    assert error["type"] == "Bad Request"
    assert error["param"] == "body.n"
    assert error["message"].startswith("1 validation error:")


_HELLO_JSON = '[{"role": "user", "content": "Hello!"}]'
UNION_FIELDS = [
    pytest.param('"stop": 5', "body.stop", id="stop-int"),
    pytest.param('"seed": "x"', "body.seed", id="seed-string"),
]


@pytest.mark.parametrize(("field", "param"), UNION_FIELDS)
def test_validation_param_drops_union_branches(
    engine: Engine, http: httpx.Client, field: str, param: str
) -> None:
    """A field of a union type that fails to parse is named as vLLM names it: no branch tags."""
    content = f'{{"model": "{engine.model}", "messages": {_HELLO_JSON}, "max_tokens": 2, {field}}}'
    response = http.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    error = _check_envelope(response, 400)
    assert (error["type"], error["param"]) == ("Bad Request", param)
    assert f"'loc': '{param}'" in error["message"]


BOUNDS = [
    pytest.param('"seed": 9223372036854775808', "Bad Request", "body.seed",
                 "'ctx': {'le': 9223372036854775807}", id="seed-over-int64"),
    pytest.param('"seed": -9223372036854775809', "Bad Request", "body.seed",
                 "'ctx': {'ge': -9223372036854775808}", id="seed-under-int64"),
    pytest.param('"n": 16385', "BadRequestError", None,
                 "n must be at most 16384, got 16385.", id="n-over-max"),
    pytest.param('"temperature": NaN', "BadRequestError", "temperature",
                 "temperature must be a finite number, got nan.", id="temperature-nan"),
    pytest.param('"temperature": Infinity', "BadRequestError", "temperature",
                 "temperature must be a finite number, got inf.", id="temperature-inf"),
    pytest.param('"stop": ["a", "b", "c", "d", "e"]', "Bad Request", "body.stop",
                 "List should have at most 4 items", id="stop-five-strings"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "kind", "param", "words"), BOUNDS)
def test_out_of_bounds_values_are_400(
    engine: Engine, http: httpx.Client, field: str, kind: str, param: str | None, words: str
) -> None:
    """vLLM's bounds on seed (int64), n (16384), temperature (finite) and stop (4 strings) hold."""
    content = f'{{"model": "{engine.model}", "messages": {_HELLO_JSON}, "max_tokens": 2, {field}}}'
    response = http.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    error = _check_envelope(response, 400)
    assert (error["type"], error["param"]) == (kind, param)
    assert words in error["message"]

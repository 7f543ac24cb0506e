"""Bad input gets a clear 4xx envelope, never a 500 or a stack trace (hypothesis fuzz included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rehearsal_gateway.server.chat.precheck import HeadPrecheck
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway
from tests.support.procs import cli_argv, free_port, start_http_server

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with a 64 KiB body limit in front of one twin (shared by this module)."""
    logs = tmp_path_factory.mktemp("bad-input")
    twin_port = free_port()
    twin = start_http_server(
        cli_argv("twin", "--port", str(twin_port)), port=twin_port, log_path=logs / "twin.log"
    )
    proc: InProcessGateway | None = None
    try:
        proc = inprocess.start_gateway(
            ["--engine", f"{twin.url}/v1"],
            log_path=logs / "gateway.log",
            env={**FAST_HEALTH, "RGW_MAX_BODY_BYTES": str(LIMIT)},
        )
        yield proc.url
    finally:
        if proc is not None:
            proc.stop()
        twin.stop()


@pytest.fixture(scope="module")
def client(gateway: str) -> Iterator[httpx.Client]:
    """One HTTP client on the gateway, shared by the fuzzed examples."""
    with httpx.Client(base_url=gateway, timeout=30) as shared:
        yield shared


def post(url: str, content: bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(url + path, content=content, headers=headers, timeout=30)


def assert_envelope(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert "Traceback" not in response.text
    if param is not None:
        assert error["param"] == param


def valid(**changes: Any) -> bytes:
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}], **changes}
    return orjson.dumps(body)


@pytest.mark.parametrize(
    ("content", "status", "param"),
    [
        pytest.param(b"{not json", 400, None, id="malformed-json"),
        pytest.param(b"", 400, None, id="empty-body"),
        pytest.param(b"[1, 2]", 400, None, id="not-an-object"),
        pytest.param(orjson.dumps({"model": TWIN_MODEL}), 400, "messages", id="no-messages"),
        pytest.param(valid(messages=[]), 400, "messages", id="empty-messages"),
        pytest.param(valid(temperature="hot"), 400, "temperature", id="temperature-string"),
        pytest.param(valid(stream="yes"), 400, "stream", id="stream-string"),
        pytest.param(valid(n=0), 400, "n", id="n-zero"),
        pytest.param(valid(top_k=1.5), 400, "top_k", id="vllm-extra-wrong-type"),
        pytest.param(
            valid(messages=[{"role": "wizard", "content": "x"}]), 400, None, id="unknown-role"
        ),
        pytest.param(
            valid(messages=[{"role": "user", "content": 3}]),
            400,
            "messages[0].content",
            id="content-number",
        ),
        pytest.param(
            valid(messages=[{"role": "tool", "content": "x"}]),
            400,
            "messages[0].tool_call_id",
            id="tool-without-id",
        ),
        pytest.param(
            valid(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
            400,
            "tools[0].function.parameters",
            id="tool-schema-not-object",
        ),
        pytest.param(
            valid(
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string"}},
                    }
                ]
            ),
            400,
            "tools[0].function.parameters",
            id="tool-schema-not-object-type",
        ),
        pytest.param(
            valid(
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "dict", "properties": {}}},
                    }
                ]
            ),
            400,
            "tools[0].function.parameters",
            id="tool-schema-bfcl-dict",
        ),
        pytest.param(valid(tools=[{"type": "retrieval"}]), 400, None, id="tool-wrong-type"),
        pytest.param(valid(tool_choice="sometimes"), 400, "tool_choice", id="tool-choice-bad"),
        pytest.param(valid(model="gpt-nope"), 404, "model", id="unknown-model"),
        pytest.param(valid(pad="x" * LIMIT), 413, None, id="body-over-limit"),
    ],
)
def test_bad_request_gets_its_envelope(
    gateway: str, content: bytes, status: int, param: str | None
) -> None:
    """Each kind of bad request maps to its status and an OpenAI error envelope."""
    assert_envelope(post(gateway, content), status, param)


def test_bfcl_style_schema_is_told_how_to_convert(gateway: str) -> None:
    """A BFCL/Gorilla doc ("type": "dict") gets a 400 naming JSON Schema types and the converter."""
    doc = {
        "name": "cd",
        "parameters": {"type": "dict", "properties": {"folder": {"type": "string"}}},
    }
    response = post(gateway, valid(tools=[{"type": "function", "function": doc}]))
    assert_envelope(response, 400, "tools[0].function.parameters")
    message = response.json()["error"]["message"]
    assert "not 'dict'" in message
    assert "dict -> object" in message
    assert "convert_to_tool(functions, GORILLA_TO_OPENAPI" in message


def test_chunked_body_over_limit_is_413(gateway: str) -> None:
    """A body sent without Content-Length is still cut off at the limit."""

    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 1024 + 2):
            yield b" " * 1024

    response = httpx.post(gateway + "/v1/chat/completions", content=chunks(), timeout=30)
    assert_envelope(response, 413)


def test_unknown_route_and_method(gateway: str) -> None:
    """Unknown paths are 404 and wrong methods 405, both as envelopes."""
    assert_envelope(httpx.get(gateway + "/v1/nothing-here"), 404)
    assert_envelope(httpx.get(gateway + "/v1/chat/completions"), 405)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
roles = st.sampled_from(["system", "user", "assistant", "tool", "developer", "bogus", ""])
messages = st.lists(
    st.fixed_dictionaries(
        {"role": roles},
        optional={
            "content": st.none() | st.text(max_size=20) | json_values,
            "tool_call_id": st.text(max_size=6),
            "tool_calls": json_values,
        },
    ),
    max_size=3,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from([TWIN_MODEL, "other"]) | json_values,
        "messages": messages | json_values,
        "tools": json_values,
        "tool_choice": st.sampled_from(["auto", "none", "required", "x"]) | json_values,
        "temperature": json_values,
        "max_tokens": st.integers(-5, 40) | json_values,
        "n": st.integers(-1, 3) | json_values,
        "stream": st.booleans() | json_values,
        "stop": json_values,
        "seed": json_values,
        "top_k": json_values,
    },
)


def encode(value: Any) -> bytes:
    # The standard library also writes what orjson refuses: huge integers, Infinity.
    return json.dumps(value).encode()


bodies = fields.map(encode) | json_values.map(encode) | st.binary(max_size=64)


@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(content=bodies)
def test_fuzzed_requests_never_get_a_500(client: httpx.Client, content: bytes) -> None:
    """600 generated bodies (valid, half-valid, garbage): none gets a 5xx or a non-envelope 4xx."""
    # One keep-alive client for all examples: a new client per body costs an SSL context and a
    # connection each, which on a loaded 2-core machine alone outran the test's time limit.
    response = client.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"message", "type", "param", "code"}


GORILLA_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}


@pytest.mark.parametrize("precheck", ["rust first", "pydantic alone"])
@pytest.mark.parametrize(
    ("content", "status", "param"),
    [
        (valid(), 200, None),
        (valid(n=2, seed=3, stream=False), 200, None),
        (valid(seed=1.0), 400, "seed"),
        (valid(n=0), 400, "n"),
        (valid(messages=[{"role": "tool", "content": "x"}]), 400, "messages[0].tool_call_id"),
        (valid(tools=[GORILLA_TOOL]), 400, "tools[0].function.parameters"),
    ],
)  # fmt: skip
def test_a_pass_through_gets_one_answer_with_or_without_the_precheck(
    gateway: str,
    monkeypatch: pytest.MonkeyPatch,
    precheck: str,
    content: bytes,
    status: int,
    param: str | None,
) -> None:
    """The Rust pre-check (``server/chat/precheck.py``) changes who checks, never the answer."""
    if precheck == "pydantic alone":
        monkeypatch.setattr(HeadPrecheck, "fields", lambda self, body: None)
    response = post(gateway, content)
    if status == 200:
        assert response.status_code == 200, response.text
        assert response.json()["choices"]
    else:
        assert_envelope(response, status, param)

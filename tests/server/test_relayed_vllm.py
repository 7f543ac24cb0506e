"""The whole vLLM surface through the gateway, against a real vLLM (CPU build, tiny Qwen3).

Every route a real vLLM 0.32 publishes in its ``/openapi.json`` is served by the gateway itself,
relayed (``server/chat/relayed.py``), or kept back with a documented reason; and what is relayed
comes back as vLLM answers it directly — the official SDK's completions and responses included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from rehearsal_gateway import __version__
from rehearsal_gateway.server.app import create_app
from rehearsal_gateway.server.chat.relayed import NOT_RELAYED, RELAYED
from rehearsal_gateway.server.settings import GatewaySettings
from tests.contract.wire import THINKING_OFF, WEATHER_TOOL, forced_tool_call_extra
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]

# vLLM's documentation routes, which every FastAPI app has (the gateway serves its own).
_DOCS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _gateway_paths() -> set[str]:
    # The OpenAPI document, not app.routes: routers included into the app do not list their
    # paths in app.routes on every FastAPI release (0.165 shows them without a path).
    app = create_app(GatewaySettings())
    return set(app.openapi()["paths"])


def test_every_vllm_route_is_served_relayed_or_kept_back(vllm_engine: Proc) -> None:
    """No route of the real vLLM is missing from the gateway without a reason."""
    published = set(httpx.get(vllm_engine.url + "/openapi.json", timeout=30).json()["paths"])
    ours = _gateway_paths()
    missing = published - ours - set(NOT_RELAYED) - _DOCS
    assert not missing, f"vLLM serves {sorted(missing)}, the gateway neither serves nor explains"
    assert {route.path for route in RELAYED} <= published  # the table names only real routes


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("GET", "/version", None, id="version"),
        pytest.param("POST", "/tokenize", {"prompt": "hello world"}, id="tokenize"),
        pytest.param("POST", "/detokenize", {"tokens": [74, 660]}, id="detokenize"),
        pytest.param("POST", "/v1/messages/count_tokens",
                     {"messages": [{"role": "user", "content": "hi"}]}, id="count-tokens"),
        pytest.param("GET", "/v1/responses/resp_nope", None, id="stored-response-404"),
    ],
)  # fmt: skip
def test_relayed_answer_is_vllms(
    vllm_engine: Proc, vllm_gateway: Proc, method: str, path: str, body: dict[str, Any] | None
) -> None:
    """Deterministic routes answer through the gateway exactly as vLLM answers directly."""
    if body is not None:
        body = {"model": SERVED_MODEL_NAME, **body}
    direct = httpx.request(method, vllm_engine.url + path, json=body, timeout=60)
    through = httpx.request(method, vllm_gateway.url + path, json=body, timeout=60)
    assert through.status_code == direct.status_code
    answer = through.json()
    if path == "/version":  # the gateway adds its own version beside the engine's
        assert answer.pop("gateway_version") == __version__
    assert answer == direct.json()


@pytest.fixture
def client(vllm_gateway: Proc) -> Iterator[openai.OpenAI]:
    """An SDK client of the gateway, closed when the test ends."""
    with openai.OpenAI(base_url=vllm_gateway.url + "/v1", api_key="x", max_retries=0) as sdk:
        yield sdk


def test_completions_and_messages_streams(vllm_gateway: Proc, client: openai.OpenAI) -> None:
    """Legacy completions (SDK, streamed) and the Messages API stream through the gateway."""
    chunks = list(
        client.completions.create(
            model=SERVED_MODEL_NAME, prompt="hello", max_tokens=4, seed=3, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4
    body = {"model": SERVED_MODEL_NAME, "max_tokens": 3, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    with httpx.stream("POST", vllm_gateway.url + "/v1/messages", json=body, timeout=60) as sse:
        text = "".join(sse.iter_text())
    assert "event: message_start" in text
    assert "event: message_stop" in text


def test_responses_relayed_with_the_sdk(client: openai.OpenAI) -> None:
    """Without rehearsal, ``responses.create``/``stream`` get vLLM's own function_call output."""
    tool = {"type": "function", **WEATHER_TOOL["function"]}
    kwargs: dict[str, Any] = {
        "model": SERVED_MODEL_NAME, "input": "What is the weather in Paris?", "tools": [tool],
        "max_output_tokens": 200, "extra_body": forced_tool_call_extra(),
    }  # fmt: skip
    response = client.responses.create(**kwargs)
    calls = [item for item in response.output if item.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather"]
    with client.responses.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
    assert kinds[0] == "response.created"
    assert "response.function_call_arguments.done" in kinds
    assert kinds[-1] == "response.completed"
    text = client.responses.create(model=SERVED_MODEL_NAME, input="hi", max_output_tokens=4,
                                   extra_body=THINKING_OFF)  # fmt: skip
    assert text.output[0].type == "message"

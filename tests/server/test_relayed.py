"""vLLM's other routes through the gateway: relayed untouched, with ids, retries and metrics."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import openai
import pytest

import rehearsal_gateway
from rehearsal_gateway.server.chat.relayed import NOT_RELAYED, RELAYED
from tests.server.conftest import TWIN_MODEL
from tests.support.procs import Proc, cli_argv, free_port, start_http_server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc]]:
    """A twin and a gateway in front of it (plus a dead engine it must route around)."""
    logs = tmp_path_factory.mktemp("relayed")
    port = free_port()
    twin = start_http_server(cli_argv("twin", "--port", str(port), "--latency", "zero"),
                             port=port, log_path=logs / "twin.log")  # fmt: skip
    gport = free_port()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    argv = cli_argv("serve", "--port", str(gport), "--engine", dead, "--engine",
                    twin.url + "/v1", "--alias", "envace=" + TWIN_MODEL)  # fmt: skip
    gateway = start_http_server(argv, port=gport, log_path=logs / "gateway.log",
                                env={"RGW_HEALTH_INTERVAL": "0.2"})  # fmt: skip
    yield {"twin": twin, "gateway": gateway}
    gateway.stop()
    twin.stop()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("GET", "/version", None, id="version"),
        pytest.param("POST", "/tokenize", {"prompt": "hello world"}, id="tokenize"),
        pytest.param("POST", "/detokenize", {"tokens": [0]}, id="detokenize"),
        pytest.param("GET", "/v1/responses/resp_nope", None, id="stored-response-404"),
    ],
)
def test_relayed_answer_is_the_engines(
    stack: dict[str, Proc], method: str, path: str, body: dict[str, object] | None
) -> None:
    """The gateway's answer is the engine's, status and JSON body alike."""
    if path == "/detokenize":  # the twin numbers tokens as it first sees them
        httpx.post(stack["twin"].url + "/tokenize", json={"prompt": "hello"}, timeout=10)
    direct = httpx.request(method, stack["twin"].url + path, json=body, timeout=10)
    through = httpx.request(method, stack["gateway"].url + path, json=body, timeout=10)
    assert through.status_code == direct.status_code
    expected = direct.json()
    if path == "/version":  # the engine's version, and the gateway's beside it
        expected["gateway_version"] = rehearsal_gateway.__version__
    assert through.json() == expected


def test_completions_with_the_sdk_stream_and_alias(stack: dict[str, Proc]) -> None:
    """Legacy completions work with the SDK, streamed too, under an alias."""
    with openai.OpenAI(base_url=stack["gateway"].url + "/v1", api_key="x", max_retries=0) as client:
        whole = client.completions.create(model="envace", prompt="Say hi", max_tokens=8, seed=1)
        assert whole.object == "text_completion"
        assert whole.choices[0].text
        pieces = client.completions.create(
            model=TWIN_MODEL, prompt="Say hi", max_tokens=8, seed=1, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(pieces)
    assert chunks[-1].usage is not None
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text


def test_request_id_reaches_the_engine(stack: dict[str, Proc]) -> None:
    """The client's X-Request-Id is the engine's request id (vLLM names its answer by it)."""
    answer = httpx.post(
        stack["gateway"].url + "/v1/chat/completions",
        json={"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Request-Id": "trace-me-42"}, timeout=30,
    )  # fmt: skip
    assert answer.headers["x-request-id"] == "trace-me-42"
    assert answer.json()["id"] == "chatcmpl-trace-me-42"
    completion = httpx.post(
        stack["gateway"].url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2},
        headers={"X-Request-Id": "trace-me-43"}, timeout=30,
    )  # fmt: skip
    assert completion.json()["id"] == "cmpl-trace-me-43"


def test_relayed_requests_are_counted_by_route(stack: dict[str, Proc]) -> None:
    """Relayed routes have their own request families, labelled by path template."""
    httpx.post(stack["gateway"].url + "/tokenize", json={"prompt": "x"}, timeout=10)
    httpx.get(stack["gateway"].url + "/v1/responses/abc", timeout=10)
    text = httpx.get(stack["gateway"].url + "/metrics", timeout=10).text
    assert 'rehearsal_gateway_relayed_requests_total{outcome="ok",route="/tokenize"}' in text
    assert 'route="/v1/responses/{response_id}"' in text


def test_unknown_route_is_still_our_404(stack: dict[str, Proc]) -> None:
    """Only vLLM's routes are relayed; anything else is the gateway's 404 envelope."""
    answer = httpx.post(stack["gateway"].url + "/v1/nothing-here", json={}, timeout=10)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


def test_the_route_tables_do_not_overlap() -> None:
    """A vLLM route is either relayed or documented as kept back, never both."""
    relayed = {route.path for route in RELAYED}
    assert not relayed & set(NOT_RELAYED)


@pytest.mark.parametrize(
    "raw_id",
    [
        pytest.param("%2F..%2Fversion", id="encoded-slash-dots"),
        pytest.param("%C3%82%03.", id="control-character"),
        pytest.param("..", id="dot-segment"),
    ],
)
def test_a_path_parameter_stays_the_parameter(stack: dict[str, Proc], raw_id: str) -> None:
    """An id holding '/', '..' or a control character is a 404 for that id, never another route.

    Relaying the decoded path would reach another engine route or fail to build the URL (a
    500). An encoded '/' matches no route of ours (nor of vLLM's own router): our 404. A control
    character is relayed percent-encoded: the twin's 404 for that id. A dot segment can be no id
    and the engine client would drop it (yarl decodes ``%2E``): the gateway's own 404, naming the
    parameter. ``http.client`` sends the path as written.
    """
    connection = http.client.HTTPConnection("127.0.0.1", stack["gateway"].port, timeout=10)
    try:
        connection.request("GET", "/v1/responses/" + raw_id)
        answer = connection.getresponse()
        status, body = answer.status, json.loads(answer.read())
    finally:
        connection.close()
    assert status == 404
    assert set(body) == {"error"}
    if "%2F" not in raw_id:
        assert body["error"]["param"] == "response_id"
        assert f"'{unquote(raw_id)}'" in body["error"]["message"]

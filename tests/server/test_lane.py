"""The chat lane (``server/http/lane.py``): the chat route served from uvicorn's request cycle.

Every other test of the chat route runs through the lane already (in-process gateways take the
gateway's own protocol). Here: that it serves that route and nothing else, that it answers byte
for byte as the ASGI stack does (``RGW_CHAT_LANE=false``), and the HTTP/1.1 edges it takes from
uvicorn's cycle (keep-alive, pipelining, ``Connection: close``, ``Expect: 100-continue``) and
the errors it must answer itself, on raw sockets.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

import httpx
import orjson
import pytest
from starlette.responses import Response

import server.http.lane as lane
from tests.server.conftest import metric_value

CHAT = "/v1/chat/completions"
KEY = "sk-lane-test"
HI = {"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "seed": 3}
BODIES = [
    orjson.dumps(HI),
    orjson.dumps({**HI, "stream": True}),
    orjson.dumps({**HI, "stream": True, "stream_options": {"include_usage": True}}),
    b'{"model": "EnvACE-Qwen3-8B", "messages": []}',
    b'{"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user"}], "tools": 3}',
    b"not json",
    b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}',
    orjson.dumps({**HI, "rehearsal": {"budget": -1}}),
    orjson.dumps({**HI, "padding": "x" * 70_000}),  # over the body limit set below
]
LIMITS = {"RGW_API_KEYS": KEY, "RGW_MAX_BODY_BYTES": "65536"}
UNSTABLE = re.compile(rb'"(created|id)": ?("[^"]*"|\d+)')


class Counted:
    """``serve_chat`` with a count of the requests it took."""

    def __init__(self) -> None:
        self.calls = 0
        self.serve = lane.serve_chat

    async def __call__(self, cycle: Any, gateway: Any) -> None:
        self.calls += 1
        await self.serve(cycle, gateway)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    counter = Counted()
    monkeypatch.setattr(lane, "serve_chat", counter)
    return counter


def post(url: str, body: bytes, key: str | None = KEY, **headers: str) -> httpx.Response:
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    headers.setdefault("x-request-id", "same-id")
    headers["content-type"] = "application/json"
    return httpx.post(url + CHAT, content=body, headers=headers)


def test_the_lane_takes_the_chat_route_and_nothing_else(
    start_twin, start_gateway, counted: Counted
) -> None:
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    assert post(gateway.url, orjson.dumps(HI), key=None).status_code == 200
    assert counted.calls == 1
    assert httpx.get(gateway.url + "/v1/models").status_code == 200
    assert httpx.get(gateway.url + CHAT).status_code == 405  # not POST: FastAPI answers
    completions = {"model": "EnvACE-Qwen3-8B", "prompt": "hi", "max_tokens": 2}
    assert httpx.post(gateway.url + "/v1/completions", json=completions).status_code == 200
    assert httpx.post(gateway.url + CHAT + "/", json=HI).status_code == 307  # FastAPI: no slash
    assert counted.calls == 1
    off = start_gateway(f"{twin.url}/v1", env={"RGW_CHAT_LANE": "false"})
    assert post(off.url, orjson.dumps(HI), key=None).status_code == 200
    assert counted.calls == 1


def test_the_lane_answers_as_the_asgi_stack_does(start_twin, start_gateway) -> None:
    """The same requests to a gateway with the lane and one without: the same answers."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    on = start_gateway(f"{twin.url}/v1", env=LIMITS)
    off = start_gateway(f"{twin.url}/v1", env={**LIMITS, "RGW_CHAT_LANE": "false"})
    cases = [(body, KEY) for body in BODIES] + [(orjson.dumps(HI), None), (b"{}", "sk-wrong")]
    statuses = set()
    for body, key in cases:
        answers = []
        for gateway in (on, off):
            r = post(gateway.url, body, key=key)
            head = {k: v for k, v in r.headers.items() if k != "date"}
            answers.append((r.status_code, head, UNSTABLE.sub(rb'"\1":0', r.content)))
        assert answers[0] == answers[1], body[:80]
        assert answers[0][1]["x-request-id"] == "same-id"
        statuses.add(answers[0][0])
    assert statuses == {200, 400, 401, 404, 413}
    for gateway in (on, off):
        text = httpx.get(gateway.url + "/metrics").text
        assert 'rehearsal_gateway_requests_total{mode="passthrough",outcome="ok"} 3.0' in text
        assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


def read_answer(sock: socket.socket, buffer: bytearray) -> tuple[bytes, dict[str, str], bytes]:
    """One whole answer (``Content-Length`` framed) off ``sock``; what follows stays in buffer."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "the gateway closed the connection before a whole head"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    length = int(headers["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the gateway closed the connection before a whole body"
        rest += chunk
    buffer[:] = rest[length:]
    return status_line.encode(), headers, rest[:length]


def raw_request(body: bytes, *extra: str) -> bytes:
    lines = [f"POST {CHAT} HTTP/1.1", "host: gateway", "content-type: application/json"]
    lines += [f"content-length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_pipelined_requests_keep_alive_and_connection_close(start_twin, start_gateway) -> None:
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    first, second = orjson.dumps(HI), orjson.dumps({**HI, "seed": 4})
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        buffer = bytearray()
        sock.sendall(raw_request(first, "x-request-id: 1") + raw_request(second, "x-request-id: 2"))
        answers = [read_answer(sock, buffer) for _ in range(2)]
        assert [status for status, _, _ in answers] == [b"HTTP/1.1 200 OK"] * 2
        assert [headers["x-request-id"] for _, headers, _ in answers] == ["1", "2"]
        assert all("connection" not in headers for _, headers, _ in answers)
        sock.sendall(raw_request(first, "x-request-id: 3", "connection: close"))
        status, headers, body = read_answer(sock, buffer)
        assert status == b"HTTP/1.1 200 OK"
        assert headers["connection"] == "close"
        assert orjson.loads(body)["object"] == "chat.completion"
        assert sock.recv(1) == b""  # closed after the answer


def test_expect_100_continue(start_twin, start_gateway) -> None:
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    body = orjson.dumps(HI)
    request = raw_request(body, "expect: 100-continue")
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(request[: -len(body)])
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        status, _, answer = read_answer(sock, bytearray())
        assert status == b"HTTP/1.1 200 OK"
        assert orjson.loads(answer)["choices"][0]["message"]["role"] == "assistant"


def test_an_unexpected_error_is_a_generic_500_and_the_connection_lives(
    start_twin, start_gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    endpoint = lane.answer_chat

    async def broken(scope: Any, receive: Any, body: bytes | None) -> Response:
        if (b"x-break", b"yes") in scope["headers"]:
            raise RuntimeError("a bug with a secret inside")
        return await endpoint(scope, receive, body)

    monkeypatch.setattr(lane, "answer_chat", broken)
    with httpx.Client(base_url=gateway.url) as client:
        r = client.post(CHAT, json=HI, headers={"x-break": "yes", "x-request-id": "bug-1"})
        assert r.status_code == 500
        assert r.headers["x-request-id"] == "bug-1"
        assert r.json()["error"]["type"] == "internal_error"  # the app handler's envelope
        assert "secret" not in r.text
        assert client.post(CHAT, json=HI).status_code == 200  # the same connection, still served
    assert "a bug with a secret inside" in caplog.text  # logged, with its traceback
    text = httpx.get(gateway.url + "/metrics").text
    assert 'rehearsal_gateway_requests_total{mode="passthrough",outcome="error"} 1.0' in text


def test_an_error_after_the_answer_started_closes_the_connection(
    start_twin, start_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")

    class Breaks(Response):
        def __init__(self) -> None:
            self.status_code = 200
            self.background = None

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            raise RuntimeError("broke mid-stream")

    async def breaks(scope: Any, receive: Any, body: bytes | None) -> Response:
        return Breaks()

    monkeypatch.setattr(lane, "answer_chat", breaks)
    # The answer ends mid-stream: an incomplete chunked body, or a reset if the close races it.
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        httpx.post(gateway.url + CHAT, json=HI, timeout=30)
    assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


@pytest.mark.parametrize("length", ["abc", "-1", "1 2", "99999999999999999999999"])
def test_a_malformed_content_length_never_reaches_the_lane(
    start_twin, start_gateway, counted: Counted, length: str
) -> None:
    """``whole_body`` trusts the parser to have held a body to its declared length: a header
    that declares none it can read is refused before any route sees the request."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    body = orjson.dumps(HI)
    head = f"POST {CHAT} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
    request = (head + f"content-length: {length}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(request)
        status, headers, _ = read_answer(sock, bytearray())
        assert status == b"HTTP/1.1 400 Bad Request"
        assert headers["connection"] == "close"
        assert sock.recv(1) == b""
    assert counted.calls == 0
    assert post(gateway.url, body).status_code == 200  # the gateway lives on
    assert counted.calls == 1


def chunked_request(body: bytes) -> bytes:
    head = f"POST {CHAT} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
    head += "transfer-encoding: chunked\r\n\r\n"
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]))
    return head.encode() + chunks + b"0\r\n\r\n"


@pytest.mark.parametrize("whole", [True, False], ids=["with-the-head", "after-the-head"])
def test_a_chunked_body_is_held_to_the_limit_however_it_arrives(
    start_twin, start_gateway, whole: bool
) -> None:
    """No declared length: the limit applies to the body as it came, in hand or read later."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1", env={"RGW_MAX_BODY_BYTES": "4096"})
    for body, expected in ((orjson.dumps(HI), 200), (orjson.dumps({**HI, "pad": "x" * 5000}), 413)):
        request = chunked_request(body)
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
            if whole:
                sock.sendall(request)
            else:
                cut = request.index(b"\r\n\r\n") + 4
                sock.sendall(request[:cut])
                time.sleep(0.2)  # the lane starts on the head alone and must read the rest
                sock.sendall(request[cut:])
            status, _, answer = read_answer(sock, bytearray())
        assert status.split()[1] == str(expected).encode(), answer
        if expected == 413:
            assert orjson.loads(answer)["error"]["code"] == "request_too_large"

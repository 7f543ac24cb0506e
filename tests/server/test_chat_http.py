"""The chat route over HTTP/1.1: one ASGI stack for every request, and the edges of the protocol.

A middleware added to the app runs for chat completions (plain, streamed and rehearsed) as for
every other route; on raw sockets, the chat route keeps a connection alive, pipelines, honours
``Connection: close`` and ``Expect: 100-continue``, answers an unexpected error with the generic
500 on a connection that lives on, and holds a chunked body to the limit however it arrives.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import rehearsal_gateway.server.http.routes as routes
from rehearsal_gateway.server.chat.service import ChatService
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL, metric_value
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway

CHAT = "/v1/chat/completions"
HI = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 3}
ORDER_ID = {"type": "object", "properties": {"order_id": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": ORDER_ID}}]
SEEN_HEADER = (b"x-seen-by", b"recorder")


class Recorder:
    """A pure ASGI middleware of someone else's: notes each request and marks its answer."""

    def __init__(self, app: ASGIApp, seen: list[tuple[str, str]]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.seen.append((scope["method"], scope["path"]))

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message["headers"], SEEN_HEADER]}
            await send(message)

        await self.app(scope, receive, send_marked)


@pytest.fixture
def recorded(
    start_twin: Callable[..., Any], tmp_path: Path
) -> Iterator[tuple[InProcessGateway, list[tuple[str, str]]]]:
    """A gateway in front of a twin with a ``Recorder`` added to its app, and what it saw."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    seen: list[tuple[str, str]] = []

    def add_recorder(app: FastAPI) -> None:
        app.add_middleware(Recorder, seen=seen)

    gateway = inprocess.start_gateway(
        ["--engine", f"{twin.url}/v1"], log_path=tmp_path / "gateway.log", env=FAST_HEALTH,
        prepare_app=add_recorder,
    )  # fmt: skip
    seen.clear()  # the start-up's health probes
    yield gateway, seen
    gateway.stop()


def test_a_middleware_added_to_the_app_runs_for_chat_completions_too(
    recorded: tuple[InProcessGateway, list[tuple[str, str]]],
) -> None:
    """Plain, streamed and rehearsed chat completions pass an added middleware, as others do."""
    gateway, seen = recorded
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        plain = client.post(CHAT, json=HI)
        streamed = client.post(CHAT, json={**HI, "stream": True})
        rehearsed = client.post(
            CHAT, json={**HI, "tools": TOOLS, "rehearsal": {"mode": "parallel", "budget": 2}}
        )
        models = client.get("/v1/models")
        refused = client.post(CHAT, content=b"not json")
    for answer in (plain, streamed, rehearsed, models, refused):
        assert answer.headers["x-seen-by"] == "recorder", answer.request.url
    assert [plain.status_code, streamed.status_code, rehearsed.status_code] == [200] * 3
    assert refused.status_code == 400
    assert "rehearsal" in rehearsed.json()
    assert streamed.text.rstrip().endswith("data: [DONE]")
    assert seen == [("POST", CHAT)] * 3 + [("GET", "/v1/models"), ("POST", CHAT)]


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
    """Two pipelined requests get two answers in order; ``Connection: close`` ends the socket."""
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
    """A client that waits for ``100 Continue`` gets it when the route reads, then its answer."""
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
    """A bug in the chat path: the generic envelope with the request id, logged, socket kept."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")
    complete = ChatService.complete

    async def broken(self: ChatService, call: Any) -> Any:
        if call.session == "break-me":
            raise RuntimeError("a bug with a secret inside")
        return await complete(self, call)

    monkeypatch.setattr(ChatService, "complete", broken)
    with httpx.Client(base_url=gateway.url) as client:
        headers = {"x-request-id": "bug-1", "x-session-id": "break-me"}
        r = client.post(CHAT, json=HI, headers=headers)
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
    """A stream that breaks after its first bytes ends the connection, and nothing stays in
    flight."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    gateway = start_gateway(f"{twin.url}/v1")

    class Breaks(routes.StreamRelay):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.answer.close()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            raise RuntimeError("broke mid-stream")

    monkeypatch.setattr(routes, "StreamRelay", Breaks)
    # The answer ends mid-stream: an incomplete chunked body, or a reset if the close races it.
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        httpx.post(gateway.url + CHAT, json={**HI, "stream": True}, timeout=30)
    assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


@pytest.mark.parametrize("length", ["abc", "-1", "1 2", "99999999999999999999999"])
def test_a_malformed_content_length_never_reaches_the_app(
    recorded: tuple[InProcessGateway, list[tuple[str, str]]], length: str
) -> None:
    """A ``Content-Length`` the parser cannot read is a 400 and a closed socket, before the app."""
    gateway, seen = recorded
    body = orjson.dumps(HI)
    head = f"POST {CHAT} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
    request = (head + f"content-length: {length}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(request)
        status, headers, _ = read_answer(sock, bytearray())
        assert status == b"HTTP/1.1 400 Bad Request"
        assert headers["connection"] == "close"
        assert sock.recv(1) == b""
    assert seen == []
    assert httpx.post(gateway.url + CHAT, content=body).status_code == 200  # it lives on
    assert seen == [("POST", CHAT)]


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
                time.sleep(0.2)  # the route starts on the head alone and must read the rest
                sock.sendall(request[cut:])
            status, _, answer = read_answer(sock, bytearray())
        assert status.split()[1] == str(expected).encode(), answer
        if expected == 413:
            assert orjson.loads(answer)["error"]["code"] == "request_too_large"

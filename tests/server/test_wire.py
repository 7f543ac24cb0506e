"""The lean wire for whole answers (``server/engines/wire.py``), against raw sockets on loopback.

The behaviours it shares with aiohttp (idle sockets closed, a socket the engine closed not
reused, close-delimited answers, refusals, the same bytes and headers) run on both in
``tests/server/test_engine_http.py``. Here: what only the wire has to get right by itself.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from server.engines.faults import is_reset, translate
from server.engines.wire import Wire
from server.errors import EngineFailed
from tests.server.test_engine_http import (
    ANSWER,
    BODY,
    engine,
    keep_alive_answer,
    raw_engine,
    read_request,
)

HEADERS = {"content-type": "application/json", "x-request-id": "r-1"}


def wire(keepalive_s: float = 5.0) -> Wire:
    return Wire(connect_timeout=1.0, keepalive_s=keepalive_s)


async def call(lean: Wire, port: int, payload: bytes | None = BODY) -> tuple[int, str, bytes]:
    method = "POST" if payload is not None else "GET"
    return await lean.request(
        "127.0.0.1", port, f"127.0.0.1:{port}", method, "/v1/chat/completions", HEADERS, payload
    )


async def test_one_socket_carries_calls_one_after_another() -> None:
    """Keep-alive: three calls in a row use one connection, each answer whole and in order."""
    connections = 0
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                request = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            seen.append(request)
            writer.write(keep_alive_answer(b'{"n":%d}' % len(seen)))
            await writer.drain()

    lean = wire()
    async with raw_engine(handler) as port:
        answers = [await call(lean, port) for _ in range(3)]
        lean.close()
    assert connections == 1
    assert answers == [(200, "application/json", b'{"n":%d}' % n) for n in (1, 2, 3)]
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert f"host: 127.0.0.1:{port}".encode() in lines
    assert b"x-request-id: r-1" in lines
    assert b"content-length: %d" % len(BODY) in lines
    assert body == BODY


async def test_a_chunked_answer_is_joined_and_a_get_has_no_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        assert request.startswith(b"GET ")
        assert b"content-length" not in request
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    lean = wire()
    async with raw_engine(handler) as port:
        assert await call(lean, port, None) == (200, "text/plain", b"abcde")
        lean.close()


async def test_a_socket_closed_before_the_answer_ends_is_a_reset() -> None:
    """Cut after half the body: a reset (the caller may retry), never half an answer."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(keep_alive_answer()[:-10])
        await writer.drain()
        writer.close()

    lean = wire()
    async with raw_engine(handler) as port:
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await call(lean, port)
        lean.close()
    assert is_reset(caught.value)
    error = translate(caught.value, engine(f"http://127.0.0.1:{port}/v1"))
    assert isinstance(error, EngineFailed)
    assert error.kind == "reset"


async def test_an_answer_that_is_not_http_fails_and_its_socket_is_dropped() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n" if connections == 1 else keep_alive_answer())
        await writer.drain()
        await reader.read()

    lean = wire()
    async with raw_engine(handler) as port:
        with pytest.raises(httpx.RemoteProtocolError, match="not HTTP"):
            await call(lean, port)
        assert await call(lean, port) == (200, "application/json", ANSWER)
        lean.close()
    assert connections == 2


async def test_a_cancelled_call_closes_its_socket() -> None:
    """A call cancelled while the engine works (a deadline, the client gone) closes the socket,
    which is how vLLM hears to abort the request; the next call opens a fresh one."""
    gone = asyncio.Event()
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        if connections == 1:
            await reader.read()  # EOF: the gateway closed its side
            gone.set()
            return
        writer.write(keep_alive_answer())
        await writer.drain()
        await reader.read()

    lean = wire()
    async with raw_engine(handler) as port:
        pending = asyncio.create_task(call(lean, port))
        await asyncio.sleep(0.1)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        await asyncio.wait_for(gone.wait(), timeout=5)
        assert await call(lean, port) == (200, "application/json", ANSWER)
        lean.close()
    assert connections == 2


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    requests = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1

    lean = wire()
    async with raw_engine(handler) as port:
        for value in ("a\r\nx-evil: 1", "a\nb", "a\rb"):
            with pytest.raises(httpx.LocalProtocolError):
                await lean.request(
                    "127.0.0.1", port, "h", "POST", "/v1/x", {"x-request-id": value}, BODY
                )
        lean.close()
    assert requests == 0


async def test_idle_sockets_expire_and_close_ends_the_rest() -> None:
    """Past ``keepalive_s`` an idle socket is closed by the wire's one timer; ``close`` closes
    those still idle, and a call after it opens a new one."""
    closed = 0
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal closed, connections
        connections += 1
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()
        await reader.read()
        closed += 1

    short = wire(keepalive_s=0.1)
    long = wire(keepalive_s=60)
    async with raw_engine(handler) as port:
        await call(short, port)
        await call(long, port)
        for _ in range(50):
            if closed:
                break
            await asyncio.sleep(0.05)
        assert closed == 1  # the short one's, by its timer
        long.close()
        for _ in range(50):
            if closed == 2:
                break
            await asyncio.sleep(0.05)
        assert closed == 2
        assert await call(long, port) == (200, "application/json", ANSWER)
        long.close()
        short.close()
    assert connections == 3

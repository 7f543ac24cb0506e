"""The wire transport's own bounds and failures, on real sockets (``server/engines/wire.py``).

What every transport must do is in ``test_engine_http.py``, run on the wire too; here is what
only a transport that owns its sockets can get wrong: the cap on open sockets, a socket closed
when its answer is abandoned or its wait cancelled, a refused header, an answer that is not
HTTP, a reset, a large answer read through the paused socket, and closing the transport.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rehearsal_gateway.server.engines.exchange import BUFFER_BYTES
from rehearsal_gateway.server.engines.transport import EngineRequest
from rehearsal_gateway.server.engines.wire import WireTransport
from tests.support.raw_engine import ANSWER, BODY, keep_alive_answer, raw_engine, read_request


def call(port: int, body: bytes = BODY, **headers: str) -> EngineRequest:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    return EngineRequest("POST", url, {"content-type": "application/json", **headers}, body, 1.0)


async def test_open_sockets_never_exceed_the_cap() -> None:
    """Six calls at once on a cap of two: two sockets at the engine; the rest wait, then reuse."""
    open_now = peak = connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak, connections
        open_now += 1
        connections += 1
        peak = max(peak, open_now)
        try:
            while True:
                try:
                    await read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                await asyncio.sleep(0.05)
                writer.write(keep_alive_answer())
                await writer.drain()
        finally:
            open_now -= 1

    wire = WireTransport(sockets=2)
    async with raw_engine(handler) as port:

        async def one() -> bytes:
            answer = await wire.send(call(port))
            return await answer.read()

        assert (
            await asyncio.wait_for(asyncio.gather(*(one() for _ in range(6))), 30) == [ANSWER] * 6
        )
        assert wire.open == 2
    await wire.aclose()
    assert (peak, connections) == (2, 2)
    assert wire.open == 0


async def test_a_full_cap_closes_an_idle_socket_to_another_engine() -> None:
    """At the cap, a call to a second engine takes the room of an idle socket to the first."""
    closed = asyncio.Event()

    async def first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()
        await reader.read()  # EOF: the gateway closed its idle socket
        closed.set()

    async def second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()

    wire = WireTransport(sockets=1)
    async with raw_engine(first) as one, raw_engine(second) as two:
        assert await (await wire.send(call(one))).read() == ANSWER
        assert await (await wire.send(call(two))).read() == ANSWER
        await asyncio.wait_for(closed.wait(), 10)
    await wire.aclose()


async def test_an_abandoned_answer_closes_its_socket() -> None:
    """``aclose`` before the end of a stream: the engine sees the close (vLLM aborts then)."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n5\r\ndata:\r\n")
        await writer.drain()
        await reader.read()
        closed.set()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        answer = await wire.send(call(port))
        chunks = answer.chunks()
        assert await anext(chunks) == b"data:"
        await chunks.aclose()
        await answer.aclose()
        await asyncio.wait_for(closed.wait(), 10)
        assert wire.open == 0
    await wire.aclose()


async def test_a_cancelled_wait_closes_its_socket() -> None:
    """A call cancelled while the engine is silent closes its socket; the next one opens anew."""
    closed = asyncio.Event()
    calls = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        await read_request(reader)
        calls += 1
        if calls == 1:
            await reader.read()  # never answers; the gateway gives up and closes
            closed.set()
            return
        writer.write(keep_alive_answer())
        await writer.drain()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await wire.send(call(port))
        await asyncio.wait_for(closed.wait(), 10)
        assert await (await wire.send(call(port))).read() == ANSWER
    await wire.aclose()
    assert calls == 2


async def test_a_header_with_a_line_break_is_not_sent() -> None:
    """A header value that would split the request is refused before any byte goes out."""
    wire = WireTransport()
    with pytest.raises(httpx.LocalProtocolError):
        await wire.send(call(1, **{"x-note": "a\r\nx-injected: 1"}))
    assert wire.open == 0


async def test_an_answer_that_is_not_http_is_a_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()
        await reader.read()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        with pytest.raises(httpx.RemoteProtocolError):
            await wire.send(call(port))
        assert wire.open == 0
    await wire.aclose()


async def test_a_close_before_the_end_is_a_protocol_error() -> None:
    """A length promised and not delivered: the body's read fails, the socket is not reused."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        answer = await wire.send(call(port))
        with pytest.raises(httpx.RemoteProtocolError):
            await answer.read()
        assert wire.open == 0
    await wire.aclose()


async def test_a_large_answer_is_read_whole_through_a_paused_socket() -> None:
    """Several times the unread buffer's bound, in pieces, read whole and in order."""
    body = bytes(range(256)) * (3 * BUFFER_BYTES // 256 + 7)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 65536):
            writer.write(body[start : start + 65536])
            await writer.drain()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        answer = await wire.send(call(port))
        await asyncio.sleep(0.2)  # let the buffer fill past its bound: reading pauses
        received = b"".join([chunk async for chunk in answer.chunks()])
        assert received == body
        assert wire.open == 1  # read to its end: back in the pool
    await wire.aclose()


async def test_a_closed_transport_sends_nothing_more() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()

    wire = WireTransport()
    async with raw_engine(handler) as port:
        assert await (await wire.send(call(port))).read() == ANSWER
        await wire.aclose()
        assert wire.open == 0
        with pytest.raises(httpx.TransportError):
            await wire.send(call(port))

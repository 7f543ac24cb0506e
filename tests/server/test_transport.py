"""The engine transport under httpx: keep-alive reuse, streaming as delivered, httpx's errors."""

from __future__ import annotations

import time

import httpx
import pytest

from server.engines.transport import EngineTransport
from tests.support.procs import free_port

BODY = {"model": "double-model", "messages": [{"role": "user", "content": "x"}]}


async def test_sequential_calls_reuse_one_connection(start_double) -> None:
    """A fully read keep-alive answer returns its socket; the next call takes the same one."""
    echo = start_double("echo")
    transport = EngineTransport()
    async with httpx.AsyncClient(transport=transport) as client:
        seen = set()
        for _ in range(5):
            response = await client.post(echo.url + "/v1/chat/completions", json=BODY)
            assert response.status_code == 200
            (stack,) = transport.idle.values()
            assert len(stack) == 1
            seen.add(id(stack[0]))
        assert len(seen) == 1


async def test_stream_chunks_arrive_before_the_answer_ends(start_double) -> None:
    """Streamed chunks are handed over as they arrive; closing early drops the socket."""
    slow = start_double("slow")
    transport = EngineTransport()
    async with httpx.AsyncClient(transport=transport) as client:
        request = client.build_request(
            "POST", slow.url + "/v1/chat/completions", json={**BODY, "stream": True}
        )
        response = await client.send(request, stream=True)
        started = time.monotonic()
        chunks = response.aiter_raw()
        assert (await anext(chunks)).startswith(b"data: ")
        assert (await anext(chunks)).startswith(b"data: ")
        assert time.monotonic() - started < 1.0  # the double streams for minutes
        await response.aclose()
        assert not any(transport.idle.values())


async def test_errors_are_httpx_errors(start_double) -> None:
    """Refused connections, silent engines and cut answers raise httpx's own exceptions."""
    async with httpx.AsyncClient(transport=EngineTransport(), timeout=0.3) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/health")
        hung = start_double("hang")
        with pytest.raises(httpx.ReadTimeout):
            await client.post(hung.url + "/v1/chat/completions", json=BODY)
        cut = start_double("cut")
        request = client.build_request(
            "POST", cut.url + "/v1/chat/completions", json={**BODY, "stream": True}
        )
        response = await client.send(request, stream=True)
        with pytest.raises(httpx.RemoteProtocolError):
            async for _ in response.aiter_raw():
                pass
        await response.aclose()
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("https://127.0.0.1:1/health")

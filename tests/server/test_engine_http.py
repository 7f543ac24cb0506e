"""The engine client on the transports the lifespan builds (wire, aiohttp), against real sockets.

A small raw-socket engine where the twin cannot misbehave in the needed way: idle sockets are
closed, a socket the engine closed is not reused, a close-delimited answer is accepted, streamed
chunks arrive as sent, a wait for a pooled connection is not an unreachable engine, https engines
get the same client, and a discovered https engine is addressed by IP but checked against its
name. What is transport-neutral (the bytes and headers sent, a refusal, a 4xx in the engine's
words) runs on httpx's transport too (``benchmarks/transports.py``), so the seam
(``server/engines/transport.py``) means the same on both.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
import trustme
from fastapi import FastAPI, Request

from benchmarks.transports import HttpxTransport
from rehearsal_gateway.server.engines.client import EngineClient, Waits
from rehearsal_gateway.server.engines.pool import Engine
from rehearsal_gateway.server.engines.transport import EngineTransport
from rehearsal_gateway.server.engines.transports import AiohttpTransport, tls_context
from rehearsal_gateway.server.engines.wire import WireTransport
from rehearsal_gateway.server.errors import EngineRejected, EngineUnavailable
from rehearsal_gateway.server.http.state import STATE_KEY
from rehearsal_gateway.server.settings import EngineSpec, GatewaySettings
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics
from tests.support import inprocess
from tests.support.raw_engine import (
    ANSWER,
    BODY,
    JSON_KIND,
    STREAM,
    keep_alive_answer,
    raw_engine,
    read_request,
)


def client_for(transport: str = "wire", **settings: object) -> EngineClient:
    """The client as the lifespan builds it; ``transport="httpx"``: on httpx's transport."""
    gateway = GatewaySettings(engines=["http://127.0.0.1:1/v1"], **settings)  # type: ignore[arg-type]
    chosen: EngineTransport
    if transport == "httpx":
        chosen = HttpxTransport(tls=tls_context(gateway))
    elif transport == "aiohttp":
        chosen = AiohttpTransport.of(gateway)
    else:
        chosen = WireTransport.of(gateway)
    return EngineClient(chosen, GatewayMetrics(None), 1.0, Waits.of(gateway))


async def close(client: EngineClient) -> None:
    await client.transport.aclose()


EITHER = pytest.mark.parametrize("transport", ["wire", "aiohttp", "httpx"])
OURS = pytest.mark.parametrize("transport", ["wire", "aiohttp"])  # the two the lifespan builds


def engine(url: str, **spec: object) -> Engine:
    return Engine(EngineSpec(url=url, **spec), max_concurrency=4)  # type: ignore[arg-type]


@OURS
async def test_idle_sockets_are_closed(transport: str) -> None:
    """A kept-alive socket nobody uses is closed by the gateway, not kept for a departed engine."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()
        await reader.read()  # EOF: the client closed its side
        closed.set()
        writer.close()

    client = client_for(transport, engine_keepalive_s=0.2)
    async with raw_engine(handler) as port:
        await client.chat(engine(f"http://127.0.0.1:{port}/v1"), BODY, "act")
        await asyncio.wait_for(closed.wait(), timeout=5)
    await close(client)


@EITHER
async def test_a_socket_the_engine_closed_is_not_reused(transport: str) -> None:
    """The engine drops idle keep-alive sockets (as uvicorn does); the next call still works."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(keep_alive_answer())
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # without saying so: no "connection: close"

    client = client_for(transport)
    async with raw_engine(handler) as port:
        target = engine(f"http://127.0.0.1:{port}/v1")
        for _ in range(3):
            assert await client.chat(target, BODY, "act") == ANSWER
            await asyncio.sleep(0.2)
    await close(client)
    assert connections == 3


@EITHER
async def test_a_close_delimited_answer_is_accepted(transport: str) -> None:
    """An answer without a length or chunks, ended by closing the socket, is read whole."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
        )
        writer.write(ANSWER)
        await writer.drain()
        writer.close()

    client = client_for(transport)
    async with raw_engine(handler) as port:
        assert await client.chat(engine(f"http://127.0.0.1:{port}/v1"), BODY, "act") == ANSWER
    await close(client)


async def test_a_whole_answer_is_the_same_on_every_transport() -> None:
    """Every transport sends the caller's bytes with the same headers, and hands back the
    engine's bytes, or its 4xx in the engine's words."""
    requests: list[bytes] = []
    rejection = b'{"error":{"message":"too long","type":"BadRequestError","param":"messages"}}'

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        requests.append(request)
        status, body = (
            (b"400 Bad Request", rejection) if request.endswith(b"reject") else (b"200 OK", ANSWER)
        )
        head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
        writer.write(head % status + b"content-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with raw_engine(handler) as port:
        target = engine(f"http://127.0.0.1:{port}/v1")
        for client in (client_for("wire"), client_for("aiohttp"), client_for("httpx")):
            assert await client.chat(target, BODY, "act") == ANSWER
            with pytest.raises(EngineRejected) as caught:
                await client.chat(target, b"reject", "act")
            assert (caught.value.status, caught.value.param) == (400, "messages")
            await close(client)
    assert len(requests) == 6
    for request in requests:
        head, _, body = request.partition(b"\r\n\r\n")
        lines = {line.lower() for line in head.split(b"\r\n")[1:]}
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1")
        assert {b"content-type: application/json", b"accept-encoding: identity"} <= lines
        assert body in (BODY, b"reject")


@EITHER
async def test_stream_chunks_arrive_as_sent(transport: str) -> None:
    """The first chunk of a stream is handed over before the engine sends the rest."""
    go_on = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        event = b"data: {}\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
        await go_on.wait()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n"))
        await writer.drain()
        writer.close()

    client = client_for(transport)
    async with raw_engine(handler) as port:
        # The engine holds the rest until ``go_on``: a client that waited for it would hang here.
        stream = await client.open_stream(engine(f"http://127.0.0.1:{port}/v1"), BODY, "act")
        assert stream.first == b"data: {}\n\n"
        go_on.set()
        assert b"".join([part async for part in stream.rest()]) == b"data: [DONE]\n\n"
        await stream.aclose()
    await close(client)


@EITHER
async def test_a_refused_engine_is_unavailable(transport: str) -> None:
    """Nothing listening: the engine error that moves a call to another engine."""
    async with raw_engine(lambda r, w: w.close()) as port:
        pass  # the port is free again
    client = client_for(transport)
    with pytest.raises(EngineUnavailable):
        await client.chat(engine(f"http://127.0.0.1:{port}/v1"), BODY, "act")
    await close(client)


@EITHER
async def test_waiting_for_a_pooled_connection_is_not_an_unreachable_engine(
    transport: str,
) -> None:
    """More calls than pooled connections wait for one (within their own bound), whole and streamed.

    aiohttp bounds "a pooled connection or a new socket" with one timeout and raises the same
    error as a socket that will not connect; read as such, a busy engine became "unreachable"
    (503, and a strike toward passive ejection). Only the socket connect has its own bound.
    """
    calls = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        while not reader.at_eof():
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            calls += 1
            await asyncio.sleep(0.5)
            writer.write(
                keep_alive_answer(
                    STREAM if calls > 6 else ANSWER,
                    kind=b"text/event-stream" if calls > 6 else JSON_KIND,
                )
            )
            await writer.drain()
        writer.close()

    # One slot per engine: (1 + 4) pooled connections, so the sixth call waits ~0.5 s for one.
    client = client_for(transport, engine_max_concurrency=1, queue_timeout=0.1, connect_timeout=0.1)
    async with raw_engine(handler) as port:
        target = engine(f"http://127.0.0.1:{port}/v1")
        whole = [client.chat(target, BODY, "act", bound_s=5) for _ in range(6)]
        assert await asyncio.gather(*whole) == [ANSWER] * 6

        async def streamed() -> bytes:
            stream = await client.open_stream(target, BODY, "act", bound_s=5)
            try:
                return stream.first + b"".join([part async for part in stream.rest()])
            finally:
                await stream.aclose()

        assert await asyncio.gather(*(streamed() for _ in range(6))) == [STREAM] * 6
    await close(client)
    assert calls == 12


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for ``engine.test`` and the CA file that trusts it."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("engine.test").configure_cert(context)
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return context, bundle


@EITHER
async def test_https_engines_use_the_same_client_and_names_survive_discovery(
    tls: tuple[ssl.SSLContext, Path], transport: str
) -> None:
    """A discovered https engine is called at its address, but TLS checks the group's name."""
    context, bundle = tls
    hosts: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        hosts.extend(line for line in request.split(b"\r\n") if line.lower().startswith(b"host:"))
        writer.write(keep_alive_answer())
        await writer.drain()
        writer.close()

    client = client_for(transport, engine_ca_file=str(bundle))
    async with raw_engine(handler, context) as port:
        by_address = engine(f"https://127.0.0.1:{port}/v1", tls_name="engine.test")
        assert await client.chat(by_address, BODY, "act") == ANSWER
        wrong = engine(f"https://127.0.0.1:{port}/v1")  # no name: the certificate does not match
        with pytest.raises(EngineUnavailable):
            await client.chat(wrong, BODY, "act")
    await close(client)
    assert hosts == [f"host: engine.test:{port}".encode()]


@pytest.mark.parametrize(
    ("setting", "built"), [("wire", "WireTransport"), ("aiohttp", "AiohttpTransport")]
)
def test_the_lifespan_builds_the_transport_the_settings_name(
    setting: str, built: str, start_twin, tmp_path: Path
) -> None:
    """``RGW_ENGINE_TRANSPORT`` picks the transport; a whole answer and a stream pass on each."""
    seen: list[str] = []

    def record(app: FastAPI) -> None:
        async def middleware(request: Request, call_next):  # type: ignore[no-untyped-def]
            seen.append(type(request.scope["state"][STATE_KEY].engines.transport).__name__)
            return await call_next(request)

        app.middleware("http")(middleware)

    twin = start_twin("--seed", "1")
    gateway = inprocess.start_gateway(
        ["--engine", twin.url + "/v1"], log_path=tmp_path / "gateway.log",
        env={"RGW_ENGINE_TRANSPORT": setting}, prepare_app=record,
    )  # fmt: skip
    try:
        body = {"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            whole = http.post("/v1/chat/completions", json=body)
            streamed = http.post("/v1/chat/completions", json={**body, "stream": True})
        assert whole.status_code == streamed.status_code == 200
        assert whole.json()["choices"][0]["message"]["role"] == "assistant"
        assert streamed.text.rstrip().endswith("data: [DONE]")
    finally:
        gateway.stop()
    assert set(seen) == {built}  # the start-up probes, the whole answer and the stream

"""The bare floor: a Python relay with no ASGI server at all, on the gateway's engine transport.

A measuring instrument for ``benchmarks/overhead.py --floor``, never a server to deploy. Where
``benchmarks/floor_relay.py`` is the least a relay costs on uvicorn's ASGI cycle, this is the least
it costs in Python at all: an asyncio protocol under uvloop with httptools' request parser, which
reads a request, parses its JSON body (what any body-aware front must do), posts the same bytes
to the engine on the gateway's default transport (``server/engines/wire.py``) and writes the
answer back in one write. No ASGI, no
validation, routing, retries, metrics, logs, auth, timeouts or error handling beyond a 502. What
the gateway costs above this is its stack and its logic; what this costs next to vllm-router is
the price of Python itself on this machine.

    FLOOR_ENGINE=http://127.0.0.1:8100 python -m benchmarks.floor_bare --port 8201
"""

from __future__ import annotations

import argparse
import asyncio
import os

import httptools
import httpx
import orjson
import uvloop

from rehearsal_gateway.server.engines.transport import EngineRequest, EngineTransport
from rehearsal_gateway.server.engines.wire import WireTransport

JSON_HEAD = {"content-type": "application/json"}


class BareRelay(asyncio.Protocol):
    """One client connection: each whole request is relayed to the engine, answers in order."""

    def __init__(self, transport: EngineTransport, engine: str) -> None:
        self.engine_transport, self.engine = transport, engine
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.previous: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        task = asyncio.get_running_loop().create_task(self.answer(url, body, self.previous))
        self.previous = task

    async def answer(self, url: bytes, body: bytes, previous: asyncio.Task[None] | None) -> None:
        if url == b"/health":
            status, out = 200, b'{"status":"ok"}'
        else:
            orjson.loads(body)
            request = EngineRequest("POST", self.engine + url.decode("latin-1"), JSON_HEAD, body)
            try:
                answer = await self.engine_transport.send(request)
                status, out = answer.status, await answer.read()
            except httpx.HTTPError:
                status, out = 502, b'{"error":"engine"}'
        if previous is not None:
            await previous  # pipelined requests are answered in order
        assert self.transport is not None
        head = b"HTTP/1.1 %d \r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(head % (status, len(out)) + out)


async def serve(port: int, engine: str) -> None:
    transport = WireTransport(keepalive_s=30.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BareRelay(transport, engine), "127.0.0.1", port)
    try:
        async with server:
            await server.serve_forever()
    finally:
        await transport.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port, os.environ.get("FLOOR_ENGINE", "http://127.0.0.1:8100")))


if __name__ == "__main__":
    main()

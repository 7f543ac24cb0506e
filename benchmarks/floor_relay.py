"""The Python floor: the least a Python relay on the gateway's stack can cost per request.

A measuring instrument for ``benchmarks/overhead.py --floor``, never a server to deploy: a bare
ASGI app under the same uvicorn (httptools, uvloop) and the same engine transport the gateway
uses by default (``server/engines/wire.py``), which reads the body, parses its JSON (the one
thing any body-aware front must do), posts the same bytes to the engine and returns the answer.
No validation, routing, retries, timeouts, metrics, logs, auth or disconnect handling. Whatever
CPU the gateway spends above this is its own logic; what this costs above vllm-router is the
price of the Python stack itself.

    FLOOR_ENGINE=http://127.0.0.1:8100 python -m uvicorn benchmarks.floor_relay:app \\
        --http httptools --loop uvloop --port 8200
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from rehearsal_gateway.server.engines.transport import EngineRequest
from rehearsal_gateway.server.engines.wire import WireTransport

ENGINE = os.environ.get("FLOOR_ENGINE", "http://127.0.0.1:8100")
JSON = [(b"content-type", b"application/json")]
POST_HEADERS = {"content-type": "application/json"}


class FloorRelay:
    """ASGI: ``/health`` answers; any other request is relayed to ``ENGINE`` as it came."""

    def __init__(self) -> None:
        self.transport: WireTransport | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["path"] == "/health":
            await self._answer(send, 200, b'{"status":"ok"}')
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        orjson.loads(body)
        assert self.transport is not None
        request = EngineRequest("POST", ENGINE + scope["path"], POST_HEADERS, body)
        answer = await self.transport.send(request)
        await self._answer(send, answer.status, await answer.read())

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.transport = WireTransport(sockets=1024, keepalive_s=30.0)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.transport is not None:
                    await self.transport.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    async def _answer(send: Any, status: int, body: bytes) -> None:
        headers = [*JSON, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


app = FloorRelay()

"""The engine-transport seam: how one HTTP request reaches an engine and its answer comes back.

``EngineClient`` (``server/engines/client.py``) sends every engine call through an
``EngineTransport`` and nothing else, the way httpx's client sends through its
``AsyncBaseTransport``. The lifespan chooses the transport (``RGW_ENGINE_TRANSPORT``: the wire,
``server/engines/wire.py``, or aiohttp's client, ``server/engines/transports.py``); a test hands
in its own (``ScriptedTransport``, ``server/engines/testing.py``), and everything above the seam
runs as it serves: retries, every wait's bound, error translation, SSE framing, usage accounting.

The contract:

- ``send`` returns once the answer's status and headers arrived; the body is then read whole
  (``read``) or as it comes (``chunks``). ``aclose`` ends the answer: one not read to its end
  closes its connection (which is how vLLM hears that a request was abandoned), one read to its
  end has already gone back to the pool.
- Headers go out as given (plus what HTTP/1.1 framing needs); bodies are bytes both ways, never
  decoded or decompressed.
- Bounds: a transport bounds the connect (``connect_s``) and caps its sockets; every other wait is
  the caller's, an ``asyncio.timeout`` around the await, so every transport and every fake has
  the same bounds.
- Failures are httpx's public exception classes, whichever library is underneath, so
  ``server/engines/faults.py`` reads one vocabulary: ``ConnectError`` / ``ConnectTimeout`` (no
  connection: refused, unreachable, TLS rejected, the connect bound), ``RemoteProtocolError`` /
  ``ReadError`` / ``WriteError`` (the connection closed or reset under the call, or an answer that
  is not HTTP), ``PoolTimeout``, and ``TransportError`` for anything else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One call to an engine, as the transport sends it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None
    connect_s: float | None = None  # the bound on opening a new connection; None: no bound
    server_name: str | None = None  # the TLS name to check when ``url`` holds an address


class EngineResponse(Protocol):
    """An answer whose status and headers arrived; its body is read whole or as it comes."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The answer's headers, looked up by lower-case name."""
        ...

    async def read(self) -> bytes:
        """The rest of the body; the connection goes back to the pool (closed on a failure)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as the socket delivers them; empty at the end."""
        ...

    async def aclose(self) -> None:
        """End the answer; one not read to its end closes its connection."""
        ...


class EngineTransport(Protocol):
    """Sends engine calls; owns the connections (pool, keep-alive, TLS) they travel on."""

    async def send(self, request: EngineRequest) -> EngineResponse:
        """Send ``request``; its answer once the status and headers arrived."""
        ...

    async def aclose(self) -> None:
        """Close every connection; no call is sent after."""
        ...

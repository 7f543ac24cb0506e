"""``HeadHeld``: a transport wrapper that sends a JSON answer's head and body in one write.

An ASGI server writes a response's status line and headers as soon as the app sends
``http.response.start``, and its body with the next message: two ``send`` syscalls, each waking
the client. ``HeadHeld`` holds a head that declares a ``Content-Length`` (its whole body follows
at once; a stream is chunked and never held) until the next write, so the two leave together.
Whoever owns it calls ``release`` at the response's end (a HEAD answer has no body) and ``close``
releases too. Everything else is the wrapped transport's.
"""

from __future__ import annotations

import asyncio
from typing import Any


class HeadHeld:
    """A transport that holds a ``Content-Length`` response head until the next write."""

    __slots__ = ("held", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self.held is not None:
            data, self.held = self.held + data, None
        elif data.startswith(b"HTTP/1.1 ") and b"\r\ncontent-length: " in data:
            self.held = data  # uvicorn writes header names lower-cased
            return
        self.transport.write(data)

    def release(self) -> None:
        if self.held is not None:
            data, self.held = self.held, None
            self.transport.write(data)

    def close(self) -> None:
        self.release()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)

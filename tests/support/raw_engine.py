"""A raw-socket engine for transport tests: a server whose every byte the test writes.

Where the twin cannot misbehave in the needed way (close a kept-alive socket unannounced, hold a
stream, answer without a length, send what is not HTTP), a test hands ``raw_engine`` a handler
that reads the request and writes the answer itself.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

BODY = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
ANSWER = b'{"id":"c","object":"chat.completion","choices":[],"usage":null}'
STREAM = b"data: {}\n\ndata: [DONE]\n\n"
JSON_KIND = b"application/json"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]


@asynccontextmanager
async def raw_engine(
    handler: Handler, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    """A server on a free port running ``handler`` per connection; every connection it accepted
    is closed and its handler ended when the block ends, so no socket outlives the test's loop
    (one left open is an unclosed-transport warning in whichever later test collects it)."""
    writers: set[asyncio.StreamWriter] = set()
    tasks: set[asyncio.Task[object]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)  # type: ignore[misc]
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ssl_context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in writers:
            writer.transport.abort()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        await asyncio.sleep(0)  # aborted transports let their sockets go on the next turn


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def keep_alive_answer(body: bytes = ANSWER, kind: bytes = JSON_KIND) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (kind, len(body)) + body

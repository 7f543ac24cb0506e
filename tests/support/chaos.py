"""A chaos proxy: a real TCP proxy on loopback between the gateway and an engine, that misbehaves.

The gateway is pointed at the proxy as if it were the engine; the proxy forwards to the engine
(the twin) or, depending on the fault in force, does what a broken engine or network does:

==========  ===================================================================================
``pass``    forward both ways, byte for byte
``refuse``  nothing listens: connections are refused (a killed engine)
``hang``    accept, read the request, never answer (a SIGSTOPped engine: the kernel accepts)
``5xx``     answer every request ``503`` with a JSON error body
``malformed``  answer ``200``: a body that is not JSON, or (``stream: true``) a body not SSE
``truncate``  forward, then close the connection mid-event, after ``cut_after`` answer bytes
``stall``   forward ``cut_after`` answer bytes, then go silent, connection held open
``slow``    forward the answer one small piece at a time (``drip_bytes`` per ``drip_s``)
``reset``   read the request, then reset the connection (RST) before any answer byte
``swallow``  forward the probes (``GET /health``, ``/metrics``, ``/v1/models``), read every other
            request and never answer it: an engine wedged behind a live API server
``busy``    forward, but hold every probe (``GET /health``, ``/metrics``, ``/v1/models``) for
            ``probe_delay_s`` first: a saturated engine whose API server answers probes late
==========  ===================================================================================

``reset_next`` resets only the next ``n`` requests, then forwards: a keep-alive connection the
engine reset as the gateway reused it. Changing the fault closes every open connection, so
pooled keep-alive sockets pick up the new behaviour on their next use (and the gateway meets a
closed socket as it would after an engine restart).

The proxy runs its own event loop in a thread, so the test body stays synchronous; it parses
just enough HTTP/1.1 (head, ``Content-Length``) to know where one request ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tests.support.procs import free_port

FAULTS = (
    "pass", "refuse", "hang", "5xx", "malformed", "truncate", "stall", "slow", "reset", "busy",
    "swallow",
)  # fmt: skip
PROBES = (b"GET /health ", b"GET /metrics ", b"GET /v1/models ")
HEAD_END = b"\r\n\r\n"


@dataclass
class ChaosProxy:
    """A misbehaving proxy to ``upstream_port`` on 127.0.0.1; ``url`` is where it listens."""

    upstream_port: int
    port: int = field(default_factory=free_port)
    fault: str = "pass"
    cut_after: int = 700
    drip_bytes: int = 64
    drip_s: float = 0.05
    reset_next: int = 0
    probe_delay_s: float = 1.0
    probes_held: int = 0
    _loop: asyncio.AbstractEventLoop = field(init=False)  # made by start(), closed by stop()
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _thread: threading.Thread | None = None
    requests: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- control (from the test's thread)

    def start(self) -> ChaosProxy:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self._call(self._listen())
        except BaseException:
            self.stop()  # say, its port was taken meanwhile: leave no loop or thread
            raise
        return self

    def set(self, fault: str, **options: float) -> None:
        """Switch to ``fault`` (one of ``FAULTS``); open connections are closed."""
        assert fault in FAULTS, fault
        for name, value in options.items():
            assert hasattr(self, name), name
            setattr(self, name, type(getattr(self, name))(value))
        self._call(self._switch(fault))

    def reset_requests(self, count: int) -> None:
        """Reset the next ``count`` requests (on connections already open or new), then forward."""
        self._call(self._set_reset(count))

    def stop(self) -> None:
        """End every connection, then the loop and its thread; a second call does nothing."""
        if self._thread is None:
            return
        try:
            self._call(self._shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._thread = None
            self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # ---- inside the proxy's loop

    async def _shutdown(self) -> None:
        """Stop listening and end every connection and its task, so none outlives the loop.

        ``refuse`` stops listening with no connection left half accepted (``_stop_listening``)
        and closes every connection; then every connection's task is ended.
        """
        await self._switch("refuse")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)  # aborted transports release their sockets on the next turn

    async def _set_reset(self, count: int) -> None:
        self.reset_next = count

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def _switch(self, fault: str) -> None:
        self.fault = fault
        if fault == "refuse":
            await self._stop_listening()
        for writer in list(self._writers):
            _abort(writer)
        self._writers.clear()
        if fault != "refuse":
            await self._listen()

    async def _stop_listening(self) -> None:
        """Close the listener, with no connection left half accepted.

        asyncio accepts in two steps: the listener's callback takes the socket and starts a task
        (``_accept_connection2``) that makes its transport. A server closed between the two makes
        that transport fail half made (Python 3.11: ``Server._attach`` asserts the server is
        open; the task swallows the error), holding the socket with no one to close it: an
        unclosed-transport warning in whichever later test the garbage collector runs in. So the
        tasks already started are let finish first (each registers its connection, ``_accept``),
        and the server is closed in the step that finds none left, before another can start.
        """
        if self._server is None:
            return
        while accepting := [t for t in asyncio.all_tasks() if _accepting(t)]:
            await asyncio.wait(accepting)
        self._server.close()
        self._server = None

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Known from the moment it is accepted, so that a switch or the shutdown closes it even
        # if its task is cancelled before it first runs.
        self._writers.add(writer)
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)  # the loop holds tasks weakly
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests += 1
                if self.reset_next > 0:
                    self.reset_next -= 1
                    _abort(writer)
                    return
                fault = self.fault
                if fault == "hang" or (fault == "swallow" and not request.startswith(PROBES)):
                    await asyncio.Event().wait()
                if fault == "reset":
                    _abort(writer)
                    return
                if fault == "busy" and request.startswith(PROBES):
                    self.probes_held += 1
                    await asyncio.sleep(self.probe_delay_s)
                if fault in ("5xx", "malformed"):
                    writer.write(_canned(fault, request))
                    await writer.drain()
                    continue
                if upstream is None:
                    # Refused or cancelled mid-connect, open_connection closes its half-made
                    # socket itself; once it returns, ``upstream`` holds it before any await.
                    upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                upstream[1].write(request)
                await upstream[1].drain()
                if not await self._answer(fault, upstream[0], writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return
        finally:
            if upstream is not None:
                upstream[1].transport.abort()
            # Closed gracefully (a truncated answer's bytes still reach the gateway), but known
            # until closed: a close waits for unsent bytes, and a switch or the shutdown must
            # still be able to end a connection whose peer stopped reading.
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
            self._writers.discard(writer)

    async def _answer(
        self, fault: str, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Relay one answer as ``fault`` says; False when the connection must end."""
        sent = 0
        async for piece in _response_pieces(upstream):
            if fault in ("truncate", "stall") and sent + len(piece) > self.cut_after:
                writer.write(piece[: self.cut_after - sent])
                await writer.drain()
                if fault == "stall":
                    await asyncio.Event().wait()
                return False  # truncate: close mid-answer
            if fault == "slow":
                for start in range(0, len(piece), self.drip_bytes):
                    writer.write(piece[start : start + self.drip_bytes])
                    await writer.drain()
                    await asyncio.sleep(self.drip_s)
            else:
                writer.write(piece)
                await writer.drain()
            sent += len(piece)
        return True


def _accepting(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is asyncio's own, setting up a connection its server just accepted."""
    return getattr(task.get_coro(), "__name__", "") == "_accept_connection2"


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a peer whose process died or reset the connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport = writer.transport
    transport.abort()


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One whole HTTP/1.1 request (head and ``Content-Length`` body); None at EOF."""
    try:
        head = await reader.readuntil(HEAD_END)
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return head + body


async def _response_pieces(upstream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """One HTTP/1.1 answer from the engine, as it arrives: head, then body (length or chunked)."""
    head = await upstream.readuntil(HEAD_END)
    yield head
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size_line = await upstream.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            data = await upstream.readexactly(size + 2)
            yield size_line + data
            if size == 0:
                return
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while length > 0:
        data = await upstream.read(min(length, 4096))
        if not data:
            return
        length -= len(data)
        yield data


def _canned(fault: str, request: bytes) -> bytes:
    """The whole answer of a ``5xx`` or ``malformed`` fault to ``request``."""
    streamed = b'"stream":true' in request.replace(b" ", b"")
    if fault == "5xx":
        status, kind = b"503 Service Unavailable", b"application/json"
        body = b'{"error":{"message":"chaos says 503","type":"ServiceUnavailable","code":503}}'
    elif streamed:
        status, kind = b"200 OK", b"text/event-stream"
        body = b"<html>this is not a stream</html>\n\n"
    else:
        status, kind = b"200 OK", b"application/json"
        body = b'{"id": "chatcmpl-chaos", "choices": [{"index": 0, "mess'
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: " + kind
    return head + b"\r\ncontent-length: " + str(len(body)).encode() + HEAD_END + body

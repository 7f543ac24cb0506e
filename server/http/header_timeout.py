"""uvicorn's HTTP/1.1 protocol with a header-read timeout and one socket write per answer.

Uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) but not a connection that
is opened and then sends its request line and headers byte by byte, or not at all: 300 such
sockets were held for as long as their clients liked. ``HeaderTimeoutProtocol`` is uvicorn's
httptools protocol (what ``uvicorn[standard]`` runs) with one timer more: armed when the
connection opens and when a read ends inside a request's head (it has begun but not ended),
disarmed when its headers are complete; when it fires, the connection is closed (as nginx does
on ``client_header_timeout``).
A body is bounded separately, by the route (``server/http/body.py``). No maintained ASGI server
option does this for uvicorn; the subclass touches a few callbacks and keeps uvicorn's parser.

Uvicorn also writes a response's status line and headers to the socket as soon as the app sends
``http.response.start``, and its body with the next message: two ``send`` syscalls, each waking
the client, for every JSON answer. ``HeadHeld`` wraps the connection's transport and holds a head
that declares a ``Content-Length`` (a whole body follows at once; streams are chunked and never
held) until the next write, so head and body leave in one. It is released at the response's end
in any case (a HEAD answer has no body) and before the transport closes. In py-spy over 3,000
agent-body pass-throughs the head's write alone was 5.7% of the gateway's CPU samples.

Each request's scope also carries a ``ClientGone`` under ``CLIENT_GONE_KEY``: fired when the
connection is lost before that request's response is complete, it cancels the tasks that asked
for it (``server/http/relay.py`` ``until_disconnect``). Uvicorn tells an app only through
``receive``, which meant one watcher task per request, blocked on ``receive`` for the whole
answer; creating and cancelling it was ~9% of a pass-through's CPU (interleaved rounds against
the same tree with the watcher cut, agent body, 1 client: 0.870 against 0.792 ms per request).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("rehearsal_gateway.server")


class HeadHeld:
    """A transport that holds a ``Content-Length`` response head until the next write."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif data.startswith(b"HTTP/1.1 ") and b"\r\ncontent-length: " in data:
            self._held = data  # uvicorn writes header names lower-cased
            return
        self._transport.write(data)

    def write_whole(self, data: bytes) -> None:
        """A complete answer, head and body in one piece (the chat lane's): never held."""
        self.release()
        self._transport.write(data)

    def release(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            self._transport.write(data)

    def close(self) -> None:
        self.release()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


CLIENT_GONE_KEY = "rehearsal_gateway.client_gone"


class ClientGone:
    """One request's "the client went away" signal: cancels the tasks that wait on it."""

    __slots__ = ("_tasks", "fired")

    def __init__(self) -> None:
        self.fired = False
        self._tasks: list[asyncio.Task[Any]] = []

    def cancel_on_fire(self, task: asyncio.Task[Any]) -> None:
        self._tasks.append(task)

    def forget(self, task: asyncio.Task[Any]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    def fire(self) -> None:
        self.fired = True
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose headers do not arrive in time."""

    #: Seconds from a connection (or a request's first byte) to the end of its headers. Set by
    #: ``serve`` before uvicorn starts; a worker process reads ``RGW_HEADER_TIMEOUT`` itself.
    header_timeout: ClassVar[float | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_head = False  # a request's first byte has come, the end of its head not yet
        self._unanswered: list[ClientGone] = []  # oldest first, as HTTP/1.1 answers go

    @classmethod
    def seconds(cls) -> float:
        if cls.header_timeout is None:
            from server.settings import GatewaySettings

            cls.header_timeout = GatewaySettings().header_timeout
        return cls.header_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_held = HeadHeld(transport)
        super().connection_made(self._head_held)  # type: ignore[arg-type]
        self._arm()

    def on_response_complete(self) -> None:
        self._head_held.release()  # a head still held (a HEAD answer): out now
        if self._unanswered:
            self._unanswered.pop(0)
        super().on_response_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Armed only when a read ends inside a request's head. A head that arrives whole (as
        # nearly all do) never arms one: a uvloop timer set and cancelled is ~3 us.
        if self._in_head and self._header_timer is None and not self.transport.is_closing():
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        gone = ClientGone()
        # The scope uvicorn is about to hand the app (uvicorn types it without our key).
        self.scope[CLIENT_GONE_KEY] = gone  # type: ignore[literal-required]
        self._unanswered.append(gone)
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        unanswered, self._unanswered = self._unanswered, []
        for gone in unanswered:
            gone.fire()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.seconds(), self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            log.debug("closing %s: no complete request headers in %gs", self.client, self.seconds())
            self.transport.close()

"""``GatewayProtocol``: the gateway's HTTP/1.1 connection, uvicorn's httptools protocol extended.

It adds three things to each connection, one module each: a header deadline
(``header_timeout.py``), a head held for its body so a JSON answer leaves in one write
(``head_held.py``), and a ``ClientGone`` in each request's scope (``client_gone.py``).

The public contract it relies on: uvicorn's ``http`` option takes an ``asyncio.Protocol`` class
(``uvicorn.Config(http=GatewayProtocol)``) and builds one per connection with the lifespan's
state as ``app_state``; ``HttpToolsProtocol`` is the class ``--http httptools`` names. The
subclass only extends callbacks by calling ``super()``: asyncio's ``connection_made``,
``data_received``, ``connection_lost``, httptools' parser callbacks ``on_message_begin`` and
``on_headers_complete`` (where ``self.scope`` is the scope the app will get) and uvicorn's
``on_response_complete``. It reads no private name. The header timeout comes from the app's
lifespan state (``HEADER_TIMEOUT_KEY``, set from ``RGW_HEADER_TIMEOUT``); an app that sets none
gets ``DEFAULT_HEADER_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .client_gone import CLIENT_GONE_KEY, ClientGone
from .head_held import HeadHeld
from .header_timeout import HeaderTimer

# The lifespan state key that carries the header timeout in seconds (``server/app.py``).
HEADER_TIMEOUT_KEY = "rehearsal_gateway.header_timeout"
DEFAULT_HEADER_TIMEOUT = 10.0


class GatewayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, one-write answers and ``ClientGone``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_head = False  # a request's first byte has come, the end of its head not yet
        self.unanswered: list[ClientGone] = []  # oldest first, as HTTP/1.1 answers go

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.head_held = HeadHeld(transport)
        super().connection_made(self.head_held)  # type: ignore[arg-type]
        seconds = self.app_state.get(HEADER_TIMEOUT_KEY, DEFAULT_HEADER_TIMEOUT)
        self.header_timer = HeaderTimer(self.loop, transport, seconds)
        self.header_timer.arm()

    def on_response_complete(self) -> None:
        self.head_held.release()  # a head still held (a HEAD answer): out now
        if self.unanswered:
            self.unanswered.pop(0)
        super().on_response_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Armed only when a read ends inside a request's head. A head that arrives whole (as
        # nearly all do) never arms one: a uvloop timer set and cancelled is ~3 us.
        if self.in_head and not self.header_timer.armed and not self.transport.is_closing():
            self.header_timer.arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head = True

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.header_timer.disarm()
        gone = ClientGone()
        # The scope uvicorn is about to hand the app (uvicorn types it without our key).
        self.scope[CLIENT_GONE_KEY] = gone  # type: ignore[literal-required]
        self.unanswered.append(gone)
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.header_timer.disarm()
        unanswered, self.unanswered = self.unanswered, []
        for gone in unanswered:
            gone.fire()
        super().connection_lost(exc)

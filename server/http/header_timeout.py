"""``HeaderTimer``: a connection must send a request's headers within ``RGW_HEADER_TIMEOUT``.

An ASGI server bounds an idle keep-alive connection but not one that is opened and then sends
its request line and headers byte by byte, or not at all (slowloris): such sockets are held for
as long as their clients like. The timer is armed when a connection opens and when a read ends
inside a request's head, disarmed when the head is complete, and closes the connection when it
fires (nginx's ``client_header_timeout``). A body is bounded separately (``server/http/body.py``).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("rehearsal_gateway.server")


class HeaderTimer:
    """One connection's header deadline: ``arm``, ``disarm``; when late, the transport closes."""

    __slots__ = ("handle", "loop", "seconds", "transport")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transport: asyncio.BaseTransport, seconds: float
    ) -> None:
        self.loop = loop
        self.transport = transport
        self.seconds = seconds
        self.handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self.handle is not None

    def arm(self) -> None:
        self.handle = self.loop.call_later(self.seconds, self.late)

    def disarm(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def late(self) -> None:
        self.handle = None
        if not self.transport.is_closing():
            peer = self.transport.get_extra_info("peername")
            log.debug("closing %s: no complete request headers in %gs", peer, self.seconds)
            self.transport.close()

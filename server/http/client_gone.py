"""``ClientGone``: one request's "the client went away" signal, carried in its ASGI scope.

The gateway's protocol (``server/http/protocol.py``) puts one in each request's scope under
``CLIENT_GONE_KEY`` and fires it when the connection is lost before that request's answer is
complete; ``server/http/relay.py`` ``until_disconnect`` registers the task doing the request's
work, which is then cancelled (closing the engine connection, so the engine aborts the request).
An ASGI app otherwise learns of a disconnect only by reading ``receive``, which takes a watcher
task per request for the whole answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

CLIENT_GONE_KEY = "rehearsal_gateway.client_gone"


class ClientGone:
    """Cancels the tasks registered with it when ``fire`` is called (once is enough)."""

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

"""Reading a request body within the size limit and the body timeout (every route with a body).

Two ways a body may not arrive, neither of them the gateway's fault and neither a 500:

- the client leaves mid-upload (``http.disconnect``): counted in
  ``rehearsal_gateway_client_disconnects_total{stage="upload"}``, one debug line, and the
  request ends as a 499 that only metrics see (``ClientDisconnected``);
- the body stops short of its ``Content-Length`` or trickles: after ``RGW_BODY_TIMEOUT`` seconds
  the request is answered with a 408 envelope (``BodyTimeout``) and the connection closed, so a
  stalled upload is never held.
"""

from __future__ import annotations

import logging

from starlette.types import Receive, Scope

from ..errors import BodyTimeout, InvalidRequest, PayloadTooLarge
from ..telemetry.waits import deadline
from .relay import ClientDisconnected
from .state import STATE_KEY, GatewayState

log = logging.getLogger("rehearsal_gateway.server")


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes.

    On the bare ASGI ``scope`` and ``receive`` (a route passes its request's): Starlette's
    ``Request.body()`` knows neither the limit nor the timeout.
    """
    _check_declared(scope, limit)
    state: GatewayState = scope["state"][STATE_KEY]
    timeout = state.settings.body_timeout
    try:
        async with deadline(timeout):
            return await _read(receive, limit)
    except ClientDisconnected:
        state.metrics.client_disconnected("upload")
        log.debug("client left while uploading %s", scope["path"])
        raise
    except TimeoutError:
        state.metrics.client_disconnected("body_timeout")
        raise BodyTimeout(f"the request body did not arrive within {timeout:g}s") from None


def _check_declared(scope: Scope, limit: int) -> None:
    declared = None
    for name, value in scope["headers"]:
        if name == b"content-length":  # names come lowered
            declared = value
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequest("invalid Content-Length header")
        if int(declared) > limit:
            raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")


async def _read(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)

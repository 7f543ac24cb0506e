"""Reading a request body within the size limit and the body timeout (every route with a body).

Two ways a body may not arrive, neither of them the gateway's fault and neither a 500:

- the client leaves mid-upload (Starlette's ``ClientDisconnect``): counted in
  ``rehearsal_gateway_client_disconnects_total{stage="upload"}``, one debug line, and the
  request ends as a 499 that only metrics see (``ClientDisconnected``);
- the body stops short of its ``Content-Length`` or trickles: after ``RGW_BODY_TIMEOUT`` seconds
  the request is answered with a 408 envelope (``BodyTimeout``) and the connection closed, so a
  stalled upload is never held.
"""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect, Request

from server.errors import BodyTimeout, InvalidRequest, PayloadTooLarge
from server.http.relay import ClientDisconnected
from server.http.state import gateway_of
from server.telemetry.waits import deadline

log = logging.getLogger("rehearsal_gateway.server")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = dict(request.scope["headers"]).get(b"content-length")  # names come lowered
    if declared is not None:
        if not declared.isdigit():
            raise InvalidRequest("invalid Content-Length header")
        if int(declared) > limit:
            raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")
    state = gateway_of(request)
    timeout = state.settings.body_timeout
    try:
        async with deadline(timeout):
            return await _read(request, limit)
    except ClientDisconnect:
        state.metrics.client_disconnected("upload")
        log.debug("client left while uploading %s", request.url.path)
        raise ClientDisconnected from None
    except TimeoutError:
        state.metrics.client_disconnected("body_timeout")
        raise BodyTimeout(f"the request body did not arrive within {timeout:g}s") from None


async def _read(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)

"""The HTTP edge of fair use: every ``/v1/`` request takes its key's rate and concurrency slots.

Pure ASGI, inside ``ApiKeyMiddleware`` (the tenant is known) and around the route, so a
concurrency lease is held until the last byte of a streamed answer has gone, and freed however
the request ends. A refusal is the OpenAI 429 envelope with ``Retry-After``, sent before the body
is read. The checks themselves, and their failing open, are ``server/store/fair_use.py``.
"""

from __future__ import annotations

import secrets

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import RateLimited, error_status_and_body, log_fields
from ..telemetry.logs import ERROR_STATE_KEY
from .auth import DEFAULT_TENANT, TENANT_STATE_KEY
from .state import STATE_KEY, GatewayState


class FairUseMiddleware:
    """Admits or refuses each ``/v1/`` request by its key's limits (the lifespan's ``FairUse``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.get("state", {})
        gateway = state.get(STATE_KEY)
        fair_use = gateway.fair_use if isinstance(gateway, GatewayState) else None
        if fair_use is None or scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        tenant = str(state.get(TENANT_STATE_KEY, DEFAULT_TENANT))
        request_id = secrets.token_hex(8)
        try:
            leased = await fair_use.enter(tenant, request_id)
        except RateLimited as exc:
            state[ERROR_STATE_KEY] = log_fields(exc)
            await _refuse(send, exc)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            if leased:
                await fair_use.leave(tenant, request_id)


async def _refuse(send: Send, exc: RateLimited) -> None:
    status, headers, body = refusal(exc)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def refusal(exc: RateLimited) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The 429 answer to a request over its key's limits: status, head (with ``Retry-After``)
    and OpenAI error envelope."""
    status, body = error_status_and_body(exc)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(name.encode(), value.encode()) for name, value in exc.headers().items()]
    return status, headers, body
